//! Apply throughput against the floor of one durable transaction per event.
//!
//! Needs a throwaway server: `make bench` (or `scripts/with-mysql.sh cargo
//! bench --bench apply`). For each concurrency it measures, side by side on
//! the same server in the same run:
//!
//! * `raw` — `BEGIN; INSERT` one row with the event text`; COMMIT`: the least a
//!   durable record of an event can cost;
//! * `inbox` — fresh deliveries through `InboxLayer` over `TaskView` (each a
//!   new task, so each creates its view row);
//! * `duplicate` — the same deliveries again: every one finds its inbox row.
//!
//! It prints one line per concurrency with the statements the server counted
//! per fresh apply (`Questions`: `BEGIN`, the inbox `INSERT`, the view
//! statement, `COMMIT`; the first two travel in one round trip, so an apply
//! is 3 round trips, as many as the raw floor), and one line with the CPU
//! each side spent per transaction.

#[path = "../tests/common/mod.rs"]
#[allow(unused_imports)]
mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{cpu_seconds, mysqld_pid};
use result_inbox::delivery::{Delivery, DeliveryId, LeaseProof};
use result_inbox::dsn::Dsn;
use result_inbox::event::QueueId;
use result_inbox::inbox::{Inbox, InboxLayer, InboxStore, Outcome, StoreOptions};
use result_inbox::scope::{InboxScope, ReceiverName};
use result_inbox::task_view::TaskView;
use sqlx::mysql::{MySqlPool, MySqlPoolOptions};
use sqlx::Executor;
use tower::{ServiceBuilder, ServiceExt};

const CONCURRENCY: [usize; 3] = [1, 4, 16];
const QUEUE: &str = "0123456789abcdef0123456789abcdef";

fn measure_for() -> Duration {
    let secs = std::env::var("APPLY_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    Duration::from_secs(secs)
}

fn event(n: u64) -> String {
    format!(
        r#"{{"id":"{n:032x}","type":"task.succeeded","queue_id":"{QUEUE}","occurred_at":"2026-11-30T16:02:44.123456Z","task":{{"id":"{:032x}","version":2,"state":"SUCCEEDED","result":{{"rows":1234,"total":123456789012345678901234567890,"message":"Verarbeitung abgeschlossen – 处理完成","ratio":1.10}}}}}}"#,
        u128::from(n) + (1u128 << 100)
    )
}

fn delivery(n: u64) -> Delivery<Bytes> {
    Delivery::new(
        DeliveryId::new(format!("{n:032x}")),
        1,
        LeaseProof::new("bench"),
        Bytes::from(event(n)),
    )
}

/// What one measured case cost.
struct Measured {
    tx_per_s: f64,
    /// Server CPU microseconds per transaction.
    server_us: f64,
    /// This process's CPU microseconds per transaction.
    client_us: f64,
}

/// Runs `work` from `concurrency` tasks for the measuring time.
async fn run<F, Fut>(concurrency: usize, work: F) -> Measured
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let work = Arc::new(work);
    let next = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let (server, client) = (mysqld_pid(), std::process::id());
    let (server_cpu, client_cpu) = (cpu_seconds(server), cpu_seconds(client));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (work, next, stop) = (work.clone(), next.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut done = 0u64;
            while !stop.load(Ordering::Relaxed) {
                work(next.fetch_add(1, Ordering::Relaxed)).await;
                done += 1;
            }
            done
        }));
    }
    tokio::time::sleep(measure_for()).await;
    stop.store(true, Ordering::Relaxed);
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    let per_tx = |cpu: f64| cpu * 1e6 / total as f64;
    Measured {
        tx_per_s: total as f64 / started.elapsed().as_secs_f64(),
        server_us: per_tx(cpu_seconds(server) - server_cpu),
        client_us: per_tx(cpu_seconds(client) - client_cpu),
    }
}

async fn questions(pool: &MySqlPool) -> u64 {
    let (_, v): (String, String) = sqlx::query_as("SHOW GLOBAL STATUS LIKE 'Questions'")
        .fetch_one(pool)
        .await
        .unwrap();
    v.parse().unwrap()
}

