//! The receiver's database goes away under a running `receiver consume` and
//! comes back. The test runs its own private server, so stopping it disturbs
//! no other test.

use crate::common;

use std::time::{Duration, Instant};

use common::consume::Consume;
use common::mysqld::PrivateServer;
use common::orbit::{OrbitDev, QueueCredentials};
use result_inbox::db::Dsn;
use result_inbox::ids::SubscriptionId;
use result_inbox::ids::{QueueId, TaskId};
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
        result_inbox::db::schema::init(&Dsn::parse(&root_dsn).unwrap())
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
    let connection_details = [
        "",
        ": connection refused (is the server running, and on this host and port?)",
        ": connection reset by the server",
        ": connection closed by the server",
        ": connection timed out",
    ];
    let mut redacted: Vec<String> = connection_details
        .iter()
        .map(|d| format!("error=database: database connection failed{d}"))
        .collect();
    redacted.extend(
        [
            "error=database: no database connection available",
            "error=database: the server is shutting down (MySQL error 1053, SQLSTATE 08S01)",
            "error=transaction timed out before commit",
        ]
        .map(str::to_owned),
    );
    for line in &failures {
        assert!(
            redacted.iter().any(|r| line.ends_with(r.as_str())),
            "not a redacted error: {line}"
        );
    }
    assert!(
        !log.contains(APP_PASSWORD),
        "the database password was logged: {log}"
    );
}

/// Every delivery of the subscription, as Orbit reports it.
async fn deliveries(
    orbit: &OrbitDev,
    creds: &QueueCredentials,
    sub: &SubscriptionId,
) -> Vec<serde_json::Value> {
    orbit.deliveries(creds, sub).await
}

#[tokio::test]
async fn a_consumer_started_while_its_database_is_down_leases_nothing_until_it_is_up() {
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

    // For 4 s: running, warning, and not one delivery leased.
    let watching = Instant::now();
    while watching.elapsed() < Duration::from_secs(4) {
        assert!(consume.running(), "consume exited: {}", consume.output());
        for d in deliveries(&orbit, &creds, &sub).await {
            assert_eq!(d["attempts"], 0, "leased without a database: {d}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        consume
            .output()
            .contains("database not reachable yet; nothing is leased until it answers"),
        "{}",
        consume.output()
    );

    server.restart();
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(40), |c| {
            acked(c) == EVENTS as u64
        })
        .await;
    for d in deliveries(&orbit, &creds, &sub).await {
        assert_eq!(d["attempts"], 1, "one attempt each: {d}");
    }
    let status = consume.terminate();
    let log = consume.output();
    assert!(status.success(), "{status}: {log}");
    assert_applied_once(&root_dsn, creds.queue(), &events).await;
    assert!(
        !log.contains(APP_PASSWORD),
        "the database password was logged: {log}"
    );
}

#[tokio::test]
async fn credit_granted_before_an_outage_is_not_spent_on_redeliveries_during_it() {
    // One delivery, credit for eight, lease 1 s, budget 3: were the unspent
    // credit kept, every lease that ran out would come back on it and spend
    // an attempt, and the delivery would expire long before the database
    // is back.
    const OUTAGE: Duration = Duration::from_secs(8);
    let Receiver {
        mut server,
        root_dsn,
        app_dsn,
    } = Receiver::start().await;
    let (orbit, creds, sub) = OrbitDev::subscribed(1_000, 3, "inbox-db-credit").await;
    let mut consume = Consume::start(&orbit, &creds, &app_dsn, &sub, RECEIVER, &[]);
    consume
        .wait_for_output(Duration::from_secs(20), |out| {
            out.contains("delivery stream open")
        })
        .await;

    server.stop();
    let events = vec![orbit.inject_new_task(&creds, &sub).await];
    tokio::time::sleep(OUTAGE).await;
    let during = orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(1), |_| true)
        .await;
    assert_eq!(during["expired"], 0, "{during}");
    server.restart();

    let counts = orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(60), |c| acked(c) == 1)
        .await;
    assert_eq!(counts["expired"], 0, "{counts}");
    let attempts: Vec<u64> = deliveries(&orbit, &creds, &sub)
        .await
        .iter()
        .map(|d| d["attempts"].as_u64().unwrap())
        .collect();
    assert_eq!(attempts.len(), 1);
    assert!(
        attempts[0] <= 2,
        "attempts: {attempts:?}: {}",
        consume.output()
    );
    let status = consume.terminate();
    assert!(status.success(), "{status}: {}", consume.output());
    assert_applied_once(&root_dsn, creds.queue(), &events).await;
}

