//! Apply throughput against the floor of one durable transaction per event.
//!
//! Needs a throwaway server: `make bench` (or `scripts/with-mysql.sh cargo
//! bench --bench apply`). For each concurrency it measures, side by side on
//! the same server in the same run:
//!
//! * `raw` — `INSERT` one row with the event text, `COMMIT`: the least a
//!   durable record of an event can cost (2 round trips). Its sessions run
//!   like the inbox's, `READ COMMITTED` with `autocommit` off, so that the
//!   `INSERT` opens the transaction without a `BEGIN`, and each connection
//!   goes from one transaction to the next without a ping, as the inbox's
//!   do;
//! * `inbox` — fresh deliveries through `InboxLayer` over `TaskView` (each a
//!   new task, so each creates its view row);
//! * `duplicate` — the same deliveries again: every one finds its inbox row.
//!
//! Raw and inbox take turns in [`ROUNDS`] rounds (`APPLY_BENCH_SECS` in all
//! per case, default 12), so that a change in the machine's load weighs on
//! both. It prints one line per concurrency: the rates and their ratio, the
//! statements the server counted per fresh apply (`Questions`: the inbox
//! `INSERT`, which opens the transaction, the view statement, `COMMIT` — one
//! round trip each) and per raw transaction, the pings per each (the round
//! trips `Questions` does not count: `Com_admin_commands`), and the CPU
//! microseconds the server and this process spent per transaction of each
//! case.
//!
//! Then batching mode, 4 transactions at once, against `raw` at 4
//! connections, every case in every round, the order turning: batches of
//! up to 1, 4, 16 and 64 deliveries through the task view's set path, and
//! 16 without it (each delivery's own statements behind a savepoint, one
//! COMMIT), each with room for full batches (4 × batch callers). One line
//! per case: its deliveries per second, the ratio to `raw`, the statements
//! per delivery and the CPU per delivery. Last, one delivery at a time on
//! an idle inbox, 500 per round in alternating rounds: the median latency
//! of the default mode and of batching mode.

#[path = "../tests/common/mod.rs"]
#[allow(unused_imports)]
mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{cpu_seconds, mysqld_pid};
use futures::future::BoxFuture;
use result_inbox::db::Dsn;
use result_inbox::delivery::Delivery;
use result_inbox::ids::QueueId;
use result_inbox::inbox::{Batching, Inbox, InboxLayer, InboxStore, Outcome, StoreOptions};
use result_inbox::scope::{InboxScope, ReceiverName};
use result_inbox::task_view::TaskView;
use sqlx::mysql::{MySqlConnection, MySqlPool, MySqlPoolOptions};
use sqlx::Executor;
use tower::{ServiceBuilder, ServiceExt};

const CONCURRENCY: [usize; 3] = [1, 4, 16];
/// Rounds each case is measured in, taking turns with the other cases.
const ROUNDS: u32 = 6;
const QUEUE: &str = "0123456789abcdef0123456789abcdef";

fn measure_for() -> Duration {
    let secs = std::env::var("APPLY_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12);
    Duration::from_secs(secs)
}

fn event(n: u64) -> String {
    common::numbered_event(n, QUEUE)
}

fn delivery(n: u64) -> Delivery<Bytes> {
    common::numbered_delivery(n, QUEUE)
}

/// What one measured case cost, summed over its rounds.
#[derive(Default)]
struct Measured {
    transactions: u64,
    elapsed: Duration,
    /// CPU seconds of the server and of this process.
    server_cpu: f64,
    client_cpu: f64,
}

impl Measured {
    fn tx_per_s(&self) -> f64 {
        self.transactions as f64 / self.elapsed.as_secs_f64()
    }

    /// Server and client CPU microseconds per transaction.
    fn cpu_us(&self) -> (f64, f64) {
        let per_tx = |cpu: f64| cpu * 1e6 / self.transactions as f64;
        (per_tx(self.server_cpu), per_tx(self.client_cpu))
    }
}

/// Runs `work` from `concurrency` tasks for `time`, numbering the calls
/// from `next`, and adds what it cost to `into`.
async fn round<F, Fut>(
    concurrency: usize,
    time: Duration,
    next: &Arc<AtomicU64>,
    work: &Arc<F>,
    into: &mut Measured,
) where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
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
    tokio::time::sleep(time).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        into.transactions += t.await.unwrap();
    }
    into.elapsed += started.elapsed();
    into.server_cpu += cpu_seconds(server) - server_cpu;
    into.client_cpu += cpu_seconds(client) - client_cpu;
}

