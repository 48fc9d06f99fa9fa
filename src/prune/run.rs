//! The prune itself: count, then batch after batch until the window is
//! empty or a stop is asked for.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::db::any::{on_engine, AnyConnection};
use crate::db::{Dsn, Engine};
use crate::event::Event;
use crate::retry::Backoff;

use super::effects;
use super::privileges::{check_privileges_on, outbox_on};
use super::{Archive, Plan, PruneError, PrunedRow};

/// How long a batch waits for a row lock: a consumer holds the row of a
/// redelivered old event only for its own short transaction. Well inside
/// the 10 s a stopped command has to end in.
const LOCK_WAIT_SECONDS: u32 = 3;

/// Runs of a batch that the server rolled back (a deadlock, a lost
/// certification, a lock wait, a broken connection) before prune gives up.
const BATCH_ATTEMPTS: u32 = 5;

/// What the window holds, counted before anything is deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Count {
    /// Rows of the scope received before the window.
    pub rows: u64,
    /// Their canonical text, in bytes.
    pub bytes: u64,
    /// Of them, rows that are a view's last event, which prune keeps.
    pub latest: u64,
    /// Of the others, rows that effects in `receiver_outbox` keep: their
    /// event has an effect that is pending, dead, or sent within the
    /// window (0 without the outbox).
    pub kept_effects: u64,
    /// The scope's sent effects recorded before the window, which prune
    /// deletes (0 without the outbox).
    pub sent_effects: u64,
}

impl Count {
    /// The rows prune would delete (rows with unreadable text, which it
    /// also keeps, are not known before they are read).
    pub fn prunable(&self) -> u64 {
        self.rows
            .saturating_sub(self.latest)
            .saturating_sub(self.kept_effects)
    }
}

/// What a prune did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Summary {
    /// Rows deleted (and archived).
    pub deleted: u64,
    /// Their canonical text, in bytes.
    pub deleted_bytes: u64,
    /// Rows past the window kept because a view's last event is theirs.
    pub kept_latest: u64,
    /// Rows past the window kept because their text is not a readable
    /// event (`receiver verify` names them).
    pub kept_unreadable: u64,
    /// Rows past the window kept because their event still has effects in
    /// `receiver_outbox` (pending, dead, or sent within the window): an
    /// effect never outlives the inbox row of its event.
    pub kept_effects: u64,
    /// Sent effects recorded before the window, deleted (never a pending
    /// or dead one).
    pub effects_deleted: u64,
    /// Batches committed (of effects and of inbox rows).
    pub batches: u64,
    /// Batch runs the server rolled back and prune ran again.
    pub retries: u64,
    /// Whether a stop ended it before the window was empty.
    pub stopped: bool,
    /// How long it took (`elapsed_s` in JSON: seconds to the millisecond,
    /// as in the text report).
    #[serde(rename = "elapsed_s", serialize_with = "seconds")]
    pub elapsed: Duration,
}

fn seconds<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_millis() as f64 / 1000.0)
}

/// Where a prune reports as it goes.
pub trait Report {
    /// Whether the rows past the window should be counted first, for
    /// [`total`](Report::total): a scan of the scope, worth it for a
    /// progress bar someone watches, not for a job's log.
    fn wants_total(&self) -> bool {
        true
    }
    /// The rows past the window, once counted.
    fn total(&mut self, rows: u64);
    /// A batch ended: `examined` rows past the window were looked at,
    /// `deleted` of them deleted.
    fn advance(&mut self, examined: u64, deleted: u64);
}

/// Counts what the window holds, deleting nothing (`--dry-run`). Needs
/// only `SELECT`. On the engine the address names, as every prune.
pub async fn count(dsn: &Dsn, plan: &Plan) -> Result<Count, PruneError> {
    plan.check()?;
    let mut conn = AnyConnection::open(dsn).await?;
    let counted = on_engine!(&mut conn, c => count_on::<E>(c, plan).await);
    conn.close().await;
    counted
}

async fn count_on<E: Engine>(conn: &mut E::Connection, plan: &Plan) -> Result<Count, PruneError> {
    E::prune_session(&mut *conn, LOCK_WAIT_SECONDS).await?;
    let outbox = outbox_on::<E>(&mut *conn, &["SELECT"]).await?;
    let cutoff = cutoff::<E>(&mut *conn, plan.older_than).await?;
    count_at::<E>(conn, plan, &cutoff, outbox).await
}

