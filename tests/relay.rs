//! The relay and its webhook target against real servers, on MySQL and on
//! PostgreSQL, and a real HTTP endpoint (`tests/webhook_endpoint.py`) that
//! records every request and checks each signature with the
//! `standardwebhooks` package, Standard Webhooks' own implementation:
//! effects recorded through a real delivery are sent once each, signed,
//! under their id; failures are retried under the same id, or kill the
//! effect, as their answer says; per-key order holds with concurrency
//! across keys; two relays never send one effect at once; and a relay
//! stopped between the answer and its record sends again under the same
//! id.

use crate::common::webhook::{Endpoint, Received};
use crate::common::{on_both, random_hex};
use crate::outbox::{body_of, Fixture, Recording, Server, TRACEPARENT};

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use result_inbox::delivery::TraceContext;
use result_inbox::outbox::{self, EffectState};
use result_inbox::relay::{Attempt, Failed, Relay, RelayOptions, Sent, Targets};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tower::Service;

/// Short waits, so that each test takes seconds.
pub(crate) fn quick(concurrency: usize) -> RelayOptions {
    let mut options = RelayOptions::default();
    options.concurrency = concurrency;
    options.poll_interval = Duration::from_millis(50);
    options.initial_backoff = Duration::from_millis(50);
    options.max_backoff = Duration::from_secs(1);
    options.lease = Duration::from_secs(5);
    options.shutdown_grace = Duration::from_secs(1);
    options.report_interval = Duration::from_millis(200);
    options
}

