//! `--source rabbitmq` in the binary: the AMQP_* settings, and the
//! checked source `consume` consumes.

use std::time::Duration;

use tracing::info;

use result_inbox::consumer::{ConsumerError, ConsumerOptions};
use result_inbox::rabbitmq::{AmqpUrl, RabbitError, RabbitSettings, RabbitSource};
use result_inbox::retry::{until_answered, Backoff};
use result_inbox::source::SourceError;

use crate::args::{AmqpServerArgs, RabbitArgs};
use crate::config::{required_queue_id, ConfigError};

impl AmqpServerArgs {
    /// The server, read: set, and an address the client can use.
    pub(crate) fn url(self) -> Result<AmqpUrl, ConfigError> {
        let url = self.amqp_url.ok_or(ConfigError::Unset {
            variable: "AMQP_URL",
            what: "the RabbitMQ server, amqp://user:password@host:5672/vhost",
        })?;
        AmqpUrl::parse(&url).map_err(|e| ConfigError::invalid("AMQP_URL", e.to_string()))
    }
}

impl RabbitArgs {
    /// Resolves the settings for the queue `queue_id` (`ORBIT_QUEUE_ID`);
    /// every error names the variable to fix.
    pub(crate) fn settings(self, queue_id: Option<String>) -> Result<RabbitSettings, ConfigError> {
        let url = self.server.url()?;
        let queue_id = required_queue_id(
            queue_id,
            "the queue whose events the RabbitMQ queue carries (32 hex)",
        )?;
        let queue = self
            .amqp_queue
            .unwrap_or_else(|| RabbitSettings::default_queue(&queue_id));
        let mut settings = RabbitSettings::new(url, queue, queue_id);
        if let Some(pause) = self.amqp_retry_after {
            settings.retry_after = pause;
        }
        Ok(settings)
    }
}

/// The prefetch window is the consumer's credit: every slot and every held
/// delivery.
pub(crate) fn with_window(
    mut settings: RabbitSettings,
    consumer: &ConsumerOptions,
) -> RabbitSettings {
    settings.window =
        u16::try_from(consumer.concurrency.saturating_add(consumer.prefetch)).unwrap_or(u16::MAX);
    settings
}

/// The source, once RabbitMQ answers and the queue exists; waiting for a
/// server that is not up yet.
pub(crate) async fn source(
    settings: &RabbitSettings,
    backoff: Backoff,
    timeout: Duration,
) -> Result<RabbitSource, ConsumerError> {
    let source = until_answered(
        backoff,
        "RabbitMQ",
        |e: &RabbitError| e.is_retryable(),
        || RabbitSource::connect(settings, timeout),
    )
    .await
    .map_err(ConsumerError::from)?;
    info!(url = %settings.url.shown(), queue = source.queue_name(), prefetch = settings.window, retry_after_ms = settings.retry_after.as_millis() as u64, "queue checked");
    Ok(source)
}
