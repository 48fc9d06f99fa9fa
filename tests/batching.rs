//! Batching mode against a real server: deliveries that wait share one
//! transaction, and every outcome is the one they would have had one at a
//! time (on MySQL; the property that says so holds on PostgreSQL too).

use crate::common;

use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use common::postgres::PgTestDb;
use common::{random_hex, EventSpec, TestDb};
use futures::future::{join_all, BoxFuture};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use result_inbox::db::{Dsn, Engine};
use result_inbox::delivery::{Delivery, DeliveryId};
use result_inbox::ids::QueueId;
use result_inbox::inbox::{
    Applying, Batching, Inbox, InboxError, InboxStore, Outcome, Receipt, StoreOptions, Verdict,
};
use result_inbox::scope::{InboxScope, ReceiverName};
use result_inbox::task_view::TaskView;
use result_inbox::BoxError;
use sqlx::{MySql, MySqlConnection, MySqlPool, PgConnection, Postgres};
use tokio::sync::Semaphore;
use tower::{Service, ServiceExt};

fn delivery(json: &str) -> Delivery<Bytes> {
    Delivery::new(
        DeliveryId::new(random_hex(16)),
        Bytes::from(json.to_owned()),
    )
    .with_attempt(1)
}

/// The task view, with what a test needs around it: one event (the plug)
/// that waits until the test opens the gate, events that fail, and what
/// each call saw of its transaction.
#[derive(Clone)]
struct Probing {
    plug: Option<String>,
    entered: Arc<Semaphore>,
    gate: Arc<Semaphore>,
    failing: Arc<HashSet<String>>,
    /// Per call: the event id and how many inbox rows of its scope its
    /// transaction saw.
    seen: Arc<Mutex<Vec<(String, i64)>>>,
}

impl Probing {
    fn new() -> Self {
        Self {
            plug: None,
            entered: Arc::new(Semaphore::new(0)),
            gate: Arc::new(Semaphore::new(0)),
            failing: Arc::default(),
            seen: Arc::default(),
        }
    }

    fn plugged(plug: &str) -> Self {
        Self {
            plug: Some(plug.to_owned()),
            ..Self::new()
        }
    }

    fn failing(mut self, ids: impl IntoIterator<Item = String>) -> Self {
        self.failing = Arc::new(ids.into_iter().collect());
        self
    }
}

impl<E: Server> Service<Delivery<Applying<E>>> for Probing {
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
            if this.plug.as_deref() == Some(id.as_str()) {
                this.entered.add_permits(1);
                this.gate.acquire().await?.forget();
            }
            let (conn, scope, _) = delivery.body_mut().split();
            let rows = E::inbox_rows(conn, scope).await?;
            this.seen.lock().unwrap().push((id.clone(), rows));
            if this.failing.contains(&id) {
                return Err("the business step failed".into());
            }
            Ok(TaskView::new().call(delivery).await?)
        })
    }
}

/// Applies `plug` alone, and while its transaction waits, queues `jsons`
/// in order behind it: they make the next transaction, together.
async fn behind_a_plug<E: Server>(
    service: &Inbox<Probing, E>,
    probing: &Probing,
    plug: &str,
    jsons: &[String],
) -> Vec<Result<Receipt, InboxError>> {
    let first = tokio::spawn(service.clone().oneshot(delivery(plug)));
    probing.entered.acquire().await.unwrap().forget();
    let mut queued = Box::pin(join_all(
        jsons
            .iter()
            .map(|json| service.clone().oneshot(delivery(json))),
    ));
    // One poll queues every delivery, in order.
    std::future::poll_fn(|cx| {
        assert!(queued.as_mut().poll(cx).is_pending());
        Poll::Ready(())
    })
    .await;
    probing.gate.add_permits(1);
    first.await.unwrap().expect("the plug applies");
    queued.await
}

