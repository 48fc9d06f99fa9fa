//! The Orbit event envelope and its validation.
//!
//! An event arrives as raw JSON bytes. [`Event::from_json`] first brings it to
//! its canonical form (strict parsing, see [`crate::digest`]) and then reads
//! the envelope out of the canonical text, so that every field the receiver
//! acts on is exactly the field the digest covers. The envelope is documented
//! in `docs/orbit-protocol.md`:
//!
//! ```json
//! {"id":"…","type":"task.cancelled","queue_id":"…","occurred_at":"2026-11-30T16:02:44.123Z",
//!  "task":{"id":"…","version":2,"state":"CANCELLED"}}
//! ```
//!
//! Validation is about agreement between the fields: the event type names
//! the task state (`task.cancelled` ⇔ `CANCELLED`), versions start at 1, and
//! states that carry no result have none. `NEEDS_REVIEW` is its own state and
//! is never read as a success.

use std::fmt;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::digest::{self, Canonical, DigestError};

use crate::ids::{is_hex_id, EventId, QueueId, TaskId};

/// The kinds of task event Orbit emits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    /// `task.submitted`: a task was accepted and waits to run.
    Submitted,
    /// `task.succeeded`: the task finished with its result.
    Succeeded,
    /// `task.failed`: the task failed; the result, if any, describes why.
    Failed,
    /// `task.cancelled`: the task was cancelled; it has no result.
    Cancelled,
    /// `task.needs_review`: the task stopped for a human decision.
    NeedsReview,
}

impl EventType {
    /// Every event type, in the order of the protocol document.
    pub const ALL: [EventType; 5] = [
        EventType::Submitted,
        EventType::Succeeded,
        EventType::Failed,
        EventType::Cancelled,
        EventType::NeedsReview,
    ];

    /// The wire name, e.g. `task.cancelled`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Submitted => "task.submitted",
            EventType::Succeeded => "task.succeeded",
            EventType::Failed => "task.failed",
            EventType::Cancelled => "task.cancelled",
            EventType::NeedsReview => "task.needs_review",
        }
    }

    /// Reads a wire name.
    pub fn parse(s: &str) -> Result<Self, UnknownName> {
        Self::ALL
            .into_iter()
            .find(|t| t.as_str() == s)
            .ok_or(UnknownName("event type"))
    }

    /// The one task state this event type reports.
    pub fn state(self) -> TaskState {
        match self {
            EventType::Submitted => TaskState::Pending,
            EventType::Succeeded => TaskState::Succeeded,
            EventType::Failed => TaskState::Failed,
            EventType::Cancelled => TaskState::Cancelled,
            EventType::NeedsReview => TaskState::NeedsReview,
        }
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A word that is not one of Orbit's event types or task states.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a known {0}")]
pub struct UnknownName(&'static str);

/// The state of a task as an event reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaskState {
    /// `PENDING`: accepted, not finished.
    Pending,
    /// `SUCCEEDED`: finished with a result.
    Succeeded,
    /// `FAILED`: finished without success.
    Failed,
    /// `CANCELLED`: cancelled before it finished.
    Cancelled,
    /// `NEEDS_REVIEW`: waiting for a human; deliberately not a success.
    NeedsReview,
}

impl TaskState {
    /// The wire name, e.g. `NEEDS_REVIEW`.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Pending => "PENDING",
            TaskState::Succeeded => "SUCCEEDED",
            TaskState::Failed => "FAILED",
            TaskState::Cancelled => "CANCELLED",
            TaskState::NeedsReview => "NEEDS_REVIEW",
        }
    }

    /// Reads a wire name.
    pub fn parse(s: &str) -> Result<Self, UnknownName> {
        // Each state is the state of exactly one event type.
        EventType::ALL
            .map(EventType::state)
            .into_iter()
            .find(|t| t.as_str() == s)
            .ok_or(UnknownName("task state"))
    }

    /// Whether an event in this state may carry a result. A pending or
    /// cancelled task has produced nothing.
    pub fn allows_result(self) -> bool {
        !matches!(self, TaskState::Pending | TaskState::Cancelled)
    }
}

