//! What the outbox costs and how fast its relay sends, on MySQL (MariaDB)
//! and PostgreSQL side by side in one run.
//!
//! Needs both throwaway servers: `make bench` (or `scripts/with-postgres.sh
//! scripts/with-mysql.sh cargo bench --bench outbox --features
//! result-inbox/cli`). Each part runs on a fresh database of each engine
//! (`receiver init --outbox`), the engines taking turns:
//!
//! 1. **Apply with one effect per delivery, against apply without.**
//!    Fresh deliveries through `InboxLayer` over `TaskView` (as
//!    `benches/apply.rs`), and over `task_view::Notify`, the same view that
//!    also records one effect per delivery in the outbox (the notification
//!    of `receiver consume --notify-url`: about 300 bytes of JSON, a
//!    content-type header). The two take turns in [`ROUNDS`] rounds
//!    (`APPLY_BENCH_SECS` per case in all, default 12), the order flipping
//!    every round, at 1, 4 and 16 callers (`OUTBOX_BENCH_TARGETS=N` gives
//!    `Notify` N targets, so N effects per delivery, recorded in one
//!    statement; the goal is for 1). Per case: deliveries per second,
//!    the ratio, the statements the server counted per delivery (MySQL's
//!    `Questions`), the bytes of redo (InnoDB's LSN) or WAL per delivery,
//!    and the CPU the server and this process spent per delivery.
//! 2. **COMMIT to the endpoint's receipt.** One delivery at a time through
//!    the inbox over `Notify`, a pseudo-random 2–30 ms apart, a relay
//!    (default options: polls every second) sending to a webhook endpoint
//!    in this process: woken through its `RelayWaker` as soon as the inbox
//!    answers (after its COMMIT), as `receiver consume` does, against
//!    polling alone. The time from the inbox's answer to the endpoint's
//!    receipt of the request: p50, p99 and the largest, per mode.
//! 3. **Relay throughput.** A backlog of effects over a number of ordering
//!    keys (written straight into the table, in record order), drained by
//!    one relay at a concurrency, to a webhook endpoint in this process:
//!    effects per second from the relay's start until the last one is
//!    recorded sent, with every request checked at the endpoint (each id
//!    once, each key's effects in record order). Concurrency 1, 4, 16 and
//!    64 over 1 024 keys, then 1, 4, 16 and 64 keys at concurrency 64.
//!    Also the statements per effect (MySQL) and CPU per effect.
//!
//! The endpoint is a hyper HTTP/1.1 server on a loopback port of this
//! process: it reads each request whole, notes its `webhook-id` and when it
//! came, and answers `204`. It does not check signatures
//! (`tests/relay.rs` does, with an independent implementation): what it
//! costs is in this process's CPU, beside the relay's.
//!
//! Each line starts with `outbox`, then the part and the engine; last, one
//! line per goal (`met` or `MISSED`).

#[path = "../tests/common/mod.rs"]
#[allow(unused_imports)]
mod common;

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt as _, Empty};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use result_inbox::db::{Dsn, Engine};
use result_inbox::ids::{EventId, QueueId};
use result_inbox::inbox::{Inbox, InboxLayer, InboxStore, Outcome, StoreOptions};
use result_inbox::outbox::{EffectId, EffectKey, Target};
use result_inbox::relay::{Relay, RelayOptions, RelayWaker, Targets, Webhook, WebhookSecret};
use result_inbox::scope::{InboxScope, ReceiverName};
use result_inbox::task_view::{Notify, TaskView};
use sqlx::{Executor, MySql, Postgres};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower::{ServiceBuilder, ServiceExt};

const QUEUE: &str = "0123456789abcdef0123456789abcdef";
/// The target name of every effect, and the relay's one target.
const TARGET: &str = "hook";
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
/// Rounds each apply case is measured in, taking turns with the other.
const ROUNDS: u32 = 6;
const APPLY_CONCURRENCY: [usize; 3] = [1, 4, 16];
/// Deliveries per mode and engine in the latency part, in two rounds.
const LATENCY_DELIVERIES: usize = 300;
/// (relay concurrency, ordering keys, effects in the backlog).
const DRAINS: [(usize, usize, usize); 8] = [
    (1, 1024, 4_000),
    (4, 1024, 10_000),
    (16, 1024, 10_000),
    (64, 1024, 10_000),
    (64, 1, 2_000),
    (64, 4, 4_000),
    (64, 16, 10_000),
    (64, 64, 10_000),
];

