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

use sqlx::mysql::{MySqlConnection, MySqlRow};
use sqlx::Connection;

use crate::db::row::get;
use crate::db::sql::rfc3339;
use crate::db::{DbError, Dsn};
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

fn inbox_columns() -> String {
    format!(
        "consumer_name, queue_id, event_id, event_digest, applied, {}, event_canonical",
        rfc3339("received_at")
    )
}

fn text(row: &MySqlRow, i: usize) -> Result<String, DbError> {
    let bytes: Vec<u8> = get(row, i)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

fn inbox_row(row: &MySqlRow) -> Result<InboxRow, DbError> {
    let canonical = text(row, 6)?;
    Ok(InboxRow {
        consumer: text(row, 0)?,
        queue: text(row, 1)?,
        event: text(row, 2)?,
        digest: text(row, 3)?,
        applied: get(row, 4)?,
        received_at: get(row, 5)?,
        parsed: Event::from_json(canonical.as_bytes()).ok(),
        canonical,
    })
}

/// The inbox rows `WHERE {filter}` picks, `value` bound to its one
/// placeholder.
async fn inbox_rows(
    conn: &mut MySqlConnection,
    filter: &str,
    value: &str,
) -> Result<Vec<InboxRow>, DbError> {
    let sql = format!(
        "SELECT {} FROM receiver_inbox WHERE {filter}",
        inbox_columns()
    );
    let rows = sqlx::query(&sql).bind(value).fetch_all(conn).await?;
    rows.iter().map(inbox_row).collect()
}

/// The inbox rows of one event id, in every scope.
pub async fn event(dsn: &Dsn, id: &EventId) -> Result<Vec<InboxRow>, DbError> {
    let mut conn = dsn.connect().await?;
    let filter = "event_id = ? ORDER BY consumer_name, queue_id";
    let rows = inbox_rows(&mut conn, filter, id.as_str()).await?;
    let _ = conn.close().await;
    Ok(rows)
}

/// The views of one task and all its inbox rows, in every scope.
pub async fn task(dsn: &Dsn, id: &TaskId) -> Result<TaskReport, DbError> {
    let mut conn = dsn.connect().await?;
    let sql = format!(
        "SELECT consumer_name, queue_id, task_id, task_version, last_event_id, last_state, \
         LENGTH(last_result), applied_events, {}, {} \
         FROM receiver_task_views WHERE task_id = ? ORDER BY consumer_name, queue_id",
        rfc3339("created_at"),
        rfc3339("updated_at")
    );
    let views = sqlx::query(&sql)
        .bind(id.as_str())
        .fetch_all(&mut conn)
        .await?;
    let views = views
        .iter()
        .map(|row| {
            Ok(ViewRow {
                consumer: text(row, 0)?,
                queue: text(row, 1)?,
                task: text(row, 2)?,
                version: get(row, 3)?,
                last_event: text(row, 4)?,
                state: text(row, 5)?,
                applied_events: get(row, 7)?,
                result_bytes: get::<Option<i64>>(row, 6)?.map(|n| n.unsigned_abs()),
                created_at: get(row, 8)?,
                updated_at: get(row, 9)?,
            })
        })
        .collect::<Result<Vec<_>, DbError>>()?;
    // The canonical form puts the task's id first in its object.
    let pattern = format!("%\"task\":{{\"id\":\"{}\"%", id.as_str());
    let mut events = inbox_rows(&mut conn, "event_canonical LIKE ?", &pattern).await?;
    let _ = conn.close().await;
    // The pattern could in principle match inside a result; the parsed
    // event decides.
    events.retain(|e| e.parsed.as_ref().is_none_or(|p| &p.task().id == id));
    events.sort_by(|a, b| {
        (a.version(), &a.received_at, &a.event).cmp(&(b.version(), &b.received_at, &b.event))
    });
    Ok(TaskReport { views, events })
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
