//! Orbit's subscription stream as a [`Source`] of the consumer: WebSocket
//! deliveries with credit, ACK over HTTP with the attempt's lease proof.

use crate::consumer::{AckOutcome, Incoming, LeaseStream, Source, SourceError};
use crate::delivery::{DeliveryId, LeaseProof};
use crate::ids::SubscriptionId;

use super::{DeliveryStream, OrbitClient, OrbitError, StreamMessage};

/// One subscription of one Orbit deployment, as the consumer's source.
#[derive(Debug, Clone)]
pub struct OrbitSource {
    client: OrbitClient,
    subscription: SubscriptionId,
}

impl OrbitSource {
    /// The subscription `subscription`, reached with `client`.
    pub fn new(client: OrbitClient, subscription: SubscriptionId) -> Self {
        Self {
            client,
            subscription,
        }
    }

    /// The subscription.
    pub fn subscription(&self) -> &SubscriptionId {
        &self.subscription
    }
}

impl SourceError for OrbitError {
    fn is_retryable(&self) -> bool {
        OrbitError::is_retryable(self)
    }
}

impl Source for OrbitSource {
    type Receipt = LeaseProof;
    type Stream = DeliveryStream;
    type Error = OrbitError;

    fn subscription(&self) -> String {
        self.subscription.to_string()
    }

    async fn open(&self) -> Result<DeliveryStream, OrbitError> {
        self.client.open_stream(&self.subscription).await
    }

    async fn ack(&self, id: &DeliveryId, proof: &LeaseProof) -> Result<AckOutcome, OrbitError> {
        self.client.ack(id, proof).await
    }
}

impl LeaseStream for DeliveryStream {
    type Receipt = LeaseProof;
    type Error = OrbitError;

    async fn grant(&mut self, n: u32) -> Result<(), OrbitError> {
        DeliveryStream::grant(self, n).await
    }

    async fn next(&mut self) -> Option<Result<Incoming<LeaseProof>, OrbitError>> {
        Some(self.next_message().await?.map(|message| match message {
            StreamMessage::Delivery(delivery, proof) => Incoming::Delivery(delivery, proof),
            StreamMessage::Keepalive => Incoming::Keepalive,
            StreamMessage::Error { code } => Incoming::Notice(code),
        }))
    }

    async fn close(self) {
        DeliveryStream::close(self).await
    }
}
