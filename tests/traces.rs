//! A delivery's trace, exported over OTLP/HTTP by a real `receiver
//! consume` to a receiver that decodes it: the processing span of each
//! attempt, the inbox's transaction, each statement, the inner service and
//! the acknowledgement, with the OpenTelemetry conventions' names, kinds,
//! parentage and attributes, and nothing secret in any of them.

use crate::common;

use std::time::Duration;

use common::consume::Consume;
use common::orbit::{OrbitDev, QueueCredentials};
use common::otlp::{OtlpReceiver, ReceivedSpan, KIND_CLIENT, KIND_CONSUMER};
use common::postgres::PgTestDb;
use common::{random_hex, EventSpec, TestDb};
use result_inbox::ids::SubscriptionId;

/// The result body no span may carry.
const SECRET_RESULT: &str = r#"{"secret":"sentinel-result-in-a-span"}"#;

fn children<'a>(spans: &'a [ReceivedSpan], parent: &ReceivedSpan) -> Vec<&'a ReceivedSpan> {
    spans
        .iter()
        .filter(|s| s.parent_span_id == parent.span_id && s.trace_id == parent.trace_id)
        .collect()
}

/// `receiver consume` (the default receiver name) on `dsn`, exporting its
/// traces to `otlp`, with `extra` variables besides.
fn traced(
    orbit: &OrbitDev,
    creds: &QueueCredentials,
    dsn: &str,
    sub: &SubscriptionId,
    otlp: &OtlpReceiver,
    extra: &[(&str, &str)],
) -> Consume {
    let endpoint = otlp.endpoint();
    let mut env = vec![("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str())];
    env.extend_from_slice(extra);
    Consume::start(orbit, creds, dsn, sub, "task-result-view", &env)
}

#[tokio::test]
async fn each_delivery_is_one_trace_with_its_transaction_statements_and_acknowledgement() {
    let db = TestDb::initialized().await;
    one_trace_per_delivery(&common::dsn_for(&db.name), "mysql").await;
}

#[tokio::test]
async fn on_postgres_each_delivery_is_the_same_trace_and_its_statements_name_postgresql() {
    let db = PgTestDb::initialized().await;
    one_trace_per_delivery(&db.dsn, "postgresql").await;
}

/// One delivery consumed into the database at `dsn`, whose statements'
/// spans name `system`, read back from the collector.
async fn one_trace_per_delivery(dsn: &str, system: &str) {
    let otlp = OtlpReceiver::start().await;
    let (orbit, creds, sub) = OrbitDev::subscribed(30_000, 5, "traces").await;
    let task = random_hex(16);
    let mut event = EventSpec::submitted(&creds.queue_id, &task);
    event.version = 2;
    event.event_type = "task.succeeded";
    event.state = "SUCCEEDED";
    event.result = Some(SECRET_RESULT);
    let event = event;
    let delivery = orbit.inject(&sub, &event.json()).await;
    let mut consume = traced(&orbit, &creds, dsn, &sub, &otlp, &[]);
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(20), |c| c["acked"] == 1)
        .await;
    // The flush at exit sends what the batch still holds.
    assert!(consume.terminate().success(), "{}", consume.output());
    let spans = otlp
        .wait_for(Duration::from_secs(10), |spans| {
            spans.iter().any(|s| s.name.starts_with("settle"))
        })
        .await;

    let process = spans
        .iter()
        .find(|s| s.name == format!("process {}", creds.queue_id))
        .unwrap_or_else(|| panic!("no process span: {spans:#?}"));
    assert_eq!(process.kind, KIND_CONSUMER);
    assert_eq!(
        process.parent_span_id, "",
        "a delivery without a producer's context starts a trace"
    );
    for (key, value) in [
        ("messaging.system", "orbit"),
        ("messaging.operation.type", "process"),
        ("messaging.destination.name", creds.queue_id.as_str()),
        ("messaging.consumer.group.name", "task-result-view"),
        ("messaging.message.id", event.id.as_str()),
        ("delivery.id", delivery.as_str()),
        ("delivery.attempt", "1"),
        ("outcome", "applied"),
    ] {
        assert_eq!(process.attribute(key), Some(value), "{key}: {process:#?}");
    }
    assert!(process
        .resource
        .iter()
        .any(|(k, v)| k == "service.name" && v == "receiver"));

    let under_process: Vec<&str> = children(&spans, process)
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    assert!(
        under_process.contains(&"inbox transaction"),
        "{under_process:?}"
    );
    assert!(
        under_process.contains(&format!("settle {}", creds.queue_id).as_str()),
        "{under_process:?}"
    );
    let transaction = children(&spans, process)
        .into_iter()
        .find(|s| s.name == "inbox transaction")
        .unwrap();
    assert!(
        children(&spans, transaction)
            .iter()
            .all(|s| s.name != "transaction retry"),
        "a transaction that was not rolled back has no retry: {spans:#?}"
    );
    let statements: Vec<&ReceivedSpan> = spans
        .iter()
        .filter(|s| {
            s.trace_id == process.trace_id
                && s.kind == KIND_CLIENT
                && s.attribute("db.system.name").is_some()
        })
        .collect();
    let names: Vec<&str> = statements.iter().map(|s| s.name.as_str()).collect();
    for name in [
        "INSERT receiver_inbox",
        "INSERT receiver_task_views",
        "COMMIT",
    ] {
        assert!(names.contains(&name), "{name} missing from {names:?}");
    }
    let insert = statements
        .iter()
        .find(|s| s.name == "INSERT receiver_inbox")
        .unwrap();
    assert_eq!(insert.parent_span_id, transaction.span_id);
    assert_eq!(insert.attribute("db.system.name"), Some(system));
    assert!(
        statements
            .iter()
            .all(|s| s.attribute("db.system.name") == Some(system)),
        "{statements:#?}"
    );
    assert_eq!(insert.attribute("db.operation.name"), Some("INSERT"));
    assert_eq!(
        insert.attribute("db.collection.name"),
        Some("receiver_inbox")
    );
    let service = children(&spans, transaction)
        .into_iter()
        .find(|s| s.name == "inner service")
        .unwrap_or_else(|| panic!("no inner service span: {spans:#?}"));
    assert!(children(&spans, service)
        .iter()
        .any(|s| s.name == "INSERT receiver_task_views"));

    // Nothing secret in any span, event or resource.
    for span in &spans {
        let texts = span
            .attributes
            .iter()
            .chain(&span.resource)
            .chain(span.events.iter().flat_map(|(_, a)| a))
            .map(|(k, v)| format!("{k}={v}"))
            .chain(std::iter::once(span.name.clone()));
        for text in texts {
            assert!(!text.contains("sentinel-result"), "{text}");
            assert!(!text.contains(&creds.token), "{text}");
            assert!(!text.contains("lease_proof"), "{text}");
            assert!(!text.contains(dsn), "{text}");
        }
    }
}

#[tokio::test]
async fn in_batching_mode_the_shared_transaction_and_each_delivery_are_linked_both_ways() {
    let otlp = OtlpReceiver::start().await;
    let (orbit, creds, sub) = OrbitDev::subscribed(30_000, 5, "traces-batch").await;
    let db = TestDb::initialized().await;
    for _ in 0..6 {
        orbit.inject_new_task(&creds, &sub).await;
    }
    let dsn = common::dsn_for(&db.name);
    let mut consume = traced(
        &orbit,
        &creds,
        &dsn,
        &sub,
        &otlp,
        &[("RECEIVER_BATCH_MAX", "4")],
    );
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(20), |c| c["acked"] == 6)
        .await;
    assert!(consume.terminate().success(), "{}", consume.output());
    let spans = otlp.wait_for_processes(6).await;
    let by_id = |trace: &str, span: &str| {
        spans
            .iter()
            .find(|s| s.trace_id == trace && s.span_id == span)
    };
    for process in spans.iter().filter(|s| s.name.starts_with("process")) {
        assert_eq!(process.attribute("outcome"), Some("applied"));
        let transaction = process
            .links
            .iter()
            .find_map(|(trace, span)| by_id(trace, span))
            .unwrap_or_else(|| panic!("no linked transaction: {process:#?}"));
        assert_eq!(transaction.name, "inbox transaction");
        assert_eq!(
            transaction.parent_span_id, "",
            "a batch's transaction is a trace of its own"
        );
        assert!(
            transaction
                .links
                .contains(&(process.trace_id.clone(), process.span_id.clone())),
            "{transaction:#?}"
        );
        // The delivery's own trace holds its inner service's work.
        assert!(spans
            .iter()
            .any(|s| s.trace_id == transaction.trace_id && s.name == "INSERT receiver_inbox"));
    }
}

