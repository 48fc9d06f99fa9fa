//! A COMMIT whose answer never arrives: the inbox reports it as
//! `CommitUnconfirmed`, the consumer does not ACK it, and the redelivery finds
//! out what really happened — a committed row is a duplicate, a rolled-back
//! one is applied now. The network faults come from a proxy between the
//! inbox and the throwaway server that reads the server's protocol; every
//! test runs on MySQL and on PostgreSQL.

use crate::common;

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use common::commit_proxy::{CommitProxy, Fault};
use common::orbit::OrbitDev;
use common::postgres::PgTestDb;
use common::{random_hex, scope, EventSpec, TestDb};
use futures::future::{join_all, BoxFuture};
use result_inbox::consumer::{Consumer, ConsumerOptions, ConsumerReport};
use result_inbox::db::{Dsn, Engine};
use result_inbox::delivery::{Delivery, DeliveryId};
use result_inbox::ids::TaskId;
use result_inbox::inbox::{
    Applying, Batching, Inbox, InboxError, InboxLayer, InboxStore, Outcome, Receipt, StoreOptions,
    Verdict,
};
use result_inbox::orbit::OrbitSource;
use result_inbox::scope::{InboxScope, ReceiverName};
use result_inbox::task_view::{self, TaskView, TaskViewRow};
use result_inbox::BoxError;
use sqlx::{Connection, Executor, MySql, MySqlConnection, PgConnection, Postgres};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tower::{Service, ServiceExt};

/// What these tests need of a server: a database of their own with the
/// receiver's tables, a proxy of the server's protocol in front of it, and
/// what was committed, read straight from the server.
trait Server: Engine {
    type Db: Sync;
    async fn database() -> Self::Db;
    async fn proxy() -> CommitProxy;
    fn name(db: &Self::Db) -> &str;
    fn dsn(db: &Self::Db) -> Dsn;
    async fn view(db: &Self::Db, scope: &InboxScope, task: &TaskId) -> Option<TaskViewRow>;
    /// The committed inbox row's `applied` flag, if the row exists.
    async fn inbox_applied(db: &Self::Db, event: &str) -> Option<bool>;
    /// The event's inbox rows once any transaction that still holds its
    /// key on the server has ended (at most 2 s): a plain read would not
    /// wait for an abandoned transaction's uncommitted row.
    async fn settled_inbox_rows(db: &Self::Db, scope: &InboxScope, event: &str) -> i64;
    /// The ids of the outbox's effects, in record order.
    async fn effect_ids(db: &Self::Db) -> Vec<String>;
}

impl Server for MySql {
    type Db = TestDb;

    async fn database() -> TestDb {
        TestDb::initialized().await
    }

    async fn proxy() -> CommitProxy {
        CommitProxy::mysql().await
    }

    fn name(db: &TestDb) -> &str {
        &db.name
    }

    fn dsn(db: &TestDb) -> Dsn {
        db.dsn.clone()
    }

    async fn view(db: &TestDb, scope: &InboxScope, task: &TaskId) -> Option<TaskViewRow> {
        task_view::load(&db.pool().await, scope, task)
            .await
            .unwrap()
    }

    async fn inbox_applied(db: &TestDb, event: &str) -> Option<bool> {
        sqlx::query_scalar("SELECT applied FROM receiver_inbox WHERE event_id = ?")
            .bind(event)
            .fetch_optional(&db.pool().await)
            .await
            .unwrap()
    }

    /// A locking read waits for the row lock of a transaction still open.
    async fn settled_inbox_rows(db: &TestDb, scope: &InboxScope, event: &str) -> i64 {
        let options = db.dsn.mysql_options().expect("a MySQL address");
        let mut conn = MySqlConnection::connect_with(&options).await.unwrap();
        conn.execute("SET SESSION innodb_lock_wait_timeout = 2")
            .await
            .unwrap();
        let mut tx = conn.begin().await.unwrap();
        let rows = sqlx::query_scalar(
            "SELECT COUNT(*) FROM receiver_inbox \
             WHERE consumer_name = ? AND queue_id = ? AND event_id = ? FOR UPDATE",
        )
        .bind(scope.receiver.as_str())
        .bind(scope.queue_id.as_str())
        .bind(event)
        .fetch_one(&mut *tx)
        .await
        .expect("the abandoned transaction ends within 2 s");
        tx.rollback().await.unwrap();
        rows
    }

