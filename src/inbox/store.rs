//! The inbox table and the connection pool the inbox runs its transactions on.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sqlx::mysql::{MySqlConnection, MySqlPool, MySqlPoolOptions};
use sqlx::Executor;

use super::error::{DbError, DbErrorKind, InboxError};
use crate::digest::Digest;
use crate::dsn::Dsn;
use crate::event::{Event, EventId};
use crate::scope::InboxScope;

/// How the inbox uses its database.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Longest a whole apply may take, from BEGIN to the end of COMMIT.
    /// Default 5 s. A single row-lock wait is bounded by half of it (at
    /// least the server's minimum of 1 s), so that a lock-wait victim can
    /// still be retried inside the budget.
    pub transaction_timeout: Duration,
    /// Most connections kept open. Default 10.
    pub max_connections: u32,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            transaction_timeout: Duration::from_secs(5),
            max_connections: 10,
        }
    }
}

/// The receiver's database, as the inbox sees it: a pool whose connections
/// are all `READ COMMITTED`, and the scope every row is written under.
///
/// Cloning is cheap and shares the pool and the statistics.
#[derive(Debug, Clone)]
pub struct InboxStore {
    pool: MySqlPool,
    scope: InboxScope,
    transaction_timeout: Duration,
    stats: Arc<Counters>,
}

#[derive(Debug, Default)]
struct Counters {
    deadlock_retries: AtomicU64,
    lock_wait_retries: AtomicU64,
}

/// What the store has counted since it was connected.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InboxStats {
    /// Transactions run again after the server chose them as deadlock victim (1213).
    pub deadlock_retries: u64,
    /// Transactions run again after a lock wait timed out (1205).
    pub lock_wait_retries: u64,
}

impl InboxStore {
    /// Opens a pool on `dsn` for `scope`.
    ///
    /// Isolation and lock-wait time are set once per connection rather than
    /// per transaction: it saves a round trip on every apply.
    pub async fn connect(
        dsn: &Dsn,
        scope: InboxScope,
        options: StoreOptions,
    ) -> Result<Self, DbError> {
        // innodb_lock_wait_timeout takes whole seconds, at least 1.
        let lock_wait = (options.transaction_timeout.as_secs() / 2).max(1);
        let pool = MySqlPoolOptions::new()
            .max_connections(options.max_connections)
            // No PING before each use: it is one more round trip on every
            // apply. A connection the server dropped (restart, failover)
            // fails its first statement instead; that apply is a retryable
            // error, never ACKed, and Orbit delivers the event again. Idle
            // connections are closed by the pool (10 min) long before
            // MySQL's own wait_timeout.
            .test_before_acquire(false)
            .acquire_timeout(options.transaction_timeout)
            .after_connect(move |conn, _meta| {
                Box::pin(async move {
                    conn.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
                        .await?;
                    conn.execute(
                        format!("SET SESSION innodb_lock_wait_timeout = {lock_wait}").as_str(),
                    )
                    .await?;
                    Ok(())
                })
            })
            .connect_with(dsn.connect_options())
            .await?;
        Ok(Self {
            pool,
            scope,
            transaction_timeout: options.transaction_timeout,
            stats: Arc::default(),
        })
    }

    /// Retries counted so far (shared by all clones of this store).
    pub fn stats(&self) -> InboxStats {
        InboxStats {
            deadlock_retries: self.stats.deadlock_retries.load(Ordering::Relaxed),
            lock_wait_retries: self.stats.lock_wait_retries.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn record_retry(&self, kind: DbErrorKind) {
        let counter = match kind {
            DbErrorKind::Deadlock => &self.stats.deadlock_retries,
            _ => &self.stats.lock_wait_retries,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The pool, for reading the receiver's tables.
    pub fn pool(&self) -> &MySqlPool {
        &self.pool
    }

    /// The scope rows are written under.
    pub fn scope(&self) -> &InboxScope {
        &self.scope
    }

    /// The time budget of one apply.
    pub fn transaction_timeout(&self) -> Duration {
        self.transaction_timeout
    }

    /// Reads the committed inbox row of `event_id`: its digest and whether it
    /// advanced the view.
    pub(crate) async fn committed_row(
        &self,
        event_id: &EventId,
    ) -> Result<Option<(Digest, bool)>, InboxError> {
        let row: Option<(Vec<u8>, bool)> = sqlx::query_as(
            "SELECT event_digest, applied FROM receiver_inbox \
             WHERE consumer_name = ? AND queue_id = ? AND event_id = ?",
        )
        .bind(self.scope.receiver.as_str())
        .bind(self.scope.queue_id.as_str())
        .bind(event_id.as_str())
        .fetch_optional(&self.pool)
        .await?;
        match row {
            None => Ok(None),
            Some((hex, applied)) => {
                let digest = std::str::from_utf8(&hex)
                    .ok()
                    .and_then(Digest::from_hex)
                    .ok_or(InboxError::Database(DbError::inconsistent()))?;
                Ok(Some((digest, applied)))
            }
        }
    }
}

/// The statement that records the first receipt of `event`. A duplicate key
/// here is the signal that this event was committed before; the caller
/// decides what that means.
///
/// It is sent as text, in the same round trip as `BEGIN` (see `tx.rs`), so
/// every value is written as a hexadecimal string literal with an explicit
/// character set: nothing from the event can change the statement, and the
/// canonical text is stored byte for byte.
///
/// The row is written with `applied = 1`, the common outcome, so that an
/// advancing event needs no second statement on the inbox; a stale one is
/// corrected by [`mark_stale`] before COMMIT. Nobody sees the provisional
/// value: the row is invisible to others until it commits, and a racing copy
/// waits on its lock.
pub(crate) fn insert_event_sql(scope: &InboxScope, event: &Event) -> String {
    let text = |s: &str| format!("_utf8mb4 X'{}'", hex::encode(s));
    format!(
        "INSERT INTO receiver_inbox \
         (consumer_name, queue_id, event_id, event_digest, event_canonical, applied, received_at) \
         VALUES ({}, {}, {}, {}, {}, 1, UTC_TIMESTAMP(6))",
        text(scope.receiver.as_str()),
        text(scope.queue_id.as_str()),
        text(event.id().as_str()),
        text(&event.canonical().digest().to_hex()),
        text(event.canonical().as_str()),
    )
}

/// Marks the event's inbox row as recorded without advancing the view.
pub(crate) async fn mark_stale(
    conn: &mut MySqlConnection,
    scope: &InboxScope,
    event: &Event,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE receiver_inbox SET applied = 0 \
         WHERE consumer_name = ? AND queue_id = ? AND event_id = ?",
    )
    .bind(scope.receiver.as_str())
    .bind(scope.queue_id.as_str())
    .bind(event.id().as_str())
    .execute(conn)
    .await?;
    Ok(())
}
