//! The task view, telling downstream of each event that advanced it: one
//! effect per target, all recorded in one statement of the same
//! transaction, sent after COMMIT by a relay.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use serde::Serialize;
use serde_json::value::RawValue;
use sha2::{Digest as _, Sha256};
use tower::Service;

use super::{advance_on, Advance};
use crate::db::Engine;
use crate::delivery::Delivery;
use crate::event::Event;
use crate::inbox::{Applying, Verdict};
use crate::outbox::{Effect, OutboxError, Target};
use crate::scope::InboxScope;
use crate::BoxError;

/// The inner service of `receiver consume` with notify targets: the task
/// view ([`advance_on`]), and for each event that advanced it one effect
/// per target in the outbox, in the same transaction.
///
/// The effect's key is the event id, so a redelivery or a second
/// application of the event can never make a second effect; the target is
/// part of its id, so each target's effect has an id of its own. Its
/// ordering key is the task id, so a task's notifications are sent to
/// each target in the order the view advanced. A stale event records
/// nothing (and a duplicate never reaches the inner service). Its body is
/// one JSON object:
///
/// ```json
/// {"receiver":"task-result-view","queue_id":"…","task_id":"…","state":"SUCCEEDED",
///  "version":3,"event_id":"…","result_sha256":"…"}
/// ```
///
/// `result_sha256` is the hex SHA-256 of the result's canonical form as the
/// event holds it, `null` without a result; `result`, the result itself, is
/// there only [with the result](Notify::with_result). Content type
/// `application/json`.
///
/// Needs `receiver_outbox` (`receiver init --outbox`). In batching mode it
/// has no set path: a set path must have exactly the inner service's
/// effects, and the task view's records none.
#[derive(Debug, Clone)]
pub struct Notify {
    /// The targets, each notified once per event, in this order.
    targets: Arc<[Target]>,
    include_result: bool,
}

impl Notify {
    /// Notifies `target` (a target name the relay maps to a webhook or a
    /// subject) of each event that advanced the view, without the result.
    pub fn new(target: &str) -> Result<Self, OutboxError> {
        Ok(Self {
            targets: Arc::new([Target::parse(target)?]),
            include_result: false,
        })
    }

    /// The same, notifying `target` too: one more effect per event, with
    /// the same body, key and ordering key. A target named twice is
    /// [`OutboxError::Invalid`] (its second effect would have the first's
    /// id).
    pub fn with_target(mut self, target: &str) -> Result<Self, OutboxError> {
        let target = Target::parse(target)?;
        if self.targets.contains(&target) {
            return Err(OutboxError::Invalid {
                what: "target",
                expected: "a target not notified already",
            });
        }
        let mut targets = self.targets.to_vec();
        targets.push(target);
        self.targets = targets.into();
        Ok(self)
    }

    /// The targets, in the order their effects are recorded.
    pub fn targets(&self) -> impl Iterator<Item = &str> {
        self.targets.iter().map(Target::as_str)
    }

    /// The same, each notification carrying the result too (`result`):
    /// the business data itself goes to the target.
    pub fn with_result(mut self) -> Self {
        self.include_result = true;
        self
    }

    /// The notification's body for `event`, applied under `scope`.
    pub fn body(&self, scope: &InboxScope, event: &Event) -> Vec<u8> {
        let task = event.task();
        let result = task.result.as_deref();
        let body = Body {
            receiver: scope.receiver.as_str(),
            queue_id: event.queue_id().as_str(),
            task_id: task.id.as_str(),
            state: task.state.as_str(),
            version: task.version,
            event_id: event.id().as_str(),
            result_sha256: result.map(|r| hex::encode(Sha256::digest(r.as_bytes()))),
            result: match self.include_result {
                // The canonical text is JSON by construction.
                true => Some(result.and_then(|r| RawValue::from_string(r.to_owned()).ok())),
                false => None,
            },
        };
        serde_json::to_vec(&body).expect("a notification serializes")
    }
}

