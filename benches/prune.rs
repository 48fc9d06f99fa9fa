//! `receiver prune` beside live traffic: its own speed, and what a
//! `receiver consume` applying at full rate keeps of its throughput and
//! latency while a prune runs on the same table. Real processes (release
//! binaries), orbit-dev, a throwaway server — or, under
//! `scripts/with-galera.sh`, the three-node cluster, with a consumer on
//! every node and the prune on the first.
//!
//! `make bench` runs both. The table holds `PRUNE_BENCH_ROWS` inbox rows
//! (default 1 000 000; four versions per task, ids spread over the key
//! space as Orbit's are), the first half received 30 days ago; prune
//! `--older-than 7d` with its defaults (1 000 rows a batch, then a pause
//! of at least 50 ms and four times the batch's time) may delete three
//! quarters of that half and keeps each view's last event. The consumer's rounds (`PRUNE_BENCH_ROUNDS` of each kind,
//! default 5, of `PRUNE_BENCH_DELIVERIES` fresh events, default 10 000)
//! alternate between no prune and a prune running
//! (stopped with SIGTERM after the round, resumed in the next), so that a
//! drift of the machine weighs on both. The apply latency comes from the
//! consumer's own `receiver_apply_duration_seconds` histogram, interpolated
//! within its buckets. Prints, per round and then in all:
//!
//! ```text
//! prune single|cluster round=R without_per_s=… with_per_s=… ratio=… p50_ms without=… with=… p99_ms without=… with=… prune_rows_per_s=…
//! prune single|cluster rounds=R deliveries=N without_per_s=… with_per_s=… ratio=… p99_ms without=… with=… failed=0 retries without=… with=… prune_rows_per_s_beside_traffic=… prune_retries=…
//! prune single|cluster alone deleted=… seconds=… rows_per_s=… cpu_ms_per_1000_rows prune=… mysqld=… total_deleted=… kept_latest=…
//! ```

#[path = "../tests/common/mod.rs"]
#[allow(unused_imports)]
mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::consume::Consume;
use common::fill::{Fill, Ids};
use common::galera::ClusterDb;
use common::orbit::{http, OrbitDev, QueueCredentials};
use common::{random_hex, EventSpec, TestDb};
use result_inbox::db::schema::{self, Existing, InitOptions};
use result_inbox::db::Dsn;
use result_inbox::event::EventType;
use sqlx::{Executor, MySqlPool};

const NAME: &str = "bench";

const PRUNE_GRANTS: [&str; 3] = [
    "SELECT, DELETE ON `{db}`.receiver_inbox",
    "SELECT ON `{db}`.receiver_task_views",
    "SELECT, INSERT, UPDATE ON `{db}`.receiver_pruned",
];

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn release(bin: &str) -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/target/release/").to_owned() + bin;
    assert!(
        std::path::Path::new(&path).exists(),
        "{path} is missing: cargo build --release --workspace --bins --features result-inbox/cli"
    );
    path
}

/// Where the bench runs: one server, or the cluster's three nodes.
struct Target {
    /// The receiver database's DSN on each node consumers run on.
    dsns: Vec<String>,
    /// An administrator's pool on the first node.
    admin: MySqlPool,
    /// The prune account's DSN on the first node.
    prune_dsn: String,
}

impl Target {
    async fn single() -> Target {
        let db = TestDb::initialized_with_retention().await;
        let (user, password) = db.user_with(&PRUNE_GRANTS).await;
        Target {
            dsns: vec![common::dsn_for(&db.name)],
            admin: db.pool().await,
            prune_dsn: db.dsn_of(&user, &password),
        }
    }

    async fn cluster() -> Target {
        let db = ClusterDb::initialized().await;
        // Prune's tally beside the two tables, as `receiver init
        // --keep-existing --retention` adds it.
        let options = InitOptions {
            existing: Existing::Report,
            retention: true,
            ..InitOptions::default()
        };
        let first = Dsn::parse(&db.dsn(0)).unwrap();
        schema::init_with(&first, options).await.unwrap();
        let admin = db.pool(0).await;
        let (user, password) = (format!("pr_{}", random_hex(4)), random_hex(8));
        admin
            .execute(format!("CREATE USER '{user}'@'%' IDENTIFIED BY '{password}'").as_str())
            .await
            .unwrap();
        for grant in PRUNE_GRANTS {
            let grant = grant.replace("{db}", &db.name);
            admin
                .execute(format!("GRANT {grant} TO '{user}'@'%'").as_str())
                .await
                .unwrap();
        }
        let prune_dsn = db
            .dsn(0)
            .replacen("root@", &format!("{user}:{password}@"), 1);
        Target {
            dsns: (0..3).map(|node| db.dsn(node)).collect(),
            admin,
            prune_dsn,
        }
    }
}

/// A running `receiver prune`.
struct Pruning(Child);

