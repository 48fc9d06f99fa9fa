//! Orbit's subscription stream as a [`Source`] of the consumer: WebSocket
//! deliveries with credit, ACK over HTTP with the attempt's lease proof.

use super::{DeliveryStream, LeaseProof, OrbitClient, OrbitError, StreamMessage};
use crate::delivery::DeliveryId;
use crate::ids::{QueueId, SubscriptionId};
use crate::retry::{self, Backoff};
use crate::source::{AckOutcome, Incoming, LeaseStream, Source};

/// One subscription of one Orbit deployment, as the consumer's source.
#[derive(Debug, Clone)]
pub struct OrbitSource {
    client: OrbitClient,
    subscription: SubscriptionId,
    /// The subscription's queue, once [`connect`](Self::connect) checked it.
    queue: Option<QueueId>,
}

impl OrbitSource {
    /// The subscription `subscription`, reached with `client`, unchecked
    /// ([`connect`](Self::connect) checks it first).
    pub fn new(client: OrbitClient, subscription: SubscriptionId) -> Self {
        Self {
            client,
            subscription,
            queue: None,
        }
    }

    /// The subscription, checked before anything is leased: it must exist,
    /// be readable with this token and be bound to `expected_queue`.
    ///
    /// An Orbit that cannot be reached yet (connection refused or reset,
    /// time-out, 5xx) is waited for with backoff and a warning per attempt;
    /// a permanent answer (401, 403, 404, another queue) returns at once.
    /// Drop the future to stop waiting.
    pub async fn connect(
        client: OrbitClient,
        subscription: SubscriptionId,
        expected_queue: &QueueId,
    ) -> Result<Self, OrbitError> {
        let mut source = Self::new(client, subscription);
        retry::until_answered(
            Backoff::default(),
            "Orbit",
            OrbitError::is_retryable,
            || source.check(expected_queue),
        )
        .await?;
        source.queue = Some(expected_queue.clone());
        Ok(source)
    }

    /// Asks Orbit once whether the subscription can be consumed for
    /// `expected_queue` ([`connect`](Self::connect) asks until Orbit
    /// answers; `receiver check` asks once).
    pub async fn check(&self, expected_queue: &QueueId) -> Result<(), OrbitError> {
        let subscription = &self.subscription;
        let found = match self.client.subscription(subscription).await {
            Ok(found) => found,
            Err(e) if e.code() == Some("wrong_queue") => {
                return Err(OrbitError::OtherQueue {
                    subscription: subscription.clone(),
                    expected: expected_queue.clone(),
                })
            }
            Err(e) if e.code() == Some("subscription_not_found") => {
                return Err(OrbitError::UnknownSubscription {
                    subscription: subscription.clone(),
                })
            }
            Err(e) => return Err(e),
        };
        if &found.queue_id != expected_queue {
            return Err(OrbitError::QueueMismatch {
                subscription: subscription.clone(),
                expected: expected_queue.clone(),
                actual: found.queue_id,
            });
        }
        Ok(())
    }

    /// The subscription.
    pub fn subscription(&self) -> &SubscriptionId {
        &self.subscription
    }

    /// The queue the subscription is bound to, as [`connect`](Self::connect)
    /// found it (`None` for a source made with [`new`](Self::new)).
    pub fn queue(&self) -> Option<&QueueId> {
        self.queue.as_ref()
    }
}

impl Source for OrbitSource {
    type Proof = LeaseProof;
    type Stream = DeliveryStream;
    type Error = OrbitError;

    fn subscription(&self) -> String {
        self.subscription.to_string()
    }

    fn queue(&self) -> Option<&QueueId> {
        self.queue.as_ref()
    }

    fn system(&self) -> &'static str {
        "orbit"
    }

    async fn open(&self) -> Result<DeliveryStream, OrbitError> {
        self.client.open_stream(&self.subscription).await
    }

    async fn ack(&self, id: &DeliveryId, proof: &LeaseProof) -> Result<AckOutcome, OrbitError> {
        self.client.ack(id, proof).await
    }
}

impl LeaseStream for DeliveryStream {
    type Proof = LeaseProof;
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