#[tokio::test]
async fn a_collector_that_is_down_never_stops_a_delivery_and_the_lost_spans_are_counted() {
    // A port that nothing listens on.
    let down = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let (orbit, creds, sub) = OrbitDev::subscribed(30_000, 5, "traces-down").await;
    let db = TestDb::initialized().await;
    for _ in 0..20 {
        orbit.inject_new_task(&creds, &sub).await;
    }
    let endpoint = format!("http://127.0.0.1:{down}");
    let metrics = format!("127.0.0.1:{}", {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    });
    let mut consume = Consume::on_test_db(
        &orbit,
        &creds,
        &db,
        &sub,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("RECEIVER_METRICS_ADDR", metrics.as_str()),
        ],
    );
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(20), |c| c["acked"] == 20)
        .await;
    // The batch goes out after its delay; its failure is counted.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (_, page) = common::orbit::http(
            "GET",
            &format!("http://{metrics}/metrics"),
            "",
            String::new(),
        )
        .await;
        let failed = common::metrics::value(
            &common::metrics::parse(&page),
            "receiver_trace_spans_dropped_total",
            &[("reason", "export_failed")],
        )
        .unwrap_or(0.0);
        if failed > 0.0 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{page}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let stopping = std::time::Instant::now();
    assert!(consume.terminate().success(), "{}", consume.output());
    // The flush at exit does not wait for a collector that is away beyond
    // its own bound: the process ends within the 10 s shutdown limit.
    assert!(
        stopping.elapsed() < Duration::from_secs(10),
        "{:?}",
        stopping.elapsed()
    );
}