impl fmt::Display for TaskState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why an event was refused before any database work. A redelivery of the
/// same bytes is refused the same way, so none of these is retryable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EventError {
    /// The bytes are not strict JSON (or too large, too deep, …).
    #[error("event is not strict JSON: {0}")]
    Json(#[from] DigestError),
    /// A field is missing or has the wrong shape.
    #[error("event field `{field}` {problem}")]
    Malformed {
        /// The JSON path of the field, e.g. `task.id`.
        field: &'static str,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// The event comes from another queue than the one this receiver consumes.
    #[error("event comes from queue {actual}, this receiver consumes queue {expected}")]
    QueueMismatch {
        /// The configured queue.
        expected: QueueId,
        /// The queue the event names.
        actual: QueueId,
    },
    /// The event type and the task state disagree.
    #[error("event type {event_type} does not match task state {state}")]
    TypeStateMismatch {
        /// The event type.
        event_type: EventType,
        /// The task state it carries.
        state: TaskState,
    },
    /// The task version is not an integer of at least 1.
    #[error("task version must be an integer from 1 to 18446744073709551615")]
    InvalidVersion,
    /// The task state admits no result but the event carries one.
    #[error("a task in state {0} carries no result")]
    ResultNotAllowed(TaskState),
}

impl EventError {
    /// Whether the bytes themselves can never be a valid event. Only
    /// [`QueueMismatch`](EventError::QueueMismatch) is not: the event may be
    /// fine and the receiver configured for the wrong queue.
    pub fn is_malformed(&self) -> bool {
        !matches!(self, EventError::QueueMismatch { .. })
    }
}

/// The task as one event reports it.
#[derive(Clone, PartialEq, Eq)]
pub struct TaskSnapshot {
    /// The task's id.
    pub id: TaskId,
    /// The task's version at this event; higher versions are newer.
    pub version: u64,
    /// The task's state at this event.
    pub state: TaskState,
    /// The canonical JSON text of the result, `None` when absent or `null`.
    pub result: Option<String>,
}

impl fmt::Debug for TaskSnapshot {
    // The result may be confidential business data: never in logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskSnapshot")
            .field("id", &self.id)
            .field("version", &self.version)
            .field("state", &self.state)
            .field("result", &result_size(self.result.as_deref()))
            .finish()
    }
}

/// A result as Debug output shows it: its size, never its text.
pub(crate) fn result_size(result: Option<&str>) -> Option<String> {
    result.map(|r| format!("<{} bytes>", r.len()))
}

/// A validated Orbit event together with its frozen canonical form.
#[derive(Clone, PartialEq, Eq)]
pub struct Event {
    id: EventId,
    event_type: EventType,
    queue_id: QueueId,
    occurred_at: String,
    task: TaskSnapshot,
    canonical: Canonical,
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Event")
            .field("id", &self.id)
            .field("type", &self.event_type)
            .field("queue_id", &self.queue_id)
            .field("occurred_at", &self.occurred_at)
            .field("task", &self.task)
            .field("digest", self.canonical.digest())
            .finish()
    }
}

/// The envelope as it appears in canonical text. Every field is read raw so
/// that a wrong shape becomes a precise [`EventError::Malformed`] instead of a
/// generic decoding message.
#[derive(Deserialize)]
struct RawEnvelope<'a> {
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    #[serde(borrow, rename = "type")]
    event_type: Option<&'a RawValue>,
    #[serde(borrow)]
    queue_id: Option<&'a RawValue>,
    #[serde(borrow)]
    occurred_at: Option<&'a RawValue>,
    #[serde(borrow)]
    task: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct RawTask<'a> {
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    #[serde(borrow)]
    version: Option<&'a RawValue>,
    #[serde(borrow)]
    state: Option<&'a RawValue>,
    #[serde(borrow)]
    result: Option<&'a RawValue>,
}

impl Event {
    /// Canonicalizes `raw` and validates the envelope it holds.
    ///
    /// This checks the event on its own; whether it belongs to the queue a
    /// receiver consumes is [`Event::check_queue`].
    pub fn from_json(raw: &[u8]) -> Result<Event, EventError> {
        let canonical = digest::canonicalize(raw)?;
        let envelope: RawEnvelope<'_> = object(canonical.as_str(), "(event)")?;

        let id = hex_field(envelope.id, "id").map(EventId)?;
        let event_type = string_field(envelope.event_type, "type")?;
        let event_type = EventType::parse(&event_type)
            .map_err(|_| malformed("type", "is not a known event type"))?;
        let queue_id = hex_field(envelope.queue_id, "queue_id").map(QueueId)?;
        let occurred_at = string_field(envelope.occurred_at, "occurred_at")?;
        if !digest::is_utc_timestamp(&occurred_at) {
            return Err(malformed("occurred_at", "must be an RFC 3339 date-time"));
        }

        let task: RawTask<'_> = object(present(envelope.task, "task")?.get(), "task")?;
        let task_id = hex_field(task.id, "task.id").map(TaskId)?;
        let version = version_field(task.version)?;
        let state = string_field(task.state, "task.state")?;
        let state = TaskState::parse(&state)
            .map_err(|_| malformed("task.state", "is not a known task state"))?;
        if event_type.state() != state {
            return Err(EventError::TypeStateMismatch { event_type, state });
        }
        // `"result": null` and no result mean the same: nothing was produced.
        let result = task.result.map(RawValue::get).filter(|r| *r != "null");
        if result.is_some() && !state.allows_result() {
            return Err(EventError::ResultNotAllowed(state));
        }
        let result = result.map(str::to_owned);

        Ok(Event {
            id,
            event_type,
            queue_id,
            occurred_at,
            task: TaskSnapshot {
                id: task_id,
                version,
                state,
                result,
            },
            canonical,
        })
    }

