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

use super::{decide, Decision, TaskView};
use crate::db::Engine;
use crate::event::Event;
use crate::inbox::{ApplySet, InboxError};
use crate::scope::InboxScope;
use futures::future::BoxFuture;

impl<E: Engine> ApplySet<E> for TaskView {
    fn apply_set<'a>(
        &'a self,
        conn: &'a mut E::Connection,
        scope: &'a InboxScope,
        events: &'a [&'a Event],
    ) -> BoxFuture<'a, Result<Option<Vec<bool>>, InboxError>> {
        Box::pin(apply_set::<E>(conn, scope, events))
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

async fn apply_set<E: Engine>(
    conn: &mut E::Connection,
    scope: &InboxScope,
    events: &[&Event],
) -> Result<Option<Vec<bool>>, InboxError> {
    let locked = E::lock_views(conn, scope, events)
        .await
        .map_err(InboxError::Database)?;
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
    if !created.is_empty() && !E::insert_views(conn, scope, &created).await? {
        return Ok(None);
    }
    if !changed.is_empty() && !E::update_views(conn, scope, &changed).await? {
        return Ok(None);
    }
    Ok(Some(advanced))
}