/// The notification, in its documented field order.
#[derive(Serialize)]
struct Body<'a> {
    receiver: &'a str,
    queue_id: &'a str,
    task_id: &'a str,
    state: &'a str,
    version: u64,
    event_id: &'a str,
    result_sha256: Option<String>,
    /// Absent unless asked for; `null` when asked for and there is none.
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<Option<Box<RawValue>>>,
}

impl<E: Engine> Service<Delivery<Applying<E>>> for Notify {
    type Response = Verdict<E>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Verdict<E>, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, delivery: Delivery<Applying<E>>) -> Self::Future {
        let notify = self.clone();
        let mut applying = delivery.into_body();
        Box::pin(async move {
            let (conn, scope, event) = applying.split();
            if advance_on::<E>(conn, scope, event).await? == Advance::Stale {
                return Ok(applying.stale());
            }
            let event = applying.event();
            let body = Bytes::from(notify.body(applying.scope(), event));
            let (key, task) = (event.id().as_str(), event.task().id.as_str());
            let effects = notify
                .targets
                .iter()
                .map(|target| {
                    Effect::new(target.as_str(), key, body.clone())?
                        .with_ordering_key(task)?
                        .with_header("content-type", "application/json")
                })
                .collect::<Result<Vec<_>, OutboxError>>()?;
            applying.outbox().record_all(effects).await?;
            Ok(applying.applied())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::QueueId;
    use crate::scope::ReceiverName;

    const QUEUE: &str = "0123456789abcdef0123456789abcdef";

    fn event(task: &str) -> Event {
        let raw = format!(
            r#"{{"id":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","type":"task.succeeded","queue_id":"{QUEUE}","occurred_at":"2026-11-30T16:02:44Z","task":{{"id":"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb","version":3,"state":"SUCCEEDED"{task}}}}}"#
        );
        Event::from_json(raw.as_bytes()).unwrap()
    }

    fn scope() -> InboxScope {
        InboxScope::new(ReceiverName::default(), QueueId::parse(QUEUE).unwrap())
    }

    #[test]
    fn each_target_is_notified_once_in_the_order_given() {
        let notify = Notify::new("notify")
            .unwrap()
            .with_target("notify-nats")
            .unwrap();
        assert_eq!(
            notify.targets().collect::<Vec<_>>(),
            ["notify", "notify-nats"]
        );
        let twice = notify.with_target("notify").unwrap_err();
        assert!(twice.to_string().contains("invalid target"), "{twice}");
        assert!(Notify::new("notify")
            .unwrap()
            .with_target("no space")
            .is_err());
    }

    #[test]
    fn the_body_has_the_documented_fields_and_the_result_only_when_asked() {
        let with = event(r#","result":{ "b" : 1.50, "a":"x" }"#);
        let notify = Notify::new("notify").unwrap();
        let head = format!(
            r#"{{"receiver":"task-result-view","queue_id":"{QUEUE}","task_id":"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb","state":"SUCCEEDED","version":3,"event_id":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","result_sha256":"#
        );
        // The result as the event holds it: its canonical form.
        let canonical = crate::digest::canonicalize(br#"{ "b" : 1.50, "a":"x" }"#).unwrap();
        let (result, sha) = (
            canonical.as_str(),
            hex::encode(Sha256::digest(canonical.as_bytes())),
        );
        assert!(result.starts_with(r#"{"a":"x","b":"#), "{result}");
        assert_eq!(
            String::from_utf8(notify.body(&scope(), &with)).unwrap(),
            format!(r#"{head}"{sha}"}}"#)
        );
        assert_eq!(
            String::from_utf8(notify.clone().with_result().body(&scope(), &with)).unwrap(),
            format!(r#"{head}"{sha}","result":{result}}}"#)
        );
        let without = event("");
        assert_eq!(
            String::from_utf8(notify.body(&scope(), &without)).unwrap(),
            format!("{head}null}}")
        );
        assert_eq!(
            String::from_utf8(notify.with_result().body(&scope(), &without)).unwrap(),
            format!(r#"{head}null,"result":null}}"#)
        );
    }
}
