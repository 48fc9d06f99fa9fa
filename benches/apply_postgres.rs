//! Apply throughput on PostgreSQL against the floor of one durable
//! transaction per event, side by side in one run.
//!
//! Needs a throwaway server: `make bench` (or `scripts/with-postgres.sh
//! cargo bench --bench apply_postgres --features postgres`). At 4
//! connections it measures, taking turns in rounds (`APPLY_BENCH_SECS` in
//! all per case, default 12):
//!
//! * `raw` — one prepared `INSERT` of a row with the event text, committed
//!   by itself (PostgreSQL commits a statement outside `BEGIN`): the least
//!   a durable record of an event costs, one round trip;
//! * `inbox` — fresh deliveries through `InboxLayer` over `TaskView`, one
//!   transaction each (`BEGIN` and the inbox `INSERT` in one round trip,
//!   the view's statement, `COMMIT`), 4 callers;
//! * `batch16` — batching mode, up to 16 deliveries per transaction in 4
//!   transactions through the task view's set path, 64 callers;
//! * `duplicate` — deliveries of events already applied.
//!
//! Prints one line per case, its rate and its ratio to `raw`, and the CPU
//! microseconds the server spent per delivery.
//!
//! Then the two ways an inbox row can be written inside a transaction
//! that must go on whatever the row meets (a batch): `INSERT … ON CONFLICT
//! DO NOTHING`, which the inbox uses, against a plain `INSERT` inside a
//! savepoint that is rolled back on a duplicate key (23505). Both write
//! transactions of 16 rows, one in four a copy of a row written before, on
//! 4 connections, taking turns in rounds:
//!
//! ```text
//! apply_postgres insert_in_batch on_conflict per_s=… savepoint per_s=… on_conflict/savepoint=…
//! ```

#[path = "../tests/common/mod.rs"]
#[allow(unused_imports)]
mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::postgres::PgTestDb;
use result_inbox::db::Dsn;
use result_inbox::delivery::Delivery;
use result_inbox::ids::QueueId;
use result_inbox::inbox::{Batching, InboxLayer, InboxStore, Outcome, StoreOptions};
use result_inbox::scope::{InboxScope, ReceiverName};
use result_inbox::task_view::TaskView;
use sqlx::{Executor, PgPool, Postgres};
use tower::{Service, ServiceBuilder, ServiceExt};

const QUEUE: &str = "0123456789abcdef0123456789abcdef";
const ROUNDS: u32 = 4;
const CONNECTIONS: u32 = 4;

fn measure_for() -> Duration {
    let secs = std::env::var("APPLY_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12);
    Duration::from_secs(secs) / ROUNDS
}

fn event(n: u64) -> String {
    common::numbered_event(n, QUEUE)
}

fn delivery(n: u64) -> Delivery<Bytes> {
    common::numbered_delivery(n, QUEUE)
}

/// The server's CPU seconds: every `postgres` process of the throwaway
/// server's data directory (`postmaster.pid` names its parent).
fn server_cpu() -> f64 {
    let dir = std::env::var("RESULT_INBOX_TEST_PG_DIR").unwrap_or_default();
    let pid: Option<u32> = std::fs::read_to_string(format!("{dir}/data/postmaster.pid"))
        .ok()
        .and_then(|s| s.lines().next().and_then(|l| l.trim().parse().ok()));
    let Some(parent) = pid else { return 0.0 };
    let mut total = common::cpu_seconds(parent);
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
            let ppid = stat
                .rsplit(')')
                .next()
                .and_then(|rest| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            if ppid == Some(parent) {
                total += common::cpu_seconds(child);
            }
        }
    }
    total
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Case {
    Raw,
    Inbox,
    Batch16,
    Duplicate,
}

const CASES: [Case; 4] = [Case::Raw, Case::Inbox, Case::Batch16, Case::Duplicate];

impl Case {
    fn name(self) -> &'static str {
        match self {
            Case::Raw => "raw",
            Case::Inbox => "inbox",
            Case::Batch16 => "batch16",
            Case::Duplicate => "duplicate",
        }
    }
}

struct Bench {
    pool: PgPool,
    store: InboxStore<Postgres>,
    next: Arc<AtomicU64>,
    applied: Arc<AtomicU64>,
}