    /// Refuses an event of another queue than `expected`.
    pub fn check_queue(&self, expected: &QueueId) -> Result<(), EventError> {
        if &self.queue_id == expected {
            Ok(())
        } else {
            Err(EventError::QueueMismatch {
                expected: expected.clone(),
                actual: self.queue_id.clone(),
            })
        }
    }

    /// The event's id; redeliveries keep it.
    pub fn id(&self) -> &EventId {
        &self.id
    }

    /// The event type.
    pub fn event_type(&self) -> EventType {
        self.event_type
    }

    /// The queue the event comes from.
    pub fn queue_id(&self) -> &QueueId {
        &self.queue_id
    }

    /// When the platform recorded the event, in UTC (RFC 3339, `Z`).
    pub fn occurred_at(&self) -> &str {
        &self.occurred_at
    }

    /// The task as this event reports it.
    pub fn task(&self) -> &TaskSnapshot {
        &self.task
    }

    /// The frozen canonical form and its digest.
    pub fn canonical(&self) -> &Canonical {
        &self.canonical
    }
}

/// The event id of a document that may be invalid otherwise, when it can
/// be read at all: a JSON object (serde's reading, which is laxer than the
/// canonical parser) whose `id` is a 32-hex string. Only for telling an
/// operator which event was rejected; never for deciding anything.
pub fn readable_id(raw: &[u8]) -> Option<EventId> {
    #[derive(Deserialize)]
    struct Id {
        id: Option<String>,
    }
    if raw.len() > digest::MAX_EVENT_BYTES || !raw.trim_ascii_start().starts_with(b"{") {
        return None;
    }
    let id = serde_json::from_slice::<Id>(raw).ok()?.id?;
    EventId::parse(&id).ok()
}

fn malformed(field: &'static str, problem: &'static str) -> EventError {
    EventError::Malformed { field, problem }
}

fn present<'a>(raw: Option<&'a RawValue>, field: &'static str) -> Result<&'a RawValue, EventError> {
    raw.ok_or(malformed(field, "is missing"))
}

/// `text` read as an object. serde's derived structs also accept a JSON
/// array of the fields in declaration order; the envelope and the task are
/// objects and nothing else (canonical text has no leading whitespace).
fn object<'a, T: Deserialize<'a>>(text: &'a str, field: &'static str) -> Result<T, EventError> {
    text.starts_with('{')
        .then(|| serde_json::from_str(text).ok())
        .flatten()
        .ok_or(malformed(field, "must be a JSON object"))
}

fn string_field(raw: Option<&RawValue>, field: &'static str) -> Result<String, EventError> {
    serde_json::from_str::<String>(present(raw, field)?.get())
        .map_err(|_| malformed(field, "must be a string"))
}

fn hex_field(raw: Option<&RawValue>, field: &'static str) -> Result<String, EventError> {
    let s = string_field(raw, field)?;
    is_hex_id(&s).then_some(s).ok_or(malformed(
        field,
        "must be 32 lowercase hexadecimal characters",
    ))
}