#[tokio::main]
async fn main() {
    let Ok(admin) = std::env::var("RESULT_INBOX_TEST_ADMIN_DSN") else {
        eprintln!("apply bench: RESULT_INBOX_TEST_ADMIN_DSN is not set; run it with `make bench`");
        return;
    };
    let admin_pool = MySqlPool::connect(&admin).await.unwrap();
    let db = format!("bench_apply_{}", std::process::id());
    admin_pool
        .execute(format!("CREATE DATABASE {db} CHARACTER SET utf8mb4").as_str())
        .await
        .unwrap();
    let base = admin.rsplit_once('/').unwrap().0;
    let dsn = Dsn::parse(&format!("{base}/{db}")).unwrap();
    result_inbox::schema::init(&dsn).await.unwrap();
    let raw_pool = MySqlPoolOptions::new()
        .max_connections(20)
        .test_before_acquire(false)
        .after_connect(|conn, _| {
            Box::pin(async move {
                conn.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
                    .await?;
                Ok(())
            })
        })
        .connect_with(dsn.connect_options())
        .await
        .unwrap();
    raw_pool
        .execute("CREATE TABLE raw_events (id BIGINT UNSIGNED PRIMARY KEY, body MEDIUMTEXT NOT NULL) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4")
        .await
        .unwrap();

    let mut offset = 0u64;
    for concurrency in CONCURRENCY {
        // The floor: one durable row per event.
        let pool = raw_pool.clone();
        let base_raw = offset;
        let raw = run(concurrency, move |n| {
            let pool = pool.clone();
            async move {
                let mut tx = pool.begin().await.unwrap();
                sqlx::query("INSERT INTO raw_events (id, body) VALUES (?, ?)")
                    .bind(base_raw + n)
                    .bind(event(base_raw + n))
                    .execute(&mut *tx)
                    .await
                    .unwrap();
                tx.commit().await.unwrap();
            }
        })
        .await;
        offset += 10_000_000;

        let scope = InboxScope::new(ReceiverName::default(), QueueId::parse(QUEUE).unwrap());
        let store = InboxStore::connect(
            &dsn,
            scope,
            StoreOptions {
                max_connections: concurrency as u32 + 2,
                ..Default::default()
            },
        )
        .await
        .unwrap();
        let service: Inbox<TaskView> = ServiceBuilder::new()
            .layer(InboxLayer::new(store))
            .service(TaskView::new());

        let before = questions(&admin_pool).await;
        let applied = Arc::new(AtomicU64::new(0));
        let base_inbox = offset;
        let inbox = {
            let (service, applied) = (service.clone(), applied.clone());
            run(concurrency, move |n| {
                let (service, applied) = (service.clone(), applied.clone());
                async move {
                    let r = service.oneshot(delivery(base_inbox + n)).await.unwrap();
                    assert_eq!(r.outcome, Outcome::Applied);
                    applied.fetch_add(1, Ordering::Relaxed);
                }
            })
            .await
        };
        let applied = applied.load(Ordering::Relaxed);
        let statements = (questions(&admin_pool).await - before - 1) as f64 / applied as f64;

        let duplicate = {
            let service = service.clone();
            run(concurrency, move |n| {
                let service = service.clone();
                async move {
                    let r = service
                        .oneshot(delivery(base_inbox + n % applied))
                        .await
                        .unwrap();
                    assert!(matches!(r.outcome, Outcome::Duplicate { applied: true }));
                }
            })
            .await
        };
        offset += 10_000_000;

        println!(
            "apply concurrency={concurrency} raw_tx_per_s={:.0} inbox_tx_per_s={:.0} duplicate_tx_per_s={:.0} ratio={:.2} statements_per_apply={statements:.1}",
            raw.tx_per_s,
            inbox.tx_per_s,
            duplicate.tx_per_s,
            inbox.tx_per_s / raw.tx_per_s
        );
        println!(
            "apply concurrency={concurrency} cpu_us_per_tx server/client raw={:.0}/{:.0} inbox={:.0}/{:.0} duplicate={:.0}/{:.0}",
            raw.server_us, raw.client_us, inbox.server_us, inbox.client_us, duplicate.server_us, duplicate.client_us
        );
    }
    admin_pool
        .execute(format!("DROP DATABASE {db}").as_str())
        .await
        .unwrap();
}
