//! `receiver init`, `check` and `consume` on PostgreSQL, as real processes
//! over real Orbit deliveries: every event applied once, every copy a
//! duplicate, every delivery ACKed only after its COMMIT, in both modes.

use crate::common;

use std::time::Duration;

use common::consume::Consume;
use common::orbit::{receiver, OrbitDev, QueueCredentials};
use common::postgres::PgTestDb;
use result_inbox::ids::SubscriptionId;

const NAME: &str = "task-result-view";

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

async fn initialized() -> PgTestDb {
    let db = PgTestDb::new().await;
    let out = receiver()
        .arg("init")
        .env("ORBIT_RECEIVER_DSN", &db.dsn)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    db
}

fn check(db: &PgTestDb, creds: &QueueCredentials, sub: &SubscriptionId) -> std::process::Output {
    receiver()
        .arg("check")
        .env("ORBIT_CREDENTIALS_FILE", &creds.file)
        .env("ORBIT_SUBSCRIPTION_ID", sub.as_str())
        .env("ORBIT_RECEIVER_DSN", &db.dsn)
        .output()
        .unwrap()
}

/// Inbox rows, applied rows, and the views' applied events.
async fn totals(db: &PgTestDb) -> (i64, i64, i64) {
    sqlx::query_as(
        "SELECT (SELECT count(*) FROM receiver_inbox), \
         (SELECT coalesce(sum(applied), 0)::bigint FROM receiver_inbox), \
         (SELECT coalesce(sum(applied_events), 0)::bigint FROM receiver_task_views)",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap()
}

async fn consumes_each_event_once(batch_max: Option<&str>) {
    let (orbit, creds, sub) = OrbitDev::subscribed(30_000, 5, "pg-e2e").await;
    let db = initialized().await;
    let out = check(&db, &creds, &sub);
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert_eq!(
        text(&out.stdout),
        "check=database ok\ncheck=schema ok\ncheck=privileges ok\n\
         check=orbit ok\ncheck=token ok\ncheck=scopes ok\ncheck=subscription ok\n"
    );
    let mut events = Vec::new();
    for _ in 0..20 {
        let (event, _task) = orbit.inject_new_task(&creds, &sub).await;
        events.push(event);
    }
    let extra: Vec<(&str, &str)> = batch_max
        .map(|n| vec![("RECEIVER_BATCH_MAX", n)])
        .unwrap_or_default();
    let mut consume = Consume::start(&orbit, &creds, &db.dsn, &sub, NAME, &extra);
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(30), |c| c["acked"] == 20)
        .await;
    assert!(consume.terminate().success(), "{}", consume.output());
    assert_eq!(totals(&db).await, (20, 20, 20), "{}", consume.output());
    let logged = consume.output();
    assert_eq!(logged.matches("class=\"applied\"").count(), 20, "{logged}");
}

#[tokio::test]
async fn on_postgres_check_passes_and_consume_applies_each_event_once_and_acks_it() {
    consumes_each_event_once(None).await;
}

#[tokio::test]
async fn on_postgres_in_batching_mode_too_each_event_is_applied_once_and_acked() {
    consumes_each_event_once(Some("16")).await;
}

#[tokio::test]
async fn on_postgres_a_redelivered_event_is_a_duplicate_and_acked_again() {
    // The same event injected twice: two deliveries, one receipt.
    let (orbit, creds, sub) = OrbitDev::subscribed(30_000, 5, "pg-e2e-dup").await;
    let db = initialized().await;
    let (event, task) = orbit.inject_new_task(&creds, &sub).await;
    let spec = common::EventSpec::submitted(&creds.queue_id, &task);
    let copy = common::EventSpec { id: event, ..spec }.json();
    orbit.inject(&sub, &copy).await;
    let mut consume = Consume::start(&orbit, &creds, &db.dsn, &sub, NAME, &[]);
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(30), |c| c["acked"] == 2)
        .await;
    assert!(consume.terminate().success(), "{}", consume.output());
    assert_eq!(totals(&db).await, (1, 1, 1));
    let logged = consume.output();
    assert_eq!(logged.matches("class=\"applied\"").count(), 1, "{logged}");
    assert_eq!(logged.matches("class=\"duplicate\"").count(), 1, "{logged}");
}

