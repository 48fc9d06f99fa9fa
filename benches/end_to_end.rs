//! End-to-end throughput: orbit-dev → `receiver consume` → InboxLayer → ACK,
//! and NATS JetStream → `receiver consume --source nats` → inbox → `+ACK`
//! confirmed, each against the inbox alone, and the consumer's peak memory
//! with 512 KiB events. Real processes, real sockets, a throwaway server.
//!
//! `make bench` runs it (it needs the release binaries and a server). The
//! three are measured in alternating rounds, each on a fresh database with
//! the same events, so that a machine that speeds up or slows down during
//! the run does not favour one of them. Prints, per round:
//!
//! ```text
//! e2e round=R cpu_s_per_1000_deliveries receiver=… orbit_dev=… mysqld=… wall_s_per_1000=…
//! e2e round=R run_queue_s_per_1000_deliveries receiver=… orbit_dev=… mysqld=…
//! e2e round=R apply_alone cpu_s_per_1000_deliveries inbox=… mysqld=… wall_s_per_1000=…
//! e2e round=R apply_alone run_queue_s_per_1000_deliveries inbox=… mysqld=…
//! e2e round=R nats cpu_s_per_1000_deliveries receiver=… nats_server=… mysqld=… wall_s_per_1000=…
//! e2e round=R nats run_queue_s_per_1000_deliveries receiver=… nats_server=… mysqld=…
//! e2e round=R rabbitmq cpu_s_per_1000_deliveries receiver=… rabbitmq_server=… mysqld=… wall_s_per_1000=…
//! e2e round=R rabbitmq run_queue_s_per_1000_deliveries receiver=… rabbitmq_server=… mysqld=…
//! e2e round=R deliveries=N apply_alone_per_s=… consume_deliveries_per_s=… ratio=… nats_deliveries_per_s=… ratio=… rabbitmq_deliveries_per_s=… ratio=… rabbitmq_over_nats=…
//! ```
//!
//! (`run_queue`: time the process's threads were runnable but waited for
//! one of the 2 cores), then over all rounds (deliveries over summed wall
//! time):
//!
//! ```text
//! e2e rounds=R deliveries=N apply_alone_per_s=… consume_deliveries_per_s=… ratio=… nats_deliveries_per_s=… ratio=… rabbitmq_deliveries_per_s=… ratio=… rabbitmq_over_nats=…
//! e2e large_events=N event_bytes=… consume_peak_rss_kib=…
//! ```
//!
//! With a PostgreSQL server beside the MySQL one (`make bench` starts
//! both), each round also runs the Orbit path into a PostgreSQL database,
//! and prints it against the same path on MySQL in that round:
//!
//! ```text
//! e2e round=R postgres consume_deliveries_per_s=… mysql_consume_deliveries_per_s=… ratio=…
//! e2e rounds=R postgres consume_deliveries_per_s=… mysql_consume_deliveries_per_s=… ratio=…
//! ```
//!
//! and the same rounds again in batching mode, their lines marked
//! `batch_max=16`: `receiver consume --batch-max 16` on both sources,
//! against the inbox alone with 16 per transaction, 4 transactions and 64
//! callers.
//!
//! The NATS and RabbitMQ figures need `--features result-inbox/cli`, as
//! `make bench` builds it, and RabbitMQ's a throwaway node
//! (`scripts/with-rabbitmq.sh`, which `make bench` starts). RabbitMQ does
//! not tell a client what is unacknowledged, so its path ends when the
//! inbox holds every event; the receiver is then stopped and the queue
//! must hold nothing, or the round fails.

#[path = "../tests/common/mod.rs"]
#[allow(unused_imports)]
mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::consume::Consume;
use common::orbit::{OrbitDev, QueueCredentials};
use common::{
    cpu_seconds, dsn_for, mysqld_pid, random_hex, run_queue_seconds, small_event, EventSpec, TestDb,
};
use result_inbox::delivery::{Delivery, DeliveryId};
use result_inbox::event::EventType;
use result_inbox::ids::SubscriptionId;
use result_inbox::inbox::{InboxStore, Outcome, StoreOptions};
use result_inbox::scope::{InboxScope, ReceiverName};
use result_inbox::task_view::TaskView;
use tower::{ServiceBuilder, ServiceExt};

/// Deliveries per path and round: enough that the receiver's start (its
/// checks, its connections) is a small part of each measurement.
const DELIVERIES: usize = 10_000;
const ROUNDS: usize = 3;
const LARGE_EVENTS: usize = 40;
/// Deliveries per transaction in batching mode (`receiver consume
/// --batch-max`), with the receiver's 4 transactions at once.
const BATCH_MAX: usize = 16;
const TRANSACTIONS: usize = 4;