#[tokio::test]
async fn the_export_s_threads_run_at_the_lowest_priority_and_deliveries_at_the_normal_one() {
    let otlp = OtlpReceiver::start().await;
    let (orbit, creds, sub) = OrbitDev::subscribed(30_000, 5, "traces-nice").await;
    let db = TestDb::initialized().await;
    orbit.inject_new_task(&creds, &sub).await;
    // A batch goes out 100 ms after its first span, while the receiver
    // still runs.
    let dsn = common::dsn_for(&db.name);
    let extra = [("OTEL_BSP_SCHEDULE_DELAY", "100")];
    let mut consume = traced(&orbit, &creds, &dsn, &sub, &otlp, &extra);
    otlp.wait_for(Duration::from_secs(20), |spans| {
        spans.iter().any(|s| s.name.starts_with("settle"))
    })
    .await;
    let threads = nice_of_threads(consume.child.id());
    assert!(consume.terminate().success(), "{}", consume.output());
    let nice = |prefix: &str| -> Vec<i64> {
        threads
            .iter()
            .filter(|(name, _)| name.starts_with(prefix))
            .map(|(_, nice)| *nice)
            .collect()
    };
    let all = |prefix: &str, value: i64| {
        let found = nice(prefix);
        !found.is_empty() && found.iter().all(|n| *n == value)
    };
    // The batch processor's thread (which builds each request) and the
    // runtime that sends it.
    assert!(all("OpenTelemetry", 19), "{threads:?}");
    assert!(all("otel-export", 19), "{threads:?}");
    // The thread that handles deliveries keeps its priority.
    assert!(all("receiver", 0), "{threads:?}");
}

/// Each thread of a process by name, with its nice value (the 19th field
/// of `/proc/<pid>/task/<tid>/stat`).
fn nice_of_threads(pid: u32) -> Vec<(String, i64)> {
    let mut threads = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let stat = std::fs::read_to_string(task.unwrap().path().join("stat")).unwrap();
        let (head, rest) = stat.rsplit_once(") ").unwrap();
        let name = head.split_once(" (").unwrap().1.to_owned();
        let nice = rest.split(' ').nth(16).unwrap().parse().unwrap();
        threads.push((name, nice));
    }
    threads
}

#[tokio::test]
async fn a_submitter_s_trace_context_makes_every_attempt_a_child_of_its_span_and_a_malformed_one_is_ignored(
) {
    let otlp = OtlpReceiver::start().await;
    // Leases of 1 s and a table lock past them: the first attempt fails,
    // the second applies; both must join the submitter's trace.
    let (orbit, creds, sub) = OrbitDev::subscribed(1_000, 5, "traces-parent").await;
    let db = TestDb::initialized().await;
    let dsn = common::dsn_for(&db.name);
    let mut consume = traced(&orbit, &creds, &dsn, &sub, &otlp, &[]);
    // Its start-up checks read the tables: the lock comes after them.
    consume
        .wait_for_output(Duration::from_secs(20), |out| {
            out.contains("delivery stream open")
        })
        .await;
    let lock = db.lock_inbox().await;
    let producer_trace = random_hex(16);
    let producer_span = random_hex(8);
    let traceparent = format!("00-{producer_trace}-{producer_span}-01");
    orbit
        .submit_with_headers(
            &creds,
            &[
                ("traceparent", traceparent.as_str()),
                ("tracestate", "vendor=value"),
            ],
        )
        .await;
    orbit
        .submit_with_headers(&creds, &[("traceparent", "00-not-a-trace-context-01")])
        .await;
    // Both deliveries were leased a second time: the first attempts are
    // lost to the lock.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !orbit
        .deliveries(&creds, &sub)
        .await
        .iter()
        .all(|d| d["attempts"].as_u64().unwrap_or(0) >= 2)
    {
        assert!(tokio::time::Instant::now() < deadline, "no second attempt");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    lock.release().await;
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(30), |c| c["acked"] == 2)
        .await;
    assert!(consume.terminate().success(), "{}", consume.output());
    let spans = otlp
        .wait_for(Duration::from_secs(10), |spans| {
            spans
                .iter()
                .any(|s| s.name.starts_with("process") && s.attribute("outcome") == Some("applied"))
        })
        .await;
    let processes: Vec<&ReceivedSpan> = spans
        .iter()
        .filter(|s| s.name.starts_with("process"))
        .collect();
    let of_task: Vec<&&ReceivedSpan> = processes
        .iter()
        .filter(|s| s.trace_id == producer_trace)
        .collect();
    assert!(
        of_task.len() >= 2,
        "every attempt joins the producer's trace: {processes:#?}"
    );
    for span in &of_task {
        assert_eq!(span.parent_span_id, producer_span);
    }
    assert!(of_task
        .iter()
        .any(|s| s.attribute("outcome") == Some("applied")));
    // The other task's deliveries start traces of their own.
    let others: Vec<&&ReceivedSpan> = processes
        .iter()
        .filter(|s| s.trace_id != producer_trace)
        .collect();
    assert!(!others.is_empty());
    for span in others {
        assert_eq!(span.parent_span_id, "", "{span:#?}");
    }
}

