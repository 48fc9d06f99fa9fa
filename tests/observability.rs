//! What an operator sees of a running `receiver consume`: `/metrics` counts
//! every kind of delivery as it happened (read back with a real Prometheus
//! text parser), `/healthz` and `/readyz` answer, and the log lines carry
//! what `receiver digest` and a person need — as JSON too.

use crate::common;

use std::collections::HashMap;
use std::process::Command;
use std::time::Duration;

use common::consume::Consume;
use common::metrics::{consume_with_metrics, scrape, value};
use common::orbit::{http, OrbitDev};
use common::{random_hex, EventSpec, TestDb};
use prometheus_parse::Value;

#[tokio::test]
async fn metrics_count_each_kind_of_delivery_and_ack_as_it_happened() {
    // A budget of one attempt: a conflict or a rejection is seen once, then
    // expires, so each is counted exactly once.
    let (orbit, creds, sub) = OrbitDev::subscribed(1_000, 1, "metrics-kinds").await;
    let db = TestDb::initialized().await;
    let (mut consume, url) = consume_with_metrics(&orbit, &creds, &db, &sub, &[]).await;

    let task = random_hex(16);
    let first = EventSpec {
        id: random_hex(16),
        queue_id: &creds.queue_id,
        task_id: &task,
        version: 2,
        event_type: "task.succeeded",
        state: "SUCCEEDED",
        result: Some(r#"{"n":1}"#),
    };
    orbit.inject(&sub, &first.json()).await;
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(20), |c| c["acked"] == 1)
        .await;

    let older = EventSpec {
        id: random_hex(16),
        version: 1,
        event_type: "task.submitted",
        state: "PENDING",
        result: None,
        ..first
    };
    let same_id_other_content = EventSpec {
        id: first.id.clone(),
        result: Some(r#"{"n":2}"#),
        ..first
    };
    let type_contradicts_state = EventSpec {
        id: random_hex(16),
        task_id: &task,
        event_type: "task.cancelled",
        state: "SUCCEEDED",
        ..first
    };
    for event in [
        &first,
        &older,
        &same_id_other_content,
        &type_contradicts_state,
    ] {
        orbit.inject(&sub, &event.json()).await;
    }
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(30), |c| {
            c["acked"] == 3 && c["expired"] == 2
        })
        .await;

    let metrics = scrape(&url).await;
    let deliveries = |class| value(&metrics, "receiver_deliveries_total", &[("class", class)]);
    for (class, expected) in [
        ("applied", 1.0),
        ("duplicate", 1.0),
        ("stale", 1.0),
        ("conflict", 1.0),
        ("rejected", 1.0),
    ] {
        assert_eq!(deliveries(class), Some(expected), "class {class}");
    }
    // The classes that did not happen read 0, so that a rate sees the
    // first one.
    assert_eq!(deliveries("unconfirmed"), Some(0.0));
    assert_eq!(
        value(&metrics, "receiver_acks_total", &[("result", "confirmed")]),
        Some(3.0)
    );
    assert_eq!(
        value(&metrics, "receiver_acks_total", &[("result", "refused")]),
        Some(0.0)
    );
    let applies: f64 = ["applied", "duplicate", "stale", "conflict", "rejected"]
        .iter()
        .map(|c| {
            value(
                &metrics,
                "receiver_apply_duration_seconds_count",
                &[("class", c)],
            )
            .unwrap_or(0.0)
        })
        .sum();
    assert_eq!(applies, 5.0);
    assert_eq!(
        value(&metrics, "receiver_deliveries_in_flight", &[]),
        Some(0.0)
    );
    assert_eq!(value(&metrics, "receiver_deliveries_held", &[]), Some(0.0));
    assert_eq!(value(&metrics, "receiver_stream_open", &[]), Some(1.0));
    assert_eq!(
        value(&metrics, "receiver_database_reachable", &[]),
        Some(1.0)
    );
    assert_eq!(value(&metrics, "receiver_breaker_open", &[]), Some(0.0));

    // No id, token or proof ever becomes a label value: the receiver's
    // name and queue, one value each for the whole process, and otherwise
    // fixed words.
    let allowed = [
        "applied",
        "duplicate",
        "stale",
        "conflict",
        "rejected",
        "unconfirmed",
        "error",
        "confirmed",
        "refused",
        "rereported",
        "deadlock",
        "lock_wait",
        "connection",
        "transport",
        "timeout",
        "status",
        "protocol",
        "unreadable_message",
    ];
    for sample in &metrics.samples {
        assert_eq!(sample.labels.get("receiver"), Some("task-result-view"));
        assert_eq!(sample.labels.get("queue"), Some(creds.queue_id.as_str()));
        for (key, label) in sample.labels.iter() {
            assert!(
                ["receiver", "queue"].contains(&key.as_str()) || allowed.contains(&label.as_str()),
                "label {key}={label} on {}",
                sample.metric
            );
        }
    }
    let (_, text) = http("GET", &format!("{url}/metrics"), "", String::new()).await;
    assert!(!text.contains(&creds.token) && !text.contains(&first.id));
    eprintln!("/metrics after one delivery of each kind:\n{text}");

    // Health and readiness while everything runs.
    let (status, _) = http("GET", &format!("{url}/healthz"), "", String::new()).await;
    assert_eq!(status, 200);
    let (status, body) = http("GET", &format!("{url}/readyz"), "", String::new()).await;
    assert_eq!(status, 200, "{body}");
    assert!(consume.terminate().success());
}