/// `jsons` in one batch of the receiver `batched` of `f` (with or without
/// the set path, the events of `failing` failing in the inner service),
/// behind a plug of its own; their answers, and what the inner service saw.
async fn in_one_batch(
    f: &Fixture<MySql>,
    set_path: bool,
    failing: &[String],
    jsons: &[String],
) -> (Vec<Result<Receipt, InboxError>>, Probing) {
    let store = f.store("batched").await;
    let plug = f.event(&random_hex(16), 1);
    let probing = Probing::plugged(&EventIdOf(&plug).to_string()).failing(failing.to_vec());
    let service = batched(&store, probing.clone(), set_path);
    let answers = behind_a_plug(&service, &probing, &plug, jsons).await;
    (answers, probing)
}

/// What these tests need of a database engine: a database of a test's
/// own, a store on it, its tables read back, and the inbox rows a
/// transaction sees.
trait Server: Engine {
    type Db: Sync;
    fn database() -> impl Future<Output = Self::Db>;
    fn store(db: &Self::Db, scope: InboxScope) -> impl Future<Output = InboxStore<Self>>;
    fn tables(db: &Self::Db, name: &str, queue: &str) -> impl Future<Output = Tables>;
    fn inbox_rows<'c>(
        conn: &'c mut Self::Connection,
        scope: &'c InboxScope,
    ) -> BoxFuture<'c, Result<i64, sqlx::Error>>;
}

/// A scope's inbox rows (event id, digest, applied) and view rows, in key
/// order, without the timestamps.
type Tables = (Vec<(String, String, bool)>, Vec<ViewRow>);

struct MySqlDb {
    db: TestDb,
    pool: MySqlPool,
}

impl Server for MySql {
    type Db = MySqlDb;

    async fn database() -> MySqlDb {
        let db = TestDb::initialized().await;
        let pool = db.pool().await;
        MySqlDb { db, pool }
    }

    async fn store(db: &MySqlDb, scope: InboxScope) -> InboxStore {
        db.db.store(scope).await
    }

    async fn tables(db: &MySqlDb, name: &str, queue: &str) -> Tables {
        let inbox = sqlx::query_as::<_, (Vec<u8>, Vec<u8>, bool)>(
            "SELECT event_id, event_digest, applied FROM receiver_inbox \
             WHERE consumer_name = ? AND queue_id = ? ORDER BY event_id",
        )
        .bind(name)
        .bind(queue)
        .fetch_all(&db.pool)
        .await
        .unwrap()
        .into_iter()
        .map(|(id, digest, applied)| (text(id), text(digest), applied))
        .collect();
        let views = sqlx::query_as::<_, (Vec<u8>, u64, Vec<u8>, Vec<u8>, Option<Vec<u8>>, u64)>(
            "SELECT task_id, task_version, last_event_id, last_state, last_result, applied_events \
             FROM receiver_task_views WHERE consumer_name = ? AND queue_id = ? ORDER BY task_id",
        )
        .bind(name)
        .bind(queue)
        .fetch_all(&db.pool)
        .await
        .unwrap()
        .into_iter()
        .map(|(task, version, event, state, result, applied)| ViewRow {
            task: text(task),
            version,
            event: text(event),
            state: text(state),
            result: result.map(text),
            applied,
        })
        .collect();
        (inbox, views)
    }

    fn inbox_rows<'c>(
        conn: &'c mut MySqlConnection,
        scope: &'c InboxScope,
    ) -> BoxFuture<'c, Result<i64, sqlx::Error>> {
        Box::pin(
            sqlx::query_scalar(
                "SELECT COUNT(*) FROM receiver_inbox WHERE consumer_name = ? AND queue_id = ?",
            )
            .bind(scope.receiver.as_str())
            .bind(scope.queue_id.as_str())
            .fetch_one(conn),
        )
    }
}

impl Server for Postgres {
    type Db = PgTestDb;

    async fn database() -> PgTestDb {
        let db = PgTestDb::initialized().await;
        db
    }

