//! The outbox against real servers, on MySQL and on PostgreSQL: effects
//! recorded in the inbox's transaction share its outcome (applied,
//! refused, duplicate, a refused sibling in a batch), under an id derived
//! from where they came from; and the relay's statements claim due heads
//! of ordering keys under leases that other claimers skip.

use crate::common::{self, on_both};

use std::collections::{BTreeSet, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use common::postgres::PgTestDb;
use common::{random_hex, EventSpec, TestDb};
use futures::future::{join_all, BoxFuture};
use result_inbox::db::{Dsn, Engine};
use result_inbox::delivery::{Delivery, DeliveryId, TraceContext};
use result_inbox::ids::{EventId, QueueId};
use result_inbox::inbox::{
    Applying, Batching, InboxError, InboxLayer, InboxStore, Outcome, Receipt, Refusal,
    StoreOptions, Verdict,
};
use result_inbox::outbox::{self, Effect, EffectId, EffectKey, EffectState, OutboxError, Target};
use result_inbox::scope::{InboxScope, ReceiverName};
use result_inbox::task_view::TaskView;
use result_inbox::BoxError;
use sqlx::{Connection, MySql, MySqlConnection, PgConnection, Postgres};
use tokio::sync::Semaphore;
use tower::{Service, ServiceBuilder, ServiceExt};

/// What these tests need of an engine: a database of a test's own with
/// the outbox, a connection to it, and a way to forget an inbox row as
/// prune would.
pub(crate) trait Server: Engine {
    type Db: Send + Sync;
    fn database() -> impl Future<Output = (Self::Db, Dsn)> + Send;
    fn connect(dsn: &Dsn) -> impl Future<Output = Self::Connection> + Send;
    fn forget_inbox_rows(dsn: &Dsn) -> impl Future<Output = ()> + Send;
    /// A transaction of another client that holds `effect`'s row locked
    /// until it is dropped.
    fn hold(dsn: &Dsn, effect: &EffectId) -> impl Future<Output = Self::Connection> + Send;
    /// The address of a new account with `SELECT, INSERT, UPDATE` on the
    /// inbox, the view and the outbox, and nothing else.
    fn runtime(db: &Self::Db) -> impl Future<Output = String> + Send;
    fn connect_url(url: &str) -> impl Future<Output = Self::Connection> + Send;
    /// The administrator's address of the database `dsn` names, as an
    /// operator gives it to `receiver`.
    fn admin_url(dsn: &Dsn) -> String;
    /// A database `receiver init` made without `--outbox`, and its
    /// administrator's address.
    fn without_outbox() -> impl Future<Output = (Self::Db, String)> + Send;
    /// The rows this connection's statements have read so far, by key or
    /// by scan: the handler's reads on MySQL, the outbox's rows fetched on
    /// PostgreSQL (the session told to read no table whole where an index
    /// can serve, so that a small table does not make that the cheaper
    /// plan).
    fn rows_read(conn: &mut Self::Connection) -> impl Future<Output = u64> + Send;
    /// Runs `sql`, which must succeed.
    fn run(conn: &mut Self::Connection, sql: &str) -> impl Future<Output = ()> + Send;
    /// The outbox's rows this connection read by scanning the table whole
    /// so far: in its transaction on PostgreSQL, in its session on MySQL.
    fn rows_scanned(conn: &mut Self::Connection) -> impl Future<Output = u64> + Send;
    /// The outbox's rows this connection read by scanning the table whole
    /// so far, over all its transactions.
    fn table_scans(conn: &mut Self::Connection) -> impl Future<Output = u64> + Send;
    /// The outbox's statistics brought up to date, as the server's own
    /// upkeep keeps them (a table never analyzed looks nearly empty to
    /// PostgreSQL's planner, whatever it holds).
    fn analyze(conn: &mut Self::Connection) -> impl Future<Output = ()> + Send;
}

/// What these tests read of an engine's outbox: each sent effect's id,
/// last answer and attempts, in record order.
pub(crate) trait SentRows: Server {
    fn sent(dsn: &result_inbox::db::Dsn) -> impl Future<Output = Vec<(String, String, i64)>>;
}

impl SentRows for MySql {
    async fn sent(dsn: &result_inbox::db::Dsn) -> Vec<(String, String, i64)> {
        sqlx::query_as(
            "SELECT CAST(effect_id AS CHAR), CAST(last_result AS CHAR), CAST(attempts AS SIGNED) \
             FROM receiver_outbox WHERE state = 'sent' ORDER BY seq",
        )
        .fetch_all(&mut Self::connect(dsn).await)
        .await
        .unwrap()
    }
}

impl SentRows for Postgres {
    async fn sent(dsn: &result_inbox::db::Dsn) -> Vec<(String, String, i64)> {
        sqlx::query_as(
            "SELECT effect_id::text, last_result::text, attempts::int8 \
             FROM receiver_outbox WHERE state = 'sent' ORDER BY seq",
        )
        .fetch_all(&mut Self::connect(dsn).await)
        .await
        .unwrap()
    }
}

/// The statement that locks `effect`'s row (an id is 32 hex digits:
/// nothing to quote).
fn lock_of(effect: &EffectId) -> String {
    format!(
        "SELECT effect_id FROM receiver_outbox WHERE effect_id = '{}' FOR UPDATE",
        effect.as_str()
    )
}

impl Server for MySql {
    type Db = TestDb;
    async fn runtime(db: &TestDb) -> String {
        let grants: Vec<String> = ["receiver_inbox", "receiver_task_views", "receiver_outbox"]
            .iter()
            .map(|t| format!("SELECT, INSERT, UPDATE ON `{{db}}`.`{t}`"))
            .collect();
        let grants: Vec<&str> = grants.iter().map(String::as_str).collect();
        let (user, password) = db.user_with(&grants).await;
        db.dsn_of(&user, &password)
    }
    async fn connect_url(url: &str) -> MySqlConnection {
        MySqlConnection::connect(url).await.unwrap()
    }
    async fn hold(dsn: &Dsn, effect: &EffectId) -> MySqlConnection {
        use sqlx::Executor;
        let mut conn = Self::connect(dsn).await;
        conn.execute("BEGIN").await.unwrap();
        conn.execute(lock_of(effect).as_str()).await.unwrap();
        conn
    }
    async fn database() -> (TestDb, Dsn) {
        let db = TestDb::empty().await;
        let dsn = db.dsn.clone();
        common::init_outbox(&dsn).await;
        (db, dsn)
    }
    async fn connect(dsn: &Dsn) -> MySqlConnection {
        MySqlConnection::connect(&Self::admin_url(dsn))
            .await
            .unwrap()
    }
    fn admin_url(dsn: &Dsn) -> String {
        common::dsn_for(dsn.database())
    }
    async fn without_outbox() -> (TestDb, String) {
        let db = TestDb::initialized().await;
        let url = common::dsn_for(&db.name);
        (db, url)
    }
    async fn forget_inbox_rows(dsn: &Dsn) {
        let mut conn = Self::connect(dsn).await;
        sqlx::query("DELETE FROM receiver_inbox")
            .execute(&mut conn)
            .await
            .unwrap();
    }
    async fn rows_read(conn: &mut MySqlConnection) -> u64 {
        let reads: Vec<(String, String)> =
            sqlx::query_as("SHOW SESSION STATUS LIKE 'Handler\\_read\\_%'")
                .fetch_all(conn)
                .await
                .unwrap();
        reads.iter().map(|(_, n)| n.parse::<u64>().unwrap()).sum()
    }
    async fn run(conn: &mut MySqlConnection, sql: &str) {
        use sqlx::Executor;
        conn.execute(sql).await.unwrap();
    }
    async fn rows_scanned(conn: &mut MySqlConnection) -> u64 {
        let (_, n): (String, String) =
            sqlx::query_as("SHOW SESSION STATUS LIKE 'Handler\\_read\\_rnd\\_next'")
                .fetch_one(conn)
                .await
                .unwrap();
        n.parse().unwrap()
    }
    async fn table_scans(conn: &mut MySqlConnection) -> u64 {
        Self::rows_scanned(conn).await
    }
    async fn analyze(conn: &mut MySqlConnection) {
        use sqlx::Executor;
        conn.execute("ANALYZE TABLE receiver_outbox").await.unwrap();
    }
}

impl Server for Postgres {
    type Db = PgTestDb;
    async fn runtime(db: &PgTestDb) -> String {
        let role = format!("outbox_runtime_{}", random_hex(4));
        db.run_script(&format!(
            "CREATE ROLE {role} LOGIN; \
             GRANT SELECT, INSERT, UPDATE ON receiver_inbox, receiver_task_views, receiver_outbox \
             TO {role};"
        ))
        .await
        .unwrap();
        let url = db.dsn.replacen("://postgres@", &format!("://{role}@"), 1);
        assert_ne!(url, db.dsn, "the admin DSN names the postgres role");
        url
    }
    async fn connect_url(url: &str) -> PgConnection {
        PgConnection::connect(url).await.unwrap()
    }
    async fn hold(dsn: &Dsn, effect: &EffectId) -> PgConnection {
        use sqlx::Executor;
        let mut conn = Self::connect(dsn).await;
        conn.execute("BEGIN").await.unwrap();
        conn.execute(lock_of(effect).as_str()).await.unwrap();
        conn
    }
    async fn database() -> (PgTestDb, Dsn) {
        let db = PgTestDb::new().await;
        let dsn = Dsn::parse(&db.dsn).unwrap();
        common::init_outbox(&dsn).await;
        (db, dsn)
    }
    async fn connect(dsn: &Dsn) -> PgConnection {
        PgConnection::connect(&Self::admin_url(dsn)).await.unwrap()
    }
    fn admin_url(dsn: &Dsn) -> String {
        let admin = common::postgres::admin_dsn();
        let (server, _) = admin.rsplit_once('/').unwrap();
        format!("{server}/{}", dsn.database())
    }
    async fn without_outbox() -> (PgTestDb, String) {
        let db = PgTestDb::initialized().await;
        let url = db.dsn.clone();
        (db, url)
    }
    async fn forget_inbox_rows(dsn: &Dsn) {
        let mut conn = Self::connect(dsn).await;
        sqlx::query("DELETE FROM receiver_inbox")
            .execute(&mut conn)
            .await
            .unwrap();
    }
    async fn rows_read(conn: &mut PgConnection) -> u64 {
        use sqlx::Executor;
        conn.execute("SET enable_seqscan = off").await.unwrap();
        // The backend's counts reach the shared statistics when it goes
        // idle after this, at once rather than within a second.
        conn.execute("SELECT pg_stat_force_next_flush()")
            .await
            .unwrap();
        let rows: i64 = sqlx::query_scalar(
            "SELECT seq_tup_read + idx_tup_fetch FROM pg_stat_user_tables \
             WHERE relname = 'receiver_outbox'",
        )
        .fetch_one(conn)
        .await
        .unwrap();
        rows as u64
    }
    async fn run(conn: &mut PgConnection, sql: &str) {
        use sqlx::Executor;
        conn.execute(sql).await.unwrap();
    }
    async fn rows_scanned(conn: &mut PgConnection) -> u64 {
        let rows: Option<i64> = sqlx::query_scalar(
            "SELECT seq_tup_read FROM pg_stat_xact_user_tables WHERE relname = 'receiver_outbox'",
        )
        .fetch_optional(conn)
        .await
        .unwrap();
        rows.unwrap_or(0) as u64
    }
    async fn table_scans(conn: &mut PgConnection) -> u64 {
        use sqlx::Executor;
        // The backend's counts reach the shared statistics when it goes
        // idle after this, at once rather than within a second.
        conn.execute("SELECT pg_stat_force_next_flush()")
            .await
            .unwrap();
        let rows: i64 = sqlx::query_scalar(
            "SELECT seq_tup_read FROM pg_stat_user_tables WHERE relname = 'receiver_outbox'",
        )
        .fetch_one(conn)
        .await
        .unwrap();
        rows as u64
    }
    async fn analyze(conn: &mut PgConnection) {
        use sqlx::Executor;
        conn.execute("ANALYZE receiver_outbox").await.unwrap();
    }
}

/// An inner service that records `effects` (target, key, ordering key)
/// for each event, one at a time or all at once, then refuses the events
/// of `refused`, or applies the task view. The key `{delivery}` stands
/// for the delivery's id; a plug event waits for the gate after it
/// recorded.
#[derive(Clone)]
pub(crate) struct Recording {
    effects: Arc<Vec<(&'static str, &'static str, Option<&'static str>)>>,
    at_once: bool,
    refused: Arc<HashSet<String>>,
    plug: Option<String>,
    entered: Arc<Semaphore>,
    gate: Arc<Semaphore>,
    /// The errors `record` returned.
    errors: Arc<Mutex<Vec<String>>>,
    /// The outbox's rows each delivery's recording read by scanning the
    /// table, when measured.
    scanned: Option<Arc<Mutex<Vec<u64>>>>,
}

impl Recording {
    pub(crate) fn of(effects: &[(&'static str, &'static str, Option<&'static str>)]) -> Self {
        Self {
            effects: Arc::new(effects.to_vec()),
            at_once: false,
            refused: Arc::default(),
            plug: None,
            entered: Arc::new(Semaphore::new(0)),
            gate: Arc::new(Semaphore::new(0)),
            errors: Arc::default(),
            scanned: None,
        }
    }
}

pub(crate) fn body_of(event: &str, key: &str) -> Bytes {
    Bytes::from(format!(
        "{{\"event\":\"{event}\",\"key\":\"{key}\"}}\u{0}\u{ff}"
    ))
}

impl<E: Server> Service<Delivery<Applying<E>>> for Recording {
    type Response = Verdict<E>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Verdict<E>, BoxError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut delivery: Delivery<Applying<E>>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let id = delivery.body().event().id().as_str().to_owned();
            let delivery_id = delivery.id().to_string();
            {
                let mut effects = Vec::new();
                for (target, key, ordering) in this.effects.iter() {
                    let key = key.replace("{delivery}", &delivery_id);
                    let mut effect = Effect::new(target, &key, body_of(&id, &key))?
                        .with_header("Content-Type", "application/json")?;
                    if let Some(ordering) = ordering {
                        effect = effect.with_ordering_key(ordering)?;
                    }
                    effects.push(effect);
                }
                let scanned_before = match &this.scanned {
                    Some(_) => E::rows_scanned(delivery.body_mut().connection()).await,
                    None => 0,
                };
                let mut recorder = delivery.body_mut().outbox();
                let recorded = match this.at_once {
                    true => recorder.record_all(effects).await.map(drop),
                    false => {
                        let mut each = Ok(());
                        for effect in effects {
                            each = recorder.record_effect(effect).await.map(drop);
                            if each.is_err() {
                                break;
                            }
                        }
                        each
                    }
                };
                if let Err(e) = recorded {
                    this.errors.lock().unwrap().push(format!("{e:?}"));
                    return Err(e.into());
                }
                if let Some(scanned) = &this.scanned {
                    let after = E::rows_scanned(delivery.body_mut().connection()).await;
                    scanned.lock().unwrap().push(after - scanned_before);
                }
            }
            if this.plug.as_deref() == Some(id.as_str()) {
                this.entered.add_permits(1);
                this.gate.acquire().await?.forget();
            }
            if this.refused.contains(&id) {
                return Err(Refusal::new("the business said no").into());
            }
            Ok(TaskView::new().call(delivery).await?)
        })
    }
}

pub(crate) struct Fixture<E: Server> {
    _db: E::Db,
    pub(crate) dsn: Dsn,
    pub(crate) scope: InboxScope,
    store: InboxStore<E>,
    task: String,
}

impl<E: Server> Fixture<E> {
    pub(crate) async fn new() -> Self {
        Self::on_queue(&random_hex(16)).await
    }

    async fn on_queue(queue: &str) -> Self {
        Self::open(queue, StoreOptions::default()).await
    }

    /// A fixture whose inbox holds at most `n` connections.
    async fn with_connections(n: u32) -> Self {
        let options = StoreOptions {
            max_connections: n,
            ..StoreOptions::default()
        };
        Self::open(&random_hex(16), options).await
    }

    async fn open(queue: &str, options: StoreOptions) -> Self {
        let (db, dsn) = E::database().await;
        let scope = InboxScope::new(
            ReceiverName::parse("outbox-test").unwrap(),
            QueueId::parse(queue).unwrap(),
        );
        let store = InboxStore::open(&dsn, scope.clone(), options)
            .await
            .unwrap();
        Fixture {
            _db: db,
            dsn,
            scope,
            store,
            task: random_hex(16),
        }
    }

    pub(crate) fn event(&self, id: &str, version: u64) -> String {
        EventSpec {
            id: id.to_owned(),
            queue_id: self.scope.queue_id.as_str(),
            task_id: &self.task,
            version,
            event_type: "task.succeeded",
            state: "SUCCEEDED",
            result: Some(r#"{"ok":true}"#),
        }
        .json()
    }

    pub(crate) async fn apply(
        &self,
        service: Recording,
        json: &str,
    ) -> Result<Receipt, InboxError> {
        self.apply_traced(service, json, None).await
    }

    pub(crate) async fn apply_traced(
        &self,
        service: Recording,
        json: &str,
        trace: Option<TraceContext>,
    ) -> Result<Receipt, InboxError> {
        ServiceBuilder::new()
            .layer(InboxLayer::new(self.store.clone()))
            .service(service)
            .oneshot(delivery(json).with_trace(trace))
            .await
    }

    pub(crate) async fn conn(&self) -> E::Connection {
        E::connect(&self.dsn).await
    }

    /// Every pending effect's id, in record order.
    pub(crate) async fn pending(&self) -> Vec<String> {
        let mut conn = self.conn().await;
        outbox::list::<E>(&mut conn, EffectState::Pending, 0, 1000)
            .await
            .unwrap()
            .into_iter()
            .map(|l| l.id)
            .collect()
    }

    pub(crate) fn id(&self, event: &str, target: &str, key: &str) -> EffectId {
        EffectId::derive(
            &self.scope,
            &EventId::parse(event).unwrap(),
            &Target::parse(target).unwrap(),
            &EffectKey::parse(key).unwrap(),
        )
    }
}

fn delivery(json: &str) -> Delivery<Bytes> {
    Delivery::new(
        DeliveryId::new(random_hex(16)),
        Bytes::from(json.to_owned()),
    )
    .with_attempt(1)
}

pub(crate) const TRACEPARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

async fn an_applied_delivery_records_one_pending_row_under_the_derived_id<E: Server>() {
    let f = Fixture::<E>::new().await;
    let event = random_hex(16);
    let recording = Recording::of(&[("customer-hook", "shipped", None)]);
    let trace = TraceContext::parse(TRACEPARENT, None);
    let receipt = f
        .apply_traced(recording, &f.event(&event, 1), trace)
        .await
        .unwrap();
    assert_eq!(receipt.outcome, Outcome::Applied);
    let id = f.id(&event, "customer-hook", "shipped");
    assert_eq!(f.pending().await, [id.as_str()]);
    // What a relay gets back is what was recorded, byte for byte.
    let mut conn = f.conn().await;
    let claimed = outbox::claim::<E>(&mut conn, "relay-a", Duration::from_secs(30), 10)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    let effect = &claimed[0];
    assert_eq!(effect.id, id);
    assert_eq!(effect.event.as_str(), event);
    assert_eq!(effect.consumer, "outbox-test");
    assert_eq!(effect.queue, f.scope.queue_id.as_str());
    assert_eq!(effect.target.as_str(), "customer-hook");
    assert_eq!(effect.key.as_str(), "shipped");
    assert_eq!(effect.ordering_key.as_str(), "shipped");
    assert_eq!(effect.body, body_of(&event, "shipped"));
    assert_eq!(effect.headers.get("content-type"), Some("application/json"));
    assert_eq!(effect.traceparent.as_deref(), Some(TRACEPARENT));
    assert_eq!(effect.attempts, 0);
}

async fn a_refused_delivery_leaves_no_effect<E: Server>() {
    let f = Fixture::<E>::new().await;
    let event = random_hex(16);
    let mut recording = Recording::of(&[("hook", "a", None), ("hook", "b", None)]);
    recording.refused = Arc::new([event.clone()].into());
    let answer = f.apply(recording, &f.event(&event, 1)).await;
    assert!(matches!(answer, Err(InboxError::Refused(_))), "{answer:?}");
    assert!(f.pending().await.is_empty());
}

async fn a_duplicate_delivery_records_nothing_new<E: Server>() {
    let f = Fixture::<E>::new().await;
    let json = f.event(&random_hex(16), 1);
    // A key per delivery: a second call of the inner service would make a
    // second row.
    let recording = Recording::of(&[("hook", "{delivery}", None)]);
    let first = f.apply(recording.clone(), &json).await.unwrap();
    assert_eq!(first.outcome, Outcome::Applied);
    let second = f.apply(recording, &json).await.unwrap();
    assert_eq!(second.outcome, Outcome::Duplicate { applied: true });
    assert_eq!(f.pending().await.len(), 1);
}

async fn two_effects_with_one_key_are_an_error_and_leave_no_row<E: Server>() {
    let f = Fixture::<E>::new().await;
    let event = random_hex(16);
    // One key twice, told apart only by the ordering key.
    let recording = Recording::of(&[("hook", "k", Some("x")), ("hook", "k", Some("y"))]);
    let answer = f.apply(recording.clone(), &f.event(&event, 1)).await;
    match &answer {
        Err(InboxError::Refused(r)) => {
            assert!(r.reason().contains("recorded already"), "{r}");
            assert!(!answer.as_ref().unwrap_err().is_retryable());
        }
        other => panic!("{other:?}"),
    }
    let errors = recording.errors.lock().unwrap().clone();
    assert_eq!(errors.len(), 1);
    assert!(errors[0].starts_with("DuplicateEffect"), "{errors:?}");
    assert!(f.pending().await.is_empty());
    // The same key for another target is another effect.
    let event = random_hex(16);
    let recording = Recording::of(&[("hook", "k", None), ("other", "k", None)]);
    f.apply(recording, &f.event(&event, 2)).await.unwrap();
    assert_eq!(f.pending().await.len(), 2);
}

async fn an_effect_committed_before_is_refused_by_its_key_not_written_twice<E: Server>() {
    let f = Fixture::<E>::new().await;
    let event = random_hex(16);
    let json = f.event(&event, 1);
    let recording = Recording::of(&[("hook", "k", None)]);
    f.apply(recording.clone(), &json).await.unwrap();
    // The inbox row forgotten (as after a prune): the event applies again,
    // and its effect meets the committed row's key on the server.
    E::forget_inbox_rows(&f.dsn).await;
    let answer = f.apply(recording.clone(), &json).await;
    assert!(matches!(answer, Err(InboxError::Refused(_))), "{answer:?}");
    let errors = recording.errors.lock().unwrap().clone();
    assert!(errors[0].starts_with("DuplicateEffect"), "{errors:?}");
    assert_eq!(f.pending().await, [f.id(&event, "hook", "k").as_str()]);
}

async fn effects_recorded_at_once_are_one_statement_and_keep_their_order<E: Server>() {
    let f = Fixture::<E>::new().await;
    let event = random_hex(16);
    let mut recording = Recording::of(&[
        ("hook", "c", None),
        ("other", "a", None),
        ("hook", "b", None),
    ]);
    recording.at_once = true;
    f.apply(recording, &f.event(&event, 1)).await.unwrap();
    let mut conn = f.conn().await;
    let rows = outbox::list::<E>(&mut conn, EffectState::Pending, 0, 1000)
        .await
        .unwrap();
    let listed: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r.target.as_str(), r.key.as_str()))
        .collect();
    assert_eq!(listed, [("hook", "c"), ("other", "a"), ("hook", "b")]);
    // A statement's rows share its start time, to the microsecond; one
    // statement per effect would give each its own.
    let times: BTreeSet<&str> = rows.iter().map(|r| r.created_at.as_str()).collect();
    assert_eq!(times.len(), 1, "{times:?}");
}

