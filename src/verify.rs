//! `receiver verify`: read both tables once and check that they agree with
//! each other and with the rules the inbox writes them by, the way
//! `pg_amcheck` checks a database: one finding per line, a summary last.
//!
//! Checks:
//!
//! 1. every inbox row: its digest is the SHA-256 of its stored canonical
//!    text, that text is in canonical form, and it is a valid event with
//!    this row's queue and event id;
//! 2. every task view: its `last_event_id` is an applied inbox row of the
//!    same task with the view's version and state;
//! 3. every task: `applied_events` equals the number of its applied inbox
//!    rows (those present plus those `receiver prune` deleted and counted
//!    in `receiver_pruned`), no applied inbox row has a version above the
//!    view's, and no applied inbox row lacks a view;
//! 4. where `receiver_outbox` is there: every effect belongs to an event
//!    the inbox holds (its consumer, queue and event), none is an orphan.
//!
//! After a prune, checks 2 and 3 keep their meaning: prune never deletes a
//! view's last event, and counts each task's deleted rows in the same
//! transaction as the `DELETE`. What is no longer checked is check 1 on
//! the deleted rows (their text is in prune's archive, if one was kept),
//! and check 3's "no applied row above the view's version" and "no applied
//! row without a view" for them. Check 4 keeps its meaning too: prune
//! deletes an inbox row only once no effect of its event is left in the
//! outbox (its sent effects go first, its pending and dead ones keep it),
//! so an orphan is damage, never retention.
//!
//! Everything runs on one connection inside one read-only `REPEATABLE READ`
//! transaction with a consistent snapshot, so a verify of a database that
//! consumers are writing to sees one moment, not a mix; it takes no locks
//! and needs only `SELECT`. The tables are read in primary-key order in
//! pages of [`PAGE_ROWS`]; the per-task totals of check 3 are summed by the
//! server and streamed, so the verifier's memory does not grow with the
//! number of events. Findings carry ids, never bodies.

use std::collections::HashMap;
use std::fmt;

use sha2::{Digest as _, Sha256};

use crate::db::any::{on_engine, AnyConnection};
use crate::db::record::{OrphanEffect, PageKey, TaskTotal, ViewPageRow};
use crate::db::schema::{self, OUTBOX_TABLE, PRUNED_TABLE};
use crate::db::{DbError, Dsn, Engine};
use crate::digest;
use crate::event::Event;
use crate::ids::TaskId;

/// Rows read per page.
pub const PAGE_ROWS: u32 = 1_000;

/// One inconsistency.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// What kind of damage, a stable word (see [`Kind`]).
    pub kind: Kind,
    /// The receiver name of the row.
    pub consumer: String,
    /// The queue of the row.
    pub queue: String,
    /// The event, when the finding is about one.
    pub event: Option<String>,
    /// The task, when the finding is about one.
    pub task: Option<String>,
    /// What exactly is wrong (ids and numbers only).
    pub detail: String,
}

/// The kinds of inconsistency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Kind {
    /// The stored digest is not the SHA-256 of the stored canonical text.
    DigestMismatch,
    /// The stored text is not in canonical form (or not strict JSON).
    NotCanonical,
    /// The stored text is not a valid event of this row's queue and id.
    InvalidEvent,
    /// A view's last event has no inbox row.
    LastEventMissing,
    /// A view's last event is an inbox row that did not advance a view.
    LastEventNotApplied,
    /// A view's last event is of another task, version or state.
    LastEventMismatch,
    /// `applied_events` differs from the task's applied inbox rows.
    AppliedEventsMismatch,
    /// An applied inbox row has a higher version than its task's view.
    ViewBehindEvent,
    /// An applied inbox row's task has no view.
    ViewMissing,
    /// An effect of `receiver_outbox` belongs to an event the inbox does
    /// not hold.
    OrphanEffect,
}

