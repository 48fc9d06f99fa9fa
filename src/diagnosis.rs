//! What a failed delivery would become if it came again, decided now and
//! read-only: `receiver failures` and `receiver replay` ask this of every
//! delivery a source gave up on, before anything is replayed.
//!
//! The answer comes from the code that decides a delivery for real: the
//! event is read and checked as the inbox reads it ([`Event::from_json`],
//! [`Event::check_queue`]), an existing inbox row is judged as the inbox
//! judges it (the stored digest against the copy's), and the view as the
//! task view decides ([`task_view::decide`]). Nothing is written and no
//! lock is taken: plain reads of committed rows, so the answer holds for
//! the moment it was read. A replay goes through the inbox like any
//! delivery, which decides again under its locks; the diagnosis only says
//! what to expect, and which deliveries would only fail again.

use sqlx::mysql::MySqlConnection;

use crate::db::any::{on_engine, AnyConnection};
use crate::db::{DbError, Dsn, Engine};
use crate::digest::Digest;
use crate::event::{readable_id, Event};
use crate::ids::{EventId, TaskId};
use crate::inbox::{committed_row, found, Conflict, InboxError};
use crate::scope::InboxScope;
use crate::task_view::{self, Decision};

/// What a delivery would become.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Diagnosis {
    /// It would be applied: the view would move to its version.
    Apply,
    /// Its inbox row is there with the same content: nothing would happen.
    Duplicate,
    /// A higher version is applied (or this very event, whose row is
    /// gone): it would be recorded without changing the view.
    Stale,
    /// It would fail again: a stored row with other content under its id,
    /// or another event at the same task version.
    Conflict(Conflict),
    /// It is not a valid event for this queue: why, as the inbox says it.
    Rejected(String),
}

impl Diagnosis {
    /// One word, as `receiver failures` prints and groups it: `apply`,
    /// `duplicate`, `stale`, `conflict` or `rejected`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Diagnosis::Apply => "apply",
            Diagnosis::Duplicate => "duplicate",
            Diagnosis::Stale => "stale",
            Diagnosis::Conflict(_) => "conflict",
            Diagnosis::Rejected(_) => "rejected",
        }
    }

    /// The words [`as_str`](Self::as_str) can return, in the order a summary
    /// lists them.
    pub const NAMES: [&'static str; 5] = ["apply", "duplicate", "stale", "conflict", "rejected"];

    /// Whether a replay could only fail again.
    pub fn fails_again(&self) -> bool {
        matches!(self, Diagnosis::Conflict(_) | Diagnosis::Rejected(_))
    }
}

/// A delivery's event as far as it can be read, and its [`Diagnosis`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnosed {
    /// The event id, when the bytes hold a readable one.
    pub event_id: Option<EventId>,
    /// The task, when the event is valid.
    pub task_id: Option<TaskId>,
    /// The task version the event carries, when it is valid.
    pub version: Option<u64>,
    /// The digest of its canonical form, when it is valid.
    pub digest: Option<Digest>,
    /// What it would become.
    pub diagnosis: Diagnosis,
}

/// One connection to the receiver's database for a series of diagnoses in
/// one scope: what `receiver failures` holds while it goes through a
/// source's failed deliveries.
pub struct Diagnoser {
    conn: AnyConnection,
    scope: InboxScope,
    server: String,
}

impl std::fmt::Debug for Diagnoser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Diagnoser")
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

impl Diagnoser {
    /// Connects to the receiver's database, on the engine its address
    /// names (an account with `SELECT` on its two tables is enough).
    pub async fn connect(dsn: &Dsn, scope: InboxScope) -> Result<Self, DbError> {
        let mut conn = AnyConnection::open(dsn).await?;
        let server = on_engine!(&mut conn, c => server_of::<E>(c).await)?;
        Ok(Self {
            conn,
            scope,
            server,
        })
    }

    /// The server the diagnoses read from, as `host:port`: on an address
    /// of several hosts, the one that takes writes when it connected.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The scope the deliveries are diagnosed in.
    pub fn scope(&self) -> &InboxScope {
        &self.scope
    }

    /// Diagnoses one delivery's event bytes (see [`diagnose`]).
    pub async fn diagnose(&mut self, raw: &[u8]) -> Result<Diagnosed, DbError> {
        on_engine!(&mut self.conn, conn => diagnose_on::<E>(conn, &self.scope, raw).await)
    }

    /// Ends the connection.
    pub async fn close(self) {
        self.conn.close().await;
    }
}

/// The server `conn` reached, as `host:port`.
async fn server_of<E: Engine>(conn: &mut E::Connection) -> Result<String, DbError> {
    Ok(E::server_address(conn).await?)
}

/// Diagnoses the event bytes `raw` of a delivery to `scope`, on `conn`
/// (`SELECT` on the receiver's two tables is all it needs).
pub async fn diagnose(
    conn: &mut MySqlConnection,
    scope: &InboxScope,
    raw: &[u8],
) -> Result<Diagnosed, DbError> {
    diagnose_on::<sqlx::MySql>(conn, scope, raw).await
}

/// [`diagnose`] on a connection of engine `E`.
pub async fn diagnose_on<E: Engine>(
    conn: &mut E::Connection,
    scope: &InboxScope,
    raw: &[u8],
) -> Result<Diagnosed, DbError> {
    let event = match Event::from_json(raw)
        .and_then(|event| event.check_queue(&scope.queue_id).map(|()| event))
    {
        Ok(event) => event,
        Err(e) => {
            return Ok(Diagnosed {
                event_id: readable_id(raw),
                task_id: None,
                version: None,
                digest: None,
                diagnosis: Diagnosis::Rejected(InboxError::from(e).to_string()),
            })
        }
    };
    let diagnosis = match committed_row::<E>(&mut *conn, scope, event.id())
        .await
        .map_err(database)?
    {
        Some((stored, applied)) => match found(&event, stored, applied) {
            // `found` answers a duplicate or a conflict, nothing else.
            Ok(_) => Diagnosis::Duplicate,
            Err(InboxError::Conflict(conflict)) => Diagnosis::Conflict(conflict),
            Err(e) => return Err(database(e)),
        },
        None => {
            let task = event.task();
            let view = task_view::load_on::<E>(conn, scope, &task.id).await?;
            let stored = view
                .as_ref()
                .map(|v| (v.task_version, v.last_event_id.as_str()));
            match task_view::decide(stored, task.version, event.id().as_str()) {
                Decision::Advances => Diagnosis::Apply,
                Decision::Stale => Diagnosis::Stale,
                Decision::VersionTaken => Diagnosis::Conflict(Conflict::VersionTaken {
                    task_id: task.id.clone(),
                    version: task.version,
                }),
            }
        }
    };
    Ok(Diagnosed {
        event_id: Some(event.id().clone()),
        task_id: Some(event.task().id.clone()),
        version: Some(event.task().version),
        digest: Some(*event.canonical().digest()),
        diagnosis,
    })
}

/// The database error inside an inbox error that reading committed rows
/// can give.
fn database(e: InboxError) -> DbError {
    match e {
        InboxError::Database(e) => e,
        _ => DbError::inconsistent(),
    }
}
