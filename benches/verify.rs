//! `receiver verify` over a large inbox: rows per second and the verifier's
//! peak memory, at two sizes, so that memory is seen not to grow with the
//! number of events. A throwaway server; the release binary as a process.
//!
//! `make bench` runs it. `VERIFY_ROWS` sets the large size (default
//! 1 000 000 inbox rows: half as many tasks, each with a submitted and a
//! succeeded event, both applied); the small size is a tenth of it.
//! Prints, per size:
//!
//! ```text
//! verify inbox_rows=N task_views=M seconds=… rows_per_s=… peak_rss_kib=… problems=0
//! ```

#[path = "../tests/common/mod.rs"]
#[allow(unused_imports)]
mod common;

use std::process::{Command, Stdio};
use std::time::Instant;

use common::fill::{Fill, Ids};
use common::{dsn_for, TestDb};
use sqlx::Executor;

/// Fills the tables with `rows` inbox rows (2 per task) and their views.
async fn fill(db: &TestDb, rows: u64) {
    Fill {
        consumer: "bench",
        queue: "0123456789abcdef0123456789abcdef",
        rows,
        versions: 2,
        ids: Ids::Sequential,
        aged_rows: 0,
        aged_days: 0,
    }
    .run(&db.pool().await, 100_000)
    .await;
}

/// Runs the release `receiver verify`; returns (its last line, seconds,
/// peak RSS in KiB).
fn run_verify(dsn: &str) -> (String, f64, i64) {
    let bin = concat!(env!("CARGO_MANIFEST_DIR"), "/target/release/receiver");
    assert!(
        std::path::Path::new(bin).exists(),
        "{bin} is missing: cargo build --release --bins"
    );
    let started = Instant::now();
    let child = Command::new(bin)
        .arg("verify")
        .env("ORBIT_RECEIVER_DSN", dsn)
        // VERIFY_LOG=sqlx::query=info shows each statement's time.
        .env(
            "RECEIVER_LOG",
            std::env::var("VERIFY_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let (output, _, usage) = common::reap_with_usage(child);
    let rss = usage.ru_maxrss;
    let seconds = started.elapsed().as_secs_f64();
    let last = output.lines().last().unwrap_or_default().to_owned();
    (last, seconds, rss)
}

#[tokio::main]
async fn main() {
    let large: u64 = std::env::var("VERIFY_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    // The throwaway server logs every statement for the tests' sake; a
    // production server does not.
    let admin = sqlx::MySqlPool::connect(&common::admin_dsn())
        .await
        .unwrap();
    admin.execute("SET GLOBAL general_log = 0").await.unwrap();
    for rows in [large / 10, large] {
        let db = TestDb::initialized().await;
        let filling = Instant::now();
        fill(&db, rows).await;
        eprintln!(
            "filled {rows} inbox rows in {:.1} s",
            filling.elapsed().as_secs_f64()
        );
        let (summary, seconds, rss) = run_verify(&dsn_for(&db.name));
        assert!(
            summary.ends_with("pruned_rows=0 problems=0 ok=true"),
            "{summary}"
        );
        let views = rows / 2;
        assert!(
            summary.starts_with(&format!("verify inbox_rows={rows} task_views={views} ")),
            "{summary}"
        );
        println!(
            "verify inbox_rows={rows} task_views={views} seconds={seconds:.1} rows_per_s={:.0} peak_rss_kib={rss} problems=0",
            (rows + views) as f64 / seconds
        );
        db.admin
            .execute(format!("DROP DATABASE `{}`", db.name).as_str())
            .await
            .unwrap();
    }
}
