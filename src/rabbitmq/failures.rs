//! What RabbitMQ gave up on, read from the dead-letter queue without
//! taking it, and bringing chosen messages back.
//!
//! AMQP has no way to look at a queue's messages without being given
//! them. Reading one here is taking it unacknowledged (`basic.get`) and
//! closing the channel afterwards, which returns every message taken to
//! the queue as it was: a process that dies meanwhile returns them the
//! same way. Each message's `x-death` header says why and when the queue
//! gave it up.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use amqprs::channel::{BasicAckArguments, BasicGetArguments, GetMessage};
use amqprs::{BasicProperties, FieldName, FieldTable, FieldValue};
use bytes::Bytes;
use sha2::{Digest as _, Sha256};

use super::connect::{open, Link};
use super::headers::{integer, text, trace_context};
use super::provision::{arguments, existing, required};
use super::publish::Confirming;
use super::{RabbitError, RabbitSettings};
use crate::delivery::TraceContext;

/// The header a replayed copy carries, naming the message it copies
/// (`<dead-letter queue>:<key>`), for whoever reads the queue.
pub const REPLAY_OF_HEADER: &str = "Result-Inbox-Replay-Of";

/// The longest message id that names a dead letter as it is.
const KEY_MAX: usize = 128;

/// A message of the dead-letter queue. Its `Debug` shows the body's
/// length only: the body holds a task's result.
#[derive(Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// What names it: the publisher's `message_id` when it is one word of
    /// letters, digits and `._:-` (at most 128), `sha256-` and the first
    /// 16 hex digits of the body's SHA-256 otherwise.
    pub key: String,
    /// Why the queue gave it up, as `x-death` says: `delivery_limit`,
    /// `rejected` (refused for good), `expired`, `maxlen`; `unknown`
    /// without an `x-death` header (a message published to the dead-letter
    /// queue by hand).
    pub reason: String,
    /// The deliveries it had, as far as the server tells: for
    /// `delivery_limit`, one more than the queue's limit; otherwise the
    /// times it was dead-lettered from the queue (`x-death`'s `count`,
    /// usually 1), 0 without an `x-death` header. The server carries no
    /// count of the deliveries before the one that gave it up to a dead
    /// letter.
    pub attempts: u64,
    /// When it was dead-lettered, RFC 3339 in UTC to the second.
    pub failed_at: Option<String>,
    /// Its bytes.
    pub body: Bytes,
    /// The producer's trace context its headers carry.
    pub trace: Option<TraceContext>,
}

impl fmt::Debug for DeadLetter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeadLetter")
            .field("key", &self.key)
            .field("reason", &self.reason)
            .field("attempts", &self.attempts)
            .field("failed_at", &self.failed_at)
            .field("body", &format_args!("<{} bytes>", self.body.len()))
            .field("trace", &self.trace)
            .finish()
    }
}

/// Whether `key` could name a dead letter: a message id kept as it is, or
/// the form a body's digest takes.
pub fn is_dead_letter_key(key: &str) -> bool {
    is_word(key)
}