#[tokio::test]
async fn a_transaction_rolled_back_by_a_lock_wait_shows_each_retry_with_its_cause() {
    lock_wait_is_retried(Server::MySql(Box::new(TestDb::initialized().await)), "1205").await;
}

#[tokio::test]
async fn on_postgres_a_lock_wait_s_retry_names_the_sqlstate_that_ended_it() {
    lock_wait_is_retried(Server::Postgres(PgTestDb::initialized().await), "55P03").await;
}

/// A test database on either server.
enum Server {
    MySql(Box<TestDb>),
    Postgres(PgTestDb),
}

impl Server {
    fn dsn(&self) -> String {
        match self {
            Server::MySql(db) => common::dsn_for(&db.name),
            Server::Postgres(db) => db.dsn.clone(),
        }
    }

    /// An uncommitted row under the event's key; rolled back by the
    /// future it returns.
    async fn hold_inbox_key(
        &self,
        queue_id: &str,
        event: &str,
    ) -> futures::future::BoxFuture<'static, ()> {
        use futures::FutureExt;
        match self {
            Server::MySql(db) => {
                let blocker = db.hold_inbox_key(queue_id, event).await;
                async move { blocker.rollback().await.unwrap() }.boxed()
            }
            Server::Postgres(db) => {
                let mut blocker = db.pool.begin().await.unwrap();
                sqlx::query("INSERT INTO receiver_inbox VALUES ($1, $2, $3, $4, '{}', 1, now())")
                    .bind("task-result-view")
                    .bind(queue_id)
                    .bind(event)
                    .bind("0".repeat(64))
                    .execute(&mut *blocker)
                    .await
                    .unwrap();
                async move { blocker.rollback().await.unwrap() }.boxed()
            }
        }
    }
}

/// A delivery whose first run waits on an uncommitted row of its key past
/// one lock wait (2 s) and is rolled back with `code`, then applied by a
/// retry within the 5 s budget.
async fn lock_wait_is_retried(db: Server, code: &str) {
    let otlp = OtlpReceiver::start().await;
    let (orbit, creds, sub) = OrbitDev::subscribed(30_000, 5, "traces-retry").await;
    let (event, _) = orbit.inject_new_task(&creds, &sub).await;
    let release = db.hold_inbox_key(&creds.queue_id, &event).await;
    let mut consume = traced(&orbit, &creds, &db.dsn(), &sub, &otlp, &[]);
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(20), |c| c["leased"] == 1)
        .await;
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    release.await;
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(20), |c| c["acked"] == 1)
        .await;
    assert!(consume.terminate().success(), "{}", consume.output());
    let spans = otlp
        .wait_for(Duration::from_secs(10), |spans| {
            spans.iter().any(|s| s.name.starts_with("settle"))
        })
        .await;
    let transaction = spans
        .iter()
        .find(|s| s.name == "inbox transaction")
        .unwrap();
    let retries: Vec<&ReceivedSpan> = children(&spans, transaction)
        .into_iter()
        .filter(|s| s.name == "transaction retry")
        .collect();
    assert!(!retries.is_empty(), "{spans:#?}");
    assert_eq!(
        transaction.attribute("retries"),
        Some(retries.len().to_string().as_str())
    );
    assert_eq!(
        transaction.attribute("error.type"),
        None,
        "{transaction:#?}"
    );
    assert_ne!(transaction.status, 2);
    // The first run waited in its INSERT and was rolled back ...
    let waited = children(&spans, transaction)
        .into_iter()
        .find(|s| s.name == "INSERT receiver_inbox")
        .unwrap();
    assert_eq!(waited.attribute("db.response.status_code"), Some(code));
    assert_eq!(waited.status, 2);
    // ... which the first retry names as its cause.
    let first = retries
        .iter()
        .find(|s| s.attribute("retry") == Some("1"))
        .unwrap();
    assert!(
        first.attribute("cause").is_some_and(|c| c.contains(code)),
        "{first:#?}"
    );
    // The last retry applied the delivery: its own statements succeeded.
    let last = retries
        .iter()
        .find(|s| s.attribute("retry") == Some(retries.len().to_string().as_str()))
        .unwrap();
    assert_eq!(last.attribute("error.type"), None, "{last:#?}");
    let inserted = children(&spans, last)
        .into_iter()
        .find(|s| s.name == "INSERT receiver_inbox")
        .unwrap();
    assert_eq!(inserted.attribute("db.response.status_code"), None);
    assert!(children(&spans, last).iter().any(|s| s.name == "COMMIT"));
    let process = spans
        .iter()
        .find(|s| s.name.starts_with("process"))
        .unwrap();
    assert_eq!(process.attribute("outcome"), Some("applied"));
}

