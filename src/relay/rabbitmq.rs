//! The RabbitMQ target: a publish of the effect's stored bytes to one
//! queue through the default exchange, on a channel in confirm mode, sent
//! once the server confirmed it.
//!
//! Each attempt carries
//!
//! - `message_id`: the effect's id, the same on every attempt: the one
//!   stable identity by which whoever consumes the queue finds a second
//!   copy a duplicate (RabbitMQ keeps no window of ids, so an attempt
//!   whose confirm was lost, or a relay that died after the confirm and
//!   before its record, publishes a second copy);
//! - the effect's stored headers as message headers (`content-type` also
//!   as the `content_type` property), and `traceparent` when the delivery
//!   came with one;
//! - persistence (delivery mode 2), so that a confirmed message outlives a
//!   restart of a node that holds a durable queue.
//!
//! Answers: a confirm (`basic.ack`) is [`Sent`], kept as `ack`. Everything
//! else is tried again under the same id: no confirm in time (`timeout`),
//! a connection that broke or could not be opened (`connection`), a
//! refusal (`nack`), and a message no queue took (`unroutable`: the queue
//! is not there yet), which an operator mends by declaring the queue.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use amqprs::{BasicProperties, FieldName, FieldTable, FieldValue};
use tokio::sync::Mutex;
use tower::Service;

use super::target::{Attempt, Failed, Sent};
use crate::rabbitmq::publish::{queue_ready, Publishing, Unsent};
use crate::rabbitmq::{AmqpUrl, RabbitError};

/// The RabbitMQ target: publishes each effect to one queue, under its id.
/// Cheap to clone: the clones share one connection, opened at the first
/// attempt and again after one that failed, and publish one message at a
/// time on it.
#[derive(Clone)]
pub struct RabbitMq {
    queue: Arc<str>,
    timeout: Duration,
    publishing: Arc<Mutex<Publishing>>,
}

impl fmt::Debug for RabbitMq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RabbitMq")
            .field("queue", &&*self.queue)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl RabbitMq {
    /// A target that publishes to `queue` on the server at `url`, each
    /// attempt given 5 s for its confirm. Nothing is connected yet.
    pub fn new(url: AmqpUrl, queue: &str) -> Self {
        Self {
            queue: Arc::from(queue),
            timeout: Duration::from_secs(5),
            publishing: Arc::new(Mutex::new(Publishing::new(url, "result-inbox relay"))),
        }
    }

    /// The same target, each attempt given `timeout` (to connect, and for
    /// its confirm); keep it below the relay's lease.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The queue it publishes to.
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// Whether the queue is there to publish to: the messages ready in it,
    /// asked on a connection of its own (closed after), or why it cannot
    /// be said, [`RabbitError::UnknownQueue`] when there is no such queue.
    /// An effect sent to a queue that is not there is tried again until
    /// one is declared: this says so before the first.
    pub async fn check(&self) -> Result<u32, RabbitError> {
        // The lock only long enough to read where: a check never holds up
        // a publish.
        let (url, name) = {
            let publishing = self.publishing.lock().await;
            let (url, name) = publishing.server();
            (url.clone(), name)
        };
        queue_ready(&url, name, &self.queue, self.timeout).await
    }

    /// Closes the shared connection; the next attempt opens another.
    pub async fn close(&self) {
        self.publishing.lock().await.close().await;
    }

    /// The properties of `attempt`'s message.
    fn properties(attempt: &Attempt) -> BasicProperties {
        let effect = &attempt.effect;
        let mut headers = FieldTable::new();
        let mut properties = BasicProperties::default();
        for (name, value) in effect.headers.iter() {
            if name.eq_ignore_ascii_case("content-type") {
                properties.with_content_type(value);
            }
            if let Ok(name) = FieldName::try_from(name) {
                headers.insert(name, FieldValue::from(value.to_owned()));
            }
        }
        if let Some(traceparent) = effect.traceparent.as_deref() {
            if let Ok(name) = FieldName::try_from("traceparent") {
                headers.insert(name, FieldValue::from(traceparent.to_owned()));
            }
        }
        properties
            .with_message_id(effect.id.as_str())
            .with_persistence(true)
            .with_headers(headers);
        properties
    }
}

/// What an unconfirmed publish makes of the attempt: tried again, always.
fn unsent(why: Unsent) -> Failed {
    Failed::retry(match why {
        Unsent::Unroutable => "unroutable",
        Unsent::Nacked => "nack",
        Unsent::Unconfirmed => "timeout",
        Unsent::Connection => "connection",
    })
}

impl Service<Attempt> for RabbitMq {
    type Response = Sent;
    type Error = Failed;
    type Future = Pin<Box<dyn Future<Output = Result<Sent, Failed>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Failed>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, attempt: Attempt) -> Self::Future {
        let properties = Self::properties(&attempt);
        let body = attempt.effect.body.to_vec();
        let target = self.clone();
        Box::pin(async move {
            let mut publishing = target.publishing.lock().await;
            match publishing
                .publish(&target.queue, &properties, body, target.timeout)
                .await
            {
                Ok(()) => Ok(Sent::new("ack")),
                Err(not_sent) => {
                    tracing::debug!(error = %not_sent.error, "RabbitMQ did not confirm an effect");
                    Err(unsent(not_sent.why))
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::relay::Disposition;

    #[test]
    fn every_publish_that_was_not_confirmed_is_tried_again_never_dead() {
        for (why, result) in [
            (Unsent::Unroutable, "unroutable"),
            (Unsent::Nacked, "nack"),
            (Unsent::Unconfirmed, "timeout"),
            (Unsent::Connection, "connection"),
        ] {
            let failed = unsent(why);
            assert_eq!(failed.disposition(), Disposition::Retry);
            assert_eq!(failed.result(), result);
        }
    }
}