    async fn store(db: &PgTestDb, scope: InboxScope) -> InboxStore<Postgres> {
        let dsn = Dsn::parse(&db.dsn).unwrap();
        InboxStore::open(&dsn, scope, StoreOptions::default())
            .await
            .unwrap()
    }

    async fn tables(db: &PgTestDb, name: &str, queue: &str) -> Tables {
        let inbox = sqlx::query_as::<_, (String, String, bool)>(
            "SELECT event_id, event_digest, applied = 1 FROM receiver_inbox \
             WHERE consumer_name = $1 AND queue_id = $2 ORDER BY event_id",
        )
        .bind(name)
        .bind(queue)
        .fetch_all(&db.pool)
        .await
        .unwrap();
        let views = sqlx::query_as::<_, (String, String, String, String, Option<String>, i64)>(
            "SELECT task_id, task_version::text, last_event_id, last_state, last_result, \
             applied_events FROM receiver_task_views \
             WHERE consumer_name = $1 AND queue_id = $2 ORDER BY task_id",
        )
        .bind(name)
        .bind(queue)
        .fetch_all(&db.pool)
        .await
        .unwrap()
        .into_iter()
        .map(|(task, version, event, state, result, applied)| ViewRow {
            task,
            version: version.parse().unwrap(),
            event,
            state,
            result,
            applied: applied as u64,
        })
        .collect();
        (inbox, views)
    }

    fn inbox_rows<'c>(
        conn: &'c mut PgConnection,
        scope: &'c InboxScope,
    ) -> BoxFuture<'c, Result<i64, sqlx::Error>> {
        Box::pin(
            sqlx::query_scalar(
                "SELECT COUNT(*) FROM receiver_inbox WHERE consumer_name = $1 AND queue_id = $2",
            )
            .bind(scope.receiver.as_str())
            .bind(scope.queue_id.as_str())
            .fetch_one(conn),
        )
    }
}

struct Fixture<E: Server = MySql> {
    db: E::Db,
    queue: String,
}

impl<E: Server> Fixture<E> {
    async fn new() -> Self {
        Self {
            db: E::database().await,
            queue: random_hex(16),
        }
    }

    fn scope(&self, name: &str) -> InboxScope {
        InboxScope::new(
            ReceiverName::parse(name).unwrap(),
            QueueId::parse(&self.queue).unwrap(),
        )
    }

    async fn store(&self, name: &str) -> InboxStore<E> {
        E::store(&self.db, self.scope(name)).await
    }

    fn event(&self, task: &str, version: u64) -> String {
        self.spec(
            &random_hex(16),
            task,
            version,
            "task.cancelled",
            "CANCELLED",
        )
    }

    fn spec(&self, id: &str, task: &str, version: u64, kind: &str, state: &str) -> String {
        EventSpec {
            id: id.to_owned(),
            queue_id: &self.queue,
            task_id: task,
            version,
            event_type: kind,
            state,
            result: None,
        }
        .json()
    }

    /// The inbox rows and view rows of a scope, without the timestamps.
    async fn tables(&self, name: &str) -> Tables {
        E::tables(&self.db, name, &self.queue).await
    }
}

#[derive(Debug, PartialEq, Eq)]
struct ViewRow {
    task: String,
    version: u64,
    event: String,
    state: String,
    result: Option<String>,
    applied: u64,
}

fn text(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap()
}

/// What a delivery came to, in words a comparison can use.
fn fate(answer: &Result<Receipt, InboxError>) -> String {
    match answer {
        Ok(receipt) => format!("{:?}", receipt.outcome),
        Err(e) => e.class().to_owned(),
    }
}

fn batched<E: Server>(store: &InboxStore<E>, inner: Probing, set_path: bool) -> Inbox<Probing, E> {
    let batching = Batching::up_to(64).transactions(1);
    let batching = if set_path {
        batching.set_path(TaskView::new())
    } else {
        batching
    };
    Inbox::batched(inner, store.clone(), batching)
}

