//! The inbox's rows: the statement that records first receipts, the read
//! behind a duplicate key, and the correction of a stale receipt.

use sqlx::mysql::{MySqlConnection, MySqlTransactionManager};
use sqlx::TransactionManager;

use super::errno;
use super::statement;
use super::transaction::depth;
use crate::db::trace::traced;
use crate::db::{sql, DbError};
use crate::digest::Digest;
use crate::event::Event;
use crate::ids::EventId;
use crate::scope::InboxScope;

/// The table the inbox's statements name, as their spans name it.
const INBOX: &str = "receiver_inbox";

/// The statement that records the first receipts of events, one [`ROW`]
/// per event. A duplicate key here is the signal that an event was
/// committed before.
///
/// The rows are written with `applied = 1`, the common outcome, so that an
/// advancing event needs no second statement on the inbox; a stale one is
/// corrected by [`mark_stale`] before COMMIT. Nobody sees the provisional
/// value: a row is invisible to others until it commits, and a racing copy
/// of the event waits on its key lock.
const INSERT_ALL_SQL: &str = "\
INSERT INTO receiver_inbox
  (consumer_name, queue_id, event_id, event_digest, event_canonical, applied, received_at)
VALUES ";
const ROW: &str = "(?, ?, ?, ?, ?, 1, UTC_TIMESTAMP(6))";

/// Reads back the committed row behind a duplicate key.
const COMMITTED_ROW_SQL: &str = "\
SELECT event_digest, applied FROM receiver_inbox
WHERE consumer_name = ? AND queue_id = ? AND event_id = ?";

/// The stored digest and `applied` flag of an event's inbox row in
/// `scope`, if it has one.
pub(crate) async fn committed_row(
    conn: &mut MySqlConnection,
    scope: &InboxScope,
    event: &EventId,
) -> Result<Option<(Digest, bool)>, DbError> {
    let row: Option<(Vec<u8>, bool)> = traced(
        statement("SELECT", Some(INBOX)),
        sqlx::query_as(COMMITTED_ROW_SQL)
            .bind(scope.receiver.as_str())
            .bind(scope.queue_id.as_str())
            .bind(event.as_str())
            .fetch_optional(conn),
    )
    .await?;
    let Some((hex, applied)) = row else {
        return Ok(None);
    };
    // The digest column holds 64 hex digits.
    let digest = std::str::from_utf8(&hex)
        .ok()
        .and_then(Digest::from_hex)
        .ok_or_else(DbError::inconsistent)?;
    Ok(Some((digest, applied)))
}

/// One multi-row `INSERT` of every event's inbox row, all written as
/// applied. `false` when one of them exists (MySQL 1062): the statement
/// then wrote nothing.
pub(crate) async fn insert_all(
    conn: &mut MySqlConnection,
    scope: &InboxScope,
    events: &[&Event],
) -> Result<bool, sqlx::Error> {
    let sql = format!("{INSERT_ALL_SQL}{}", sql::list(ROW, events.len()));
    let mut query = sqlx::query(&sql);
    for event in events {
        let canonical = event.canonical();
        query = query
            .bind(scope.receiver.as_str())
            .bind(scope.queue_id.as_str())
            .bind(event.id().as_str())
            .bind(canonical.digest().to_hex())
            .bind(canonical.as_str());
    }
    let span = statement("INSERT", Some(INBOX));
    inserted(traced(span, query.execute(conn)).await.map(drop))
}

/// The inbox row of one event that an inner service may be lent the
/// transaction for. When it opens the transaction, it goes through sqlx's
/// own `begin`, so that sqlx knows the transaction from its first
/// statement (see [`adopt`](super::transaction::adopt)) without a `BEGIN`
/// or `DO` round trip; `begin` takes no bound values, so they are written
/// as hex literals, which hold nothing but hex digits. (The set path's
/// multi-row insert lends nothing and stays a prepared statement.)
pub(crate) async fn insert_one(
    conn: &mut MySqlConnection,
    scope: &InboxScope,
    event: &Event,
) -> Result<bool, sqlx::Error> {
    if depth(conn) > 0 {
        return insert_all(conn, scope, &[event]).await;
    }
    let sql = format!("{INSERT_ALL_SQL}{}", literal_rows(scope, &[event]));
    let span = statement("INSERT", Some(INBOX));
    inserted(traced(span, MySqlTransactionManager::begin(conn, Some(sql.into()))).await)
}

/// The rows of [`INSERT_ALL_SQL`] with their values written in: each text
/// as a `utf8mb4` hex literal (`_utf8mb4 X'…'`), which no value can break
/// out of, whatever it holds.
fn literal_rows(scope: &InboxScope, events: &[&Event]) -> String {
    let text = |value: &str| format!("_utf8mb4 X'{}'", hex::encode(value));
    events
        .iter()
        .map(|event| {
            let canonical = event.canonical();
            format!(
                "({}, {}, {}, {}, {}, 1, UTC_TIMESTAMP(6))",
                text(scope.receiver.as_str()),
                text(scope.queue_id.as_str()),
                text(event.id().as_str()),
                text(&canonical.digest().to_hex()),
                text(canonical.as_str()),
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether the rows were written: `false` when one of them exists (MySQL
/// 1062), and the statement wrote nothing.
fn inserted(result: Result<(), sqlx::Error>) -> Result<bool, sqlx::Error> {
    match result {
        Ok(()) => Ok(true),
        Err(e) if errno::is_duplicate_key(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Marks the inbox rows of `events` (inserted as applied, in this
/// transaction) as recorded without advancing the view: one statement.
pub(crate) async fn mark_stale(
    conn: &mut MySqlConnection,
    scope: &InboxScope,
    events: &[&Event],
) -> Result<(), sqlx::Error> {
    let sql = format!(
        "UPDATE receiver_inbox SET applied = 0 \
         WHERE consumer_name = ? AND queue_id = ? AND event_id IN ({})",
        sql::list("?", events.len())
    );
    let mut query = sqlx::query(&sql)
        .bind(scope.receiver.as_str())
        .bind(scope.queue_id.as_str());
    for event in events {
        query = query.bind(event.id().as_str());
    }
    let span = statement("UPDATE", Some(INBOX));
    traced(span, query.execute(conn)).await?;
    Ok(())
}