/// The effects each delivery records in the apply part: one per target
/// of `Notify` (`OUTBOX_BENCH_TARGETS`, default 1, as `receiver consume`
/// with a webhook, a subject and a RabbitMQ queue records 3).
fn apply_targets() -> usize {
    std::env::var("OUTBOX_BENCH_TARGETS")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|n| *n >= 1)
        .unwrap_or(1)
}

/// `Notify` over `targets` targets: `hook`, `hook-2`, `hook-3`, …
fn notify(targets: usize) -> Notify {
    (2..=targets).fold(Notify::new(TARGET).unwrap(), |notify, n| {
        notify.with_target(&format!("{TARGET}-{n}")).unwrap()
    })
}

fn apply_time() -> Duration {
    let secs = std::env::var("APPLY_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12);
    Duration::from_secs(secs)
}

fn scope() -> InboxScope {
    InboxScope::new(ReceiverName::default(), QueueId::parse(QUEUE).unwrap())
}

/// The id `Notify` gives the effect of numbered event `n`: its key is the
/// event id.
fn notify_effect_id(n: u64) -> String {
    let event = EventId::parse(&format!("{n:032x}")).unwrap();
    let key = EffectKey::parse(event.as_str()).unwrap();
    EffectId::derive(&scope(), &event, &Target::parse(TARGET).unwrap(), &key)
        .as_str()
        .to_owned()
}

/// The server's counters around a measurement.
#[derive(Default, Clone, Copy)]
struct Counters {
    /// Statements the server counted (MySQL's `Questions`), when it counts
    /// them.
    statements: Option<u64>,
    /// Bytes of redo or WAL written so far.
    log_bytes: u64,
    /// Write transactions so far: MySQL's `COMMIT` statements, PostgreSQL's
    /// transaction ids given out.
    transactions: u64,
    /// CPU seconds of the server's processes.
    server_cpu: f64,
    /// CPU seconds of this process (the relay and the endpoint included).
    client_cpu: f64,
}

/// What differs between the engines: a database of the bench's own, the
/// server's counters, and writing a backlog straight into the table.
trait Side: Engine {
    const ENGINE: &'static str;

    /// A fresh database with the receiver's tables and the outbox, and an
    /// administrator's pool on it.
    async fn database(part: &str) -> (Dsn, sqlx::Pool<Self>);

    /// The server's counters now (MySQL counts the statement that reads
    /// them among its `Questions`).
    async fn counters(admin: &sqlx::Pool<Self>) -> Counters;

    /// Empties the outbox.
    async fn truncate(admin: &sqlx::Pool<Self>);

    /// Writes `rows` as pending effects, due now, in this order.
    async fn fill(admin: &sqlx::Pool<Self>, rows: &[Planned]);

    /// Effects still pending.
    async fn pending(admin: &sqlx::Pool<Self>) -> u64;

    async fn run(admin: &sqlx::Pool<Self>, sql: &str);

    /// The statement that brings the outbox's statistics up to date.
    const ANALYZE: &'static str;
}

/// One effect of a backlog.
struct Planned {
    id: String,
    event: String,
    key: String,
    ordering_key: String,
    body: Vec<u8>,
}

/// Rows per `INSERT` when writing a backlog.
const FILL_CHUNK: usize = 500;
const HEADERS: &str = r#"{"content-type":"application/json"}"#;

/// The `INSERT` of `rows` pending effects, due now: five parameters a row
/// (id, event, key, ordering key, body), the `n`th (from 1) written as
/// `parameter(n)`, and the engine's UTC time as `now`.
fn fill_sql(rows: usize, parameter: impl Fn(usize) -> String, now: &str) -> String {
    let consumer = ReceiverName::default();
    let values: Vec<String> = (0..rows)
        .map(|i| {
            let p: Vec<String> = (1..=5).map(|k| parameter(i * 5 + k)).collect();
            format!(
                "({}, '{}', '{QUEUE}', {}, '{TARGET}', {}, {}, {}, '{HEADERS}', NULL, 'pending', 0, \
                 {now}, {now})",
                p[0],
                consumer.as_str(),
                p[1],
                p[2],
                p[3],
                p[4]
            )
        })
        .collect();
    format!(
        "INSERT INTO receiver_outbox (effect_id, consumer_name, queue_id, event_id, target, \
         effect_key, ordering_key, body, headers, traceparent, state, attempts, \
         next_attempt_at, created_at) VALUES {}",
        values.join(", ")
    )
}

impl Side for MySql {
    const ENGINE: &'static str = "mysql";
    const ANALYZE: &'static str = "ANALYZE TABLE receiver_outbox";

    async fn database(part: &str) -> (Dsn, sqlx::MySqlPool) {
        let admin = std::env::var("RESULT_INBOX_TEST_ADMIN_DSN").unwrap();
        let root = sqlx::MySqlPool::connect(&admin).await.unwrap();
        // The throwaway server logs every statement for the tests' sake; a
        // production server does not, and the log costs per statement.
        root.execute("SET GLOBAL general_log = 0").await.unwrap();
        let db = format!("bench_outbox_{part}_{}", std::process::id());
        root.execute(format!("CREATE DATABASE {db} CHARACTER SET utf8mb4").as_str())
            .await
            .unwrap();
        root.close().await;
        let base = admin.rsplit_once('/').unwrap().0;
        let dsn = Dsn::parse(&format!("{base}/{db}")).unwrap();
        common::init_outbox(&dsn).await;
        let pool = sqlx::mysql::MySqlPoolOptions::new()
            .max_connections(2)
            .connect(&format!("{base}/{db}"))
            .await
            .unwrap();
        (dsn, pool)
    }

    async fn counters(admin: &sqlx::MySqlPool) -> Counters {
        let rows: Vec<(String, String)> = sqlx::query_as(
            "SHOW GLOBAL STATUS WHERE Variable_name IN ('Questions', 'Innodb_lsn_current', 'Com_commit')",
        )
        .fetch_all(admin)
        .await
        .unwrap();
        let value = |name: &str| -> u64 {
            rows.iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .and_then(|(_, v)| v.parse().ok())
                .unwrap_or(0)
        };
        Counters {
            statements: Some(value("Questions")),
            log_bytes: value("Innodb_lsn_current"),
            transactions: value("Com_commit"),
            server_cpu: common::cpu_seconds(common::mysqld_pid()),
            client_cpu: common::cpu_seconds(std::process::id()),
        }
    }

    async fn run(admin: &sqlx::MySqlPool, sql: &str) {
        admin.execute(sql).await.unwrap();
    }

    async fn truncate(admin: &sqlx::MySqlPool) {
        admin
            .execute("TRUNCATE TABLE receiver_outbox")
            .await
            .unwrap();
    }

    async fn fill(admin: &sqlx::MySqlPool, rows: &[Planned]) {
        for chunk in rows.chunks(FILL_CHUNK) {
            let sql = fill_sql(chunk.len(), |_| "?".to_owned(), "UTC_TIMESTAMP(6)");
            let mut query = sqlx::query(&sql);
            for row in chunk {
                query = query
                    .bind(&row.id)
                    .bind(&row.event)
                    .bind(&row.key)
                    .bind(&row.ordering_key)
                    .bind(&row.body);
            }
            query.execute(admin).await.unwrap();
        }
    }

    async fn pending(admin: &sqlx::MySqlPool) -> u64 {
        let n: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM receiver_outbox WHERE state = 'pending'")
                .fetch_one(admin)
                .await
                .unwrap();
        n as u64
    }
}

/// The CPU seconds of every process of the throwaway PostgreSQL server:
/// the postmaster (`postmaster.pid` names it), the children it has reaped
/// (a pool's closed connections, counted in its `cutime` and `cstime`),
/// and the children still running.
fn postgres_cpu() -> f64 {
    let dir = std::env::var("RESULT_INBOX_TEST_PG_DIR").unwrap_or_default();
    let pid: Option<u32> = std::fs::read_to_string(format!("{dir}/data/postmaster.pid"))
        .ok()
        .and_then(|s| s.lines().next().and_then(|l| l.trim().parse().ok()));
    let Some(parent) = pid else { return 0.0 };
    // Fields after the command's name: ppid is the 2nd, utime, stime,
    // cutime and cstime the 12th to 15th, in clock ticks (100 a second).
    let fields = |pid: u32| -> Vec<u64> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let after = stat.rsplit_once(')').map_or("", |(_, a)| a);
        after
            .split_whitespace()
            .map(|f| f.parse().unwrap_or(0))
            .collect()
    };
    let ticks = |f: &[u64], from: usize, to: usize| -> u64 {
        f.get(from..=to).map_or(0, |t| t.iter().sum())
    };
    let mut total = ticks(&fields(parent), 11, 14);
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let f = fields(child);
        if f.get(1) == Some(&u64::from(parent)) {
            total += ticks(&f, 11, 12);
        }
    }
    total as f64 / 100.0
}