/// Prunes the plan's scope: checks the window and the account's grants,
/// counts (if the report wants a total), deletes the sent effects past the
/// window where `receiver_outbox` is there, then the inbox rows batch
/// after batch, each archived first, until no row is left past the window
/// or `stop` is cancelled (the batch under way ends first; a count under
/// way is given up; a batch the server rolled back is not run again). The
/// window's edge is fixed by the server's clock when it starts.
pub async fn run(
    dsn: &Dsn,
    plan: &Plan,
    archive: &mut dyn Archive,
    report: &mut dyn Report,
    stop: &CancellationToken,
) -> Result<Summary, PruneError> {
    plan.check()?;
    let conn = AnyConnection::open(dsn).await?;
    on_engine!(conn, conn => run_on::<E>(conn, dsn, plan, archive, report, stop).await)
}

async fn run_on<E: Engine>(
    mut conn: E::Connection,
    dsn: &Dsn,
    plan: &Plan,
    archive: &mut dyn Archive,
    report: &mut dyn Report,
    stop: &CancellationToken,
) -> Result<Summary, PruneError> {
    let started = Instant::now();
    E::prune_session(&mut conn, LOCK_WAIT_SECONDS).await?;
    let outbox = check_privileges_on::<E>(&mut conn).await?;
    let cutoff = cutoff::<E>(&mut conn, plan.older_than).await?;
    let mut summary = Summary::default();
    if report.wants_total() {
        tokio::select! {
            counted = count_at::<E>(&mut conn, plan, &cutoff, false) => report.total(counted?.rows),
            _ = stop.cancelled() => {}
        }
    }
    // The effects first: an inbox row goes only once its event has no
    // effect left, so its sent effects past the window must be gone.
    if outbox {
        effects::prune_sent::<E>(&mut conn, dsn, plan, &cutoff, stop, &mut summary).await?;
    }

    let mut after = String::new();
    'batches: loop {
        if stop.is_cancelled() {
            summary.stopped = true;
            break;
        }
        let found = candidates::<E>(&mut conn, plan, &cutoff, &after).await?;
        let Some(last) = found.last else {
            break;
        };
        after = last;
        summary.kept_latest += found.latest;
        let keys = found.keys;
        if keys.is_empty() {
            report.advance(found.latest, 0);
            continue;
        }
        let mut retry = Retry::new();
        let batch_started = Instant::now();
        let done = loop {
            match batch::<E>(&mut conn, plan, &cutoff, &keys, outbox, archive).await {
                Ok(done) => break done,
                Err(e) => {
                    if !retry
                        .again::<E>(e, &mut conn, dsn, stop, &mut summary)
                        .await?
                    {
                        break 'batches;
                    }
                }
            }
        };
        summary.deleted += done.deleted;
        summary.deleted_bytes += done.bytes;
        summary.kept_latest += done.kept_latest;
        summary.kept_unreadable += done.kept_unreadable;
        summary.kept_effects += done.kept_effects;
        summary.batches += u64::from(done.deleted > 0);
        report.advance(found.latest + keys.len() as u64, done.deleted);
        pause_after(plan, batch_started, stop).await;
    }
    let _ = sqlx::Connection::close(conn).await;
    summary.elapsed = started.elapsed();
    Ok(summary)
}

/// The pause after a batch that started at `started`, cut short by a stop.
pub(super) async fn pause_after(plan: &Plan, started: Instant, stop: &CancellationToken) {
    let pause = plan.pause_after(started.elapsed());
    if !pause.is_zero() {
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = stop.cancelled() => {}
        }
    }
}

/// How a batch the server rolled back is run again: up to
/// [`BATCH_ATTEMPTS`] runs with backoff, on a new connection when the old
/// one broke.
pub(super) struct Retry {
    attempt: u32,
    backoff: Backoff,
}

impl Retry {
    pub(super) fn new() -> Self {
        Self {
            attempt: 1,
            backoff: Backoff::new(Duration::from_millis(200), Duration::from_secs(2)),
        }
    }

    /// After a batch failed with `e`: `Ok(true)` to run it again (after
    /// the backoff, counted in `summary.retries`), `Ok(false)` when a stop
    /// was asked for (`summary.stopped`), `e` itself when it is not a
    /// rollback or the attempts are spent.
    pub(super) async fn again<E: Engine>(
        &mut self,
        e: PruneError,
        conn: &mut E::Connection,
        dsn: &Dsn,
        stop: &CancellationToken,
        summary: &mut Summary,
    ) -> Result<bool, PruneError> {
        let PruneError::Database(db) = &e else {
            return Err(e);
        };
        if !db.is_rolled_back() {
            return Err(e);
        }
        if stop.is_cancelled() {
            summary.stopped = true;
            return Ok(false);
        }
        if self.attempt >= BATCH_ATTEMPTS {
            return Err(e);
        }
        summary.retries += 1;
        tokio::time::sleep(self.backoff.next()).await;
        self.attempt += 1;
        if db.is_unavailable() {
            *conn = E::connect_one(dsn).await?;
            E::prune_session(&mut *conn, LOCK_WAIT_SECONDS).await?;
        }
        Ok(true)
    }
}