/// Reads the version from its exact decimal text: `2.0`, `2e0` and `-1` are
/// not versions, and nothing passes through a float.
fn version_field(raw: Option<&RawValue>) -> Result<u64, EventError> {
    let text = present(raw, "task.version")?.get();
    if !text.starts_with(|c: char| c == '-' || c.is_ascii_digit()) {
        return Err(malformed("task.version", "must be a number"));
    }
    match text.parse::<u64>() {
        Ok(v) if v >= 1 => Ok(v),
        _ => Err(EventError::InvalidVersion),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const Q: &str = "0123456789abcdef0123456789abcdef";

    fn event(body: &str) -> Result<Event, EventError> {
        Event::from_json(body.as_bytes())
    }

    fn envelope(event_type: &str, version: &str, state: &str, result: Option<&str>) -> String {
        let result = result
            .map(|r| format!(r#","result":{r}"#))
            .unwrap_or_default();
        format!(
            r#"{{"id":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","type":"{event_type}","queue_id":"{Q}","occurred_at":"2026-11-30T16:02:44+08:00","task":{{"id":"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb","version":{version},"state":"{state}"{result}}}}}"#
        )
    }

    #[test]
    fn a_cancelled_event_is_read_with_its_utc_time() {
        let e = event(&envelope("task.cancelled", "2", "CANCELLED", None)).unwrap();
        assert_eq!(e.event_type(), EventType::Cancelled);
        assert_eq!(e.task().version, 2);
        assert_eq!(e.task().result, None);
        assert_eq!(e.occurred_at(), "2026-11-30T08:02:44Z");
    }

    #[test]
    fn needs_review_stays_needs_review() {
        let e = event(&envelope(
            "task.needs_review",
            "3",
            "NEEDS_REVIEW",
            Some("{}"),
        ))
        .unwrap();
        assert_eq!(e.task().state, TaskState::NeedsReview);
        assert_eq!(e.event_type(), EventType::NeedsReview);
    }

    #[test]
    fn a_result_keeps_big_integers_and_decimal_spelling() {
        let e = event(&envelope(
            "task.succeeded",
            "2",
            "SUCCEEDED",
            Some(r#"{"n":123456789012345678901234567890,"d":1.10}"#),
        ))
        .unwrap();
        assert_eq!(
            e.task().result.as_deref(),
            Some(r#"{"d":1.10,"n":123456789012345678901234567890}"#)
        );
    }

    #[test]
    fn a_null_result_is_no_result() {
        let e = event(&envelope("task.succeeded", "2", "SUCCEEDED", Some("null"))).unwrap();
        assert_eq!(e.task().result, None);
    }

    #[test]
    fn type_and_state_must_agree() {
        assert_eq!(
            event(&envelope("task.cancelled", "2", "SUCCEEDED", None)),
            Err(EventError::TypeStateMismatch {
                event_type: EventType::Cancelled,
                state: TaskState::Succeeded
            })
        );
    }

    #[test]
    fn versions_below_one_or_not_integers_are_refused() {
        for v in ["0", "-1", "1.0", "1e0", "18446744073709551616"] {
            assert_eq!(
                event(&envelope("task.cancelled", v, "CANCELLED", None)),
                Err(EventError::InvalidVersion),
                "version {v}"
            );
        }
        assert!(matches!(
            event(&envelope("task.cancelled", "\"2\"", "CANCELLED", None)),
            Err(EventError::Malformed {
                field: "task.version",
                ..
            })
        ));
    }

    #[test]
    fn a_cancelled_task_carries_no_result() {
        assert_eq!(
            event(&envelope("task.cancelled", "2", "CANCELLED", Some("1"))),
            Err(EventError::ResultNotAllowed(TaskState::Cancelled))
        );
    }

    #[test]
    fn an_event_of_another_queue_is_refused() {
        let e = event(&envelope("task.cancelled", "2", "CANCELLED", None)).unwrap();
        let other = QueueId::parse("ffffffffffffffffffffffffffffffff").unwrap();
        assert!(matches!(
            e.check_queue(&other),
            Err(EventError::QueueMismatch { .. })
        ));
        assert!(e.check_queue(&QueueId::parse(Q).unwrap()).is_ok());
    }

    #[test]
    fn missing_and_misshapen_fields_are_named() {
        let no_task = r#"{"id":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","type":"task.cancelled","queue_id":"0123456789abcdef0123456789abcdef","occurred_at":"2026-11-30T16:02:44Z"}"#;
        assert!(matches!(
            event(no_task),
            Err(EventError::Malformed { field: "task", .. })
        ));
        let upper_id = envelope("task.cancelled", "2", "CANCELLED", None).replace("aaaa", "AAAA");
        assert!(matches!(
            event(&upper_id),
            Err(EventError::Malformed { field: "id", .. })
        ));
        let bad_time = envelope("task.cancelled", "2", "CANCELLED", None)
            .replace("2026-11-30T16:02:44+08:00", "yesterday");
        assert!(matches!(
            event(&bad_time),
            Err(EventError::Malformed {
                field: "occurred_at",
                ..
            })
        ));
        assert!(matches!(
            event("[1,2]"),
            Err(EventError::Malformed {
                field: "(event)",
                ..
            })
        ));
    }

    #[test]
    fn debug_output_never_shows_the_result() {
        let e = event(&envelope(
            "task.succeeded",
            "2",
            "SUCCEEDED",
            Some(r#""sentinel-secret-result""#),
        ))
        .unwrap();
        assert!(!format!("{e:?}").contains("sentinel-secret-result"));
    }
}
