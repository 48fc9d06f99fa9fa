//! `receiver subscribe --source rabbitmq`: the quorum queue a receiver
//! consumes and the dead-letter queue beside it, declared or found as
//! declared.

use std::time::Duration;

use amqprs::channel::QueueDeclareArguments;
use amqprs::{FieldName, FieldTable, FieldValue};

use super::connect::open;
use super::{dead_letter_queue, RabbitError, RabbitSettings};

/// What `receiver subscribe --source rabbitmq` declares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueSpec {
    /// The returns a message may take (`basic.reject` with requeue, a
    /// closed channel) before the queue dead-letters it
    /// (`x-delivery-limit`).
    pub delivery_limit: u32,
}

impl Default for QueueSpec {
    /// RabbitMQ 4's own default limit.
    fn default() -> Self {
        Self { delivery_limit: 20 }
    }
}

/// What [`provision`] found or made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provisioned {
    /// The queue.
    pub queue: String,
    /// Its dead-letter queue.
    pub dead_letter_queue: String,
    /// Messages ready in the queue.
    pub ready: u32,
}

/// Declares the dead-letter queue, then the queue: a durable quorum queue
/// with the delivery limit, dead-lettering at least once to the
/// dead-letter queue. Declaring is idempotent: a queue that exists as
/// declared is left as it is; one that exists otherwise (a classic queue,
/// another limit, no dead-letter queue) is refused with the server's words
/// naming the difference, and nothing is changed.
pub async fn provision(
    settings: &RabbitSettings,
    spec: QueueSpec,
    timeout: Duration,
) -> Result<Provisioned, RabbitError> {
    let link = open(&settings.url, "result-inbox subscribe", timeout).await?;
    let dead = settings.dead_letter_queue();
    let declared = async {
        let mut failed = QueueDeclareArguments::durable_client_named(&dead);
        failed.arguments(quorum());
        declare(&link, &dead, failed.finish(), timeout).await?;
        let mut queue = QueueDeclareArguments::durable_client_named(&settings.queue);
        queue.arguments(queue_arguments(&settings.queue, spec));
        declare(&link, &settings.queue, queue.finish(), timeout).await
    }
    .await;
    link.close().await;
    Ok(Provisioned {
        queue: settings.queue.clone(),
        dead_letter_queue: dead,
        ready: declared?,
    })
}

async fn declare(
    link: &super::connect::Link,
    queue: &str,
    args: QueueDeclareArguments,
    timeout: Duration,
) -> Result<u32, RabbitError> {
    let answer = tokio::time::timeout(timeout, link.channel.queue_declare(args)).await;
    match answer {
        Ok(Ok(declared)) => Ok(declared.map_or(0, |(_, ready, _)| ready)),
        Ok(Err(e)) => Err(match link.error(&format!("declaring queue {queue}"), &e) {
            RabbitError::Server(text) if text.contains("406") && text.contains("inequivalent") => {
                RabbitError::UnsuitableQueue {
                    queue: queue.to_owned(),
                    problem: format!(
                        "exists, but not as the durable quorum queue with a delivery limit and a dead-letter queue that the receiver needs ({text}); delete it or choose another AMQP_QUEUE, or declare it with the arguments of docs/rabbitmq.md"
                    ),
                }
            }
            other => other,
        }),
        Err(_) => Err(RabbitError::Disconnected(format!(
            "declaring queue {queue}: no answer within {timeout:?}"
        ))),
    }
}

/// The arguments of the receiver's queue, as [`provision`] declares it.
pub fn queue_arguments(queue: &str, spec: QueueSpec) -> FieldTable {
    let mut args = quorum();
    put(
        &mut args,
        "x-delivery-limit",
        FieldValue::l(spec.delivery_limit.into()),
    );
    // The default exchange routes by queue name: no exchange to keep.
    put(&mut args, "x-dead-letter-exchange", string(""));
    put(
        &mut args,
        "x-dead-letter-routing-key",
        string(&dead_letter_queue(queue)),
    );
    // Dead-lettered at least once: a message moves only once the
    // dead-letter queue has confirmed it, which needs publishers to be
    // refused (not the oldest dropped) when the queue is full.
    put(&mut args, "x-dead-letter-strategy", string("at-least-once"));
    put(&mut args, "x-overflow", string("reject-publish"));
    args
}

fn quorum() -> FieldTable {
    let mut args = FieldTable::new();
    put(&mut args, "x-queue-type", string("quorum"));
    args
}

fn put(args: &mut FieldTable, name: &str, value: FieldValue) {
    // Every name here is a short ASCII literal.
    if let Ok(name) = FieldName::try_from(name) {
        args.insert(name, value);
    }
}

fn string(value: &str) -> FieldValue {
    FieldValue::from(value.to_owned())
}
