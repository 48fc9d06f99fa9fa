//! The prune itself: count, then batch after batch until the window is
//! empty or a stop is asked for.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use sqlx::mysql::MySqlConnection;
use sqlx::{Connection, Executor};
use tokio_util::sync::CancellationToken;

use crate::db::row::{get, text};
use crate::db::{sql, DbError, Dsn};
use crate::event::Event;
use crate::retry::Backoff;

use super::{check_privileges, Archive, Plan, PruneError, PrunedRow};

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
}

impl Count {
    /// The rows prune would delete (rows with unreadable text, which it
    /// also keeps, are not known before they are read).
    pub fn prunable(&self) -> u64 {
        self.rows - self.latest
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
    /// Batches committed.
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
/// only `SELECT`.
pub async fn count(dsn: &Dsn, plan: &Plan) -> Result<Count, PruneError> {
    plan.check()?;
    let mut conn = connect(dsn).await?;
    let cutoff = cutoff(&mut conn, plan.older_than).await?;
    let counted = count_at(&mut conn, plan, &cutoff).await?;
    let _ = conn.close().await;
    Ok(counted)
}

/// Prunes the plan's scope: checks the window and the account's grants,
/// counts (if the report wants a total), then deletes batch after batch,
/// each archived first, until no row is left past the window or `stop` is
/// cancelled (the batch under way ends first; a count under way is given
/// up; a batch the server rolled back is not run again). The window's edge
/// is fixed by the server's clock when it starts.
pub async fn run(
    dsn: &Dsn,
    plan: &Plan,
    archive: &mut dyn Archive,
    report: &mut dyn Report,
    stop: &CancellationToken,
) -> Result<Summary, PruneError> {
    plan.check()?;
    let started = Instant::now();
    let mut conn = connect(dsn).await?;
    check_privileges(&mut conn).await?;
    let cutoff = cutoff(&mut conn, plan.older_than).await?;
    let mut summary = Summary::default();
    if report.wants_total() {
        tokio::select! {
            counted = count_at(&mut conn, plan, &cutoff) => report.total(counted?.rows),
            _ = stop.cancelled() => {}
        }
    }

    let mut after = String::new();
    'batches: loop {
        if stop.is_cancelled() {
            summary.stopped = true;
            break;
        }
        let found = candidates(&mut conn, plan, &cutoff, &after).await?;
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
        let mut attempt = 1;
        let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(2));
        let batch_started = Instant::now();
        let done = loop {
            match batch(&mut conn, plan, &cutoff, &keys, archive).await {
                Ok(done) => break done,
                Err(PruneError::Database(e)) if e.is_rolled_back() && stop.is_cancelled() => {
                    summary.stopped = true;
                    break 'batches;
                }
                Err(PruneError::Database(e)) if e.is_rolled_back() && attempt < BATCH_ATTEMPTS => {
                    summary.retries += 1;
                    tokio::time::sleep(backoff.next()).await;
                    attempt += 1;
                    if e.is_unavailable() {
                        conn = connect(dsn).await?;
                    }
                }
                Err(e) => return Err(e),
            }
        };
        summary.deleted += done.deleted;
        summary.deleted_bytes += done.bytes;
        summary.kept_latest += done.kept_latest;
        summary.kept_unreadable += done.kept_unreadable;
        summary.batches += u64::from(done.deleted > 0);
        report.advance(found.latest + keys.len() as u64, done.deleted);
        let pause = plan.pause_after(batch_started.elapsed());
        if !pause.is_zero() {
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = stop.cancelled() => {}
            }
        }
    }
    let _ = conn.close().await;
    summary.elapsed = started.elapsed();
    Ok(summary)
}

/// A connection of its own, `READ COMMITTED` (locks on the rows it reads
/// by key, never on gaps), autocommit between batches.
async fn connect(dsn: &Dsn) -> Result<MySqlConnection, PruneError> {
    let mut conn = dsn.connect().await?;
    conn.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        .await?;
    conn.execute(format!("SET SESSION innodb_lock_wait_timeout = {LOCK_WAIT_SECONDS}").as_str())
        .await?;
    Ok(conn)
}

/// The window's edge by the server's clock, as the server prints a
/// `DATETIME(6)`.
async fn cutoff(conn: &mut MySqlConnection, older_than: Duration) -> Result<String, PruneError> {
    let micros = u64::try_from(older_than.as_micros()).unwrap_or(u64::MAX);
    Ok(
        sqlx::query_scalar("SELECT CAST(UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND AS CHAR)")
            .bind(micros)
            .fetch_one(conn)
            .await?,
    )
}