#[tokio::test]
async fn an_idle_consumer_exports_nothing_and_a_delivery_then_exactly_its_own_trace() {
    let db = TestDb::initialized().await;
    idle_then_one_delivery(&common::dsn_for(&db.name)).await;
}

#[tokio::test]
async fn on_postgres_an_idle_consumer_exports_nothing_and_its_probe_ends_no_transaction() {
    let db = PgTestDb::initialized().await;
    idle_then_one_delivery(&db.dsn).await;
}

/// `receiver consume` on `dsn` left idle for 15 s (its start-up checks,
/// then a database probe every 5 s), then given one delivery: the
/// collector gets that delivery's trace and nothing else, and no statement
/// the server had to warn about (PostgreSQL's `there is no transaction in
/// progress`, a notice sqlx logs at warn).
async fn idle_then_one_delivery(dsn: &str) {
    let otlp = OtlpReceiver::start().await;
    let (orbit, creds, sub) = OrbitDev::subscribed(30_000, 5, "traces-idle").await;
    // Any span ended would reach the collector 100 ms later.
    let extra = [
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ("RECEIVER_LOG", "warn,result_inbox=info,receiver=info"),
    ];
    let mut consume = traced(&orbit, &creds, dsn, &sub, &otlp, &extra);
    consume
        .wait_for_output(Duration::from_secs(20), |out| {
            out.contains("delivery stream open")
        })
        .await;
    tokio::time::sleep(Duration::from_secs(15)).await;
    let idle = otlp.spans();
    assert!(
        idle.is_empty(),
        "an idle consumer exported {} spans: {idle:#?}",
        idle.len()
    );

    let (event, _) = orbit.inject_new_task(&creds, &sub).await;
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(20), |c| c["acked"] == 1)
        .await;
    otlp.wait_for(Duration::from_secs(10), |spans| {
        spans.iter().any(|s| s.name.starts_with("settle"))
    })
    .await;
    assert!(consume.terminate().success(), "{}", consume.output());
    let spans = otlp.spans();
    let process = spans
        .iter()
        .find(|s| s.name.starts_with("process"))
        .unwrap_or_else(|| panic!("no process span: {spans:#?}"));
    assert_eq!(
        process.attribute("messaging.message.id"),
        Some(event.as_str())
    );
    let strays: Vec<&ReceivedSpan> = spans
        .iter()
        .filter(|s| s.trace_id != process.trace_id)
        .collect();
    assert!(strays.is_empty(), "spans of no delivery: {strays:#?}");
    for name in ["inbox transaction", "INSERT receiver_inbox", "COMMIT"] {
        assert!(spans.iter().any(|s| s.name == name), "{name}: {spans:#?}");
    }
    let out = consume.output();
    assert!(!out.contains("no transaction in progress"), "{out}");
}

#[tokio::test]
async fn a_delivery_whose_body_cannot_be_read_still_names_its_consumer_group() {
    let otlp = OtlpReceiver::start().await;
    let (orbit, creds, sub) = OrbitDev::subscribed(30_000, 5, "traces-unreadable").await;
    let db = TestDb::initialized().await;
    let delivery = orbit.inject(&sub, "garbage{").await;
    let endpoint = otlp.endpoint();
    let _consume = Consume::start(
        &orbit,
        &creds,
        &common::dsn_for(&db.name),
        &sub,
        "unreadable-view",
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    );
    let spans = otlp
        .wait_for(Duration::from_secs(20), |spans| {
            spans.iter().any(|s| s.name.starts_with("process"))
        })
        .await;
    let process = spans
        .iter()
        .find(|s| s.name.starts_with("process"))
        .unwrap();
    assert_eq!(process.attribute("delivery.id"), Some(delivery.as_str()));
    assert_eq!(
        process.attribute("outcome"),
        Some("rejected"),
        "{process:#?}"
    );
    assert_eq!(
        process.attribute("messaging.consumer.group.name"),
        Some("unreadable-view"),
        "{process:#?}"
    );
    assert_eq!(
        process
            .attributes
            .iter()
            .filter(|(k, _)| k == "messaging.consumer.group.name")
            .count(),
        1,
        "{process:#?}"
    );
}

/// `receiver check` with `vars` set, every other setting valid and
/// nothing listening where they point.
fn check_with(vars: &[(&str, &str)]) -> std::process::Output {
    let mut command = common::orbit::receiver();
    command
        .arg("check")
        .env("ORBIT_URL", "http://127.0.0.1:1")
        .env("ORBIT_TOKEN", "t")
        .env("ORBIT_QUEUE_ID", "0123456789abcdef0123456789abcdef")
        .env("ORBIT_SUBSCRIPTION_ID", "fedcba9876543210fedcba9876543210")
        .env("ORBIT_RECEIVER_DSN", "mysql://root@127.0.0.1:1/receiver");
    for otel in OTEL_VARIABLES {
        command.env_remove(otel);
    }
    command.envs(vars.iter().copied()).output().unwrap()
}