async fn effects_recorded_at_once_are_none_written_when_one_was_committed_before<E: Server>() {
    let f = Fixture::<E>::new().await;
    let event = random_hex(16);
    let json = f.event(&event, 1);
    f.apply(Recording::of(&[("hook", "b", None)]), &json)
        .await
        .unwrap();
    E::forget_inbox_rows(&f.dsn).await;
    let mut recording = Recording::of(&[
        ("hook", "a", None),
        ("hook", "b", None),
        ("hook", "c", None),
    ]);
    recording.at_once = true;
    let answer = f.apply(recording.clone(), &json).await;
    assert!(matches!(answer, Err(InboxError::Refused(_))), "{answer:?}");
    let errors = recording.errors.lock().unwrap().clone();
    let named = f.id(&event, "hook", "b");
    assert!(
        errors[0].starts_with("DuplicateEffect") && errors[0].contains(named.as_str()),
        "{errors:?}"
    );
    assert_eq!(f.pending().await, [named.as_str()]);
}

/// PostgreSQL keeps a plan for a statement a connection prepared, made
/// once for all values after a few executions: the plan of a delivery's
/// effects, made while the outbox was nearly empty, must still look each
/// id up by the key once the table holds many rows.
async fn effects_recorded_at_once_are_looked_up_by_key_when_the_outbox_has_grown<E: Server>() {
    let f = Fixture::<E>::with_connections(1).await;
    let mut recording = Recording::of(&[
        ("hook", "a", None),
        ("hook", "b", None),
        ("hook", "c", None),
    ]);
    recording.at_once = true;
    let mut version = 0;
    for _ in 0..12 {
        version += 1;
        let event = random_hex(16);
        f.apply(recording.clone(), &f.event(&event, version))
            .await
            .unwrap();
    }
    let mut conn = f.conn().await;
    grow_with_sent_effects::<E>(&mut conn, 20_000).await;
    let scanned = Arc::new(Mutex::new(Vec::new()));
    recording.scanned = Some(scanned.clone());
    for _ in 0..3 {
        version += 1;
        let event = random_hex(16);
        f.apply(recording.clone(), &f.event(&event, version))
            .await
            .unwrap();
    }
    let scanned = scanned.lock().unwrap().clone();
    assert_eq!(scanned.len(), 3);
    assert!(
        scanned.iter().all(|n| *n < 100),
        "rows read by scanning the outbox: {scanned:?}"
    );
}

