//! The deliveries a source gave up on, each with its diagnosis: what
//! `receiver failures` lists and `receiver replay` chooses from.
//!
//! Orbit keeps them as the subscription's `EXPIRED` deliveries and hands
//! out each one's event (`GET /v1/events/{id}`); JetStream's advisories,
//! captured by the failures stream `subscribe --source nats` creates,
//! record the messages it gave up on, which are read back from the queue's
//! stream by sequence; RabbitMQ's dead-letter queue holds them, read and
//! left there. Either way every event is diagnosed read-only, as the inbox
//! would decide it now.

use std::fmt::Write as _;

use result_inbox::db::Dsn;
use result_inbox::diagnosis::{Diagnosed, Diagnoser, Diagnosis};
use result_inbox::ids::SubscriptionId;
use result_inbox::inbox::Conflict;
#[cfg(feature = "nats")]
use result_inbox::nats::{self, FailedMessage, NatsSettings};
use result_inbox::orbit::{EventBody, OrbitClient};
use result_inbox::scope::InboxScope;

/// Where the failed deliveries are kept.
pub(crate) enum Origin {
    /// An Orbit subscription's `EXPIRED` deliveries.
    Orbit {
        client: Box<OrbitClient>,
        subscription: SubscriptionId,
    },
    /// A JetStream durable consumer's failures stream.
    #[cfg(feature = "nats")]
    Nats(NatsSettings),
    /// A RabbitMQ queue's dead-letter queue.
    #[cfg(feature = "rabbitmq")]
    Rabbitmq(result_inbox::rabbitmq::RabbitSettings),
}

impl Origin {
    /// The key a delivery is named by in every line: Orbit's delivery id,
    /// JetStream's stream sequence, a dead letter's key on RabbitMQ.
    pub(crate) fn key(&self) -> &'static str {
        match self {
            Origin::Orbit { .. } => "delivery",
            #[cfg(feature = "nats")]
            Origin::Nats(_) => "sequence",
            #[cfg(feature = "rabbitmq")]
            Origin::Rabbitmq(_) => "message",
        }
    }

    /// Whether `id` can name one of this source's deliveries at all: an
    /// Orbit delivery id, a JetStream stream sequence.
    pub(crate) fn could_name(&self, id: &str) -> bool {
        match self {
            Origin::Orbit { .. } => result_inbox::ids::is_hex_id(id),
            // As the listing spells it, so that it matches: no sign, no
            // leading zero.
            #[cfg(feature = "nats")]
            Origin::Nats(_) => id
                .parse::<u64>()
                .is_ok_and(|n| n > 0 && n.to_string() == id),
            #[cfg(feature = "rabbitmq")]
            Origin::Rabbitmq(_) => result_inbox::rabbitmq::is_dead_letter_key(id),
        }
    }

    /// What an id of this source's deliveries looks like.
    pub(crate) fn id_form(&self) -> &'static str {
        match self {
            Origin::Orbit { .. } => "an Orbit delivery id is 32 lowercase hex characters",
            #[cfg(feature = "nats")]
            Origin::Nats(_) => {
                "a NATS delivery is named by its stream sequence, a number from 1 (as `receiver failures` prints it)"
            }
            #[cfg(feature = "rabbitmq")]
            Origin::Rabbitmq(_) => {
                "a RabbitMQ dead letter is named by its message id, or sha256- and 16 hex digits when it has none (as `receiver failures` prints it)"
            }
        }
    }
}

/// One delivery the source gave up on.
pub(crate) struct FailedDelivery {
    /// Orbit's delivery id, or the JetStream stream sequence.
    pub(crate) id: String,
    /// How often it was delivered.
    pub(crate) attempts: u64,
    /// The task, as the source reports it (Orbit), when the event does not
    /// say.
    pub(crate) task: Option<String>,
    /// The event id, as the source reports it (Orbit), when the event
    /// cannot be read.
    pub(crate) event: Option<String>,
    /// When the source gave up on it, where the source records it
    /// (JetStream's advisory; Orbit keeps no such time).
    pub(crate) failed_at: Option<String>,
    /// What it would become; `Err` says why it cannot be said.
    pub(crate) diagnosis: Result<Diagnosed, String>,
    /// The JetStream record, which a replay publishes again.
    #[cfg_attr(not(feature = "nats"), allow(dead_code))]
    pub(crate) message: Option<Stored>,
}

