//! Retention without a second effect, through real consumers: after
//! `receiver prune`, a redelivery of a task's latest event is still an
//! exact duplicate (its row is kept), and a redelivery of an older event
//! whose row was pruned comes back below the view's version, stale: the
//! view and `applied_events` do not move. Over Orbit (deliveries revived
//! with an operator's added budget) and over NATS JetStream.

use crate::common;

use std::time::Duration;

use common::consume::Consume;
use common::http_proxy::{AckFault, HttpProxy};
use common::orbit::{receiver, OrbitDev, QueueCredentials};
use common::{dsn_for, random_hex, EventSpec, TestDb};
use result_inbox::ids::SubscriptionId;
use result_inbox::ids::{QueueId, TaskId};
use result_inbox::scope::{InboxScope, ReceiverName};
use result_inbox::task_view::{self, TaskViewRow};

const NAME: &str = "task-result-view";

const PRUNE_GRANTS: [&str; 3] = [
    "SELECT, DELETE ON `{db}`.receiver_inbox",
    "SELECT ON `{db}`.receiver_task_views",
    "SELECT, INSERT, UPDATE ON `{db}`.receiver_pruned",
];

/// Versions 1 and 2 of one task, 2 with a result.
fn two_versions(queue: &str, task: &str) -> (String, String, String, String) {
    let v1 = EventSpec::submitted(queue, task);
    let v2 = EventSpec {
        id: random_hex(16),
        version: 2,
        event_type: "task.succeeded",
        state: "SUCCEEDED",
        result: Some(r#"{"rows":2}"#),
        ..EventSpec::submitted(queue, task)
    };
    (v1.id.clone(), v1.json(), v2.id.clone(), v2.json())
}

async fn view(db: &TestDb, queue: &str, task: &str) -> TaskViewRow {
    let scope = InboxScope::new(
        ReceiverName::parse(NAME).unwrap(),
        QueueId::parse(queue).unwrap(),
    );
    task_view::load(&db.pool().await, &scope, &TaskId::parse(task).unwrap())
        .await
        .unwrap()
        .expect("the task has a view")
}

async fn wait_for_version(db: &TestDb, queue: &str, task: &str, version: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let scope = InboxScope::new(
        ReceiverName::parse(NAME).unwrap(),
        QueueId::parse(queue).unwrap(),
    );
    loop {
        let row = task_view::load(&db.pool().await, &scope, &TaskId::parse(task).unwrap())
            .await
            .unwrap();
        if row.is_some_and(|v| v.task_version == version) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "version {version} never applied"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Ages every inbox row by 30 days, then prunes past 7 days with the
/// prune account; returns prune's output line.
async fn age_and_prune(db: &TestDb, queue: &str) -> String {
    sqlx::query("UPDATE receiver_inbox SET received_at = received_at - INTERVAL 30 DAY")
        .execute(&db.pool().await)
        .await
        .unwrap();
    let (user, password) = db.user_with(&PRUNE_GRANTS).await;
    let o = receiver()
        .args(["prune", "--older-than", "7d"])
        .env("RECEIVER_PRUNE_DSN", db.dsn_of(&user, &password))
        .env("ORBIT_QUEUE_ID", queue)
        .env("RECEIVER_NAME", NAME)
        .output()
        .unwrap();
    let line = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(line.contains("deleted=1 "), "{line}");
    assert!(line.contains("kept_latest=1 "), "{line}");
    line
}

/// The inbox rows of an event: (applied, age in days).
async fn rows_of(db: &TestDb, event: &str) -> Vec<(bool, i64)> {
    sqlx::query_as(
        "SELECT applied, TIMESTAMPDIFF(DAY, received_at, UTC_TIMESTAMP(6)) FROM receiver_inbox \
         WHERE event_id = ?",
    )
    .bind(event)
    .fetch_all(&db.pool().await)
    .await
    .unwrap()
}

/// What both redelivery tests end with: the consumer logged v2 as a
/// duplicate and v1 as stale and applied nothing; the view is at v2 with
/// its two advances; v1 is recorded again, as received now and not
/// applied, v2's row is the one of 30 days ago; verify passes.
async fn duplicate_and_stale(
    out: &str,
    db: &TestDb,
    queue: &str,
    task: &str,
    v1_id: &str,
    v2_id: &str,
) {
    assert_eq!(out.matches(r#"class="duplicate""#).count(), 1, "{out}");
    assert_eq!(out.matches(r#"class="stale""#).count(), 1, "{out}");
    assert_eq!(out.matches(r#"class="applied""#).count(), 0, "{out}");
    let v = view(db, queue, task).await;
    assert_eq!(
        (v.task_version, v.last_event_id.as_str(), v.applied_events),
        (2, v2_id, 2)
    );
    assert_eq!(rows_of(db, v1_id).await, [(false, 0)]);
    assert_eq!(rows_of(db, v2_id).await, [(true, 30)]);
    verify_passes(db);
}

fn verify_passes(db: &TestDb) {
    let o = receiver()
        .arg("verify")
        .env("ORBIT_RECEIVER_DSN", dsn_for(&db.name))
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{out}");
    assert!(out.contains("pruned_rows=1 problems=0"), "{out}");
}

/// A delivery's state on orbit-dev.
async fn delivery(orbit: &OrbitDev, creds: &QueueCredentials, id: &str) -> serde_json::Value {
    orbit.get(creds, &format!("/v1/deliveries/{id}")).await
}

/// Applies one injected event through a consumer whose every ACK is
/// swallowed, and waits until Orbit has given the delivery up (EXPIRED).
async fn applied_never_acked(
    orbit: &OrbitDev,
    creds: &QueueCredentials,
    sub: &SubscriptionId,
    db: &TestDb,
    event: &str,
) -> String {
    let proxy = HttpProxy::start(&orbit.url).await;
    proxy.arm(AckFault::Blackhole);
    let id = orbit.inject(sub, event).await;
    let mut consumer = Consume::start(
        orbit,
        creds,
        &dsn_for(&db.name),
        sub,
        NAME,
        &[("ORBIT_URL", &proxy.url())],
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while delivery(orbit, creds, &id).await["state"] != "EXPIRED" {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{}",
            consumer.output()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    consumer.kill();
    assert!(proxy.fired() > 0, "no ACK was swallowed");
    id
}

#[tokio::test]
async fn after_a_prune_orbits_revived_deliveries_are_a_duplicate_and_a_stale_and_nothing_is_applied_twice(
) {
    // Budget 1: a delivery whose ACK is lost expires after one lease.
    let (orbit, creds, sub) = OrbitDev::subscribed(1_000, 1, "prune-redelivery").await;
    let db = TestDb::initialized_with_retention().await;
    let task = random_hex(16);
    let (v1_id, v1, v2_id, v2) = two_versions(&creds.queue_id, &task);
    let d1 = applied_never_acked(&orbit, &creds, &sub, &db, &v1).await;
    wait_for_version(&db, &creds.queue_id, &task, 1).await;
    let d2 = applied_never_acked(&orbit, &creds, &sub, &db, &v2).await;
    wait_for_version(&db, &creds.queue_id, &task, 2).await;
    assert_eq!(view(&db, &creds.queue_id, &task).await.applied_events, 2);

    age_and_prune(&db, &creds.queue_id).await;
    assert!(rows_of(&db, &v1_id).await.is_empty(), "v1's row was pruned");

    // The operator revives both deliveries with an added budget.
    for id in [&d1, &d2] {
        let (status, answer) = orbit
            .admin(
                "POST",
                &format!("/v1/admin/deliveries/{id}/budget"),
                r#"{"add":1}"#.into(),
            )
            .await;
        assert_eq!(status, 200, "{answer}");
    }
    let mut consumer = Consume::on_test_db(&orbit, &creds, &db, &sub, &[]);
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(20), |c| c["acked"] == 2)
        .await;
    assert!(consumer.terminate().success());
    duplicate_and_stale(
        &consumer.output(),
        &db,
        &creds.queue_id,
        &task,
        &v1_id,
        &v2_id,
    )
    .await;
}

#[cfg(feature = "nats")]
#[tokio::test]
async fn after_a_prune_jetstreams_redelivery_is_a_duplicate_and_a_republished_old_event_is_stale() {
    use common::nats::{AckFault, AckLosingProxy, JetStreamQueue, NatsServer};

    let server = NatsServer::start();
    let queue = JetStreamQueue::create(&server, &random_hex(16), Duration::from_secs(2), 5).await;
    let db = TestDb::initialized_with_retention().await;
    let mut env = queue.env(&server.url());
    env.push(("ORBIT_RECEIVER_DSN".into(), dsn_for(&db.name)));
    env.push(("RECEIVER_NAME".into(), NAME.into()));
    let task = random_hex(16);
    let (v1_id, v1, v2_id, v2) = two_versions(&queue.queue, &task);

    // v1 is applied and acknowledged.
    queue.publish(v1.clone()).await;
    let mut first = Consume::with_env(&server.dir, &env);
    queue.wait_all_acked(Duration::from_secs(20)).await;
    assert!(first.terminate().success());

    // v2 is applied, its acknowledgement never leaves, the consumer dies.
    let proxy = AckLosingProxy::start(server.port).await;
    proxy.arm(AckFault::LoseAck);
    let mut via_proxy = env.clone();
    via_proxy.retain(|(k, _)| k != "NATS_URL");
    via_proxy.push(("NATS_URL".into(), proxy.url()));
    queue.publish(v2).await;
    let mut doomed = Consume::with_env(&server.dir, &via_proxy);
    wait_for_version(&db, &queue.queue, &task, 2).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while proxy.fired() == 0 {
        assert!(tokio::time::Instant::now() < deadline, "no ACK was sent");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    doomed.kill();

    age_and_prune(&db, &queue.queue).await;

    // JetStream redelivers v2 after AckWait; an upstream publishes v1 again.
    queue.publish(v1).await;
    let mut last = Consume::with_env(&server.dir, &env);
    queue.wait_all_acked(Duration::from_secs(20)).await;
    assert!(last.terminate().success());
    duplicate_and_stale(&last.output(), &db, &queue.queue, &task, &v1_id, &v2_id).await;
}
