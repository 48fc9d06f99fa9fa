//! The inbox table and the connection pool the inbox runs its transactions on.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sqlx::mysql::MySql;
use sqlx::Pool;

use super::shelf::Shelf;
use super::tx::InboxTx;
use crate::db::{DbError, DbErrorKind, Dsn, Engine, Replication};
use crate::event::Event;
use crate::failure::Failure;
use crate::ids::QueueId;
use crate::probe::Probe;
use crate::scope::{InboxScope, ReceiverName};
use crate::telemetry;

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
///
/// ```no_run
/// use result_inbox::db::Dsn;
/// use result_inbox::ids::QueueId;
/// use result_inbox::inbox::{InboxLayer, InboxStore, StoreOptions};
/// use result_inbox::scope::{InboxScope, ReceiverName};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let dsn: Dsn = std::env::var("ORBIT_RECEIVER_DSN")?.parse()?; // must name its database
/// let queue = QueueId::parse("0123456789abcdef0123456789abcdef").unwrap();
/// let scope = InboxScope::new(ReceiverName::default(), queue);
/// let store = InboxStore::connect(&dsn, scope, StoreOptions::default()).await?;
/// let layer = InboxLayer::new(store.clone()); // the same pool for every clone
/// # let _ = layer;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct InboxStore<E: Engine = MySql> {
    shelf: Arc<Shelf<E>>,
    /// The address, for a probe that looks for the host that takes writes
    /// when it names several.
    dsn: Arc<Dsn>,
    scope: InboxScope,
    transaction_timeout: Duration,
    stats: Arc<Counters>,
}

impl<E: Engine> Clone for InboxStore<E> {
    fn clone(&self) -> Self {
        Self {
            shelf: self.shelf.clone(),
            dsn: self.dsn.clone(),
            scope: self.scope.clone(),
            transaction_timeout: self.transaction_timeout,
            stats: self.stats.clone(),
        }
    }
}

#[derive(Debug, Default)]
struct Counters {
    deadlock_retries: AtomicU64,
    lock_wait_retries: AtomicU64,
    connection_retries: AtomicU64,
    /// Set by a delivery that could not reach the database, cleared by one
    /// that committed or a probe that answered: shared by every clone, so
    /// the first such failure is known to all deliveries and the consumer.
    unreachable: AtomicBool,
}

/// What the store has counted since it was connected.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InboxStats {
    /// Transactions run again after the server chose them as deadlock victim (1213).
    pub deadlock_retries: u64,
    /// Transactions run again after a lock wait timed out (1205).
    pub lock_wait_retries: u64,
    /// Transactions run again on another connection after theirs broke
    /// before COMMIT (e.g. a pooled connection the server had dropped).
    pub connection_retries: u64,
}

impl InboxStore<MySql> {
    /// Opens a pool on `dsn`, a MySQL address, for `scope`.
    ///
    /// Isolation, lock-wait time and autocommit are set once per connection
    /// rather than per transaction: it saves a round trip on every apply.
    pub async fn connect(
        dsn: &Dsn,
        scope: InboxScope,
        options: StoreOptions,
    ) -> Result<Self, DbError> {
        Self::open(dsn, scope, options).await
    }

    /// Like [`connect`](Self::connect), but opens no connection yet: the
    /// first apply does. While the server cannot be reached, every apply
    /// fails with a retryable error after waiting its time budget for a
    /// connection, so nothing is ACKed and Orbit delivers again; once the
    /// server answers, applies go through. For a consumer that may start
    /// before its database. Fails only for an address of another engine.
    pub fn connect_lazy(
        dsn: &Dsn,
        scope: InboxScope,
        options: StoreOptions,
    ) -> Result<Self, DbError> {
        Self::open_lazy(dsn, scope, options)
    }
}

impl<E: Engine> InboxStore<E> {
    /// Opens a pool of engine `E` on `dsn` for `scope`:
    /// `InboxStore::<sqlx::Postgres>::open` for a `postgres://` address
    /// (feature `postgres`); on MySQL the same as
    /// [`connect`](InboxStore::connect). Each connection is set up once
    /// (`READ COMMITTED`, the lock-wait bound) rather than per transaction.
    pub async fn open(
        dsn: &Dsn,
        scope: InboxScope,
        options: StoreOptions,
    ) -> Result<Self, DbError> {
        let connect = E::connect_options(dsn).ok_or_else(|| DbError::wrong_engine(dsn.engine()))?;
        let connect = E::writable_options(dsn).await.unwrap_or(connect);
        let pool = pool_options::<E>(&options)
            .connect_with(connect)
            .await
            .map_err(|e| DbError::from(e).connecting_to(dsn.engine()))?;
        Ok(Self::with_pool(pool, dsn, scope, &options))
    }

    /// Like [`open`](Self::open), but opens no connection yet (see
    /// [`connect_lazy`](InboxStore::connect_lazy)).
    pub fn open_lazy(dsn: &Dsn, scope: InboxScope, options: StoreOptions) -> Result<Self, DbError> {
        let connect = E::connect_options(dsn).ok_or_else(|| DbError::wrong_engine(dsn.engine()))?;
        let pool = pool_options::<E>(&options).connect_lazy_with(connect);
        Ok(Self::with_pool(pool, dsn, scope, &options))
    }
}