/// The server's counts of statements (`Questions`) and of admin commands
/// such as `COM_PING` (`Com_admin_commands`): together, its round trips.
async fn counted(pool: &MySqlPool) -> (u64, u64) {
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SHOW GLOBAL STATUS WHERE Variable_name IN ('Questions', 'Com_admin_commands')",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    let value = |name: &str| -> u64 {
        let (_, v) = rows
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .unwrap();
        v.parse().unwrap()
    };
    (value("Questions"), value("Com_admin_commands"))
}

#[tokio::main]
async fn main() {
    let Ok(admin) = std::env::var("RESULT_INBOX_TEST_ADMIN_DSN") else {
        eprintln!("apply bench: RESULT_INBOX_TEST_ADMIN_DSN is not set; run it with `make bench`");
        return;
    };
    let admin_pool = MySqlPool::connect(&admin).await.unwrap();
    // The throwaway server logs every statement for the tests' sake; a
    // production server does not, and the log costs per statement.
    admin_pool
        .execute("SET GLOBAL general_log = 0")
        .await
        .unwrap();
    let db = format!("bench_apply_{}", std::process::id());
    admin_pool
        .execute(format!("CREATE DATABASE {db} CHARACTER SET utf8mb4").as_str())
        .await
        .unwrap();
    let base = admin.rsplit_once('/').unwrap().0;
    let dsn = Dsn::parse(&format!("{base}/{db}")).unwrap();
    result_inbox::db::schema::init(&dsn).await.unwrap();
    let raw_pool = MySqlPoolOptions::new()
        .max_connections(20)
        .test_before_acquire(false)
        .after_connect(|conn, _| {
            Box::pin(async move {
                conn.execute(sqlx::raw_sql(
                    "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED; \
                     SET SESSION autocommit = 0",
                ))
                .await?;
                Ok(())
            })
        })
        .connect_with(dsn.mysql_options().expect("a MySQL address"))
        .await
        .unwrap();
    raw_pool
        .execute("CREATE TABLE raw_events (id BIGINT UNSIGNED PRIMARY KEY, body MEDIUMTEXT NOT NULL) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4")
        .await
        .unwrap();

    let (rounds, time) = (ROUNDS, measure_for() / ROUNDS);
    let mut offset = 0u64;
    for concurrency in CONCURRENCY {
        let raw_work = raw_work(&raw_pool);
        let raw_next = Arc::new(AtomicU64::new(offset));
        offset += 10_000_000;

        let service: Inbox<TaskView> = ServiceBuilder::new()
            .layer(InboxLayer::new(store(&dsn, concurrency as u32 + 2).await))
            .service(TaskView::new());
        let inbox_work = inbox_work(&service);
        let first_inbox = offset;
        let inbox_next = Arc::new(AtomicU64::new(first_inbox));
        offset += 10_000_000;

        // Raw and inbox take turns, so that whatever else the machine does
        // weighs on both alike; the order flips every round.
        let (mut raw, mut inbox) = (Measured::default(), Measured::default());
        let (mut statements, mut raw_statements) = ((0, 0), (0, 0));
        for r in 0..rounds {
            for inbox_turn in [r % 2 == 0, r % 2 == 1] {
                let before = counted(&admin_pool).await;
                if inbox_turn {
                    round(concurrency, time, &inbox_next, &inbox_work, &mut inbox).await;
                } else {
                    round(concurrency, time, &raw_next, &raw_work, &mut raw).await;
                }
                let after = counted(&admin_pool).await;
                // One more statement: the SHOW STATUS that read `before`.
                let into = if inbox_turn {
                    &mut statements
                } else {
                    &mut raw_statements
                };
                into.0 += after.0 - before.0 - 1;
                into.1 += after.1 - before.1;
            }
        }
        let per = |count: u64, of: &Measured| count as f64 / of.transactions as f64;
        let (pings, raw_pings) = (per(statements.1, &inbox), per(raw_statements.1, &raw));
        let (statements, raw_statements) = (per(statements.0, &inbox), per(raw_statements.0, &raw));

        let applied = inbox_next.load(Ordering::Relaxed) - first_inbox;
        let duplicate_work = {
            let service = service.clone();
            Arc::new(move |n: u64| {
                let service = service.clone();
                async move {
                    let r = service
                        .oneshot(delivery(first_inbox + n % applied))
                        .await
                        .unwrap();
                    assert!(matches!(r.outcome, Outcome::Duplicate { applied: true }));
                }
            })
        };
        let mut duplicate = Measured::default();
        let duplicate_next = Arc::new(AtomicU64::new(0));
        for _ in 0..rounds {
            round(
                concurrency,
                time,
                &duplicate_next,
                &duplicate_work,
                &mut duplicate,
            )
            .await;
        }

        let (cpu_raw, cpu_inbox, cpu_dup) = (raw.cpu_us(), inbox.cpu_us(), duplicate.cpu_us());
        println!(
            "apply concurrency={concurrency} raw_tx_per_s={:.0} inbox_tx_per_s={:.0} duplicate_tx_per_s={:.0} ratio={:.2} \
             statements_per_apply={statements:.1} statements_per_raw={raw_statements:.1} pings_per_apply={pings:.1} pings_per_raw={raw_pings:.1} cpu_us_per_tx_server/client raw={:.0}/{:.0} inbox={:.0}/{:.0} duplicate={:.0}/{:.0}",
            raw.tx_per_s(),
            inbox.tx_per_s(),
            duplicate.tx_per_s(),
            inbox.tx_per_s() / raw.tx_per_s(),
            cpu_raw.0,
            cpu_raw.1,
            cpu_inbox.0,
            cpu_inbox.1,
            cpu_dup.0,
            cpu_dup.1
        );
    }
    batched(&dsn, &admin_pool, &raw_pool, rounds, time, offset).await;
    admin_pool
        .execute(format!("DROP DATABASE {db}").as_str())
        .await
        .unwrap();
}

