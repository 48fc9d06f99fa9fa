//! `receiver consume --source rabbitmq`: the same inbox fed by a real
//! RabbitMQ quorum queue, with real `receiver` processes, on MySQL and on
//! PostgreSQL. The queue is declared as `receiver subscribe --source
//! rabbitmq` declares it (`result_inbox::rabbitmq::provision`).
#![cfg(feature = "rabbitmq")]

use crate::common::{self, on_both};

use std::time::Duration;

use common::consume::Consume;
use common::postgres::PgTestDb;
use common::rabbitmq::{FreezingProxy, RabbitNode, RabbitQueue};
use common::{random_hex, EventSpec, TestDb};
use result_inbox::db::Engine;
use sqlx::{Connection, MySql, MySqlConnection, PgConnection, Postgres};

const RECEIVER: &str = "task-result-view";

/// A database of a test's own with the receiver's tables, on either
/// engine, and what its tables add up to.
trait Server: Engine {
    type Db: Send + Sync;
    /// The database and its address.
    async fn database() -> (Self::Db, String);
    /// Inbox rows, rows that advanced a view, and the advances the views
    /// counted: the last two always agree.
    async fn totals(dsn: &str) -> (i64, i64, i64);
}

impl Server for MySql {
    type Db = TestDb;

    async fn database() -> (TestDb, String) {
        let db = TestDb::initialized().await;
        let dsn = common::dsn_for(&db.name);
        (db, dsn)
    }

    async fn totals(dsn: &str) -> (i64, i64, i64) {
        let mut conn = MySqlConnection::connect(dsn).await.unwrap();
        sqlx::query_as(
            "SELECT (SELECT COUNT(*) FROM receiver_inbox), \
             (SELECT CAST(COALESCE(SUM(applied), 0) AS SIGNED) FROM receiver_inbox), \
             (SELECT CAST(COALESCE(SUM(applied_events), 0) AS SIGNED) FROM receiver_task_views)",
        )
        .fetch_one(&mut conn)
        .await
        .unwrap()
    }
}

impl Server for Postgres {
    type Db = PgTestDb;

    async fn database() -> (PgTestDb, String) {
        let db = PgTestDb::initialized().await;
        let dsn = db.dsn.clone();
        (db, dsn)
    }

    async fn totals(dsn: &str) -> (i64, i64, i64) {
        let mut conn = PgConnection::connect(dsn).await.unwrap();
        sqlx::query_as(
            "SELECT (SELECT count(*) FROM receiver_inbox), \
             (SELECT coalesce(sum(applied), 0)::bigint FROM receiver_inbox), \
             (SELECT coalesce(sum(applied_events), 0)::bigint FROM receiver_task_views)",
        )
        .fetch_one(&mut conn)
        .await
        .unwrap()
    }
}

/// A quorum queue on a node, a fresh receiver database, and where the
/// receivers' output goes.
struct Setup<E: Server> {
    queue: RabbitQueue,
    _db: E::Db,
    dsn: String,
    dir: std::path::PathBuf,
}

impl<E: Server> Setup<E> {
    async fn on(node: &RabbitNode, delivery_limit: u32) -> Setup<E> {
        let queue = RabbitQueue::create(node, delivery_limit).await;
        let (db, dsn) = E::database().await;
        let dir =
            std::env::temp_dir().join(format!("result-inbox-rabbitmq-test-{}", random_hex(6)));
        std::fs::create_dir_all(&dir).unwrap();
        Setup {
            queue,
            _db: db,
            dsn,
            dir,
        }
    }

    /// `receiver consume --source rabbitmq` on this queue through `url`.
    fn consume_via(&self, url: &str) -> Consume {
        let mut env = self.queue.env();
        env.retain(|(k, _)| k != "AMQP_URL");
        env.push(("AMQP_URL".into(), url.into()));
        env.push(("ORBIT_RECEIVER_DSN".into(), self.dsn.clone()));
        env.push(("RECEIVER_NAME".into(), RECEIVER.into()));
        Consume::with_env(&self.dir, &env)
    }

    fn consume(&self) -> Consume {
        self.consume_via(&self.queue.url)
    }

    fn event(
        &self,
        task: &str,
        version: u64,
        event_type: &'static str,
        state: &'static str,
    ) -> String {
        EventSpec {
            id: random_hex(16),
            queue_id: &self.queue.queue_id,
            task_id: task,
            version,
            event_type,
            state,
            result: None,
        }
        .json()
    }

