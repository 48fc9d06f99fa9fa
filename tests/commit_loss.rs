//! A COMMIT whose answer never arrives: the inbox reports it as
//! `CommitUnconfirmed`, the consumer does not ACK it, and the redelivery finds
//! out what really happened — a committed row is a duplicate, a rolled-back
//! one is applied now. The network faults come from a MySQL-protocol proxy
//! between the inbox and the throwaway server.

use crate::common;

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use common::commit_proxy::{CommitProxy, Fault};
use common::orbit::OrbitDev;
use common::{random_hex, scope, EventSpec, TestDb};
use futures::future::{join_all, BoxFuture};
use result_inbox::consumer::{Consumer, ConsumerOptions, ConsumerReport};
use result_inbox::db::Engine;
use result_inbox::delivery::{Delivery, DeliveryId};
use result_inbox::ids::TaskId;
use result_inbox::inbox::{
    Applying, Batching, Inbox, InboxError, InboxStore, Outcome, Receipt, StoreOptions, Verdict,
};
use result_inbox::orbit::OrbitSource;
use result_inbox::scope::{InboxScope, ReceiverName};
use result_inbox::task_view::{self, TaskView, TaskViewRow};
use result_inbox::BoxError;
use sqlx::{Connection, MySqlConnection, MySqlPool};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tower::{Service, ServiceExt};

/// One test's database, proxy, scope and task.
struct Fixture {
    db: TestDb,
    proxy: CommitProxy,
    scope: InboxScope,
    /// Straight to the server, for reading what was committed.
    pool: MySqlPool,
    task: String,
    event_id: String,
}

impl Fixture {
    async fn new(scope: InboxScope) -> Fixture {
        let db = TestDb::initialized().await;
        let pool = db.pool().await;
        Fixture {
            db,
            proxy: CommitProxy::mysql().await,
            scope,
            pool,
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
    async fn proxied_store(&self) -> InboxStore {
        let dsn = self.proxy.dsn_for(&self.db.name);
        InboxStore::connect(&dsn, self.scope.clone(), StoreOptions::default())
            .await
            .expect("connect through the proxy")
    }

    /// A new store straight to the server, as a restarted receiver would have.
    async fn direct_store(&self) -> InboxStore {
        self.db.store(self.scope.clone()).await
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
        let task = TaskId::parse(&self.task).unwrap();
        task_view::load(&self.pool, &self.scope, &task)
            .await
            .unwrap()
    }

    /// The committed inbox row's `applied` flag, if the row exists.
    async fn inbox_applied(&self) -> Option<bool> {
        sqlx::query_scalar("SELECT applied FROM receiver_inbox WHERE event_id = ?")
            .bind(&self.event_id)
            .fetch_optional(&self.pool)
            .await
            .unwrap()
    }

    /// The event's inbox rows as a locking read counts them. Unlike a plain
    /// read, which never sees uncommitted rows anyway, it waits for the row
    /// lock of a transaction still open on the server, so it answers only
    /// once an abandoned transaction has really been rolled back (or
    /// committed). The wait is bounded at 2 s: a transaction the server
    /// never ends fails the test with a lock wait timeout.
    async fn settled_inbox_rows(&self) -> i64 {
        let mut conn =
            MySqlConnection::connect_with(&self.db.dsn.mysql_options().expect("a MySQL address"))
                .await
                .unwrap();
        sqlx::query("SET SESSION innodb_lock_wait_timeout = 2")
            .execute(&mut conn)
            .await
            .unwrap();
        let mut tx = conn.begin().await.unwrap();
        let rows = sqlx::query_scalar(
            "SELECT COUNT(*) FROM receiver_inbox \
             WHERE consumer_name = ? AND queue_id = ? AND event_id = ? FOR UPDATE",
        )
        .bind(self.scope.receiver.as_str())
        .bind(self.scope.queue_id.as_str())
        .bind(&self.event_id)
        .fetch_one(&mut *tx)
        .await
        .expect("the abandoned transaction ends within 2 s");
        tx.rollback().await.unwrap();
        rows
    }
}

/// The receiver's service: the inbox over the task view.
async fn apply(store: &InboxStore, delivery: Delivery<Bytes>) -> Result<Receipt, InboxError> {
    common::receiver(store).oneshot(delivery).await
}

#[tokio::test]
async fn a_lost_commit_ok_is_reported_unconfirmed_and_the_data_is_committed() {
    let f = Fixture::new(scope("task-result-view")).await;
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
    let f = Fixture::new(scope("task-result-view")).await;
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

#[tokio::test]
async fn the_consumer_does_not_ack_an_unconfirmed_commit_and_the_redelivery_dedups() {
    let (orbit, creds, sub) = OrbitDev::subscribed(1_500, 5, "inbox-commit-loss").await;
    let name = ReceiverName::parse("task-result-view").unwrap();
    let f = Fixture::new(InboxScope::new(name, creds.queue())).await;
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
    let f = Fixture::new(scope("task-result-view")).await;
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