/// The floor: one durable row per event, on connections kept between
/// transactions (a pooled one would be pinged each time it goes back).
fn raw_work(
    pool: &MySqlPool,
) -> Arc<impl Fn(u64) -> BoxFuture<'static, ()> + Send + Sync + 'static> {
    let pool = pool.clone();
    let kept: Arc<Mutex<Vec<MySqlConnection>>> = Arc::default();
    Arc::new(move |n: u64| -> BoxFuture<'static, ()> {
        let (pool, kept) = (pool.clone(), kept.clone());
        Box::pin(async move {
            let taken = kept.lock().unwrap().pop();
            let mut conn = match taken {
                Some(conn) => conn,
                None => pool.acquire().await.unwrap().detach(),
            };
            sqlx::query("INSERT INTO raw_events (id, body) VALUES (?, ?)")
                .bind(n)
                .bind(event(n))
                .execute(&mut conn)
                .await
                .unwrap();
            conn.execute("COMMIT").await.unwrap();
            kept.lock().unwrap().push(conn);
        })
    })
}

/// Fresh deliveries through `service`, each expected to apply.
fn inbox_work(
    service: &Inbox<TaskView>,
) -> Arc<impl Fn(u64) -> BoxFuture<'static, ()> + Send + Sync + 'static> {
    let service = service.clone();
    Arc::new(move |n: u64| -> BoxFuture<'static, ()> {
        let service = service.clone();
        Box::pin(async move {
            let r = service.oneshot(delivery(n)).await.unwrap();
            assert_eq!(r.outcome, Outcome::Applied);
        })
    })
}

/// Transactions at once in batching mode, and the batch sizes measured.
const TRANSACTIONS: usize = 4;
const BATCHES: [usize; 4] = [1, 4, 16, 64];

async fn store(dsn: &Dsn, connections: u32) -> InboxStore {
    let scope = InboxScope::new(ReceiverName::default(), QueueId::parse(QUEUE).unwrap());
    let options = StoreOptions {
        max_connections: connections,
        ..Default::default()
    };
    InboxStore::connect(dsn, scope, options).await.unwrap()
}