impl Kind {
    /// The stable word printed for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::DigestMismatch => "digest_mismatch",
            Kind::NotCanonical => "not_canonical",
            Kind::InvalidEvent => "invalid_event",
            Kind::LastEventMissing => "last_event_missing",
            Kind::LastEventNotApplied => "last_event_not_applied",
            Kind::LastEventMismatch => "last_event_mismatch",
            Kind::AppliedEventsMismatch => "applied_events_mismatch",
            Kind::ViewBehindEvent => "view_behind_event",
            Kind::ViewMissing => "view_missing",
            Kind::OrphanEffect => "orphan_effect",
        }
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "problem={} receiver={} queue={}",
            self.kind.as_str(),
            self.consumer,
            self.queue
        )?;
        if let Some(task) = &self.task {
            write!(f, " task={task}")?;
        }
        if let Some(event) = &self.event {
            write!(f, " event={event}")?;
        }
        write!(f, ": {}", self.detail)
    }
}

/// What a verify read and found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Summary {
    /// Inbox rows read.
    pub inbox_rows: u64,
    /// Task view rows read.
    pub task_views: u64,
    /// Inbox rows `receiver prune` deleted, as `receiver_pruned` counts
    /// them (0 without that table, which prune cannot run without); `None`
    /// when the account may not read it: check 3 then counts no pruned
    /// row, and says so where it finds a task with fewer rows than its
    /// `applied_events`.
    pub pruned_rows: Option<u64>,
    /// What check 4 read of `receiver_outbox`.
    pub effects: Effects,
    /// Inconsistencies found.
    pub problems: u64,
}

/// What a verify read of `receiver_outbox`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Effects {
    /// The table is not there, as far as the account may see (MySQL shows
    /// no table the account holds no grant on): nothing to check.
    #[default]
    Absent,
    /// The table is there and the account may not read it: check 4 did
    /// not run (grant `SELECT` on `receiver_outbox`).
    Unreadable,
    /// This many effects were checked.
    Checked(u64),
}

impl Summary {
    /// Whether nothing was found.
    pub fn ok(&self) -> bool {
        self.problems == 0
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "verify inbox_rows={} task_views={} pruned_rows={}",
            self.inbox_rows,
            self.task_views,
            self.pruned_rows
                .map_or_else(|| "unknown".to_owned(), |n| n.to_string()),
        )?;
        // Said only where the outbox is there: a receiver without one
        // reads as it always did.
        match self.effects {
            Effects::Absent => {}
            Effects::Unreadable => f.write_str(" effects=unknown")?,
            Effects::Checked(n) => write!(f, " effects={n}")?,
        }
        write!(f, " problems={} ok={}", self.problems, self.ok())
    }
}

/// Where a verify reports as it goes.
pub trait Report {
    /// The number of rows there are to read (both tables, and the
    /// outbox's effects where it is there), once known.
    fn total(&mut self, rows: u64);
    /// `rows` more rows were read.
    fn advance(&mut self, rows: u64);
    /// An inconsistency was found.
    fn finding(&mut self, finding: Finding);
}

/// Verifies the receiver's tables in the DSN's database, on the engine
/// its address names.
pub async fn run(dsn: &Dsn, report: &mut dyn Report) -> Result<Summary, DbError> {
    let mut conn = AnyConnection::open(dsn).await?;
    let summary = on_engine!(&mut conn, c => run_on::<E>(c, report).await);
    conn.close().await;
    summary
}