#[tokio::test]
async fn in_batching_mode_batch_sizes_are_a_histogram_and_each_delivery_is_logged_once() {
    const EVENTS: usize = 40;
    let (orbit, creds, sub) = OrbitDev::subscribed(30_000, 5, "metrics-batches").await;
    for _ in 0..EVENTS {
        orbit.inject_new_task(&creds, &sub).await;
    }
    let db = TestDb::initialized().await;
    let (mut consume, url) =
        consume_with_metrics(&orbit, &creds, &db, &sub, &[("RECEIVER_BATCH_MAX", "8")]).await;
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(30), |c| {
            c["acked"] == EVENTS as u64
        })
        .await;

    let metrics = scrape(&url).await;
    let sizes = metrics
        .samples
        .iter()
        .find(|s| s.metric == "receiver_batch_size")
        .expect("a receiver_batch_size histogram");
    let Value::Histogram(buckets) = &sizes.value else {
        panic!("receiver_batch_size is not a histogram: {sizes:?}");
    };
    let transactions = buckets
        .iter()
        .find(|b| b.less_than.is_infinite())
        .unwrap()
        .count;
    let sum = metrics
        .samples
        .iter()
        .find(|s| s.metric == "receiver_batch_size_sum")
        .map(|s| match s.value {
            Value::Untyped(v) | Value::Counter(v) | Value::Gauge(v) => v,
            _ => f64::NAN,
        });
    assert_eq!(
        sum,
        Some(EVENTS as f64),
        "every delivery in one transaction"
    );
    assert!(
        transactions < EVENTS as f64,
        "{transactions} transactions for {EVENTS} waiting deliveries: none shared one"
    );
    let out = consume.output();
    assert_eq!(out.matches(r#"class="applied""#).count(), EVENTS, "{out}");
    assert!(consume.terminate().success());
}

#[tokio::test]
async fn a_conflict_is_logged_with_both_digests_as_receiver_digest_computes_them() {
    let (orbit, creds, sub) = OrbitDev::subscribed(1_000, 1, "log-conflict").await;
    let db = TestDb::initialized().await;
    let mut consume = Consume::on_test_db(&orbit, &creds, &db, &sub, &[]);
    let task = random_hex(16);
    let stored = EventSpec::submitted(&creds.queue_id, &task);
    let incoming = EventSpec {
        id: stored.id.clone(),
        version: 2,
        ..stored
    };
    orbit.inject(&sub, &stored.json()).await;
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(20), |c| c["acked"] == 1)
        .await;
    orbit.inject(&sub, &incoming.json()).await;
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(20), |c| c["expired"] == 1)
        .await;
    assert!(consume.terminate().success());

    let digest_of = |json: String| {
        let dir = std::env::temp_dir().join(format!("log-conflict-{}", random_hex(4)));
        std::fs::write(&dir, json).unwrap();
        let out = Command::new(common::orbit::receiver_path())
            .arg("digest")
            .arg(&dir)
            .output()
            .unwrap();
        let _ = std::fs::remove_file(&dir);
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    };
    let log = consume.output();
    let line = log
        .lines()
        .find(|l| l.contains(r#"class="conflict""#))
        .unwrap_or_else(|| panic!("no conflict line: {log}"));
    assert!(line.contains(&format!("event={}", stored.id)), "{line}");
    assert!(
        line.contains(&format!("stored {}", digest_of(stored.json()))),
        "{line}"
    );
    assert!(
        line.contains(&format!("incoming {}", digest_of(incoming.json()))),
        "{line}"
    );
}

/// Runs `receiver consume` until an event whose type and state disagree
/// has spent its `budget` of attempts (each one rejected); the event's id
/// and the receiver's log.
async fn a_contradictory_event_expires(name: &str, budget: u32) -> (String, String) {
    let (orbit, creds, sub) = OrbitDev::subscribed(1_000, budget, name).await;
    let db = TestDb::initialized().await;
    let mut consume = Consume::on_test_db(&orbit, &creds, &db, &sub, &[]);
    let task = random_hex(16);
    let contradictory = EventSpec {
        id: random_hex(16),
        queue_id: &creds.queue_id,
        task_id: &task,
        version: 1,
        event_type: "task.cancelled",
        state: "PENDING",
        result: None,
    };
    orbit.inject(&sub, &contradictory.json()).await;
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(20), |c| c["expired"] == 1)
        .await;
    assert!(consume.terminate().success());
    (contradictory.id, consume.output())
}

