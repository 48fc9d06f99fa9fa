//! End to end: real `orbit-dev` and `receiver` processes, real sockets, a real
//! database server.

use crate::common;

use std::process::{Output, Stdio};
use std::time::Duration;

use common::consume::Consume;
use common::orbit::{receiver, OrbitDev, QueueCredentials};
use common::{dsn_for, random_hex, EventSpec, TestDb};
use result_inbox::event::EventType;
use result_inbox::ids::SubscriptionId;
use result_inbox::ids::TaskId;
use result_inbox::scope::{InboxScope, ReceiverName};
use result_inbox::task_view;

/// Inbox rows, inbox rows that advanced a view, and the advances the views
/// counted: the last two must always agree.
async fn totals(db: &TestDb) -> (i64, i64, i64) {
    sqlx::query_as(
        "SELECT (SELECT COUNT(*) FROM receiver_inbox), \
         (SELECT CAST(COALESCE(SUM(applied), 0) AS SIGNED) FROM receiver_inbox), \
         (SELECT CAST(COALESCE(SUM(applied_events), 0) AS SIGNED) FROM receiver_task_views)",
    )
    .fetch_one(&db.pool().await)
    .await
    .unwrap()
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn all_types() -> Vec<EventType> {
    EventType::ALL.to_vec()
}

async fn view(
    db: &TestDb,
    name: &str,
    creds: &QueueCredentials,
    task: &str,
) -> task_view::TaskViewRow {
    let scope = InboxScope::new(ReceiverName::parse(name).unwrap(), creds.queue());
    task_view::load(&db.pool().await, &scope, &TaskId::parse(task).unwrap())
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("no view for task {task}"))
}

async fn applied_rows(db: &TestDb, event_ids: &[String]) -> i64 {
    let mut n = 0;
    for id in event_ids {
        let applied: Option<bool> =
            sqlx::query_scalar("SELECT applied FROM receiver_inbox WHERE event_id = ?")
                .bind(id)
                .fetch_optional(&db.pool().await)
                .await
                .unwrap();
        n += applied.unwrap_or(false) as i64;
    }
    n
}

/// The task of a demo whose report is `stdout`, once the report says its
/// event was applied once, its copy a duplicate, its ACK confirmed and its
/// subscription paused.
pub(crate) fn demo_task(stdout: &str) -> String {
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    let task = lines[0]
        .strip_prefix("task=")
        .and_then(|l| l.split(' ').next())
        .unwrap();
    assert_eq!(
        lines[0],
        format!("task={task} state=CANCELLED inbox_duplicate=true applied_events=1")
    );
    assert_eq!(
        lines[1],
        "ack_confirmed=1 pending=0 subscription_enabled=false"
    );
    task.to_owned()
}

#[tokio::test]
async fn the_demo_prints_its_three_lines_and_leaves_the_subscription_paused() {
    let orbit = OrbitDev::start(30_000, 5);
    let creds = orbit.bootstrap("inbox-demo", None).await;
    let db = TestDb::empty().await;

    let init = receiver()
        .arg("init")
        .env("ORBIT_RECEIVER_DSN", dsn_for(&db.name))
        .output()
        .unwrap();
    assert_eq!(
        text(&init).0,
        "receiver_schema_initialized=true foreign_keys=0\n"
    );

    let started = std::time::Instant::now();
    let demo = receiver()
        .arg("demo")
        .env("ORBIT_CREDENTIALS_FILE", &creds.file)
        .env("ORBIT_RECEIVER_DSN", dsn_for(&db.name))
        .output()
        .unwrap();
    let (stdout, stderr) = text(&demo);
    assert!(demo.status.success(), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(20));
    let task = demo_task(&stdout);
    let task = task.as_str();

    // Orbit agrees: one delivery, ACKed on its first attempt, subscription paused.
    let subs = orbit.get(&creds, "/v1/subscriptions").await;
    let sub = &subs["subscriptions"][0];
    assert_eq!(sub["enabled"], false);
    let sub_id = SubscriptionId::parse(sub["id"].as_str().unwrap()).unwrap();
    let deliveries = orbit.deliveries(&creds, &sub_id).await;
    assert_eq!(deliveries.len(), 1);
    assert_eq!(deliveries[0]["state"], "ACKED");
    assert_eq!(deliveries[0]["attempts"], 1);
    // The inbox and the view agree too.
    let v = view(&db, "task-result-view", &creds, task).await;
    assert_eq!((v.last_state.as_str(), v.applied_events), ("CANCELLED", 1));
}