async fn run_on<E: Engine>(
    conn: &mut E::Connection,
    report: &mut dyn Report,
) -> Result<Summary, DbError> {
    E::begin_snapshot(&mut *conn).await?;
    let mut counting = Counting {
        inner: report,
        summary: Summary::default(),
    };
    let (inbox, views) = E::row_counts(&mut *conn).await?;
    let effects = effect_count::<E>(&mut *conn).await?;
    let effect_rows = match effects {
        Effects::Checked(n) => n,
        _ => 0,
    };
    counting.inner.total(inbox + views + effect_rows);
    let tally = pruned_rows::<E>(&mut *conn).await?;
    counting.summary.pruned_rows = match tally {
        Tally::Counted(n) => Some(n),
        Tally::Absent => Some(0),
        Tally::Unreadable => None,
    };
    counting.summary.effects = effects;
    let unreadable = inbox_rows::<E>(&mut *conn, &mut counting).await?;
    task_views::<E>(&mut *conn, &mut counting).await?;
    task_totals::<E>(&mut *conn, &mut counting, tally, &unreadable).await?;
    if let Effects::Checked(n) = effects {
        orphan_effects::<E>(&mut *conn, &mut counting).await?;
        counting.inner.advance(n);
    }
    E::end_snapshot(conn).await?;
    Ok(counting.summary)
}

struct Counting<'a> {
    inner: &'a mut dyn Report,
    summary: Summary,
}

impl Counting<'_> {
    /// A finding about a row of `consumer`'s `queue`.
    fn found(
        &mut self,
        kind: Kind,
        (consumer, queue): (&str, &str),
        event: Option<&str>,
        task: Option<&str>,
        detail: String,
    ) {
        self.summary.problems += 1;
        self.inner.finding(Finding {
            kind,
            consumer: consumer.to_owned(),
            queue: queue.to_owned(),
            event: event.map(str::to_owned),
            task: task.map(str::to_owned),
            detail,
        });
    }
}

/// Check 1, page by page in key order: the keys of the rows whose text is
/// not an event, which check 3 leaves out.
async fn inbox_rows<E: Engine>(
    conn: &mut E::Connection,
    out: &mut Counting<'_>,
) -> Result<Vec<PageKey>, DbError> {
    let mut unreadable = Vec::new();
    let mut after: Option<PageKey> = None;
    loop {
        let rows = E::inbox_page(&mut *conn, after.as_ref(), PAGE_ROWS).await?;
        let Some(last) = rows.last() else {
            return Ok(unreadable);
        };
        after = Some((last.0.clone(), last.1.clone(), last.2.clone()));
        for (consumer, queue, event, stored_digest, canonical) in &rows {
            let found = check_inbox_row(queue, event, stored_digest, canonical);
            if found.iter().any(|(kind, _)| *kind == Kind::InvalidEvent) {
                unreadable.push((consumer.clone(), queue.clone(), event.clone()));
            }
            for (kind, detail) in found {
                out.found(kind, (consumer, queue), Some(event), None, detail);
            }
        }
        out.summary.inbox_rows += rows.len() as u64;
        out.inner.advance(rows.len() as u64);
    }
}

/// Check 1 for one row.
fn check_inbox_row(
    queue: &str,
    event: &str,
    stored_digest: &str,
    canonical: &str,
) -> Vec<(Kind, String)> {
    let mut found = Vec::new();
    let actual = hex::encode(Sha256::digest(canonical.as_bytes()));
    if stored_digest != actual {
        found.push((
            Kind::DigestMismatch,
            format!("stored sha256={stored_digest}, the stored text has sha256={actual}"),
        ));
    }
    match digest::canonicalize(canonical.as_bytes()) {
        Ok(c) if c.as_str() == canonical => {}
        Ok(_) => found.push((
            Kind::NotCanonical,
            "the stored text is not in canonical form".to_owned(),
        )),
        Err(e) => found.push((
            Kind::NotCanonical,
            format!("the stored text is not strict JSON: {e}"),
        )),
    }
    match Event::from_json(canonical.as_bytes()) {
        Ok(e) if e.id().as_str() != event => found.push((
            Kind::InvalidEvent,
            format!("the stored event has id {}", e.id()),
        )),
        Ok(e) if e.queue_id().as_str() != queue => found.push((
            Kind::InvalidEvent,
            format!("the stored event is of queue {}", e.queue_id()),
        )),
        Ok(_) => {}
        Err(e) => found.push((Kind::InvalidEvent, format!("not a valid event: {e}"))),
    }
    found
}