    async fn effect_ids(db: &TestDb) -> Vec<String> {
        sqlx::query_scalar("SELECT CAST(effect_id AS CHAR) FROM receiver_outbox ORDER BY seq")
            .fetch_all(&db.pool().await)
            .await
            .unwrap()
    }
}

impl Server for Postgres {
    type Db = PgTestDb;

    async fn database() -> PgTestDb {
        let db = PgTestDb::initialized().await;
        db
    }

    async fn proxy() -> CommitProxy {
        CommitProxy::postgres().await
    }

    fn name(db: &PgTestDb) -> &str {
        &db.name
    }

    fn dsn(db: &PgTestDb) -> Dsn {
        Dsn::parse(&db.dsn).unwrap()
    }

    async fn view(db: &PgTestDb, scope: &InboxScope, task: &TaskId) -> Option<TaskViewRow> {
        task_view::load(&db.pool, scope, task).await.unwrap()
    }

    async fn inbox_applied(db: &PgTestDb, event: &str) -> Option<bool> {
        sqlx::query_scalar("SELECT applied = 1 FROM receiver_inbox WHERE event_id = $1")
            .bind(event)
            .fetch_optional(&db.pool)
            .await
            .unwrap()
    }

    /// An uncommitted row is invisible to a read, locking or not; a second
    /// insert of its key is what waits for its transaction.
    async fn settled_inbox_rows(db: &PgTestDb, scope: &InboxScope, event: &str) -> i64 {
        let mut conn = PgConnection::connect(&db.dsn).await.unwrap();
        conn.execute("SET lock_timeout = '2s'").await.unwrap();
        let mut tx = conn.begin().await.unwrap();
        let inserted = sqlx::query(
            "INSERT INTO receiver_inbox (consumer_name, queue_id, event_id, event_digest, \
             event_canonical, applied, received_at) \
             VALUES ($1, $2, $3, repeat('0', 64), '{}', 0, now()) ON CONFLICT DO NOTHING",
        )
        .bind(scope.receiver.as_str())
        .bind(scope.queue_id.as_str())
        .bind(event)
        .execute(&mut *tx)
        .await
        .expect("the abandoned transaction ends within 2 s");
        tx.rollback().await.unwrap();
        1 - inserted.rows_affected() as i64
    }

    async fn effect_ids(db: &PgTestDb) -> Vec<String> {
        sqlx::query_scalar("SELECT effect_id::text FROM receiver_outbox ORDER BY seq")
            .fetch_all(&db.pool)
            .await
            .unwrap()
    }
}

/// One test's database, proxy, scope and task.
struct Fixture<E: Server> {
    db: E::Db,
    proxy: CommitProxy,
    scope: InboxScope,
    task: String,
    event_id: String,
}

impl<E: Server> Fixture<E> {
    async fn new(scope: InboxScope) -> Self {
        Fixture {
            db: E::database().await,
            proxy: E::proxy().await,
            scope,
            task: random_hex(16),
            event_id: random_hex(16),
        }
    }