#[tokio::test]
async fn the_demo_refuses_events_of_other_tasks_and_does_not_process_them() {
    let orbit = OrbitDev::start(30_000, 5);
    let creds = orbit.bootstrap("inbox-demo", None).await;
    let db = TestDb::initialized().await;
    // Another program's cancelled task in the same queue, before the demo's.
    let client = orbit.client(&creds);
    let other = client.submit_task().await.unwrap();
    client.cancel_task(&other.id).await.unwrap();

    let demo = receiver()
        .arg("demo")
        .env("ORBIT_CREDENTIALS_FILE", &creds.file)
        .env("ORBIT_RECEIVER_DSN", dsn_for(&db.name))
        .output()
        .unwrap();
    assert!(demo.status.success(), "{}", text(&demo).1);
    let rows: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM receiver_task_views WHERE task_id = ?")
            .bind(other.id.as_str())
            .fetch_one(&db.pool().await)
            .await
            .unwrap();
    assert_eq!(rows, 0, "the other task's event must not be applied");
}

#[tokio::test]
async fn consume_applies_duplicates_and_out_of_order_versions_of_every_kind_once() {
    let (orbit, creds, sub) = OrbitDev::subscribed(2_000, 5, "inbox-stream").await;
    let db = TestDb::initialized().await;
    let client = orbit.client(&creds);

    // Real tasks through every kind of event.
    let t1 = client.submit_task().await.unwrap().id;
    orbit
        .finish(t1.as_str(), "needs_review", Some(r#"{"score":0.42}"#))
        .await;
    orbit
        .finish(
            t1.as_str(),
            "succeeded",
            Some(r#"{"total":123456789012345678901234567890,"ratio":1.10}"#),
        )
        .await;
    let t2 = client.submit_task().await.unwrap().id;
    client.cancel_task(&t2).await.unwrap();
    let t3 = client.submit_task().await.unwrap().id;
    orbit
        .finish(t3.as_str(), "failed", Some(r#"{"error":"boom"}"#))
        .await;
    let t4 = client.submit_task().await.unwrap().id;
    orbit.finish(t4.as_str(), "needs_review", None).await;

    // A synthetic task whose events arrive newest first, with copies: the
    // same bytes again and the same event reformatted.
    let t5 = random_hex(16);
    let spec = |version, event_type, state, result| EventSpec {
        id: random_hex(16),
        queue_id: &creds.queue_id,
        task_id: &t5,
        version,
        event_type,
        state,
        result,
    };
    let v3 = spec(3, "task.succeeded", "SUCCEEDED", Some(r#"{"n":3}"#));
    let v1 = spec(1, "task.submitted", "PENDING", None);
    let v2 = spec(2, "task.needs_review", "NEEDS_REVIEW", None);
    let v3_reformatted = v3
        .json()
        .replace(r#""task":"#, "\n  \"task\" : ")
        .replace(r#"{"id""#, r#"{ "id""#);
    // The newest is applied before the older ones and the copies arrive.
    orbit.inject(&sub, &v3.json()).await;
    let mut consume = Consume::on_test_db(&orbit, &creds, &db, &sub, &[]);
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(30), |c| c["acked"] == 10)
        .await;
    for event in [v1.json(), v2.json(), v3.json(), v3_reformatted] {
        orbit.inject(&sub, &event).await;
    }
    let total = orbit.deliveries(&creds, &sub).await.len() as u64;
    assert_eq!(total, 3 + 2 + 2 + 2 + 5);
    let counts = orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(30), |c| {
            c["acked"].as_u64() == Some(total)
        })
        .await;
    assert_eq!(counts["expired"], 0);
    assert!(consume.terminate().success());

    let name = "task-result-view";
    let t1v = view(&db, name, &creds, t1.as_str()).await;
    assert_eq!(
        (t1v.task_version, t1v.last_state.as_str()),
        (3, "SUCCEEDED")
    );
    assert_eq!(
        t1v.last_result.as_deref(),
        Some(r#"{"ratio":1.10,"total":123456789012345678901234567890}"#)
    );
    let t2v = view(&db, name, &creds, t2.as_str()).await;
    assert_eq!(
        (t2v.task_version, t2v.last_state.as_str(), t2v.last_result),
        (2, "CANCELLED", None)
    );
    let t3v = view(&db, name, &creds, t3.as_str()).await;
    assert_eq!((t3v.task_version, t3v.last_state.as_str()), (2, "FAILED"));
    let t4v = view(&db, name, &creds, t4.as_str()).await;
    assert_eq!(
        (t4v.task_version, t4v.last_state.as_str()),
        (2, "NEEDS_REVIEW")
    );
    let t5v = view(&db, name, &creds, &t5).await;
    assert_eq!(
        (
            t5v.task_version,
            t5v.last_state.as_str(),
            t5v.applied_events
        ),
        (3, "SUCCEEDED", 1)
    );

    // Every distinct event has one inbox row; the views advanced exactly as
    // often as the inbox says events advanced them.
    let (inbox_rows, advanced, counted) = totals(&db).await;
    assert_eq!(inbox_rows, 3 + 2 + 2 + 2 + 3);
    assert_eq!(advanced, counted);
    assert_eq!(
        applied_rows(&db, &[v3.id.clone(), v1.id.clone(), v2.id.clone()]).await,
        1,
        "only the newest synthetic event advanced the view"
    );
    let out = consume.output();
    assert_eq!(out.matches(r#"class="duplicate""#).count(), 2, "{out}");
    assert!(out.matches(r#"class="stale""#).count() >= 2, "{out}");
}

#[tokio::test]
async fn consume_refuses_a_subscription_of_another_queue_before_leasing_anything() {
    let orbit = OrbitDev::start(30_000, 5);
    let creds = orbit.bootstrap("inbox-a", None).await;
    let other = orbit.bootstrap("inbox-b", None).await;
    let db = TestDb::initialized().await;
    let client = orbit.client(&creds);
    let sub = client.create_subscription(&all_types()).await.unwrap();
    client.submit_task().await.unwrap();

    let out = receiver()
        .arg("consume")
        .env("ORBIT_CREDENTIALS_FILE", &creds.file)
        .env("ORBIT_QUEUE_ID", &other.queue_id)
        .env("ORBIT_SUBSCRIPTION_ID", sub.id.as_str())
        .env("ORBIT_RECEIVER_DSN", dsn_for(&db.name))
        .output()
        .unwrap();
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("bound to queue"), "{stderr}");
    let deliveries = orbit.deliveries(&creds, &sub.id).await;
    assert_eq!(deliveries.len(), 1);
    assert_eq!(deliveries[0]["state"], "PENDING");
    assert_eq!(deliveries[0]["attempts"], 0);
}

#[tokio::test]
async fn a_consume_only_token_is_enough_for_consume() {
    let orbit = OrbitDev::start(30_000, 5);
    let creds = orbit.bootstrap("inbox-consume-only", None).await;
    let reader = orbit
        .bootstrap(
            "inbox-consume-only",
            Some(&["events:read", "events:consume"]),
        )
        .await;
    let db = TestDb::initialized().await;
    let client = orbit.client(&creds);
    let sub = client
        .create_subscription(&[EventType::Cancelled])
        .await
        .unwrap();
    let task = client.submit_task().await.unwrap();
    client.cancel_task(&task.id).await.unwrap();

    let mut consume = Consume::on_test_db(&orbit, &reader, &db, &sub.id, &[]);
    orbit
        .wait_for_counts(&creds, &sub.id, Duration::from_secs(20), |c| {
            c["acked"] == 1
        })
        .await;
    assert!(consume.terminate().success());
    let v = view(&db, "task-result-view", &creds, task.id.as_str()).await;
    assert_eq!(v.last_state, "CANCELLED");
}

#[tokio::test]
async fn two_consumers_with_one_name_share_the_work_without_a_double_advance() {
    let (orbit, creds, sub) = OrbitDev::subscribed(5_000, 5, "inbox-shared").await;
    let db = TestDb::initialized().await;
    let client = orbit.client(&creds);
    let mut tasks = Vec::new();
    for i in 0..15 {
        let t = client.submit_task().await.unwrap().id;
        if i % 2 == 0 {
            client.cancel_task(&t).await.unwrap();
        } else {
            orbit
                .finish(t.as_str(), "succeeded", Some(&format!(r#"{{"i":{i}}}"#)))
                .await;
        }
        tasks.push(t);
    }
    let total = 30;

    let mut a = Consume::on_test_db(&orbit, &creds, &db, &sub, &[]);
    let mut b = Consume::on_test_db(&orbit, &creds, &db, &sub, &[]);
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(30), |c| {
            c["acked"] == total
        })
        .await;
    assert!(a.terminate().success());
    assert!(b.terminate().success());
    assert!(
        a.handled() > 0 && b.handled() > 0,
        "both consumers took part"
    );
    assert_eq!(a.handled() + b.handled(), total as usize);
    for t in &tasks {
        let v = view(&db, "task-result-view", &creds, t.as_str()).await;
        assert_eq!(v.task_version, 2);
        assert!(v.applied_events <= 2);
    }
    let (_, advanced, counted) = totals(&db).await;
    assert_eq!(advanced, counted);
}

#[tokio::test]
async fn sigterm_mid_stream_loses_nothing_and_a_restart_finishes_the_work() {
    const TOTAL: u64 = 400;
    let (orbit, creds, sub) = OrbitDev::subscribed(1_500, 10, "inbox-sigterm").await;
    let db = TestDb::initialized().await;
    let mut event_ids = Vec::new();
    let mut tasks = Vec::new();
    for _ in 0..TOTAL {
        let (event_id, task) = orbit.inject_new_task(&creds, &sub).await;
        event_ids.push(event_id);
        tasks.push(task);
    }

    let mut first = Consume::on_test_db(&orbit, &creds, &db, &sub, &[]);
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(20), |c| {
            c["acked"].as_u64().unwrap_or(0) >= 1
        })
        .await;
    let stopping = std::time::Instant::now();
    assert!(first.terminate().success(), "{}", first.output());
    assert!(stopping.elapsed() < Duration::from_secs(10));
    assert!(
        first.output().contains("shutdown requested"),
        "{}",
        first.output()
    );
    let after_first = orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(1), |_| true)
        .await;
    assert!(
        after_first["acked"].as_u64().unwrap() < TOTAL,
        "the first consumer was stopped mid-stream: {after_first}"
    );

    let mut second = Consume::on_test_db(&orbit, &creds, &db, &sub, &[]);
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(60), |c| {
            c["acked"] == TOTAL
        })
        .await;
    assert!(second.terminate().success(), "{}", second.output());
    let total = TOTAL as i64;
    assert_eq!(totals(&db).await, (total, total, total));
    assert_eq!(applied_rows(&db, &event_ids[..10]).await, 10);
}

#[tokio::test]
async fn no_token_ever_appears_in_any_output_even_at_trace_level() {
    let orbit = OrbitDev::start(30_000, 5);
    let creds = orbit.bootstrap("inbox-redaction", None).await;
    let db = TestDb::empty().await;
    let init = receiver()
        .arg("init")
        .env("ORBIT_RECEIVER_DSN", dsn_for(&db.name))
        .output()
        .unwrap();
    assert!(init.status.success());
    let demo = receiver()
        .arg("demo")
        .env("ORBIT_CREDENTIALS_FILE", &creds.file)
        .env("ORBIT_RECEIVER_DSN", dsn_for(&db.name))
        .env("RECEIVER_LOG", "trace")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (stdout, stderr) = text(&demo);
    assert!(demo.status.success(), "{stderr}");
    assert!(stderr.len() > 1000, "trace logging was on");
    assert!(!stdout.contains(&creds.token) && !stderr.contains(&creds.token));
    assert!(!stderr.contains("lp_"), "no lease proof in the logs");
}

#[tokio::test]
async fn the_platform_database_is_never_touched() {
    // Everything the receiver does in these tests is logged by the
    // throwaway server's general log; none of it may name the platform's
    // database.
    let platform = std::env::var("RESULT_INBOX_TEST_PLATFORM_DB").unwrap();
    let orbit = OrbitDev::start(30_000, 5);
    let creds = orbit.bootstrap("inbox-platform", None).await;
    let db = TestDb::initialized().await;
    let demo = receiver()
        .arg("demo")
        .env("ORBIT_CREDENTIALS_FILE", &creds.file)
        .env("ORBIT_RECEIVER_DSN", dsn_for(&db.name))
        .output()
        .unwrap();
    assert!(demo.status.success());
    let log = common::general_log();
    assert!(
        log.contains(&db.name),
        "the general log records this test's statements"
    );
    assert!(
        !log.to_lowercase().contains(&platform.to_lowercase()),
        "the platform database {platform} was named in a statement"
    );
    let tables: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ?")
            .bind(&platform)
            .fetch_one(&db.admin)
            .await
            .unwrap();
    assert_eq!(tables, 0);
}

#[tokio::test]
async fn a_cut_connection_is_reopened_and_consumption_goes_on() {
    let orbit = OrbitDev::start(30_000, 5);
    let creds = orbit.bootstrap("inbox-reconnect", None).await;
    let db = TestDb::initialized().await;
    let client = orbit.client(&creds);
    let sub = client
        .create_subscription(&[EventType::Cancelled])
        .await
        .unwrap();
    let proxy = common::http_proxy::HttpProxy::start(&orbit.url).await;
    let mut consume = Consume::start(
        &orbit,
        &creds,
        &dsn_for(&db.name),
        &sub.id,
        "task-result-view",
        &[("ORBIT_URL", &proxy.url())],
    );
    let cancel_one = || async {
        let task = client.submit_task().await.unwrap();
        client.cancel_task(&task.id).await.unwrap();
    };
    cancel_one().await;
    orbit
        .wait_for_counts(&creds, &sub.id, Duration::from_secs(20), |c| {
            c["acked"] == 1
        })
        .await;

    proxy.cut_all();
    cancel_one().await;
    cancel_one().await;
    orbit
        .wait_for_counts(&creds, &sub.id, Duration::from_secs(20), |c| {
            c["acked"] == 3
        })
        .await;
    let out = consume.output();
    assert!(consume.running());
    assert!(consume.terminate().success());
    assert_eq!(out.matches("delivery stream open").count(), 2, "{out}");
}

#[tokio::test]
async fn make_demo_on_a_database_with_its_tables_measures_the_foreign_keys_it_prints() {
    let db = TestDb::initialized().await;
    db.add_foreign_key().await;
    let out = std::process::Command::new("bash")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/demo.sh"))
        .env("ORBIT_RECEIVER_DSN", dsn_for(&db.name))
        .env_remove("RECEIVER_LOG")
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    // The demo then fails (the added key refuses its view row), but the
    // first line is what the server said, not a line written in advance.
    assert_eq!(
        stdout.lines().next(),
        Some("receiver_schema_initialized=true foreign_keys=1"),
        "{stdout}{stderr}"
    );
}