/// A body of bytes that are not text, larger than the notifications most
/// effects are, comes back to a relay byte for byte, beside a small one
/// recorded before it.
async fn a_large_binary_body_is_recorded_and_claimed_byte_for_byte<E: Server>() {
    let f = Fixture::<E>::new().await;
    let event = random_hex(16);
    let large = Bytes::from(
        (0..200_000u32)
            .map(|i| (i % 251) as u8)
            .collect::<Vec<u8>>(),
    );
    let body = large.clone();
    let service = tower::service_fn(move |mut delivery: Delivery<Applying<E>>| {
        let body = body.clone();
        async move {
            let mut outbox = delivery.body_mut().outbox();
            outbox.record("hook", "small", "{}").await?;
            outbox.record("hook", "large", body).await?;
            Ok::<_, BoxError>(TaskView::new().call(delivery).await?)
        }
    });
    let receipt = ServiceBuilder::new()
        .layer(InboxLayer::new(f.store.clone()))
        .service(service)
        .oneshot(delivery(&f.event(&event, 1)))
        .await
        .unwrap();
    assert_eq!(receipt.outcome, Outcome::Applied);
    assert_eq!(
        f.pending().await,
        [
            f.id(&event, "hook", "small").as_str(),
            f.id(&event, "hook", "large").as_str()
        ]
    );
    let mut conn = f.conn().await;
    let claimed = outbox::claim::<E>(&mut conn, "relay-a", Duration::from_secs(30), 10)
        .await
        .unwrap();
    let sent: Vec<&Bytes> = claimed.iter().map(|c| &c.body).collect();
    assert!(
        sent.contains(&&large),
        "the large body came back byte for byte"
    );
}