/// The window's edge by the server's clock, as text the server reads back.
async fn cutoff<E: Engine>(
    conn: &mut E::Connection,
    older_than: Duration,
) -> Result<String, PruneError> {
    let micros = u64::try_from(older_than.as_micros()).unwrap_or(u64::MAX);
    Ok(E::cutoff(conn, micros).await?)
}

/// What the window holds; with `outbox`, what the outbox deletes and
/// keeps too.
async fn count_at<E: Engine>(
    conn: &mut E::Connection,
    plan: &Plan,
    cutoff: &str,
    outbox: bool,
) -> Result<Count, PruneError> {
    let (rows, bytes, latest) = E::count_window(&mut *conn, &plan.scope, cutoff).await?;
    let (sent_effects, kept_effects) = match outbox {
        true => E::count_effects(conn, &plan.scope, cutoff).await?,
        false => (0, 0),
    };
    Ok(Count {
        rows,
        bytes,
        latest,
        kept_effects,
        sent_effects,
    })
}

/// The next keys past the window after `after`, found without locks.
struct Candidates {
    /// Rows to lock and delete: at most `batch_rows`, cut where their text
    /// passes `batch_bytes`.
    keys: Vec<String>,
    /// Rows passed over because a view names them as its last event.
    latest: u64,
    /// Where the next scan starts.
    last: Option<String>,
}

/// The next batch's keys. Each row's task is taken from where the
/// canonical form puts it (the first `"task":{"id":"…"`) and its view
/// looked up by primary key, so that the latest events are set aside
/// without being locked or read. The guess can only err on the safe side:
/// a row that some view names as its last event is that view's task's, so
/// setting it aside is right whatever the guess; a row the guess misses
/// is locked and checked again from its parsed event.
async fn candidates<E: Engine>(
    conn: &mut E::Connection,
    plan: &Plan,
    cutoff: &str,
    after: &str,
) -> Result<Candidates, PruneError> {
    let rows = E::candidates(conn, &plan.scope, cutoff, after, plan.batch_rows).await?;
    let mut found = Candidates {
        keys: Vec::with_capacity(rows.len()),
        latest: 0,
        last: None,
    };
    let mut bytes = 0u64;
    for (key, size, latest) in rows {
        if latest {
            found.latest += 1;
        } else {
            bytes += size;
            if !found.keys.is_empty() && bytes > plan.batch_bytes {
                break;
            }
            found.keys.push(key.clone());
        }
        found.last = Some(key);
    }
    Ok(found)
}

/// What one batch did.
struct Batch {
    deleted: u64,
    bytes: u64,
    kept_latest: u64,
    kept_unreadable: u64,
    kept_effects: u64,
}

/// One batch in one transaction; rolled back on any error. With `outbox`,
/// the rows whose event still has effects are kept.
async fn batch<E: Engine>(
    conn: &mut E::Connection,
    plan: &Plan,
    cutoff: &str,
    keys: &[String],
    outbox: bool,
    archive: &mut dyn Archive,
) -> Result<Batch, PruneError> {
    E::begin_batch(&mut *conn).await?;
    match locked_batch::<E>(&mut *conn, plan, cutoff, keys, outbox, archive).await {
        Ok(done) => {
            // Nothing deleted: only locks to let go of.
            E::end_batch(conn, done.deleted > 0).await?;
            Ok(done)
        }
        Err(e) => {
            let _ = E::end_batch(conn, false).await;
            Err(e)
        }
    }
}