    /// The one valid event every test delivers.
    fn event_json(&self) -> String {
        EventSpec {
            id: self.event_id.clone(),
            queue_id: self.scope.queue_id.as_str(),
            task_id: &self.task,
            version: 2,
            event_type: "task.succeeded",
            state: "SUCCEEDED",
            result: Some(r#"{"ok":true}"#),
        }
        .json()
    }

    /// A store whose connections all go through the proxy.
    async fn proxied_store(&self) -> InboxStore<E> {
        let dsn = self.proxy.dsn_for(E::name(&self.db));
        InboxStore::open(&dsn, self.scope.clone(), StoreOptions::default())
            .await
            .expect("connect through the proxy")
    }

    /// A new store straight to the server, as a restarted receiver would have.
    async fn direct_store(&self) -> InboxStore<E> {
        InboxStore::open(
            &E::dsn(&self.db),
            self.scope.clone(),
            StoreOptions::default(),
        )
        .await
        .unwrap()
    }

    /// Attempt `attempt` of the event's delivery (same delivery id each time).
    fn delivery(&self, attempt: u32) -> Delivery<Bytes> {
        Delivery::new(
            DeliveryId::new(format!("d{}", self.event_id)),
            Bytes::from(self.event_json()),
        )
        .with_attempt(attempt)
    }

    async fn view(&self) -> Option<TaskViewRow> {
        E::view(&self.db, &self.scope, &TaskId::parse(&self.task).unwrap()).await
    }

    async fn inbox_applied(&self) -> Option<bool> {
        E::inbox_applied(&self.db, &self.event_id).await
    }

    async fn settled_inbox_rows(&self) -> i64 {
        E::settled_inbox_rows(&self.db, &self.scope, &self.event_id).await
    }
}

/// The receiver's service: the inbox over the task view.
async fn apply<E: Engine>(
    store: &InboxStore<E>,
    delivery: Delivery<Bytes>,
) -> Result<Receipt, InboxError> {
    common::receiver(store).oneshot(delivery).await
}

#[tokio::test]
async fn a_lost_commit_ok_is_reported_unconfirmed_and_the_data_is_committed() {
    a_lost_commit_ok_is_reported_unconfirmed_and_the_data_is_committed_on::<MySql>().await;
}

#[tokio::test]
async fn on_postgres_a_lost_commit_ok_is_reported_unconfirmed_and_the_data_is_committed() {
    a_lost_commit_ok_is_reported_unconfirmed_and_the_data_is_committed_on::<Postgres>().await;
}

async fn a_lost_commit_ok_is_reported_unconfirmed_and_the_data_is_committed_on<E: Server>() {
    let f = Fixture::<E>::new(scope("task-result-view")).await;
    let store = f.proxied_store().await;
    f.proxy.arm(Fault::DropCommitOk);

    let err = apply(&store, f.delivery(1)).await.unwrap_err();
    assert!(matches!(err, InboxError::CommitUnconfirmed), "{err:?}");
    assert!(err.is_retryable());
    assert_eq!(f.proxy.fired(), 1, "the server's answer to COMMIT was lost");

    // The server did commit: the inbox row and the view are there.
    assert_eq!(f.inbox_applied().await, Some(true));
    assert_eq!(f.view().await.expect("view committed").applied_events, 1);

    // The redelivery, to a receiver that knows nothing of the first attempt,
    // finds the committed row and changes nothing.
    let receipt = apply(&f.direct_store().await, f.delivery(2)).await.unwrap();
    assert_eq!(receipt.outcome, Outcome::Duplicate { applied: true });
    let view = f.view().await.unwrap();
    assert_eq!((view.task_version, view.applied_events), (2, 1));
}

#[tokio::test]
async fn a_commit_dropped_before_the_server_saw_it_is_unconfirmed_and_nothing_is_committed() {
    a_commit_dropped_before_the_server_saw_it_is_unconfirmed_and_nothing_is_committed_on::<MySql>()
        .await;
}

#[tokio::test]
async fn on_postgres_a_commit_dropped_before_the_server_saw_it_is_unconfirmed_and_nothing_is_committed(
) {
    a_commit_dropped_before_the_server_saw_it_is_unconfirmed_and_nothing_is_committed_on::<Postgres>().await;
}

async fn a_commit_dropped_before_the_server_saw_it_is_unconfirmed_and_nothing_is_committed_on<
    E: Server,
>() {
    let f = Fixture::<E>::new(scope("task-result-view")).await;
    let store = f.proxied_store().await;
    f.proxy.arm(Fault::DropCommitBeforeServer);

    let err = apply(&store, f.delivery(1)).await.unwrap_err();
    assert!(matches!(err, InboxError::CommitUnconfirmed), "{err:?}");
    assert!(err.is_retryable());
    assert_eq!(f.proxy.fired(), 1, "the COMMIT never reached the server");

    // The server rolled the transaction back when the connection closed.
    assert_eq!(f.settled_inbox_rows().await, 0);
    assert_eq!(f.inbox_applied().await, None);
    assert_eq!(f.view().await, None);

    // So the redelivery applies the event, once.
    let receipt = apply(&f.direct_store().await, f.delivery(2)).await.unwrap();
    assert_eq!(receipt.outcome, Outcome::Applied);
    assert_eq!(f.inbox_applied().await, Some(true));
    assert_eq!(f.view().await.unwrap().applied_events, 1);
}

/// The receiver's service with one effect per applied delivery: the
/// inbox over `Notify`, which records its notification in the delivery's
/// transaction.
async fn apply_notifying<E: Engine>(
    store: &InboxStore<E>,
    delivery: Delivery<Bytes>,
) -> Result<Receipt, InboxError> {
    tower::ServiceBuilder::new()
        .layer(InboxLayer::new(store.clone()))
        .service(task_view::Notify::new("hook").unwrap())
        .oneshot(delivery)
        .await
}

impl<E: Server> Fixture<E> {
    /// A fixture whose database has the outbox too.
    async fn with_outbox(scope: InboxScope) -> Self {
        let f = Self::new(scope).await;
        let options = result_inbox::db::schema::InitOptions {
            existing: result_inbox::db::schema::Existing::Report,
            outbox: true,
            ..Default::default()
        };
        result_inbox::db::schema::init_with(&E::dsn(&f.db), options)
            .await
            .expect("the outbox beside the tables");
        f
    }
}

#[tokio::test]
async fn a_lost_commit_ok_of_a_delivery_with_an_effect_committed_the_effect_once() {
    a_lost_commit_ok_of_a_delivery_with_an_effect_committed_the_effect_once_on::<MySql>().await;
}

#[tokio::test]
async fn on_postgres_a_lost_commit_ok_of_a_delivery_with_an_effect_committed_the_effect_once() {
    a_lost_commit_ok_of_a_delivery_with_an_effect_committed_the_effect_once_on::<Postgres>().await;
}

async fn a_lost_commit_ok_of_a_delivery_with_an_effect_committed_the_effect_once_on<E: Server>() {
    let f = Fixture::<E>::with_outbox(scope("task-result-view")).await;
    let store = f.proxied_store().await;
    f.proxy.arm(Fault::DropCommitOk);

    let err = apply_notifying(&store, f.delivery(1)).await.unwrap_err();
    assert!(matches!(err, InboxError::CommitUnconfirmed), "{err:?}");
    assert_eq!(
        f.proxy.fired(),
        1,
        "the answer to the COMMIT of the transaction that recorded the effect was lost"
    );
    assert_eq!(f.inbox_applied().await, Some(true));
    let effects = E::effect_ids(&f.db).await;
    assert_eq!(effects.len(), 1, "{effects:?}");

    let receipt = apply_notifying(&f.direct_store().await, f.delivery(2))
        .await
        .unwrap();
    assert_eq!(receipt.outcome, Outcome::Duplicate { applied: true });
    assert_eq!(E::effect_ids(&f.db).await, effects);
}

#[tokio::test]
async fn a_commit_with_an_effect_dropped_before_the_server_saw_it_left_no_effect() {
    a_commit_with_an_effect_dropped_before_the_server_saw_it_left_no_effect_on::<MySql>().await;
}

#[tokio::test]
async fn on_postgres_a_commit_with_an_effect_dropped_before_the_server_saw_it_left_no_effect() {
    a_commit_with_an_effect_dropped_before_the_server_saw_it_left_no_effect_on::<Postgres>().await;
}

async fn a_commit_with_an_effect_dropped_before_the_server_saw_it_left_no_effect_on<E: Server>() {
    let f = Fixture::<E>::with_outbox(scope("task-result-view")).await;
    let store = f.proxied_store().await;
    f.proxy.arm(Fault::DropCommitBeforeServer);

    let err = apply_notifying(&store, f.delivery(1)).await.unwrap_err();
    assert!(matches!(err, InboxError::CommitUnconfirmed), "{err:?}");
    assert_eq!(
        f.proxy.fired(),
        1,
        "the COMMIT of the transaction that recorded the effect never reached the server"
    );
    assert_eq!(f.settled_inbox_rows().await, 0);
    assert!(E::effect_ids(&f.db).await.is_empty());

    let receipt = apply_notifying(&f.direct_store().await, f.delivery(2))
        .await
        .unwrap();
    assert_eq!(receipt.outcome, Outcome::Applied);
    assert_eq!(E::effect_ids(&f.db).await.len(), 1);
}

#[tokio::test]
async fn the_consumer_does_not_ack_an_unconfirmed_commit_and_the_redelivery_dedups() {
    the_consumer_does_not_ack_an_unconfirmed_commit_and_the_redelivery_dedups_on::<MySql>().await;
}

#[tokio::test]
async fn on_postgres_the_consumer_does_not_ack_an_unconfirmed_commit_and_the_redelivery_dedups() {
    the_consumer_does_not_ack_an_unconfirmed_commit_and_the_redelivery_dedups_on::<Postgres>()
        .await;
}

async fn the_consumer_does_not_ack_an_unconfirmed_commit_and_the_redelivery_dedups_on<E: Server>() {
    let (orbit, creds, sub) = OrbitDev::subscribed(1_500, 5, "inbox-commit-loss").await;
    let name = ReceiverName::parse("task-result-view").unwrap();
    let f = Fixture::<E>::new(InboxScope::new(name, creds.queue())).await;
    let delivery = orbit.inject(&sub, &f.event_json()).await;

    let store = f.proxied_store().await;
    f.proxy.arm(Fault::DropCommitOk);
    let service = common::receiver(&store);
    let source = OrbitSource::connect(orbit.client(&creds), sub.clone(), &creds.queue())
        .await
        .unwrap();
    let consumer = Consumer::new(source, ConsumerOptions::default());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(consumer.run(service, async {
        let _ = stopped.await;
    }));

    // The first attempt commits, but its COMMIT answer is lost.
    let deadline = Instant::now() + Duration::from_secs(10);
    while f.proxy.fired() == 0 {
        assert!(
            Instant::now() < deadline,
            "the first attempt never committed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(f.view().await.expect("view committed").applied_events, 1);

    // As long as the first attempt is the latest, it is not ACKed; once its
    // lease runs out the redelivery is deduplicated and ACKed.
    let path = format!("/v1/deliveries/{delivery}");
    let mut first_attempt_seen = 0;
    let last = loop {
        let d = orbit.get(&creds, &path).await;
        let state = d["state"].as_str().unwrap().to_owned();
        if d["attempts"] == 1 {
            assert!(state == "LEASED" || state == "PENDING", "{d}");
            first_attempt_seen += 1;
        } else if state == "ACKED" {
            break d;
        }
        assert!(Instant::now() < deadline, "never ACKed: {d}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        first_attempt_seen > 0,
        "the unACKed first attempt was observed"
    );
    assert_eq!(last["attempts"], 2, "{last}");
    assert_eq!(f.inbox_applied().await, Some(true));
    assert_eq!(f.view().await.unwrap().applied_events, 1);

    stop.send(()).unwrap();
    let report = running.await.unwrap().unwrap();
    assert_eq!(
        report,
        ConsumerReport {
            received: 2,
            succeeded: 1,
            failed: 1,
            acked: 1,
            ack_refused: 0,
            abandoned: 0,
            terminated: 0,
            released: 0,
        }
    );
}

/// The task view behind a gate: the first call waits for the gate and then
/// fails, so its transaction rolls back (no COMMIT), and whatever queued
/// behind it meanwhile makes the next batch.
#[derive(Clone)]
pub(crate) struct FailingPlug {
    entered: Arc<Semaphore>,
    gate: Arc<Semaphore>,
    first: Arc<AtomicBool>,
}

impl FailingPlug {
    pub(crate) fn new() -> Self {
        FailingPlug {
            entered: Arc::new(Semaphore::new(0)),
            gate: Arc::new(Semaphore::new(0)),
            first: Arc::default(),
        }
    }

    /// Waits until the first call is held at the gate.
    pub(crate) async fn entered(&self) {
        self.entered.acquire().await.unwrap().forget();
    }

    /// Lets the first call fail.
    pub(crate) fn open(&self) {
        self.gate.add_permits(1);
    }
}

impl<E: Engine> Service<Delivery<Applying<E>>> for FailingPlug {
    type Response = Verdict<E>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Verdict<E>, BoxError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, delivery: Delivery<Applying<E>>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            if !this.first.swap(true, Ordering::SeqCst) {
                this.entered.add_permits(1);
                this.gate.acquire().await?.forget();
                return Err("the plug never applies".into());
            }
            Ok(TaskView::new().call(delivery).await?)
        })
    }
}

/// Three deliveries queued behind the plug's failing first one are one
/// batch, whose COMMIT the proxy meets armed with `fault`: the answers of
/// the three, and their events' JSON.
pub(crate) async fn a_batch_of_three_meets<E: Engine>(
    store: InboxStore<E>,
    proxy: &CommitProxy,
    fault: Fault,
    queue_id: &str,
) -> (Vec<Result<Receipt, InboxError>>, Vec<String>) {
    let plug = FailingPlug::new();
    let inbox = Inbox::batched(plug.clone(), store, Batching::up_to(8).transactions(1));
    let json = |task: &str| {
        EventSpec {
            id: random_hex(16),
            queue_id,
            task_id: task,
            version: 1,
            event_type: "task.submitted",
            state: "PENDING",
            result: None,
        }
        .json()
    };
    let first = tokio::spawn(
        inbox
            .clone()
            .oneshot(common::delivery_of(&json(&random_hex(16)))),
    );
    plug.entered().await;
    let jsons: Vec<String> = (0..3).map(|_| json(&random_hex(16))).collect();
    let mut batch = Box::pin(join_all(
        jsons
            .iter()
            .map(|j| inbox.clone().oneshot(common::delivery_of(j))),
    ));
    std::future::poll_fn(|cx| {
        assert!(batch.as_mut().poll(cx).is_pending());
        Poll::Ready(())
    })
    .await;
    proxy.arm(fault);
    plug.open();
    assert!(
        first.await.unwrap().is_err(),
        "the plug fails and commits nothing"
    );
    (batch.await, jsons)
}

#[tokio::test]
async fn a_batch_whose_commit_answer_is_lost_is_unconfirmed_for_every_delivery_and_committed() {
    a_batch_whose_commit_answer_is_lost_is_unconfirmed_for_every_delivery_and_committed_on::<MySql>().await;
}

#[tokio::test]
async fn on_postgres_a_batch_whose_commit_answer_is_lost_is_unconfirmed_for_every_delivery_and_committed(
) {
    a_batch_whose_commit_answer_is_lost_is_unconfirmed_for_every_delivery_and_committed_on::<
        Postgres,
    >()
    .await;
}

async fn a_batch_whose_commit_answer_is_lost_is_unconfirmed_for_every_delivery_and_committed_on<
    E: Server,
>() {
    let f = Fixture::<E>::new(scope("task-result-view")).await;
    let store = f.proxied_store().await;
    let (answers, jsons) = a_batch_of_three_meets(
        store,
        &f.proxy,
        Fault::DropCommitOk,
        f.scope.queue_id.as_str(),
    )
    .await;
    for answer in &answers {
        assert!(
            matches!(answer, Err(InboxError::CommitUnconfirmed)),
            "{answer:?}"
        );
    }
    assert_eq!(
        f.proxy.fired(),
        1,
        "one COMMIT for the three, its answer lost"
    );

    // The server did commit all three: each redelivery is a duplicate.
    let direct = f.direct_store().await;
    for json in &jsons {
        let receipt = apply(&direct, common::delivery_of(json)).await.unwrap();
        assert_eq!(receipt.outcome, Outcome::Duplicate { applied: true });
    }
}

#[tokio::test]
async fn a_batch_whose_commit_never_reached_the_server_is_unconfirmed_and_applied_on_redelivery() {
    batch_commit_dropped_on::<MySql>().await;
}

#[tokio::test]
async fn on_postgres_a_batch_whose_commit_never_reached_the_server_is_unconfirmed_and_applied_on_redelivery(
) {
    batch_commit_dropped_on::<Postgres>().await;
}

async fn batch_commit_dropped_on<E: Server>() {
    let f = Fixture::<E>::new(scope("task-result-view")).await;
    let store = f.proxied_store().await;
    let (answers, jsons) = a_batch_of_three_meets(
        store,
        &f.proxy,
        Fault::DropCommitBeforeServer,
        f.scope.queue_id.as_str(),
    )
    .await;
    for answer in &answers {
        assert!(
            matches!(answer, Err(InboxError::CommitUnconfirmed)),
            "{answer:?}"
        );
    }
    assert_eq!(f.proxy.fired(), 1);

    let direct = f.direct_store().await;
    for json in &jsons {
        let receipt = apply(&direct, common::delivery_of(json)).await.unwrap();
        assert_eq!(receipt.outcome, Outcome::Applied);
    }
}
