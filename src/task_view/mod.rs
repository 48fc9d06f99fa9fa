//! The receiver's task result view: the latest state and result per task.
//!
//! This is the business the `receiver` binary runs inside the inbox
//! transaction. It is the receiver's read model, not the platform's
//! authoritative task state, and it is never rebuilt from a later `GetTask`:
//! every change comes from an event, and only a higher task version changes
//! it.
//!
//! [`advance`] creates or locks the task's row and decides in one statement
//! (see its docs). The outcomes:
//!
//! | stored version vs. event | effect                                   | verdict |
//! |--------------------------|------------------------------------------|---------|
//! | no row                   | row created with the event               | applied |
//! | lower                    | row advanced, `applied_events + 1`       | applied |
//! | higher                   | nothing                                  | stale   |
//! | equal, same event id     | nothing                                  | stale   |
//! | equal, other event id    | nothing; the caller rolls back           | [`Conflict::VersionTaken`] |

mod notify;
mod set;

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use sqlx::mysql::{MySql, MySqlConnection};
use tower::Service;

use crate::db::engine::{Met, ViewRow};
use crate::db::{DbError, Engine};
use crate::delivery::Delivery;
use crate::event::{result_size, Event};
use crate::ids::TaskId;
use crate::inbox::{Applying, Conflict, InboxError, InboxStore, Verdict};
use crate::scope::InboxScope;

pub use self::notify::Notify;

/// What [`advance`] did to the view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advance {
    /// The view now reflects this event.
    Applied,
    /// The view already held this or a newer version; nothing changed.
    Stale,
}

/// What an event would do to its task's view, decided from what the view
/// holds: the rule of the table above. [`advance`] writes the same rule in
/// its statement (the database decides under the row lock); the set path
/// and read-only diagnoses decide with this function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// No view yet, or a lower version: the view moves to this event.
    Advances,
    /// A higher version, or this very event: nothing changes.
    Stale,
    /// The same version holds another event: a conflict.
    VersionTaken,
}

/// The [`Decision`] for an event of `version` with id `event_id`, against
/// the stored view's version and last event (`None`: no view yet).
pub fn decide(stored: Option<(u64, &str)>, version: u64, event_id: &str) -> Decision {
    match stored {
        None => Decision::Advances,
        Some((stored, _)) if stored < version => Decision::Advances,
        Some((stored, _)) if stored > version => Decision::Stale,
        Some((_, last_event)) if last_event == event_id => Decision::Stale,
        Some(_) => Decision::VersionTaken,
    }
}

/// Applies `event` to its task's view row, inside the caller's transaction.
///
/// The `INSERT … ON DUPLICATE KEY UPDATE` takes the row's exclusive lock
/// whether it creates or updates, so concurrent events of one task queue up
/// on that lock and each sees the version the previous one committed. No
/// placeholder row is ever written: a created row holds the event's values.
///
/// Same task, same version, other event id is a [`Conflict::VersionTaken`];
/// the caller must roll back (returning the error from an inner service does).
pub async fn advance(
    conn: &mut MySqlConnection,
    scope: &InboxScope,
    event: &Event,
) -> Result<Advance, InboxError> {
    advance_on::<MySql>(conn, scope, event).await
}

/// [`advance`] on the connection of any engine's transaction:
/// `advance_on::<sqlx::Postgres>(conn, scope, event)` in an inner service
/// on PostgreSQL (feature `postgres`).
pub async fn advance_on<E: Engine>(
    conn: &mut E::Connection,
    scope: &InboxScope,
    event: &Event,
) -> Result<Advance, InboxError> {
    let task = event.task();
    match E::advance(conn, scope, event).await? {
        Some(Met::NoRow | Met::Lower) => Ok(Advance::Applied),
        Some(Met::Higher | Met::SameEvent) => Ok(Advance::Stale),
        Some(Met::OtherEvent) => Err(InboxError::Conflict(Conflict::VersionTaken {
            task_id: task.id.clone(),
            version: task.version,
        })),
        None => Err(InboxError::Database(DbError::inconsistent())),
    }
}

/// The inner service of the `receiver` binary: applies each event to the task
/// result view and reports whether it advanced.
#[derive(Debug, Clone, Copy, Default)]
pub struct TaskView;

impl TaskView {
    /// The service.
    pub fn new() -> Self {
        TaskView
    }
}

impl<E: Engine> Service<Delivery<Applying<E>>> for TaskView {
    type Response = Verdict<E>;
    type Error = InboxError;
    type Future = Pin<Box<dyn Future<Output = Result<Verdict<E>, InboxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), InboxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, delivery: Delivery<Applying<E>>) -> Self::Future {
        let mut applying = delivery.into_body();
        Box::pin(async move {
            let (conn, scope, event) = applying.split();
            match advance_on::<E>(conn, scope, event).await? {
                Advance::Applied => Ok(applying.applied()),
                Advance::Stale => Ok(applying.stale()),
            }
        })
    }
}

/// Reads the committed view of one task on one of the store's own
/// connections, in a session that is ended before this returns.
pub async fn load_committed<E: Engine>(
    store: &InboxStore<E>,
    task_id: &TaskId,
) -> Result<Option<TaskViewRow>, DbError> {
    let mut session = store.session().await?;
    let view = E::select_view_on(session.connection(), store.scope(), task_id).await?;
    session.rollback().await?;
    Ok(view.map(TaskViewRow::of))
}

/// The committed view of `task_id` in `scope`, read on a connection of
/// engine `E` (what [`load`] reads through an executor).
pub(crate) async fn load_on<E: Engine>(
    conn: &mut E::Connection,
    scope: &InboxScope,
    task_id: &TaskId,
) -> Result<Option<TaskViewRow>, DbError> {
    Ok(E::select_view_on(conn, scope, task_id)
        .await?
        .map(TaskViewRow::of))
}

/// One row of the task result view, as committed.
#[derive(Clone, PartialEq, Eq)]
pub struct TaskViewRow {
    /// Highest task version applied.
    pub task_version: u64,
    /// The event that brought the view to that version.
    pub last_event_id: String,
    /// The task state at that version.
    pub last_state: String,
    /// The canonical result text at that version, if any.
    pub last_result: Option<String>,
    /// How many events advanced this view.
    pub applied_events: u64,
}

impl TaskViewRow {
    fn of((task_version, last_event_id, last_state, last_result, applied_events): ViewRow) -> Self {
        Self {
            task_version,
            last_event_id,
            last_state,
            last_result,
            applied_events,
        }
    }
}

impl std::fmt::Debug for TaskViewRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskViewRow")
            .field("task_version", &self.task_version)
            .field("last_event_id", &self.last_event_id)
            .field("last_state", &self.last_state)
            .field("last_result", &result_size(self.last_result.as_deref()))
            .field("applied_events", &self.applied_events)
            .finish()
    }
}

/// Reads the committed view of one task, through any executor: a pool or
/// connection of one's own, or a [`Session`](crate::inbox::Session)'s
/// connection (see [`load_committed`]).
pub async fn load<'e, X, E>(
    executor: X,
    scope: &'e InboxScope,
    task_id: &'e TaskId,
) -> Result<Option<TaskViewRow>, DbError>
where
    X: sqlx::Executor<'e, Database = E> + 'e,
    E: Engine,
{
    Ok(E::select_view(executor, scope, task_id)
        .await?
        .map(TaskViewRow::of))
}
