//! Where `receiver consume` takes its deliveries from, and each source
//! checked before the first credit.

use result_inbox::consumer::ConsumerOptions;
use result_inbox::ids::{QueueId, SubscriptionId};
#[cfg(feature = "nats")]
use result_inbox::nats::{JetStreamSource, NatsError, NatsSettings};
use result_inbox::orbit::{OrbitClient, OrbitSource, Scope};
use result_inbox::retry::until_answered;
#[cfg(feature = "nats")]
use result_inbox::source::SourceError;

use super::ConsumeError;
use crate::args::SourceKind;
use crate::check::{self, Problem};
use crate::notify::NotifyConfig;

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
    #[cfg(feature = "nats")]
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

impl SourceConfig {
    /// Unless `notify` publishes to where this source takes its deliveries
    /// from (or, on RabbitMQ, to its dead-letter queue).
    #[cfg_attr(
        not(any(feature = "nats", feature = "rabbitmq")),
        allow(unused_variables)
    )]
    pub(super) fn refuse_notifying_itself(&self, notify: &NotifyConfig) -> Result<(), String> {
        match self {
            SourceConfig::Orbit { .. } => Ok(()),
            #[cfg(feature = "nats")]
            SourceConfig::Nats { settings } => notify.refuse_consumed(&settings.subject),
            #[cfg(feature = "rabbitmq")]
            SourceConfig::Rabbitmq { settings } => notify.refuse_consumed_queue(&settings.queue),
        }
    }
}

/// How many deliveries `source` holds beyond the busy slots unless
/// RECEIVER_PREFETCH says: each broker's own default, the consumer's for
/// Orbit (and for a broker this receiver was built without, which it then
/// refuses).
pub(super) fn default_prefetch(source: SourceKind) -> u32 {
    match source {
        #[cfg(feature = "nats")]
        SourceKind::Nats => result_inbox::nats::DEFAULT_PREFETCH,
        #[cfg(feature = "rabbitmq")]
        SourceKind::Rabbitmq => result_inbox::rabbitmq::DEFAULT_PREFETCH,
        _ => ConsumerOptions::default().prefetch,
    }
}

/// A JetStream durable consumer, once NATS answers and the stream and the
/// consumer check out; waiting for a server that is not up yet.
#[cfg(feature = "nats")]
pub(super) async fn nats(
    settings: &NatsSettings,
    options: &ConsumerOptions,
) -> Result<JetStreamSource, ConsumeError> {
    let source = until_answered(
        options.backoff(),
        "NATS",
        |e: &NatsError| e.is_retryable(),
        || JetStreamSource::connect(settings, crate::commands::BROKER_CALL_TIMEOUT),
    )
    .await
    .map_err(|e| ConsumeError::Consumer(e.into()))?;
    tracing::info!(url = %settings.shown_url(), stream = source.stream(), consumer = source.consumer(), subject = %settings.subject, "stream and durable consumer checked");
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
