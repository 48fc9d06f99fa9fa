//! The receiver's database goes away under a running `receiver consume` and
//! comes back. The test runs its own private server, so stopping it disturbs
//! no other test.

mod common;

use std::time::{Duration, Instant};

use common::consume::Consume;
use common::mysqld::PrivateServer;
use common::orbit::OrbitDev;
use result_inbox::dsn::Dsn;
use result_inbox::event::{EventType, TaskId};
use result_inbox::scope::{InboxScope, ReceiverName};
use result_inbox::task_view;
use sqlx::mysql::MySqlPool;
use sqlx::Executor;

const APP_PASSWORD: &str = "sentinel-db-password";
const RECEIVER: &str = "task-result-view";

/// The inbox's lines for deliveries that failed with an error.
fn outage_failures(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| l.contains("result_inbox::inbox: delivery") && l.contains(r#"class="error""#))
        .collect()
}

fn acked(counts: &serde_json::Value) -> u64 {
    counts["acked"].as_u64().unwrap_or(0)
}

#[tokio::test]
async fn a_database_outage_acks_nothing_keeps_running_and_applies_everything_once_after_restart() {
    const BEFORE: usize = 3;
    const DURING: usize = 10;
    const TOTAL: u64 = (BEFORE + DURING) as u64;

    // The receiver's own database and a least-privilege account on a server
    // of this test's own.
    let mut server = PrivateServer::start();
    let root = MySqlPool::connect(&server.admin_dsn()).await.unwrap();
    for statement in [
        "CREATE DATABASE receiver CHARACTER SET utf8mb4".to_owned(),
        format!("CREATE USER 'receiver_app'@'127.0.0.1' IDENTIFIED BY '{APP_PASSWORD}'"),
        "GRANT SELECT, INSERT, UPDATE ON receiver.* TO 'receiver_app'@'127.0.0.1'".to_owned(),
    ] {
        root.execute(statement.as_str()).await.unwrap();
    }
    root.close().await;
    let root_dsn = format!("mysql://root@127.0.0.1:{}/receiver", server.port());
    result_inbox::schema::init(&Dsn::parse(&root_dsn).unwrap())
        .await
        .unwrap();
    let app_dsn = format!(
        "mysql://receiver_app:{APP_PASSWORD}@127.0.0.1:{}/receiver",
        server.port()
    );

    // A short lease, so that redeliveries come quickly; a budget that cannot
    // run out while the database is down.
    let orbit = OrbitDev::start(1_000, 100);
    let creds = orbit.bootstrap("inbox-db-outage", None).await;
    let sub = orbit
        .client(&creds)
        .create_subscription(&EventType::ALL)
        .await
        .unwrap();
    let mut events = Vec::new();
    for _ in 0..BEFORE {
        events.push(orbit.inject_new_task(&creds, &sub.id).await);
    }
    let mut consume = Consume::start(&orbit, &creds, &app_dsn, &sub.id, RECEIVER, &[]);
    orbit
        .wait_for_counts(&creds, &sub.id, Duration::from_secs(20), |c| {
            acked(c) == BEFORE as u64
        })
        .await;
    let log_before_outage = consume.output().len();

    // The database goes away; new events keep coming.
    server.stop();
    for _ in 0..DURING {
        events.push(orbit.inject_new_task(&creds, &sub.id).await);
    }
    // Nothing is ACKed and the consumer keeps running, for at least 4 s and
    // until failed deliveries were reported (a transaction gives up after
    // its 5 s budget).
    let watching = Instant::now();
    loop {
        let counts = orbit
            .wait_for_counts(&creds, &sub.id, Duration::from_secs(1), |_| true)
            .await;
        assert_eq!(
            acked(&counts),
            BEFORE as u64,
            "ACKed without a database: {counts}"
        );
        assert!(consume.running(), "consume exited: {}", consume.output());
        let failed = outage_failures(&consume.output()[log_before_outage..]).len();
        if watching.elapsed() >= Duration::from_secs(4) && failed > 0 {
            break;
        }
        assert!(
            watching.elapsed() < Duration::from_secs(20),
            "no failed delivery was logged during the outage: {}",
            consume.output()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // It comes back: everything is applied and ACKed without a restart of
    // the consumer.
    server.restart();
    let counts = orbit
        .wait_for_counts(&creds, &sub.id, Duration::from_secs(40), |c| {
            acked(c) == TOTAL
        })
        .await;
    assert_eq!(counts["expired"], 0, "{counts}");
    let status = consume.terminate();
    let log = consume.output();
    assert!(status.success(), "{status}: {log}");

    // Exactly one inbox row per event, each view advanced exactly once.
    let pool = MySqlPool::connect(&root_dsn).await.unwrap();
    let scope = InboxScope::new(ReceiverName::parse(RECEIVER).unwrap(), creds.queue());
    for (event, task) in &events {
        let rows: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM receiver_inbox WHERE event_id = ?")
                .bind(event)
                .fetch_one(&pool)
                .await
                .unwrap();
        assert_eq!(rows, 1, "inbox rows of event {event}");
        let view = task_view::load(&pool, &scope, &TaskId::parse(task).unwrap())
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("no view for task {task}"));
        assert_eq!(view.applied_events, 1, "task {task}");
    }
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM receiver_inbox")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(rows, TOTAL as i64);

    // The outage was reported, redacted; the password never.
    let failures = outage_failures(&log[log_before_outage..]);
    assert!(
        failures.iter().any(|l| l.contains("error=database: ")),
        "no database error among the failed deliveries: {log}"
    );
    let redacted = [
        "error=database: database connection failed",
        "error=database: no database connection available",
        "error=transaction timed out before commit",
    ];
    for line in &failures {
        assert!(
            redacted.iter().any(|r| line.ends_with(r)),
            "not a redacted error: {line}"
        );
    }
    assert!(
        !log.contains(APP_PASSWORD),
        "the database password was logged: {log}"
    );
}