#[tokio::test]
async fn a_rejected_event_whose_id_can_be_read_is_logged_with_that_id() {
    let (event, log) = a_contradictory_event_expires("log-rejected", 1).await;
    let line = log
        .lines()
        .find(|l| l.contains(r#"class="rejected""#))
        .unwrap_or_else(|| panic!("no rejected line: {log}"));
    assert!(line.contains(&format!("event={event}")), "{line}");
}

#[tokio::test]
async fn a_failed_delivery_is_logged_once_per_attempt() {
    let (_, log) = a_contradictory_event_expires("log-once", 2).await;
    let delivery = log
        .lines()
        .find(|l| l.contains(r#"class="rejected""#))
        .and_then(|l| l.split("delivery=").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no rejected line with a delivery id: {log}"))
        .to_owned();
    let mentioning: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(&format!("delivery={delivery}")))
        .collect();
    assert_eq!(mentioning.len(), 2, "two attempts, one line each: {log}");
}

#[tokio::test]
async fn json_logs_are_one_object_per_line_with_the_stable_fields() {
    let (orbit, creds, sub) = OrbitDev::subscribed(30_000, 5, "log-json").await;
    let db = TestDb::initialized().await;
    let (event, _) = orbit.inject_new_task(&creds, &sub).await;
    let mut consume = Consume::on_test_db(
        &orbit,
        &creds,
        &db,
        &sub,
        &[("RECEIVER_LOG_FORMAT", "json")],
    );
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(20), |c| c["acked"] == 1)
        .await;
    assert!(consume.terminate().success());
    let log = consume.output();
    let lines: Vec<HashMap<String, serde_json::Value>> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|_| panic!("not JSON: {l}")))
        .collect();
    let delivery = lines
        .iter()
        .find(|l| l.get("message").and_then(|m| m.as_str()) == Some("delivery"))
        .unwrap_or_else(|| panic!("no delivery line: {log}"));
    assert_eq!(delivery["class"], "applied");
    assert_eq!(delivery["event"], event.as_str());
    assert_eq!(delivery["attempt"], 1);
    assert!(delivery["delivery"].is_string());
    assert!(!log.contains(&creds.token));
}

#[tokio::test]
async fn rust_log_is_honoured_when_receiver_log_is_unset() {
    let (orbit, creds, sub) = OrbitDev::subscribed(30_000, 5, "log-rust-log").await;
    let db = TestDb::initialized().await;
    orbit.inject_new_task(&creds, &sub).await;
    let mut consume = Consume::on_test_db(&orbit, &creds, &db, &sub, &[("RUST_LOG", "warn")]);
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(20), |c| c["acked"] == 1)
        .await;
    assert!(consume.terminate().success());
    let log = consume.output();
    assert!(
        !log.contains(" INFO "),
        "RUST_LOG=warn still logged info: {log}"
    );
}

