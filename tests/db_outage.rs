//! The receiver's database goes away under a running `receiver consume` and
//! comes back. The test runs its own private server, so stopping it disturbs
//! no other test.

mod common;

use std::time::{Duration, Instant};

use common::consume::Consume;
use common::mysqld::PrivateServer;
use common::orbit::{OrbitDev, QueueCredentials};
use result_inbox::dsn::Dsn;
use result_inbox::event::{QueueId, TaskId};
use result_inbox::ids::SubscriptionId;
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

/// The receiver's own database and a least-privilege account on a server
/// of the test's own, so that stopping it disturbs no other test.
struct Receiver {
    server: PrivateServer,
    /// The receiver's database as root, for checking what was written.
    root_dsn: String,
    /// The same database as the account `receiver consume` runs with.
    app_dsn: String,
}

impl Receiver {
    async fn start() -> Receiver {
        let server = PrivateServer::start();
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
        Receiver {
            server,
            root_dsn,
            app_dsn,
        }
    }
}

/// Checks that every event has exactly one inbox row and advanced its
/// task's view exactly once, and that nothing else was written.
async fn assert_applied_once(root_dsn: &str, queue: QueueId, events: &[(String, String)]) {
    let pool = MySqlPool::connect(root_dsn).await.unwrap();
    let scope = InboxScope::new(ReceiverName::parse(RECEIVER).unwrap(), queue);
    for (event, task) in events {
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
    assert_eq!(rows, events.len() as i64);
}

/// orbit-dev with a 1 s lease, so that redeliveries come quickly, and a
/// budget of 100 attempts that cannot run out while the database is down.
async fn subscribed_orbit(namespace: &str) -> (OrbitDev, QueueCredentials, SubscriptionId) {
    OrbitDev::subscribed(1_000, 100, namespace).await
}

/// Checks, for at least 4 s and until a failed delivery was logged after
/// `log_from` (a transaction waits its 5 s budget for a connection), that
/// `consume` keeps running and the ACK count stays at `acked_before`.
async fn assert_waits_without_acking(
    orbit: &OrbitDev,
    creds: &QueueCredentials,
    sub: &SubscriptionId,
    consume: &mut Consume,
    acked_before: usize,
    log_from: usize,
) {
    let watching = Instant::now();
    loop {
        let counts = orbit
            .wait_for_counts(creds, sub, Duration::from_secs(1), |_| true)
            .await;
        assert_eq!(
            acked(&counts),
            acked_before as u64,
            "ACKed without a database: {counts}"
        );
        assert!(consume.running(), "consume exited: {}", consume.output());
        let failed = outage_failures(&consume.output()[log_from..]).len();
        if watching.elapsed() >= Duration::from_secs(4) && failed > 0 {
            return;
        }
        assert!(
            watching.elapsed() < Duration::from_secs(20),
            "no failed delivery was logged while the database was down: {}",
            consume.output()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn acked(counts: &serde_json::Value) -> u64 {
    counts["acked"].as_u64().unwrap_or(0)
}

#[tokio::test]
async fn a_database_outage_acks_nothing_keeps_running_and_applies_everything_once_after_restart() {
    const BEFORE: usize = 3;
    const DURING: usize = 10;
    const TOTAL: u64 = (BEFORE + DURING) as u64;

    let Receiver {
        mut server,
        root_dsn,
        app_dsn,
    } = Receiver::start().await;

    let (orbit, creds, sub) = subscribed_orbit("inbox-db-outage").await;
    let mut events = Vec::new();
    for _ in 0..BEFORE {
        events.push(orbit.inject_new_task(&creds, &sub).await);
    }
    let mut consume = Consume::start(&orbit, &creds, &app_dsn, &sub, RECEIVER, &[]);
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(20), |c| {
            acked(c) == BEFORE as u64
        })
        .await;
    let log_before_outage = consume.output().len();

    // The database goes away; new events keep coming.
    server.stop();
    for _ in 0..DURING {
        events.push(orbit.inject_new_task(&creds, &sub).await);
    }
    // Nothing is ACKed and the consumer keeps running.
    assert_waits_without_acking(
        &orbit,
        &creds,
        &sub,
        &mut consume,
        BEFORE,
        log_before_outage,
    )
    .await;

    // It comes back: everything is applied and ACKed without a restart of
    // the consumer.
    server.restart();
    let counts = orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(40), |c| acked(c) == TOTAL)
        .await;
    assert_eq!(counts["expired"], 0, "{counts}");
    let status = consume.terminate();
    let log = consume.output();
    assert!(status.success(), "{status}: {log}");

    // Exactly one inbox row per event, each view advanced exactly once.
    assert_applied_once(&root_dsn, creds.queue(), &events).await;

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

#[tokio::test]
async fn a_consumer_started_while_its_database_is_down_waits_and_applies_everything_once_it_is_up()
{
    const EVENTS: usize = 5;
    let Receiver {
        mut server,
        root_dsn,
        app_dsn,
    } = Receiver::start().await;
    server.stop();

    let (orbit, creds, sub) = subscribed_orbit("inbox-db-late").await;
    let mut events = Vec::new();
    for _ in 0..EVENTS {
        events.push(orbit.inject_new_task(&creds, &sub).await);
    }
    let mut consume = Consume::start(&orbit, &creds, &app_dsn, &sub, RECEIVER, &[]);

    assert_waits_without_acking(&orbit, &creds, &sub, &mut consume, 0, 0).await;
    assert!(
        consume
            .output()
            .contains("database unreachable at start; deliveries are neither applied nor ACKed until it answers"),
        "{}",
        consume.output()
    );

    server.restart();
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(40), |c| {
            acked(c) == EVENTS as u64
        })
        .await;
    let status = consume.terminate();
    let log = consume.output();
    assert!(status.success(), "{status}: {log}");
    assert_applied_once(&root_dsn, creds.queue(), &events).await;
    assert!(
        !log.contains(APP_PASSWORD),
        "the database password was logged: {log}"
    );
}