impl Pruning {
    fn start(target: &Target, queue: &str) -> Pruning {
        let child = Command::new(release("receiver"))
            .args(["prune", "--older-than", "7d"])
            .env("RECEIVER_PRUNE_DSN", &target.prune_dsn)
            .env("RECEIVER_NAME", NAME)
            .env("ORBIT_QUEUE_ID", queue)
            // PRUNE_LOG=sqlx::query=info shows each statement's time.
            .env(
                "RECEIVER_LOG",
                std::env::var("PRUNE_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        Pruning(child)
    }

    /// Stops it (SIGTERM) and returns its summary line.
    fn stop(self) -> String {
        common::sigterm(self.0.id());
        self.finish()
    }

    fn finish(self) -> String {
        self.finish_with_cpu().0
    }

    /// Waits for it; returns its summary line and the CPU seconds (user
    /// and system) it used.
    fn finish_with_cpu(mut self) -> (String, f64) {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut self.0.stdout.take().unwrap(), &mut text).unwrap();
        let mut status = 0;
        // SAFETY: wait4 fills the two out-parameters we pass and nothing else.
        let cpu = unsafe {
            let mut usage: libc::rusage = std::mem::zeroed();
            libc::wait4(self.0.id() as libc::pid_t, &mut status, 0, &mut usage);
            let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
            seconds(usage.ru_utime) + seconds(usage.ru_stime)
        };
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "prune failed"
        );
        (text, cpu)
    }
}

fn field(line: &str, key: &str) -> f64 {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
}

/// What one consumer round measured.
#[derive(Default)]
struct Round {
    seconds: f64,
    /// Per bucket bound, applied deliveries at or below it, summed over the
    /// consumers.
    buckets: Vec<(f64, f64)>,
    failed: f64,
    retries: f64,
}

impl Round {
    /// The `q` quantile of the apply latency in milliseconds, linear within
    /// its bucket.
    fn quantile_ms(&self, q: f64) -> f64 {
        let total = self.buckets.last().map_or(0.0, |b| b.1);
        let want = q * total;
        let mut below = (0.0, 0.0);
        for &(bound, count) in &self.buckets {
            if count >= want {
                let within = if count > below.1 {
                    (want - below.1) / (count - below.1)
                } else {
                    0.0
                };
                let bound = if bound.is_finite() { bound } else { below.0 };
                return 1000.0 * (below.0 + within * (bound - below.0));
            }
            below = (bound, count);
        }
        f64::NAN
    }
}

/// Reads the consumer's `/metrics`: the applied deliveries' latency
/// buckets, the deliveries of any other class, the transaction retries.
async fn scrape(addr: &str, round: &mut Round) {
    let (status, text) = http("GET", &format!("http://{addr}/metrics"), "-", String::new()).await;
    assert_eq!(status, 200);
    let mut buckets = Vec::new();
    for line in text.lines() {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let value: f64 = value.parse().unwrap_or(0.0);
        if let Some(labels) = series.strip_prefix("receiver_apply_duration_seconds_bucket{") {
            if labels.contains(r#"class="applied""#) {
                let le = labels
                    .split(r#"le=""#)
                    .nth(1)
                    .unwrap_or("")
                    .trim_end_matches("\"}");
                let bound = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().unwrap()
                };
                buckets.push((bound, value));
            }
        } else if series.starts_with("receiver_deliveries_total{")
            && !series.contains(r#"class="applied""#)
        {
            round.failed += value;
        } else if series.starts_with("receiver_transaction_retries_total") {
            round.retries += value;
        }
    }
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    if round.buckets.is_empty() {
        round.buckets = buckets;
    } else {
        for (sum, (_, count)) in round.buckets.iter_mut().zip(buckets) {
            sum.1 += count;
        }
    }
}

fn free_addr() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().to_string()
}

/// Injects `deliveries` fresh events into a new subscription, consumes
/// them with one `receiver consume` per DSN, and measures.
async fn consume_round(
    orbit: &OrbitDev,
    creds: &QueueCredentials,
    target: &Target,
    deliveries: usize,
) -> Round {
    let sub = orbit
        .client(creds)
        .create_subscription(&EventType::ALL)
        .await
        .unwrap();
    for _ in 0..deliveries {
        let task = random_hex(16);
        let event = EventSpec::submitted(&creds.queue_id, &task);
        orbit.inject(&sub.id, &event.json()).await;
    }
    let started = Instant::now();
    let mut consumers = Vec::new();
    for dsn in &target.dsns {
        let addr = free_addr();
        let consume = Consume::start(
            orbit,
            creds,
            dsn,
            &sub.id,
            NAME,
            &[("RECEIVER_LOG", "warn"), ("RECEIVER_METRICS_ADDR", &addr)],
        );
        consumers.push((consume, addr));
    }
    orbit
        .wait_for_counts(creds, &sub.id, Duration::from_secs(600), |c| {
            c["acked"] == deliveries as u64
        })
        .await;
    let mut round = Round {
        seconds: started.elapsed().as_secs_f64(),
        ..Round::default()
    };
    for (mut consume, addr) in consumers {
        scrape(&addr, &mut round).await;
        assert!(consume.terminate().success(), "{}", consume.output());
    }
    round
}

