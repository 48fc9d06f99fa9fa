//! `receiver consume --notify-url` and `receiver relay` as real processes,
//! over real Orbit deliveries, to a real webhook endpoint that verifies
//! each signature with the `standardwebhooks` package: every delivery that
//! advanced the view notified once, under its effect's id, a task's
//! notifications in version order, nothing for a duplicate or a stale
//! version; on MySQL and PostgreSQL.

use crate::common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::consume::Consume;
use common::orbit::{http, receiver, OrbitDev, QueueCredentials};
use common::postgres::PgTestDb;
use common::webhook::{Endpoint, Received};
use common::{dsn_for, random_hex, write_private, EventSpec, TestDb};
use result_inbox::ids::{EventId, SubscriptionId};
use result_inbox::outbox::{EffectId, EffectKey, Target};
use result_inbox::scope::{InboxScope, ReceiverName};
use serde_json::Value;
use sha2::{Digest, Sha256};

pub(crate) const NAME: &str = "task-result-view";

pub(crate) fn text(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

/// A notification's body has exactly the documented fields, `result`
/// only when it was asked for.
pub(crate) fn assert_notification_fields(body: &Value, with_result: bool) {
    let keys: BTreeSet<&str> = body
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let mut fields = vec![
        "receiver",
        "queue_id",
        "task_id",
        "state",
        "version",
        "event_id",
        "result_sha256",
    ];
    if with_result {
        fields.push("result");
    }
    assert_eq!(keys, fields.into_iter().collect::<BTreeSet<_>>());
}

/// `receiver init --outbox` on `dsn`.
pub(crate) fn init_with_outbox(dsn: &str) {
    let out = receiver()
        .args(["init", "--outbox"])
        .env("ORBIT_RECEIVER_DSN", dsn)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
}

/// The endpoint's secret in a file only its owner may read.
pub(crate) fn secret_file(dir: &Path, secret: &str) -> PathBuf {
    let path = dir.join(format!("notify-secret-{}", random_hex(4)));
    write_private(&path, secret.as_bytes());
    path
}

/// The notify settings for `url` with the secret in `secret`.
pub(crate) fn notify_env<'a>(url: &'a str, secret: &'a Path) -> Vec<(&'a str, &'a str)> {
    vec![
        ("RECEIVER_NOTIFY_URL", url),
        ("RECEIVER_NOTIFY_SECRET_FILE", secret.to_str().unwrap()),
    ]
}

/// The effect id of the webhook's notification of `event`.
fn effect_id(creds: &QueueCredentials, event: &str) -> String {
    effect_id_for(creds, event, "notify")
}

/// The effect id of the notification of `event` for `target`.
pub(crate) fn effect_id_for(creds: &QueueCredentials, event: &str, target: &str) -> String {
    let scope = InboxScope::new(ReceiverName::parse(NAME).unwrap(), creds.queue());
    EffectId::derive(
        &scope,
        &EventId::parse(event).unwrap(),
        &Target::parse(target).unwrap(),
        &EffectKey::parse(event).unwrap(),
    )
    .as_str()
    .to_owned()
}

fn body(request: &Received) -> Value {
    serde_json::from_slice(&hex::decode(&request.body_hex).unwrap()).unwrap()
}

/// The notification of `spec`, as the endpoint must receive it.
pub(crate) fn expected(creds: &QueueCredentials, spec: &EventSpec<'_>, with_result: bool) -> Value {
    let result = spec.result.map(|r| {
        let canonical = result_inbox::digest::canonicalize(r.as_bytes()).unwrap();
        (
            hex::encode(Sha256::digest(canonical.as_bytes())),
            serde_json::from_str::<Value>(r).unwrap(),
        )
    });
    let mut body = serde_json::json!({
        "receiver": NAME,
        "queue_id": creds.queue_id,
        "task_id": spec.task_id,
        "state": spec.state,
        "version": spec.version,
        "event_id": spec.id,
        "result_sha256": result.as_ref().map(|(sha, _)| sha.clone()),
    });
    if with_result {
        body["result"] = result.map(|(_, r)| r).unwrap_or(Value::Null);
    }
    body
}

pub(crate) fn succeeded<'a>(
    queue: &'a str,
    task: &'a str,
    version: u64,
    result: &'a str,
) -> EventSpec<'a> {
    EventSpec {
        version,
        event_type: "task.succeeded",
        state: "SUCCEEDED",
        result: Some(result),
        ..EventSpec::submitted(queue, task)
    }
}