#[tokio::test]
async fn deliveries_waiting_behind_a_transaction_share_the_next_one() {
    let f = Fixture::<MySql>::new().await;
    let jsons: Vec<String> = (0..5).map(|_| f.event(&random_hex(16), 1)).collect();

    let (answers, probing) = in_one_batch(&f, false, &[], &jsons).await;

    for answer in &answers {
        assert_eq!(answer.as_ref().unwrap().outcome, Outcome::Applied);
    }
    // The plug saw its own row; each of the five saw the plug's committed
    // row, its earlier siblings' uncommitted ones, and its own.
    let seen: Vec<i64> = probing
        .seen
        .lock()
        .unwrap()
        .iter()
        .map(|(_, n)| *n)
        .collect();
    assert_eq!(seen, vec![1, 2, 3, 4, 5, 6]);
    assert_eq!(f.tables("batched").await.1.len(), 6);
}

#[tokio::test]
async fn a_failed_delivery_is_rolled_back_alone_and_its_siblings_commit() {
    let f = Fixture::<MySql>::new().await;
    let jsons: Vec<String> = (0..3).map(|_| f.event(&random_hex(16), 1)).collect();
    let failing = EventIdOf(&jsons[1]).to_string();

    let (answers, _) = in_one_batch(&f, false, std::slice::from_ref(&failing), &jsons).await;

    let fates: Vec<String> = answers.iter().map(fate).collect();
    assert_eq!(fates, ["Applied", "error", "Applied"]);
    let (inbox, views) = f.tables("batched").await;
    assert_eq!(inbox.len(), 3, "the plug and the two that did not fail");
    assert!(inbox.iter().all(|(id, _, _)| *id != failing));
    assert_eq!(views.len(), 3);
}

#[tokio::test]
async fn two_copies_of_one_event_in_a_batch_are_one_applied_and_one_duplicate() {
    for set_path in [false, true] {
        let f = Fixture::<MySql>::new().await;
        let copy = f.event(&random_hex(16), 1);

        let (answers, _) = in_one_batch(&f, set_path, &[], &[copy.clone(), copy]).await;

        let fates: Vec<String> = answers.iter().map(fate).collect();
        assert_eq!(
            fates,
            ["Applied", "Duplicate { applied: true }"],
            "set path {set_path}"
        );
        let (inbox, views) = f.tables("batched").await;
        assert_eq!((inbox.len(), views.len()), (2, 2));
    }
}

#[tokio::test]
async fn several_versions_of_a_task_in_one_batch_leave_the_highest() {
    for set_path in [false, true] {
        let f = Fixture::<MySql>::new().await;
        let task = random_hex(16);
        let versions = [1, 3, 2].map(|v| f.event(&task, v));

        let (answers, _) = in_one_batch(&f, set_path, &[], &versions).await;

        let fates: Vec<String> = answers.iter().map(fate).collect();
        assert_eq!(
            fates,
            ["Applied", "Applied", "Stale"],
            "set path {set_path}"
        );
        let (inbox, views) = f.tables("batched").await;
        let view = views.iter().find(|v| v.task == task).unwrap();
        assert_eq!((view.version, view.applied), (3, 2), "set path {set_path}");
        assert_eq!(view.event, EventIdOf(&versions[1]).to_string());
        let stale = inbox
            .iter()
            .find(|(id, _, _)| *id == EventIdOf(&versions[2]).to_string())
            .unwrap();
        assert!(!stale.2, "the stale event's row says it did not advance");
    }
}

#[tokio::test]
async fn a_version_conflict_fails_only_its_own_delivery() {
    for set_path in [false, true] {
        let f = Fixture::<MySql>::new().await;
        let task = random_hex(16);
        let jsons = [
            f.event(&task, 2),
            f.event(&task, 2),
            f.event(&random_hex(16), 1),
        ];

        let (answers, _) = in_one_batch(&f, set_path, &[], &jsons).await;

        let fates: Vec<String> = answers.iter().map(fate).collect();
        assert_eq!(
            fates,
            ["Applied", "conflict", "Applied"],
            "set path {set_path}"
        );
        assert_eq!(f.tables("batched").await.0.len(), 3, "set path {set_path}");
    }
}