/// Holds the event's inbox key for 1.5 s from another transaction, so that
/// the consumer's INSERT waits that long: a slow statement for sqlx.
async fn one_slow_apply(extra: &[(&str, &str)]) -> String {
    let (orbit, creds, sub) = OrbitDev::subscribed(30_000, 5, "log-slow").await;
    let db = TestDb::initialized().await;
    let (event, _) = orbit.inject_new_task(&creds, &sub).await;
    let blocker = db.hold_inbox_key(&creds.queue_id, &event).await;
    let mut consume = Consume::on_test_db(&orbit, &creds, &db, &sub, extra);
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(20), |c| c["leased"] == 1)
        .await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    blocker.rollback().await.unwrap();
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(20), |c| c["acked"] == 1)
        .await;
    assert!(consume.terminate().success());
    consume.output()
}

#[tokio::test]
async fn sqlx_slow_statement_warnings_stay_out_of_the_default_log() {
    let default = one_slow_apply(&[]).await;
    assert!(!default.contains("slow statement"), "{default}");
    // The same run with sqlx's warnings let through shows what was hidden.
    let verbose = one_slow_apply(&[("RECEIVER_LOG", "warn,result_inbox=info")]).await;
    assert!(verbose.contains("slow statement"), "{verbose}");
}

#[tokio::test]
async fn a_stream_that_breaks_is_counted_by_its_cause() {
    let (mut orbit, creds, sub) = OrbitDev::subscribed(30_000, 5, "metrics-stream-errors").await;
    let db = TestDb::initialized().await;
    let (mut consume, url) = consume_with_metrics(&orbit, &creds, &db, &sub, &[]).await;
    consume
        .wait_for_output(Duration::from_secs(20), |out| {
            out.contains("delivery stream open")
        })
        .await;
    let before = scrape(&url).await;
    assert_eq!(value(&before, "receiver_stream_errors_total", &[]), None);

    // Orbit goes away under an open stream.
    orbit.kill();
    consume
        .wait_for_output(Duration::from_secs(20), |out| {
            out.contains("delivery stream broke")
        })
        .await;
    let after = scrape(&url).await;
    assert_eq!(
        value(
            &after,
            "receiver_stream_errors_total",
            &[("cause", "transport")]
        ),
        Some(1.0),
        "{}",
        consume.output()
    );
    assert!(consume.terminate().success());
}

#[tokio::test]
async fn a_transaction_retry_is_logged_under_the_inbox_s_target_with_the_event_as_every_line_writes_it(
) {
    let (orbit, creds, sub) = OrbitDev::subscribed(30_000, 5, "log-retry").await;
    let db = TestDb::initialized().await;
    let task = random_hex(16);
    let spec = EventSpec::submitted(&creds.queue_id, &task);
    // A rival holds the event's inbox row uncommitted: the delivery's own
    // insert waits for it past the lock wait (2 s) and is run again.
    let pool = db.pool().await;
    let mut rival = pool.begin().await.unwrap();
    common::insert_inbox_row(&mut rival, "task-result-view", &creds.queue_id, &spec.id)
        .await
        .unwrap();
    let mut consume = Consume::on_test_db(&orbit, &creds, &db, &sub, &[]);
    orbit.inject(&sub, &spec.json()).await;
    consume
        .wait_for_output(Duration::from_secs(20), |log| log.contains("retrying"))
        .await;
    rival.rollback().await.unwrap();
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(20), |c| c["acked"] == 1)
        .await;
    assert!(consume.terminate().success());
    let log = consume.output();
    let retry = log
        .lines()
        .find(|l| l.contains("retrying"))
        .unwrap_or_else(|| panic!("no retry line: {log}"));
    assert!(
        retry.contains(&format!(
            " INFO result_inbox::inbox: transaction rolled back; retrying event={} ",
            spec.id
        )),
        "{retry}"
    );
    let applied = log
        .lines()
        .find(|l| l.contains(r#"class="applied""#))
        .unwrap_or_else(|| panic!("no applied line: {log}"));
    assert!(
        applied.contains(&format!(" event={}", spec.id)),
        "{applied}"
    );
}