impl Side for Postgres {
    const ENGINE: &'static str = "postgres";
    const ANALYZE: &'static str = "ANALYZE receiver_outbox";

    async fn database(part: &str) -> (Dsn, sqlx::PgPool) {
        let admin = std::env::var("RESULT_INBOX_TEST_PG_ADMIN_DSN").unwrap();
        let root = sqlx::PgPool::connect(&admin).await.unwrap();
        let db = format!("bench_outbox_{part}_{}", std::process::id());
        root.execute(format!("CREATE DATABASE {db} ENCODING 'UTF8'").as_str())
            .await
            .unwrap();
        root.close().await;
        let base = admin.rsplit_once('/').unwrap().0;
        let dsn = Dsn::parse(&format!("{base}/{db}")).unwrap();
        common::init_outbox(&dsn).await;
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(2)
            .connect(&format!("{base}/{db}"))
            .await
            .unwrap();
        (dsn, pool)
    }

    async fn counters(admin: &sqlx::PgPool) -> Counters {
        let (wal, next_xid): (i64, i64) = sqlx::query_as(
            "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint, \
             pg_snapshot_xmax(pg_current_snapshot())::text::bigint",
        )
        .fetch_one(admin)
        .await
        .unwrap();
        Counters {
            statements: None,
            log_bytes: wal as u64,
            transactions: next_xid as u64,
            server_cpu: postgres_cpu(),
            client_cpu: common::cpu_seconds(std::process::id()),
        }
    }

