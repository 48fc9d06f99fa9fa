//! Crash windows with real processes: a consumer killed between COMMIT and
//! ACK, lost ACK answers, a failing delivery that spends its budget; the
//! first three on MySQL and on PostgreSQL.
//!
//! This test binary has its own `main` (harness = false) for one reason: the
//! SIGKILL scenario needs a consumer *process* that holds a delivery after
//! COMMIT, and that fault barrier must exist only in test code. So the binary
//! re-executes itself as that consumer (`crash child-barrier-consume`); the
//! normal `receiver` CLI has no such switch. Scenarios run concurrently, so
//! the real 30 s lease is waited out once, beside the others.

mod common;

use std::future::Future;
use std::io::{BufRead, BufReader, Write};
use std::pin::Pin;
use std::process::{Child, Command, Stdio};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use common::consume::Consume;
use common::http_proxy::{AckFault, HttpProxy};
use common::orbit::{OrbitDev, QueueCredentials};
use common::postgres::PgTestDb;
use common::{dsn_for, random_hex, EventSpec, TestDb};
use futures::FutureExt;
use result_inbox::consumer::{Consumer, ConsumerOptions};
use result_inbox::db::Dsn;
use result_inbox::db::{Engine, EngineKind};
use result_inbox::delivery::Delivery;
use result_inbox::event::EventType;
use result_inbox::ids::TaskId;
use result_inbox::ids::{QueueId, SubscriptionId};
use result_inbox::inbox::{InboxStore, StoreOptions};
use result_inbox::orbit::{OrbitClient, OrbitSource, OrbitUrl, Token};
use result_inbox::scope::{InboxScope, ReceiverName};
use result_inbox::task_view;
use result_inbox::BoxError;
use sqlx::{MySql, Postgres};
use tower::Service;

const NAME: &str = "task-result-view";

type Scenario = Pin<Box<dyn Future<Output = ()>>>;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("child-barrier-consume") {
        return child_barrier_consume();
    }
    let scenarios: Vec<(&str, Scenario)> = vec![
        (
            "a_consumer_killed_after_commit_before_ack_is_deduplicated_and_acked_after_the_real_lease",
            Box::pin(killed_after_commit_before_ack()),
        ),
        (
            "a_lost_ack_answer_is_re_reported_with_the_same_proof",
            Box::pin(async { lost_ack_answer_is_re_reported(Db::mysql().await).await }),
        ),
        (
            "on_postgres_a_lost_ack_answer_is_re_reported_with_the_same_proof",
            Box::pin(async { lost_ack_answer_is_re_reported(Db::postgres().await).await }),
        ),
        (
            "a_consumer_that_dies_with_its_ack_in_flight_is_deduplicated_on_redelivery",
            Box::pin(async { dies_with_ack_in_flight(Db::mysql().await).await }),
        ),
        (
            "on_postgres_a_consumer_that_dies_with_its_ack_in_flight_is_deduplicated_on_redelivery",
            Box::pin(async { dies_with_ack_in_flight(Db::postgres().await).await }),
        ),
        (
            "a_delivery_that_keeps_failing_expires_and_added_budget_applies_it_once",
            Box::pin(budget_exhaustion_and_revival()),
        ),
        (
            "on_postgres_a_consumer_killed_after_commit_before_ack_is_deduplicated_and_acked_after_its_lease",
            Box::pin(killed_after_commit_before_ack_on_postgres()),
        ),
    ];
    // The test harness's own arguments, as cargo test and cargo nextest
    // pass them: `--list` (nextest lists before it runs; nothing may run
    // then), `--ignored` (there are none), `--exact` and name filters.
    let flag = |f: &str| args.iter().any(|a| a == f);
    let mut filter: Vec<&String> = Vec::new();
    let mut rest = args.iter().skip(1);
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--format" | "--test-threads" | "--color" | "--logfile" | "--skip" => {
                rest.next();
            }
            other if !other.starts_with('-') => filter.push(arg),
            _ => {}
        }
    }
    let chosen = |name: &str| {
        filter.iter().all(|f| {
            if flag("--exact") {
                name == f.as_str()
            } else {
                name.contains(f.as_str())
            }
        })
    };
    if flag("--list") {
        if !flag("--ignored") {
            for (name, _) in scenarios.iter().filter(|(name, _)| chosen(name)) {
                println!("{name}: test");
            }
        }
        return;
    }
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mut failed = 0;
    let mut passed = 0;
    // Joined rather than spawned: each scenario's panic is caught on its own
    // and the others keep running.
    let results = runtime.block_on(async {
        let runs = scenarios.into_iter().filter(|(name, _)| chosen(name)).map(
            |(name, scenario)| async move {
                (
                    name,
                    std::panic::AssertUnwindSafe(scenario).catch_unwind().await,
                )
            },
        );
        futures::future::join_all(runs).await
    });
    for (name, result) in results {
        match result {
            Ok(()) => {
                passed += 1;
                println!("test {name} ... ok");
            }
            Err(_) => {
                failed += 1;
                println!("test {name} ... FAILED");
            }
        }
    }
    println!("\ntest result: {}. {passed} passed; {failed} failed; 0 ignored; 0 measured; 0 filtered out", if failed == 0 { "ok" } else { "FAILED" });
    if failed > 0 {
        std::process::exit(101);
    }
}