/// What JetStream's failures stream holds of a delivery; nothing in a
/// receiver built without NATS.
#[cfg(feature = "nats")]
pub(crate) type Stored = FailedMessage;
#[cfg(not(feature = "nats"))]
pub(crate) type Stored = std::convert::Infallible;

impl FailedDelivery {
    /// The diagnosis word, or `unknown`.
    pub(crate) fn word(&self) -> &'static str {
        match &self.diagnosis {
            Ok(d) => d.diagnosis.as_str(),
            Err(_) => "unknown",
        }
    }

    /// Whether a replay could only fail again.
    pub(crate) fn fails_again(&self) -> bool {
        matches!(&self.diagnosis, Ok(d) if d.diagnosis.fails_again())
    }

    fn event_id(&self) -> Option<String> {
        match &self.diagnosis {
            Ok(Diagnosed {
                event_id: Some(id), ..
            }) => Some(id.to_string()),
            _ => self.event.clone(),
        }
    }

    fn task_id(&self) -> Option<String> {
        match &self.diagnosis {
            Ok(Diagnosed {
                task_id: Some(id), ..
            }) => Some(id.to_string()),
            _ => self.task.clone(),
        }
    }

    /// What the diagnosis adds, as `key`, value: both digests of a content
    /// conflict, the version another event holds, why an event is
    /// rejected, or why no diagnosis could be made. Never a body.
    fn details(&self) -> Vec<(&'static str, serde_json::Value)> {
        let reason = |why: &str| vec![("reason", why.into())];
        match &self.diagnosis {
            Ok(d) => match &d.diagnosis {
                Diagnosis::Conflict(Conflict::ContentMismatch {
                    stored, incoming, ..
                }) => vec![
                    ("stored", format!("sha256={stored}").into()),
                    ("incoming", format!("sha256={incoming}").into()),
                ],
                Diagnosis::Conflict(Conflict::VersionTaken { version, .. }) => {
                    let mut details = vec![("version", (*version).into())];
                    details.extend(reason("another event holds this task version"));
                    details
                }
                Diagnosis::Rejected(why) => reason(why),
                _ => Vec::new(),
            },
            Err(why) => reason(why),
        }
    }

    /// One `key=value` line, under `key` (`delivery` or `sequence`); a
    /// reason in quotes.
    pub(crate) fn line(&self, key: &str) -> String {
        let unknown = |value: Option<String>| value.unwrap_or_else(|| "-".to_owned());
        let mut line = format!(
            "failure {key}={} event={} task={} attempts={} failed_at={} diagnosis={}",
            self.id,
            unknown(self.event_id()),
            unknown(self.task_id()),
            self.attempts,
            unknown(self.failed_at.clone()),
            self.word()
        );
        for (name, value) in self.details() {
            let _ = match value {
                serde_json::Value::String(text) if name == "reason" => {
                    write!(line, " {name}={text:?}")
                }
                serde_json::Value::String(text) => write!(line, " {name}={text}"),
                other => write!(line, " {name}={other}"),
            };
        }
        line
    }

    /// The same as one JSON object, under the same keys: `null` for what
    /// is not known, a JetStream sequence as a number.
    pub(crate) fn json(&self, key: &str) -> serde_json::Value {
        let id = match self.id.parse::<u64>() {
            Ok(sequence) if key == "sequence" => sequence.into(),
            _ => serde_json::Value::from(self.id.as_str()),
        };
        let mut object = serde_json::json!({
            key: id,
            "event": self.event_id(),
            "task": self.task_id(),
            "attempts": self.attempts,
            "failed_at": self.failed_at,
            "diagnosis": self.word(),
        });
        for (name, value) in self.details() {
            object[name] = value;
        }
        object
    }
}