    async fn run(admin: &sqlx::PgPool, sql: &str) {
        admin.execute(sql).await.unwrap();
    }

    async fn truncate(admin: &sqlx::PgPool) {
        admin
            .execute("TRUNCATE TABLE receiver_outbox")
            .await
            .unwrap();
    }

    async fn fill(admin: &sqlx::PgPool, rows: &[Planned]) {
        for chunk in rows.chunks(FILL_CHUNK) {
            let sql = fill_sql(
                chunk.len(),
                |n| format!("${n}"),
                "(statement_timestamp() AT TIME ZONE 'UTC')",
            );
            let mut query = sqlx::query(&sql);
            for row in chunk {
                query = query
                    .bind(&row.id)
                    .bind(&row.event)
                    .bind(&row.key)
                    .bind(&row.ordering_key)
                    .bind(&row.body);
            }
            query.execute(admin).await.unwrap();
        }
    }

    async fn pending(admin: &sqlx::PgPool) -> u64 {
        let n: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM receiver_outbox WHERE state = 'pending'")
                .fetch_one(admin)
                .await
                .unwrap();
        n as u64
    }
}

async fn store<E: Engine>(dsn: &Dsn, connections: u32) -> InboxStore<E> {
    let options = StoreOptions {
        max_connections: connections,
        ..Default::default()
    };
    InboxStore::<E>::open(dsn, scope(), options).await.unwrap()
}

// ---------------------------------------------------------------------
// The endpoint

/// What the endpoint has received: each request's `webhook-id` and when
/// it came, in the order they came.
#[derive(Clone, Default)]
struct Received(Arc<Mutex<Vec<(String, Instant)>>>);

