//! A durable JetStream pull consumer as the consumer's source: checked at
//! start, acknowledged on a shared beat.

use std::fmt;
use std::time::Duration;

use async_nats::jetstream::{self, consumer, consumer::AckPolicy};
use async_nats::Client;
use bytes::Bytes;
use tokio::sync::watch;

use super::connect::connect_client;
use super::{NatsError, NatsSettings, PullStream};
use crate::delivery::DeliveryId;
use crate::ids::QueueId;
use crate::source::{AckBeat, AckOutcome, Source};
use crate::telemetry;

/// A durable JetStream pull consumer as the consumer's source.
///
/// Its acknowledgements wait for a shared beat (at most 2 ms) so that those
/// of deliveries committed close together go out in one write; credit goes
/// out at once, one pull request per grant.
#[derive(Debug, Clone)]
pub struct JetStreamSource {
    client: Client,
    pub(super) context: jetstream::Context,
    pub(super) stream: String,
    pub(super) consumer: String,
    pub(super) subject: String,
    queue: QueueId,
    ack_timeout: Duration,
    disconnects: watch::Receiver<u64>,
    /// The beat its acknowledgements leave on.
    beat: AckBeat,
}

/// What acknowledges one attempt of a JetStream message: its ack subject.
/// Shown redacted, like Orbit's lease proof.
#[derive(Clone)]
pub struct AckSubject(pub(super) async_nats::Subject);

impl fmt::Debug for AckSubject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AckSubject(<redacted>)")
    }
}

impl JetStreamSource {
    /// Connects to NATS and checks, before anything is fetched, that the
    /// stream and the durable pull consumer exist, that the consumer
    /// acknowledges explicitly and that its filter subject is the queue's
    /// subject. One attempt: [`NatsError::is_retryable`](crate::source::SourceError::is_retryable) says
    /// whether to try again.
    pub async fn connect(settings: &NatsSettings, timeout: Duration) -> Result<Self, NatsError> {
        let source = Self::unchecked(settings, timeout).await?;
        source.check().await?;
        Ok(source)
    }

    /// Connected, nothing asked of JetStream yet.
    pub(super) async fn unchecked(
        settings: &NatsSettings,
        timeout: Duration,
    ) -> Result<Self, NatsError> {
        let (client, disconnects) = connect_client(&settings.servers, timeout).await?;
        let mut context = jetstream::new(client.clone());
        context.set_timeout(timeout);
        Ok(Self {
            client,
            context,
            stream: settings.stream.clone(),
            consumer: settings.consumer.clone(),
            subject: settings.subject.clone(),
            queue: settings.queue_id.clone(),
            ack_timeout: timeout,
            disconnects,
            beat: AckBeat::new(),
        })
    }

    /// The stream.
    pub fn stream(&self) -> &str {
        &self.stream
    }

    /// The durable consumer.
    pub fn consumer(&self) -> &str {
        &self.consumer
    }

    /// Asks the server about the stream and the consumer (see
    /// [`connect`](Self::connect)).
    pub async fn check(&self) -> Result<(), NatsError> {
        self.checked().await.map(|_| ())
    }

    /// [`check`](Self::check), returning the attempts the consumer allows
    /// each message (its MaxDeliver), `None` for no limit.
    async fn checked(&self) -> Result<Option<u32>, NatsError> {
        let stream = self.stream_handle().await?;
        let info = self.consumer_info(&stream).await?;
        self.suitable(&info.config)?;
        // Asked at start and at every reopening: a stream that was closed
        // (an outage, the breaker) delivered nothing that could say it.
        telemetry::source_pending(info.num_pending);
        Ok(u32::try_from(info.config.max_deliver)
            .ok()
            .filter(|n| *n > 0))
    }

