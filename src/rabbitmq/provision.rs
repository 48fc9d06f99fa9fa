//! `receiver subscribe --source rabbitmq`: the quorum queue a receiver
//! consumes and the dead-letter queue beside it, declared or found as
//! declared.

use std::time::Duration;

use amqprs::channel::QueueDeclareArguments;
use amqprs::{FieldName, FieldTable, FieldValue};

use super::connect::{described, open, Link};
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
    /// Whether this call declared it (`false`: it existed, and was left as
    /// it is).
    pub created: bool,
    /// Its delivery limit.
    pub delivery_limit: i64,
    /// Its dead-letter queue.
    pub dead_letter_queue: String,
    /// Messages ready in the queue.
    pub ready: u32,
}

/// Declares the dead-letter queue, then the queue, when it does not exist:
/// a durable quorum queue with the delivery limit, dead-lettering at least
/// once to the dead-letter queue. A queue that exists is left as it is
/// when it is a quorum queue with a delivery limit and a dead-letter
/// exchange, whatever its limit; otherwise it is refused, naming what it
/// lacks, and nothing is changed.
pub async fn provision(
    settings: &RabbitSettings,
    spec: QueueSpec,
    timeout: Duration,
) -> Result<Provisioned, RabbitError> {
    let link = open(&settings.url, "result-inbox subscribe", timeout).await?;
    let provisioned = provision_on(&link, settings, spec, timeout).await;
    link.close().await;
    provisioned
}

async fn provision_on(
    link: &Link,
    settings: &RabbitSettings,
    spec: QueueSpec,
    timeout: Duration,
) -> Result<Provisioned, RabbitError> {
    let dead = settings.dead_letter_queue();
    if let Some(ready) = existing(link, &settings.queue, timeout).await? {
        let found = suitable(link, &settings.queue, timeout).await?;
        return Ok(Provisioned {
            queue: settings.queue.clone(),
            created: false,
            delivery_limit: found.delivery_limit.unwrap_or_default(),
            dead_letter_queue: found
                .dead_letter_routing_key
                .unwrap_or_else(|| dead.clone()),
            ready,
        });
    }
    let mut failed = QueueDeclareArguments::durable_client_named(&dead);
    failed.arguments(quorum());
    declare(link, &dead, failed.finish(), timeout).await?;
    let mut queue = QueueDeclareArguments::durable_client_named(&settings.queue);
    queue.arguments(queue_arguments(&settings.queue, spec));
    let ready = declare(link, &settings.queue, queue.finish(), timeout).await?;
    Ok(Provisioned {
        queue: settings.queue.clone(),
        created: true,
        delivery_limit: spec.delivery_limit.into(),
        dead_letter_queue: dead,
        ready,
    })
}

/// The messages ready in `queue`, or `None` when there is no such queue
/// (a passive declare).
pub(super) async fn existing(
    link: &Link,
    queue: &str,
    timeout: Duration,
) -> Result<Option<u32>, RabbitError> {
    let passive = QueueDeclareArguments::new(queue).passive(true).finish();
    match declared(link, queue, passive, timeout).await {
        Ok(ready) => Ok(Some(ready)),
        Err(RabbitError::Server(text)) if text.contains("404") => Ok(None),
        Err(e) => Err(e),
    }
}

/// The messages ready in `queue`, which must be there:
/// [`RabbitError::UnknownQueue`] (in `vhost`) when it is not.
pub(super) async fn required(
    link: &Link,
    queue: &str,
    vhost: &str,
    timeout: Duration,
) -> Result<u32, RabbitError> {
    existing(link, queue, timeout)
        .await?
        .ok_or_else(|| RabbitError::UnknownQueue {
            queue: queue.to_owned(),
            vhost: vhost.to_owned(),
        })
}

