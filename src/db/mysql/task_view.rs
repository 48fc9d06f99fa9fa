//! The task view's statements: the one that decides and writes an event
//! under its row's lock, the read of a committed row, and the set path's
//! lock, insert and update of many rows.

use sqlx::mysql::{MySql, MySqlArguments, MySqlConnection};
use sqlx::query::Query;
use sqlx::{Encode, Row, Type};

use super::statement;
use super::{errno, row};
use crate::db::engine::{Met, ViewRow};
use crate::db::trace::traced;
use crate::db::{sql, DbError};
use crate::event::Event;
use crate::ids::TaskId;
use crate::scope::InboxScope;

/// The table of the view's statements, as their spans name it.
const VIEWS: &str = "receiver_task_views";

// The ODKU branch reports which case it met through LAST_INSERT_ID(expr),
// whose value the server returns in the statement's OK packet. The insert
// branch never calls it and reports 0. This lets one round trip create or
// lock the row, compare versions and write, without a read-back.
const CASE_CREATED: u64 = 0;
const CASE_ADVANCED: u64 = 1;
const CASE_OLDER: u64 = 2;
const CASE_SAME_EVENT: u64 = 3;
const CASE_OTHER_EVENT_SAME_VERSION: u64 = 4;

/// One statement decides and writes. Assignments run left to right and see
/// the values assigned before them, so the case is computed first and
/// `task_version` is assigned last: every condition compares against the
/// stored version. The `?` placeholders repeat the event's values instead of
/// using `VALUES()`, which MySQL 8 deprecates.
const ADVANCE_SQL: &str = "\
INSERT INTO receiver_task_views
  (consumer_name, queue_id, task_id, task_version, last_event_id, last_state, last_result,
   applied_events, created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, 1, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE
  applied_events = applied_events + IF(LAST_INSERT_ID(CASE
      WHEN task_version < ? THEN 1
      WHEN task_version > ? THEN 2
      WHEN last_event_id = ? THEN 3
      ELSE 4 END) = 1, 1, 0),
  last_event_id = IF(task_version < ?, ?, last_event_id),
  last_state = IF(task_version < ?, ?, last_state),
  last_result = IF(task_version < ?, ?, last_result),
  updated_at = IF(task_version < ?, UTC_TIMESTAMP(6), updated_at),
  task_version = GREATEST(task_version, ?)";

/// Creates or locks `event`'s task row and, if the event's version is
/// higher, writes it: one `INSERT … ON DUPLICATE KEY UPDATE`, which takes
/// the row's exclusive lock whether it creates or updates. `None` when the
/// server reported a case the statement cannot make.
pub(crate) async fn advance(
    conn: &mut MySqlConnection,
    scope: &InboxScope,
    event: &Event,
) -> Result<Option<Met>, sqlx::Error> {
    let task = event.task();
    let version = task.version;
    let event_id = event.id().as_str();
    let state = task.state.as_str();
    let result = task.result.as_deref();
    let done = sqlx::query(ADVANCE_SQL)
        .bind(scope.receiver.as_str())
        .bind(scope.queue_id.as_str())
        .bind(task.id.as_str())
        .bind(version)
        .bind(event_id)
        .bind(state)
        .bind(result)
        // The CASE.
        .bind(version)
        .bind(version)
        .bind(event_id)
        // The conditional assignments.
        .bind(version)
        .bind(event_id)
        .bind(version)
        .bind(state)
        .bind(version)
        .bind(result)
        .bind(version)
        .bind(version)
        .execute(conn);
    let done = traced(statement("INSERT", Some(VIEWS)), done).await?;
    Ok(match done.last_insert_id() {
        CASE_CREATED => Some(Met::NoRow),
        CASE_ADVANCED => Some(Met::Lower),
        CASE_OLDER => Some(Met::Higher),
        CASE_SAME_EVENT => Some(Met::SameEvent),
        CASE_OTHER_EVENT_SAME_VERSION => Some(Met::OtherEvent),
        _ => None,
    })
}

/// Reads one task's view row through any executor.
pub(crate) async fn select<'e, E>(
    executor: E,
    scope: &InboxScope,
    task_id: &TaskId,
) -> Result<Option<ViewRow>, DbError>
where
    E: sqlx::Executor<'e, Database = MySql>,
{
    let row = sqlx::query(
        "SELECT task_version, last_event_id, last_state, last_result, applied_events \
         FROM receiver_task_views WHERE consumer_name = ? AND queue_id = ? AND task_id = ?",
    )
    .bind(scope.receiver.as_str())
    .bind(scope.queue_id.as_str())
    .bind(task_id.as_str())
    .fetch_optional(executor)
    .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    // The columns use a binary collation, which sqlx hands out as bytes.
    let text = |column: &str| -> Result<Option<String>, DbError> {
        let bytes: Option<Vec<u8>> = row.try_get(column)?;
        bytes
            .map(|b| String::from_utf8(b).map_err(|_| DbError::inconsistent()))
            .transpose()
    };
    let required = |column: &str| text(column)?.ok_or_else(DbError::inconsistent);
    Ok(Some((
        row.try_get("task_version")?,
        required("last_event_id")?,
        required("last_state")?,
        text("last_result")?,
        row.try_get("applied_events")?,
    )))
}