#[tokio::test]
async fn a_batch_that_loses_a_deadlock_runs_again_whole() {
    let f = Fixture::<MySql>::new().await;
    let store = f.store("batched").await;
    let task = random_hex(16);
    let first = f.event(&task, 1);
    let single = result_inbox::inbox::InboxLayer::new(store.clone());
    tower::Layer::layer(&single, TaskView::new())
        .oneshot(delivery(&first))
        .await
        .unwrap();
    sqlx::query("CREATE TABLE ballast (n INT PRIMARY KEY)")
        .execute(&f.db.pool)
        .await
        .unwrap();
    let plug = f.event(&random_hex(16), 1);
    let probing = Probing::plugged(&EventIdOf(&plug).to_string());
    let service = batched(&store, probing.clone(), true);
    let next = f.event(&task, 2);
    let other = f.event(&random_hex(16), 1);

    // A heavier transaction (InnoDB rolls back the lighter one) takes the
    // view row, then waits for an inbox row the batch inserted first.
    let mut rival = f.db.pool.begin().await.unwrap();
    for n in 0..50 {
        sqlx::query("INSERT INTO ballast VALUES (?)")
            .bind(n)
            .execute(&mut *rival)
            .await
            .unwrap();
    }
    // By its whole key: a scan would lock every row and gap, the plug's too.
    sqlx::query(
        "SELECT task_version FROM receiver_task_views \
         WHERE consumer_name = 'batched' AND queue_id = ? AND task_id = ? FOR UPDATE",
    )
    .bind(&f.queue)
    .bind(&task)
    .fetch_one(&mut *rival)
    .await
    .unwrap();
    let batch = {
        let (service, probing, plug) = (service.clone(), probing.clone(), plug.clone());
        let jsons = [next.clone(), other.clone()];
        tokio::spawn(async move { behind_a_plug(&service, &probing, &plug, &jsons).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    common::insert_inbox_row(
        &mut rival,
        "batched",
        &f.queue,
        &EventIdOf(&next).to_string(),
    )
    .await
    .expect("the rival survives the deadlock");
    rival.rollback().await.unwrap();

    let fates: Vec<String> = batch.await.unwrap().iter().map(fate).collect();
    assert_eq!(fates, ["Applied", "Applied"]);
    assert_eq!(store.stats().deadlock_retries, 1);
    let (_, views) = f.tables("batched").await;
    let view = views.iter().find(|v| v.task == task).unwrap();
    assert_eq!((view.version, view.applied), (2, 2));
}

/// The event id of an event's JSON text.
struct EventIdOf<'a>(&'a str);

impl std::fmt::Display for EventIdOf<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let start = self.0.find(r#""id":""#).unwrap() + 6;
        f.write_str(&self.0[start..start + 32])
    }
}

/// One delivery of a random batch.
#[derive(Debug, Clone)]
enum Step {
    /// A new event of task `task` at `version`.
    New { task: u8, version: u8, failed: bool },
    /// A copy of the event of an earlier step.
    Copy(usize),
    /// An earlier step's event id with other content.
    Clash(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0u8..3, 1u8..5, prop::bool::weighted(0.15))
            .prop_map(|(task, version, failed)| Step::New { task, version, failed }),
        2 => (0usize..64).prop_map(Step::Copy),
        1 => (0usize..64).prop_map(Step::Clash),
    ]
}

/// Events committed one at a time first, then a batch, and whether the
/// batch may take the set path (which never calls the inner service, so
/// the inner service fails nothing there).
fn plan() -> impl Strategy<Value = (Vec<Step>, Vec<Step>, bool)> {
    (
        prop::collection::vec(step(), 0..4),
        prop::collection::vec(step(), 1..12),
        any::<bool>(),
    )
}