/// Locks the batch's rows by key, keeps the latest events, unreadable
/// rows and (with `outbox`) the rows whose event has effects left,
/// archives, counts and deletes the rest.
async fn locked_batch<E: Engine>(
    conn: &mut E::Connection,
    plan: &Plan,
    cutoff: &str,
    keys: &[String],
    outbox: bool,
    archive: &mut dyn Archive,
) -> Result<Batch, PruneError> {
    let (consumer, queue) = (plan.scope.receiver.as_str(), plan.scope.queue_id.as_str());
    // A row deleted by another prune since it was found is not read; one
    // received again since (a redelivery after that prune) is newer than
    // the window and is not taken.
    let rows = E::batch_rows(&mut *conn, &plan.scope, cutoff, keys).await?;

    let mut read = Vec::with_capacity(rows.len());
    let mut kept_unreadable = 0;
    for (event_id, event_digest, event_canonical, applied, received_at) in rows {
        let pruned = PrunedRow {
            consumer_name: consumer.to_owned(),
            queue_id: queue.to_owned(),
            event_id,
            event_digest,
            event_canonical,
            applied: u8::from(applied),
            received_at,
        };
        match Event::from_json(pruned.event_canonical.as_bytes()) {
            Ok(event) => read.push((event.task().id.as_str().to_owned(), pruned)),
            Err(_) => kept_unreadable += 1,
        }
    }
    let latest = last_events::<E>(&mut *conn, plan, &read).await?;
    let (doomed, kept): (Vec<_>, Vec<_>) = read
        .into_iter()
        .partition(|(task, row)| latest.get(task) != Some(&row.event_id));
    let kept_latest = kept.len() as u64;
    let (mut doomed, kept_effects) = match outbox {
        true => without_effects::<E>(&mut *conn, plan, doomed).await?,
        false => (doomed, 0),
    };
    if !doomed.is_empty() {
        // Deleted first, archived and counted next, committed last: the
        // archive and the tally hold exactly the rows that went, and none
        // of it counts before the COMMIT.
        let keys: Vec<&str> = doomed
            .iter()
            .map(|(_, row)| row.event_id.as_str())
            .collect();
        let gone: HashSet<String> = E::delete_rows(&mut *conn, &plan.scope, cutoff, &keys)
            .await?
            .into_iter()
            .collect();
        doomed.retain(|(_, row)| gone.contains(&row.event_id));
    }
    let (tasks, rows): (Vec<String>, Vec<PrunedRow>) = doomed.into_iter().unzip();
    if rows.is_empty() {
        return Ok(Batch {
            deleted: 0,
            bytes: 0,
            kept_latest,
            kept_unreadable,
            kept_effects,
        });
    }
    archive.keep(&rows).map_err(PruneError::Archive)?;
    tally::<E>(conn, plan, &tasks, &rows).await?;
    Ok(Batch {
        deleted: rows.len() as u64,
        bytes: rows.iter().map(|r| r.event_canonical.len() as u64).sum(),
        kept_latest,
        kept_unreadable,
        kept_effects,
    })
}

/// The rows of `doomed` whose event has no effect in the outbox, and how
/// many were set aside because theirs has: an effect is pending, dead, or
/// sent within the window (the sent ones past it went before). Read
/// without locks: only the transaction that inserted an event's inbox row
/// records its effects, and that row is this batch's, so no effect can
/// come for it while the batch runs.
async fn without_effects<E: Engine>(
    conn: &mut E::Connection,
    plan: &Plan,
    doomed: Vec<(String, PrunedRow)>,
) -> Result<(Vec<(String, PrunedRow)>, u64), PruneError> {
    if doomed.is_empty() {
        return Ok((doomed, 0));
    }
    let events: Vec<&str> = doomed
        .iter()
        .map(|(_, row)| row.event_id.as_str())
        .collect();
    let held: HashSet<String> = E::events_with_effects(conn, &plan.scope, &events)
        .await?
        .into_iter()
        .collect();
    let (kept, doomed): (Vec<_>, Vec<_>) = doomed
        .into_iter()
        .partition(|(_, row)| held.contains(&row.event_id));
    Ok((doomed, kept.len() as u64))
}

/// The last event of each task of the batch that has a view, by the
/// views' primary key (read without locks: a view only moves to an event
/// received now, never to one past the window).
async fn last_events<E: Engine>(
    conn: &mut E::Connection,
    plan: &Plan,
    read: &[(String, PrunedRow)],
) -> Result<HashMap<String, String>, PruneError> {
    let tasks: BTreeSet<&str> = read.iter().map(|(task, _)| task.as_str()).collect();
    if tasks.is_empty() {
        return Ok(HashMap::new());
    }
    let tasks: Vec<&str> = tasks.into_iter().collect();
    Ok(E::last_events_of(conn, &plan.scope, &tasks)
        .await?
        .into_iter()
        .collect())
}

/// Adds the batch's rows (each with its task, `tasks[i]` for `rows[i]`) to
/// `receiver_pruned`, one row per task, in task order (two prunes lock the
/// tally in the same order).
async fn tally<E: Engine>(
    conn: &mut E::Connection,
    plan: &Plan,
    tasks: &[String],
    rows: &[PrunedRow],
) -> Result<(), PruneError> {
    let mut per_task: BTreeMap<&str, (u64, u64, u64)> = BTreeMap::new();
    for (task, row) in tasks.iter().zip(rows) {
        let entry = per_task.entry(task.as_str()).or_default();
        entry.0 += 1;
        entry.1 += u64::from(row.applied);
        entry.2 += row.event_canonical.len() as u64;
    }
    let per_task: Vec<(&str, u64, u64, u64)> = per_task
        .into_iter()
        .map(|(task, (events, applied, bytes))| (task, events, applied, bytes))
        .collect();
    Ok(E::add_to_tally(conn, &plan.scope, &per_task).await?)
}