impl Bench {
    /// Runs `case` for `time`; the deliveries done and the server's CPU.
    async fn run(&self, case: Case, time: Duration) -> (u64, f64) {
        let cpu = server_cpu();
        let done = Arc::new(AtomicU64::new(0));
        let deadline = Instant::now() + time;
        let callers = match case {
            Case::Batch16 => 64,
            _ => CONNECTIONS as usize,
        };
        let layer = match case {
            Case::Batch16 => InboxLayer::new(self.store.clone()).batching(
                Batching::<Postgres>::up_to(16)
                    .transactions(CONNECTIONS as usize)
                    .set_path(TaskView::new()),
            ),
            _ => InboxLayer::new(self.store.clone()),
        };
        let inbox = ServiceBuilder::new().layer(layer).service(TaskView::new());
        let tasks: Vec<_> = (0..callers)
            .map(|_| {
                let (pool, next, applied, done) = (
                    self.pool.clone(),
                    self.next.clone(),
                    self.applied.clone(),
                    done.clone(),
                );
                let mut inbox = inbox.clone();
                tokio::spawn(async move {
                    while Instant::now() < deadline {
                        match case {
                            Case::Raw => {
                                let n = next.fetch_add(1, Ordering::Relaxed);
                                sqlx::query(
                                    "INSERT INTO raw_events VALUES ($1, $2, (statement_timestamp() AT TIME ZONE 'UTC'))",
                                )
                                .bind(format!("{n:032x}"))
                                .bind(event(n))
                                .execute(&pool)
                                .await
                                .unwrap();
                            }
                            Case::Duplicate => {
                                let seen = applied.load(Ordering::Relaxed).max(1);
                                let n = done.load(Ordering::Relaxed) % seen;
                                let receipt = inbox
                                    .ready()
                                    .await
                                    .unwrap()
                                    .call(delivery(n))
                                    .await
                                    .unwrap();
                                assert!(matches!(receipt.outcome, Outcome::Duplicate { .. }));
                            }
                            Case::Inbox | Case::Batch16 => {
                                let n = next.fetch_add(1, Ordering::Relaxed);
                                let receipt = inbox
                                    .ready()
                                    .await
                                    .unwrap()
                                    .call(delivery(n))
                                    .await
                                    .unwrap();
                                assert_eq!(receipt.outcome, Outcome::Applied);
                            }
                        }
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        (done.load(Ordering::Relaxed), server_cpu() - cpu)
    }
}

#[tokio::main]
async fn main() {
    let db = PgTestDb::initialized().await;
    db.pool
        .execute(
            "CREATE TABLE raw_events (id char(32) COLLATE \"C\" PRIMARY KEY, \
             body text NOT NULL, received_at timestamp(6) NOT NULL)",
        )
        .await
        .unwrap();
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(CONNECTIONS)
        .connect(&db.dsn)
        .await
        .unwrap();
    let scope = InboxScope::new(ReceiverName::default(), QueueId::parse(QUEUE).unwrap());
    let options = StoreOptions {
        max_connections: CONNECTIONS,
        ..StoreOptions::default()
    };
    let store = InboxStore::<Postgres>::open(&Dsn::parse(&db.dsn).unwrap(), scope, options)
        .await
        .unwrap();
    // Ids of raw rows and events never meet: raw rows start far above.
    let bench = Bench {
        pool,
        store,
        next: Arc::new(AtomicU64::new(0)),
        applied: Arc::new(AtomicU64::new(0)),
    };
    let raw_next = Arc::new(AtomicU64::new(1 << 40));
    let time = measure_for();
    let mut totals = [(0u64, 0f64, Duration::ZERO); 4];
    for round in 0..ROUNDS {
        for i in 0..CASES.len() {
            let case = CASES[(i + round as usize) % CASES.len()];
            let bench_for_case = Bench {
                pool: bench.pool.clone(),
                store: bench.store.clone(),
                next: if case == Case::Raw {
                    raw_next.clone()
                } else {
                    bench.next.clone()
                },
                applied: bench.applied.clone(),
            };
            let (done, cpu) = bench_for_case.run(case, time).await;
            if matches!(case, Case::Inbox | Case::Batch16) {
                bench
                    .applied
                    .store(bench.next.load(Ordering::Relaxed), Ordering::Relaxed);
            }
            let slot = &mut totals[CASES.iter().position(|c| *c == case).unwrap()];
            slot.0 += done;
            slot.1 += cpu;
            slot.2 += time;
        }
    }
    let rate = |(done, _, time): (u64, f64, Duration)| done as f64 / time.as_secs_f64();
    let raw = rate(totals[0]);
    for (case, total) in CASES.iter().zip(totals) {
        println!(
            "apply_postgres {} connections={CONNECTIONS} per_s={:.0} ratio_to_raw={:.2} server_cpu_us_per_delivery={:.0}",
            case.name(),
            rate(total),
            rate(total) / raw,
            total.1 * 1e6 / total.0.max(1) as f64,
        );
    }
    let batch = rate(totals[2]);
    println!(
        "apply_postgres target batch16/raw>=2.00: {} ({:.2})",
        if batch >= 2.0 * raw { "met" } else { "MISSED" },
        batch / raw
    );
    insert_in_batch(&bench.pool, time).await;
}

/// A batch's inbox rows: `ON CONFLICT DO NOTHING` against a savepoint
/// around a plain `INSERT`, each under its own receiver name.
async fn insert_in_batch(pool: &PgPool, time: Duration) {
    let mut rows = [0u64; 2];
    for round in 0..ROUNDS {
        for i in 0..2 {
            let savepoint = (i + round as usize) % 2 == 1;
            rows[usize::from(savepoint)] += rows_in_batches(pool, savepoint, round, time).await;
        }
    }
    let per_s = |n: u64| n as f64 / (time * ROUNDS).as_secs_f64();
    println!(
        "apply_postgres insert_in_batch on_conflict per_s={:.0} savepoint per_s={:.0} on_conflict/savepoint={:.2}",
        per_s(rows[0]),
        per_s(rows[1]),
        rows[0] as f64 / rows[1].max(1) as f64
    );
}

/// Rows written in `time` by 4 connections, 16 per transaction, one in
/// four a copy of an earlier row of the same round.
async fn rows_in_batches(pool: &PgPool, savepoint: bool, round: u32, time: Duration) -> u64 {
    const INSERT: &str = "INSERT INTO receiver_inbox (consumer_name, queue_id, event_id, \
        event_digest, event_canonical, applied, received_at) \
        VALUES ($1, $2, $3, repeat('0', 64), '{}', 1, (statement_timestamp() AT TIME ZONE 'UTC'))";
    let name = if savepoint {
        "savepoint"
    } else {
        "on-conflict"
    };
    let deadline = Instant::now() + time;
    let tasks: Vec<_> = (0..CONNECTIONS)
        .map(|connection| {
            let pool = pool.clone();
            tokio::spawn(async move {
                let mut written = 0u64;
                let mut n = 0u64;
                let mut conn = pool.acquire().await.unwrap();
                while Instant::now() < deadline {
                    let mut tx = sqlx::Connection::begin(&mut *conn).await.unwrap();
                    for i in 0..16u64 {
                        // Every fourth row is a copy of the row written 16 before.
                        let key = if i % 4 == 3 && n >= 16 { n - 16 } else { n };
                        n += 1;
                        let id = format!("{round:04x}{connection:04x}{key:024x}");
                        if savepoint {
                            tx.execute("SAVEPOINT row").await.unwrap();
                            let inserted = sqlx::query(INSERT)
                                .bind(name)
                                .bind(QUEUE)
                                .bind(&id)
                                .execute(&mut *tx)
                                .await;
                            match inserted {
                                Ok(_) => tx.execute("RELEASE SAVEPOINT row").await.map(drop),
                                Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("23505") => {
                                    tx.execute("ROLLBACK TO SAVEPOINT row").await.map(drop)
                                }
                                Err(e) => Err(e),
                            }
                            .unwrap();
                        } else {
                            sqlx::query(&format!(
                                "{INSERT} ON CONFLICT (consumer_name, queue_id, event_id) DO NOTHING"
                            ))
                            .bind(name)
                            .bind(QUEUE)
                            .bind(&id)
                            .execute(&mut *tx)
                            .await
                            .unwrap();
                        }
                    }
                    tx.commit().await.unwrap();
                    written += 16;
                }
                written
            })
        })
        .collect();
    let mut written = 0;
    for task in tasks {
        written += task.await.unwrap();
    }
    written
}