/// Adds `rows` sent effects of another receiver to the outbox, as a
/// busy deployment's table holds until they are pruned, in statements of
/// a thousand rows.
async fn grow_with_sent_effects<E: Server>(conn: &mut E::Connection, rows: usize) {
    for n in 0..rows.div_ceil(1000) {
        let values = (0..1000)
            .map(|i| {
                let id = format!("{:032x}", n * 1000 + i);
                format!(
                    "('{id}', 'elsewhere', '{id}', '{id}', 'hook', 'k', 'k', '', '{{}}', 'sent', 1, \
                     '2026-01-01 00:00:00', '2026-01-01 00:00:00')"
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        E::run(
            conn,
            &format!(
                "INSERT INTO receiver_outbox (effect_id, consumer_name, queue_id, event_id, \
                 target, effect_key, ordering_key, body, headers, state, attempts, \
                 next_attempt_at, created_at) VALUES {values}"
            ),
        )
        .await;
    }
}

/// A relay's connection keeps the plans of its claim statements: those
/// made while the outbox was nearly empty must still find the due
/// effects and lease them by an index once the table holds many rows.
async fn a_claim_reads_no_outbox_whole_when_it_has_grown_since_the_relay_started<E: Server>() {
    let f = Fixture::<E>::new().await;
    let mut relay = f.conn().await;
    let recording = Recording::of(&[("hook", "k", None)]);
    for version in 1..=8 {
        let event = random_hex(16);
        f.apply(recording.clone(), &f.event(&event, version))
            .await
            .unwrap();
        let claimed = outbox::claim::<E>(&mut relay, "relay-a", LEASE, 10)
            .await
            .unwrap();
        assert_eq!(claimed.len(), 1);
        assert!(
            outbox::mark_sent::<E>(&mut relay, &claimed[0].id, "relay-a", "200")
                .await
                .unwrap()
        );
    }
    grow_with_sent_effects::<E>(&mut f.conn().await, 20_000).await;
    f.apply(recording, &f.event(&random_hex(16), 9))
        .await
        .unwrap();
    let before = E::table_scans(&mut relay).await;
    let claimed = outbox::claim::<E>(&mut relay, "relay-a", LEASE, 10)
        .await
        .unwrap();
    let scanned = E::table_scans(&mut relay).await - before;
    assert_eq!(claimed.len(), 1);
    assert!(
        scanned < 1000,
        "rows read by scanning the outbox: {scanned}"
    );
}

async fn in_a_batch_a_refused_sibling_leaves_no_effect_and_the_others_keep_theirs<E: Server>() {
    let f = Fixture::<E>::new().await;
    let plug = random_hex(16);
    let siblings: Vec<String> = (0..4).map(|_| random_hex(16)).collect();
    let mut recording = Recording::of(&[("hook", "k", None)]);
    recording.plug = Some(plug.clone());
    recording.refused = Arc::new([siblings[1].clone()].into());
    let batching = Batching::<E>::up_to(8).transactions(1);
    let service = ServiceBuilder::new()
        .layer(InboxLayer::new(f.store.clone()).batching(batching))
        .service(recording.clone());
    // The plug holds the one transaction; the siblings queue behind it and
    // make the next one together. One task per event, so each advances.
    let first = tokio::spawn(service.clone().oneshot(delivery(&f.event(&plug, 1))));
    recording.entered.acquire().await.unwrap().forget();
    let jsons: Vec<String> = siblings
        .iter()
        .map(|id| {
            EventSpec {
                id: id.clone(),
                queue_id: f.scope.queue_id.as_str(),
                task_id: &random_hex(16),
                version: 1,
                event_type: "task.succeeded",
                state: "SUCCEEDED",
                result: None,
            }
            .json()
        })
        .collect();
    let mut queued = Box::pin(join_all(
        jsons.iter().map(|j| service.clone().oneshot(delivery(j))),
    ));
    std::future::poll_fn(|cx| {
        assert!(queued.as_mut().poll(cx).is_pending());
        Poll::Ready(())
    })
    .await;
    recording.gate.add_permits(1);
    first.await.unwrap().expect("the plug applies");
    let answers = queued.await;
    for (i, answer) in answers.iter().enumerate() {
        if i == 1 {
            assert!(matches!(answer, Err(InboxError::Refused(_))), "{answer:?}");
        } else {
            assert_eq!(answer.as_ref().unwrap().outcome, Outcome::Applied);
        }
    }
    let expected: BTreeSet<String> = [&plug, &siblings[0], &siblings[2], &siblings[3]]
        .into_iter()
        .map(|e| f.id(e, "hook", "k").as_str().to_owned())
        .collect();
    let found: BTreeSet<String> = f.pending().await.into_iter().collect();
    assert_eq!(found, expected);
}

async fn the_effect_id_is_the_same_when_the_event_is_applied_on_a_fresh_database<E: Server>() {
    let queue = random_hex(16);
    let event = random_hex(16);
    let mut ids = Vec::new();
    for _ in 0..2 {
        let f = Fixture::<E>::on_queue(&queue).await;
        let json = EventSpec {
            id: event.clone(),
            queue_id: &queue,
            task_id: "0123456789abcdef0123456789abcdef",
            version: 3,
            event_type: "task.succeeded",
            state: "SUCCEEDED",
            result: None,
        }
        .json();
        f.apply(Recording::of(&[("hook", "notify", None)]), &json)
            .await
            .unwrap();
        ids.push(f.pending().await);
    }
    assert_eq!(ids[0], ids[1]);
    assert_eq!(ids[0].len(), 1);
}

/// A fixture whose one event recorded `effects`: their ids, by key.
async fn recorded<E: Server>(
    effects: &[(&'static str, &'static str, Option<&'static str>)],
) -> (Fixture<E>, Vec<EffectId>) {
    let f = Fixture::<E>::new().await;
    let event = random_hex(16);
    f.apply(Recording::of(effects), &f.event(&event, 1))
        .await
        .unwrap();
    let ids = effects.iter().map(|(t, k, _)| f.id(&event, t, k)).collect();
    (f, ids)
}

fn ids_of(claimed: &[outbox::Claimed]) -> Vec<EffectId> {
    claimed.iter().map(|c| c.id.clone()).collect()
}

const LEASE: Duration = Duration::from_secs(60);

async fn two_claimers_at_once_get_disjoint_effects<E: Server>() {
    const KEYS: [&str; 20] = [
        "k00", "k01", "k02", "k03", "k04", "k05", "k06", "k07", "k08", "k09", "k10", "k11", "k12",
        "k13", "k14", "k15", "k16", "k17", "k18", "k19",
    ];
    let effects: Vec<_> = KEYS.iter().map(|k| ("hook", *k, None)).collect();
    let (f, ids) = recorded::<E>(&effects).await;
    let (mut a, mut b) = (f.conn().await, f.conn().await);
    let (first, second) = tokio::join!(
        outbox::claim::<E>(&mut a, "relay-a", LEASE, 12),
        outbox::claim::<E>(&mut b, "relay-b", LEASE, 12),
    );
    let (first, second) = (ids_of(&first.unwrap()), ids_of(&second.unwrap()));
    let a_set: HashSet<_> = first.iter().collect();
    assert!(
        second.iter().all(|id| !a_set.contains(id)),
        "{first:?} {second:?}"
    );
    assert_eq!(first.len() + second.len(), 20);
    let all: HashSet<_> = first.iter().chain(&second).collect();
    assert_eq!(all, ids.iter().collect());
    // Everything is leased: nothing is left to claim.
    assert!(outbox::claim::<E>(&mut a, "relay-c", LEASE, 20)
        .await
        .unwrap()
        .is_empty());
}

async fn a_claim_skips_a_row_another_transaction_holds_without_waiting_for_it<E: Server>() {
    let (f, ids) = recorded::<E>(&[("hook", "held", None), ("hook", "free", None)]).await;
    let holder = E::hold(&f.dsn, &ids[0]).await;
    let mut conn = f.conn().await;
    let claimed = tokio::time::timeout(
        Duration::from_secs(5),
        outbox::claim::<E>(&mut conn, "relay-a", LEASE, 10),
    )
    .await
    .expect("the claim does not wait on the held row")
    .unwrap();
    assert_eq!(ids_of(&claimed), [ids[1].clone()]);
    drop(holder);
}

async fn a_key_waits_behind_its_head_while_other_keys_go_on<E: Server>() {
    let (f, ids) = recorded::<E>(&[
        ("hook", "first", Some("task-1")),
        ("hook", "second", Some("task-1")),
        ("hook", "other", Some("task-2")),
        ("elsewhere", "same-key-other-target", Some("task-1")),
    ])
    .await;
    let mut conn = f.conn().await;
    let claimed = outbox::claim::<E>(&mut conn, "relay-a", LEASE, 10)
        .await
        .unwrap();
    assert_eq!(
        ids_of(&claimed),
        [ids[0].clone(), ids[2].clone(), ids[3].clone()]
    );
    // The second of task-1 waits while its head is leased...
    assert!(outbox::claim::<E>(&mut conn, "relay-b", LEASE, 10)
        .await
        .unwrap()
        .is_empty());
    // ...and while its head failed and waits to be tried again.
    assert!(outbox::mark_failed::<E>(
        &mut conn,
        &ids[0],
        "relay-a",
        Duration::from_secs(60),
        "503"
    )
    .await
    .unwrap());
    assert!(outbox::claim::<E>(&mut conn, "relay-b", LEASE, 10)
        .await
        .unwrap()
        .is_empty());
    // A head due again is claimed again, still alone.
    let (f2, ids2) = recorded::<E>(&[
        ("hook", "first", Some("task-1")),
        ("hook", "second", Some("task-1")),
    ])
    .await;
    let mut conn2 = f2.conn().await;
    let claimed = outbox::claim::<E>(&mut conn2, "relay-a", LEASE, 10)
        .await
        .unwrap();
    assert_eq!(ids_of(&claimed), [ids2[0].clone()]);
    assert!(
        outbox::mark_failed::<E>(&mut conn2, &ids2[0], "relay-a", Duration::ZERO, "timeout")
            .await
            .unwrap()
    );
    let again = outbox::claim::<E>(&mut conn2, "relay-b", LEASE, 10)
        .await
        .unwrap();
    assert_eq!(ids_of(&again), [ids2[0].clone()]);
    assert_eq!(again[0].attempts, 1);
    // Sent, it lets the next of its key go.
    assert!(
        outbox::mark_sent::<E>(&mut conn2, &ids2[0], "relay-b", "200")
            .await
            .unwrap()
    );
    let next = outbox::claim::<E>(&mut conn2, "relay-b", LEASE, 10)
        .await
        .unwrap();
    assert_eq!(ids_of(&next), [ids2[1].clone()]);
}

async fn an_expired_lease_is_claimed_again_and_the_old_owner_s_outcome_changes_nothing<
    E: Server,
>() {
    let (f, ids) = recorded::<E>(&[("hook", "k", None)]).await;
    let mut conn = f.conn().await;
    let short = Duration::from_millis(1);
    let first = outbox::claim::<E>(&mut conn, "relay-a", short, 10)
        .await
        .unwrap();
    assert_eq!(ids_of(&first), ids);
    tokio::time::sleep(Duration::from_millis(20)).await;
    let second = outbox::claim::<E>(&mut conn, "relay-b", LEASE, 10)
        .await
        .unwrap();
    assert_eq!(ids_of(&second), ids);
    // relay-a's lease was taken over: its answers change nothing.
    for changed in [
        outbox::mark_sent::<E>(&mut conn, &ids[0], "relay-a", "200").await,
        outbox::mark_failed::<E>(&mut conn, &ids[0], "relay-a", LEASE, "503").await,
        outbox::mark_dead::<E>(&mut conn, &ids[0], "relay-a", "410").await,
    ] {
        assert!(!changed.unwrap());
    }
    assert_eq!(f.pending().await, [ids[0].as_str()]);
    assert!(outbox::mark_sent::<E>(&mut conn, &ids[0], "relay-b", "200")
        .await
        .unwrap());
    assert!(f.pending().await.is_empty());
    // Sent once is sent: not again, not by its owner either.
    assert!(
        !outbox::mark_sent::<E>(&mut conn, &ids[0], "relay-b", "200")
            .await
            .unwrap()
    );
}

async fn each_answer_reads_the_one_row_of_its_effect<E: Server>() {
    let f = Fixture::<E>::new().await;
    let recording = Recording::of(&[
        ("hook", "a", None),
        ("hook", "b", None),
        ("hook", "c", None),
    ]);
    // Ten events' effects: the first event's three are the heads of their
    // keys, the others wait behind them.
    let mut events = Vec::new();
    for version in 1..=10 {
        let event = random_hex(16);
        f.apply(recording.clone(), &f.event(&event, version))
            .await
            .unwrap();
        events.push(event);
    }
    let mut conn = f.conn().await;
    let claimed = outbox::claim::<E>(&mut conn, "relay-a", LEASE, 10)
        .await
        .unwrap();
    let ids: Vec<EffectId> = ["a", "b", "c"]
        .iter()
        .map(|key| f.id(&events[0], "hook", key))
        .collect();
    assert_eq!(ids_of(&claimed), ids);
    E::analyze(&mut conn).await;
    let before = E::rows_read(&mut conn).await;
    assert!(outbox::mark_sent::<E>(&mut conn, &ids[0], "relay-a", "200")
        .await
        .unwrap());
    assert!(
        outbox::mark_failed::<E>(&mut conn, &ids[1], "relay-a", LEASE, "503")
            .await
            .unwrap()
    );
    assert!(outbox::mark_dead::<E>(&mut conn, &ids[2], "relay-a", "410")
        .await
        .unwrap());
    // A relay records an answer for every attempt, while effects pile up
    // (pending behind their heads, sent until they are pruned): each
    // answer finds its row by the effect's id, never by reading others.
    assert_eq!(E::rows_read(&mut conn).await - before, 3);
}

async fn a_dead_effect_is_listed_and_replayed_under_the_same_id<E: Server>() {
    let (f, ids) = recorded::<E>(&[
        ("hook", "gone", Some("task-1")),
        ("hook", "next", Some("task-1")),
    ])
    .await;
    let mut conn = f.conn().await;
    outbox::claim::<E>(&mut conn, "relay-a", LEASE, 10)
        .await
        .unwrap();
    assert!(outbox::mark_dead::<E>(&mut conn, &ids[0], "relay-a", "410")
        .await
        .unwrap());
    let dead = outbox::list::<E>(&mut conn, EffectState::Dead, 0, 10)
        .await
        .unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].id, ids[0].as_str());
    assert_eq!(dead[0].state, "dead");
    assert_eq!(dead[0].attempts, 1);
    assert_eq!(dead[0].last_result.as_deref(), Some("410"));
    assert!(dead[0].age_seconds >= 0);
    assert!(dead[0].created_at.ends_with('Z'), "{}", dead[0].created_at);
    // A dead head no longer holds its key.
    let next = outbox::claim::<E>(&mut conn, "relay-a", LEASE, 10)
        .await
        .unwrap();
    assert_eq!(ids_of(&next), [ids[1].clone()]);
    assert_eq!(
        outbox::replay_dead::<E>(&mut conn, Some(&ids[0]))
            .await
            .unwrap(),
        1
    );
    assert!(outbox::list::<E>(&mut conn, EffectState::Dead, 0, 10)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(f.pending().await, [ids[0].as_str(), ids[1].as_str()]);
    assert_eq!(outbox::replay_dead::<E>(&mut conn, None).await.unwrap(), 0);
    assert!(matches!(
        outbox::list::<E>(&mut conn, EffectState::Sent, 0, 10).await,
        Err(OutboxError::Invalid { .. })
    ));
}

async fn the_runtime_account_records_and_settles_effects_with_select_insert_and_update<
    E: Server,
>() {
    let f = Fixture::<E>::new().await;
    let url = E::runtime(&f._db).await;
    let store = InboxStore::<E>::open(
        &Dsn::parse(&url).unwrap(),
        f.scope.clone(),
        StoreOptions::default(),
    )
    .await
    .unwrap();
    let event = random_hex(16);
    ServiceBuilder::new()
        .layer(InboxLayer::new(store))
        .service(Recording::of(&[("hook", "k", None), ("hook", "j", None)]))
        .oneshot(delivery(&f.event(&event, 1)))
        .await
        .unwrap();
    let mut conn = E::connect_url(&url).await;
    outbox::check_skip_locked::<E>(&mut conn).await.unwrap();
    let claimed = outbox::claim::<E>(&mut conn, "relay-a", LEASE, 10)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 2);
    assert!(
        outbox::mark_sent::<E>(&mut conn, &claimed[0].id, "relay-a", "200")
            .await
            .unwrap()
    );
    assert!(
        outbox::mark_dead::<E>(&mut conn, &claimed[1].id, "relay-a", "410")
            .await
            .unwrap()
    );
    assert_eq!(outbox::replay_dead::<E>(&mut conn, None).await.unwrap(), 1);
    assert_eq!(
        outbox::list::<E>(&mut conn, EffectState::Pending, 0, 10)
            .await
            .unwrap()
            .len(),
        1
    );
}

async fn the_server_has_skip_locked<E: Server>() {
    let f = Fixture::<E>::new().await;
    let mut conn = f.conn().await;
    outbox::check_skip_locked::<E>(&mut conn).await.unwrap();
}

/// `receiver outbox <args>` on `url`: exit code, stdout, stderr.
fn outbox_command(url: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let out = common::orbit::receiver()
        .arg("outbox")
        .args(args)
        .env("ORBIT_RECEIVER_DSN", url)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn receiver_outbox_lists_pending_and_dead_effects_and_replays_a_dead_one_under_its_id<
    E: Server,
>() {
    let (f, ids) = recorded::<E>(&[
        ("hook", "gone", Some("task-1")),
        ("hook", "next", Some("task-1")),
        ("other", "with space", None),
    ])
    .await;
    let mut conn = f.conn().await;
    outbox::claim::<E>(&mut conn, "relay-a", LEASE, 10)
        .await
        .unwrap();
    assert!(outbox::mark_dead::<E>(&mut conn, &ids[0], "relay-a", "410")
        .await
        .unwrap());
    let url = E::admin_url(&f.dsn);

    let (code, stdout, stderr) = outbox_command(&url, &[]);
    assert_eq!(code, Some(0), "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{stdout}");
    let line_of = |id: &EffectId| {
        lines
            .iter()
            .find(|l| l.starts_with(&format!("effect={id} ")))
            .unwrap_or_else(|| panic!("no line for {id}: {stdout}"))
            .to_string()
    };
    assert!(
        line_of(&ids[0]).contains(" target=hook key=gone state=dead attempts=1 last=410 age_s="),
        "{stdout}"
    );
    assert!(
        line_of(&ids[2]).contains(r#" key="with space" state=pending attempts=0 last=- "#),
        "{stdout}"
    );
    assert!(
        lines[3].starts_with("outbox pending=2 dead=1 oldest_pending_age_s="),
        "{stdout}"
    );
    assert!(
        !stdout.contains("\"event\""),
        "a body was printed: {stdout}"
    );

    let (code, json, _) = outbox_command(&url, &["--json"]);
    assert_eq!(code, Some(0));
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        (v["pending"].as_u64(), v["dead"].as_u64()),
        (Some(2), Some(1))
    );
    assert_eq!(v["effects"].as_array().unwrap().len(), 3);

    let dead = ids[0].as_str();
    let (code, stdout, stderr) = outbox_command(&url, &["replay", "--effect", dead, "--dry-run"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains(&format!("effect={dead} target=hook result=would_replay")));
    assert!(
        stdout.ends_with("outbox replay dead=1 replayed=0 dry_run=true\n"),
        "{stdout}"
    );
    assert!(outbox_command(&url, &[]).1.contains("pending=2 dead=1"));

    let (code, stdout, stderr) = outbox_command(&url, &["replay", "--effect", dead]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.ends_with("outbox replay dead=1 replayed=1 dry_run=false\n"),
        "{stdout}"
    );
    let (_, listed, _) = outbox_command(&url, &[]);
    assert!(listed.contains("pending=3 dead=0"), "{listed}");
    assert!(
        listed.contains(&format!(
            "effect={dead} target=hook key=gone state=pending attempts=0"
        )),
        "replayed under the same id: {listed}"
    );

    let pending = ids[1].as_str();
    let (code, _, stderr) = outbox_command(&url, &["replay", "--effect", pending]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("is not dead"), "{stderr}");
    let (code, _, stderr) = outbox_command(&url, &["replay", "--effect", "not-an-id"]);
    assert_eq!(code, Some(2), "{stderr}");
    let (code, _, stderr) = outbox_command(&url, &["replay"]);
    assert_eq!(code, Some(2), "{stderr}");
}

async fn receiver_outbox_without_the_table_says_what_creates_it<E: Server>() {
    let (_db, url) = E::without_outbox().await;
    let (code, _, stderr) = outbox_command(&url, &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("table receiver_outbox is missing")
            && stderr.contains("receiver init --keep-existing --outbox"),
        "{stderr}"
    );
}

on_both!(
    an_applied_delivery_records_one_pending_row_under_the_derived_id,
    a_refused_delivery_leaves_no_effect,
    a_duplicate_delivery_records_nothing_new,
    two_effects_with_one_key_are_an_error_and_leave_no_row,
    an_effect_committed_before_is_refused_by_its_key_not_written_twice,
    effects_recorded_at_once_are_one_statement_and_keep_their_order,
    effects_recorded_at_once_are_none_written_when_one_was_committed_before,
    effects_recorded_at_once_are_looked_up_by_key_when_the_outbox_has_grown,
    a_claim_reads_no_outbox_whole_when_it_has_grown_since_the_relay_started,
    a_large_binary_body_is_recorded_and_claimed_byte_for_byte,
    in_a_batch_a_refused_sibling_leaves_no_effect_and_the_others_keep_theirs,
    the_effect_id_is_the_same_when_the_event_is_applied_on_a_fresh_database,
    two_claimers_at_once_get_disjoint_effects,
    a_claim_skips_a_row_another_transaction_holds_without_waiting_for_it,
    a_key_waits_behind_its_head_while_other_keys_go_on,
    an_expired_lease_is_claimed_again_and_the_old_owner_s_outcome_changes_nothing,
    each_answer_reads_the_one_row_of_its_effect,
    a_dead_effect_is_listed_and_replayed_under_the_same_id,
    the_server_has_skip_locked,
    the_runtime_account_records_and_settles_effects_with_select_insert_and_update,
    receiver_outbox_lists_pending_and_dead_effects_and_replays_a_dead_one_under_its_id,
    receiver_outbox_without_the_table_says_what_creates_it,
);

/// The derivation is frozen: these ids were computed outside the crate,
/// from the encoding `docs/outbox.md` gives (SHA-256 of the version tag,
/// a zero byte and each field after its length as 4 big-endian bytes;
/// the first 16 bytes as hex).
#[test]
fn the_effect_id_derivation_matches_its_golden_vectors() {
    for (name, queue, event, target, key, id) in [
        (
            "default",
            "0123456789abcdef0123456789abcdef",
            "fedcba9876543210fedcba9876543210",
            "webhook",
            "fedcba9876543210fedcba9876543210",
            "6e5efc055b18a77595f767fca157654f",
        ),
        (
            "orders-eu",
            "00000000000000000000000000000001",
            "ffffffffffffffffffffffffffffffff",
            "customer.hook_1",
            "order-42/shipped",
            "49e124d02d266e48a08c014a2969894c",
        ),
        (
            "r",
            "0123456789abcdef0123456789abcdef",
            "fedcba9876543210fedcba9876543210",
            "nats",
            "订单-42 ✓",
            "033fbced66bd3dcad6b91cd864cc01b8",
        ),
    ] {
        let scope = InboxScope::new(
            ReceiverName::parse(name).unwrap(),
            QueueId::parse(queue).unwrap(),
        );
        let derived = EffectId::derive(
            &scope,
            &EventId::parse(event).unwrap(),
            &Target::parse(target).unwrap(),
            &EffectKey::parse(key).unwrap(),
        );
        assert_eq!(derived.as_str(), id, "{name} {target} {key}");
    }
}
