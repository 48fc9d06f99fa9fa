//! The outbox's crash windows with real `receiver` processes, on MySQL and
//! on PostgreSQL, against a real webhook endpoint (`tests/webhook_endpoint.py`)
//! that records every request, when it started and ended and what it
//! answered, and checks each signature with the `standardwebhooks` package:
//!
//! - a `receiver relay` SIGKILLed after the endpoint answered 2xx and before
//!   it recorded the effect sent: the effect comes again under the same id;
//! - the endpoint down for 30 s under `receiver consume`: deliveries keep
//!   being applied and ACKed, each effect is tried within the backoff's
//!   bound, and every one is sent once the endpoint is back;
//! - two `receiver relay`s beside three `receiver consume`s: no effect in
//!   flight twice at once, each task's notifications in order;
//! - the database restarted under a relay, and the COMMIT of a "sent"
//!   record lost: nothing lost, nothing sent under another id;
//! - a `410`: dead, listed by `receiver outbox`, replayed under the same id.
//!
//! The relays run with short leases and polls (`RECEIVER_RELAY_*`), so that
//! each window closes in seconds. Where the relay's process is what is under
//! test, the notifications are recorded in this process as `receiver consume
//! --notify-url` records them: each event through the inbox over
//! `task_view::Notify`, in a transaction of its own.

use crate::common::{self, on_both};

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::commit_proxy::{CommitProxy, Fault};
use common::consume::Consume;
use common::mysqld::PrivateServer;
use common::orbit::{receiver, OrbitDev};
use common::postgres::{PgPrivateServer, PgTestDb};
use common::webhook::{Endpoint, Received};
use common::{delivery_of, random_hex, write_private, EventSpec, TestDb};
use result_inbox::db::{Dsn, Engine};
use result_inbox::ids::{EventId, QueueId};
use result_inbox::inbox::{InboxLayer, InboxStore, Outcome, StoreOptions};
use result_inbox::outbox::{EffectId, EffectKey, Target};
use result_inbox::scope::{InboxScope, ReceiverName};
use result_inbox::task_view::Notify;
use serde_json::Value;
use sqlx::{Connection, Executor, MySql, MySqlConnection, PgConnection, Postgres};
use tower::{ServiceBuilder, ServiceExt};

const NAME: &str = "task-result-view";
const PATH: &str = "/hooks/tasks";

/// What these tests need of an engine: a database with the outbox on the
/// shared throwaway server, or on a server of the test's own that it may
/// stop; the commit-loss proxy in front of the shared server; and each
/// effect's state, read straight from the server.
pub(crate) trait Server: Engine {
    type Db;
    type Private: Restart;
    /// A database of its own with the receiver's tables and the outbox,
    /// and its administrator's address.
    async fn database() -> (Self::Db, String);
    /// A server of the test's own with such a database, and its address.
    async fn private() -> (Self::Private, String);
    async fn proxy() -> CommitProxy;
    /// Each effect's state (`pending`, `sent`, `dead`), by id.
    async fn states(url: &str) -> BTreeMap<String, String>;
}

/// A server a test may stop and start again on the same port.
pub(crate) trait Restart {
    fn stop(&mut self);
    fn restart(&mut self);
}

impl Restart for PrivateServer {
    fn stop(&mut self) {
        PrivateServer::stop(self);
    }
    fn restart(&mut self) {
        PrivateServer::restart(self);
    }
}

impl Restart for PgPrivateServer {
    fn stop(&mut self) {
        PgPrivateServer::stop(self);
    }
    fn restart(&mut self) {
        PgPrivateServer::restart(self);
    }
}

impl Server for MySql {
    type Db = TestDb;
    type Private = PrivateServer;

    async fn database() -> (TestDb, String) {
        let db = TestDb::empty().await;
        let url = common::dsn_for(&db.name);
        common::init_outbox(&Dsn::parse(&url).unwrap()).await;
        (db, url)
    }

    async fn private() -> (PrivateServer, String) {
        let server = PrivateServer::start();
        let url = server.create_database("receiver").await;
        common::init_outbox(&Dsn::parse(&url).unwrap()).await;
        (server, url)
    }

    async fn proxy() -> CommitProxy {
        CommitProxy::mysql().await
    }

    async fn states(url: &str) -> BTreeMap<String, String> {
        let mut conn = MySqlConnection::connect(url).await.unwrap();
        sqlx::query_as("SELECT CAST(effect_id AS CHAR), CAST(state AS CHAR) FROM receiver_outbox")
            .fetch_all(&mut conn)
            .await
            .unwrap()
            .into_iter()
            .collect()
    }
}

