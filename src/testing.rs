//! Unit tests of an inner service against a real database, without a
//! consumer, a broker or a `receiver` process: a throwaway database with the
//! receiver's tables, events as Orbit sends them, and one call that applies
//! an event through the inbox and answers its outcome.
//!
//! Like sqlx's `#[sqlx::test]`, it needs a server the test may create
//! databases on (an account with `CREATE` and `DROP`); nothing is mocked.
//!
//! ```no_run
//! use result_inbox::event::EventType;
//! use result_inbox::inbox::{Applying, InboxError, Outcome};
//! use result_inbox::delivery::Delivery;
//! use result_inbox::testing::{self, TestDatabase};
//! use result_inbox::task_view::{self, Advance};
//! use tower::service_fn;
//!
//! # async fn t() -> Result<(), result_inbox::BoxError> {
//! let admin = "mysql://root@127.0.0.1:3306/mysql".parse()?;
//! let db = TestDatabase::create(&admin).await?;
//! let store = db.store().await?;
//! let my_service = service_fn(|mut delivery: Delivery<Applying>| async move {
//!     let (conn, scope, event) = delivery.body_mut().split();
//!     let advance = task_view::advance(conn, scope, event).await?;
//!     // …and the service's own writes, in the same transaction.
//!     let applying = delivery.into_body();
//!     Ok::<_, InboxError>(match advance {
//!         Advance::Applied => applying.applied(),
//!         Advance::Stale => applying.stale(),
//!     })
//! });
//! let event = testing::event(&store, EventType::Submitted, 1);
//! let receipt = testing::apply(&store, my_service, &event.json).await?;
//! assert_eq!(receipt.outcome, Outcome::Applied);
//! db.remove().await?;
//! # Ok(())
//! # }
//! ```

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use sqlx::{Connection, MySql};
use tower::{Service, ServiceExt};

use crate::db::{schema, DbError, Dsn, Engine};
use crate::delivery::{Delivery, DeliveryId};
use crate::event::EventType;
use crate::ids::{EventId, QueueId, TaskId};
use crate::inbox::{Applying, InboxError, InboxLayer, InboxStore, Receipt, StoreOptions, Verdict};
use crate::scope::{InboxScope, ReceiverName};
use crate::BoxError;

/// A database of its own on a test server, with the receiver's two tables
/// (and prune's tally with [`create_with_retention`](Self::create_with_retention)).
/// [`remove`](Self::remove) drops it; a test that fails before leaves it for
/// inspection, under a name no other test uses.
///
/// On MySQL, [`TestDatabase::create`]; on PostgreSQL (feature `postgres`),
/// `TestDatabase::<sqlx::Postgres>::create_on(&admin)`, whose stores are
/// `InboxStore<sqlx::Postgres>` and whose inner services answer
/// `Verdict<sqlx::Postgres>`.
#[derive(Debug)]
pub struct TestDatabase<E: Engine = MySql> {
    admin: Dsn,
    dsn: Dsn,
    engine: std::marker::PhantomData<fn() -> E>,
}

impl TestDatabase<MySql> {
    /// Creates `result_inbox_test_<random>` on the MySQL server of `admin`
    /// (an account that may create and drop databases; its DSN names any
    /// database, e.g. `mysql`) and the receiver's tables in it.
    pub async fn create(admin: &Dsn) -> Result<Self, DbError> {
        Self::create_on(admin).await
    }

    /// [`create`](Self::create), with `receiver_pruned` as well (`receiver
    /// init --retention`), for tests of `prune`.
    pub async fn create_with_retention(admin: &Dsn) -> Result<Self, DbError> {
        Self::create_with(admin, true).await
    }
}

impl<E: Engine> TestDatabase<E> {
    /// Creates `result_inbox_test_<random>` on the server of `admin`, of
    /// engine `E` (`TestDatabase::<sqlx::Postgres>::create_on` for a
    /// `postgres://` address naming e.g. the database `postgres`), and the
    /// receiver's tables in it.
    pub async fn create_on(admin: &Dsn) -> Result<Self, DbError> {
        Self::create_with(admin, false).await
    }

    /// [`create_on`](Self::create_on), with `receiver_pruned` as well.
    pub async fn create_on_with_retention(admin: &Dsn) -> Result<Self, DbError> {
        Self::create_with(admin, true).await
    }