pub(crate) struct Running {
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl Running {
    pub(crate) async fn stop(self) {
        self.stop.cancel();
        self.task.await.unwrap();
    }
}

pub(crate) fn run<E: Server>(f: &Fixture<E>, targets: Targets, options: RelayOptions) -> Running {
    let relay = Relay::<E>::new(f.dsn.clone(), targets, options);
    let stop = CancellationToken::new();
    let token = stop.clone();
    let task = tokio::spawn(async move { relay.run(token).await.expect("the relay runs") });
    Running { stop, task }
}

fn hook(endpoint: &Endpoint, path: &str) -> Targets {
    Targets::new().with("hook", endpoint.webhook(path)).unwrap()
}

/// Waits until no effect is pending.
pub(crate) async fn settled<E: Server>(f: &Fixture<E>, within: Duration) {
    let until = Instant::now() + within;
    while !f.pending().await.is_empty() {
        assert!(
            Instant::now() < until,
            "effects still pending: {:?}",
            f.pending().await
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

pub(crate) async fn dead<E: Server>(f: &Fixture<E>) -> Vec<(String, Option<String>, u32)> {
    let mut conn = f.conn().await;
    outbox::list::<E>(&mut conn, EffectState::Dead, 0, 1000)
        .await
        .unwrap()
        .into_iter()
        .map(|l| (l.id, l.last_result, l.attempts))
        .collect()
}

/// The pending effects' (id, attempts, last answer).
pub(crate) async fn pending<E: Server>(f: &Fixture<E>) -> Vec<(String, u32, Option<String>)> {
    let mut conn = f.conn().await;
    outbox::list::<E>(&mut conn, EffectState::Pending, 0, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|l| (l.id, l.attempts, l.last_result))
        .collect()
}

/// Waits until every pending effect was tried at least `attempts` times.
pub(crate) async fn tried<E: Server>(f: &Fixture<E>, attempts: u32, within: Duration) {
    let until = Instant::now() + within;
    loop {
        let pending = pending(f).await;
        if !pending.is_empty() && pending.iter().all(|(_, n, _)| *n >= attempts) {
            return;
        }
        assert!(Instant::now() < until, "not tried enough: {pending:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Records two effects, `shipped` and `paid`, for `target` through each of
/// two events applied as deliveries, the first with the trace context
/// [`TRACEPARENT`]; the two event ids.
pub(crate) async fn two_events_with_two_effects_each<E: Server>(
    f: &Fixture<E>,
    target: &'static str,
) -> (String, String) {
    let recording = Recording::of(&[(target, "shipped", None), (target, "paid", None)]);
    let (first, second) = (random_hex(16), random_hex(16));
    f.apply_traced(
        recording.clone(),
        &f.event(&first, 1),
        TraceContext::parse(TRACEPARENT, None),
    )
    .await
    .unwrap();
    f.apply(recording, &f.event(&second, 2)).await.unwrap();
    (first, second)
}

fn ids(requests: &[Received]) -> Vec<&str> {
    requests.iter().map(|r| r.id.as_str()).collect()
}

async fn effects_recorded_through_a_delivery_are_sent_once_each_signed_under_their_id<E: Server>() {
    let f = Fixture::<E>::new().await;
    let endpoint = Endpoint::start();
    // Polling alone would wait 30 s: only the wake-up sends them in time.
    let mut options = quick(4);
    options.poll_interval = Duration::from_secs(30);
    let relay = Relay::<E>::new(f.dsn.clone(), hook(&endpoint, "/hook"), options);
    let waker = relay.waker();
    let stop = CancellationToken::new();
    let token = stop.clone();
    let task = tokio::spawn(async move { relay.run(token).await.unwrap() });
    tokio::time::sleep(Duration::from_millis(200)).await;

    let (first, second) = two_events_with_two_effects_each(&f, "hook").await;
    waker.wake();
    let requests = endpoint.wait_for(4, Duration::from_secs(5)).await;
    settled(&f, Duration::from_secs(5)).await;
    // Nothing comes a second time.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let requests_after = endpoint.seen().await.requests;
    assert_eq!(ids(&requests_after), ids(&requests));
    stop.cancel();
    task.await.unwrap();

    let mut expected = BTreeMap::new();
    for (event, traced) in [(&first, true), (&second, false)] {
        for key in ["shipped", "paid"] {
            expected.insert(
                f.id(event, "hook", key).as_str().to_owned(),
                (hex::encode(body_of(event, key)), traced),
            );
        }
    }
    assert_eq!(requests.len(), 4);
    let distinct: BTreeSet<&str> = ids(&requests).into_iter().collect();
    assert_eq!(distinct.len(), 4, "each effect once: {requests:?}");
    for r in &requests {
        let (body, traced) = &expected[&r.id];
        assert!(
            r.verified,
            "standardwebhooks refused {}: {}",
            r.id, r.verify_error
        );
        assert_eq!(&r.body_hex, body, "the stored bytes, as recorded");
        assert_eq!(r.idempotency_key, r.id);
        assert_eq!(r.content_type, "application/json");
        assert_eq!(r.path, "/hook");
        let sent_at: f64 = r.timestamp.parse().unwrap();
        assert!((sent_at - r.start).abs() < 5.0, "webhook-timestamp is now");
        assert_eq!(r.traceparent.as_deref(), traced.then_some(TRACEPARENT));
    }
    assert!(dead(&f).await.is_empty());
}

async fn a_503_is_sent_again_under_the_same_id_after_its_retry_after<E: Server>() {
    let f = Fixture::<E>::new().await;
    let endpoint = Endpoint::start();
    endpoint
        .script(
            "/hook",
            r#"[{"status":503,"headers":{"Retry-After":"1"}}]"#,
            r#"{"status":200}"#,
        )
        .await;
    let event = random_hex(16);
    f.apply(Recording::of(&[("hook", "k", None)]), &f.event(&event, 1))
        .await
        .unwrap();
    let relay = run(&f, hook(&endpoint, "/hook"), quick(4));
    let requests = endpoint.wait_for(2, Duration::from_secs(5)).await;
    settled(&f, Duration::from_secs(5)).await;
    relay.stop().await;

    let id = f.id(&event, "hook", "k");
    assert_eq!(ids(&requests), [id.as_str(), id.as_str()]);
    assert_eq!((requests[0].status, requests[1].status), (503, 200));
    for r in &requests {
        assert!(r.verified, "{}", r.verify_error);
        assert_eq!(r.idempotency_key, id.as_str());
    }
    let waited = requests[1].start - requests[0].end;
    assert!(
        waited >= 0.9,
        "Retry-After: 1 honoured, tried again after {waited:.3} s"
    );
    assert!(dead(&f).await.is_empty());
}

async fn a_410_kills_the_effect_and_the_target_s_other_effects_wait<E: Server>() {
    let f = Fixture::<E>::new().await;
    let endpoint = Endpoint::start();
    endpoint.script("/gone", "[]", r#"{"status":410}"#).await;
    let event = random_hex(16);
    f.apply(
        Recording::of(&[
            ("gone-hook", "first", None),
            ("gone-hook", "second", None),
            ("hook", "other", None),
        ]),
        &f.event(&event, 1),
    )
    .await
    .unwrap();
    let targets = hook(&endpoint, "/hook")
        .with("gone-hook", endpoint.webhook("/gone"))
        .unwrap();
    // One at a time, so that the second effect of the gone target comes
    // after the first's answer.
    let relay = run(&f, targets, quick(1));
    let requests = endpoint.wait_for(2, Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let requests_after = endpoint.seen().await.requests;
    relay.stop().await;

    assert_eq!(requests_after.len(), 2, "{requests_after:?}");
    let first = f.id(&event, "gone-hook", "first");
    let second = f.id(&event, "gone-hook", "second");
    let other = f.id(&event, "hook", "other");
    let by_path: BTreeMap<&str, &str> = requests
        .iter()
        .map(|r| (r.path.as_str(), r.id.as_str()))
        .collect();
    assert_eq!(by_path["/gone"], first.as_str());
    assert_eq!(by_path["/hook"], other.as_str(), "other targets go on");
    assert_eq!(
        dead(&f).await,
        [(first.as_str().to_owned(), Some("410".to_owned()), 1)]
    );
    assert_eq!(
        f.pending().await,
        [second.as_str()],
        "the gone target's others wait"
    );
}

async fn a_redirect_is_dead_with_its_status_and_not_followed<E: Server>() {
    let f = Fixture::<E>::new().await;
    let endpoint = Endpoint::start();
    let elsewhere = endpoint.url("/hook");
    endpoint
        .script(
            "/moved",
            "[]",
            &format!(r#"{{"status":301,"headers":{{"Location":"{elsewhere}"}}}}"#),
        )
        .await;
    let event = random_hex(16);
    f.apply(Recording::of(&[("hook", "k", None)]), &f.event(&event, 1))
        .await
        .unwrap();
    let relay = run(&f, hook(&endpoint, "/moved"), quick(4));
    endpoint.wait_for(1, Duration::from_secs(5)).await;
    settled(&f, Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    relay.stop().await;

    let requests = endpoint.seen().await.requests;
    assert_eq!(
        requests.len(),
        1,
        "the redirect is not followed: {requests:?}"
    );
    assert_eq!(requests[0].path, "/moved");
    let id = f.id(&event, "hook", "k");
    assert_eq!(
        dead(&f).await,
        [(id.as_str().to_owned(), Some("301".to_owned()), 1)]
    );
}

async fn per_key_order_is_kept_at_the_endpoint_with_concurrency_across_keys<E: Server>() {
    let f = Fixture::<E>::new().await;
    let endpoint = Endpoint::start();
    // Every answer takes a while, so that sends overlap; the first fails,
    // so that one key waits behind its head while the others go on.
    endpoint
        .script(
            "/hook",
            r#"[{"status":503,"headers":{"Retry-After":"0"},"delay":0.03}]"#,
            r#"{"status":200,"delay":0.03}"#,
        )
        .await;
    let recording = Recording::of(&[
        ("hook", "{delivery}/a", Some("a")),
        ("hook", "{delivery}/b", Some("b")),
        ("hook", "{delivery}/c", Some("c")),
    ]);
    for version in 1..=6 {
        f.apply(recording.clone(), &f.event(&random_hex(16), version))
            .await
            .unwrap();
    }
    let mut conn = f.conn().await;
    let mut expected: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for listed in outbox::list::<E>(&mut conn, EffectState::Pending, 0, 100)
        .await
        .unwrap()
    {
        expected
            .entry(listed.ordering_key)
            .or_default()
            .push(listed.id);
    }
    assert_eq!(expected.values().map(Vec::len).sum::<usize>(), 18);
    let relay = run(&f, hook(&endpoint, "/hook"), quick(4));
    endpoint.wait_for(19, Duration::from_secs(10)).await;
    settled(&f, Duration::from_secs(5)).await;
    relay.stop().await;

    let seen = endpoint.seen().await;
    let mut requests = seen.requests.clone();
    requests.sort_by(|a, b| a.start.total_cmp(&b.start));
    for (key, ids_in_order) in &expected {
        let mut arrived: Vec<String> = Vec::new();
        for r in requests.iter().filter(|r| ids_in_order.contains(&r.id)) {
            if r.status == 200 {
                arrived.push(r.id.clone());
            }
        }
        assert_eq!(&arrived, ids_in_order, "key {key} in record order");
    }
    assert!(requests.iter().all(|r| r.verified));
    assert!(seen.max_in_flight > 1, "keys were sent at once");
}

async fn two_relays_at_once_never_have_one_effect_in_flight_twice<E: Server>() {
    let f = Fixture::<E>::new().await;
    let endpoint = Endpoint::start();
    endpoint
        .script("/hook", "[]", r#"{"status":200,"delay":0.02}"#)
        .await;
    let recording = Recording::of(&[
        ("hook", "{delivery}/1", None),
        ("hook", "{delivery}/2", None),
        ("hook", "{delivery}/3", None),
        ("hook", "{delivery}/4", None),
        ("hook", "{delivery}/5", None),
        ("hook", "{delivery}/6", None),
        ("hook", "{delivery}/7", None),
        ("hook", "{delivery}/8", None),
    ]);
    for version in 1..=4 {
        f.apply(recording.clone(), &f.event(&random_hex(16), version))
            .await
            .unwrap();
    }
    let recorded: BTreeSet<String> = f.pending().await.into_iter().collect();
    assert_eq!(recorded.len(), 32);
    let one = run(&f, hook(&endpoint, "/hook"), quick(4));
    let two = run(&f, hook(&endpoint, "/hook"), quick(4));
    endpoint.wait_for(32, Duration::from_secs(10)).await;
    settled(&f, Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    one.stop().await;
    two.stop().await;

    let seen = endpoint.seen().await;
    assert!(
        seen.overlapping.is_empty(),
        "in flight twice: {:?}",
        seen.overlapping
    );
    assert_eq!(seen.requests.len(), 32, "each effect once");
    let distinct: BTreeSet<String> = seen.requests.iter().map(|r| r.id.clone()).collect();
    assert_eq!(distinct, recorded);
}

/// A target that stops its relay once its inner target has had its
/// answer (the endpoint's 2xx, the stream's PubAck), before the relay can
/// record it: as if the process died there.
#[derive(Clone)]
struct StopsAfterTheAnswer<T> {
    inner: T,
    stop: CancellationToken,
}

impl<T> Service<Attempt> for StopsAfterTheAnswer<T>
where
    T: Service<Attempt, Response = Sent, Error = Failed>,
    T::Future: Send + 'static,
{
    type Response = Sent;
    type Error = Failed;
    type Future = BoxFuture<'static, Result<Sent, Failed>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Failed>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, attempt: Attempt) -> Self::Future {
        let answer = self.inner.call(attempt);
        let stop = self.stop.clone();
        Box::pin(async move {
            answer.await?;
            stop.cancel();
            std::future::pending().await
        })
    }
}

/// Runs a relay of `inner` as the target `name` until the first answer
/// `inner` has, and stops it there, before it records that answer.
pub(crate) async fn stopped_after_the_first_answer<E, T>(f: &Fixture<E>, name: &str, inner: T)
where
    E: Server,
    T: Service<Attempt, Response = Sent, Error = Failed> + Clone + Send + Sync + 'static,
    T::Future: Send + 'static,
{
    let stop = CancellationToken::new();
    let target = StopsAfterTheAnswer {
        inner,
        stop: stop.clone(),
    };
    let mut options = quick(4);
    options.lease = Duration::from_secs(1);
    options.shutdown_grace = Duration::ZERO;
    let relay = Relay::<E>::new(
        f.dsn.clone(),
        Targets::new().with(name, target).unwrap(),
        options,
    );
    tokio::time::timeout(Duration::from_secs(5), relay.run(stop))
        .await
        .expect("the relay stops")
        .unwrap();
}

async fn a_relay_stopped_after_the_answer_before_its_record_sends_again_under_the_same_id<
    E: Server,
>() {
    let f = Fixture::<E>::new().await;
    let endpoint = Endpoint::start();
    let event = random_hex(16);
    f.apply(Recording::of(&[("hook", "k", None)]), &f.event(&event, 1))
        .await
        .unwrap();
    let id = f.id(&event, "hook", "k");

    stopped_after_the_first_answer(&f, "hook", endpoint.webhook("/hook")).await;
    let first = endpoint.seen().await.requests;
    assert_eq!(ids(&first), [id.as_str()]);
    assert_eq!(first[0].status, 200);
    assert_eq!(
        f.pending().await,
        [id.as_str()],
        "the answer was never recorded"
    );

    let relay = run(&f, hook(&endpoint, "/hook"), quick(4));
    let requests = endpoint.wait_for(2, Duration::from_secs(5)).await;
    settled(&f, Duration::from_secs(5)).await;
    relay.stop().await;
    assert_eq!(ids(&requests), [id.as_str(), id.as_str()]);
    assert!(requests
        .iter()
        .all(|r| r.idempotency_key == id.as_str() && r.verified));
    assert!(dead(&f).await.is_empty());
}

async fn an_answer_that_never_came_is_tried_again_under_the_same_id<E: Server>() {
    let f = Fixture::<E>::new().await;
    let endpoint = Endpoint::start();
    endpoint
        .script(
            "/hook",
            r#"[{"status":200,"delay":1.5}]"#,
            r#"{"status":200}"#,
        )
        .await;
    let event = random_hex(16);
    f.apply(Recording::of(&[("hook", "k", None)]), &f.event(&event, 1))
        .await
        .unwrap();
    let webhook = endpoint
        .webhook("/hook")
        .with_timeout(Duration::from_millis(300));
    let relay = run(&f, Targets::new().with("hook", webhook).unwrap(), quick(4));
    let requests = endpoint.wait_for(2, Duration::from_secs(5)).await;
    settled(&f, Duration::from_secs(5)).await;
    relay.stop().await;
    let id = f.id(&event, "hook", "k");
    // The endpoint took the first one too: its outcome was unknown to the
    // relay, and the same id lets the endpoint see it is the same effect.
    assert_eq!(ids(&requests[..2]), [id.as_str(), id.as_str()]);
    assert!(requests.iter().all(|r| r.idempotency_key == id.as_str()));
}

async fn a_tower_timeout_in_front_of_the_webhook_is_an_outcome_unknown_tried_again<E: Server>() {
    let f = Fixture::<E>::new().await;
    let endpoint = Endpoint::start();
    endpoint
        .script(
            "/hook",
            r#"[{"status":200,"delay":1.5}]"#,
            r#"{"status":200}"#,
        )
        .await;
    let event = random_hex(16);
    f.apply(Recording::of(&[("hook", "k", None)]), &f.event(&event, 1))
        .await
        .unwrap();
    // The embedder's own layer, not an option of the relay.
    let target = tower::ServiceBuilder::new()
        .timeout(Duration::from_millis(300))
        .service(endpoint.webhook("/hook"));
    let relay = run(&f, Targets::new().with("hook", target).unwrap(), quick(4));
    let requests = endpoint.wait_for(2, Duration::from_secs(5)).await;
    settled(&f, Duration::from_secs(5)).await;
    relay.stop().await;
    let id = f.id(&event, "hook", "k");
    assert_eq!(ids(&requests[..2]), [id.as_str(), id.as_str()]);
    assert!(dead(&f).await.is_empty());
}

async fn an_effect_failing_past_its_attempts_is_dead_with_its_last_answer<E: Server>() {
    let f = Fixture::<E>::new().await;
    let endpoint = Endpoint::start();
    endpoint.script("/hook", "[]", r#"{"status":503}"#).await;
    let event = random_hex(16);
    f.apply(Recording::of(&[("hook", "k", None)]), &f.event(&event, 1))
        .await
        .unwrap();
    let mut options = quick(4);
    options.max_attempts = 3;
    let relay = run(&f, hook(&endpoint, "/hook"), options);
    endpoint.wait_for(3, Duration::from_secs(5)).await;
    settled(&f, Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    relay.stop().await;
    assert_eq!(endpoint.seen().await.requests.len(), 3);
    let id = f.id(&event, "hook", "k");
    assert_eq!(
        dead(&f).await,
        [(id.as_str().to_owned(), Some("503".to_owned()), 3)]
    );
}

async fn an_effect_of_a_target_the_relay_does_not_know_stays_pending<E: Server>() {
    let f = Fixture::<E>::new().await;
    let endpoint = Endpoint::start();
    let event = random_hex(16);
    f.apply(
        Recording::of(&[("elsewhere", "k", None), ("hook", "k", None)]),
        &f.event(&event, 1),
    )
    .await
    .unwrap();
    let relay = run(&f, hook(&endpoint, "/hook"), quick(4));
    endpoint.wait_for(1, Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    relay.stop().await;
    let unknown = f.id(&event, "elsewhere", "k");
    assert_eq!(f.pending().await, [unknown.as_str()]);
    assert!(dead(&f).await.is_empty(), "never dead by surprise");
    let mut conn = f.conn().await;
    let listed = outbox::list::<E>(&mut conn, EffectState::Pending, 0, 10)
        .await
        .unwrap();
    assert_eq!(listed[0].attempts, 0);
}

#[tokio::test]
async fn a_relay_with_options_it_cannot_run_with_says_which() {
    let dsn: result_inbox::db::Dsn = "mysql://relay@127.0.0.1:1/none".parse().unwrap();
    for (change, what) in [
        (
            Box::new(|o: &mut RelayOptions| o.concurrency = 0) as Box<dyn Fn(&mut RelayOptions)>,
            "concurrency",
        ),
        (
            Box::new(|o: &mut RelayOptions| o.max_attempts = 0),
            "max_attempts",
        ),
        (
            Box::new(|o: &mut RelayOptions| o.owner = "a\nb".to_owned()),
            "owner",
        ),
        (
            Box::new(|o: &mut RelayOptions| o.owner = "o".repeat(129)),
            "owner",
        ),
    ] {
        let mut options = RelayOptions::default();
        change(&mut options);
        let relay = Relay::<sqlx::MySql>::new(dsn.clone(), Targets::new(), options);
        let e = relay.run(CancellationToken::new()).await.unwrap_err();
        assert!(
            e.to_string()
                .contains(&format!("invalid relay option {what}")),
            "{e}"
        );
    }
}

/// What the relay recorded through the `metrics` facade: each series by
/// its name and sorted labels, a counter's total, a gauge's last value, a
/// histogram's number of records. Installed once per process (nextest
/// runs each test in its own).
#[derive(Clone, Default)]
struct Series(Arc<Mutex<BTreeMap<String, f64>>>);

struct Handle {
    key: String,
    series: Series,
}

impl Handle {
    fn apply(&self, change: impl FnOnce(&mut f64)) {
        change(
            self.series
                .0
                .lock()
                .unwrap()
                .entry(self.key.clone())
                .or_default(),
        );
    }
}

impl metrics::CounterFn for Handle {
    fn increment(&self, value: u64) {
        self.apply(|v| *v += value as f64);
    }
    fn absolute(&self, value: u64) {
        self.apply(|v| *v = v.max(value as f64));
    }
}

impl metrics::GaugeFn for Handle {
    fn increment(&self, value: f64) {
        self.apply(|v| *v += value);
    }
    fn decrement(&self, value: f64) {
        self.apply(|v| *v -= value);
    }
    fn set(&self, value: f64) {
        self.apply(|v| *v = value);
    }
}

impl metrics::HistogramFn for Handle {
    fn record(&self, _value: f64) {
        self.apply(|v| *v += 1.0);
    }
}

impl Series {
    fn handle(&self, key: &metrics::Key) -> Arc<Handle> {
        let mut labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        labels.sort();
        Arc::new(Handle {
            key: format!("{}{{{}}}", key.name(), labels.join(",")),
            series: self.clone(),
        })
    }

    fn get(&self, key: &str) -> Option<f64> {
        self.0.lock().unwrap().get(key).copied()
    }

    fn installed() -> Series {
        static SERIES: std::sync::OnceLock<Series> = std::sync::OnceLock::new();
        SERIES
            .get_or_init(|| {
                let series = Series::default();
                metrics::set_global_recorder(series.clone()).expect("one recorder");
                series
            })
            .clone()
    }
}

impl metrics::Recorder for Series {
    fn describe_counter(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_gauge(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_histogram(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn register_counter(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        metrics::Counter::from_arc(self.handle(key))
    }
    fn register_gauge(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        metrics::Gauge::from_arc(self.handle(key))
    }
    fn register_histogram(
        &self,
        key: &metrics::Key,
        _: &metrics::Metadata<'_>,
    ) -> metrics::Histogram {
        metrics::Histogram::from_arc(self.handle(key))
    }
}

async fn the_relay_counts_attempts_dead_effects_a_gone_target_and_the_backlog<E: Server>() {
    let series = Series::installed();
    // Target names of this test's own, so that no other test's series mix in.
    let tag = random_hex(4);
    let ok: &'static str = Box::leak(format!("ok-{tag}").into_boxed_str());
    let gone: &'static str = Box::leak(format!("gone-{tag}").into_boxed_str());
    let f = Fixture::<E>::new().await;
    let endpoint = Endpoint::start();
    endpoint.script("/gone", "[]", r#"{"status":410}"#).await;
    f.apply(
        Recording::of(&[
            (ok, "a", None),
            (ok, "b", None),
            (gone, "first", None),
            (gone, "second", None),
        ]),
        &f.event(&random_hex(16), 1),
    )
    .await
    .unwrap();
    let targets = Targets::new()
        .with(ok, endpoint.webhook("/hook"))
        .unwrap()
        .with(gone, endpoint.webhook("/gone"))
        .unwrap();
    let relay = run(&f, targets, quick(1));
    endpoint.wait_for(3, Duration::from_secs(5)).await;
    // The backlog is counted every report interval (200 ms here).
    tokio::time::sleep(Duration::from_millis(600)).await;
    relay.stop().await;

    let value = |key: String| {
        series
            .get(&key)
            .unwrap_or_else(|| panic!("no series {key}"))
    };
    assert_eq!(
        value(format!(
            "receiver_outbox_attempts_total{{result=sent,target={ok}}}"
        )),
        2.0
    );
    assert_eq!(
        value(format!(
            "receiver_outbox_attempts_total{{result=dead,target={gone}}}"
        )),
        1.0
    );
    assert_eq!(
        value(format!("receiver_outbox_dead_total{{target={gone}}}")),
        1.0
    );
    assert_eq!(
        value(format!("receiver_outbox_target_paused{{target={gone}}}")),
        1.0
    );
    assert_eq!(
        value(format!(
            "receiver_outbox_commit_to_sent_seconds{{target={ok}}}"
        )),
        2.0
    );
    // A target's series are there from the relay's start, at 0 until
    // something happens: an alert on the first dead effect sees it rise.
    assert_eq!(
        value(format!("receiver_outbox_dead_total{{target={ok}}}")),
        0.0
    );
    assert_eq!(
        value(format!(
            "receiver_outbox_attempts_total{{result=retry,target={ok}}}"
        )),
        0.0
    );
    assert_eq!(
        value(format!("receiver_outbox_target_paused{{target={ok}}}")),
        0.0
    );
    // The gone target's second effect waits.
    assert_eq!(value("receiver_outbox_pending{}".to_owned()), 1.0);
    assert!(value("receiver_outbox_oldest_pending_seconds{}".to_owned()) > 0.0);
}

on_both!(
    multi_thread:
    effects_recorded_through_a_delivery_are_sent_once_each_signed_under_their_id,
    a_503_is_sent_again_under_the_same_id_after_its_retry_after,
    a_410_kills_the_effect_and_the_target_s_other_effects_wait,
    a_redirect_is_dead_with_its_status_and_not_followed,
    per_key_order_is_kept_at_the_endpoint_with_concurrency_across_keys,
    two_relays_at_once_never_have_one_effect_in_flight_twice,
    a_relay_stopped_after_the_answer_before_its_record_sends_again_under_the_same_id,
    an_answer_that_never_came_is_tried_again_under_the_same_id,
    a_tower_timeout_in_front_of_the_webhook_is_an_outcome_unknown_tried_again,
    an_effect_failing_past_its_attempts_is_dead_with_its_last_answer,
    an_effect_of_a_target_the_relay_does_not_know_stays_pending,
    the_relay_counts_attempts_dead_effects_a_gone_target_and_the_backlog,
);