/// Batching mode against the raw floor at as many connections as it has
/// transactions, every case in every round, the order turning each round;
/// then the latency of one delivery at a time, default mode against
/// batching mode.
async fn batched(
    dsn: &Dsn,
    admin_pool: &MySqlPool,
    raw_pool: &MySqlPool,
    rounds: u32,
    time: Duration,
    mut offset: u64,
) {
    let raw = raw_work(raw_pool);
    let raw_next = Arc::new(AtomicU64::new(offset));
    offset += 10_000_000;
    let mut cases = Vec::new();
    // Each batch size with the task view's set path, and the middle one
    // also without it: per-delivery statements behind savepoints, under
    // one COMMIT.
    let shapes = BATCHES
        .iter()
        .map(|&batch| (batch, true))
        .chain(std::iter::once((16, false)));
    for (batch, set_path) in shapes {
        let batching = Batching::new(batch).transactions(TRANSACTIONS);
        let batching = if set_path {
            batching.set_path(TaskView::new())
        } else {
            batching
        };
        let service: Inbox<TaskView> = ServiceBuilder::new()
            .layer(InboxLayer::new(store(dsn, TRANSACTIONS as u32 + 2).await).batching(batching))
            .service(TaskView::new());
        let next = Arc::new(AtomicU64::new(offset));
        cases.push(((batch, set_path), inbox_work(&service), next));
        offset += 10_000_000;
    }
    let mut raw_measured = Measured::default();
    let mut measured: Vec<(Measured, u64)> = cases.iter().map(|_| Default::default()).collect();
    for r in 0..rounds {
        let mut order: Vec<Option<usize>> = std::iter::once(None)
            .chain((0..cases.len()).map(Some))
            .collect();
        let turn = r as usize % order.len();
        order.rotate_left(turn);
        for case in order {
            match case {
                None => round(TRANSACTIONS, time, &raw_next, &raw, &mut raw_measured).await,
                Some(i) => {
                    let ((batch, _), work, next) = &cases[i];
                    let before = counted(admin_pool).await;
                    // Room for full batches in every transaction.
                    round(TRANSACTIONS * batch, time, next, work, &mut measured[i].0).await;
                    let after = counted(admin_pool).await;
                    measured[i].1 += after.0 - before.0 - 1;
                }
            }
        }
    }
    for (((batch, set_path), _, _), (m, statements)) in cases.iter().zip(&measured) {
        let (server, client) = m.cpu_us();
        let path = if *set_path { "set" } else { "per_delivery" };
        println!(
            "batched transactions={TRANSACTIONS} batch_max={batch} path={path} raw_tx_per_s={:.0} batched_deliveries_per_s={:.0} ratio={:.2} \
             statements_per_delivery={:.2} cpu_us_per_delivery_server/client={server:.0}/{client:.0}",
            raw_measured.tx_per_s(),
            m.tx_per_s(),
            m.tx_per_s() / raw_measured.tx_per_s(),
            *statements as f64 / m.transactions as f64,
        );
    }
    latency(dsn, rounds, offset).await;
}

/// One delivery at a time on an idle inbox: the median time of an apply in
/// the default mode and in batching mode, which must not add to it.
async fn latency(dsn: &Dsn, rounds: u32, offset: u64) {
    let single: Inbox<TaskView> = ServiceBuilder::new()
        .layer(InboxLayer::new(store(dsn, 2).await))
        .service(TaskView::new());
    let batching: Inbox<TaskView> = ServiceBuilder::new()
        .layer(
            InboxLayer::new(store(dsn, 2).await)
                .batching(Batching::new(16).set_path(TaskView::new())),
        )
        .service(TaskView::new());
    let mut next = offset;
    let (mut default_us, mut batched_us) = (Vec::new(), Vec::new());
    for r in 0..rounds * 2 {
        let (service, into) = if r % 2 == 0 {
            (&single, &mut default_us)
        } else {
            (&batching, &mut batched_us)
        };
        for _ in 0..500 {
            next += 1;
            let started = Instant::now();
            let receipt = service.clone().oneshot(delivery(next)).await.unwrap();
            into.push(started.elapsed().as_secs_f64() * 1e6);
            assert_eq!(receipt.outcome, Outcome::Applied);
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (default_median, batched_median) = (median(&mut default_us), median(&mut batched_us));
    println!(
        "latency one_at_a_time deliveries={} default_median_us={default_median:.0} batching_median_us={batched_median:.0} added_us={:.0}",
        default_us.len() + batched_us.len(),
        batched_median - default_median,
    );
}