fn is_word(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= KEY_MAX
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

impl DeadLetter {
    fn read(
        settings: &RabbitSettings,
        limit: Option<i64>,
        properties: &BasicProperties,
        body: Vec<u8>,
    ) -> Self {
        let key = match properties.message_id() {
            Some(id) if is_word(id) && !id.starts_with("sha256-") => id.clone(),
            _ => format!("sha256-{}", &hex::encode(Sha256::digest(&body))[..16]),
        };
        let headers = properties.headers();
        let death = headers.and_then(|h| death_of(h, &settings.queue));
        let (reason, failed_at, count) = match &death {
            Some(death) => (
                text(death, "reason").unwrap_or("unknown").to_owned(),
                match death.get(&name("time")) {
                    Some(FieldValue::T(seconds)) => i64::try_from(*seconds)
                        .ok()
                        .and_then(crate::digest::utc_text),
                    _ => None,
                },
                integer(death, "count").unwrap_or(1),
            ),
            None => ("unknown".to_owned(), None, 0),
        };
        // Not `x-delivery-count`: on a dead letter it is the dead-letter
        // queue's own count, which every listing (a return) raises.
        let attempts = match (reason.as_str(), limit) {
            ("delivery_limit", Some(limit)) => limit.saturating_add(1),
            _ => count,
        };
        Self {
            key,
            reason,
            attempts: u64::try_from(attempts).unwrap_or(0),
            failed_at,
            body: Bytes::from(body),
            trace: headers.and_then(trace_context),
        }
    }

    /// The properties of its copy: the original's, without what the
    /// server added when it dead-lettered it (so that the copy starts a
    /// fresh delivery count), naming the message it copies.
    fn copy_properties(&self, dead: &str, original: &BasicProperties) -> BasicProperties {
        let mut properties = original.clone();
        let mut headers = original.headers().cloned().unwrap_or_default();
        let added: Vec<FieldName> = headers
            .as_ref()
            .keys()
            .filter(|k| {
                let k: &str = k.as_ref();
                k == "x-death"
                    || k == "x-delivery-count"
                    || k.starts_with("x-first-death-")
                    || k.starts_with("x-last-death-")
            })
            .cloned()
            .collect();
        for key in added {
            headers.remove(&key);
        }
        headers.insert(
            name(REPLAY_OF_HEADER),
            FieldValue::S(
                format!("{dead}:{}", self.key)
                    .try_into()
                    .unwrap_or_default(),
            ),
        );
        properties.with_headers(headers).with_persistence(true);
        properties
    }
}

fn name(text: &str) -> FieldName {
    FieldName::try_from(text).expect("a header name shorter than 256 bytes")
}

/// The `x-death` entry of `queue` (the most recent one when the message
/// died several times), or the most recent entry of any queue.
fn death_of(headers: &FieldTable, queue: &str) -> Option<FieldTable> {
    let FieldValue::A(deaths) = headers.get(&name("x-death"))? else {
        return None;
    };
    let tables: Vec<FieldTable> = Vec::from(deaths.clone())
        .into_iter()
        .filter_map(|d| match d {
            FieldValue::F(table) => Some(table),
            _ => None,
        })
        .collect();
    let of_queue = tables.iter().position(|t| text(t, "queue") == Some(queue));
    tables.into_iter().nth(of_queue.unwrap_or(0))
}

/// A connection whose channel takes the dead-letter queue's messages to
/// be read.
struct Reading {
    link: Link,
    queue: String,
    /// The delivery limit of the queue whose dead letters these are, if it
    /// exists and has one.
    limit: Option<i64>,
    timeout: Duration,
    /// The messages ready in it when it was opened.
    ready: u32,
}

impl Reading {
    /// Opens the dead-letter queue of `settings` for reading, or
    /// [`RabbitError::UnknownQueue`] when there is none.
    async fn open(
        settings: &RabbitSettings,
        name: &str,
        timeout: Duration,
    ) -> Result<Self, RabbitError> {
        let link = open(&settings.url, name, timeout).await?;
        let queue = settings.dead_letter_queue();
        let limit = match existing(&link, &settings.queue, timeout).await {
            Ok(Some(_)) => arguments(&link, &settings.queue, timeout)
                .await
                .ok()
                .and_then(|found| found.delivery_limit),
            _ => None,
        };
        match required(&link, &queue, settings.url.vhost(), timeout).await {
            Ok(ready) => Ok(Self {
                link,
                queue,
                limit,
                timeout,
                ready,
            }),
            Err(missing) => {
                link.close().await;
                Err(missing)
            }
        }
    }

    /// The next message not taken yet, unacknowledged, or `None` when the
    /// queue has no more ready.
    async fn next(&self) -> Result<Option<GetMessage>, RabbitError> {
        let what = format!("reading queue {}", self.queue);
        let args = BasicGetArguments::new(&self.queue).no_ack(false).finish();
        match tokio::time::timeout(self.timeout, self.link.channel.basic_get(args)).await {
            Ok(Ok(got)) => Ok(got),
            Ok(Err(e)) => Err(self.link.error(&what, &e)),
            Err(_) => Err(RabbitError::Disconnected(format!(
                "{what}: no answer within {:?}",
                self.timeout
            ))),
        }
    }

    /// Closes the channel, which gives every message taken and not
    /// acknowledged back to the queue, and the connection once the queue
    /// counts them again (`removed` were acknowledged for good): a quorum
    /// queue takes them back through its log, after the server answered
    /// the close, and a reader that came right after this one would
    /// otherwise find the queue short of them. Waits at most the timeout;
    /// messages that another consumer took or that expired meanwhile make
    /// it wait that long, and lose nothing.
    async fn close(self, removed: usize) {
        let back = self
            .ready
            .saturating_sub(u32::try_from(removed).unwrap_or(u32::MAX));
        if self.link.channel.clone().close().await.is_ok() {
            let deadline = tokio::time::Instant::now() + self.timeout;
            while let Ok(Some(ready)) = existing(&self.link, &self.queue, self.timeout).await {
                if ready >= back || tokio::time::Instant::now() >= deadline {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        self.link.close().await;
    }
}

/// Every message of the dead-letter queue of `settings`
/// ([`RabbitSettings::dead_letter_queue`]), in the queue's order, left in
/// the queue: each is taken unacknowledged and all are returned at the
/// end. Needs read permission on the dead-letter queue. A missing
/// dead-letter queue is [`RabbitError::UnknownQueue`].
pub async fn dead_letters(
    settings: &RabbitSettings,
    timeout: Duration,
) -> Result<Vec<DeadLetter>, RabbitError> {
    let reading = Reading::open(settings, "result-inbox failures", timeout).await?;
    let mut letters = Vec::new();
    let read = loop {
        match reading.next().await {
            Ok(Some((_, properties, body))) => {
                letters.push(DeadLetter::read(settings, reading.limit, &properties, body));
            }
            Ok(None) => break Ok(letters),
            Err(e) => break Err(e),
        }
    };
    reading.close(0).await;
    read
}

/// What [`replay`] brought back.
#[derive(Debug, Default)]
pub struct Replayed {
    /// How many copies of each key were brought back (a key two messages
    /// share brings back both).
    pub copies: BTreeMap<String, usize>,
    /// What stopped the pass before it had read the whole dead-letter
    /// queue, if anything: the keys not in `copies` may then still be
    /// there.
    pub stopped: Option<RabbitError>,
}

/// Brings back every message of the dead-letter queue whose key is in
/// `keys`: each is published again to the queue, with its body, its
/// properties and the producer's trace context, as a new message with a
/// fresh delivery count, and taken off the dead-letter queue once the
/// server confirmed the copy.
///
/// A process that dies between the confirm and the removal leaves the
/// original in the dead-letter queue: a second replay delivers it again,
/// and the inbox finds it a duplicate. Needs read permission on the
/// dead-letter queue and write permission on the queue. An error before
/// anything was read (no connection, no dead-letter queue) is `Err`.
pub async fn replay(
    settings: &RabbitSettings,
    timeout: Duration,
    keys: &[String],
) -> Result<Replayed, RabbitError> {
    let reading = Reading::open(settings, "result-inbox replay", timeout).await?;
    let mut replayed = Replayed::default();
    match Confirming::open(&reading.link, timeout).await {
        Ok(mut publisher) => {
            let copied = copy_back(settings, &reading, &mut publisher, keys, &mut replayed).await;
            replayed.stopped = copied.err();
            publisher.close().await;
        }
        Err(e) => replayed.stopped = Some(e),
    }
    reading.close(replayed.copies.values().sum()).await;
    Ok(replayed)
}

async fn copy_back(
    settings: &RabbitSettings,
    reading: &Reading,
    publisher: &mut Confirming,
    keys: &[String],
    replayed: &mut Replayed,
) -> Result<(), RabbitError> {
    while let Some((got, properties, body)) = reading.next().await? {
        let letter = DeadLetter::read(settings, reading.limit, &properties, body);
        if !keys.contains(&letter.key) {
            continue;
        }
        let copy = letter.copy_properties(&reading.queue, &properties);
        publisher
            .publish(
                &settings.queue,
                &copy,
                letter.body.to_vec(),
                reading.timeout,
            )
            .await?;
        let ack = BasicAckArguments::new(got.delivery_tag(), false);
        reading.link.channel.basic_ack(ack).await.map_err(|e| {
            reading.link.error(
                &format!(
                    "removing the replayed message {} from {}",
                    letter.key, reading.queue
                ),
                &e,
            )
        })?;
        *replayed.copies.entry(letter.key).or_insert(0) += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dead_letter_never_shows_its_body() {
        let letter = DeadLetter {
            key: "e1".to_owned(),
            reason: "rejected".to_owned(),
            attempts: 1,
            failed_at: None,
            body: Bytes::from_static(b"secret-result"),
            trace: None,
        };
        let shown = format!("{letter:?}");
        assert!(!shown.contains("secret"), "{shown}");
        assert!(shown.contains("<13 bytes>"), "{shown}");
    }

    #[test]
    fn a_message_id_names_its_letter_only_when_it_is_one_plain_word() {
        assert!(is_dead_letter_key("0f9a3c51d2e84b7a9c0d1e2f3a4b5c6d"));
        assert!(is_dead_letter_key("orders:42.retry_1-b"));
        assert!(is_dead_letter_key("sha256-0123456789abcdef"));
        for bad in ["", "two words", "quote\"d", "é", &"x".repeat(129)] {
            assert!(!is_dead_letter_key(bad), "{bad:?}");
        }
    }
}