#[tokio::test]
async fn on_postgres_check_names_a_missing_table_and_the_command_that_creates_it() {
    let (_orbit, creds, sub) = OrbitDev::subscribed(30_000, 5, "pg-e2e-check").await;
    let db = PgTestDb::new().await;
    let out = check(&db, &creds, &sub);
    // A missing table is an operational failure (exit 1), as on MySQL.
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("check=database ok"), "{stdout}");
    assert!(
        stdout.contains("check=schema FAIL table receiver_inbox is missing"),
        "{stdout}"
    );
    assert!(stdout.contains("receiver init"), "{stdout}");
    assert!(
        stdout.contains("check=privileges not run (check schema failed)"),
        "{stdout}"
    );
}

/// The same over NATS JetStream.
#[cfg(feature = "nats")]
mod over_nats {
    use super::{common, initialized, totals, NAME};

    use std::time::Duration;

    use common::consume::Consume;
    use common::nats::{JetStreamQueue, NatsServer};
    use common::{random_hex, EventSpec};

    async fn consumes_each_message_once(batch_max: Option<&str>) {
        let server = NatsServer::start();
        let queue =
            JetStreamQueue::create(&server, &random_hex(16), Duration::from_secs(30), 5).await;
        let db = initialized().await;
        let mut first = None;
        for _ in 0..10 {
            let event = EventSpec::submitted(&queue.queue, &random_hex(16)).json();
            first.get_or_insert_with(|| event.clone());
            queue.publish(event).await;
        }
        // A copy of the first message: recorded once, acknowledged twice.
        queue.publish(first.unwrap()).await;
        let mut env = queue.env(&server.url());
        env.push(("ORBIT_RECEIVER_DSN".into(), db.dsn.clone()));
        env.push(("RECEIVER_NAME".into(), NAME.into()));
        if let Some(n) = batch_max {
            env.push(("RECEIVER_BATCH_MAX".into(), n.into()));
        }
        let mut consume = Consume::with_env(&server.dir, &env);
        queue.wait_all_acked(Duration::from_secs(30)).await;
        assert!(consume.terminate().success(), "{}", consume.output());
        assert_eq!(totals(&db).await, (10, 10, 10), "{}", consume.output());
        let logged = consume.output();
        assert_eq!(logged.matches("class=\"duplicate\"").count(), 1, "{logged}");
    }

    #[tokio::test]
    async fn on_postgres_consume_over_nats_applies_each_message_once_and_acks_it() {
        consumes_each_message_once(None).await;
    }

    #[tokio::test]
    async fn on_postgres_in_batching_mode_over_nats_each_message_is_applied_once() {
        consumes_each_message_once(Some("8")).await;
    }
}