    async fn totals(&self) -> (i64, i64, i64) {
        E::totals(&self.dsn).await
    }

    /// Waits until the inbox holds `rows` rows, which `consume` writes.
    async fn wait_rows(&self, rows: i64, limit: Duration, consume: &Consume) {
        let deadline = tokio::time::Instant::now() + limit;
        while self.totals().await.0 < rows {
            assert!(
                tokio::time::Instant::now() < deadline,
                "fewer than {rows} inbox rows: {:?}\n{}",
                self.totals().await,
                consume.output()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Takes the first message of the dead-letter queue, waiting up to
    /// `limit` for `consume` to have one dead-lettered.
    async fn dead_letter(
        &self,
        limit: Duration,
        consume: &Consume,
    ) -> (amqprs::BasicProperties, Vec<u8>) {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if let Some(dead) = self.queue.take(&self.queue.failed()).await {
                return dead;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "nothing dead-lettered: {}",
                consume.output()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The `acknowledged` lines of a receiver's log.
fn acknowledged(log: &str) -> usize {
    log.lines().filter(|l| l.contains(" acknowledged ")).count()
}

/// Why RabbitMQ dead-lettered a message, as its `x-death` header records
/// it (`rejected`, `delivery_limit`), and from which queue.
fn death(properties: &amqprs::BasicProperties) -> (String, String) {
    use amqprs::{FieldName, FieldTable, FieldValue};
    let field =
        |table: &FieldTable, name: &str| table.get(&FieldName::try_from(name).unwrap()).cloned();
    let headers = properties.headers().expect("a dead letter has headers");
    let Some(FieldValue::A(deaths)) = field(headers, "x-death") else {
        panic!("no x-death header: {headers}");
    };
    let Some(FieldValue::F(last)) = Vec::from(deaths).into_iter().next() else {
        panic!("x-death holds no table: {headers}");
    };
    let text = |name| match field(&last, name) {
        Some(FieldValue::S(v)) => v.to_string(),
        other => panic!("x-death's {name}: {other:?}"),
    };
    (text("reason"), text("queue"))
}

async fn duplicates_and_versions_out_of_order_end_as_over_orbit_and_a_conflict_is_dead_lettered_after_its_limit<
    E: Server,
>() {
    let node = RabbitNode::shared();
    let s = Setup::<E>::on(&node, 2).await;
    let task = random_hex(16);
    let v2 = s.event(&task, 2, "task.cancelled", "CANCELLED");
    let v1 = s.event(&task, 1, "task.submitted", "PENDING");
    let v2_other = {
        let mut other: serde_json::Value = serde_json::from_str(&v2).unwrap();
        other["type"] = "task.failed".into();
        other["task"]["state"] = "FAILED".into();
        other.to_string()
    };

    // One at a time, so that each meets the state the one before left.
    let mut consume = s.consume();
    for (n, body) in [&v2, &v2, &v1].into_iter().enumerate() {
        s.queue.publish(std::slice::from_ref(body)).await;
        consume
            .wait_for_output(Duration::from_secs(30), |out| acknowledged(out) > n)
            .await;
    }
    s.queue.publish(&[v2_other]).await;

    // The conflict is returned twice (its limit), then dead-lettered; never
    // acknowledged.
    let dead = s.dead_letter(Duration::from_secs(30), &consume).await;
    assert!(consume.terminate().success());
    let out = consume.output();
    assert!(String::from_utf8_lossy(&dead.1).contains("task.failed"));
    assert_eq!(
        death(&dead.0),
        ("delivery_limit".to_owned(), s.queue.queue.clone()),
        "{out}"
    );
    for class in ["applied", "duplicate", "stale"] {
        assert_eq!(
            out.matches(&format!(r#"class="{class}""#)).count(),
            1,
            "{class}: {out}"
        );
    }
    assert_eq!(out.matches(r#"class="conflict""#).count(), 3, "{out}");
    assert_eq!(
        out.matches("the last attempt the source allows failed")
            .count(),
        1,
        "attempt 3 of 3: {out}"
    );
    assert_eq!(acknowledged(&out), 3, "{out}");
    for attempt in 1..=3 {
        assert!(out.contains(&format!("attempt={attempt}")), "{out}");
    }
    assert_eq!(s.totals().await, (2, 1, 1));
    assert_eq!(s.queue.ready(&s.queue.queue).await, 0);
}

async fn bytes_that_can_never_be_an_event_are_dead_lettered_at_once_while_their_neighbours_apply<
    E: Server,
>() {
    let node = RabbitNode::shared();
    let s = Setup::<E>::on(&node, 5).await;
    let (a, b) = (random_hex(16), random_hex(16));
    let bodies = [
        s.event(&a, 1, "task.submitted", "PENDING"),
        "{\"not\": \"an event\"".to_owned(),
        s.event(&b, 1, "task.submitted", "PENDING"),
    ];
    s.queue.publish(&bodies).await;
    let mut consume = s.consume();
    s.wait_rows(2, Duration::from_secs(30), &consume).await;
    let dead = s.dead_letter(Duration::from_secs(20), &consume).await;
    assert!(consume.terminate().success());
    let out = consume.output();
    // Rejected on its first delivery, without requeue.
    assert_eq!(
        death(&dead.0),
        ("rejected".to_owned(), s.queue.queue.clone()),
        "{out}"
    );
    assert_eq!(out.matches(r#"class="rejected""#).count(), 1, "{out}");
    assert_eq!(dead.1, bodies[1].as_bytes());
    assert_eq!(
        out.matches("dropped by the source for good").count(),
        1,
        "{out}"
    );
    assert_eq!(acknowledged(&out), 2, "{out}");
    assert_eq!(s.totals().await, (2, 2, 2));
    assert_eq!(s.queue.ready(&s.queue.queue).await, 0);
    assert_eq!(s.queue.ready(&s.queue.failed()).await, 0);
}

async fn a_consumer_killed_after_commit_before_its_ack_reached_the_server_is_redelivered_and_deduplicated<
    E: Server,
>() {
    let node = RabbitNode::shared();
    let s = Setup::<E>::on(&node, 5).await;
    let proxy = FreezingProxy::start(node.port).await;
    let task = random_hex(16);

    // The first consumer commits; its ACK never reaches the server, and it
    // is killed.
    let mut first = s.consume_via(&proxy.url());
    first
        .wait_for_output(Duration::from_secs(30), |out| {
            out.contains("delivery stream open")
        })
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    proxy.freeze();
    s.queue
        .publish(&[s.event(&task, 1, "task.submitted", "PENDING")])
        .await;
    s.wait_rows(1, Duration::from_secs(30), &first).await;
    first
        .wait_for_output(Duration::from_secs(10), |out| acknowledged(out) == 1)
        .await;
    first.kill();

    // The server takes the delivery back with the connection: a duplicate,
    // acknowledged.
    let mut second = s.consume();
    second
        .wait_for_output(Duration::from_secs(30), |out| acknowledged(out) == 1)
        .await;
    assert!(second.terminate().success());
    let out = second.output();
    assert_eq!(out.matches(r#"class="duplicate""#).count(), 1, "{out}");
    assert!(out.contains("attempt=2"), "{out}");
    assert_eq!(s.totals().await, (1, 1, 1));
    assert_eq!(s.queue.ready(&s.queue.queue).await, 0);
}

async fn a_server_restarted_under_load_loses_nothing_and_applies_nothing_twice<E: Server>() {
    let node = RabbitNode::own();
    let s = Setup::<E>::on(&node, 20).await;
    let events: Vec<String> = (0..300)
        .map(|_| s.event(&random_hex(16), 1, "task.submitted", "PENDING"))
        .collect();
    s.queue.publish(&events).await;
    let mut consume = s.consume();
    s.wait_rows(60, Duration::from_secs(60), &consume).await;
    node.restart();
    s.wait_rows(300, Duration::from_secs(90), &consume).await;
    // Whatever was unacknowledged when the server died comes again and is
    // a duplicate; once the queue is empty, every event is in once.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while s.queue.ready(&s.queue.queue).await > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{}",
            consume.output()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(consume.terminate().success());
    let out = consume.output();
    assert_eq!(s.totals().await, (300, 300, 300), "{out}");
    assert_eq!(out.matches(r#"class="applied""#).count(), 300, "{out}");
    assert!(
        out.contains("delivery stream broke") || out.contains("delivery stream closed"),
        "{out}"
    );
    assert_eq!(s.queue.ready(&s.queue.queue).await, 0);
    assert_eq!(s.queue.ready(&s.queue.failed()).await, 0);
}

/// `receiver` with `args`, on `queue`'s queue at `url`.
fn receiver(url: &str, queue_id: &str, args: &[&str]) -> std::process::Output {
    common::orbit::receiver()
        .args(args)
        .env("AMQP_URL", url)
        .env("ORBIT_QUEUE_ID", queue_id)
        .output()
        .unwrap()
}

#[tokio::test]
async fn receiver_subscribe_declares_the_quorum_queue_and_its_dead_letter_queue_and_finds_them_the_next_time(
) {
    let node = RabbitNode::shared();
    let queue_id = random_hex(16);
    let queue = format!("orbit.results.{queue_id}");
    let line = |state: &str| {
        format!(
            "queue={queue} {state} type=quorum delivery_limit=7 dead_letter_queue={queue}.failed ready=0\n"
        )
    };
    for state in ["created", "existing"] {
        let out = receiver(
            &node.url(),
            &queue_id,
            &["subscribe", "--source", "rabbitmq", "--delivery-limit", "7"],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout), line(state));
    }
    // The queue is a quorum queue with exactly these arguments: declaring
    // it as provision does is accepted, and so is publishing to it.
    let declared = RabbitQueue {
        url: node.url(),
        queue_id: queue_id.clone(),
        queue: queue.clone(),
    };
    declared.publish(&["{}".to_owned()]).await;
    assert_eq!(declared.ready(&queue).await, 1);
    assert_eq!(declared.ready(&declared.failed()).await, 0);

    // Another limit asked of an existing queue: left as it is, and said.
    let other = receiver(
        &node.url(),
        &queue_id,
        &["subscribe", "--source", "rabbitmq", "--delivery-limit", "8"],
    );
    let err = String::from_utf8_lossy(&other.stderr);
    assert!(other.status.success(), "{err}");
    assert!(err.contains("left as it is"), "{err}");
    assert_eq!(
        String::from_utf8_lossy(&other.stdout),
        line("existing").replace("ready=0", "ready=1")
    );
}

#[tokio::test]
async fn receiver_subscribe_refuses_a_classic_queue_of_the_same_name_naming_why_and_leaves_it() {
    let node = RabbitNode::shared();
    let queue_id = random_hex(16);
    let queue = format!("orbit.results.{queue_id}");
    common::rabbitmq::declare_classic(&node.url(), &queue).await;
    let out = receiver(
        &node.url(),
        &queue_id,
        &["subscribe", "--source", "rabbitmq"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "queue {queue} is a classic queue: the receiver needs a quorum queue"
        )),
        "{err}"
    );
    assert!(out.stdout.is_empty());
    // Left as it was: a classic queue still takes a publish.
    let left = RabbitQueue {
        url: node.url(),
        queue_id,
        queue: queue.clone(),
    };
    left.publish(&["{}".to_owned()]).await;
    assert_eq!(left.ready(&queue).await, 1);
}

#[tokio::test]
async fn receiver_check_with_source_rabbitmq_checks_the_database_the_server_and_the_queue() {
    let node = RabbitNode::shared();
    let queue = RabbitQueue::create(&node, 5).await;
    let db = TestDb::initialized().await;
    let check = |url: &str, queue_id: &str| {
        common::orbit::receiver()
            .args(["check", "--source", "rabbitmq"])
            .env("AMQP_URL", url)
            .env("ORBIT_QUEUE_ID", queue_id)
            .env("ORBIT_RECEIVER_DSN", common::dsn_for(&db.name))
            .env("RECEIVER_NAME", RECEIVER)
            .output()
            .unwrap()
    };
    let ok = check(&queue.url, &queue.queue_id);
    assert_eq!(
        String::from_utf8_lossy(&ok.stdout),
        "check=database ok\ncheck=schema ok\ncheck=privileges ok\ncheck=rabbitmq ok\ncheck=queue ok\n"
    );
    assert!(ok.status.success());

    let missing = check(&queue.url, &random_hex(16));
    let out = String::from_utf8_lossy(&missing.stdout);
    assert!(out.contains("check=rabbitmq ok\n"), "{out}");
    assert!(
        out.contains("check=queue FAIL queue orbit.results.")
            && out.contains("does not exist in vhost /")
            && out.contains("receiver subscribe --source rabbitmq"),
        "{out}"
    );
    assert_eq!(missing.status.code(), Some(1), "{out}");

    let classic = random_hex(16);
    common::rabbitmq::declare_classic(&queue.url, &format!("orbit.results.{classic}")).await;
    let refused = check(&queue.url, &classic);
    let out = String::from_utf8_lossy(&refused.stdout);
    assert!(
        out.contains("check=queue FAIL queue orbit.results.") && out.contains("is a classic queue"),
        "{out}"
    );
    assert_eq!(refused.status.code(), Some(1), "{out}");

    // A refused login names the server without the password, which never
    // appears.
    let wrong = format!("amqp://guest:hunter2@127.0.0.1:{}/", node.port);
    let refused = check(&wrong, &queue.queue_id);
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&refused.stdout),
        String::from_utf8_lossy(&refused.stderr)
    );
    assert!(
        all.contains("check=rabbitmq FAIL RabbitMQ at amqp://guest@127.0.0.1:")
            && all.contains("refuses the user, the password or the vhost"),
        "{all}"
    );
    assert!(!all.contains("hunter2"), "{all}");
    assert_eq!(refused.status.code(), Some(1), "{all}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_outage_spends_no_delivery_s_limit_and_everything_is_applied_once_after_it() {
    let node = RabbitNode::shared();
    // A limit of 2 returns: an attempt per delivery caught by the outage
    // is spent; a consumer that kept taking them would spend the rest.
    let queue = RabbitQueue::create(&node, 2).await;
    let mut server = common::mysqld::PrivateServer::start();
    let dsn = server.create_database("receiver").await;
    result_inbox::db::schema::init(&result_inbox::db::Dsn::parse(&dsn).unwrap())
        .await
        .unwrap();
    let dir = std::env::temp_dir().join(format!("result-inbox-rabbitmq-test-{}", random_hex(6)));
    std::fs::create_dir_all(&dir).unwrap();
    let mut env = queue.env();
    env.push(("ORBIT_RECEIVER_DSN".into(), dsn.clone()));
    env.push(("RECEIVER_NAME".into(), RECEIVER.into()));
    let mut consume = Consume::with_env(&dir, &env);
    consume
        .wait_for_output(Duration::from_secs(30), |out| {
            out.contains("delivery stream open")
        })
        .await;

    server.stop();
    let event = |_| EventSpec::submitted(&queue.queue_id, &random_hex(16)).json();
    let events: Vec<String> = (0..40).map(event).collect();
    queue.publish(&events).await;
    // Long enough for every delivery the consumer held to have failed and
    // been returned several times over, had it kept consuming.
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(
        queue.ready(&queue.failed()).await,
        0,
        "{}",
        consume.output()
    );

    server.restart();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while MySql::totals(&dsn).await.0 < 40 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{}",
            consume.output()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    consume
        .wait_for_output(Duration::from_secs(20), |out| acknowledged(out) == 40)
        .await;
    assert!(consume.terminate().success());
    let out = consume.output();
    assert_eq!(MySql::totals(&dsn).await, (40, 40, 40), "{out}");
    assert_eq!(
        queue.ready(&queue.failed()).await,
        0,
        "nothing dead-lettered: {out}"
    );
    assert_eq!(queue.ready(&queue.queue).await, 0, "{out}");
    // At most the attempt the outage caught, and the one after it.
    assert!(
        !out.contains("attempt=3"),
        "a delivery was tried a third time: {out}"
    );
}

#[test]
fn consume_with_source_rabbitmq_names_each_setting_it_lacks_before_connecting() {
    let run = |env: &[(&str, &str)]| {
        let out = common::orbit::receiver()
            .args(["consume", "--source", "rabbitmq"])
            .env(
                "ORBIT_RECEIVER_DSN",
                "mysql://receiver@127.0.0.1:9/receiver",
            )
            .envs(env.iter().copied())
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = run(&[("ORBIT_QUEUE_ID", &random_hex(16))]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("AMQP_URL is not set"), "{err}");
    let (code, err) = run(&[("AMQP_URL", "amqp://orbit:hunter2@127.0.0.1:9/")]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("ORBIT_QUEUE_ID is not set"), "{err}");
    let (code, err) = run(&[
        ("AMQP_URL", "amqps://orbit:hunter2@127.0.0.1:9/a/b"),
        ("ORBIT_QUEUE_ID", &random_hex(16)),
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("AMQP_URL") && err.contains("%2f"), "{err}");
    assert!(!err.contains("hunter2"), "{err}");
}

on_both!(
    multi_thread:
    duplicates_and_versions_out_of_order_end_as_over_orbit_and_a_conflict_is_dead_lettered_after_its_limit,
    bytes_that_can_never_be_an_event_are_dead_lettered_at_once_while_their_neighbours_apply,
    a_consumer_killed_after_commit_before_its_ack_reached_the_server_is_redelivered_and_deduplicated,
    a_server_restarted_under_load_loses_nothing_and_applies_nothing_twice,
);