/// The plan's events as JSON text, and the ids the inner service fails.
fn events<E: Server>(
    f: &Fixture<E>,
    tasks: &[String],
    steps: &[Step],
    set_path: bool,
) -> (Vec<String>, Vec<String>) {
    let mut made: Vec<(String, usize, u64, String)> = Vec::new();
    let mut failing = Vec::new();
    let mut jsons = Vec::new();
    for step in steps {
        let (id, task, version, state) = match step {
            Step::Copy(i) if !made.is_empty() => made[i % made.len()].clone(),
            Step::Clash(i) if !made.is_empty() => {
                let (id, task, version, state) = made[i % made.len()].clone();
                let other = if state == "CANCELLED" {
                    "FAILED"
                } else {
                    "CANCELLED"
                };
                (id, task, version, other.to_owned())
            }
            Step::New {
                task,
                version,
                failed,
            } => {
                let id = random_hex(16);
                if *failed && !set_path {
                    failing.push(id.clone());
                }
                (
                    id,
                    *task as usize,
                    u64::from(*version),
                    "CANCELLED".to_owned(),
                )
            }
            _ => (random_hex(16), 0, 1, "CANCELLED".to_owned()),
        };
        let kind = if state == "CANCELLED" {
            "task.cancelled"
        } else {
            "task.failed"
        };
        jsons.push(f.spec(&id, &tasks[task], version, kind, &state));
        made.push((id, task, version, state));
    }
    (jsons, failing)
}

#[test]
fn random_batches_end_exactly_as_their_deliveries_one_at_a_time() {
    batches_end_as_one_at_a_time::<MySql>(40);
}

#[test]
fn on_postgres_random_batches_end_exactly_as_their_deliveries_one_at_a_time() {
    batches_end_as_one_at_a_time::<Postgres>(40);
}

/// `cases` random plans, each applied one at a time in one scope and in
/// batches in another: the same outcomes, the same tables.
fn batches_end_as_one_at_a_time<E: Server>(cases: u32) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let f = runtime.block_on(Fixture::<E>::new());
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&plan(), |(committed, batch, set_path)| {
            runtime.block_on(async {
                let tasks: Vec<String> = (0..3).map(|_| random_hex(16)).collect();
                let all: Vec<Step> = committed.iter().chain(&batch).cloned().collect();
                let (jsons, failing) = events(&f, &tasks, &all, set_path);
                let (before, during) = jsons.split_at(committed.len());
                let plug = f.event(&random_hex(16), 1);
                let case = random_hex(4);
                let (one, many) = (format!("single-{case}"), format!("batched-{case}"));

                let reference = Probing::new().failing(failing.clone());
                let single = Inbox::new(reference, f.store(&one).await);
                single.clone().oneshot(delivery(&plug)).await.unwrap();
                let mut expected = Vec::new();
                for json in before.iter().chain(during) {
                    expected.push(fate(&single.clone().oneshot(delivery(json)).await));
                }

                let store = f.store(&many).await;
                let probing = Probing::plugged(&EventIdOf(&plug).to_string()).failing(failing);
                let service = batched(&store, probing.clone(), set_path);
                let mut got = Vec::new();
                for json in before {
                    got.push(fate(&service.clone().oneshot(delivery(json)).await));
                }
                let answers = behind_a_plug(&service, &probing, &plug, during).await;
                got.extend(answers.iter().map(fate));

                assert_eq!(got, expected, "outcomes, set path {set_path}");
                let reference = f.tables(&one).await;
                assert!(
                    !reference.0.is_empty() && !reference.1.is_empty(),
                    "the tables read back hold the plug and what was applied"
                );
                assert_eq!(
                    f.tables(&many).await,
                    reference,
                    "tables, set path {set_path}"
                );
            });
            Ok(())
        })
        .unwrap();
}
