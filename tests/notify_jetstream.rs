//! `receiver consume --notify-nats-subject` as a real process, over real
//! Orbit deliveries, to a real nats-server's stream: every delivery that
//! advanced the view published once, under `Nats-Msg-Id` = its effect's
//! id, a task's notifications in version order, nothing for a duplicate or
//! a stale version; a webhook and a subject both told of each one; and a
//! subject no stream captures named by `check` and refused by `consume`.
#![cfg(feature = "nats")]

use crate::common;
use crate::notify::{
    assert_notification_fields, assert_notified, assert_refused_at_start, check_notify,
    effect_id_for, expected, init_with_outbox, mysql_states, notify_env, secret_file, succeeded,
    text, NAME,
};

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, message::StreamMessage};
use common::consume::Consume;
use common::nats::{header, notify_stream, stream_messages, NatsServer};
use common::orbit::{receiver, OrbitDev, QueueCredentials};
use common::postgres::PgTestDb;
use common::webhook::Endpoint;
use common::{dsn_for, random_hex, EventSpec, TestDb};
use serde_json::Value;

/// The stream's messages once it holds `n`, or a panic after `within`.
async fn wait_messages(
    js: &jetstream::Context,
    stream: &str,
    n: usize,
    within: Duration,
) -> Vec<StreamMessage> {
    let until = Instant::now() + within;
    loop {
        let messages = stream_messages(js, stream).await;
        if messages.len() >= n {
            return messages;
        }
        assert!(Instant::now() < until, "{} of {n} messages", messages.len());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn body(message: &StreamMessage) -> Value {
    serde_json::from_slice(&message.payload).unwrap()
}

/// Every message came once, under its notification's effect id, with
/// exactly `expected`'s bodies and fields.
fn assert_published(
    messages: &[StreamMessage],
    creds: &QueueCredentials,
    expected_bodies: &[Value],
) {
    assert_eq!(messages.len(), expected_bodies.len(), "{messages:?}");
    for message in messages {
        let got = body(message);
        assert_notification_fields(&got, false);
        let event = got["event_id"].as_str().unwrap();
        assert_eq!(
            header(message, "Nats-Msg-Id").unwrap(),
            effect_id_for(creds, event, "notify-nats")
        );
        assert_eq!(
            header(message, "content-type").as_deref(),
            Some("application/json")
        );
        assert!(
            expected_bodies.contains(&got),
            "{got} not in {expected_bodies:?}"
        );
    }
    let ids: BTreeSet<String> = messages
        .iter()
        .map(|m| header(m, "Nats-Msg-Id").unwrap())
        .collect();
    assert_eq!(ids.len(), messages.len(), "an effect came twice");
}

/// The versions the stream holds for `task`, in stream order.
fn versions_of(messages: &[StreamMessage], task: &str) -> Vec<u64> {
    messages
        .iter()
        .map(body)
        .filter(|b| b["task_id"] == task)
        .map(|b| b["version"].as_u64().unwrap())
        .collect()
}

#[tokio::test]
async fn consume_publishes_each_applied_delivery_once_a_tasks_versions_in_order_and_nothing_for_a_duplicate_or_a_stale_version(
) {
    let server = NatsServer::start();
    let js = server.jetstream().await;
    let subject = format!("notify.tasks.{}", random_hex(4));
    // Full at first (one message, new ones refused), so that every
    // notification waits in the outbox, each task's second behind its
    // first.
    let stream = notify_stream(&js, &subject, |c| {
        c.max_messages = 1;
        c.discard = jetstream::stream::DiscardPolicy::New;
    })
    .await;
    js.publish(subject.clone(), "placeholder".into())
        .await
        .unwrap()
        .await
        .unwrap();
    let (orbit, creds, sub) = OrbitDev::subscribed(30_000, 5, "notify-nats").await;
    let db = TestDb::empty().await;
    init_with_outbox(&dsn_for(&db.name));
    let q = creds.queue_id.clone();
    // Six tasks with two versions each (the third's from 2), so that
    // versions sent in any order would show.
    let tasks: Vec<String> = (0..6).map(|_| random_hex(16)).collect();
    let first: Vec<EventSpec<'_>> = tasks
        .iter()
        .enumerate()
        .map(|(i, task)| match i {
            2 => succeeded(&q, task, 2, r#"{"rows": 3, "note": "fertig – 完成"}"#),
            _ => EventSpec::submitted(&q, task),
        })
        .collect();
    for spec in &first {
        orbit.inject(&sub, &spec.json()).await;
    }
    let url = server.url();
    let env = [
        ("RECEIVER_NOTIFY_NATS_SUBJECT", subject.as_str()),
        ("NATS_URL", url.as_str()),
    ];
    let mut consume = Consume::on_test_db(&orbit, &creds, &db, &sub, &env);
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(20), |c| c["acked"] == 6)
        .await;
    // The next versions, a redelivered copy of the second task's event,
    // and an older version of the third than its view holds.
    let later: Vec<EventSpec<'_>> = first
        .iter()
        .map(|spec| succeeded(&q, spec.task_id, spec.version + 1, r#"{"ok":true}"#))
        .collect();
    let stale = EventSpec::submitted(&q, &tasks[2]);
    for spec in later.iter().chain([&first[1], &stale]) {
        orbit.inject(&sub, &spec.json()).await;
    }
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(20), |c| c["acked"] == 14)
        .await;
    let mut handle = js.get_stream(&stream).await.unwrap();
    let mut config = handle.info().await.unwrap().config.clone();
    (config.max_messages, config.discard) = (-1, jetstream::stream::DiscardPolicy::Old);
    js.update_stream(config).await.unwrap();
    handle.purge().await.unwrap();
    wait_messages(&js, &stream, 12, Duration::from_secs(20)).await;
    // Anything published twice, or for the duplicate or the stale version,
    // would come within the relay's poll.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let messages = stream_messages(&js, &stream).await;
    assert!(consume.terminate().success(), "{}", consume.output());
    let bodies: Vec<Value> = first
        .iter()
        .chain(&later)
        .map(|spec| expected(&creds, spec, false))
        .collect();
    assert_published(&messages, &creds, &bodies);
    assert!(messages.iter().all(|m| m.subject.as_str() == subject));
    for spec in &first {
        let versions = [spec.version, spec.version + 1];
        assert_eq!(versions_of(&messages, spec.task_id), versions);
    }
    let logged = consume.output();
    assert_eq!(logged.matches("class=\"duplicate\"").count(), 1, "{logged}");
    assert_eq!(logged.matches("class=\"stale\"").count(), 1, "{logged}");
    assert!(
        logged.contains("jetstream 10077"),
        "the full stream refused: {logged}"
    );
    let states = mysql_states(&db).await;
    assert_eq!(states.len(), 12, "{states:?}");
    assert!(states.iter().all(|s| s == "sent"), "{states:?}");
}

#[tokio::test]
async fn on_postgres_a_webhook_and_a_subject_both_get_each_notification_under_ids_of_their_own() {
    let server = NatsServer::start();
    let js = server.jetstream().await;
    let subject = format!("notify.both.{}", random_hex(4));
    let stream = notify_stream(&js, &subject, |_| {}).await;
    let (orbit, creds, sub) = OrbitDev::subscribed(30_000, 5, "notify-both").await;
    let db = PgTestDb::new().await;
    init_with_outbox(&db.dsn);
    let hook = Endpoint::start();
    let secret = secret_file(&orbit.dir, &hook.secret);
    let hook_url = hook.url("/hooks/both");
    let q = creds.queue_id.clone();
    let (task, other) = (random_hex(16), random_hex(16));
    let specs = [
        EventSpec::submitted(&q, &task),
        EventSpec::submitted(&q, &other),
        succeeded(&q, &task, 2, r#"{"a": 1}"#),
    ];
    let url = server.url();
    let mut env = notify_env(&hook_url, &secret);
    env.extend([
        ("RECEIVER_NOTIFY_NATS_SUBJECT", subject.as_str()),
        ("NATS_URL", url.as_str()),
    ]);
    let mut consume = Consume::start(&orbit, &creds, &db.dsn, &sub, NAME, &env);
    for spec in &specs {
        orbit.inject(&sub, &spec.json()).await;
        // One at a time, so that the task's versions come in order.
        let n = specs.iter().position(|s| s.id == spec.id).unwrap() + 1;
        orbit
            .wait_for_counts(&creds, &sub, Duration::from_secs(20), |c| c["acked"] == n)
            .await;
    }
    let seen = hook.wait_for(3, Duration::from_secs(10)).await;
    let messages = wait_messages(&js, &stream, 3, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let seen_after = hook.seen().await.requests;
    let messages_after = stream_messages(&js, &stream).await;
    assert!(consume.terminate().success(), "{}", consume.output());
    assert_eq!(
        (seen.len(), messages.len()),
        (seen_after.len(), messages_after.len())
    );
    let bodies: Vec<Value> = specs.iter().map(|s| expected(&creds, s, false)).collect();
    assert_notified(&seen_after, &creds, &bodies, false);
    assert_published(&messages_after, &creds, &bodies);
    assert_eq!(versions_of(&messages_after, &task), [1, 2]);
    let webhook_ids: BTreeSet<&str> = seen_after.iter().map(|r| r.id.as_str()).collect();
    let nats_ids: BTreeSet<String> = messages_after
        .iter()
        .map(|m| header(m, "Nats-Msg-Id").unwrap())
        .collect();
    assert!(
        nats_ids.iter().all(|id| !webhook_ids.contains(id.as_str())),
        "each target's effect has an id of its own"
    );
    let sent: i64 = sqlx::query_scalar("SELECT count(*) FROM receiver_outbox WHERE state = 'sent'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(sent, 6, "two effects per applied delivery");
}

#[tokio::test]
async fn a_subject_no_stream_captures_fails_check_and_stops_consume_naming_what_to_create() {
    let server = NatsServer::start();
    let js = server.jetstream().await;
    let subject = format!("notify.none.{}", random_hex(4));
    let (orbit, creds, sub) = OrbitDev::subscribed(30_000, 5, "notify-nats-check").await;
    let db = TestDb::empty().await;
    let dsn = dsn_for(&db.name);
    init_with_outbox(&dsn);
    let url = server.url();
    let env = [
        ("RECEIVER_NOTIFY_NATS_SUBJECT", subject.as_str()),
        ("NATS_URL", url.as_str()),
    ];
    let check = || check_notify(&creds, &sub, &dsn, &env);
    assert_refused_at_start(
        &check(),
        &format!("no stream captures subject \"{subject}\": create one, e.g. `nats stream add"),
        &mut Consume::on_test_db(&orbit, &creds, &db, &sub, &env),
        "no stream captures subject",
    );

    // With the stream JetStream's default window, shorter than the
    // relay's longest wait between attempts: a warning, not a failure.
    let stream = notify_stream(&js, &subject, |_| {}).await;
    let out = check();
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(stdout.contains("check=notify ok\n"), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "check=notify_stream WARN stream {stream} deduplicates within 120 s"
        )),
        "{stdout}"
    );
    let mut config = js
        .get_stream(&stream)
        .await
        .unwrap()
        .info()
        .await
        .unwrap()
        .config
        .clone();
    config.duplicate_window = Duration::from_secs(900);
    js.update_stream(config).await.unwrap();
    let out = check();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        stdout.contains(&format!(
            "check=notify_stream ok stream {stream} captures subject \"{subject}\", duplicate window 900 s"
        )),
        "{stdout}"
    );

    // Settings that cannot work are refused before anything connects.
    let refused = |env: &[(&str, &str)]| {
        let out = receiver()
            .arg("relay")
            .env("ORBIT_RECEIVER_DSN", &dsn)
            .env_remove("NATS_URL")
            .envs(env.iter().copied())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        text(&out)
    };
    let no_url = refused(&[("RECEIVER_NOTIFY_NATS_SUBJECT", &subject)]);
    assert!(no_url.contains("NATS_URL is not set"), "{no_url}");
    let wildcard = refused(&[
        ("RECEIVER_NOTIFY_NATS_SUBJECT", "notify.>"),
        ("NATS_URL", &url),
    ]);
    assert!(
        wildcard.contains("RECEIVER_NOTIFY_NATS_SUBJECT: \"notify.>\""),
        "{wildcard}"
    );
    let queue_subject = format!("orbit.results.{}", creds.queue_id);
    let mut consume_own = receiver();
    consume_own
        .arg("consume")
        .env("RECEIVER_SOURCE", "nats")
        .env("NATS_URL", &url)
        .env("NATS_STREAM", "ORBIT")
        .env("NATS_CONSUMER", "receiver")
        .env("ORBIT_QUEUE_ID", &creds.queue_id)
        .env("ORBIT_RECEIVER_DSN", &dsn)
        .env("RECEIVER_NOTIFY_NATS_SUBJECT", &queue_subject);
    let out = consume_own.output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("the subject this receiver consumes"),
        "{}",
        text(&out)
    );
}
