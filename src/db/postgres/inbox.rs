//! The inbox's rows on PostgreSQL.
//!
//! A statement that fails aborts a PostgreSQL transaction, where MySQL's
//! duplicate key ends only the statement. So the statement that opens a
//! delivery's transaction (`BEGIN` and the inbox `INSERT`, one round trip)
//! is a plain insert: a racing copy of the event waits on the winner's key
//! until it commits or rolls back, and meets the key (23505) only once the
//! winner committed; the aborted transaction is then rolled back, and the
//! committed row is read outside it. Inside a transaction that must go on
//! (a batch behind its savepoints) the insert is `ON CONFLICT DO NOTHING`
//! on the inbox's own key, which waits the same way and aborts nothing.

use sqlx::postgres::{PgConnection, PgTransactionManager};
use sqlx::{Executor, TransactionManager};

use super::placeholders;
use super::sqlstate::is_unique_violation;
use super::statement;
use crate::db::trace::traced;
use crate::db::DbError;
use crate::digest::Digest;
use crate::event::Event;
use crate::ids::EventId;
use crate::scope::InboxScope;

/// The table the inbox's statements name, as their spans name it.
const INBOX: &str = "receiver_inbox";

const INSERT: &str = "INSERT INTO receiver_inbox \
  (consumer_name, queue_id, event_id, event_digest, event_canonical, applied, received_at) VALUES ";

/// UTC now, at the statement, as MySQL's `UTC_TIMESTAMP(6)`.
pub(super) const NOW: &str = "(statement_timestamp() AT TIME ZONE 'UTC')";

/// The inbox's key, the only conflict the duplicate path takes.
const ON_KEY: &str = " ON CONFLICT (consumer_name, queue_id, event_id) DO NOTHING";

/// The stored digest and `applied` flag of an event's inbox row in
/// `scope`, if it has one.
pub(crate) async fn committed_row(
    conn: &mut PgConnection,
    scope: &InboxScope,
    event: &EventId,
) -> Result<Option<(Digest, bool)>, DbError> {
    let row: Option<(String, i16)> = traced(
        statement("SELECT", Some(INBOX)),
        sqlx::query_as(
            "SELECT event_digest, applied FROM receiver_inbox \
             WHERE consumer_name = $1 AND queue_id = $2::bpchar AND event_id = $3::bpchar",
        )
        .bind(scope.receiver.as_str())
        .bind(scope.queue_id.as_str())
        .bind(event.as_str())
        .fetch_optional(conn),
    )
    .await?;
    let Some((hex, applied)) = row else {
        return Ok(None);
    };
    let digest = Digest::from_hex(&hex).ok_or_else(DbError::inconsistent)?;
    Ok(Some((digest, applied != 0)))
}

/// Every event's inbox row in one statement, opening the transaction when
/// none is open: `false` when one of them exists, the transaction then
/// aborted (the caller rolls it back and takes the events one at a time).
pub(crate) async fn insert_all(
    conn: &mut PgConnection,
    scope: &InboxScope,
    events: &[&Event],
) -> Result<bool, sqlx::Error> {
    if PgTransactionManager::get_transaction_depth(conn) == 0 {
        super::transaction::begin(conn).await?;
    }
    let sql = format!("{INSERT}{}", rows(events.len()));
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
    match traced(statement("INSERT", Some(INBOX)), query.execute(conn)).await {
        Ok(_) => Ok(true),
        Err(e) if is_unique_violation(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The inbox row of one event: `false` when it exists. With no
/// transaction open, `BEGIN` and the insert go in one round trip (the
/// values as hex literals, which hold nothing but hex digits), and sqlx
/// knows the transaction; a duplicate rolls it back. Inside one, the
/// insert leaves the transaction usable either way.
pub(crate) async fn insert_one(
    conn: &mut PgConnection,
    scope: &InboxScope,
    event: &Event,
) -> Result<bool, sqlx::Error> {
    let canonical = event.canonical();
    if PgTransactionManager::get_transaction_depth(conn) > 0 {
        let sql = format!("{INSERT}{}{ON_KEY}", rows(1));
        let query = sqlx::query(&sql)
            .bind(scope.receiver.as_str())
            .bind(scope.queue_id.as_str())
            .bind(event.id().as_str())
            .bind(canonical.digest().to_hex())
            .bind(canonical.as_str());
        let done = traced(statement("INSERT", Some(INBOX)), query.execute(conn)).await?;
        return Ok(done.rows_affected() == 1);
    }
    let text = |value: &str| format!("convert_from('\\x{}'::bytea, 'UTF8')", hex::encode(value));
    let sql = format!(
        "BEGIN ISOLATION LEVEL READ COMMITTED; {INSERT}({}, {}, {}, {}, {}, 1, {NOW})",
        text(scope.receiver.as_str()),
        text(scope.queue_id.as_str()),
        text(event.id().as_str()),
        text(&canonical.digest().to_hex()),
        text(canonical.as_str()),
    );
    let opened = traced(
        statement("INSERT", Some(INBOX)),
        PgTransactionManager::begin(conn, Some(sql.into())),
    )
    .await;
    match opened {
        Ok(()) => Ok(true),
        Err(e) if is_unique_violation(&e) => {
            conn.execute("ROLLBACK").await?;
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

/// Placeholders of `n` inbox rows: five values each, then `applied = 1`
/// and the time.
fn rows(n: usize) -> String {
    placeholders(n, &[""; 5], &["1", NOW])
}

/// Marks the inbox rows of `events` (inserted as applied, in this
/// transaction) as recorded without advancing the view.
pub(crate) async fn mark_stale(
    conn: &mut PgConnection,
    scope: &InboxScope,
    events: &[&Event],
) -> Result<(), sqlx::Error> {
    let ids: Vec<&str> = events.iter().map(|e| e.id().as_str()).collect();
    // Each row found by its whole key, then updated where it lies: with
    // `event_id = ANY(…)` the planner may read the queue's whole key range
    // while the table's statistics are older than its rows (see the task
    // view's lock of its rows).
    let query = sqlx::query(
        "UPDATE receiver_inbox SET applied = 0 WHERE ctid = ANY(ARRAY( \
           SELECT i.ctid FROM unnest($3::bpchar[]) AS k(event_id) \
           CROSS JOIN LATERAL (SELECT ctid FROM receiver_inbox WHERE consumer_name = $1 \
             AND queue_id = $2::bpchar AND event_id = k.event_id) i))",
    )
    .bind(scope.receiver.as_str())
    .bind(scope.queue_id.as_str())
    .bind(ids);
    traced(statement("UPDATE", Some(INBOX)), query.execute(conn)).await?;
    Ok(())
}
