//! Where `receiver consume` takes its deliveries from, and each source
//! checked before the first credit.

use result_inbox::consumer::ConsumerOptions;
use result_inbox::ids::{QueueId, SubscriptionId};
use result_inbox::nats::{JetStreamSource, NatsError, NatsSettings};
use result_inbox::orbit::{OrbitClient, OrbitSource, Scope};
use result_inbox::retry::until_answered;
use result_inbox::source::SourceError;
use tracing::info;

use super::ConsumeError;
use crate::check::{self, Problem};
use crate::commands::BROKER_CALL_TIMEOUT;

/// Where `receiver consume` takes its deliveries from.
#[derive(Debug, Clone)]
pub(super) enum SourceConfig {
    /// An Orbit subscription's WebSocket stream.
    Orbit {
        /// Orbit, with the token to use there.
        client: Box<OrbitClient>,
        /// The subscription to consume.
        subscription: SubscriptionId,
    },
    /// A NATS JetStream durable pull consumer.
    Nats {
        /// The server, stream, consumer, subject and queue.
        settings: NatsSettings,
    },
    /// A RabbitMQ quorum queue.
    #[cfg(feature = "rabbitmq")]
    Rabbitmq {
        /// The server, the queue and the queue id.
        settings: result_inbox::rabbitmq::RabbitSettings,
    },
}

/// A JetStream durable consumer, once NATS answers and the stream and the
/// consumer check out; waiting for a server that is not up yet.
pub(super) async fn nats(
    settings: &NatsSettings,
    options: &ConsumerOptions,
) -> Result<JetStreamSource, ConsumeError> {
    let source = until_answered(
        options.backoff(),
        "NATS",
        |e: &NatsError| e.is_retryable(),
        || JetStreamSource::connect(settings, BROKER_CALL_TIMEOUT),
    )
    .await
    .map_err(|e| ConsumeError::Consumer(e.into()))?;
    info!(url = %settings.shown_url(), stream = source.stream(), consumer = source.consumer(), subject = %settings.subject, "stream and durable consumer checked");
    Ok(source)
}

/// Orbit before the first credit: the token's scopes, waiting for an Orbit
/// that is not up yet, the subscription's queue.
pub(super) async fn orbit(
    client: OrbitClient,
    queue_id: &QueueId,
    subscription: &SubscriptionId,
    options: &ConsumerOptions,
) -> Result<OrbitSource, ConsumeError> {
    until_answered(options.backoff(), "Orbit", Problem::is_transient, || {
        check::orbit_access(&client, &Scope::CONSUME)
    })
    .await
    .map_err(ConsumeError::Check)?;
    OrbitSource::connect(client, subscription.clone(), queue_id)
        .await
        .map_err(|e| ConsumeError::Consumer(e.into()))
}
