//! The operator's kit names only what a receiver exports: every metric,
//! label and label value that an alerting rule, a series of the rules'
//! promtool tests or a dashboard query names is in the `/metrics` of a
//! real `receiver consume`, and every series a receiver exports is on the
//! dashboard. Two receivers are scraped: one over Orbit on MySQL that has
//! applied, refused (conflict, rejected) and retried deliveries, whose
//! traces' collector is away and whose stream broke; one over NATS on
//! PostgreSQL in batching mode with a relay beside it, whose webhook
//! answered a retry and a gone target (the outbox's series exist only
//! where a relay runs, and the source's pending count only over NATS).

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::consume::Consume;
use common::deploy::{self, names, rules, series_names, test_series, Matcher};
use common::metrics::{consume_with_metrics, scrape_once_it_has};
use common::nats::{JetStreamQueue, NatsServer};
use common::orbit::{receiver, OrbitDev};
use common::postgres::PgTestDb;
use common::webhook::Endpoint;
use common::{random_hex, write_private, EventSpec, TestDb};
use prometheus_parse::{Scrape, Value};

/// Label values the rules' tests use that these scrapes cannot show, and
/// why.
const NOT_SCRAPED: [(&str, &str, &str, &str); 2] = [
    (
        "receiver_transaction_retries_total",
        "cause",
        "deadlock",
        "two transactions crossing locks: tests/inbox.rs and tests/cluster.rs make them",
    ),
    (
        "receiver_trace_spans_dropped_total",
        "reason",
        "queue_full",
        "more than 4 096 spans waiting for a collector",
    ),
];

/// Series neither scrape can hold, with the labels a receiver gives them
/// and the test that scrapes them from a real receiver.
const SCRAPED_ELSEWHERE: [(&str, &[&str], &str); 1] = [(
    "receiver_database_synchronous_standbys",
    &["receiver", "queue"],
    "only on a PostgreSQL primary with standbys: tests/pg_failover.rs reads it from consume's /metrics",
)];

/// Labels Prometheus adds to every series it scrapes.
const TARGET_LABELS: [&str; 2] = ["job", "instance"];

/// What the scrapes hold: per metric as Prometheus stores it (a
/// histogram's `_bucket`, `_sum`, `_count`), per label, the values seen.
#[derive(Debug, Default)]
struct Exported(BTreeMap<String, BTreeMap<String, BTreeSet<String>>>);

impl Exported {
    fn of(scrapes: &[&Scrape]) -> Exported {
        let mut exported = Exported::default();
        for scrape in scrapes {
            for sample in &scrape.samples {
                let labels: Vec<(String, String)> = sample
                    .labels
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                match &sample.value {
                    Value::Histogram(buckets) => {
                        for bucket in buckets {
                            let le = if bucket.less_than.is_infinite() {
                                "+Inf".to_owned()
                            } else {
                                bucket.less_than.to_string()
                            };
                            let mut with_le = labels.clone();
                            with_le.push(("le".into(), le));
                            exported.add(&format!("{}_bucket", sample.metric), &with_le);
                        }
                    }
                    _ => exported.add(&sample.metric, &labels),
                }
            }
        }
        exported
    }

    fn add(&mut self, metric: &str, labels: &[(String, String)]) {
        let family = self.0.entry(metric.to_owned()).or_default();
        for (label, value) in labels {
            family
                .entry(label.clone())
                .or_default()
                .insert(value.clone());
        }
    }

    fn labels(&self, metric: &str) -> Option<&BTreeMap<String, BTreeSet<String>>> {
        self.0.get(metric)
    }

    /// Every label of every metric, for the recorded series.
    fn all_labels(&self) -> BTreeSet<String> {
        self.0.values().flat_map(|l| l.keys().cloned()).collect()
    }
}

/// What is wrong with `metric{label op value}` as named by `origin`.
fn check_selector(
    exported: &Exported,
    recorded: &BTreeSet<String>,
    origin: &str,
    metric: &str,
    matchers: &[Matcher],
    problems: &mut Vec<String>,
) {
    let known: BTreeSet<String> = if metric == "up" {
        TARGET_LABELS.iter().map(|l| l.to_string()).collect()
    } else if metric.contains(':') {
        if !recorded.contains(metric) {
            problems.push(format!("{origin}: {metric} is recorded by no rule"));
        }
        exported.all_labels()
    } else {
        match exported.labels(metric) {
            None => {
                problems.push(format!("{origin}: {metric} is not in the scrape"));
                return;
            }
            Some(labels) => labels.keys().cloned().collect(),
        }
    };
    for (label, op, value) in matchers {
        if TARGET_LABELS.contains(&label.as_str()) {
            continue;
        }
        if !known.contains(label) {
            problems.push(format!("{origin}: {metric} has no label {label}"));
            continue;
        }
        let literal = op == "=" && !value.contains('$');
        let seen = exported
            .labels(metric)
            .and_then(|l| l.get(label))
            .is_some_and(|values| values.contains(value));
        let excused = NOT_SCRAPED
            .iter()
            .any(|(m, l, v, _)| *m == metric && *l == label && *v == value);
        if literal && !metric.contains(':') && metric != "up" && !seen && !excused {
            problems.push(format!(
                "{origin}: {metric}{{{label}=\"{value}\"}} never appears in the scrape"
            ));
        }
    }
}