/// The facts of one inbox row that a view is checked against.
struct StoredEvent {
    applied: bool,
    task: Option<TaskId>,
    version: u64,
    state: String,
}

/// Check 2, page by page in key order; each page's last events are read by
/// primary key in one query.
async fn task_views<E: Engine>(
    conn: &mut E::Connection,
    out: &mut Counting<'_>,
) -> Result<(), DbError> {
    let mut after: Option<PageKey> = None;
    loop {
        let views = E::view_page(&mut *conn, after.as_ref(), PAGE_ROWS).await?;
        let Some(last) = views.last() else {
            return Ok(());
        };
        after = Some((last.0.clone(), last.1.clone(), last.2.clone()));
        let events = last_events::<E>(&mut *conn, &views).await?;
        for (consumer, queue, task, version, event, state) in &views {
            let key = (consumer.clone(), queue.clone(), event.clone());
            let (kind, detail) = match events.get(&key) {
                None => (Kind::LastEventMissing, "the view's last event has no inbox row".to_owned()),
                Some(stored) if !stored.applied => (
                    Kind::LastEventNotApplied,
                    "the view's last event is recorded as not applied".to_owned(),
                ),
                // A damaged text was reported by check 1; here it is named,
                // not read as version 0 of no state.
                Some(stored) if stored.task.is_none() => (
                    Kind::LastEventMismatch,
                    format!(
                        "the view has version {version} state {state}, its last event's stored text cannot be read as an event"
                    ),
                ),
                Some(stored)
                    if stored.task.as_ref().map(TaskId::as_str) != Some(task.as_str())
                        || stored.version != *version
                        || stored.state != *state =>
                {
                    (
                        Kind::LastEventMismatch,
                        format!(
                            "the view has version {version} state {state}, its last event version {} state {}{}",
                            stored.version,
                            stored.state,
                            match &stored.task {
                                Some(t) if t.as_str() != task => format!(" of task {t}"),
                                _ => String::new(),
                            }
                        ),
                    )
                }
                Some(_) => continue,
            };
            out.found(kind, (consumer, queue), Some(event), Some(task), detail);
        }
        out.summary.task_views += views.len() as u64;
        out.inner.advance(views.len() as u64);
    }
}

/// The inbox rows of the views' last events, by primary key.
async fn last_events<E: Engine>(
    conn: &mut E::Connection,
    views: &[ViewPageRow],
) -> Result<HashMap<PageKey, StoredEvent>, DbError> {
    // The views of a page share their receiver name and queue in runs (key
    // order); one lookup per run is a set of point lookups on the primary
    // key.
    let mut found = HashMap::with_capacity(views.len());
    for run in views.chunk_by(|a, b| (&a.0, &a.1) == (&b.0, &b.1)) {
        let events: Vec<&str> = run.iter().map(|view| view.4.as_str()).collect();
        for (consumer, queue, event, applied, canonical) in
            E::last_events(&mut *conn, &run[0].0, &run[0].1, &events).await?
        {
            // A damaged text was reported by check 1; here it only cannot match.
            let parsed = Event::from_json(canonical.as_bytes()).ok();
            let task = parsed.as_ref().map(Event::task);
            found.insert(
                (consumer, queue, event),
                StoredEvent {
                    applied,
                    task: task.map(|t| t.id.clone()),
                    version: task.map_or(0, |t| t.version),
                    state: task.map_or_else(String::new, |t| t.state.as_str().to_owned()),
                },
            );
        }
    }
    Ok(found)
}