/// The fault barrier: lets the inbox commit, announces it, and then holds the
/// delivery forever, so the ACK is never sent. Exists only in this test.
#[derive(Clone)]
struct HoldAfterCommit<S> {
    inner: S,
}

impl<S> Service<Delivery<Bytes>> for HoldAfterCommit<S>
where
    S: Service<Delivery<Bytes>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
{
    type Response = ();
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<(), BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, delivery: Delivery<Bytes>) -> Self::Future {
        let id = delivery.id().clone();
        let committed = self.inner.call(delivery);
        Box::pin(async move {
            committed.await.map_err(Into::into)?;
            println!("BARRIER committed delivery={id}");
            std::io::stdout().flush().ok();
            std::future::pending::<()>().await;
            Ok(())
        })
    }
}

/// The child process: a consumer whose service is the barrier over the inbox.
fn child_barrier_consume() {
    let env = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("{k} not set"));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let queue = QueueId::parse(&env("ORBIT_QUEUE_ID")).unwrap();
        let dsn = Dsn::parse(&env("ORBIT_RECEIVER_DSN")).unwrap();
        let scope = InboxScope::new(
            ReceiverName::parse(&env("RECEIVER_NAME")).unwrap(),
            queue.clone(),
        );
        match dsn.engine() {
            EngineKind::Postgres => barrier_consume::<Postgres>(&dsn, scope, queue).await,
            _ => barrier_consume::<MySql>(&dsn, scope, queue).await,
        }
    });
}

/// The child's consumer on the engine the address names.
async fn barrier_consume<E: Engine>(dsn: &Dsn, scope: InboxScope, queue: QueueId) {
    let env = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("{k} not set"));
    {
        let store = InboxStore::<E>::open(dsn, scope, StoreOptions::default())
            .await
            .unwrap();
        let client = OrbitClient::new(
            OrbitUrl::parse(&env("ORBIT_URL")).unwrap(),
            Token::new(env("ORBIT_TOKEN")),
            Duration::from_secs(10),
        )
        .unwrap();
        let sub = SubscriptionId::parse(&env("ORBIT_SUBSCRIPTION_ID")).unwrap();
        let source = OrbitSource::connect(client, sub, &queue).await.unwrap();
        let consumer = Consumer::new(source, ConsumerOptions::default());
        let service = HoldAfterCommit {
            inner: common::receiver(&store),
        };
        consumer.run(service, std::future::pending()).await.unwrap();
    }
}

async fn delivery(orbit: &OrbitDev, creds: &QueueCredentials, id: &str) -> serde_json::Value {
    orbit.get(creds, &format!("/v1/deliveries/{id}")).await
}