impl Server for Postgres {
    type Db = PgTestDb;
    type Private = PgPrivateServer;

    async fn database() -> (PgTestDb, String) {
        let db = PgTestDb::new().await;
        let url = db.dsn.clone();
        common::init_outbox(&Dsn::parse(&url).unwrap()).await;
        (db, url)
    }

    async fn private() -> (PgPrivateServer, String) {
        let server = PgPrivateServer::start();
        let mut admin = PgConnection::connect(&server.dsn("postgres"))
            .await
            .unwrap();
        admin
            .execute("CREATE DATABASE receiver ENCODING 'UTF8'")
            .await
            .unwrap();
        let url = server.dsn("receiver");
        common::init_outbox(&Dsn::parse(&url).unwrap()).await;
        (server, url)
    }

    async fn proxy() -> CommitProxy {
        CommitProxy::postgres().await
    }

    async fn states(url: &str) -> BTreeMap<String, String> {
        let mut conn = PgConnection::connect(url).await.unwrap();
        sqlx::query_as("SELECT effect_id::text, state::text FROM receiver_outbox")
            .fetch_all(&mut conn)
            .await
            .unwrap()
            .into_iter()
            .collect()
    }
}

/// The name of the database an address names.
fn database_of(url: &str) -> &str {
    url.rsplit_once('/').unwrap().1
}

/// Records notifications as `receiver consume --notify-url` records them:
/// each event applied through the inbox over `task_view::Notify`, in one
/// transaction.
pub(crate) struct Notifier<E: Engine> {
    store: InboxStore<E>,
    scope: InboxScope,
}

impl<E: Engine> Notifier<E> {
    pub(crate) async fn on(url: &str) -> Self {
        let scope = InboxScope::new(
            ReceiverName::parse(NAME).unwrap(),
            QueueId::parse(&random_hex(16)).unwrap(),
        );
        let store = InboxStore::<E>::open(
            &Dsn::parse(url).unwrap(),
            scope.clone(),
            StoreOptions::default(),
        )
        .await
        .unwrap();
        Notifier { store, scope }
    }

    /// Applies version `version` of `task`; the id of the notification it
    /// recorded.
    pub(crate) async fn notify(&self, task: &str, version: u64) -> String {
        let event = version_of(self.scope.queue_id.as_str(), task, version);
        let receipt = ServiceBuilder::new()
            .layer(InboxLayer::new(self.store.clone()))
            .service(Notify::new("notify").unwrap())
            .oneshot(delivery_of(&event.json()))
            .await
            .unwrap();
        assert_eq!(receipt.outcome, Outcome::Applied);
        effect_id(&self.scope, &event.id)
    }
}