/// Whether `receiver_pruned` is there and this account may not read it:
/// `verify` run as it after a prune would then report each task prune took
/// rows of as an `applied_events` mismatch, which the grant of `SELECT` on
/// `receiver_pruned` mends (`receiver check` warns of it). Asked with a
/// statement that touches no row, in a transaction rolled back.
///
/// MySQL hides a table from an account that holds no grant on it, and
/// refuses it the same way whether the table is there or not: there the
/// answer is `true` only for an account that holds another grant on it.
pub async fn tally_unreadable(dsn: &Dsn) -> Result<bool, DbError> {
    let mut conn = AnyConnection::open(dsn).await?;
    let unreadable = on_engine!(&mut conn, c => tally_unreadable_on::<E>(c).await);
    conn.close().await;
    unreadable
}

async fn tally_unreadable_on<E: Engine>(conn: &mut E::Connection) -> Result<bool, DbError> {
    let probe = schema::privilege_probe(PRUNED_TABLE, "SELECT");
    E::begin(&mut *conn).await?;
    let read = E::probe(&mut *conn, &probe).await.map_err(DbError::from);
    E::end(&mut *conn, false).await?;
    match read {
        Ok(()) => Ok(false),
        Err(e) if e.lacks_table_privilege() => E::tally_exists(conn).await,
        Err(e) if e.missing_table() == Some(PRUNED_TABLE) => Ok(false),
        Err(e) => Err(e),
    }
}

/// What `receiver_pruned` can tell check 3.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tally {
    /// The table is read: this many rows were pruned in all.
    Counted(u64),
    /// The table is not there: a database initialized without it (plain
    /// `receiver init`, or before prune existed). Prune refuses to run
    /// without it, so no row was pruned here; check 3 is exact and
    /// explains no missing row away.
    Absent,
    /// The account may not read it (which the server also answers an
    /// account without a grant on it for a table that does not exist, as
    /// after a plain `receiver init`). Check 3 stays exact — a task with
    /// fewer rows than its `applied_events` is reported, never explained
    /// away — and its finding says which grant would tell a prune from
    /// damage, and that no prune ran where the table is missing.
    Unreadable,
}

async fn pruned_rows<E: Engine>(conn: &mut E::Connection) -> Result<Tally, DbError> {
    match E::pruned_total(conn).await {
        Ok(n) => Ok(Tally::Counted(n)),
        Err(e) if e.missing_table() == Some(PRUNED_TABLE) => Ok(Tally::Absent),
        Err(e) if e.lacks_table_privilege() => Ok(Tally::Unreadable),
        Err(e) => Err(e),
    }
}

/// What `receiver_outbox` holds for check 4, read in the snapshot: a
/// missing table, or one the account may not read, leaves the snapshot
/// usable.
async fn effect_count<E: Engine>(conn: &mut E::Connection) -> Result<Effects, DbError> {
    match E::effect_count(&mut *conn).await {
        Ok(n) => Ok(Effects::Checked(n)),
        Err(e) if e.missing_table() == Some(OUTBOX_TABLE) => Ok(Effects::Absent),
        // MySQL refuses a table the account holds no grant on the same way
        // whether it is there or not; it shows the table only to an account
        // that holds some grant on it.
        Err(e) if e.lacks_table_privilege() => match E::outbox_exists(conn).await? {
            true => Ok(Effects::Unreadable),
            false => Ok(Effects::Absent),
        },
        Err(e) => Err(e),
    }
}

/// Check 4: the effects whose event the inbox does not hold, found by the
/// server (each effect's event looked up by the inbox's primary key) and
/// streamed.
async fn orphan_effects<E: Engine>(
    conn: &mut E::Connection,
    out: &mut Counting<'_>,
) -> Result<(), DbError> {
    E::orphan_effects(conn, &mut |orphan: OrphanEffect| {
        let detail = format!(
            "effect {} (target {}, {}) belongs to an event the inbox does not hold",
            orphan.effect_id, orphan.target, orphan.state
        );
        out.found(
            Kind::OrphanEffect,
            (&orphan.consumer, &orphan.queue),
            Some(&orphan.event),
            None,
            detail,
        );
    })
    .await
}