async fn count_at(
    conn: &mut MySqlConnection,
    plan: &Plan,
    cutoff: &str,
) -> Result<Count, PruneError> {
    let (rows, bytes): (i64, u64) = sqlx::query_as(
        "SELECT COUNT(*), CAST(COALESCE(SUM(LENGTH(event_canonical)), 0) AS UNSIGNED) \
         FROM receiver_inbox WHERE consumer_name = ? AND queue_id = ? AND received_at < ?",
    )
    .bind(plan.scope.receiver.as_str())
    .bind(plan.scope.queue_id.as_str())
    .bind(cutoff)
    .fetch_one(&mut *conn)
    .await?;
    // Each view names its last event by primary key: one lookup per view.
    let latest: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM receiver_task_views v JOIN receiver_inbox i \
         ON i.consumer_name = v.consumer_name AND i.queue_id = v.queue_id \
         AND i.event_id = v.last_event_id \
         WHERE v.consumer_name = ? AND v.queue_id = ? AND i.received_at < ?",
    )
    .bind(plan.scope.receiver.as_str())
    .bind(plan.scope.queue_id.as_str())
    .bind(cutoff)
    .fetch_one(&mut *conn)
    .await?;
    Ok(Count {
        rows: rows as u64,
        bytes,
        latest: latest as u64,
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
async fn candidates(
    conn: &mut MySqlConnection,
    plan: &Plan,
    cutoff: &str,
    after: &str,
) -> Result<Candidates, PruneError> {
    let rows = sqlx::query(
        "SELECT i.event_id, LENGTH(i.event_canonical), \
         COALESCE(v.last_event_id = i.event_id, FALSE) \
         FROM receiver_inbox i LEFT JOIN receiver_task_views v \
         ON v.consumer_name = i.consumer_name AND v.queue_id = i.queue_id \
         AND v.task_id = SUBSTRING(i.event_canonical, \
             LOCATE('\"task\":{\"id\":\"', i.event_canonical) + 14, 32) \
         WHERE i.consumer_name = ? AND i.queue_id = ? AND i.event_id > ? AND i.received_at < ? \
         ORDER BY i.event_id LIMIT ?",
    )
    .bind(plan.scope.receiver.as_str())
    .bind(plan.scope.queue_id.as_str())
    .bind(after)
    .bind(cutoff)
    .bind(plan.batch_rows)
    .fetch_all(&mut *conn)
    .await?;
    let mut found = Candidates {
        keys: Vec::with_capacity(rows.len()),
        latest: 0,
        last: None,
    };
    let mut bytes = 0u64;
    for row in &rows {
        let key = text(row, 0)?;
        if get(row, 2)? {
            found.latest += 1;
        } else {
            bytes += get::<i64>(row, 1)? as u64;
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
}

/// One batch in one transaction; rolled back on any error.
async fn batch(
    conn: &mut MySqlConnection,
    plan: &Plan,
    cutoff: &str,
    keys: &[String],
    archive: &mut dyn Archive,
) -> Result<Batch, PruneError> {
    conn.execute("START TRANSACTION").await?;
    match locked_batch(conn, plan, cutoff, keys, archive).await {
        Ok(done) => {
            // Nothing deleted: only locks to let go of.
            let end = if done.deleted > 0 {
                "COMMIT"
            } else {
                "ROLLBACK"
            };
            conn.execute(end).await?;
            Ok(done)
        }
        Err(e) => {
            let _ = conn.execute("ROLLBACK").await;
            Err(e)
        }
    }
}

/// Locks the batch's rows by key, keeps the latest events and unreadable
/// rows, archives, counts and deletes the rest.
async fn locked_batch(
    conn: &mut MySqlConnection,
    plan: &Plan,
    cutoff: &str,
    keys: &[String],
    archive: &mut dyn Archive,
) -> Result<Batch, PruneError> {
    let (consumer, queue) = (plan.scope.receiver.as_str(), plan.scope.queue_id.as_str());
    // A row deleted by another prune since it was found is not read; one
    // received again since (a redelivery after that prune) is newer than
    // the window and is not taken.
    let sql = format!(
        "SELECT event_id, event_digest, event_canonical, applied, CAST(received_at AS CHAR) \
         FROM receiver_inbox WHERE consumer_name = ? AND queue_id = ? AND event_id IN ({}) \
         AND received_at < ? ORDER BY event_id FOR UPDATE",
        sql::list("?", keys.len())
    );
    let query = sqlx::query(&sql).bind(consumer).bind(queue);
    let query = keys.iter().fold(query, |q, key| q.bind(key));
    let rows = query.bind(cutoff).fetch_all(&mut *conn).await?;

    let mut read = Vec::with_capacity(rows.len());
    let mut kept_unreadable = 0;
    for row in &rows {
        let pruned = PrunedRow {
            consumer_name: consumer.to_owned(),
            queue_id: queue.to_owned(),
            event_id: text(row, 0)?,
            event_digest: text(row, 1)?,
            event_canonical: text(row, 2)?,
            applied: u8::from(get::<bool>(row, 3)?),
            received_at: get(row, 4)?,
        };
        match Event::from_json(pruned.event_canonical.as_bytes()) {
            Ok(event) => read.push((event.task().id.as_str().to_owned(), pruned)),
            Err(_) => kept_unreadable += 1,
        }
    }
    let latest = last_events(conn, plan, &read).await?;
    let (doomed, kept): (Vec<_>, Vec<_>) = read
        .into_iter()
        .partition(|(task, row)| latest.get(task) != Some(&row.event_id));
    let kept_latest = kept.len() as u64;
    let (tasks, rows): (Vec<String>, Vec<PrunedRow>) = doomed.into_iter().unzip();
    if rows.is_empty() {
        return Ok(Batch {
            deleted: 0,
            bytes: 0,
            kept_latest,
            kept_unreadable,
        });
    }

    archive.keep(&rows).map_err(PruneError::Archive)?;
    tally(conn, plan, &tasks, &rows).await?;
    let sql = format!(
        "DELETE FROM receiver_inbox WHERE consumer_name = ? AND queue_id = ? AND event_id IN ({})",
        sql::list("?", rows.len())
    );
    let delete = sqlx::query(&sql).bind(consumer).bind(queue);
    let delete = rows.iter().fold(delete, |q, row| q.bind(&row.event_id));
    let deleted = delete.execute(&mut *conn).await?.rows_affected();
    if deleted != rows.len() as u64 {
        // The rows are locked: anything else means the table is not what
        // this transaction read, and nothing of it may commit.
        return Err(DbError::inconsistent().into());
    }
    Ok(Batch {
        deleted,
        bytes: rows.iter().map(|r| r.event_canonical.len() as u64).sum(),
        kept_latest,
        kept_unreadable,
    })
}

/// The last event of each task of the batch that has a view, by the
/// views' primary key (read without locks: a view only moves to an event
/// received now, never to one past the window).
async fn last_events(
    conn: &mut MySqlConnection,
    plan: &Plan,
    read: &[(String, PrunedRow)],
) -> Result<HashMap<String, String>, PruneError> {
    let tasks: BTreeSet<&str> = read.iter().map(|(task, _)| task.as_str()).collect();
    if tasks.is_empty() {
        return Ok(HashMap::new());
    }
    let sql = format!(
        "SELECT task_id, last_event_id FROM receiver_task_views \
         WHERE consumer_name = ? AND queue_id = ? AND task_id IN ({})",
        sql::list("?", tasks.len())
    );
    let query = sqlx::query(&sql)
        .bind(plan.scope.receiver.as_str())
        .bind(plan.scope.queue_id.as_str());
    let query = tasks.iter().fold(query, |q, task| q.bind(*task));
    let mut latest = HashMap::with_capacity(tasks.len());
    for row in query.fetch_all(&mut *conn).await? {
        latest.insert(text(&row, 0)?, text(&row, 1)?);
    }
    Ok(latest)
}

/// Adds the batch's rows (each with its task, `tasks[i]` for `rows[i]`) to
/// `receiver_pruned`, one row per task, in task order (two prunes lock the
/// tally in the same order).
async fn tally(
    conn: &mut MySqlConnection,
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
    let rows = format!(
        "SELECT ? AS task_id, ? AS events, ? AS applied, ? AS bytes{}",
        " UNION ALL SELECT ?, ?, ?, ?".repeat(per_task.len() - 1)
    );
    let sql = format!(
        "INSERT INTO receiver_pruned (consumer_name, queue_id, task_id, pruned_events, \
         pruned_applied, pruned_bytes, last_pruned_at) \
         SELECT ?, ?, t.task_id, t.events, t.applied, t.bytes, UTC_TIMESTAMP(6) FROM ({rows}) AS t \
         ON DUPLICATE KEY UPDATE pruned_events = receiver_pruned.pruned_events + t.events, \
         pruned_applied = receiver_pruned.pruned_applied + t.applied, \
         pruned_bytes = receiver_pruned.pruned_bytes + t.bytes, \
         last_pruned_at = UTC_TIMESTAMP(6)"
    );
    let mut query = sqlx::query(&sql)
        .bind(plan.scope.receiver.as_str())
        .bind(plan.scope.queue_id.as_str());
    for (task, (events, applied, bytes)) in &per_task {
        query = query.bind(*task).bind(events).bind(applied).bind(bytes);
    }
    query.execute(&mut *conn).await?;
    Ok(())
}