/// Declares `args` of `queue` on a channel of its own, since a refusal
/// closes the channel it came on: the messages ready, or the server's
/// refusal in its own words.
async fn declared(
    link: &Link,
    queue: &str,
    args: QueueDeclareArguments,
    timeout: Duration,
) -> Result<u32, RabbitError> {
    let (channel, words) = link.another_channel(timeout).await?;
    match tokio::time::timeout(timeout, channel.queue_declare(args)).await {
        Ok(Ok(declared)) => {
            let _ = channel.close().await;
            Ok(declared.map_or(0, |(_, ready, _)| ready))
        }
        Ok(Err(e)) => Err(described(
            &words,
            channel.is_open(),
            &format!("declaring queue {queue}"),
            &e,
        )),
        Err(_) => Err(RabbitError::Disconnected(format!(
            "declaring queue {queue}: no answer within {timeout:?}"
        ))),
    }
}

/// `queue`'s arguments, or why the receiver cannot consume it.
pub(super) async fn suitable(
    link: &Link,
    queue: &str,
    timeout: Duration,
) -> Result<QueueArguments, RabbitError> {
    let found = arguments(link, queue, timeout).await?;
    match found.unsuitable() {
        Some(problem) => Err(RabbitError::UnsuitableQueue {
            queue: queue.to_owned(),
            problem: format!("{problem}; declare it as docs/rabbitmq.md says (receiver subscribe --source rabbitmq declares a missing one), or choose another AMQP_QUEUE"),
        }),
        None => Ok(found),
    }
}

async fn declare(
    link: &Link,
    queue: &str,
    args: QueueDeclareArguments,
    timeout: Duration,
) -> Result<u32, RabbitError> {
    declared(link, queue, args, timeout).await.map_err(|e| match e {
        RabbitError::Server(text) if text.contains("406") && text.contains("inequivalent") => {
            RabbitError::UnsuitableQueue {
                queue: queue.to_owned(),
                problem: format!(
                    "exists, but not as the durable quorum queue with a delivery limit and a dead-letter queue that the receiver needs ({text}); delete it or choose another AMQP_QUEUE, or declare it with the arguments of docs/rabbitmq.md"
                ),
            }
        }
        other => other,
    })
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

/// A queue's arguments as the server holds them, for those the receiver
/// declares: read by declaring the queue with what is known so far, each
/// refusal naming one argument's current value, until the server takes
/// the declaration as it is (which then changes nothing).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueArguments {
    /// `x-queue-type`: `classic` when the queue was declared without one.
    pub queue_type: String,
    /// `x-delivery-limit`, if any.
    pub delivery_limit: Option<i64>,
    /// `x-dead-letter-exchange` (`""`: the default exchange), if any.
    pub dead_letter_exchange: Option<String>,
    /// `x-dead-letter-routing-key`, if any.
    pub dead_letter_routing_key: Option<String>,
}

impl QueueArguments {
    /// What keeps the receiver from consuming the queue without losing or
    /// endlessly retrying a delivery, if anything.
    pub fn unsuitable(&self) -> Option<String> {
        if self.queue_type != "quorum" {
            return Some(format!(
                "is a {} queue: the receiver needs a quorum queue, which counts each message's deliveries and dead-letters it at its limit",
                self.queue_type
            ));
        }
        if self.delivery_limit.is_none() {
            return Some(
                "has no x-delivery-limit: a message that always fails would come back forever"
                    .to_owned(),
            );
        }
        if self.dead_letter_exchange.is_none() {
            return Some(
                "has no x-dead-letter-exchange: a message at its delivery limit would be dropped, not kept for replay"
                    .to_owned(),
            );
        }
        None
    }
}

/// One refusal of a declaration: the argument it names and its current
/// value (`None`: the queue has none).
fn inequivalent(text: &str) -> Option<(String, Option<String>)> {
    let rest = &text[text.find("inequivalent arg '")? + "inequivalent arg '".len()..];
    let (arg, rest) = rest.split_once('\'')?;
    let current = rest.split("but current is ").nth(1)?;
    let current = current.strip_prefix("the value ").unwrap_or(current);
    let value = if current.starts_with("none") {
        None
    } else {
        let quoted = current.strip_prefix('\'')?;
        Some(quoted[..quoted.find('\'')?].to_owned())
    };
    Some((arg.to_owned(), value))
}

/// The arguments a declaration carries, as the server spells each type.
fn typed(arg: &str, value: &str) -> FieldValue {
    match value.parse::<i64>() {
        Ok(n) if arg != "x-dead-letter-exchange" && arg != "x-dead-letter-routing-key" => {
            FieldValue::l(n)
        }
        _ => string(value),
    }
}

