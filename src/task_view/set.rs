//! The task view's set path: a whole batch of first receipts in three
//! statements at most, with the outcomes of [`advance`](super::advance)
//! applied to the events one at a time.
//!
//! It locks the view rows of the batch's tasks (`SELECT … FOR UPDATE`),
//! decides every event against them in order, and writes each task's final
//! row once: one multi-row `INSERT` for the tasks that had none, one
//! `UPDATE` for those that advanced. A task without a row has nothing to
//! lock, so another transaction may create it meanwhile: the `INSERT` then
//! meets its key and the batch is declined, never overwritten. A conflict
//! (same version, other event) declines the batch too: one delivery at a
//! time, only that one fails.

use std::collections::HashMap;

use futures::future::BoxFuture;
use sqlx::mysql::{MySql, MySqlArguments, MySqlConnection};
use sqlx::query::Query;
use sqlx::{Encode, Row, Type};

use super::{decide, Decision, TaskView};
use crate::db::trace::{statement, traced};
use crate::db::{errno, row, sql};
use crate::event::Event;
use crate::inbox::{ApplySet, InboxError};
use crate::scope::InboxScope;

impl ApplySet for TaskView {
    fn apply_set<'a>(
        &'a self,
        conn: &'a mut MySqlConnection,
        scope: &'a InboxScope,
        events: &'a [&'a Event],
    ) -> BoxFuture<'a, Result<Option<Vec<bool>>, InboxError>> {
        Box::pin(apply_set(conn, scope, events))
    }
}

/// A task's view row as the batch leaves it; by default, a task without one.
#[derive(Default)]
struct View<'e> {
    version: u64,
    event: &'e str,
    /// The event whose state and result the row now holds, if the batch
    /// advanced it.
    latest: Option<&'e Event>,
    /// Events of the batch that advanced it.
    advanced: u64,
    /// Whether the row existed before the batch.
    existed: bool,
}

async fn apply_set(
    conn: &mut MySqlConnection,
    scope: &InboxScope,
    events: &[&Event],
) -> Result<Option<Vec<bool>>, InboxError> {
    let locked = lock_rows(conn, scope, events).await?;
    let mut views: HashMap<&str, View<'_>> = HashMap::new();
    for (task, version, event) in &locked {
        let view = View {
            version: *version,
            event,
            existed: true,
            ..View::default()
        };
        views.insert(task.as_str(), view);
    }
    let mut advanced = Vec::with_capacity(events.len());
    for event in events {
        let task = event.task();
        let view = views.entry(task.id.as_str()).or_default();
        let fresh = !view.existed && view.latest.is_none();
        let stored = (!fresh).then_some((view.version, view.event));
        let advances = match decide(stored, task.version, event.id().as_str()) {
            Decision::Advances => true,
            Decision::Stale => false,
            // A conflict fails its own delivery only: one at a time.
            Decision::VersionTaken => return Ok(None),
        };
        if advances {
            view.version = task.version;
            view.event = event.id().as_str();
            view.latest = Some(event);
            view.advanced += 1;
        }
        advanced.push(advances);
    }
    let mut created = Vec::new();
    let mut changed = Vec::new();
    for view in views.values() {
        match (view.latest, view.existed) {
            (Some(latest), false) => created.push((latest, view.advanced)),
            (Some(latest), true) => changed.push((latest, view.advanced)),
            (None, _) => {}
        }
    }
    if !created.is_empty() && !insert_rows(conn, scope, &created).await? {
        return Ok(None);
    }
    if !changed.is_empty() && !update_rows(conn, scope, &changed).await? {
        return Ok(None);
    }
    Ok(Some(advanced))
}

/// Locks the existing view rows of the events' tasks: task id, version,
/// last event id.
async fn lock_rows(
    conn: &mut MySqlConnection,
    scope: &InboxScope,
    events: &[&Event],
) -> Result<Vec<(String, u64, String)>, InboxError> {
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
        statement("SELECT", Some(super::VIEWS)),
        query.fetch_all(&mut *conn),
    )
    .await?;
    rows.iter()
        .map(|r| {
            let version: u64 = r.try_get(1)?;
            let text = |i| row::text(r, i).map_err(InboxError::Database);
            Ok((text(0)?, version, text(2)?))
        })
        .collect()
}

/// Creates the rows of tasks that had none; `false` if one exists by now.
async fn insert_rows(
    conn: &mut MySqlConnection,
    scope: &InboxScope,
    rows: &[(&Event, u64)],
) -> Result<bool, InboxError> {
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
    match traced(statement("INSERT", Some(super::VIEWS)), query.execute(conn)).await {
        Ok(_) => Ok(true),
        Err(e) if errno::is_duplicate_key(&e) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Advances the locked rows to their final event; `false` if the server
/// did not change exactly those rows.
async fn update_rows(
    conn: &mut MySqlConnection,
    scope: &InboxScope,
    rows: &[(&Event, u64)],
) -> Result<bool, InboxError> {
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
    let done = traced(statement("UPDATE", Some(super::VIEWS)), query.execute(conn)).await?;
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