/// Locks the existing view rows of the events' tasks: task id, version,
/// last event id.
pub(crate) async fn lock_rows(
    conn: &mut MySqlConnection,
    scope: &InboxScope,
    events: &[&Event],
) -> Result<Vec<(String, u64, String)>, DbError> {
    let mut tasks: Vec<&str> = events.iter().map(|e| e.task().id.as_str()).collect();
    tasks.sort_unstable();
    tasks.dedup();
    let sql = format!(
        "SELECT task_id, task_version, last_event_id FROM receiver_task_views \
         WHERE consumer_name = ? AND queue_id = ? AND task_id IN ({}) FOR UPDATE",
        sql::list("?", tasks.len())
    );
    let mut query = sqlx::query(&sql)
        .bind(scope.receiver.as_str())
        .bind(scope.queue_id.as_str());
    for task in &tasks {
        query = query.bind(*task);
    }
    let rows = traced(
        statement("SELECT", Some(VIEWS)),
        query.fetch_all(&mut *conn),
    )
    .await?;
    rows.iter()
        .map(|r| {
            let version: u64 = r.try_get(1)?;
            let text = |i| row::text(r, i);
            Ok((text(0)?, version, text(2)?))
        })
        .collect()
}

/// Creates the rows of tasks that had none; `false` if one exists by now.
pub(crate) async fn insert_rows(
    conn: &mut MySqlConnection,
    scope: &InboxScope,
    rows: &[(&Event, u64)],
) -> Result<bool, sqlx::Error> {
    let sql = format!(
        "INSERT INTO receiver_task_views \
         (consumer_name, queue_id, task_id, task_version, last_event_id, last_state, last_result, \
          applied_events, created_at, updated_at) VALUES {}",
        sql::list(
            "(?, ?, ?, ?, ?, ?, ?, ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))",
            rows.len()
        )
    );
    let mut query = sqlx::query(&sql);
    for (event, advanced) in rows {
        let task = event.task();
        query = query
            .bind(scope.receiver.as_str())
            .bind(scope.queue_id.as_str())
            .bind(task.id.as_str())
            .bind(task.version)
            .bind(event.id().as_str())
            .bind(task.state.as_str())
            .bind(task.result.as_deref())
            .bind(*advanced);
    }
    match traced(statement("INSERT", Some(VIEWS)), query.execute(conn)).await {
        Ok(_) => Ok(true),
        Err(e) if errno::is_duplicate_key(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Advances the locked rows to their final event; `false` if the server
/// did not change exactly those rows.
pub(crate) async fn update_rows(
    conn: &mut MySqlConnection,
    scope: &InboxScope,
    rows: &[(&Event, u64)],
) -> Result<bool, sqlx::Error> {
    let case = format!("CASE task_id{} END", " WHEN ? THEN ?".repeat(rows.len()));
    let sql = format!(
        "UPDATE receiver_task_views SET \
         last_event_id = {c}, last_state = {c}, last_result = {c}, \
         applied_events = applied_events + {c}, task_version = {c}, \
         updated_at = UTC_TIMESTAMP(6) \
         WHERE consumer_name = ? AND queue_id = ? AND task_id IN ({})",
        sql::list("?", rows.len()),
        c = case,
    );
    let query = when_then(sqlx::query(&sql), rows, |e, _| e.id().as_str());
    let query = when_then(query, rows, |e, _| e.task().state.as_str());
    let query = when_then(query, rows, |e, _| e.task().result.as_deref());
    let query = when_then(query, rows, |_, advanced| advanced);
    let mut query = when_then(query, rows, |e, _| e.task().version)
        .bind(scope.receiver.as_str())
        .bind(scope.queue_id.as_str());
    for (event, _) in rows {
        query = query.bind(event.task().id.as_str());
    }
    let done = traced(statement("UPDATE", Some(VIEWS)), query.execute(conn)).await?;
    Ok(done.rows_affected() == rows.len() as u64)
}

/// Binds one `CASE task_id WHEN ? THEN ? … END`: each row's task id and
/// `value` of its event and count.
fn when_then<'q, T>(
    mut query: Query<'q, MySql, MySqlArguments>,
    rows: &[(&'q Event, u64)],
    value: impl Fn(&'q Event, u64) -> T,
) -> Query<'q, MySql, MySqlArguments>
where
    T: 'q + Encode<'q, MySql> + Type<MySql>,
{
    for &(event, advanced) in rows {
        query = query
            .bind(event.task().id.as_str())
            .bind(value(event, advanced));
    }
    query
}