/// Every variable of the export that the tests set.
const OTEL_VARIABLES: [&str; 6] = [
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_TRACES_SAMPLER",
    "OTEL_TRACES_SAMPLER_ARG",
];

/// A variable and its value.
type Variable = (&'static str, &'static str);

#[test]
fn a_tracing_setting_that_cannot_be_read_is_exit_2_naming_its_variable() {
    let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1");
    let ratio = ("OTEL_TRACES_SAMPLER", "traceidratio");
    let cases: [(Variable, &[Variable]); 9] = [
        (
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                "ftp://collector:sentinel-otlp-pw@127.0.0.1:1",
            ),
            &[],
        ),
        (
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "collector:sentinel-otlp-pw@127.0.0.1:1/v1/traces",
            ),
            &[],
        ),
        (("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"), &[]),
        (("OTEL_TRACES_SAMPLER", "sometimes"), &[endpoint]),
        (("OTEL_TRACES_SAMPLER_ARG", "half"), &[endpoint, ratio]),
        (
            ("OTEL_TRACES_SAMPLER_ARG", "1.5"),
            &[
                endpoint,
                ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
            ],
        ),
        // The default sampler takes no ratio: 0.1 would sample everything.
        (("OTEL_TRACES_SAMPLER_ARG", "0.1"), &[endpoint]),
        (("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"), &[endpoint]),
        (
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json"),
            &[endpoint, ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")],
        ),
    ];
    for (broken, others) in cases {
        let mut vars = others.to_vec();
        vars.push(broken);
        let out = check_with(&vars);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(2), "{broken:?}: {err}");
        assert!(
            err.starts_with(&format!("receiver: {}: ", broken.0)),
            "{broken:?}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(!err.contains("sentinel-otlp-pw"), "{err}");
        assert!(out.stdout.is_empty(), "{broken:?}: checked anyway");
    }
    // What can be read is taken, in any case, and the checks run.
    let out = check_with(&[
        endpoint,
        ("OTEL_TRACES_SAMPLER", "ParentBased_TraceIdRatio"),
        ("OTEL_TRACES_SAMPLER_ARG", "0.25"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
    ]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn the_sampler_the_variables_name_is_the_one_that_samples() {
    let otlp = OtlpReceiver::start().await;
    let (orbit, creds, sub) = OrbitDev::subscribed(30_000, 5, "traces-sampler").await;
    let db = TestDb::initialized().await;
    let dsn = common::dsn_for(&db.name);
    let extra = [("OTEL_TRACES_SAMPLER", "Always_Off")];
    let mut consume = traced(&orbit, &creds, &dsn, &sub, &otlp, &extra);
    orbit.inject_new_task(&creds, &sub).await;
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(20), |c| c["acked"] == 1)
        .await;
    // The flush at exit sends whatever was sampled.
    assert!(consume.terminate().success(), "{}", consume.output());
    assert!(otlp.spans().is_empty(), "{:#?}", otlp.spans());
}

#[tokio::test]
async fn check_says_whether_the_collector_answers_and_a_base_endpoint_that_names_the_path_is_warned_of(
) {
    let otlp = OtlpReceiver::start().await;
    let (_orbit, creds, sub) = OrbitDev::subscribed(30_000, 5, "traces-check").await;
    let db = TestDb::initialized().await;
    let nothing = format!("http://127.0.0.1:{}", {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    });
    let check = |variable: &'static str, endpoint: String| {
        let mut command = common::orbit::receiver();
        command
            .arg("check")
            .env("ORBIT_CREDENTIALS_FILE", &creds.file)
            .env("ORBIT_SUBSCRIPTION_ID", sub.as_str())
            .env("ORBIT_RECEIVER_DSN", common::dsn_for(&db.name));
        for otel in OTEL_VARIABLES {
            command.env_remove(otel);
        }
        command.env(variable, endpoint);
        async move {
            let out = tokio::process::Command::from(command)
                .output()
                .await
                .unwrap();
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        }
    };
    let checks = "check=database ok\ncheck=schema ok\ncheck=privileges ok\n\
                  check=orbit ok\ncheck=token ok\ncheck=scopes ok\ncheck=subscription ok\n";

    let (code, out, err) = check("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.endpoint()).await;
    assert_eq!(
        out,
        format!(
            "{checks}check=traces ok\ntraces=otlp endpoint={}/v1/traces\n",
            otlp.endpoint()
        ),
        "{err}"
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(err, "");

    let (code, out, err) = check("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", nothing.clone()).await;
    assert!(
        out.starts_with(&format!("{checks}check=traces FAIL ")),
        "{out}{err}"
    );
    assert!(out.contains(&nothing), "{out}");
    assert_eq!(code, Some(1), "{out}{err}");

    // The exporter adds /v1/traces to a base endpoint: this one would
    // send to /v1/traces/v1/traces, which the collector does not serve.
    let doubled = format!("{}/v1/traces", otlp.endpoint());
    let (code, out, err) = check("OTEL_EXPORTER_OTLP_ENDPOINT", doubled).await;
    assert!(
        err.starts_with("warning: OTEL_EXPORTER_OTLP_ENDPOINT ends in /v1/traces"),
        "{err}"
    );
    assert!(
        out.starts_with(&format!("{checks}check=traces FAIL ")) && out.contains("404"),
        "{out}"
    );
    assert_eq!(code, Some(1));
}

#[tokio::test]
async fn consume_says_once_at_start_where_traces_go_without_the_endpoint_s_credentials() {
    let otlp = OtlpReceiver::start().await;
    let (orbit, creds, sub) = OrbitDev::subscribed(30_000, 5, "traces-where").await;
    let db = TestDb::initialized().await;
    let endpoint = format!(
        "http://collector:sentinel-otlp-pw@{}/v1/traces?api-key=sentinel-otlp-key",
        otlp.addr
    );
    let mut consume = Consume::on_test_db(
        &orbit,
        &creds,
        &db,
        &sub,
        &[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint.as_str())],
    );
    orbit.inject_new_task(&creds, &sub).await;
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(20), |c| c["acked"] == 1)
        .await;
    assert!(consume.terminate().success(), "{}", consume.output());
    // The traces went there.
    otlp.wait_for(Duration::from_secs(10), |spans| {
        spans.iter().any(|s| s.name.starts_with("settle"))
    })
    .await;
    let out = consume.output();
    let said: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("exporting traces"))
        .collect();
    assert_eq!(said.len(), 1, "{out}");
    assert!(
        said[0].ends_with(&format!(
            "exporting traces endpoint=http://<redacted>@{}/v1/traces",
            otlp.addr
        )),
        "{out}"
    );
    assert!(!out.contains("sentinel-otlp"), "{out}");
}

