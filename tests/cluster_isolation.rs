//! A Galera node cut off from the cluster under a running stream
//! (`gmcast.isolate`): its COMMITs hang, then it answers 1047 ("WSREP has
//! not yet prepared node for application use") to every statement. Its
//! consumer opens its breaker no later than the first such answer (a COMMIT
//! that got no answer may open it sooner) and leaves the retrying to its
//! probe: no retry storm, no flood of log lines, nothing expired. Its own
//! test binary, because it takes a node away from everything else running
//! beside it.

use crate::common;

use std::time::Duration;

use common::galera::{
    applied_once_everywhere, consuming_on_every_node, isolate_node, wait_until_synced, ClusterDb,
};
use common::orbit::OrbitDev;

const TASKS: u64 = 200;

/// Seconds since midnight of a log line's timestamp
/// (`2026-12-02T01:00:41.162287Z  WARN …`).
fn at(line: &str) -> f64 {
    let time = &line[11..26];
    let (h, rest) = time.split_at(2);
    let (m, s) = rest[1..].split_at(2);
    h.parse::<f64>().unwrap() * 3600.0
        + m.parse::<f64>().unwrap() * 60.0
        + s[1..].parse::<f64>().unwrap()
}

#[tokio::test]
async fn an_isolated_node_opens_its_consumer_s_breaker_at_the_first_1047_without_a_retry_storm() {
    let db = ClusterDb::initialized().await;
    let (orbit, creds, sub) = OrbitDev::subscribed(2_000, 30, "inbox-isolated").await;
    let mut consumers = consuming_on_every_node(&db, &orbit, &creds, &sub, TASKS).await;
    let total = 2 * TASKS;

    let before = consumers[2].output().len();
    isolate_node(2, true).await;
    consumers[2]
        .wait_for_output(Duration::from_secs(30), |out| {
            out[before..].contains("database unreachable: taking no new deliveries")
        })
        .await;
    // As long again as a delivery's whole budget: a storm would show.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let isolated = consumers[2].output()[before..].to_owned();
    isolate_node(2, false).await;

    let lines: Vec<&str> = isolated.lines().collect();
    let first_1047 = lines
        .iter()
        .find(|l| l.contains("MySQL error 1047"))
        .unwrap_or_else(|| panic!("no 1047 while isolated:\n{isolated}"));
    let breaker = lines
        .iter()
        .find(|l| l.contains("database unreachable: taking no new deliveries"))
        .unwrap();
    let opened_after = at(breaker) - at(first_1047);
    eprintln!(
        "isolated: {} log lines, breaker open {opened_after:.3} s after the first 1047",
        lines.len()
    );
    assert!(
        opened_after <= 1.0,
        "breaker open {opened_after:.3} s after the first 1047:\n{isolated}"
    );
    // Before the node finds itself cut off, its COMMITs hang or fail
    // certification (1180, retried as deadlocks are); from its first 1047
    // on, only the first delivery to meet one runs again, once.
    let retries: Vec<&&str> = lines.iter().filter(|l| l.contains("retrying")).collect();
    let not_ready = retries
        .iter()
        .filter(|l| l.contains("MySQL error 1047"))
        .count();
    assert!(
        not_ready <= 1,
        "{not_ready} retries after a 1047:\n{isolated}"
    );
    assert!(
        retries.len() <= 16,
        "{} retries while isolated:\n{isolated}",
        retries.len()
    );
    assert!(
        lines.len() <= 40,
        "{} log lines in about 5 s of isolation:\n{isolated}",
        lines.len()
    );

    wait_until_synced(2, Duration::from_secs(120)).await;
    applied_once_everywhere(&db, &orbit, &creds, &sub, &mut consumers, total).await;
}