#[tokio::test]
async fn an_outage_ten_times_budget_times_lease_expires_nothing_and_spends_at_most_one_attempt() {
    // Lease 1 s, budget 3: without the breaker every delivery would expire
    // within about 3 s of the database going away.
    const EVENTS: usize = 50;
    const OUTAGE: Duration = Duration::from_secs(30);
    let Receiver {
        mut server,
        root_dsn,
        app_dsn,
    } = Receiver::start().await;
    let (orbit, creds, sub) = OrbitDev::subscribed(1_000, 3, "inbox-db-breaker").await;
    let mut consume = Consume::start(&orbit, &creds, &app_dsn, &sub, RECEIVER, &[]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !consume.output().contains("delivery stream open") {
        assert!(Instant::now() < deadline, "{}", consume.output());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    server.stop();
    let mut events = Vec::new();
    for _ in 0..EVENTS {
        events.push(orbit.inject_new_task(&creds, &sub).await);
    }
    tokio::time::sleep(OUTAGE).await;
    let during = orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(1), |_| true)
        .await;
    assert_eq!(during["expired"], 0, "{during}");
    assert_eq!(acked(&during), 0, "{during}");
    assert!(
        consume
            .output()
            .contains("database unreachable: taking no new deliveries"),
        "{}",
        consume.output()
    );
    server.restart();

    let counts = orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(60), |c| {
            acked(c) == EVENTS as u64
        })
        .await;
    assert_eq!(counts["expired"], 0, "{counts}");
    let attempts: Vec<u64> = deliveries(&orbit, &creds, &sub)
        .await
        .iter()
        .map(|d| d["attempts"].as_u64().unwrap())
        .collect();
    let most = attempts.iter().max().copied().unwrap_or(0);
    let spent = attempts.iter().filter(|a| **a > 1).count();
    eprintln!(
        "outage of {OUTAGE:?}: {} deliveries, expired 0, most attempts {most}, {spent} needed a second",
        attempts.len()
    );
    assert_eq!(attempts.len(), EVENTS);
    assert!(most <= 2, "attempts per delivery: {attempts:?}");
    let status = consume.terminate();
    assert!(status.success(), "{status}: {}", consume.output());
    assert_applied_once(&root_dsn, creds.queue(), &events).await;
}

#[tokio::test]
async fn readyz_is_503_while_the_database_is_stopped_and_200_after() {
    let Receiver {
        mut server,
        app_dsn,
        ..
    } = Receiver::start().await;
    let (orbit, creds, sub) = subscribed_orbit("inbox-db-readyz").await;
    let mut consume = Consume::start(
        &orbit,
        &creds,
        &app_dsn,
        &sub,
        RECEIVER,
        &[("RECEIVER_METRICS_ADDR", "127.0.0.1:0")],
    );
    let url = consume.metrics_url().await;
    let ready = |url: String| async move {
        common::orbit::http("GET", &format!("{url}/readyz"), "", String::new())
            .await
            .0
    };
    wait_for_status(&url, 200, ready).await;
    server.stop();
    wait_for_status(&url, 503, ready).await;
    let (_, metrics) =
        common::orbit::http("GET", &format!("{url}/metrics"), "", String::new()).await;
    let page = common::metrics::parse(&metrics);
    let gauge = |name| common::metrics::value(&page, name, &[]);
    assert_eq!(gauge("receiver_breaker_open"), Some(1.0), "{metrics}");
    assert_eq!(gauge("receiver_database_reachable"), Some(0.0), "{metrics}");
    server.restart();
    wait_for_status(&url, 200, ready).await;
    assert!(consume.terminate().success(), "{}", consume.output());
}

/// Polls `probe(url)` until it answers `status` (within 30 s).
async fn wait_for_status<F, Fut>(url: &str, status: u16, probe: F)
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = u16>,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = probe(url.to_owned()).await;
        if got == status {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "/readyz stayed {got}, not {status}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