#[tokio::test]
async fn while_exports_fail_consume_warns_at_most_once_a_minute_with_the_spans_dropped() {
    let otlp = OtlpReceiver::start().await;
    otlp.refuse(true);
    let (orbit, creds, sub) = OrbitDev::subscribed(30_000, 5, "traces-failing").await;
    let db = TestDb::initialized().await;
    let dsn = common::dsn_for(&db.name);
    let extra = [("OTEL_BSP_SCHEDULE_DELAY", "100")];
    let mut consume = traced(&orbit, &creds, &dsn, &sub, &otlp, &extra);
    // Each delivery's spans go out 100 ms after they end, and every try of
    // each export is refused (four tries at most): at least three exports
    // failed once twelve requests were refused.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while otlp.refused() < 12 {
        orbit.inject_new_task(&creds, &sub).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} refused: {}",
            otlp.refused(),
            consume.output()
        );
    }
    let out = consume.output();
    let warnings: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("trace export failed"))
        .collect();
    assert_eq!(warnings.len(), 1, "{out}");
    let dropped: u64 = warnings[0]
        .split("dropped=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count of dropped spans: {}", warnings[0]));
    assert!(dropped > 0, "{}", warnings[0]);
    assert!(consume.terminate().success(), "{}", consume.output());
    assert_eq!(
        consume.output().matches("trace export failed").count(),
        1,
        "{}",
        consume.output()
    );
}

/// Over a broker: the delivery of the message that carried the producer's
/// `traceparent` (`traced`) is a `process <destination>` consumer span
/// whose parent is the producer's span, its settle span in the same
/// trace, and the delivery of the one without (`plain`) a trace of its
/// own.
#[cfg(any(feature = "nats", feature = "rabbitmq"))]
async fn joined_the_producer_s_trace(
    otlp: &OtlpReceiver,
    (traced, plain): (&str, &str),
    (destination, system): (&str, &str),
    (producer_trace, producer_span): (&str, &str),
) {
    let spans = otlp.wait_for_processes(2).await;
    let process = |event: &str| {
        spans
            .iter()
            .find(|s| {
                s.name.starts_with("process") && s.attribute("messaging.message.id") == Some(event)
            })
            .unwrap_or_else(|| panic!("no span of {event}: {spans:#?}"))
    };
    let child = process(traced);
    assert_eq!(child.name, format!("process {destination}"));
    assert_eq!(child.kind, KIND_CONSUMER);
    assert_eq!(child.attribute("messaging.system"), Some(system));
    assert_eq!(
        child.attribute("messaging.destination.name"),
        Some(destination)
    );
    assert_eq!(
        (child.trace_id.as_str(), child.parent_span_id.as_str()),
        (producer_trace, producer_span)
    );
    let root = process(plain);
    assert_eq!(root.parent_span_id, "");
    assert_ne!(root.trace_id, producer_trace);
    assert!(spans
        .iter()
        .any(|s| s.trace_id == producer_trace && s.name == format!("settle {destination}")));
}