async fn wait_for_delivery(
    orbit: &OrbitDev,
    creds: &QueueCredentials,
    id: &str,
    within: Duration,
    check: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let d = delivery(orbit, creds, id).await;
        if check(&d) {
            return d;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "delivery never reached the expected state: {d}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The receiver's database in a scenario: on MySQL or on PostgreSQL.
enum Db {
    MySql(Box<TestDb>),
    Postgres(PgTestDb),
}

impl Db {
    async fn mysql() -> Db {
        Db::MySql(Box::new(TestDb::initialized().await))
    }

    async fn postgres() -> Db {
        let db = PgTestDb::initialized().await;
        Db::Postgres(db)
    }

    /// The receiver's `ORBIT_RECEIVER_DSN`.
    fn dsn(&self) -> String {
        match self {
            Db::MySql(db) => dsn_for(&db.name),
            Db::Postgres(db) => db.dsn.clone(),
        }
    }

    /// The MySQL database, for a scenario that runs only there.
    fn on_mysql(&self) -> &TestDb {
        match self {
            Db::MySql(db) => db,
            Db::Postgres(_) => panic!("this scenario runs on MySQL"),
        }
    }
}

async fn view(db: &Db, creds: &QueueCredentials, task: &str) -> Option<task_view::TaskViewRow> {
    let scope = InboxScope::new(ReceiverName::parse(NAME).unwrap(), creds.queue());
    let task = TaskId::parse(task).unwrap();
    match db {
        Db::MySql(db) => task_view::load(&db.pool().await, &scope, &task).await,
        Db::Postgres(db) => task_view::load(&db.pool, &scope, &task).await,
    }
    .unwrap()
}

/// A cancelled task's event waiting in a fresh subscription.
async fn one_cancelled_task(
    orbit: &OrbitDev,
    creds: &QueueCredentials,
) -> (SubscriptionId, TaskId, String) {
    let client = orbit.client(creds);
    let sub = client
        .create_subscription(&[EventType::Cancelled])
        .await
        .unwrap();
    let task = client.submit_task().await.unwrap().id;
    client.cancel_task(&task).await.unwrap();
    let deliveries = orbit.deliveries(creds, &sub.id).await;
    let id = deliveries[0]["id"].as_str().unwrap().to_owned();
    (sub.id, task, id)
}

/// The child consumer of `crash child-barrier-consume` on `sub` and `db`,
/// once it says it committed `delivery_id` (and holds it, un-ACKed).
async fn held_after_commit(
    orbit: &OrbitDev,
    creds: &QueueCredentials,
    db: &Db,
    sub: &SubscriptionId,
    delivery_id: &str,
) -> Child {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .arg("child-barrier-consume")
        .env("ORBIT_URL", &orbit.url)
        .env("ORBIT_TOKEN", &creds.token)
        .env("ORBIT_QUEUE_ID", &creds.queue_id)
        .env("ORBIT_SUBSCRIPTION_ID", sub.as_str())
        .env("ORBIT_RECEIVER_DSN", db.dsn())
        .env("RECEIVER_NAME", NAME)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        line
    })
    .await
    .unwrap();
    assert_eq!(
        line.trim(),
        format!("BARRIER committed delivery={delivery_id}")
    );
    child
}

/// Kills `child` with SIGKILL and reaps it.
fn sigkill(mut child: Child) {
    use std::os::unix::process::ExitStatusExt;
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert_eq!(
        status.signal(),
        Some(9),
        "the consumer was SIGKILLed and reaped"
    );
}

async fn killed_after_commit_before_ack() {
    // The real 30 s lease of Orbit's default.
    let orbit = OrbitDev::start(30_000, 5);
    let creds = orbit.bootstrap("crash-kill", None).await;
    let db = Db::mysql().await;
    let (sub, task, delivery_id) = one_cancelled_task(&orbit, &creds).await;

    let child = held_after_commit(&orbit, &creds, &db, &sub, &delivery_id).await;

    // The business transaction is committed…
    let v = view(&db, &creds, task.as_str())
        .await
        .expect("view committed");
    assert_eq!((v.last_state.as_str(), v.applied_events), ("CANCELLED", 1));
    // …while Orbit still has the delivery leased and un-ACKed.
    let d = delivery(&orbit, &creds, &delivery_id).await;
    assert_eq!(
        (d["state"].as_str(), d["attempts"].as_u64()),
        (Some("LEASED"), Some(1))
    );

    sigkill(child);

    // A fresh, normal consumer with the same name gets the redelivery once
    // the lease has run out, finds the inbox row and ACKs.
    fresh_consumer_dedups_and_acks(&orbit, &creds, &db, &sub, &task, &delivery_id, 45).await;
}