impl Received {
    fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    fn take(&self) -> Vec<(String, Instant)> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

/// A webhook endpoint on a loopback port: hyper's HTTP/1.1 server, each
/// connection a task; every request read whole and answered `204`.
async fn endpoint() -> (String, Received) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let received = Received::default();
    let into = received.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            stream.set_nodelay(true).unwrap();
            let into = into.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request: Request<Incoming>| {
                    let into = into.clone();
                    async move {
                        let came = Instant::now();
                        let id = request
                            .headers()
                            .get("webhook-id")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or_default()
                            .to_owned();
                        let _body = request.into_body().collect().await;
                        into.0.lock().unwrap().push((id, came));
                        let mut answer = Response::new(Empty::<Bytes>::new());
                        *answer.status_mut() = StatusCode::NO_CONTENT;
                        Ok::<_, Infallible>(answer)
                    }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (format!("http://127.0.0.1:{port}/hook"), received)
}

fn targets(url: &str) -> Targets {
    let webhook = Webhook::new(url, WebhookSecret::parse(SECRET).unwrap()).unwrap();
    Targets::new().with(TARGET, webhook).unwrap()
}

/// A relay of the endpoint at `url`, running until the token is cancelled.
fn start_relay<E: Engine>(
    dsn: &Dsn,
    url: &str,
    options: RelayOptions,
) -> (RelayWaker, CancellationToken, tokio::task::JoinHandle<()>) {
    let relay = Relay::<E>::new(dsn.clone(), targets(url), options);
    let waker = relay.waker();
    let stop = CancellationToken::new();
    let token = stop.clone();
    let task = tokio::spawn(async move { relay.run(token).await.expect("the relay runs") });
    (waker, stop, task)
}

// ---------------------------------------------------------------------
// 1. Apply with one effect per delivery against apply without

/// The statements sent between two readings of the counters, less the
/// reading that ended it and `others` more that were not the measured
/// work's.
fn statements_between(before: Counters, after: Counters, others: u64) -> Option<u64> {
    let (b, a) = (before.statements?, after.statements?);
    Some(a.saturating_sub(b).saturating_sub(1 + others))
}

/// What one case cost, summed over its rounds.
#[derive(Default)]
struct Measured {
    deliveries: u64,
    elapsed: Duration,
    statements: Option<u64>,
    log_bytes: u64,
    server_cpu: f64,
    client_cpu: f64,
}

impl Measured {
    fn per_s(&self) -> f64 {
        self.deliveries as f64 / self.elapsed.as_secs_f64()
    }

    fn per_delivery(&self, total: f64) -> f64 {
        total / self.deliveries.max(1) as f64
    }

    fn add(&mut self, deliveries: u64, elapsed: Duration, before: Counters, after: Counters) {
        self.deliveries += deliveries;
        self.elapsed += elapsed;
        self.statements =
            statements_between(before, after, 0).map(|s| self.statements.unwrap_or(0) + s);
        self.log_bytes += after.log_bytes.saturating_sub(before.log_bytes);
        self.server_cpu += after.server_cpu - before.server_cpu;
        self.client_cpu += after.client_cpu - before.client_cpu;
    }
}

/// Fresh deliveries through `service` from `concurrency` callers for
/// `time`, numbered from `next`: how many applied.
async fn apply_round<S>(
    service: &S,
    concurrency: usize,
    time: Duration,
    next: &Arc<AtomicU64>,
) -> u64
where
    S: tower::Service<
            result_inbox::delivery::Delivery<Bytes>,
            Response = result_inbox::inbox::Receipt,
        > + Clone
        + Send
        + 'static,
    S::Error: std::fmt::Debug + Send,
    S::Future: Send,
{
    let stop = Arc::new(AtomicBool::new(false));
    let callers: Vec<_> = (0..concurrency)
        .map(|_| {
            let (service, next, stop) = (service.clone(), next.clone(), stop.clone());
            tokio::spawn(async move {
                let mut done = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    let receipt = service
                        .clone()
                        .oneshot(common::numbered_delivery(n, QUEUE))
                        .await
                        .unwrap();
                    assert_eq!(receipt.outcome, Outcome::Applied);
                    done += 1;
                }
                done
            })
        })
        .collect();
    tokio::time::sleep(time).await;
    stop.store(true, Ordering::Relaxed);
    let mut done = 0;
    for caller in callers {
        done += caller.await.unwrap();
    }
    done
}

/// The ratios of with/without, by concurrency.
type Ratios = Vec<(usize, f64)>;