/// The same over NATS JetStream: the producer's context in the message
/// headers.
#[cfg(feature = "nats")]
mod over_nats {
    use super::common;

    use std::time::Duration;

    use common::consume::Consume;
    use common::nats::{JetStreamQueue, NatsServer};
    use common::otlp::OtlpReceiver;
    use common::{dsn_for, random_hex, EventSpec, TestDb};

    #[tokio::test]
    async fn a_message_s_traceparent_header_makes_its_delivery_a_child_of_the_producer_s_span() {
        joins_the_producer_s_trace(None).await;
    }

    #[tokio::test]
    async fn in_batching_mode_too_a_message_s_delivery_joins_the_producer_s_trace() {
        joins_the_producer_s_trace(Some("4")).await;
    }

    async fn joins_the_producer_s_trace(batch_max: Option<&str>) {
        let otlp = OtlpReceiver::start().await;
        let server = NatsServer::start();
        let queue =
            JetStreamQueue::create(&server, &random_hex(16), Duration::from_secs(30), 5).await;
        let db = TestDb::initialized().await;
        let producer_trace = random_hex(16);
        let producer_span = random_hex(8);
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(
            "traceparent",
            format!("00-{producer_trace}-{producer_span}-01").as_str(),
        );
        let (task_a, task_b) = (random_hex(16), random_hex(16));
        let traced = EventSpec::submitted(&queue.queue, &task_a);
        queue
            .js
            .publish_with_headers(queue.subject.clone(), headers, traced.json().into())
            .await
            .unwrap()
            .await
            .unwrap();
        let plain = EventSpec::submitted(&queue.queue, &task_b);
        queue.publish(plain.json()).await;
        let mut env = queue.env(&server.url());
        env.push(("ORBIT_RECEIVER_DSN".into(), dsn_for(&db.name)));
        env.push(("OTEL_EXPORTER_OTLP_ENDPOINT".into(), otlp.endpoint()));
        if let Some(batch_max) = batch_max {
            env.push(("RECEIVER_BATCH_MAX".into(), batch_max.into()));
        }
        let mut consume = Consume::with_env(&server.dir, &env);
        queue.wait_all_acked(Duration::from_secs(20)).await;
        assert!(consume.terminate().success(), "{}", consume.output());
        super::joined_the_producer_s_trace(
            &otlp,
            (&traced.id, &plain.id),
            (&queue.subject, "nats"),
            (&producer_trace, &producer_span),
        )
        .await;
    }
}

/// The same over RabbitMQ: the producer's context in the message's headers.
#[cfg(feature = "rabbitmq")]
mod over_rabbitmq {
    use super::common;

    use std::time::Duration;

    use amqprs::{BasicProperties, FieldTable, FieldValue};
    use common::consume::Consume;
    use common::otlp::OtlpReceiver;
    use common::rabbitmq::{Publisher, RabbitNode, RabbitQueue};
    use common::{dsn_for, random_hex, EventSpec, TestDb};

    #[tokio::test]
    async fn a_message_s_traceparent_header_makes_its_delivery_a_child_of_the_producer_s_span() {
        let otlp = OtlpReceiver::start().await;
        let queue = RabbitQueue::create(&RabbitNode::shared(), 2).await;
        let db = TestDb::initialized().await;
        let producer_trace = random_hex(16);
        let producer_span = random_hex(8);
        let mut headers = FieldTable::new();
        headers.insert(
            "traceparent".try_into().unwrap(),
            FieldValue::from(format!("00-{producer_trace}-{producer_span}-01")),
        );
        let (task_a, task_b) = (random_hex(16), random_hex(16));
        let traced = EventSpec::submitted(&queue.queue_id, &task_a);
        let plain = EventSpec::submitted(&queue.queue_id, &task_b);
        let mut publisher = Publisher::open(&queue.url).await;
        let mut properties = BasicProperties::default();
        properties.with_message_id(&traced.id).with_headers(headers);
        publisher
            .publish_as(&queue.queue, properties, &traced.json())
            .await;
        publisher
            .publish(&queue.queue, std::slice::from_ref(&plain.json()))
            .await;
        publisher.close().await;
        let mut env = queue.env();
        env.push(("ORBIT_RECEIVER_DSN".into(), dsn_for(&db.name)));
        env.push(("OTEL_EXPORTER_OTLP_ENDPOINT".into(), otlp.endpoint()));
        let dir = std::env::temp_dir().join(format!("result-inbox-traces-{}", random_hex(6)));
        std::fs::create_dir_all(&dir).unwrap();
        let mut consume = Consume::with_env(&dir, &env);
        consume
            .wait_for_output(Duration::from_secs(20), |log| {
                log.matches(" acknowledged ").count() == 2
            })
            .await;
        assert!(consume.terminate().success(), "{}", consume.output());
        super::joined_the_producer_s_trace(
            &otlp,
            (&traced.id, &plain.id),
            (&queue.queue, "rabbitmq"),
            (&producer_trace, &producer_span),
        )
        .await;
    }
}
