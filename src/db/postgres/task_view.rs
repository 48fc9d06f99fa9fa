//! The task view's statements on PostgreSQL.
//!
//! `task_version` is `numeric(20)` (every `u64`): it is bound and read as
//! text. An `INSERT … ON CONFLICT DO UPDATE … WHERE` locks the task's row
//! whether or not it writes: a created or advanced row answers in the same
//! round trip; a row it left alone is then read under that lock to tell a
//! higher version, the same event and another event apart.

use sqlx::postgres::PgConnection;
use sqlx::Row;

use super::inbox::NOW;
use super::placeholders;
use super::sqlstate::is_unique_violation;
use super::statement;
use crate::db::engine::{Met, ViewRow};
use crate::db::trace::traced;
use crate::db::DbError;
use crate::event::Event;
use crate::ids::TaskId;
use crate::scope::InboxScope;

/// The table of the view's statements, as their spans name it.
const VIEWS: &str = "receiver_task_views";

const COLUMNS: &str = "(consumer_name, queue_id, task_id, task_version, last_event_id, \
     last_state, last_result, applied_events, created_at, updated_at)";

/// Creates or locks `event`'s task row and writes the event if its version
/// is higher; what it met.
pub(crate) async fn advance(
    conn: &mut PgConnection,
    scope: &InboxScope,
    event: &Event,
) -> Result<Option<Met>, sqlx::Error> {
    let task = event.task();
    let version = task.version.to_string();
    let sql = format!(
        "INSERT INTO receiver_task_views AS v {COLUMNS} \
         VALUES ($1, $2, $3, $4::numeric, $5, $6, $7, 1, {NOW}, {NOW}) \
         ON CONFLICT (consumer_name, queue_id, task_id) DO UPDATE SET \
           last_event_id = EXCLUDED.last_event_id, last_state = EXCLUDED.last_state, \
           last_result = EXCLUDED.last_result, applied_events = v.applied_events + 1, \
           task_version = EXCLUDED.task_version, updated_at = EXCLUDED.updated_at \
         WHERE v.task_version < EXCLUDED.task_version \
         RETURNING (xmax = 0) AS created"
    );
    let written: Option<bool> = traced(
        statement("INSERT", Some(VIEWS)),
        sqlx::query_scalar(&sql)
            .bind(scope.receiver.as_str())
            .bind(scope.queue_id.as_str())
            .bind(task.id.as_str())
            .bind(&version)
            .bind(event.id().as_str())
            .bind(task.state.as_str())
            .bind(task.result.as_deref())
            .fetch_optional(&mut *conn),
    )
    .await?;
    if let Some(created) = written {
        return Ok(Some(if created { Met::NoRow } else { Met::Lower }));
    }
    let stored: Option<(String, String)> = traced(
        statement("SELECT", Some(VIEWS)),
        sqlx::query_as(
            "SELECT task_version::text, last_event_id FROM receiver_task_views \
             WHERE consumer_name = $1 AND queue_id = $2::bpchar AND task_id = $3::bpchar",
        )
        .bind(scope.receiver.as_str())
        .bind(scope.queue_id.as_str())
        .bind(task.id.as_str())
        .fetch_optional(conn),
    )
    .await?;
    let Some((stored, last_event)) = stored else {
        return Ok(None);
    };
    Ok(match stored.parse::<u64>() {
        Ok(stored) if stored > task.version => Some(Met::Higher),
        Ok(stored) if stored == task.version && last_event == event.id().as_str() => {
            Some(Met::SameEvent)
        }
        Ok(stored) if stored == task.version => Some(Met::OtherEvent),
        _ => None,
    })
}

const SELECT_VIEW: &str = "SELECT task_version::text, last_event_id, last_state, last_result, \
     applied_events FROM receiver_task_views \
     WHERE consumer_name = $1 AND queue_id = $2::bpchar AND task_id = $3::bpchar";

/// Reads one task's view row through any executor.
pub(crate) async fn select<'e, X>(
    executor: X,
    scope: &InboxScope,
    task_id: &TaskId,
) -> Result<Option<ViewRow>, DbError>
where
    X: sqlx::Executor<'e, Database = sqlx::Postgres>,
{
    let row: Option<(String, String, String, Option<String>, i64)> = sqlx::query_as(SELECT_VIEW)
        .bind(scope.receiver.as_str())
        .bind(scope.queue_id.as_str())
        .bind(task_id.as_str())
        .fetch_optional(executor)
        .await?;
    row.map(|(version, event, state, result, applied)| {
        Ok((
            version.parse().map_err(|_| DbError::inconsistent())?,
            event,
            state,
            result,
            u64::try_from(applied).map_err(|_| DbError::inconsistent())?,
        ))
    })
    .transpose()
}