impl<E: Engine> InboxStore<E> {
    fn with_pool(pool: Pool<E>, dsn: &Dsn, scope: InboxScope, options: &StoreOptions) -> Self {
        Self {
            shelf: Arc::new(Shelf::new(pool)),
            dsn: Arc::new(dsn.clone()),
            scope,
            transaction_timeout: options.transaction_timeout,
            stats: Arc::default(),
        }
    }

    /// The engine the store's address names.
    pub fn engine(&self) -> crate::db::EngineKind {
        self.dsn.engine()
    }

    /// Retries counted so far (shared by all clones of this store).
    pub fn stats(&self) -> InboxStats {
        InboxStats {
            deadlock_retries: self.stats.deadlock_retries.load(Ordering::Relaxed),
            lock_wait_retries: self.stats.lock_wait_retries.load(Ordering::Relaxed),
            connection_retries: self.stats.connection_retries.load(Ordering::Relaxed),
        }
    }

    /// Notes that a delivery could not reach the database; `true` if no
    /// other had noted it since the database last answered.
    pub(crate) fn mark_unreachable(&self) -> bool {
        !self.stats.unreachable.swap(true, Ordering::Relaxed)
    }

    /// Notes that the database answered (a COMMIT, a probe).
    pub(crate) fn mark_reachable(&self) {
        self.stats.unreachable.store(false, Ordering::Relaxed);
    }

    pub(crate) fn record_retry(&self, kind: DbErrorKind) {
        let (counter, cause) = match kind {
            DbErrorKind::Deadlock => (&self.stats.deadlock_retries, "deadlock"),
            DbErrorKind::Connection => (&self.stats.connection_retries, "connection"),
            _ => (&self.stats.lock_wait_retries, "lock_wait"),
        };
        counter.fetch_add(1, Ordering::Relaxed);
        telemetry::transaction_retry(cause);
        if kind == DbErrorKind::Connection {
            self.shelf.clear();
        }
    }

    /// Asks the database whether it answers: takes a connection and runs
    /// `SELECT 1`, which opens no transaction (so none is ended). A pooled
    /// connection that the server dropped is closed and the next one tried,
    /// so the answer is about the server, not about a stale connection.
    pub async fn ping(&self) -> Result<(), DbError> {
        let mut tries = self.pool().options().get_max_connections() + 1;
        loop {
            tries -= 1;
            let mut tx = InboxTx::acquire(&self.shelf).await?;
            let answered = E::ping(tx.connection()).await;
            match answered {
                Ok(()) => {
                    tx.release();
                    return Ok(());
                }
                Err(e) => {
                    let e = DbError::from(e);
                    // Dropping `tx` closes its connection; try a fresh one
                    // unless the server itself refused.
                    if e.kind() != DbErrorKind::Connection || tries == 0 {
                        return Err(e);
                    }
                    self.shelf.clear();
                }
            }
        }
    }

    /// Opens one connection outside the pool and closes it again, to learn
    /// why the server cannot be used — connection refused, wrong user or
    /// password, unknown database — where the pool would only say that no
    /// connection came in time.
    pub async fn try_connect(&self) -> Result<(), DbError> {
        use sqlx::{ConnectOptions, Connection};
        let options = self.pool().connect_options();
        let conn = tokio::time::timeout(self.transaction_timeout, options.connect())
            .await
            .map_err(|_| DbError::connect_timeout())?
            .map_err(|e| DbError::from(e).connecting_to(self.dsn.engine()))?;
        let _ = conn.close().await;
        Ok(())
    }

    /// The pool the inbox runs its transactions on. Its sessions run with
    /// autocommit off: whatever runs on one of its connections must go
    /// through [`InboxTx`], which ends the transaction or closes the
    /// connection.
    pub(crate) fn pool(&self) -> &Pool<E> {
        self.shelf.pool()
    }

    /// Where the inbox's transactions take their connections.
    pub(crate) fn shelf(&self) -> &Arc<Shelf<E>> {
        &self.shelf
    }

    /// The scope rows are written under.
    pub fn scope(&self) -> &InboxScope {
        &self.scope
    }

    /// The time budget of one apply.
    pub fn transaction_timeout(&self) -> Duration {
        self.transaction_timeout
    }