/// Every request came once, verified by the package, under its effect's
/// id (the idempotency key too), with exactly `expected`'s bodies.
pub(crate) fn assert_notified(
    seen: &[Received],
    creds: &QueueCredentials,
    expected_bodies: &[Value],
    with_result: bool,
) {
    assert_eq!(seen.len(), expected_bodies.len(), "{seen:?}");
    for request in seen {
        assert!(request.verified, "{}", request.verify_error);
        assert_eq!(request.idempotency_key, request.id);
        assert_eq!(request.content_type, "application/json");
        let got = body(request);
        assert_notification_fields(&got, with_result);
        let event = got["event_id"].as_str().unwrap();
        assert_eq!(request.id, effect_id(creds, event));
        assert!(
            expected_bodies.contains(&got),
            "{got} not in {expected_bodies:?}"
        );
    }
    let ids: BTreeSet<&str> = seen.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids.len(), seen.len(), "an effect came twice: {seen:?}");
}

/// The versions the endpoint received for `task`, in the order it did.
fn versions_of(seen: &[Received], task: &str) -> Vec<u64> {
    let mut of_task: Vec<&Received> = seen.iter().filter(|r| body(r)["task_id"] == task).collect();
    of_task.sort_by(|a, b| a.start.total_cmp(&b.start));
    of_task
        .iter()
        .map(|r| body(r)["version"].as_u64().unwrap())
        .collect()
}