/// Locks the existing view rows of the events' tasks: task id, version,
/// last event id.
pub(crate) async fn lock_rows(
    conn: &mut PgConnection,
    scope: &InboxScope,
    events: &[&Event],
) -> Result<Vec<(String, u64, String)>, DbError> {
    let mut tasks: Vec<&str> = events.iter().map(|e| e.task().id.as_str()).collect();
    tasks.sort_unstable();
    tasks.dedup();
    let rows = traced(
        statement("SELECT", Some(VIEWS)),
        // One lookup of the whole key per task, in the sorted list's order
        // (the order every batch locks in): with `task_id = ANY(…)`, or a
        // join, the planner may read the queue's whole key range and
        // filter when the table's statistics are older than its rows,
        // which a new table's are for minutes.
        sqlx::query(
            "SELECT v.task_id, v.task_version::text, v.last_event_id \
             FROM unnest($3::bpchar[]) AS k(task_id) \
             CROSS JOIN LATERAL (SELECT task_id, task_version, last_event_id \
               FROM receiver_task_views WHERE consumer_name = $1 AND queue_id = $2::bpchar \
               AND task_id = k.task_id FOR UPDATE) v",
        )
        .bind(scope.receiver.as_str())
        .bind(scope.queue_id.as_str())
        .bind(tasks)
        .fetch_all(&mut *conn),
    )
    .await?;
    rows.iter()
        .map(|r| {
            let version: String = r.try_get(1)?;
            let version = version.parse().map_err(|_| DbError::inconsistent())?;
            Ok((r.try_get(0)?, version, r.try_get(2)?))
        })
        .collect()
}

/// Creates the rows of tasks that had none; `false` if one exists by now
/// (the transaction is then aborted; the caller rolls it back).
pub(crate) async fn insert_rows(
    conn: &mut PgConnection,
    scope: &InboxScope,
    rows: &[(&Event, u64)],
) -> Result<bool, sqlx::Error> {
    let values = placeholders(
        rows.len(),
        &["", "", "", "::numeric", "", "", "", ""],
        &[NOW, NOW],
    );
    let sql = format!("INSERT INTO receiver_task_views {COLUMNS} VALUES {values}");
    let mut query = sqlx::query(&sql);
    for (event, advanced) in rows {
        let task = event.task();
        query = query
            .bind(scope.receiver.as_str())
            .bind(scope.queue_id.as_str())
            .bind(task.id.as_str())
            .bind(task.version.to_string())
            .bind(event.id().as_str())
            .bind(task.state.as_str())
            .bind(task.result.as_deref())
            .bind(i64::try_from(*advanced).unwrap_or(i64::MAX));
    }
    match traced(statement("INSERT", Some(VIEWS)), query.execute(conn)).await {
        Ok(_) => Ok(true),
        Err(e) if is_unique_violation(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Advances the locked rows to their final event; `false` if the server
/// did not change exactly those rows.
pub(crate) async fn update_rows(
    conn: &mut PgConnection,
    scope: &InboxScope,
    rows: &[(&Event, u64)],
) -> Result<bool, sqlx::Error> {
    let values = placeholders(rows.len(), &[""; 6], &[]);
    let sql = format!(
        "UPDATE receiver_task_views AS v SET last_event_id = u.last_event_id, \
           last_state = u.last_state, last_result = u.last_result, \
           applied_events = v.applied_events + u.advanced::bigint, \
           task_version = u.task_version::numeric, updated_at = {NOW} \
         FROM (VALUES {values}) AS u(task_id, last_event_id, last_state, last_result, advanced, task_version) \
         WHERE v.consumer_name = ${a} AND v.queue_id = ${b}::bpchar AND v.task_id = u.task_id::bpchar",
        a = rows.len() * 6 + 1,
        b = rows.len() * 6 + 2,
    );
    let mut query = sqlx::query(&sql);
    for (event, advanced) in rows {
        let task = event.task();
        query = query
            .bind(task.id.as_str())
            .bind(event.id().as_str())
            .bind(task.state.as_str())
            .bind(task.result.as_deref())
            .bind(i64::try_from(*advanced).unwrap_or(i64::MAX))
            .bind(task.version.to_string());
    }
    let query = query
        .bind(scope.receiver.as_str())
        .bind(scope.queue_id.as_str());
    let done = traced(statement("UPDATE", Some(VIEWS)), query.execute(conn)).await?;
    Ok(done.rows_affected() == rows.len() as u64)
}