/// The counts of a listing by diagnosis, in the order a summary names them.
pub(crate) fn counts(failed: &[FailedDelivery]) -> Vec<(&'static str, usize)> {
    let mut counts: Vec<(&'static str, usize)> = Diagnosis::NAMES
        .iter()
        .map(|name| (*name, failed.iter().filter(|f| f.word() == *name).count()))
        .collect();
    let unknown = failed.iter().filter(|f| f.diagnosis.is_err()).count();
    if unknown > 0 {
        counts.push(("unknown", unknown));
    }
    counts
}

/// Every delivery `origin` gave up on, diagnosed in `scope` on `dsn`.
pub(crate) async fn list(
    origin: &Origin,
    dsn: &Dsn,
    scope: &InboxScope,
) -> Result<Listed, Listing> {
    let mut diagnoser = Diagnoser::connect(dsn, scope.clone())
        .await
        .map_err(Listing::Database)?;
    let server = diagnoser.server().to_owned();
    let listed = match origin {
        Origin::Orbit {
            client,
            subscription,
        } => from_orbit(client, subscription, &mut diagnoser).await,
        #[cfg(feature = "nats")]
        Origin::Nats(settings) => from_nats(settings, &mut diagnoser).await,
        #[cfg(feature = "rabbitmq")]
        Origin::Rabbitmq(settings) => from_rabbitmq(settings, &mut diagnoser).await,
    };
    diagnoser.close().await;
    Ok(Listed {
        failed: listed?,
        server,
    })
}

/// The failed deliveries, and the database server that diagnosed them
/// (`host:port`: on an address of several hosts, the one that takes
/// writes), which the summary names.
pub(crate) struct Listed {
    pub(crate) failed: Vec<FailedDelivery>,
    pub(crate) server: String,
}

/// Why a listing could not be made.
pub(crate) enum Listing {
    Database(result_inbox::db::DbError),
    Orbit(result_inbox::orbit::OrbitError),
    #[cfg(feature = "nats")]
    Nats(result_inbox::nats::NatsError),
    #[cfg(feature = "rabbitmq")]
    Rabbitmq(result_inbox::rabbitmq::RabbitError),
}

async fn from_orbit(
    client: &OrbitClient,
    subscription: &SubscriptionId,
    diagnoser: &mut Diagnoser,
) -> Result<Vec<FailedDelivery>, Listing> {
    let expired = client
        .expired_deliveries(subscription)
        .await
        .map_err(Listing::Orbit)?;
    let mut failed = Vec::with_capacity(expired.len());
    for delivery in expired {
        let diagnosis = match client
            .event(&delivery.event_id)
            .await
            .map_err(Listing::Orbit)?
        {
            EventBody::Found(bytes) => Ok(diagnoser
                .diagnose(&bytes)
                .await
                .map_err(Listing::Database)?),
            EventBody::Missing => Err("Orbit no longer has its event".to_owned()),
            EventBody::NotOffered => {
                Err("this Orbit offers no GET /v1/events/{id}: listed, not diagnosed".to_owned())
            }
        };
        failed.push(FailedDelivery {
            id: delivery.id,
            attempts: delivery.attempts.into(),
            task: delivery.task_id,
            event: Some(delivery.event_id),
            failed_at: None,
            diagnosis,
            message: None,
        });
    }
    Ok(failed)
}

#[cfg(feature = "nats")]
async fn from_nats(
    settings: &NatsSettings,
    diagnoser: &mut Diagnoser,
) -> Result<Vec<FailedDelivery>, Listing> {
    let messages = nats::failed_messages(settings, crate::commands::BROKER_CALL_TIMEOUT)
        .await
        .map_err(Listing::Nats)?;
    let mut failed = Vec::with_capacity(messages.len());
    for message in messages {
        let diagnosis = match &message.body {
            Some(body) => Ok(diagnoser.diagnose(body).await.map_err(Listing::Database)?),
            None => Err(format!(
                "the stream no longer holds the message ({})",
                message.reason
            )),
        };
        failed.push(FailedDelivery {
            id: message.stream_sequence.to_string(),
            attempts: message.deliveries,
            task: None,
            event: None,
            failed_at: message.failed_at.clone(),
            diagnosis,
            message: Some(message),
        });
    }
    Ok(failed)
}

#[cfg(feature = "rabbitmq")]
async fn from_rabbitmq(
    settings: &result_inbox::rabbitmq::RabbitSettings,
    diagnoser: &mut Diagnoser,
) -> Result<Vec<FailedDelivery>, Listing> {
    let letters =
        result_inbox::rabbitmq::dead_letters(settings, crate::commands::BROKER_CALL_TIMEOUT)
            .await
            .map_err(Listing::Rabbitmq)?;
    let mut failed = Vec::with_capacity(letters.len());
    for letter in letters {
        let diagnosis = diagnoser
            .diagnose(&letter.body)
            .await
            .map_err(Listing::Database)?;
        failed.push(FailedDelivery {
            id: letter.key,
            attempts: letter.attempts,
            task: None,
            event: None,
            failed_at: letter.failed_at,
            diagnosis: Ok(diagnosis),
            message: None,
        });
    }
    Ok(failed)
}