/// Version `version` of `task`, with a new event id: submitted (`PENDING`)
/// for the first, succeeded with a result after.
fn version_of<'a>(queue: &'a str, task: &'a str, version: u64) -> EventSpec<'a> {
    EventSpec {
        version,
        event_type: if version == 1 {
            "task.submitted"
        } else {
            "task.succeeded"
        },
        state: if version == 1 { "PENDING" } else { "SUCCEEDED" },
        result: (version > 1).then_some(r#"{"ok":true}"#),
        ..EventSpec::submitted(queue, task)
    }
}

/// The id of the notification of `event`: what `webhook-id` and
/// `Idempotency-Key` carry on every attempt.
pub(crate) fn effect_id(scope: &InboxScope, event: &str) -> String {
    EffectId::derive(
        scope,
        &EventId::parse(event).unwrap(),
        &Target::parse("notify").unwrap(),
        &EffectKey::parse(event).unwrap(),
    )
    .as_str()
    .to_owned()
}

/// The endpoint, and what a `receiver` process needs to notify it: the
/// secret in a file only its owner may read, in a directory of its own
/// that also holds the processes' output.
pub(crate) struct Hook {
    pub(crate) endpoint: Endpoint,
    dir: PathBuf,
    secret: String,
    pub(crate) url: String,
}

impl Drop for Hook {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Hook {
    /// An endpoint whose `PATH` answers `answer` (a JSON object: `status`,
    /// `delay` in seconds, `headers`) until told otherwise.
    pub(crate) async fn start(answer: &str) -> Hook {
        let endpoint = Endpoint::start();
        endpoint.script(PATH, "[]", answer).await;
        let dir = std::env::temp_dir().join(format!("outbox-crash-{}", random_hex(6)));
        std::fs::create_dir_all(&dir).unwrap();
        let secret = dir.join("notify.secret");
        write_private(&secret, endpoint.secret.as_bytes());
        let url = endpoint.url(PATH);
        Hook {
            endpoint,
            secret: secret.to_str().unwrap().to_owned(),
            dir,
            url,
        }
    }

    /// What `PATH` answers from now on.
    pub(crate) async fn answer(&self, answer: &str) {
        self.endpoint.script(PATH, "[]", answer).await;
    }

    /// The notify settings, then `settings`.
    pub(crate) fn env<'a>(&'a self, settings: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
        let mut env = vec![
            ("RECEIVER_NOTIFY_URL", self.url.as_str()),
            ("RECEIVER_NOTIFY_SECRET_FILE", self.secret.as_str()),
        ];
        env.extend_from_slice(settings);
        env
    }

    /// `receiver relay` on the database `url` names, with `settings`.
    pub(crate) fn relay(&self, url: &str, settings: &[(&str, &str)]) -> Consume {
        let mut env = self.env(settings);
        env.push(("ORBIT_RECEIVER_DSN", url));
        Consume::relay(&self.dir, &env)
    }

    /// The requests once there are `n`, within `within`.
    pub(crate) async fn requests(&self, n: usize, within: Duration) -> Vec<Received> {
        self.endpoint.wait_for(n, within).await
    }
}

/// Seconds since the Unix epoch, as the endpoint stamps its requests.
fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Waits until `done` holds of the effects' states, within `within`; else
/// fails with what `relays` printed.
async fn states_until<E: Server>(
    url: &str,
    within: Duration,
    relays: &[&Consume],
    done: impl Fn(&BTreeMap<String, String>) -> bool,
) -> BTreeMap<String, String> {
    let until = Instant::now() + within;
    loop {
        let states = E::states(url).await;
        if done(&states) {
            return states;
        }
        if Instant::now() >= until {
            let printed: Vec<String> = relays.iter().map(|r| r.output()).collect();
            panic!("effects still {states:?}; the relays printed {printed:#?}");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

fn all_sent(states: &BTreeMap<String, String>) -> bool {
    states.values().all(|s| s == "sent")
}

/// How many requests carry each id.
fn counts(requests: &[Received]) -> BTreeMap<&str, usize> {
    let mut counts = BTreeMap::new();
    for r in requests {
        *counts.entry(r.id.as_str()).or_default() += 1;
    }
    counts
}

/// Every request was signed as Standard Webhooks says (checked by the
/// package), its `Idempotency-Key` is its `webhook-id`, and that is one of
/// `effects`.
fn assert_signed_under_effect_ids(requests: &[Received], effects: &BTreeSet<String>) {
    for r in requests {
        assert!(r.verified, "{}", r.verify_error);
        assert_eq!(r.idempotency_key, r.id);
        assert!(effects.contains(&r.id), "{} is not an effect's id", r.id);
    }
}

/// Waits until `process` printed `line`, within `within`.
async fn printed(process: &Consume, line: &str, within: Duration) {
    process
        .wait_for_output(within, |out| out.contains(line))
        .await;
}

/// `receiver relay` SIGKILLed after the endpoint answered 2xx and before it
/// recorded the effect sent: the effect comes again with the same
/// `webhook-id` and `Idempotency-Key`, and the endpoint's distinct ids are
/// the effects recorded, none missing.
///
/// How the kill lands in that window: the endpoint holds each answer for
/// 500 ms, so the three effects are in flight at once; then the commit-loss
/// proxy between the relay and the server is armed to hold the next COMMIT.
/// While its sends are in flight the relay sends a COMMIT only to record an
/// answer (it claimed at start; it claims again only when a send ended, or
/// at its poll, 60 s here), so the COMMIT held is the record of the first
/// 200 the relay read: the endpoint has answered 2xx, and the record has
/// not reached the server. The other two records go through. The relay is
/// SIGKILLed while it waits for the held COMMIT; the proxy then closes the
/// server's connection without it, and the server rolls the record back. A
/// second relay takes the effect once the dead one's lease ran out.
async fn a_relay_killed_after_the_2xx_before_its_record_sends_again_under_the_same_id<E: Server>() {
    let (_db, url) = E::database().await;
    let notifier = Notifier::<E>::on(&url).await;
    let mut effects = BTreeSet::new();
    for _ in 0..3 {
        effects.insert(notifier.notify(&random_hex(16), 1).await);
    }
    let hook = Hook::start(r#"{"status":200,"delay":0.5}"#).await;
    let proxy = E::proxy().await;
    let quick = [
        ("RECEIVER_RELAY_LEASE", "3s"),
        ("RECEIVER_NOTIFY_TIMEOUT", "2s"),
    ];
    let mut settings = quick.to_vec();
    settings.push(("RECEIVER_RELAY_POLL_INTERVAL", "60s"));
    let mut first = hook.relay(&proxy.url_for(database_of(&url)), &settings);
    hook.endpoint
        .wait_in_flight(3, Duration::from_secs(20))
        .await;
    proxy.arm(Fault::HoldCommit);
    let before_kill = states_until::<E>(&url, Duration::from_secs(10), &[&first], |s| {
        s.values().filter(|s| *s == "sent").count() == 2
    })
    .await;
    assert_eq!(proxy.fired(), 1, "{}", first.output());
    let answered = hook.endpoint.seen().await.requests;
    first.kill();
    let killed_at = unix_now();
    assert_eq!(answered.len(), 3, "{answered:?}");
    assert!(answered.iter().all(|r| r.status == 200), "{answered:?}");
    let held: Vec<&String> = before_kill
        .iter()
        .filter(|(_, s)| *s == "pending")
        .map(|(id, _)| id)
        .collect();
    assert_eq!(held.len(), 1, "{before_kill:?}");
    let held = held[0].clone();
    // Killed, its record never came: the effect is pending still.
    assert_eq!(E::states(&url).await[&held], "pending");

    settings = quick.to_vec();
    settings.push(("RECEIVER_RELAY_POLL_INTERVAL", "100ms"));
    let mut second = hook.relay(&url, &settings);
    let states = states_until::<E>(&url, Duration::from_secs(20), &[&second], all_sent).await;
    let seen = hook.endpoint.seen().await.requests;
    assert!(second.terminate().success(), "{}", second.output());

    assert_eq!(states.keys().cloned().collect::<BTreeSet<_>>(), effects);
    assert_eq!(seen.len(), 4, "{seen:?}");
    assert_signed_under_effect_ids(&seen, &effects);
    assert!(seen.iter().all(|r| r.status == 200), "{seen:?}");
    let ids: BTreeSet<String> = seen.iter().map(|r| r.id.clone()).collect();
    assert_eq!(ids, effects, "an effect missing at the endpoint");
    let again: Vec<&Received> = seen.iter().filter(|r| r.id == held).collect();
    assert_eq!(again.len(), 2, "{seen:?}");
    assert!(again[0].end < killed_at && again[1].start > killed_at);
}

/// The COMMIT of a "sent" record lost under a running `receiver relay`
/// (the commit-loss proxy between them): nothing is lost, and an effect
/// sent again is sent under its id. Lost on the way back, after the server
/// committed it: the record is there, the relay trying it again finds it
/// done, and the effect is not sent again. Lost on the way to the server
/// each time the relay tries (the proxy drops every COMMIT until the relay
/// gave up): nothing is recorded, the lease runs out, and the relay sends
/// the effect again under the same id.
///
/// With one send at a time the relay claims nothing while an effect is in
/// flight, so the COMMITs it sends then are the records of its answer:
/// the proxy is armed once the endpoint holds the request.
async fn a_lost_commit_of_the_sent_record_loses_nothing_and_sends_again_only_under_the_same_id<
    E: Server,
>() {
    let (_db, url) = E::database().await;
    let notifier = Notifier::<E>::on(&url).await;
    let answer_lost = notifier.notify(&random_hex(16), 1).await;
    let commit_lost = notifier.notify(&random_hex(16), 1).await;
    let hook = Hook::start(r#"{"status":200,"delay":0.3}"#).await;
    let proxy = E::proxy().await;
    let mut relay = hook.relay(
        &proxy.url_for(database_of(&url)),
        &[
            ("RECEIVER_RELAY_CONCURRENCY", "1"),
            ("RECEIVER_RELAY_LEASE", "2s"),
            ("RECEIVER_NOTIFY_TIMEOUT", "1s"),
            ("RECEIVER_RELAY_POLL_INTERVAL", "200ms"),
        ],
    );
    // The first effect recorded is claimed first.
    hook.endpoint
        .wait_in_flight(1, Duration::from_secs(20))
        .await;
    proxy.arm(Fault::DropCommitOk);
    hook.requests(1, Duration::from_secs(10)).await;
    hook.endpoint
        .wait_in_flight(1, Duration::from_secs(10))
        .await;
    assert_eq!(proxy.fired(), 1, "{}", relay.output());
    assert_eq!(E::states(&url).await[&answer_lost], "sent");
    // Its next try finds the row recorded: not a lease that ran out.
    printed(
        &relay,
        "relay's answer found already recorded",
        Duration::from_secs(10),
    )
    .await;
    assert!(
        !relay.output().contains("lease on the effect ran out"),
        "{}",
        relay.output()
    );

    proxy.arm_every(Fault::DropCommitBeforeServer);
    printed(
        &relay,
        "relay could not record an answer: the lease runs out",
        Duration::from_secs(20),
    )
    .await;
    proxy.disarm();
    let states = states_until::<E>(&url, Duration::from_secs(20), &[&relay], all_sent).await;
    let seen = hook.endpoint.seen().await.requests;
    assert!(relay.terminate().success(), "{}", relay.output());

    let effects = BTreeSet::from([answer_lost.clone(), commit_lost.clone()]);
    assert_eq!(states.keys().cloned().collect::<BTreeSet<_>>(), effects);
    assert_signed_under_effect_ids(&seen, &effects);
    assert!(seen.iter().all(|r| r.status == 200), "{seen:?}");
    let ids: Vec<&str> = seen.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(
        ids,
        [&answer_lost, &commit_lost, &commit_lost].map(String::as_str),
        "{seen:?}"
    );
    assert!(
        relay
            .output()
            .matches("relay could not record an answer; trying again")
            .count()
            >= 4,
        "{}",
        relay.output()
    );
}

/// The most attempts of one effect whose first came `window` seconds
/// before its last, with waits from `initial` doubling up to `max`, each
/// at least half of its full length (the jitter's floor).
fn most_attempts(window: f64, initial: f64, max: f64) -> usize {
    let (mut attempts, mut elapsed) = (1, 0.0);
    loop {
        let full = (initial * 2f64.powi(attempts as i32 - 1)).min(max);
        elapsed += full / 2.0;
        if elapsed > window {
            return attempts;
        }
        attempts += 1;
    }
}

/// `receiver outbox --json` on `url`: (pending, dead).
fn outbox_counts(url: &str) -> (u64, u64) {
    let out = receiver()
        .args(["outbox", "--json"])
        .env("ORBIT_RECEIVER_DSN", url)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    (
        listed["pending"].as_u64().unwrap(),
        listed["dead"].as_u64().unwrap(),
    )
}

/// The endpoint down for 30 s under `receiver consume --notify-url`:
/// deliveries keep being applied and ACKed (Orbit counts them
/// acknowledged), their notifications wait in the outbox, each is tried
/// again within the backoff's bound, and every one is sent once the
/// endpoint is back. Down, the endpoint answers `503` to every request, so
/// that it counts them.
///
/// The bound, from the settings (first wait 1 s, doubling up to 4 s, each
/// wait between half and all of its full length): the attempt after the
/// k-th comes at least half of `min(1 s × 2^(k-1), 4 s)` after it, so an
/// effect tried for W seconds was tried at most [`most_attempts`]`(W)`
/// times; and once the endpoint is back, each is sent within the longest
/// wait and a poll.
async fn an_endpoint_down_30_s_stops_no_delivery_and_gets_every_effect_within_the_backoff<
    E: Server,
>() {
    const OUTAGE: f64 = 30.0;
    const INITIAL: f64 = 1.0;
    const MAX: f64 = 4.0;
    let (orbit, creds, sub) = OrbitDev::subscribed(30_000, 5, "outbox-down").await;
    let (_db, url) = E::database().await;
    let hook = Hook::start(r#"{"status":200}"#).await;
    let env = hook.env(&[
        ("RECEIVER_RELAY_INITIAL_BACKOFF", "1s"),
        ("RECEIVER_RELAY_MAX_BACKOFF", "4s"),
        ("RECEIVER_RELAY_POLL_INTERVAL", "200ms"),
        // The budget of attempts never ends the outage's: the bound does.
        ("RECEIVER_RELAY_MAX_ATTEMPTS", "100"),
    ]);
    let mut consume = Consume::start(&orbit, &creds, &url, &sub, NAME, &env);
    let q = creds.queue_id.clone();
    let tasks: Vec<String> = (0..8).map(|_| random_hex(16)).collect();
    let events: Vec<EventSpec<'_>> = tasks.iter().map(|t| EventSpec::submitted(&q, t)).collect();
    for event in &events[..2] {
        orbit.inject(&sub, &event.json()).await;
    }
    hook.requests(2, Duration::from_secs(20)).await;

    hook.answer(r#"{"status":503}"#).await;
    let down_at = unix_now();
    for event in &events[2..] {
        orbit.inject(&sub, &event.json()).await;
    }
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(20), |c| c["acked"] == 8)
        .await;
    assert_eq!(outbox_counts(&url), (6, 0));
    let left = down_at + OUTAGE - unix_now();
    assert!(left > 0.0, "the deliveries took the whole outage");
    tokio::time::sleep(Duration::from_secs_f64(left)).await;
    hook.answer(r#"{"status":200}"#).await;
    let up_at = unix_now();
    let scope = InboxScope::new(ReceiverName::parse(NAME).unwrap(), creds.queue());
    let ids: Vec<String> = events.iter().map(|e| effect_id(&scope, &e.id)).collect();
    let effects: BTreeSet<String> = ids.iter().cloned().collect();

    // While it was down: each effect recorded then tried again and again,
    // never sooner than the backoff allows.
    let during = hook.endpoint.seen().await.requests;
    assert_signed_under_effect_ids(&during, &effects);
    for (n, id) in ids.iter().enumerate().skip(2) {
        let failed: Vec<&Received> = during.iter().filter(|r| &r.id == id).collect();
        assert!(failed.iter().all(|r| r.status == 503), "{failed:?}");
        assert!(failed.len() >= 5, "it stopped trying: {failed:?}");
        let window = failed.last().unwrap().start - failed[0].start;
        let most = most_attempts(window, INITIAL, MAX);
        eprintln!(
            "effect {n}: {} attempts in {window:.1} s, at most {most}",
            failed.len()
        );
        assert!(
            failed.len() <= most,
            "{} > {most}: {failed:?}",
            failed.len()
        );
        for (k, pair) in failed.windows(2).enumerate() {
            let full = (INITIAL * 2f64.powi(k as i32)).min(MAX);
            let gap = pair[1].start - pair[0].start;
            assert!(
                gap >= full / 2.0 - 0.05,
                "wait {k}: {gap:.3} s < {full}/2: {failed:?}"
            );
        }
    }

    // Back: each is sent once, within the longest wait and a poll.
    let until = Instant::now() + Duration::from_secs_f64(MAX + 5.0);
    let seen = loop {
        let seen = hook.endpoint.seen().await.requests;
        let sent: BTreeSet<&str> = seen
            .iter()
            .filter(|r| r.status == 200)
            .map(|r| r.id.as_str())
            .collect();
        if sent.len() == ids.len() {
            break seen;
        }
        assert!(
            Instant::now() < until,
            "not all sent after the outage: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    let sent_within = unix_now() - up_at;
    assert_eq!(outbox_counts(&url), (0, 0));
    assert!(consume.terminate().success(), "{}", consume.output());
    assert_signed_under_effect_ids(&seen, &effects);
    for (n, id) in ids.iter().enumerate() {
        let sent: Vec<&Received> = seen
            .iter()
            .filter(|r| &r.id == id && r.status == 200)
            .collect();
        assert_eq!(sent.len(), 1, "{seen:?}");
        match n {
            0 | 1 => assert!(sent[0].end < down_at, "{sent:?}"),
            _ => assert!(sent[0].start >= up_at, "{sent:?}"),
        }
    }
    assert!(sent_within <= MAX + 1.0, "{sent_within:.1} s");
}

/// Two `receiver relay`s beside three `receiver consume`s (each with its
/// own relay beside it) on one subscription: no effect is in flight twice
/// at once (the endpoint notes every request that came while one with its
/// id was being answered, each held 150 ms), none is sent twice, each is
/// sent, and each task's notifications arrive one after the other in
/// version order. Every relay polls every 50 ms: were a lease not kept,
/// another would take an effect in flight. Each sends at most two at once,
/// so that while one holds its two, the others find heads to take: a
/// relay with room for all six keys could take every head before any
/// other polled.
async fn two_relays_beside_three_consumers_never_have_an_effect_in_flight_twice_and_keep_each_task_s_order<
    E: Server,
>() {
    let (orbit, creds, sub) = OrbitDev::subscribed(30_000, 5, "outbox-many").await;
    let (_db, url) = E::database().await;
    let hook = Hook::start(r#"{"status":200,"delay":0.15}"#).await;
    let settings = [
        ("RECEIVER_RELAY_LEASE", "2s"),
        ("RECEIVER_NOTIFY_TIMEOUT", "1s"),
        ("RECEIVER_RELAY_POLL_INTERVAL", "50ms"),
        ("RECEIVER_RELAY_CONCURRENCY", "2"),
        ("RECEIVER_METRICS_ADDR", "127.0.0.1:0"),
    ];
    let env = hook.env(&settings);
    let mut processes: Vec<Consume> = (0..3)
        .map(|_| Consume::start(&orbit, &creds, &url, &sub, NAME, &env))
        .collect();
    processes.extend((0..2).map(|_| hook.relay(&url, &settings)));
    let q = creds.queue_id.clone();
    let tasks: Vec<String> = (0..6).map(|_| random_hex(16)).collect();
    let mut events = 0;
    for version in 1..=3 {
        for task in &tasks {
            let event = version_of(&q, task, version);
            orbit.inject(&sub, &event.json()).await;
            events += 1;
        }
    }
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(30), |c| {
            c["acked"] == events
        })
        .await;
    let states = states_until::<E>(
        &url,
        Duration::from_secs(30),
        &processes.iter().collect::<Vec<_>>(),
        all_sent,
    )
    .await;
    let seen = hook.endpoint.seen().await;
    let mut sent_by = Vec::new();
    for process in &processes {
        let metrics = process.metrics_url().await;
        let page = common::metrics::scrape(&metrics).await;
        let sent = common::metrics::value(
            &page,
            "receiver_outbox_attempts_total",
            &[("target", "notify"), ("result", "sent")],
        );
        sent_by.push(sent.unwrap_or(0.0) as usize);
    }
    for process in &mut processes {
        assert!(process.terminate().success(), "{}", process.output());
    }

    eprintln!(
        "{} effects of {events} events, sent by the five processes: {sent_by:?}, at most {} at once",
        states.len(),
        seen.max_in_flight
    );
    let effects: BTreeSet<String> = states.keys().cloned().collect();
    assert!(effects.len() >= tasks.len(), "{states:?}");
    assert!(
        seen.overlapping.is_empty(),
        "in flight twice: {:?}",
        seen.overlapping
    );
    let requests = seen.requests;
    assert_signed_under_effect_ids(&requests, &effects);
    assert_eq!(requests.len(), effects.len(), "sent twice: {requests:?}");
    let ids: BTreeSet<String> = requests.iter().map(|r| r.id.clone()).collect();
    assert_eq!(ids, effects);
    assert_eq!(sent_by.iter().sum::<usize>(), effects.len());
    assert!(
        sent_by.iter().filter(|n| **n > 0).count() >= 2,
        "{sent_by:?}"
    );
    for task in &tasks {
        let mut of: Vec<(&Received, Value)> = requests
            .iter()
            .map(|r| {
                (
                    r,
                    serde_json::from_slice(&hex::decode(&r.body_hex).unwrap()).unwrap(),
                )
            })
            .filter(|(_, body): &(&Received, Value)| body["task_id"] == task.as_str())
            .collect();
        of.sort_by(|a, b| a.0.start.total_cmp(&b.0.start));
        for pair in of.windows(2) {
            let (before, after) = (&pair[0], &pair[1]);
            assert!(
                before.1["version"].as_u64() < after.1["version"].as_u64(),
                "task {task}: {of:?}"
            );
            assert!(
                before.0.end <= after.0.start,
                "task {task} overlapped: {of:?}"
            );
        }
    }
}

/// The database stopped under a running `receiver relay`, while the
/// endpoint holds three sends, and started again: the relay keeps running
/// (its records fail and are tried again, its claims fail and are tried
/// again), nothing is lost — the effects in flight, the one waiting behind
/// its task's first, one recorded after the restart are all sent — and
/// every request carries its effect's id.
async fn a_database_restarted_under_a_relay_loses_nothing_and_sends_under_the_same_ids<
    E: Server,
>() {
    let (mut server, url) = E::private().await;
    let task = random_hex(16);
    let mut effects = Vec::new();
    {
        let notifier = Notifier::<E>::on(&url).await;
        effects.push(notifier.notify(&task, 1).await);
        for _ in 0..2 {
            effects.push(notifier.notify(&random_hex(16), 1).await);
        }
        effects.push(notifier.notify(&task, 2).await);
    }
    let hook = Hook::start(r#"{"status":200,"delay":2.0}"#).await;
    let mut relay = hook.relay(
        &url,
        &[
            ("RECEIVER_RELAY_LEASE", "4s"),
            ("RECEIVER_NOTIFY_TIMEOUT", "3s"),
            ("RECEIVER_RELAY_POLL_INTERVAL", "200ms"),
        ],
    );
    hook.endpoint
        .wait_in_flight(3, Duration::from_secs(20))
        .await;
    server.stop();
    printed(
        &relay,
        "relay could not record an answer; trying again",
        Duration::from_secs(20),
    )
    .await;
    server.restart();
    let notifier = Notifier::<E>::on(&url).await;
    effects.push(notifier.notify(&random_hex(16), 1).await);
    let states = states_until::<E>(&url, Duration::from_secs(60), &[&relay], |s| {
        s.len() == effects.len() && all_sent(s)
    })
    .await;
    let seen = hook.endpoint.seen().await.requests;
    assert!(relay.running(), "{}", relay.output());
    assert!(relay.terminate().success(), "{}", relay.output());

    let recorded: BTreeSet<String> = effects.iter().cloned().collect();
    assert_eq!(states.keys().cloned().collect::<BTreeSet<_>>(), recorded);
    assert_signed_under_effect_ids(&seen, &recorded);
    let ids: BTreeSet<String> = seen.iter().map(|r| r.id.clone()).collect();
    assert_eq!(ids, recorded, "an effect missing at the endpoint");
    eprintln!("sent: {:?}", counts(&seen).values().collect::<Vec<_>>());
    // The task's second notification only after its first was taken.
    let first_of_task = seen.iter().position(|r| r.id == effects[0]).unwrap();
    let second_of_task = seen.iter().position(|r| r.id == effects[3]).unwrap();
    assert!(seen[first_of_task].end <= seen[second_of_task].start);
}

/// A `410` from the endpoint: the effect is dead at once, `receiver outbox`
/// lists it with its answer, and once the endpoint is back, `receiver
/// outbox replay --effect ID` brings it back and the running relay sends it
/// under the same id. The relay leaves a gone target alone for
/// `RECEIVER_RELAY_GONE_PAUSE` (1 s here), and an effect it claimed meanwhile
/// keeps its lease (2 s here) unsent: the replayed effect goes out within
/// both.
async fn a_410_is_dead_listed_and_replayed_under_the_same_id_once_the_endpoint_is_back<
    E: Server,
>() {
    let (_db, url) = E::database().await;
    let notifier = Notifier::<E>::on(&url).await;
    let effect = notifier.notify(&random_hex(16), 1).await;
    let hook = Hook::start(r#"{"status":410}"#).await;
    let mut relay = hook.relay(
        &url,
        &[
            ("RECEIVER_RELAY_POLL_INTERVAL", "100ms"),
            ("RECEIVER_RELAY_GONE_PAUSE", "1s"),
            ("RECEIVER_RELAY_LEASE", "2s"),
            ("RECEIVER_NOTIFY_TIMEOUT", "1s"),
        ],
    );
    states_until::<E>(&url, Duration::from_secs(20), &[&relay], |s| {
        s[&effect] == "dead"
    })
    .await;
    printed(
        &relay,
        "target is gone: the effect is dead and the target's other effects wait",
        Duration::from_secs(5),
    )
    .await;
    let outbox = |args: &[&str]| {
        let out = receiver()
            .arg("outbox")
            .args(args)
            .env("ORBIT_RECEIVER_DSN", &url)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let listed = outbox(&[]);
    assert!(
        listed.starts_with(&format!("effect={effect} target=notify key="))
            && listed.contains(" state=dead attempts=1 last=410 age_s="),
        "{listed}"
    );
    assert!(
        listed.ends_with("\noutbox pending=0 dead=1 oldest_pending_age_s=-\n"),
        "{listed}"
    );

    hook.answer(r#"{"status":200}"#).await;
    assert_eq!(hook.endpoint.seen().await.requests.len(), 1);
    let replayed = outbox(&["replay", "--effect", &effect]);
    assert!(
        replayed.starts_with(&format!("effect={effect} target=notify result=replayed\n")),
        "{replayed}"
    );
    states_until::<E>(&url, Duration::from_secs(20), &[&relay], all_sent).await;
    let seen = hook.endpoint.seen().await.requests;
    assert_eq!(
        outbox(&[]),
        "outbox pending=0 dead=0 oldest_pending_age_s=-\n"
    );
    assert!(relay.terminate().success(), "{}", relay.output());

    assert_signed_under_effect_ids(&seen, &BTreeSet::from([effect.clone()]));
    let answers: Vec<(&str, u64)> = seen.iter().map(|r| (r.id.as_str(), r.status)).collect();
    assert_eq!(answers, [(effect.as_str(), 410), (effect.as_str(), 200)]);
}

on_both!(
    multi_thread:
    a_relay_killed_after_the_2xx_before_its_record_sends_again_under_the_same_id,
    a_lost_commit_of_the_sent_record_loses_nothing_and_sends_again_only_under_the_same_id,
    an_endpoint_down_30_s_stops_no_delivery_and_gets_every_effect_within_the_backoff,
    two_relays_beside_three_consumers_never_have_an_effect_in_flight_twice_and_keep_each_task_s_order,
    a_database_restarted_under_a_relay_loses_nothing_and_sends_under_the_same_ids,
    a_410_is_dead_listed_and_replayed_under_the_same_id_once_the_endpoint_is_back,
);