#[tokio::main]
async fn main() {
    let cluster = std::env::var("RESULT_INBOX_GALERA_DSNS").is_ok();
    if !cluster && std::env::var("RESULT_INBOX_TEST_ADMIN_DSN").is_err() {
        eprintln!("prune bench: needs a server or the cluster; run it with `make bench`");
        return;
    }
    let rows = setting("PRUNE_BENCH_ROWS", 1_000_000) / 8 * 8;
    let deliveries = setting("PRUNE_BENCH_DELIVERIES", 10_000) as usize;
    let rounds = setting("PRUNE_BENCH_ROUNDS", 5) as usize;
    let target = if cluster {
        Target::cluster().await
    } else {
        // The throwaway server logs every statement for the tests' sake;
        // a production server does not.
        let admin = MySqlPool::connect(&common::admin_dsn()).await.unwrap();
        admin.execute("SET GLOBAL general_log = 0").await.unwrap();
        Target::single().await
    };
    let where_ = if cluster { "cluster" } else { "single" };

    let orbit = OrbitDev::start(30_000, 5);
    let creds = orbit.bootstrap("bench-prune", None).await;
    let filling = Instant::now();
    Fill {
        consumer: NAME,
        queue: &creds.queue_id,
        rows,
        versions: 4,
        ids: Ids::Hashed,
        aged_rows: rows / 2,
        aged_days: 30,
    }
    // Small statements on the cluster: each is one write set.
    .run(&target.admin, if cluster { 10_000 } else { 100_000 })
    .await;
    eprintln!(
        "prune bench ({where_}): filled {rows} inbox rows in {:.1} s",
        filling.elapsed().as_secs_f64()
    );

    let (mut without, mut with) = (Vec::new(), Vec::new());
    let (mut deleted, mut during_s, mut prune_retries) = (0.0, 0.0, 0.0);
    for round in 1..=rounds {
        let alone = consume_round(&orbit, &creds, &target, deliveries).await;
        let pruning = Pruning::start(&target, &creds.queue_id);
        let beside = consume_round(&orbit, &creds, &target, deliveries).await;
        let summary = pruning.stop();
        deleted += field(&summary, "deleted");
        during_s += field(&summary, "elapsed_s");
        prune_retries += field(&summary, "retries");
        let per_s = |r: &Round| deliveries as f64 / r.seconds;
        println!(
            "prune {where_} round={round} without_per_s={:.0} with_per_s={:.0} ratio={:.2} \
             p50_ms without={:.2} with={:.2} p99_ms without={:.2} with={:.2} prune_rows_per_s={:.0}",
            per_s(&alone),
            per_s(&beside),
            per_s(&beside) / per_s(&alone),
            alone.quantile_ms(0.5),
            beside.quantile_ms(0.5),
            alone.quantile_ms(0.99),
            beside.quantile_ms(0.99),
            field(&summary, "deleted") / field(&summary, "elapsed_s"),
        );
        without.push(alone);
        with.push(beside);
    }
    let rate = |rounds: &[Round]| {
        (deliveries * rounds.len()) as f64 / rounds.iter().map(|r| r.seconds).sum::<f64>()
    };
    let merged = |rounds: &[Round]| {
        let mut all = Round::default();
        for r in rounds {
            if all.buckets.is_empty() {
                all.buckets = r.buckets.clone();
            } else {
                for (sum, (_, count)) in all.buckets.iter_mut().zip(&r.buckets) {
                    sum.1 += count;
                }
            }
            all.failed += r.failed;
            all.retries += r.retries;
        }
        all
    };
    let (a, b) = (merged(&without), merged(&with));
    println!(
        "prune {where_} rounds={rounds} deliveries={} without_per_s={:.0} with_per_s={:.0} ratio={:.2} \
         p99_ms without={:.2} with={:.2} failed={} retries without={} with={} prune_rows_per_s_beside_traffic={:.0} prune_retries={}",
        deliveries * rounds,
        rate(&without),
        rate(&with),
        rate(&with) / rate(&without),
        a.quantile_ms(0.99),
        b.quantile_ms(0.99),
        a.failed + b.failed,
        a.retries,
        b.retries,
        deleted / during_s,
        prune_retries,
    );

    let mysqld_before = common::cpu_seconds(common::mysqld_pid());
    let (summary, cpu) = Pruning::start(&target, &creds.queue_id).finish_with_cpu();
    let mysqld = common::cpu_seconds(common::mysqld_pid()) - mysqld_before;
    let total = deleted + field(&summary, "deleted");
    let alone = field(&summary, "deleted");
    println!(
        "prune {where_} alone deleted={alone} seconds={:.1} rows_per_s={:.0} cpu_ms_per_1000_rows prune={:.0} mysqld={:.0} total_deleted={total} kept_latest={}",
        field(&summary, "elapsed_s"),
        alone / field(&summary, "elapsed_s"),
        1e6 * cpu / alone,
        1e6 * mysqld / alone,
        field(&summary, "kept_latest"),
    );
    assert_eq!(
        total as u64,
        rows / 2 / 4 * 3,
        "prune deletes the three older versions of every old task"
    );
    assert_eq!(
        a.failed + b.failed,
        0.0,
        "a delivery failed beside the prune"
    );
}