async fn apply<E: Side>() -> Ratios {
    let (dsn, admin) = E::database("apply").await;
    let time = apply_time() / ROUNDS;
    let mut ratios = Vec::new();
    let mut offset = 0u64;
    for concurrency in APPLY_CONCURRENCY {
        let store = store::<E>(&dsn, concurrency as u32 + 2).await;
        let without: Inbox<TaskView, E> = ServiceBuilder::new()
            .layer(InboxLayer::new(store.clone()))
            .service(TaskView::new());
        let with: Inbox<Notify, E> = ServiceBuilder::new()
            .layer(InboxLayer::new(store))
            .service(notify(apply_targets()));
        let (next_without, next_with) = (
            Arc::new(AtomicU64::new(offset)),
            Arc::new(AtomicU64::new(offset + 10_000_000)),
        );
        offset += 20_000_000;
        let (mut m_without, mut m_with) = (Measured::default(), Measured::default());
        for r in 0..ROUNDS {
            for with_turn in [r % 2 == 0, r % 2 == 1] {
                let before = E::counters(&admin).await;
                let started = Instant::now();
                let done = if with_turn {
                    apply_round(&with, concurrency, time, &next_with).await
                } else {
                    apply_round(&without, concurrency, time, &next_without).await
                };
                let elapsed = started.elapsed();
                let after = E::counters(&admin).await;
                let into = if with_turn {
                    &mut m_with
                } else {
                    &mut m_without
                };
                into.add(done, elapsed, before, after);
            }
        }
        let ratio = m_with.per_s() / m_without.per_s();
        let statements = |m: &Measured| {
            m.statements.map_or("-".to_owned(), |s| {
                format!("{:.2}", m.per_delivery(s as f64))
            })
        };
        println!(
            "outbox apply engine={} concurrency={concurrency} effects_per_delivery={} without_per_s={:.0} with_effect_per_s={:.0} ratio={ratio:.2} \
             statements_per_delivery without={} with={} log_bytes_per_delivery without={:.0} with={:.0} \
             cpu_us_per_delivery_server/client without={:.0}/{:.0} with={:.0}/{:.0}",
            E::ENGINE,
            apply_targets(),
            m_without.per_s(),
            m_with.per_s(),
            statements(&m_without),
            statements(&m_with),
            m_without.per_delivery(m_without.log_bytes as f64),
            m_with.per_delivery(m_with.log_bytes as f64),
            m_without.per_delivery(m_without.server_cpu * 1e6),
            m_without.per_delivery(m_without.client_cpu * 1e6),
            m_with.per_delivery(m_with.server_cpu * 1e6),
            m_with.per_delivery(m_with.client_cpu * 1e6),
        );
        ratios.push((concurrency, ratio));
    }
    admin.close().await;
    ratios
}

// ---------------------------------------------------------------------
// 2. COMMIT to the endpoint's receipt, woken against polling alone

/// A pseudo-random sequence (xorshift), the same in every run.
struct Jitter(u64);