fn large_event(queue: &str) -> String {
    // Just under the 512 KiB limit: a long text result.
    let filler = "Zeile mit Umlauten äöü und 中文 ".repeat(15_000);
    let mut end = 520_000;
    while !filler.is_char_boundary(end) {
        end -= 1;
    }
    let result = format!(r#"{{"log":"{}"}}"#, &filler[..end]);
    EventSpec {
        id: random_hex(16),
        queue_id: queue,
        task_id: &random_hex(16),
        version: 2,
        event_type: "task.succeeded",
        state: "SUCCEEDED",
        result: Some(&result),
    }
    .json()
}

fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Starts `receiver consume` on `sub` into `db` and waits until Orbit counts
/// `count` deliveries ACKed; the process is left running.
async fn consume_until_acked(
    orbit: &OrbitDev,
    creds: &QueueCredentials,
    sub: &SubscriptionId,
    db: &TestDb,
    count: usize,
    batch: Option<usize>,
) -> Consume {
    let batch = batch.map(|n| n.to_string());
    let mut env = vec![("RECEIVER_LOG", "warn")];
    if let Some(n) = &batch {
        env.push(("RECEIVER_BATCH_MAX", n));
    }
    let consume = Consume::start(orbit, creds, &dsn_for(&db.name), sub, "bench", &env);
    orbit
        .wait_for_counts(creds, sub, Duration::from_secs(600), |c| {
            c["acked"] == count as u64
        })
        .await;
    consume
}

#[tokio::main]
async fn main() {
    if std::env::var("RESULT_INBOX_TEST_ADMIN_DSN").is_err() {
        eprintln!("end_to_end bench: needs a server; run it with `make bench`");
        return;
    }

    // The throwaway server logs every statement for the tests' sake; a
    // production server does not, and the log costs per statement.
    let admin = sqlx::MySqlPool::connect(&common::admin_dsn())
        .await
        .unwrap();
    sqlx::query("SET GLOBAL general_log = 0")
        .execute(&admin)
        .await
        .unwrap();

    let orbit = OrbitDev::start(30_000, 5);
    let creds = orbit.bootstrap("bench-e2e", None).await;
    let client = orbit.client(&creds);
    let events: Vec<String> = (0..DELIVERIES)
        .map(|_| small_event(&creds.queue_id))
        .collect();

    // Wall seconds per path, summed over the rounds: one transaction per
    // delivery, then batching mode.
    for batch in [None, Some(BATCH_MAX)] {
        let mode = mode(batch);
        let (mut alone_s, mut orbit_s, mut nats_s, mut rabbit_s, mut pg_s) =
            (0.0, 0.0, 0.0, 0.0, 0.0);
        for round in 1..=ROUNDS {
            let through_orbit = orbit_end_to_end(round, &orbit, &creds, &events, batch).await;
            if let Some(pg) = postgres_end_to_end(&orbit, &creds, &events, batch).await {
                pg_s += pg;
                println!(
                    "e2e round={round}{mode} postgres {}",
                    against_mysql(DELIVERIES, pg, through_orbit)
                );
            }
            let alone = apply_alone(round, &creds, &events, batch).await;
            let through_nats = nats_end_to_end(round, &creds.queue_id, &events, batch).await;
            let through_rabbit = rabbitmq_end_to_end(round, &creds.queue_id, &events, batch).await;
            alone_s += alone;
            orbit_s += through_orbit;
            nats_s += through_nats.unwrap_or(f64::NAN);
            rabbit_s += through_rabbit.unwrap_or(f64::NAN);
            println!(
                "e2e round={round}{mode} {}",
                rates(
                    DELIVERIES,
                    alone,
                    through_orbit,
                    through_nats,
                    through_rabbit
                )
            );
        }
        println!(
            "e2e rounds={ROUNDS}{mode} {}",
            rates(
                DELIVERIES * ROUNDS,
                alone_s,
                orbit_s,
                cfg!(feature = "nats").then_some(nats_s),
                with_rabbitmq().then_some(rabbit_s),
            )
        );
        if pg_s > 0.0 {
            println!(
                "e2e rounds={ROUNDS}{mode} postgres {}",
                against_mysql(DELIVERIES * ROUNDS, pg_s, orbit_s)
            );
        }
    }

    // Memory with the largest events the receiver accepts.
    let sub = client.create_subscription(&EventType::ALL).await.unwrap();
    let large = large_event(&creds.queue_id);
    for _ in 0..LARGE_EVENTS {
        orbit.inject(&sub.id, &large_event(&creds.queue_id)).await;
    }
    let db3 = TestDb::initialized().await;
    let mut consume = consume_until_acked(&orbit, &creds, &sub.id, &db3, LARGE_EVENTS, None).await;
    let rss = peak_rss_kib(consume.child.id());
    assert!(consume.terminate().success());
    println!(
        "e2e large_events={LARGE_EVENTS} event_bytes={} consume_peak_rss_kib={rss}",
        large.len()
    );
}

/// `deliveries` per second of each path, and each end-to-end path against
/// the inbox alone, from the wall seconds each took.
fn rates(
    deliveries: usize,
    alone: f64,
    orbit: f64,
    nats: Option<f64>,
    rabbitmq: Option<f64>,
) -> String {
    let per_s = |seconds: f64| deliveries as f64 / seconds;
    let mut line = format!(
        "deliveries={deliveries} apply_alone_per_s={:.0} consume_deliveries_per_s={:.0} ratio={:.2}",
        per_s(alone),
        per_s(orbit),
        alone / orbit
    );
    if let Some(nats) = nats {
        line += &format!(
            " nats_deliveries_per_s={:.0} ratio={:.2}",
            per_s(nats),
            alone / nats
        );
    }
    if let Some(rabbitmq) = rabbitmq {
        line += &format!(
            " rabbitmq_deliveries_per_s={:.0} ratio={:.2}",
            per_s(rabbitmq),
            alone / rabbitmq
        );
        if let Some(nats) = nats {
            line += &format!(" rabbitmq_over_nats={:.2}", nats / rabbitmq);
        }
    }
    line
}

/// The Orbit path on PostgreSQL against the same path on MySQL, from the
/// wall seconds each took.
fn against_mysql(deliveries: usize, postgres: f64, mysql: f64) -> String {
    format!(
        "consume_deliveries_per_s={:.0} mysql_consume_deliveries_per_s={:.0} ratio={:.2}",
        deliveries as f64 / postgres,
        deliveries as f64 / mysql,
        mysql / postgres
    )
}

/// The words a line of batching mode carries.
fn mode(batch: Option<usize>) -> String {
    batch.map(|n| format!(" batch_max={n}")).unwrap_or_default()
}

/// Seconds per 1000 deliveries.
fn per_thousand(seconds: f64) -> f64 {
    seconds * 1000.0 / DELIVERIES as f64
}

/// A process's CPU seconds and run-queue seconds so far.
fn usage(pid: u32) -> [f64; 2] {
    [cpu_seconds(pid), run_queue_seconds(pid)]
}

/// Per 1000 deliveries, what `pid` used since `before`.
fn used_since(pid: u32, before: [f64; 2]) -> [f64; 2] {
    let now = usage(pid);
    [
        per_thousand(now[0] - before[0]),
        per_thousand(now[1] - before[1]),
    ]
}

/// Where the time goes: per 1000 deliveries, the CPU seconds of the
/// receiver, of the source's server (`name`, `pid`, its usage before) and
/// of mysqld since `mysql_before`, beside the wall time, and the seconds
/// each waited for a core (2 cores are shared by all of them).
fn print_cpu(
    what: &str,
    consume: &Consume,
    (name, pid, before): (&str, u32, [f64; 2]),
    mysql_before: [f64; 2],
    elapsed: f64,
) {
    let receiver = used_since(consume.child.id(), [0.0, 0.0]);
    let server = used_since(pid, before);
    let mysqld = used_since(mysqld_pid(), mysql_before);
    println!(
        "e2e {what} cpu_s_per_1000_deliveries receiver={:.2} {name}={:.2} mysqld={:.2} wall_s_per_1000={:.2}",
        receiver[0],
        server[0],
        mysqld[0],
        per_thousand(elapsed),
    );
    println!(
        "e2e {what} run_queue_s_per_1000_deliveries receiver={:.2} {name}={:.2} mysqld={:.2}",
        receiver[1], server[1], mysqld[1],
    );
}

/// orbit-dev → `receiver consume` → inbox → ACK, on a fresh subscription
/// and database; the wall seconds until Orbit counts every delivery ACKed.
async fn orbit_end_to_end(
    round: usize,
    orbit: &OrbitDev,
    creds: &QueueCredentials,
    events: &[String],
    batch: Option<usize>,
) -> f64 {
    let sub = orbit
        .client(creds)
        .create_subscription(&EventType::ALL)
        .await
        .unwrap();
    for e in events {
        orbit.inject(&sub.id, e).await;
    }
    let db = TestDb::initialized().await;
    let started = Instant::now();
    let (orbit_cpu, mysql_cpu) = (usage(orbit.pid()), usage(mysqld_pid()));
    let mut consume = consume_until_acked(orbit, creds, &sub.id, &db, events.len(), batch).await;
    let elapsed = started.elapsed().as_secs_f64();
    print_cpu(
        &format!("round={round}{}", mode(batch)),
        &consume,
        ("orbit_dev", orbit.pid(), orbit_cpu),
        mysql_cpu,
        elapsed,
    );
    assert!(consume.terminate().success());
    elapsed
}

/// orbit-dev → `receiver consume` → inbox on PostgreSQL → ACK, on a fresh
/// subscription and database; the wall seconds until Orbit counts every
/// delivery ACKed. `None` without a PostgreSQL server.
async fn postgres_end_to_end(
    orbit: &OrbitDev,
    creds: &QueueCredentials,
    events: &[String],
    batch: Option<usize>,
) -> Option<f64> {
    std::env::var("RESULT_INBOX_TEST_PG_ADMIN_DSN").ok()?;
    let sub = orbit
        .client(creds)
        .create_subscription(&EventType::ALL)
        .await
        .unwrap();
    for e in events {
        orbit.inject(&sub.id, e).await;
    }
    let db = common::postgres::PgTestDb::initialized().await;
    let batch = batch.map(|n| n.to_string());
    let mut env = vec![("RECEIVER_LOG", "warn")];
    if let Some(n) = &batch {
        env.push(("RECEIVER_BATCH_MAX", n));
    }
    let started = Instant::now();
    let mut consume = Consume::start(orbit, creds, &db.dsn, &sub.id, "bench", &env);
    orbit
        .wait_for_counts(creds, &sub.id, Duration::from_secs(600), |c| {
            c["acked"] == events.len() as u64
        })
        .await;
    let elapsed = started.elapsed().as_secs_f64();
    assert!(consume.terminate().success());
    let applied: i64 = sqlx::query_scalar("SELECT count(*) FROM receiver_inbox WHERE applied = 1")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(applied, events.len() as i64);
    Some(elapsed)
}

/// The inbox alone, same events, same concurrency (4 transactions; in
/// batching mode room for a full batch in each), fresh database; its wall
/// seconds.
async fn apply_alone(
    round: usize,
    creds: &QueueCredentials,
    events: &[String],
    batch: Option<usize>,
) -> f64 {
    let db = TestDb::initialized().await;
    let scope = InboxScope::new(ReceiverName::parse("bench").unwrap(), creds.queue());
    let store = InboxStore::connect(&db.dsn, scope, StoreOptions::default())
        .await
        .unwrap();
    let (layer, callers) = common::sized_layer(&store, batch, TRANSACTIONS);
    let service = ServiceBuilder::new().layer(layer).service(TaskView::new());
    let events = Arc::new(events.to_vec());
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let (own, mysql) = (usage(std::process::id()), usage(mysqld_pid()));
    let mut workers = Vec::new();
    for _ in 0..callers {
        let (service, events, next) = (service.clone(), events.clone(), next.clone());
        workers.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                let Some(e) = events.get(i) else { break };
                let d = Delivery::new(DeliveryId::new(i.to_string()), Bytes::from(e.clone()))
                    .with_attempt(1);
                assert_eq!(
                    service.clone().oneshot(d).await.unwrap().outcome,
                    Outcome::Applied
                );
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }
    let elapsed = started.elapsed().as_secs_f64();
    let (inbox, mysqld) = (
        used_since(std::process::id(), own),
        used_since(mysqld_pid(), mysql),
    );
    println!(
        "e2e round={round}{} apply_alone cpu_s_per_1000_deliveries inbox={:.2} mysqld={:.2} wall_s_per_1000={:.2}",
        mode(batch),
        inbox[0],
        mysqld[0],
        per_thousand(elapsed),
    );
    println!(
        "e2e round={round}{} apply_alone run_queue_s_per_1000_deliveries inbox={:.2} mysqld={:.2}",
        mode(batch),
        inbox[1],
        mysqld[1],
    );
    elapsed
}

#[cfg(not(feature = "nats"))]
async fn nats_end_to_end(_: usize, _: &str, _: &[String], _: Option<usize>) -> Option<f64> {
    None
}

/// The same events through a JetStream durable pull consumer of a fresh
/// nats-server, into a fresh database; the wall seconds until the consumer
/// reports nothing pending and nothing waiting for an ACK.
#[cfg(feature = "nats")]
async fn nats_end_to_end(
    round: usize,
    queue: &str,
    events: &[String],
    batch: Option<usize>,
) -> Option<f64> {
    use common::nats::{JetStreamQueue, NatsServer};
    let server = NatsServer::start();
    let js = JetStreamQueue::create(&server, queue, Duration::from_secs(30), 5).await;
    for e in events {
        js.publish(e.clone()).await;
    }
    let db = TestDb::initialized().await;
    let mut env = js.env(&server.url());
    env.push(("ORBIT_RECEIVER_DSN".into(), dsn_for(&db.name)));
    env.push(("RECEIVER_NAME".into(), "bench".into()));
    env.push(("RECEIVER_LOG".into(), "warn".into()));
    if let Some(n) = batch {
        env.push(("RECEIVER_BATCH_MAX".into(), n.to_string()));
    }
    let started = Instant::now();
    let (nats_cpu, mysql_cpu) = (usage(server.pid()), usage(mysqld_pid()));
    let mut consume = Consume::with_env(&server.dir, &env);
    js.wait_all_acked(Duration::from_secs(600)).await;
    let elapsed = started.elapsed().as_secs_f64();
    print_cpu(
        &format!("round={round} nats{}", mode(batch)),
        &consume,
        ("nats_server", server.pid(), nats_cpu),
        mysql_cpu,
        elapsed,
    );
    assert!(consume.terminate().success());
    let applied: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM receiver_inbox WHERE applied")
        .fetch_one(&db.pool().await)
        .await
        .unwrap();
    assert_eq!(applied, events.len() as i64);
    Some(elapsed)
}

/// Whether the RabbitMQ path runs: built with it, and the suite's
/// throwaway node is there.
fn with_rabbitmq() -> bool {
    cfg!(feature = "rabbitmq") && std::env::var("RESULT_INBOX_TEST_AMQP_URL").is_ok()
}

#[cfg(not(feature = "rabbitmq"))]
async fn rabbitmq_end_to_end(_: usize, _: &str, _: &[String], _: Option<usize>) -> Option<f64> {
    None
}

/// The same events through a fresh quorum queue of the throwaway RabbitMQ
/// node, into a fresh database; the wall seconds until the inbox holds
/// every event (checked afterwards: the queue holds none).
#[cfg(feature = "rabbitmq")]
async fn rabbitmq_end_to_end(
    round: usize,
    queue_id: &str,
    events: &[String],
    batch: Option<usize>,
) -> Option<f64> {
    use common::rabbitmq::{RabbitNode, RabbitQueue};
    if !with_rabbitmq() {
        return None;
    }
    let node = RabbitNode::shared();
    let queue = RabbitQueue::create_for(&node, queue_id, 20).await;
    queue.publish(events).await;
    let db = TestDb::initialized().await;
    let mut env = queue.env();
    env.push(("ORBIT_RECEIVER_DSN".into(), dsn_for(&db.name)));
    env.push(("RECEIVER_NAME".into(), "bench".into()));
    env.push(("RECEIVER_LOG".into(), "warn".into()));
    if let Some(n) = batch {
        env.push(("RECEIVER_BATCH_MAX".into(), n.to_string()));
    }
    let dir = std::env::temp_dir().join(format!("result-inbox-bench-rabbitmq-{}", random_hex(6)));
    std::fs::create_dir_all(&dir).unwrap();
    let server = node.pid();
    let pool = db.pool().await;
    let started = Instant::now();
    let (rabbit_cpu, mysql_cpu) = (usage(server), usage(mysqld_pid()));
    let mut consume = Consume::with_env(&dir, &env);
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM receiver_inbox WHERE applied")
            .fetch_one(&pool)
            .await
            .unwrap();
        if rows == events.len() as i64 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{rows} of {} applied",
            events.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    print_cpu(
        &format!("round={round} rabbitmq{}", mode(batch)),
        &consume,
        ("rabbitmq_server", server, rabbit_cpu),
        mysql_cpu,
        elapsed,
    );
    assert!(consume.terminate().success());
    assert_eq!(
        queue.ready(&queue.queue).await,
        0,
        "every delivery acknowledged"
    );
    let _ = std::fs::remove_dir_all(&dir);
    Some(elapsed)
}
