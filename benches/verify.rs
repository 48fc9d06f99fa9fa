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

use common::{dsn_for, EventSpec, TestDb};
use sqlx::Executor;

/// A canonical event as the receiver stores it, with `@E`, `@T` and `@Q`
/// standing for the event, task and queue ids.
fn template(version: u64, event_type: &str, state: &str, result: Option<&str>) -> String {
    let raw = EventSpec {
        id: "e".repeat(32),
        queue_id: &"a".repeat(32),
        task_id: &"b".repeat(32),
        version,
        event_type,
        state,
        result,
    }
    .json();
    result_inbox::digest::canonicalize(raw.as_bytes())
        .unwrap()
        .as_str()
        .replace(&"e".repeat(32), "@E")
        .replace(&"a".repeat(32), "@Q")
        .replace(&"b".repeat(32), "@T")
}

/// `template` as an SQL expression over the id expressions.
fn sql_text(template: &str, event: &str, task: &str, queue: &str) -> String {
    let quoted = template.replace('\'', "''");
    format!("REPLACE(REPLACE(REPLACE('{quoted}', '@E', {event}), '@T', {task}), '@Q', '{queue}')")
}

/// Fills the tables with `rows` inbox rows (2 per task) and their views, in
/// SQL: digits cross-joined give the numbers, ids are their zero-padded hex.
async fn fill(db: &TestDb, rows: u64) {
    let queue = "0123456789abcdef0123456789abcdef";
    let submitted = template(1, "task.submitted", "PENDING", None);
    let succeeded = template(
        2,
        "task.succeeded",
        "SUCCEEDED",
        Some(
            r#"{"rows":1234,"total":123456789012345678901234567890,"message":"Verarbeitung abgeschlossen – 处理完成"}"#,
        ),
    );
    let pool = db.pool().await;
    let digits = "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 \
        UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 \
        UNION ALL SELECT 8 UNION ALL SELECT 9)";
    let chunk = 100_000u64;
    for start in (0..rows).step_by(chunk as usize) {
        let n = "(a.d + 10 * b.d + 100 * c.d + 1000 * d.d + 10000 * e.d)";
        let numbers = format!(
            "SELECT {start} + {n} AS k FROM {digits} a, {digits} b, {digits} c, {digits} d, {digits} e \
             WHERE {start} + {n} < {rows}"
        );
        let event = "LOWER(LPAD(HEX(k), 32, '0'))";
        let task = "LOWER(CONCAT('7', LPAD(HEX(FLOOR(k / 2)), 31, '0')))";
        let text = format!(
            "CASE WHEN k % 2 = 0 THEN {} ELSE {} END",
            sql_text(&submitted, event, task, queue),
            sql_text(&succeeded, event, task, queue)
        );
        pool.execute(
            format!(
                "INSERT INTO receiver_inbox SELECT 'bench', '{queue}', {event}, SHA2(t, 256), t, 1, \
                 UTC_TIMESTAMP(6) FROM (SELECT k, {text} AS t FROM ({numbers}) AS n) AS rows_"
            )
            .as_str(),
        )
        .await
        .unwrap();
        pool.execute(
            format!(
                "INSERT INTO receiver_task_views SELECT 'bench', '{queue}', {task}, 2, {event}, \
                 'SUCCEEDED', NULL, 2, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) FROM ({numbers}) AS n \
                 WHERE k % 2 = 1" // (The view's result is not part of what verify compares.)
            )
            .as_str(),
        )
        .await
        .unwrap();
    }
}

/// Runs the release `receiver verify`; returns (its last line, seconds,
/// peak RSS in KiB).
#[expect(
    clippy::zombie_processes,
    reason = "reaped by wait4, which also reports its peak memory"
)]
fn run_verify(dsn: &str) -> (String, f64, i64) {
    let bin = concat!(env!("CARGO_MANIFEST_DIR"), "/target/release/receiver");
    assert!(
        std::path::Path::new(bin).exists(),
        "{bin} is missing: cargo build --release --bins"
    );
    let started = Instant::now();
    let mut child = Command::new(bin)
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
    let pid = child.id() as libc::pid_t;
    let output = {
        use std::io::Read;
        let mut stdout = child.stdout.take().unwrap();
        let mut text = String::new();
        stdout.read_to_string(&mut text).unwrap();
        text
    };
    let mut status = 0;
    // SAFETY: wait4 fills the two out-parameters we pass and nothing else.
    let rss = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::wait4(pid, &mut status, 0, &mut usage);
        usage.ru_maxrss
    };
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
        assert!(summary.ends_with("problems=0 ok=true"), "{summary}");
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