impl Jitter {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Milliseconds at the `q` quantile of sorted `v`.
fn quantile(v: &[f64], q: f64) -> f64 {
    let i = ((v.len() as f64 - 1.0) * q).round() as usize;
    v[i.min(v.len() - 1)]
}

/// Latencies in ms, by mode (woken, polling).
type Latencies = (Vec<f64>, Vec<f64>);

async fn latency<E: Side>() -> Latencies {
    let (dsn, admin) = E::database("latency").await;
    let (url, received) = endpoint().await;
    let inbox: Inbox<Notify, E> = ServiceBuilder::new()
        .layer(InboxLayer::new(store::<E>(&dsn, 4).await))
        .service(Notify::new(TARGET).unwrap());
    let mut jitter = Jitter(0x9e37_79b9_7f4a_7c15);
    let (mut woken, mut polling) = (Vec::new(), Vec::new());
    let mut next = 0u64;
    let per_round = LATENCY_DELIVERIES / 2;
    for round in 0..4 {
        let wake = round % 2 == 0;
        let (waker, stop, task) = start_relay::<E>(&dsn, &url, RelayOptions::default());
        // Its start (the server's version, a first claim) is not measured.
        tokio::time::sleep(Duration::from_millis(300)).await;
        received.take();
        let mut committed = HashMap::new();
        for _ in 0..per_round {
            next += 1;
            let receipt = inbox
                .clone()
                .oneshot(common::numbered_delivery(next, QUEUE))
                .await
                .unwrap();
            // The inbox answers after its COMMIT.
            let at = Instant::now();
            assert_eq!(receipt.outcome, Outcome::Applied);
            if wake {
                waker.wake();
            }
            committed.insert(notify_effect_id(next), at);
            tokio::time::sleep(Duration::from_millis(2 + jitter.next() % 29)).await;
        }
        let until = Instant::now() + Duration::from_secs(10);
        while received.len() < per_round && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let into = if wake { &mut woken } else { &mut polling };
        for (id, came) in received.take() {
            let at = committed.remove(&id).expect("each effect received once");
            into.push(came.duration_since(at).as_secs_f64() * 1e3);
        }
        assert!(
            committed.is_empty(),
            "effects never received: {}",
            committed.len()
        );
        stop.cancel();
        task.await.unwrap();
    }
    assert_eq!(E::pending(&admin).await, 0);
    for (mode, v) in [("woken", &mut woken), ("polling", &mut polling)] {
        v.sort_by(f64::total_cmp);
        println!(
            "outbox latency engine={} mode={mode} deliveries={} commit_to_receipt_ms p50={:.2} p99={:.2} max={:.2}",
            E::ENGINE,
            v.len(),
            quantile(v, 0.5),
            quantile(v, 0.99),
            v[v.len() - 1],
        );
    }
    admin.close().await;
    (woken, polling)
}

// ---------------------------------------------------------------------
// 3. Relay throughput

/// The backlog of `effects` over `keys` ordering keys: effect `n` is the
/// `n / keys`th of key `n % keys`, recorded in `n`'s order.
fn backlog(effects: usize, keys: usize) -> (Vec<Planned>, HashMap<String, (usize, usize)>) {
    let scope = scope();
    let target = Target::parse(TARGET).unwrap();
    let mut rows = Vec::with_capacity(effects);
    let mut of = HashMap::with_capacity(effects);
    for n in 0..effects {
        let (key, index) = (n % keys, n / keys);
        let event = EventId::parse(&format!("{:032x}", (1u128 << 120) + n as u128)).unwrap();
        let effect_key = EffectKey::parse(&format!("effect-{n}")).unwrap();
        let id = EffectId::derive(&scope, &event, &target, &effect_key);
        // About the size of a notification.
        let body = format!(
            r#"{{"receiver":"task-result-view","queue_id":"{QUEUE}","task_id":"task-{key:08}","state":"SUCCEEDED","version":{index},"event_id":"{}","result_sha256":"{}"}}"#,
            event.as_str(),
            "0".repeat(64)
        );
        of.insert(id.as_str().to_owned(), (key, index));
        rows.push(Planned {
            id: id.as_str().to_owned(),
            event: event.as_str().to_owned(),
            key: effect_key.as_str().to_owned(),
            ordering_key: format!("task-{key:08}"),
            body: body.into_bytes(),
        });
    }
    (rows, of)
}

/// One drain: effects per second, the statements and CPU per effect.
struct Drained {
    per_s: f64,
    statements: Option<f64>,
    transactions: f64,
    server_cpu_us: f64,
    client_cpu_us: f64,
}

async fn drain<E: Side>(
    dsn: &Dsn,
    admin: &sqlx::Pool<E>,
    url: &str,
    received: &Received,
    (concurrency, keys, effects): (usize, usize, usize),
) -> Drained {
    E::truncate(admin).await;
    let (rows, of) = backlog(effects, keys);
    E::fill(admin, &rows).await;
    // The statistics of the table as it is now, as the server's upkeep
    // soon has them, rather than of the previous case's.
    E::run(admin, E::ANALYZE).await;
    received.take();
    let mut options = RelayOptions::default();
    options.concurrency = concurrency;
    let before = E::counters(admin).await;
    let started = Instant::now();
    let (_waker, stop, task) = start_relay::<E>(dsn, url, options);
    let until = started + Duration::from_secs(600);
    while received.len() < effects {
        assert!(
            Instant::now() < until,
            "the relay did not drain its backlog"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let mut counts = 0;
    while E::pending(admin).await > 0 {
        counts += 1;
        assert!(Instant::now() < until, "the relay did not record its sends");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    counts += 1;
    let elapsed = started.elapsed();
    let after = E::counters(admin).await;
    stop.cancel();
    task.await.unwrap();

    // Each effect once, each key's in record order.
    let seen = received.take();
    assert_eq!(seen.len(), effects, "each effect once");
    let mut last: Vec<Option<usize>> = vec![None; keys];
    for (id, _) in &seen {
        let (key, index) = of[id];
        assert!(
            last[key].is_none_or(|l| l < index),
            "key {key}: effect {index} after {:?}",
            last[key]
        );
        last[key] = Some(index);
    }
    let per = |total: f64| total / effects as f64;
    Drained {
        per_s: effects as f64 / elapsed.as_secs_f64(),
        // Less the pending counts read while waiting: not the relay's.
        statements: statements_between(before, after, counts).map(|s| per(s as f64)),
        transactions: per(after.transactions.saturating_sub(before.transactions) as f64),
        server_cpu_us: per((after.server_cpu - before.server_cpu) * 1e6),
        client_cpu_us: per((after.client_cpu - before.client_cpu) * 1e6),
    }
}

/// Effects per second at each drain, by its (concurrency, keys).
type Rates = Vec<((usize, usize), f64)>;

async fn throughput<E: Side>() -> Rates {
    let (dsn, admin) = E::database("relay").await;
    let (url, received) = endpoint().await;
    let mut rates = Vec::new();
    for case in DRAINS {
        let d = drain::<E>(&dsn, &admin, &url, &received, case).await;
        let (concurrency, keys, effects) = case;
        println!(
            "outbox relay engine={} concurrency={concurrency} keys={keys} effects={effects} effects_per_s={:.0} \
             statements_per_effect={} transactions_per_effect={:.2} cpu_us_per_effect_server/client={:.0}/{:.0} order=kept",
            E::ENGINE,
            d.per_s,
            d.statements.map_or("-".to_owned(), |s| format!("{s:.2}")),
            d.transactions,
            d.server_cpu_us,
            d.client_cpu_us,
        );
        rates.push(((concurrency, keys), d.per_s));
    }
    admin.close().await;
    rates
}

// ---------------------------------------------------------------------

fn only(part: &str) -> bool {
    std::env::var("OUTBOX_BENCH_PARTS").map_or(true, |parts| parts.split(',').any(|p| p == part))
}

fn goal(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "MISSED"
    }
}

#[tokio::main]
async fn main() {
    if std::env::var("RESULT_INBOX_TEST_ADMIN_DSN").is_err()
        || std::env::var("RESULT_INBOX_TEST_PG_ADMIN_DSN").is_err()
    {
        eprintln!(
            "outbox bench: needs both throwaway servers; run it with `make bench` \
             (scripts/with-postgres.sh scripts/with-mysql.sh cargo bench --bench outbox --features result-inbox/cli)"
        );
        return;
    }
    let mut goals = Vec::new();
    if only("apply") {
        let mysql = apply::<MySql>().await;
        let postgres = apply::<Postgres>().await;
        // The goal is for one effect per delivery.
        let measured = if apply_targets() == 1 {
            vec![("mysql", mysql), ("postgres", postgres)]
        } else {
            Vec::new()
        };
        for (engine, ratios) in measured {
            for (concurrency, ratio) in ratios {
                goals.push(format!(
                    "outbox goal apply_with_effect/without>=0.85 engine={engine} concurrency={concurrency}: {} ({ratio:.2})",
                    goal(ratio >= 0.85)
                ));
            }
        }
    }
    if only("latency") {
        let mysql = latency::<MySql>().await;
        let postgres = latency::<Postgres>().await;
        for (engine, (woken, _)) in [("mysql", mysql), ("postgres", postgres)] {
            let p50 = quantile(&woken, 0.5);
            goals.push(format!(
                "outbox goal woken_commit_to_receipt_p50<=5ms engine={engine}: {} ({p50:.2} ms)",
                goal(p50 <= 5.0)
            ));
        }
    }
    if only("relay") {
        let mysql = throughput::<MySql>().await;
        let postgres = throughput::<Postgres>().await;
        for (engine, rates) in [("mysql", mysql), ("postgres", postgres)] {
            let best = rates.iter().map(|(_, r)| *r).fold(0.0, f64::max);
            goals.push(format!(
                "outbox goal relay_effects_per_s>=2000 engine={engine}: {} ({best:.0}, the best concurrency)",
                goal(best >= 2000.0)
            ));
        }
    }
    for line in goals {
        println!("{line}");
    }
}
