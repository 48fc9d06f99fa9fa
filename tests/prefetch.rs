//! Leasing ahead of free handler slots: how many deliveries the consumer
//! holds, and that held ones wait out a database outage without spending
//! an attempt. A real orbit-dev; the services are the test's own.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::orbit::{OrbitDev, QueueCredentials};
use futures::future::BoxFuture;
use metrics_exporter_prometheus::PrometheusBuilder;
use result_inbox::consumer::{Consumer, ConsumerOptions, ConsumerReport};
use result_inbox::delivery::Delivery;
use result_inbox::ids::SubscriptionId;
use result_inbox::orbit::OrbitSource;
use result_inbox::probe::Probe;
use result_inbox::BoxError;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tower::service_fn;

/// A database stand-in whose answer the test decides.
#[derive(Clone, Default)]
struct Switch {
    down: Arc<AtomicBool>,
}

impl Probe for Switch {
    fn probe(&self) -> BoxFuture<'static, Result<(), BoxError>> {
        let down = self.down.load(Ordering::SeqCst);
        Box::pin(async move {
            if down {
                Err("the test's database is down".into())
            } else {
                Ok(())
            }
        })
    }
}

async fn connect(
    orbit: &OrbitDev,
    creds: &QueueCredentials,
    sub: &SubscriptionId,
    options: ConsumerOptions,
) -> Consumer<OrbitSource> {
    let source = OrbitSource::connect(orbit.client(creds), sub.clone(), &creds.queue())
        .await
        .unwrap();
    Consumer::new(source, options)
}

async fn wait_until(what: &str, check: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What a run of [`leased_while_handlers_hang`] saw.
struct Hung {
    /// Orbit's counts once the consumer stopped asking for more.
    counts: serde_json::Value,
    /// Handlers started.
    started: usize,
    /// The consumer's gauges at that moment: running, held.
    gauges: (String, String),
    report: ConsumerReport,
}

/// Ten deliveries, handlers that never finish.
async fn leased_while_handlers_hang(concurrency: u32, prefetch: u32) -> Hung {
    // The test's own recorder; the test runs on one thread, where a local
    // recorder sees the consumer's task too.
    let recorder = PrometheusBuilder::new().build_recorder();
    let metrics = recorder.handle();
    let _recording = metrics::set_default_local_recorder(&recorder);
    let (orbit, creds, sub) = OrbitDev::subscribed(30_000, 5, "prefetch-bound").await;
    for _ in 0..10 {
        orbit.inject_new_task(&creds, &sub).await;
    }
    let options = ConsumerOptions {
        concurrency,
        prefetch,
        ..ConsumerOptions::default()
    };
    let consumer = connect(&orbit, &creds, &sub, options).await;
    let started = Arc::new(AtomicUsize::new(0));
    let counter = started.clone();
    let service = service_fn(move |_: Delivery<Bytes>| {
        counter.fetch_add(1, Ordering::SeqCst);
        futures::future::pending::<Result<(), BoxError>>()
    });
    let stop = CancellationToken::new();
    let running = tokio::spawn(consumer.run(service, stop.clone().cancelled_owned()));
    let expected = u64::from(concurrency + prefetch);
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(10), |c| {
            c["leased"] == expected
        })
        .await;
    // Long enough for a consumer that asked for more to get it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let counts = orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(1), |_| true)
        .await;
    let text = metrics.render();
    let gauge = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .unwrap_or("absent")
            .to_owned()
    };
    let gauges = (
        gauge("receiver_deliveries_in_flight"),
        gauge("receiver_deliveries_held"),
    );
    stop.cancel();
    let report = running.await.unwrap().unwrap();
    Hung {
        counts,
        started: started.load(Ordering::SeqCst),
        gauges,
        report,
    }
}

#[tokio::test]
async fn a_consumer_leases_its_free_slots_plus_the_prefetch_and_no_more() {
    let hung = leased_while_handlers_hang(2, 3).await;

    assert_eq!(hung.counts["leased"], 5, "{}", hung.counts);
    assert_eq!(hung.started, 2, "only `concurrency` handlers run");
    assert_eq!(hung.gauges, ("2".into(), "3".into()), "running, held");
    assert_eq!((hung.report.received, hung.report.acked), (5, 0));
    assert_eq!(
        hung.report.abandoned, 5,
        "held and running ones are left to their leases"
    );
}

#[tokio::test]
async fn without_prefetch_only_free_slots_are_leased() {
    let hung = leased_while_handlers_hang(2, 0).await;

    assert_eq!(hung.counts["leased"], 2, "{}", hung.counts);
    assert_eq!(hung.started, 2);
    assert_eq!(hung.gauges, ("2".into(), "0".into()), "running, held");
    assert_eq!((hung.report.received, hung.report.abandoned), (2, 2));
}

#[tokio::test]
async fn held_deliveries_wait_for_the_database_and_spend_no_attempt() {
    let (orbit, creds, sub) = OrbitDev::subscribed(30_000, 5, "prefetch-outage").await;
    for _ in 0..3 {
        orbit.inject_new_task(&creds, &sub).await;
    }
    let database = Switch::default();
    let options = ConsumerOptions {
        concurrency: 1,
        prefetch: 2,
        probe_interval: Duration::from_millis(100),
        probe_timeout: Duration::from_millis(100),
        retry_min: Duration::from_millis(50),
        retry_max: Duration::from_millis(200),
        ..ConsumerOptions::default()
    };
    let consumer = connect(&orbit, &creds, &sub, options)
        .await
        .with_probe(database.clone());
    let health = consumer.health();
    // The first handler waits for the test; the others finish at once.
    let started = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(Notify::new());
    let (counter, opened) = (started.clone(), gate.clone());
    let service = service_fn(move |_: Delivery<Bytes>| {
        let first = counter.fetch_add(1, Ordering::SeqCst) == 0;
        let opened = opened.clone();
        async move {
            if first {
                opened.notified().await;
            }
            Ok::<(), BoxError>(())
        }
    });
    let stop = CancellationToken::new();
    let running = tokio::spawn(consumer.run(service, stop.clone().cancelled_owned()));
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(10), |c| c["leased"] == 3)
        .await;
    assert_eq!(started.load(Ordering::SeqCst), 1, "one slot, two held");

    database.down.store(true, Ordering::SeqCst);
    wait_until("the breaker opens", || !health.database_reachable()).await;
    gate.notify_one();
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(10), |c| c["acked"] == 1)
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        started.load(Ordering::SeqCst),
        1,
        "a held delivery started while the database was away"
    );

    database.down.store(false, Ordering::SeqCst);
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(10), |c| c["acked"] == 3)
        .await;
    stop.cancel();
    let report = running.await.unwrap().unwrap();
    assert_eq!((report.received, report.acked), (3, 3));
    for d in orbit.deliveries(&creds, &sub).await {
        assert_eq!(d["attempts"], 1, "an attempt was spent: {d}");
    }
}