    async fn create_with(admin: &Dsn, retention: bool) -> Result<Self, DbError> {
        if E::connect_options(admin).is_none() {
            return Err(DbError::wrong_test_engine(admin.engine()));
        }
        let name = format!("result_inbox_test_{}", &fresh_hex()[..16]);
        let mut conn = E::connect_one(admin).await?;
        let created = E::create_database(&mut conn, &name).await;
        conn.close().await.ok();
        created?;
        let dsn = admin.with_database(&name);
        let options = schema::InitOptions {
            retention,
            ..schema::InitOptions::default()
        };
        schema::init_with(&dsn, options)
            .await
            .map_err(|e| match e {
                schema::InitError::PermissionDenied { error: e, .. }
                | schema::InitError::Database(e) => e,
                // A new, empty database has no tables to refuse.
                _ => DbError::inconsistent(),
            })?;
        Ok(Self {
            admin: admin.clone(),
            dsn,
            engine: std::marker::PhantomData,
        })
    }

    /// The database's address (the admin account's, naming this database).
    pub fn dsn(&self) -> &Dsn {
        &self.dsn
    }

    /// A store on this database for the default receiver name and a new
    /// queue of its own.
    pub async fn store(&self) -> Result<InboxStore<E>, DbError> {
        let queue = fresh_hex().parse::<QueueId>().expect("32 hex digits");
        self.store_for(InboxScope::new(ReceiverName::default(), queue))
            .await
    }

    /// A store on this database for `scope`.
    pub async fn store_for(&self, scope: InboxScope) -> Result<InboxStore<E>, DbError> {
        InboxStore::<E>::open(&self.dsn, scope, StoreOptions::default()).await
    }

    /// Drops the database.
    pub async fn remove(self) -> Result<(), DbError> {
        let mut conn = E::connect_one(&self.admin).await?;
        let dropped = E::drop_database(&mut conn, self.dsn.database()).await;
        conn.close().await.ok();
        dropped?;
        Ok(())
    }
}

/// An event as Orbit sends it, for the store's queue: its JSON text and
/// its ids.
#[derive(Debug, Clone)]
pub struct TestEvent {
    /// The event's JSON text, as a delivery carries it.
    pub json: String,
    /// Its id (new for each event).
    pub id: EventId,
    /// The task it is about.
    pub task_id: TaskId,
}

/// A new event of `event_type` at `version` about a new task, for the
/// queue of `store`; with a result (`{"ok":true}`) where the type carries
/// one. [`event_for`] names the task.
pub fn event<E: Engine>(store: &InboxStore<E>, event_type: EventType, version: u64) -> TestEvent {
    let task = fresh_hex().parse::<TaskId>().expect("32 hex digits");
    event_for(store, &task, event_type, version)
}

/// A new event of `event_type` at `version` about `task` (a later version
/// of a task, another event at the same version), for the queue of `store`.
pub fn event_for<E: Engine>(
    store: &InboxStore<E>,
    task: &TaskId,
    event_type: EventType,
    version: u64,
) -> TestEvent {
    let id = fresh_hex().parse::<EventId>().expect("32 hex digits");
    let state = event_type.state();
    let result = if state.allows_result() {
        r#","result":{"ok":true}"#
    } else {
        ""
    };
    let json = format!(
        r#"{{"id":"{id}","type":"{event_type}","queue_id":"{queue}","occurred_at":"2026-01-01T00:00:00Z","task":{{"id":"{task}","version":{version},"state":"{state}"{result}}}}}"#,
        queue = store.scope().queue_id,
    );
    TestEvent {
        json,
        id,
        task_id: task.clone(),
    }
}

/// One delivery of `event` (its raw bytes, as a source would hand them
/// over) through the inbox on `store` around `inner`, as the consumer runs
/// it: validated, deduplicated, applied in one transaction, committed. The
/// answer is what the consumer would ACK (`Ok`) or not (`Err`).
pub async fn apply<E: Engine, S>(
    store: &InboxStore<E>,
    inner: S,
    event: impl AsRef<[u8]>,
) -> Result<Receipt, InboxError>
where
    S: Service<Delivery<Applying<E>>, Response = Verdict<E>> + Clone + Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    let bytes = Bytes::copy_from_slice(event.as_ref());
    let delivery = Delivery::new(DeliveryId::new(fresh_hex()), bytes).with_attempt(1);
    tower::ServiceBuilder::new()
        .layer(InboxLayer::new(store.clone()))
        .service(inner)
        .oneshot(delivery)
        .await
}

/// 32 new lowercase hex digits: the process's randomly keyed hasher over a
/// counter and the clock.
fn fresh_hex() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let half = || {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        h.finish()
    };
    format!("{:016x}{:016x}", half(), half())
}