/// What is wrong with the metrics and labels `query` names.
fn check_query(
    exported: &Exported,
    recorded: &BTreeSet<String>,
    origin: &str,
    query: &str,
    problems: &mut Vec<String>,
) {
    let names = names(query);
    let mut labels_here: BTreeSet<String> = TARGET_LABELS.iter().map(|l| l.to_string()).collect();
    for (metric, matchers) in &names.selectors {
        check_selector(exported, recorded, origin, metric, matchers, problems);
        if metric.contains(':') {
            labels_here.extend(exported.all_labels());
        } else if let Some(labels) = exported.labels(metric) {
            labels_here.extend(labels.keys().cloned());
        }
    }
    for label in &names.grouping {
        if !labels_here.contains(label) {
            problems.push(format!(
                "{origin}: groups by {label}, which none of its series has"
            ));
        }
    }
}

/// One of the counts Orbit reports of a subscription.
fn count(counts: &serde_json::Value, key: &str) -> u64 {
    counts[key].as_u64().unwrap_or(0)
}

/// Orbit on MySQL: applied, duplicate, stale, conflict, rejected, a
/// transaction run again; spans whose collector is away; then Orbit gone
/// under the open stream.
async fn a_receiver_over_orbit_that_saw_every_kind_of_delivery() -> Scrape {
    // A budget of one attempt: a conflict or a rejection is seen once.
    let (mut orbit, creds, sub) = OrbitDev::subscribed(1_000, 1, "kit-orbit").await;
    let db = TestDb::initialized().await;
    let collector_away = format!("http://127.0.0.1:{}", {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    });
    let (mut consume, url) = consume_with_metrics(
        &orbit,
        &creds,
        &db,
        &sub,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", collector_away.as_str()),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    )
    .await;
    let task = random_hex(16);
    let first = EventSpec {
        version: 2,
        event_type: "task.succeeded",
        state: "SUCCEEDED",
        result: Some(r#"{"n":1}"#),
        ..EventSpec::submitted(&creds.queue_id, &task)
    };
    let older = EventSpec {
        id: random_hex(16),
        ..EventSpec::submitted(&creds.queue_id, &task)
    };
    let other_content = EventSpec {
        id: first.id.clone(),
        result: Some(r#"{"n":2}"#),
        ..first
    };
    let contradictory = EventSpec {
        id: random_hex(16),
        event_type: "task.cancelled",
        ..first
    };
    for event in [&first, &first, &older, &other_content, &contradictory] {
        orbit.inject(&sub, &event.json()).await;
    }
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(30), |c| {
            count(c, "acked") + count(c, "expired") == 5
        })
        .await;

    // A rival holds the next event's inbox row uncommitted: the delivery's
    // insert waits past the lock wait and its transaction runs again.
    let retried_task = random_hex(16);
    let retried = EventSpec::submitted(&creds.queue_id, &retried_task);
    let pool = db.pool().await;
    let mut rival = pool.begin().await.unwrap();
    common::insert_inbox_row(&mut rival, "task-result-view", &creds.queue_id, &retried.id)
        .await
        .unwrap();
    orbit.inject(&sub, &retried.json()).await;
    consume
        .wait_for_output(Duration::from_secs(20), |log| log.contains("retrying"))
        .await;
    rival.rollback().await.unwrap();
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(30), |c| {
            count(c, "acked") + count(c, "expired") == 6
        })
        .await;
    scrape_once_it_has(&url, "receiver_trace_spans_dropped_total").await;

    orbit.kill();
    consume
        .wait_for_output(Duration::from_secs(20), |out| {
            out.contains("delivery stream broke")
        })
        .await;
    let scrape = scrape_once_it_has(&url, "receiver_stream_errors_total").await;
    assert!(consume.terminate().success(), "{}", consume.output());
    scrape
}

/// NATS on PostgreSQL, in batching mode, notifying a webhook through the
/// outbox: a notification tried again, one to a target gone.
async fn a_receiver_over_nats_with_a_relay_beside_it() -> Scrape {
    let server = NatsServer::start();
    let queue = JetStreamQueue::create(&server, &random_hex(16), Duration::from_secs(30), 5).await;
    let db = PgTestDb::new().await;
    let init = receiver()
        .args(["init", "--outbox"])
        .env("ORBIT_RECEIVER_DSN", &db.dsn)
        .output()
        .unwrap();
    assert!(init.status.success(), "{init:?}");
    let hook = Endpoint::start();
    let secret = server.dir.join(format!("kit-secret-{}", random_hex(4)));
    write_private(&secret, hook.secret.as_bytes());
    // The first notification is answered 503: it is tried again.
    hook.script("/hooks/kit", r#"[{"status": 503}]"#, r#"{"status": 200}"#)
        .await;
    for _ in 0..3 {
        let event = EventSpec::submitted(&queue.queue, &random_hex(16)).json();
        queue.publish(event).await;
    }
    let mut env = queue.env(&server.url());
    for (key, value) in [
        ("ORBIT_RECEIVER_DSN", db.dsn.clone()),
        ("RECEIVER_NAME", "task-result-view".into()),
        ("RECEIVER_METRICS_ADDR", "127.0.0.1:0".into()),
        ("RECEIVER_BATCH_MAX", "8".into()),
        ("RECEIVER_NOTIFY_URL", hook.url("/hooks/kit")),
        ("RECEIVER_NOTIFY_SECRET_FILE", secret.display().to_string()),
    ] {
        env.push((key.into(), value));
    }
    let mut consume = Consume::with_env(&server.dir, &env);
    let url = consume.metrics_url().await;
    queue.wait_all_acked(Duration::from_secs(20)).await;
    hook.wait_for(4, Duration::from_secs(20)).await;
    // A target that answers gone: its effect dead, the target paused.
    hook.script("/hooks/kit", r#"[{"status": 410}]"#, r#"{"status": 200}"#)
        .await;
    let event = EventSpec::submitted(&queue.queue, &random_hex(16)).json();
    queue.publish(event).await;
    let scrape = scrape_once_it_has(&url, "receiver_outbox_dead_total").await;
    assert!(consume.terminate().success(), "{}", consume.output());
    scrape
}

#[tokio::test]
async fn every_metric_label_and_value_the_rules_their_tests_and_the_dashboard_name_is_in_a_real_scrape(
) {
    let (orbit, nats) = tokio::join!(
        a_receiver_over_orbit_that_saw_every_kind_of_delivery(),
        a_receiver_over_nats_with_a_relay_beside_it()
    );
    let mut exported = Exported::of(&[&orbit, &nats]);
    for (metric, labels, _) in SCRAPED_ELSEWHERE {
        let labels: Vec<(String, String)> = labels
            .iter()
            .map(|l| (l.to_string(), String::new()))
            .collect();
        exported.add(metric, &labels);
    }
    let rules = rules();
    let recorded: BTreeSet<String> = rules
        .iter()
        .filter(|r| r.kind == "record")
        .map(|r| r.name.clone())
        .collect();
    let mut problems = Vec::new();
    for rule in &rules {
        let origin = format!("receiver-rules.yml {}", rule.name);
        check_query(&exported, &recorded, &origin, &rule.expr, &mut problems);
    }
    for query in deploy::dashboard_queries() {
        let origin = format!("receiver-dashboard.json {query}");
        check_query(&exported, &recorded, &origin, &query, &mut problems);
    }
    for series in test_series() {
        let origin = format!("receiver-rules.test.yml {series}");
        let (metric, labels) = series_names(&series);
        let matchers: Vec<Matcher> = labels
            .into_iter()
            .filter(|(l, _)| !["receiver", "queue"].contains(&l.as_str()))
            .map(|(l, v)| (l, "=".to_owned(), v))
            .collect();
        check_selector(
            &exported,
            &recorded,
            &origin,
            &metric,
            &matchers,
            &mut problems,
        );
    }
    assert!(problems.is_empty(), "{problems:#?}");

    // Every series the receiver exports is on the dashboard, by its own
    // name or through a recorded series it feeds.
    let mut shown: BTreeSet<String> = BTreeSet::new();
    for query in deploy::dashboard_queries() {
        for (metric, _) in names(&query).selectors {
            match rules.iter().find(|r| r.name == metric) {
                Some(rule) => shown.extend(names(&rule.expr).selectors.into_iter().map(|s| s.0)),
                None => {
                    shown.insert(metric);
                }
            }
        }
    }
    let family = |metric: &str| {
        ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| metric.strip_suffix(suffix))
            .unwrap_or(metric)
            .to_owned()
    };
    let shown: BTreeSet<String> = shown.iter().map(|m| family(m)).collect();
    let missing: Vec<String> = exported
        .0
        .keys()
        .map(|m| family(m))
        .filter(|m| !shown.contains(m))
        .collect();
    assert!(missing.is_empty(), "not on the dashboard: {missing:?}");
}