/// A fresh, normal `receiver consume` with the same name gets the redelivery
/// once the lease has run out, finds the committed inbox row and ACKs the
/// second attempt; the view advanced once.
async fn fresh_consumer_dedups_and_acks(
    orbit: &OrbitDev,
    creds: &QueueCredentials,
    db: &Db,
    sub: &SubscriptionId,
    task: &TaskId,
    delivery_id: &str,
    within_secs: u64,
) {
    let mut fresh = Consume::start(orbit, creds, &db.dsn(), sub, NAME, &[]);
    let d = wait_for_delivery(
        orbit,
        creds,
        delivery_id,
        Duration::from_secs(within_secs),
        |d| d["state"] == "ACKED",
    )
    .await;
    assert_eq!(d["attempts"], 2);
    let out = fresh.output();
    assert!(out.contains(r#"class="duplicate""#), "{out}");
    assert!(fresh.terminate().success());
    assert_eq!(
        view(db, creds, task.as_str()).await.unwrap().applied_events,
        1
    );
}

async fn lost_ack_answer_is_re_reported(db: Db) {
    let orbit = OrbitDev::start(30_000, 5);
    let creds = orbit.bootstrap("crash-ack-answer", None).await;
    let (sub, task, delivery_id) = one_cancelled_task(&orbit, &creds).await;
    let proxy = HttpProxy::start(&orbit.url).await;
    proxy.arm(AckFault::DropAnswer);

    let mut consume = Consume::start(
        &orbit,
        &creds,
        &db.dsn(),
        &sub,
        NAME,
        &[("ORBIT_URL", &proxy.url())],
    );
    let d = wait_for_delivery(&orbit, &creds, &delivery_id, Duration::from_secs(20), |d| {
        d["state"] == "ACKED"
    })
    .await;
    // Wait for the consumer to hear the re-reported ACK's answer.
    consume
        .wait_for_output(Duration::from_secs(10), |out| out.contains("already=true"))
        .await;
    assert!(consume.terminate().success());
    assert_eq!(proxy.fired(), 1);
    assert_eq!(d["attempts"], 1, "no redelivery was needed");
    let out = consume.output();
    assert!(
        out.contains("ACK answer lost; re-reporting with the same proof"),
        "{out}"
    );
    assert_eq!(out.matches(r#"class="applied""#).count(), 1, "{out}");
    assert_eq!(
        view(&db, &creds, task.as_str())
            .await
            .unwrap()
            .applied_events,
        1
    );
}

async fn dies_with_ack_in_flight(db: Db) {
    let orbit = OrbitDev::start(2_000, 5);
    let creds = orbit.bootstrap("crash-ack-lost", None).await;
    let (sub, task, delivery_id) = one_cancelled_task(&orbit, &creds).await;
    let proxy = HttpProxy::start(&orbit.url).await;
    proxy.arm(AckFault::Blackhole);

    let mut doomed = Consume::start(
        &orbit,
        &creds,
        &db.dsn(),
        &sub,
        NAME,
        &[("ORBIT_URL", &proxy.url())],
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while proxy.fired() == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{}",
            doomed.output()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    doomed.child.kill().unwrap();
    doomed.child.wait().unwrap();
    assert_eq!(
        view(&db, &creds, task.as_str())
            .await
            .unwrap()
            .applied_events,
        1
    );
    assert_ne!(
        delivery(&orbit, &creds, &delivery_id).await["state"],
        "ACKED"
    );

    fresh_consumer_dedups_and_acks(&orbit, &creds, &db, &sub, &task, &delivery_id, 20).await;
}

async fn budget_exhaustion_and_revival() {
    let (orbit, creds, sub) = OrbitDev::subscribed(1_500, 3, "crash-budget").await;
    let db = Db::mysql().await;
    let mysql = db.on_mysql();
    let client = orbit.client(&creds);
    let scope = InboxScope::new(ReceiverName::parse(NAME).unwrap(), creds.queue());
    let store = InboxStore::connect(
        &mysql.dsn,
        scope,
        StoreOptions {
            transaction_timeout: Duration::from_secs(1),
            ..Default::default()
        },
    )
    .await
    .unwrap();

    // The task's view exists at version 1; another transaction holds its row,
    // so every attempt to apply version 2 fails on the lock.
    let task = random_hex(16);
    let event = |version, event_type, state| EventSpec {
        id: random_hex(16),
        queue_id: &creds.queue_id,
        task_id: &task,
        version,
        event_type,
        state,
        result: None,
    };
    let first = event(1, "task.submitted", "PENDING");
    orbit.inject(&sub, &first.json()).await;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let source = OrbitSource::connect(client.clone(), sub.clone(), &creds.queue())
        .await
        .unwrap();
    let consumer = Consumer::new(source, ConsumerOptions::default());
    let service = common::receiver(&store);
    let running = tokio::spawn(consumer.run(service, async move {
        let mut stopped = stopped;
        let _ = stopped.wait_for(|s| *s).await;
    }));
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(10), |c| c["acked"] == 1)
        .await;
    let pool = mysql.pool().await;
    let mut holder = pool.begin().await.unwrap();
    sqlx::query("SELECT task_version FROM receiver_task_views WHERE task_id = ? FOR UPDATE")
        .bind(&task)
        .fetch_one(&mut *holder)
        .await
        .unwrap();

    let second = event(2, "task.cancelled", "CANCELLED");
    let delivery_id = orbit.inject(&sub, &second.json()).await;
    let d = wait_for_delivery(&orbit, &creds, &delivery_id, Duration::from_secs(20), |d| {
        d["state"] == "EXPIRED"
    })
    .await;
    assert_eq!(d["attempts"], 3, "every attempt of the budget was used");
    let v = view(&db, &creds, &task).await.unwrap();
    assert_eq!(
        (v.task_version, v.applied_events),
        (1, 1),
        "the view is untouched"
    );

    // The cause is removed; the operator adds a finite budget.
    holder.commit().await.unwrap();
    let (status, answer) = orbit
        .admin(
            "POST",
            &format!("/v1/admin/deliveries/{delivery_id}/budget"),
            r#"{"add":2}"#.into(),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    let d = wait_for_delivery(&orbit, &creds, &delivery_id, Duration::from_secs(10), |d| {
        d["state"] == "ACKED"
    })
    .await;
    assert_eq!(d["attempts"], 4, "exactly one more attempt");
    let _ = stop.send(true);
    let report = running.await.unwrap().unwrap();
    assert_eq!(report.acked, 2);
    assert!(report.failed >= 3);
    let v = view(&db, &creds, &task).await.unwrap();
    assert_eq!(
        (v.task_version, v.last_state.as_str(), v.applied_events),
        (2, "CANCELLED", 2)
    );
}

/// The same crash window on PostgreSQL: the child commits, is killed
/// before its ACK, and a fresh `receiver consume` on the same database
/// finds the committed inbox row when Orbit delivers again (a 3 s lease).
async fn killed_after_commit_before_ack_on_postgres() {
    let orbit = OrbitDev::start(3_000, 5);
    let creds = orbit.bootstrap("crash-kill-pg", None).await;
    let db = Db::postgres().await;
    let (sub, task, delivery_id) = one_cancelled_task(&orbit, &creds).await;

    let child = held_after_commit(&orbit, &creds, &db, &sub, &delivery_id).await;
    let v = view(&db, &creds, task.as_str())
        .await
        .expect("view committed");
    assert_eq!((v.last_state.as_str(), v.applied_events), ("CANCELLED", 1));
    sigkill(child);

    fresh_consumer_dedups_and_acks(&orbit, &creds, &db, &sub, &task, &delivery_id, 30).await;
}