/// `receiver check` of Orbit's subscription `sub` and the database `dsn`,
/// with the notify settings `env`.
pub(crate) fn check_notify(
    creds: &QueueCredentials,
    sub: &SubscriptionId,
    dsn: &str,
    env: &[(&str, &str)],
) -> std::process::Output {
    receiver()
        .arg("check")
        .env("ORBIT_CREDENTIALS_FILE", &creds.file)
        .env("ORBIT_SUBSCRIPTION_ID", sub.as_str())
        .env("ORBIT_RECEIVER_DSN", dsn)
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

/// `check`'s output fails `check=notify` with `check_says`, and `consume`,
/// started with the same settings, stops at once with exit 2 naming
/// `consume_says`: settings that cannot work stop it before anything is
/// leased.
pub(crate) fn assert_refused_at_start(
    check: &std::process::Output,
    check_says: &str,
    consume: &mut Consume,
    consume_says: &str,
) {
    let stdout = String::from_utf8_lossy(&check.stdout);
    assert_eq!(check.status.code(), Some(1), "{}", text(check));
    assert!(
        stdout.contains(&format!("check=notify FAIL {check_says}")),
        "{stdout}"
    );
    assert_eq!(
        consume.wait_exit(std::time::Duration::from_secs(20)).code(),
        Some(2),
        "{}",
        consume.output()
    );
    assert!(
        consume.output().contains(consume_says),
        "{}",
        consume.output()
    );
}

pub(crate) async fn mysql_states(db: &TestDb) -> Vec<String> {
    sqlx::query_scalar("SELECT CAST(state AS CHAR) FROM receiver_outbox ORDER BY seq")
        .fetch_all(&db.pool().await)
        .await
        .unwrap()
}

#[tokio::test]
async fn consume_notifies_each_applied_delivery_once_signed_and_nothing_for_a_duplicate_or_a_stale_version(
) {
    let (orbit, creds, sub) = OrbitDev::subscribed(30_000, 5, "notify").await;
    let db = TestDb::empty().await;
    let dsn = dsn_for(&db.name);
    init_with_outbox(&dsn);
    let hook = Endpoint::start();
    let secret = secret_file(&orbit.dir, &hook.secret);
    let url = hook.url("/hooks/tasks");
    let q = creds.queue_id.clone();
    let (t1, t2, t3) = (random_hex(16), random_hex(16), random_hex(16));
    let first = [
        EventSpec::submitted(&q, &t1),
        EventSpec::submitted(&q, &t2),
        succeeded(&q, &t3, 2, r#"{"rows": 3, "note": "fertig – 完成"}"#),
    ];
    for spec in &first {
        orbit.inject(&sub, &spec.json()).await;
    }
    let mut env = notify_env(&url, &secret);
    env.push(("RECEIVER_METRICS_ADDR", "127.0.0.1:0"));
    // A poll far longer than the time a woken relay takes, even on a
    // machine under load: what is sent within it was sent on a wake.
    env.push(("RECEIVER_RELAY_POLL_INTERVAL", "30s"));
    let mut consume = Consume::on_test_db(&orbit, &creds, &db, &sub, &env);
    let metrics = consume.metrics_url().await;
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(20), |c| c["acked"] == 3)
        .await;
    // A second version of t1, a redelivered copy of t2's event, and an
    // older version of t3 than its view holds.
    let later = succeeded(&q, &t1, 2, r#"{"ok":true}"#);
    let stale = EventSpec::submitted(&q, &t3);
    orbit.inject(&sub, &later.json()).await;
    orbit.inject(&sub, &first[1].json()).await;
    orbit.inject(&sub, &stale.json()).await;
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(20), |c| c["acked"] == 6)
        .await;
    hook.wait_for(4, Duration::from_secs(10)).await;
    // Anything sent twice, or for the duplicate or the stale version,
    // would come on the wake of the COMMIT that recorded it.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let seen = hook.seen().await.requests;
    let (_, scraped) = http("GET", &format!("{metrics}/metrics"), "", String::new()).await;
    assert!(consume.terminate().success(), "{}", consume.output());
    // Woken by each COMMIT, the relay sends at once, not at its next poll
    // (30 s).
    let page = common::metrics::parse(&scraped);
    let sent_within = |le: f64| {
        page.samples
            .iter()
            .filter(|s| s.metric == "receiver_outbox_commit_to_sent_seconds")
            .filter(|s| s.labels.get("target") == Some("notify"))
            .find_map(|s| match &s.value {
                prometheus_parse::Value::Histogram(buckets) => {
                    buckets.iter().find(|b| b.less_than == le).map(|b| b.count)
                }
                _ => None,
            })
            .unwrap_or_else(|| panic!("no bucket le={le} in {scraped}"))
    };
    assert_eq!(sent_within(1.0), 4.0, "{scraped}");
    let bodies: Vec<Value> = [&first[0], &first[1], &first[2], &later]
        .into_iter()
        .map(|spec| expected(&creds, spec, false))
        .collect();
    assert_notified(&seen, &creds, &bodies, false);
    assert!(seen.iter().all(|r| r.path == "/hooks/tasks"));
    assert_eq!(versions_of(&seen, &t1), [1, 2]);
    let logged = consume.output();
    assert_eq!(logged.matches("class=\"duplicate\"").count(), 1, "{logged}");
    assert_eq!(logged.matches("class=\"stale\"").count(), 1, "{logged}");
    assert!(!logged.contains(&hook.secret), "{logged}");
    let states = mysql_states(&db).await;
    assert_eq!(states.len(), 4, "{states:?}");
    assert!(states.iter().all(|s| s == "sent"), "{states:?}");
}

#[tokio::test]
async fn on_postgres_in_batching_mode_with_the_result_a_tasks_notifications_arrive_in_version_order(
) {
    let (orbit, creds, sub) = OrbitDev::subscribed(30_000, 5, "notify-pg").await;
    let db = PgTestDb::new().await;
    init_with_outbox(&db.dsn);
    let hook = Endpoint::start();
    let secret = secret_file(&orbit.dir, &hook.secret);
    let url = hook.url("/hooks/pg");
    let q = creds.queue_id.clone();
    let task = random_hex(16);
    let v1 = EventSpec::submitted(&q, &task);
    let v2 = succeeded(&q, &task, 2, r#"{"z": [1, 2.50], "a": "Ä"}"#);
    let mut env = notify_env(&url, &secret);
    env.extend([
        ("RECEIVER_NOTIFY_INCLUDE_RESULT", "true"),
        ("RECEIVER_BATCH_MAX", "8"),
    ]);
    // Waiting together, the first receipts share batches, which a set
    // path would apply without their notifications.
    let others: Vec<String> = (0..7).map(|_| random_hex(16)).collect();
    let mut firsts = vec![v1];
    firsts.extend(others.iter().map(|t| EventSpec::submitted(&q, t)));
    for spec in &firsts {
        orbit.inject(&sub, &spec.json()).await;
    }
    let mut consume = Consume::start(&orbit, &creds, &db.dsn, &sub, NAME, &env);
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(20), |c| c["acked"] == 8)
        .await;
    orbit.inject(&sub, &v2.json()).await;
    let seen = hook.wait_for(9, Duration::from_secs(20)).await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let seen_after = hook.seen().await.requests;
    assert!(consume.terminate().success(), "{}", consume.output());
    assert_eq!(seen.len(), seen_after.len());
    let mut bodies: Vec<Value> = firsts.iter().map(|s| expected(&creds, s, true)).collect();
    bodies.push(expected(&creds, &v2, true));
    assert_notified(&seen_after, &creds, &bodies, true);
    assert_eq!(versions_of(&seen_after, &task), [1, 2]);
    let sent: i64 = sqlx::query_scalar("SELECT count(*) FROM receiver_outbox WHERE state = 'sent'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(sent, 9);
}

#[tokio::test]
async fn consume_with_a_webhook_but_no_outbox_exits_2_naming_the_init_command_and_check_says_so() {
    let (orbit, creds, sub) = OrbitDev::subscribed(30_000, 5, "notify-no-outbox").await;
    let db = TestDb::initialized().await;
    let hook = Endpoint::start();
    let secret = secret_file(&orbit.dir, &hook.secret);
    let url = hook.url("/hooks");
    let env = notify_env(&url, &secret);
    let mut consume = Consume::on_test_db(&orbit, &creds, &db, &sub, &env);
    let status = consume.wait_exit(Duration::from_secs(20));
    assert_eq!(status.code(), Some(2), "{}", consume.output());
    assert!(
        consume
            .output()
            .contains("receiver init --keep-existing --outbox"),
        "{}",
        consume.output()
    );
    let check = |env: &[(&str, &str)]| {
        receiver()
            .arg("check")
            .env("ORBIT_CREDENTIALS_FILE", &creds.file)
            .env("ORBIT_SUBSCRIPTION_ID", sub.as_str())
            .env("ORBIT_RECEIVER_DSN", dsn_for(&db.name))
            .envs(env.iter().copied())
            .output()
            .unwrap()
    };
    let out = check(&env);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let outbox_line = stdout
        .lines()
        .find(|l| l.starts_with("check=outbox "))
        .unwrap();
    assert!(
        outbox_line.starts_with("check=outbox FAIL table receiver_outbox is missing"),
        "{stdout}"
    );
    assert!(
        outbox_line.contains("receiver init --keep-existing --outbox"),
        "{stdout}"
    );
    assert!(stdout.contains("check=notify ok\n"), "{stdout}");
    // With the outbox the same check passes; a host that answers no
    // connect fails its line.
    let out = receiver()
        .args(["init", "--keep-existing", "--outbox"])
        .env("ORBIT_RECEIVER_DSN", dsn_for(&db.name))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let out = check(&env);
    assert!(out.status.success(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("check=outbox ok\n"));
    let closed = format!("http://127.0.0.1:{}/hooks", closed_port());
    let out = check(&notify_env(&closed, &secret));
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains("check=notify FAIL the webhook's host 127.0.0.1:"),
        "{}",
        text(&out)
    );
    assert!(!text(&out).contains(&hook.secret));
}

#[tokio::test]
async fn a_secret_file_others_may_read_is_refused_and_a_url_that_is_not_http_too() {
    let (orbit, creds, sub) = OrbitDev::subscribed(30_000, 5, "notify-secret").await;
    let db = TestDb::empty().await;
    let dsn = dsn_for(&db.name);
    init_with_outbox(&dsn);
    let hook = Endpoint::start();
    let open = orbit.dir.join("open-secret");
    std::fs::write(&open, &hook.secret).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
    let url = hook.url("/hooks");
    let mut consume = Consume::on_test_db(&orbit, &creds, &db, &sub, &notify_env(&url, &open));
    assert_eq!(consume.wait_exit(Duration::from_secs(10)).code(), Some(2));
    let logged = consume.output();
    assert!(logged.contains("RECEIVER_NOTIFY_SECRET_FILE"), "{logged}");
    assert!(logged.contains("group or others"), "{logged}");
    assert!(!logged.contains(&hook.secret), "{logged}");
    let private = secret_file(&orbit.dir, &hook.secret);
    let out = receiver()
        .arg("relay")
        .env("ORBIT_RECEIVER_DSN", &dsn)
        .envs(notify_env("ftp://127.0.0.1/hooks", &private))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("RECEIVER_NOTIFY_URL"), "{}", text(&out));
}

/// A loopback port nothing listens on.
pub(crate) fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `receiver outbox --json` on `dsn`: (pending, dead).
fn outbox_counts(dsn: &str) -> (u64, u64) {
    let out = receiver()
        .args(["outbox", "--json"])
        .env("ORBIT_RECEIVER_DSN", dsn)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    (
        listed["pending"].as_u64().unwrap(),
        listed["dead"].as_u64().unwrap(),
    )
}

/// Consume with the endpoint down leaves every notification pending;
/// `receiver relay` alone, once it is up, sends each once.
async fn relay_alone_sends_what_consume_left_pending(dsn: &str, namespace: &str) {
    let (orbit, creds, sub) = OrbitDev::subscribed(30_000, 5, namespace).await;
    init_with_outbox(dsn);
    let q = creds.queue_id.clone();
    let tasks: Vec<String> = (0..3).map(|_| random_hex(16)).collect();
    let specs: Vec<EventSpec<'_>> = tasks.iter().map(|t| EventSpec::submitted(&q, t)).collect();
    for spec in &specs {
        orbit.inject(&sub, &spec.json()).await;
    }
    // No endpoint yet: the relay beside consume sends nothing.
    let down = format!("http://127.0.0.1:{}/hooks", closed_port());
    let placeholder = secret_file(&orbit.dir, "whsec_dGhlIGVuZHBvaW50IGlzIGRvd24=");
    let env = notify_env(&down, &placeholder);
    let mut consume = Consume::start(&orbit, &creds, dsn, &sub, NAME, &env);
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(20), |c| c["acked"] == 3)
        .await;
    assert!(consume.terminate().success(), "{}", consume.output());
    assert_eq!(outbox_counts(dsn), (3, 0));
    // The endpoint is up: the relay alone sends each once.
    let hook = Endpoint::start();
    let secret = secret_file(&orbit.dir, &hook.secret);
    let url = hook.url("/hooks");
    let mut env = notify_env(&url, &secret);
    env.extend([
        ("ORBIT_RECEIVER_DSN", dsn),
        ("RECEIVER_METRICS_ADDR", "127.0.0.1:0"),
    ]);
    let mut relay = Consume::relay(&orbit.dir, &env);
    let metrics = relay.metrics_url().await;
    hook.wait_for(3, Duration::from_secs(15)).await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let seen = hook.seen().await.requests;
    let (_, scraped) = http("GET", &format!("{metrics}/metrics"), "", String::new()).await;
    assert!(relay.terminate().success(), "{}", relay.output());
    let bodies: Vec<Value> = specs.iter().map(|s| expected(&creds, s, false)).collect();
    assert_notified(&seen, &creds, &bodies, false);
    assert!(
        scraped.contains("receiver_outbox_attempts_total{target=\"notify\",result=\"sent\"} 3"),
        "{scraped}"
    );
    assert_eq!(outbox_counts(dsn), (0, 0));
    assert!(!relay.output().contains(&hook.secret));
}