    /// A session on one of the store's connections, for the application's
    /// own reads and writes on the receiver's database: no second pool
    /// needed. It runs like the inbox's own transactions (`READ COMMITTED`,
    /// autocommit off, the same lock-wait bound): its first statement
    /// begins a transaction, which [`Session::commit`] or
    /// [`Session::rollback`] ends. A session dropped without either closes
    /// its connection, so the server rolls back and no open transaction —
    /// and no lock — ever goes back to the pool.
    ///
    /// ```no_run
    /// # async fn example(store: result_inbox::inbox::InboxStore) -> Result<(), result_inbox::db::DbError> {
    /// let mut session = store.session().await?;
    /// let open: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM orders WHERE status = 'open'")
    ///     .fetch_one(session.connection())
    ///     .await?;
    /// session.rollback().await?; // a read: end it, commit nothing
    /// # let _ = open;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn session(&self) -> Result<Session<E>, DbError> {
        let mut tx = InboxTx::acquire(&self.shelf).await?;
        tx.begin().await?;
        Ok(Session { tx })
    }

    /// For an address of several hosts: points the pool at the one that
    /// takes writes now, whatever their order (a failover moves it);
    /// `false`, changing nothing, for an address of one host or when none
    /// answers as one.
    pub(crate) async fn follow_writer(&self) -> bool {
        let Some(moved) = E::writable_options(&self.dsn).await else {
            return false;
        };
        self.pool().set_connect_options(moved);
        self.shelf.clear();
        true
    }

    /// What the server the store writes to says of its standbys (see
    /// [`Replication`]): `None` on an engine that reports none (MySQL).
    /// Whether a COMMIT it confirms can be lost by a failover, which
    /// `receiver check` and `consume` report.
    pub async fn replication(&self) -> Result<Option<Replication>, DbError> {
        if !E::REPORTS_REPLICATION {
            return Ok(None);
        }
        let mut tx = InboxTx::acquire(&self.shelf).await?;
        tx.begin().await?;
        let replication = E::replication(tx.connection()).await?;
        tx.rollback().await?;
        Ok(replication)
    }

    /// The session settings of the store's connections, as the server
    /// reports them: for checking a deployment (and this crate's tests).
    pub async fn session_settings(&self) -> Result<SessionSettings, DbError> {
        let mut tx = InboxTx::acquire(&self.shelf).await?;
        let (isolation, lock_wait_timeout, autocommit) = E::settings(tx.connection()).await?;
        tx.release();
        Ok(SessionSettings {
            isolation,
            lock_wait_timeout,
            autocommit,
        })
    }
}

/// The pool every store runs on: see [`InboxStore::connect`].
fn pool_options<E: Engine>(options: &StoreOptions) -> sqlx::pool::PoolOptions<E> {
    E::pool_options(options.max_connections, options.transaction_timeout)
}

/// One of the store's connections lent to the application, in a
/// transaction that is always ended (see [`InboxStore::session`]).
#[derive(Debug)]
pub struct Session<E: Engine = MySql> {
    tx: InboxTx<E>,
}

impl<E: Engine> Session<E> {
    /// The connection, as an executor for the session's statements. sqlx
    /// knows the session's transaction: `begin()` on it is a savepoint
    /// inside the session, never a second transaction (see
    /// [`Applying::connection`](super::Applying::connection) for what
    /// nothing can guard).
    pub fn connection(&mut self) -> &mut E::Connection {
        self.tx.connection()
    }

    /// `COMMIT`s what the session wrote and returns the connection to the
    /// pool. An error closes the connection instead.
    pub async fn commit(self) -> Result<(), DbError> {
        Ok(self.tx.commit().await?)
    }

    /// `ROLLBACK`s and returns the connection to the pool (the way to end
    /// a read). An error closes the connection instead.
    pub async fn rollback(self) -> Result<(), DbError> {
        Ok(self.tx.rollback().await?)
    }
}

/// How the server has set up a store's sessions (see
/// [`InboxStore::session_settings`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionSettings {
    /// The transaction isolation level, e.g. `READ-COMMITTED`.
    pub isolation: String,
    /// `innodb_lock_wait_timeout`: the longest one row-lock wait may take.
    pub lock_wait_timeout: Duration,
    /// Whether each statement commits on its own.
    pub autocommit: bool,
}

/// Marks the inbox rows of `events` (inserted as applied, in this
/// transaction) as recorded without advancing the view: one statement.
pub(crate) async fn mark_stale_all<E: Engine>(
    conn: &mut E::Connection,
    scope: &InboxScope,
    events: &[&Event],
) -> Result<(), sqlx::Error> {
    E::mark_stale(conn, scope, events).await
}

/// A consumer's breaker probes the store's database, and knows the inbox's
/// errors when a delivery fails with one (see [`Probe`]).
impl<E: Engine> Probe for InboxStore<E> {
    fn probe(&self) -> futures::future::BoxFuture<'static, Result<(), crate::BoxError>> {
        let store = self.clone();
        Box::pin(async move {
            if let Err(e) = store.ping().await {
                // An address of several hosts: a failover may have moved
                // the one that takes writes.
                if !store.follow_writer().await {
                    return Err(e.into());
                }
                store.ping().await?;
            }
            store.mark_reachable();
            Ok(())
        })
    }

    fn is_unavailable(&self) -> bool {
        self.stats.unreachable.load(Ordering::Relaxed)
    }

    fn recognize(&self, error: &(dyn std::error::Error + 'static)) -> Option<Failure> {
        super::error::recognize(error)
    }

    fn queue(&self) -> Option<&QueueId> {
        Some(&self.scope().queue_id)
    }

    fn receiver(&self) -> Option<&ReceiverName> {
        Some(&self.scope().receiver)
    }
}