/// The receiver's PostgreSQL crashes under a running `receiver consume`
/// and comes back: nothing is ACKed while it is down, the consumer keeps
/// running, and every event is applied once after the restart.
#[tokio::test]
async fn on_postgres_a_database_crash_acks_nothing_keeps_running_and_applies_everything_once_after_restart(
) {
    const BEFORE: u64 = 3;
    const DURING: u64 = 10;
    let mut server = common::postgres::PgPrivateServer::start();
    let admin = sqlx::PgPool::connect(&server.dsn("postgres"))
        .await
        .unwrap();
    sqlx::query("CREATE DATABASE receiver")
        .execute(&admin)
        .await
        .unwrap();
    admin.close().await;
    let dsn = server.dsn("receiver");
    let out = receiver()
        .arg("init")
        .env("ORBIT_RECEIVER_DSN", &dsn)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));

    let (orbit, creds, sub) = OrbitDev::subscribed(1_000, 100, "pg-outage").await;
    for _ in 0..BEFORE {
        orbit.inject_new_task(&creds, &sub).await;
    }
    let mut consume = Consume::start(&orbit, &creds, &dsn, &sub, NAME, &[]);
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(20), |c| {
            c["acked"] == BEFORE
        })
        .await;
    let before_outage = consume.output().len();

    server.stop();
    for _ in 0..DURING {
        orbit.inject_new_task(&creds, &sub).await;
    }
    let watching = std::time::Instant::now();
    loop {
        let counts = orbit
            .wait_for_counts(&creds, &sub, Duration::from_secs(1), |_| true)
            .await;
        assert_eq!(
            counts["acked"], BEFORE,
            "ACKed without a database: {counts}"
        );
        assert!(consume.running(), "consume exited: {}", consume.output());
        let failed = consume.output()[before_outage..]
            .lines()
            .filter(|l| {
                l.contains("result_inbox::inbox: delivery") && l.contains(r#"class="error""#)
            })
            .count();
        if watching.elapsed() >= Duration::from_secs(4) && failed > 0 {
            break;
        }
        assert!(
            watching.elapsed() < Duration::from_secs(20),
            "no failed delivery was logged while the database was down: {}",
            consume.output()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    server.restart();
    let counts = orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(40), |c| {
            c["acked"] == BEFORE + DURING
        })
        .await;
    assert_eq!(counts["expired"], 0, "{counts}");
    assert!(consume.terminate().success(), "{}", consume.output());
    let pool = sqlx::PgPool::connect(&dsn).await.unwrap();
    let totals: (i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM receiver_inbox), \
         (SELECT coalesce(sum(applied), 0)::bigint FROM receiver_inbox), \
         (SELECT coalesce(sum(applied_events), 0)::bigint FROM receiver_task_views)",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    let total = (BEFORE + DURING) as i64;
    assert_eq!(totals, (total, total, total), "{}", consume.output());
    pool.close().await;
}

#[tokio::test]
async fn on_postgres_the_demo_prints_its_lines_and_applies_its_event_once() {
    let orbit = OrbitDev::start(30_000, 5);
    let creds = orbit.bootstrap("pg-demo", None).await;
    let db = initialized().await;

    let demo = receiver()
        .arg("demo")
        .env("ORBIT_CREDENTIALS_FILE", &creds.file)
        .env("ORBIT_RECEIVER_DSN", &db.dsn)
        .output()
        .unwrap();
    let stdout = text(&demo.stdout);
    assert!(demo.status.success(), "{stdout}{}", text(&demo.stderr));
    crate::e2e::demo_task(&stdout);
    // One inbox row, applied, and one view that advanced once.
    assert_eq!(totals(&db).await, (1, 1, 1));
}

#[tokio::test]
async fn on_postgres_consume_and_the_demo_run_with_only_select_insert_update_on_the_two_tables() {
    // No DELETE, and no CREATE on the schema (PostgreSQL 15 gives that to
    // the owner only): a statement that needed either would fail here.
    let db = initialized().await;
    let role = format!("runtime_{}", common::random_hex(4));
    db.run_script(&format!(
        "CREATE ROLE {role} LOGIN; \
         GRANT SELECT, INSERT, UPDATE ON receiver_inbox, receiver_task_views TO {role};"
    ))
    .await
    .unwrap();
    let dsn = db.dsn.replacen("://postgres@", &format!("://{role}@"), 1);
    let (orbit, creds, sub) = OrbitDev::subscribed(30_000, 5, "pg-least-privilege").await;

    for batch_max in [None, Some("16")] {
        for _ in 0..5 {
            orbit.inject_new_task(&creds, &sub).await;
        }
        let extra: Vec<(&str, &str)> = batch_max
            .map(|n| vec![("RECEIVER_BATCH_MAX", n)])
            .unwrap_or_default();
        let mut consume = Consume::start(&orbit, &creds, &dsn, &sub, NAME, &extra);
        let acked = if batch_max.is_some() { 10 } else { 5 };
        orbit
            .wait_for_counts(&creds, &sub, Duration::from_secs(30), |c| {
                c["acked"] == acked
            })
            .await;
        assert!(consume.terminate().success(), "{}", consume.output());
    }
    // After the consumer: the demo's events reach the subscription above
    // too, and nothing consumes them there any more.
    let demo = receiver()
        .arg("demo")
        .env("ORBIT_CREDENTIALS_FILE", &creds.file)
        .env("ORBIT_RECEIVER_DSN", &dsn)
        .output()
        .unwrap();
    assert!(demo.status.success(), "{}", text(&demo.stderr));
    // The ten consumed and the demo's event, each applied once.
    assert_eq!(totals(&db).await, (11, 11, 11));
}