#[tokio::test]
async fn relay_alone_sends_once_what_consume_left_pending_while_the_endpoint_was_down() {
    let db = TestDb::empty().await;
    relay_alone_sends_what_consume_left_pending(&dsn_for(&db.name), "notify-relay").await;
    let states = mysql_states(&db).await;
    assert_eq!(states, ["sent", "sent", "sent"]);
}

#[tokio::test]
async fn on_postgres_relay_alone_sends_once_what_consume_left_pending() {
    let db = PgTestDb::new().await;
    relay_alone_sends_what_consume_left_pending(&db.dsn, "notify-relay-pg").await;
}

/// `RECEIVER_RELAY_CONCURRENCY` bounds the sends `receiver relay` has in
/// flight: four effects of four tasks, each answer held 400 ms, two at a
/// time (the default, 16, would send all four at once).
#[tokio::test]
async fn receiver_relay_sends_no_more_at_once_than_its_concurrency_setting() {
    use crate::outbox_crash::{Hook, Notifier, Server};
    let (_db, url) = <sqlx::MySql as Server>::database().await;
    let notifier = Notifier::<sqlx::MySql>::on(&url).await;
    for _ in 0..4 {
        notifier.notify(&random_hex(16), 1).await;
    }
    let hook = Hook::start(r#"{"status":200,"delay":0.4}"#).await;
    let mut relay = hook.relay(
        &url,
        &[
            ("RECEIVER_RELAY_CONCURRENCY", "2"),
            ("RECEIVER_RELAY_POLL_INTERVAL", "50ms"),
        ],
    );
    hook.requests(4, Duration::from_secs(20)).await;
    let seen = hook.endpoint.seen().await;
    assert!(relay.terminate().success(), "{}", relay.output());
    assert_eq!(seen.max_in_flight, 2, "{:?}", seen.requests);
}