/// Reads `queue`'s arguments (see [`QueueArguments`]) on `link`, which must
/// know the queue exists: a declaration of a missing queue would create it.
pub(super) async fn arguments(
    link: &Link,
    queue: &str,
    timeout: Duration,
) -> Result<QueueArguments, RabbitError> {
    let mut known: Vec<(String, Option<String>)> = Vec::new();
    // Each round learns one argument; the receiver's queue has six.
    for _ in 0..12 {
        let mut args = FieldTable::new();
        for (name, value) in &known {
            if let Some(value) = value {
                put(&mut args, name, typed(name, value));
            }
        }
        let mut declare = QueueDeclareArguments::durable_client_named(queue);
        declare.arguments(args);
        let refused = match declared(link, queue, declare.finish(), timeout).await {
            Ok(_) => {
                let value = |name: &str| {
                    known
                        .iter()
                        .find(|(n, _)| n == name)
                        .and_then(|(_, v)| v.clone())
                };
                return Ok(QueueArguments {
                    queue_type: value("x-queue-type").unwrap_or_else(|| "classic".to_owned()),
                    delivery_limit: value("x-delivery-limit").and_then(|v| v.parse().ok()),
                    dead_letter_exchange: value("x-dead-letter-exchange"),
                    dead_letter_routing_key: value("x-dead-letter-routing-key"),
                });
            }
            Err(refused) => refused,
        };
        let RabbitError::Server(text) = &refused else {
            return Err(refused);
        };
        let Some((arg, value)) = inequivalent(text) else {
            return Err(refused);
        };
        if known.iter().any(|(n, v)| *n == arg && *v == value) {
            return Err(refused);
        }
        known.retain(|(n, _)| *n != arg);
        known.push((arg, value));
    }
    Err(RabbitError::Server(format!(
        "reading queue {queue}: its arguments did not settle"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_the_argument_and_its_current_value_in_each_of_the_server_s_forms() {
        let said = |rest: &str| format!("406 PRECONDITION_FAILED - inequivalent arg {rest}");
        assert_eq!(
            inequivalent(&said("'x-queue-type' for queue 'q' in vhost '/': received 'quorum' but current is 'classic'")),
            Some(("x-queue-type".into(), Some("classic".into())))
        );
        assert_eq!(
            inequivalent(&said(
                "'x-delivery-limit' for queue 'q' in vhost '/': received '20' but current is '3'"
            )),
            Some(("x-delivery-limit".into(), Some("3".into())))
        );
        assert_eq!(
            inequivalent(&said("'x-dead-letter-exchange' for queue 'q' in vhost '/': received the value '' of type 'longstr' but current is none")),
            Some(("x-dead-letter-exchange".into(), None))
        );
        assert_eq!(
            inequivalent(&said("'x-max-length' for queue 'q' in vhost '/': received none but current is the value '10' of type 'long'")),
            Some(("x-max-length".into(), Some("10".into())))
        );
        assert_eq!(inequivalent("404 NOT_FOUND - no queue 'q'"), None);
    }

    #[test]
    fn only_a_quorum_queue_with_a_limit_and_a_dead_letter_exchange_is_suitable() {
        let good = QueueArguments {
            queue_type: "quorum".into(),
            delivery_limit: Some(5),
            dead_letter_exchange: Some(String::new()),
            dead_letter_routing_key: Some("q.failed".into()),
        };
        assert_eq!(good.unsuitable(), None);
        let classic = QueueArguments {
            queue_type: "classic".into(),
            ..good.clone()
        };
        assert!(classic
            .unsuitable()
            .unwrap()
            .starts_with("is a classic queue"));
        let endless = QueueArguments {
            delivery_limit: None,
            ..good.clone()
        };
        assert!(endless
            .unsuitable()
            .unwrap()
            .contains("no x-delivery-limit"));
        let dropped = QueueArguments {
            dead_letter_exchange: None,
            ..good
        };
        assert!(dropped
            .unsuitable()
            .unwrap()
            .contains("no x-dead-letter-exchange"));
    }
}
