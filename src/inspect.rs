//! `receiver inspect event <id>` and `receiver inspect task <id>`: what the
//! receiver stored about one event or one task, in every scope (receiver
//! name and queue) of the database.
//!
//! The rows are data for the caller to print: ids, digests, flags,
//! versions, states, times and the size of a result. The stored canonical
//! event, which contains the result, is there too
//! ([`InboxRow::canonical`]); `receiver inspect` prints it only when asked
//! to.
//!
//! An event is found by its primary key. A task's inbox rows are found by
//! the place its id has in the canonical form (`"task":{"id":"…"`), which
//! scans the inbox: the tables have no index on the task of an event,
//! because the receiver never needs one.

use crate::db::any::{on_engine, AnyConnection};
use crate::db::engine::Tools;
use crate::db::record::{InboxRecord, ViewRecord};
use crate::db::{DbError, Dsn, Engine};
use crate::event::Event;
use crate::ids::{EventId, TaskId};

/// One stored inbox row. Its `Debug` gives the canonical text's size, not
/// the text, which holds the result.
#[derive(Clone, PartialEq, Eq)]
pub struct InboxRow {
    /// Receiver name.
    pub consumer: String,
    /// Queue.
    pub queue: String,
    /// Event id.
    pub event: String,
    /// Stored digest (64 hex).
    pub digest: String,
    /// Whether it advanced a view.
    pub applied: bool,
    /// When it was received (UTC).
    pub received_at: String,
    /// The stored canonical text.
    canonical: String,
    /// The event read from it (`None` if the stored text is damaged).
    parsed: Option<Event>,
}

impl std::fmt::Debug for InboxRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let canonical = format_args!("<{} bytes>", self.canonical.len());
        f.debug_struct("InboxRow")
            .field("consumer", &self.consumer)
            .field("queue", &self.queue)
            .field("event", &self.event)
            .field("digest", &self.digest)
            .field("applied", &self.applied)
            .field("received_at", &self.received_at)
            .field("canonical", &canonical)
            .field("parsed", &self.parsed)
            .finish()
    }
}

impl InboxRow {
    /// The task version the event carries (0 when unreadable).
    pub fn version(&self) -> u64 {
        self.parsed.as_ref().map_or(0, |e| e.task().version)
    }

    /// The event read from the stored text (`None` if it is damaged).
    pub fn event(&self) -> Option<&Event> {
        self.parsed.as_ref()
    }

    /// The stored canonical text. It contains the task's result.
    pub fn canonical(&self) -> &str {
        &self.canonical
    }
}

/// One stored task view (without its result).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewRow {
    /// Receiver name.
    pub consumer: String,
    /// Queue.
    pub queue: String,
    /// Task id.
    pub task: String,
    /// The highest version applied.
    pub version: u64,
    /// The event that brought it.
    pub last_event: String,
    /// The state it brought.
    pub state: String,
    /// How many events advanced the view.
    pub applied_events: u64,
    /// The stored result's length in bytes; `None` when there is none.
    pub result_bytes: Option<u64>,
    /// When the view was created (UTC).
    pub created_at: String,
    /// When it last advanced (UTC).
    pub updated_at: String,
}

/// What `inspect task` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskReport {
    /// The task's views, one per scope.
    pub views: Vec<ViewRow>,
    /// The task's inbox rows, in version order (then receive time).
    pub events: Vec<InboxRow>,
}

impl From<InboxRecord> for InboxRow {
    fn from(record: InboxRecord) -> Self {
        InboxRow {
            parsed: Event::from_json(record.canonical.as_bytes()).ok(),
            consumer: record.consumer,
            queue: record.queue,
            event: record.event,
            digest: record.digest,
            applied: record.applied,
            received_at: record.received_at,
            canonical: record.canonical,
        }
    }
}

impl From<ViewRecord> for ViewRow {
    fn from(record: ViewRecord) -> Self {
        ViewRow {
            consumer: record.consumer,
            queue: record.queue,
            task: record.task,
            version: record.version,
            last_event: record.last_event,
            state: record.state,
            applied_events: record.applied_events,
            result_bytes: record.result_bytes,
            created_at: record.created_at,
            updated_at: record.updated_at,
        }
    }
}

/// The inbox rows of one event id, in every scope, on the engine the
/// address names.
pub async fn event(dsn: &Dsn, id: &EventId) -> Result<Vec<InboxRow>, DbError> {
    let mut conn = AnyConnection::open(dsn).await?;
    let records = on_engine!(&mut conn, c => E::event_records(c, id).await);
    conn.close().await;
    Ok(records?.into_iter().map(InboxRow::from).collect())
}

/// The views of one task and all its inbox rows, in every scope, on the
/// engine the address names.
pub async fn task(dsn: &Dsn, id: &TaskId) -> Result<TaskReport, DbError> {
    let mut conn = AnyConnection::open(dsn).await?;
    let report = on_engine!(&mut conn, c => task_on::<E>(c, id).await);
    conn.close().await;
    report
}

async fn task_on<E: Engine>(conn: &mut E::Connection, id: &TaskId) -> Result<TaskReport, DbError> {
    let views = E::view_records(&mut *conn, id).await?;
    // The canonical form puts the task's id first in its object.
    let pattern = format!("%\"task\":{{\"id\":\"{}\"%", id.as_str());
    let mut events: Vec<InboxRow> = E::records_like(conn, &pattern)
        .await?
        .into_iter()
        .map(InboxRow::from)
        .collect();
    // The pattern could in principle match inside a result; the parsed
    // event decides.
    events.retain(|e| e.parsed.as_ref().is_none_or(|p| &p.task().id == id));
    events.sort_by(|a, b| {
        (a.version(), &a.received_at, &a.event).cmp(&(b.version(), &b.received_at, &b.event))
    });
    Ok(TaskReport {
        views: views.into_iter().map(ViewRow::from).collect(),
        events,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_gives_the_size_of_the_text_not_the_result_in_it() {
        let row = InboxRow {
            consumer: "task-result-view".into(),
            queue: "0".repeat(32),
            event: "f".repeat(32),
            digest: "a".repeat(64),
            applied: true,
            received_at: "2026-11-30T08:02:44.123456Z".into(),
            canonical: r#"{"result":"sentinel-result"}"#.into(),
            parsed: None,
        };
        let debug = format!("{row:?}");
        assert!(!debug.contains("sentinel-result"), "{debug}");
        assert!(debug.contains("canonical: <28 bytes>"), "{debug}");
    }
}