/// Check 3: the server sums each task's applied inbox rows next to the
/// task's view and its pruned rows (the task of an event is inside its
/// canonical text, read by the server's JSON parser); the result is
/// streamed row by row.
async fn task_totals<E: Engine>(
    conn: &mut E::Connection,
    out: &mut Counting<'_>,
    tally: Tally,
    unreadable: &[PageKey],
) -> Result<(), DbError> {
    let counted = matches!(tally, Tally::Counted(_));
    E::task_totals(conn, counted, unreadable, &mut |total| {
        check_task(out, tally, total)
    })
    .await
}

/// Check 3 for one task.
fn check_task(out: &mut Counting<'_>, tally: Tally, total: TaskTotal) {
    let TaskTotal {
        consumer,
        queue,
        task,
        present,
        highest,
        views,
        counted,
        version,
        pruned,
    } = total;
    let applied = present + pruned;
    let at = (consumer.as_str(), queue.as_str());
    if views == 0 {
        if present > 0 {
            let detail = format!("{present} applied inbox row(s) but no view");
            out.found(Kind::ViewMissing, at, None, Some(&task), detail);
        }
        return;
    }
    let counted = counted.unwrap_or(0);
    let version = version.unwrap_or(0);
    if counted != applied {
        let detail = if tally == Tally::Unreadable && counted > applied {
            format!(
                "applied_events is {counted}, the task has {applied} applied inbox row(s) \
                 (if receiver prune ran here, grant this account SELECT on receiver_pruned, \
                 where it counts the rows it deleted; without that table, which \
                 `receiver init --keep-existing --retention` adds, no prune ran)"
            )
        } else if pruned == 0 {
            format!("applied_events is {counted}, the task has {applied} applied inbox row(s)")
        } else {
            format!(
                "applied_events is {counted}, the task has {present} applied inbox row(s) \
                 and {pruned} pruned"
            )
        };
        out.found(Kind::AppliedEventsMismatch, at, None, Some(&task), detail);
    }
    if highest > version {
        let detail =
            format!("the view has version {version}, an applied inbox row has version {highest}");
        out.found(Kind::ViewBehindEvent, at, None, Some(&task), detail);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(queue: &str, id: &str) -> String {
        let raw = format!(
            r#"{{"id":"{id}","type":"task.submitted","queue_id":"{queue}","occurred_at":"2026-11-30T08:02:44Z","task":{{"id":"{id}","version":1,"state":"PENDING"}}}}"#
        );
        digest::canonicalize(raw.as_bytes())
            .unwrap()
            .as_str()
            .to_owned()
    }

    const Q: &str = "0123456789abcdef0123456789abcdef";
    const E: &str = "fedcba9876543210fedcba9876543210";

    fn sha(text: &str) -> String {
        hex::encode(Sha256::digest(text.as_bytes()))
    }

    #[test]
    fn a_sound_row_has_no_finding() {
        let text = event(Q, E);
        assert!(check_inbox_row(Q, E, &sha(&text), &text).is_empty());
    }

    #[test]
    fn each_kind_of_row_damage_is_named() {
        let text = event(Q, E);
        let kinds = |found: Vec<(Kind, String)>| found.into_iter().map(|f| f.0).collect::<Vec<_>>();
        assert_eq!(
            kinds(check_inbox_row(Q, E, &"0".repeat(64), &text)),
            [Kind::DigestMismatch]
        );
        let spaced = text.replacen(':', ": ", 1);
        assert_eq!(
            kinds(check_inbox_row(Q, E, &sha(&spaced), &spaced)),
            [Kind::NotCanonical]
        );
        let other_queue = event("00000000000000000000000000000000", E);
        assert_eq!(
            kinds(check_inbox_row(Q, E, &sha(&other_queue), &other_queue)),
            [Kind::InvalidEvent]
        );
    }
}