    /// Whether a consumer so configured can be consumed as the queue's
    /// (the part of [`check`](Self::check) after asking the server).
    pub(super) fn suitable(&self, config: &consumer::Config) -> Result<(), NatsError> {
        let unsuitable = |problem| NatsError::UnsuitableConsumer {
            stream: self.stream.clone(),
            consumer: self.consumer.clone(),
            problem,
        };
        if config.deliver_subject.is_some() {
            return Err(unsuitable("is a push consumer; create a pull consumer"));
        }
        if config.durable_name.is_none() {
            return Err(unsuitable(
                "is not durable: its leases would vanish with it; create a durable consumer",
            ));
        }
        if config.ack_policy != AckPolicy::Explicit {
            return Err(unsuitable(
                "does not acknowledge each message (ack policy must be explicit)",
            ));
        }
        if config.filter_subject != self.subject {
            return Err(NatsError::SubjectMismatch {
                stream: self.stream.clone(),
                consumer: self.consumer.clone(),
                queue: self.queue.clone(),
                expected: self.subject.clone(),
                actual: config.filter_subject.clone(),
            });
        }
        Ok(())
    }

    pub(super) async fn stream_handle(&self) -> Result<jetstream::stream::Stream, NatsError> {
        self.context
            .get_stream(&self.stream)
            .await
            .map_err(|e| match e.kind() {
                jetstream::context::GetStreamErrorKind::JetStream(js)
                    if js.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND =>
                {
                    self.unknown_stream()
                }
                _ => NatsError::JetStream(format!("stream {}: {e}", self.stream)),
            })
    }

    pub(super) async fn consumer_info(
        &self,
        stream: &jetstream::stream::Stream,
    ) -> Result<consumer::Info, NatsError> {
        use jetstream::context::ConsumerInfoErrorKind as Kind;
        stream
            .consumer_info(&self.consumer)
            .await
            .map_err(|e| match e.kind() {
                Kind::NotFound => NatsError::UnknownConsumer {
                    stream: self.stream.clone(),
                    consumer: self.consumer.clone(),
                },
                Kind::StreamNotFound => self.unknown_stream(),
                _ => NatsError::JetStream(format!(
                    "consumer {} of stream {}: {e}",
                    self.consumer, self.stream
                )),
            })
    }

    fn unknown_stream(&self) -> NatsError {
        NatsError::UnknownStream {
            stream: self.stream.clone(),
            consumer: self.consumer.clone(),
        }
    }
}

impl Source for JetStreamSource {
    type Proof = AckSubject;
    type Stream = PullStream;
    type Error = NatsError;

    fn subscription(&self) -> String {
        format!("stream {} consumer {}", self.stream, self.consumer)
    }

    fn system(&self) -> &'static str {
        "nats"
    }

    /// The subject the queue's events are published on.
    fn destination(&self) -> String {
        self.subject.clone()
    }

    async fn open(&self) -> Result<PullStream, NatsError> {
        // The consumer may have been deleted or changed since start-up.
        let attempts_allowed = self.checked().await?;
        let mut disconnects = self.disconnects.clone();
        disconnects.mark_unchanged();
        let next_subject = format!(
            "$JS.API.CONSUMER.MSG.NEXT.{}.{}",
            self.stream, self.consumer
        );
        Ok(PullStream::new(
            self.client.clone(),
            self.context.clone(),
            next_subject,
            disconnects,
            attempts_allowed,
        ))
    }

    async fn ack(&self, _id: &DeliveryId, proof: &AckSubject) -> Result<AckOutcome, NatsError> {
        self.beat.wait().await;
        let request = async_nats::Request::new()
            .payload(Bytes::from_static(b"+ACK"))
            .timeout(Some(self.ack_timeout));
        self.client
            .send_request(proof.0.clone(), request)
            .await
            .map_err(|e| NatsError::Ack(e.to_string()))?;
        // The server answers every +ACK, also one for a message already
        // acknowledged: it cannot say which, so every answer is "acked".
        Ok(AckOutcome::Acked)
    }

    async fn terminate(&self, _id: &DeliveryId, proof: &AckSubject) -> Result<bool, NatsError> {
        self.client
            .publish(proof.0.clone(), Bytes::from_static(b"+TERM"))
            .await
            .map_err(|e| NatsError::Ack(e.to_string()))?;
        Ok(true)
    }

    async fn release(&self, _id: &DeliveryId, proof: &AckSubject) -> Result<bool, NatsError> {
        self.client
            .publish(proof.0.clone(), Bytes::from_static(b"-NAK"))
            .await
            .map_err(|e| NatsError::Ack(e.to_string()))?;
        // Called at shutdown: the process may exit right after.
        self.client
            .flush()
            .await
            .map_err(|e| NatsError::Ack(e.to_string()))?;
        Ok(true)
    }
}
