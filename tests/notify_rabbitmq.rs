//! `receiver consume --notify-amqp-queue` as a real process, over real
//! Orbit deliveries, to a queue of a real RabbitMQ node: every delivery
//! that advanced the view published once, persistent, under `message_id` =
//! its effect's id, nothing for a duplicate; a queue that is not there
//! named by `check` and refused by `consume`; the queue `consume` takes
//! its deliveries from refused as a notify queue, and one without
//! AMQP_URL refused before anything connects.
#![cfg(feature = "rabbitmq")]

use crate::common;
use crate::notify::{
    assert_notification_fields, assert_refused_at_start, check_notify, effect_id_for, expected,
    init_with_outbox, text,
};

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use amqprs::BasicProperties;
use common::consume::Consume;
use common::orbit::{receiver, OrbitDev};
use common::rabbitmq::{declare_classic, RabbitNode, RabbitQueue};
use common::{dsn_for, random_hex, EventSpec, TestDb};
use serde_json::Value;

/// Every message of `queue` once it holds `n`, taken, or a panic after
/// `within`.
async fn take_all(
    node: &RabbitQueue,
    queue: &str,
    n: u32,
    within: Duration,
) -> Vec<(BasicProperties, Vec<u8>)> {
    let until = Instant::now() + within;
    while node.ready(queue).await < n {
        assert!(Instant::now() < until, "fewer than {n} messages");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut messages = Vec::new();
    while let Some(message) = node.take(queue).await {
        messages.push(message);
    }
    messages
}

#[tokio::test]
async fn consume_publishes_each_applied_delivery_once_under_its_effect_id_and_nothing_for_a_duplicate(
) {
    let node = RabbitQueue::create(&RabbitNode::shared(), 2).await;
    let queue = format!("notify.tasks.{}", random_hex(4));
    declare_classic(&node.url, &queue).await;
    let (orbit, creds, sub) = OrbitDev::subscribed(30_000, 5, "notify-rabbitmq").await;
    let db = TestDb::empty().await;
    init_with_outbox(&dsn_for(&db.name));
    let q = creds.queue_id.clone();
    let tasks: Vec<String> = (0..3).map(|_| random_hex(16)).collect();
    let specs: Vec<EventSpec<'_>> = tasks
        .iter()
        .map(|task| EventSpec::submitted(&q, task))
        .collect();
    for spec in &specs {
        orbit.inject(&sub, &spec.json()).await;
    }
    // A copy of the first event, delivered again: a duplicate.
    orbit.inject(&sub, &specs[0].json()).await;
    let env = [
        ("RECEIVER_NOTIFY_AMQP_QUEUE", queue.as_str()),
        ("AMQP_URL", node.url.as_str()),
    ];
    let mut consume = Consume::on_test_db(&orbit, &creds, &db, &sub, &env);
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(20), |c| c["acked"] == 4)
        .await;
    let mut messages = take_all(&node, &queue, 3, Duration::from_secs(20)).await;
    // Anything published twice, or for the duplicate, would come within
    // the relay's poll.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    messages.extend(take_all(&node, &queue, 0, Duration::ZERO).await);
    assert!(consume.terminate().success(), "{}", consume.output());
    assert!(
        consume.output().contains("notifying a RabbitMQ queue"),
        "{}",
        consume.output()
    );

    let bodies: Vec<Value> = specs
        .iter()
        .map(|spec| expected(&creds, spec, false))
        .collect();
    assert_eq!(messages.len(), 3, "one message per applied delivery");
    let mut ids = BTreeSet::new();
    for (properties, body) in &messages {
        let got: Value = serde_json::from_slice(body).unwrap();
        assert_notification_fields(&got, false);
        assert!(bodies.contains(&got), "{got} not in {bodies:?}");
        let event = got["event_id"].as_str().unwrap();
        let id = properties.message_id().expect("a message id").to_owned();
        assert_eq!(id, effect_id_for(&creds, event, "notify-rabbitmq"));
        assert_eq!(
            properties.content_type().map(String::as_str),
            Some("application/json")
        );
        assert_eq!(properties.delivery_mode(), Some(2), "persistent");
        ids.insert(id);
    }
    assert_eq!(ids.len(), 3, "an effect came twice");
}

#[tokio::test]
async fn a_queue_that_is_not_there_is_named_by_check_and_refused_by_consume_and_the_consumed_queue_is_refused(
) {
    let node = RabbitQueue::create(&RabbitNode::shared(), 2).await;
    let queue = format!("notify.none.{}", random_hex(4));
    let (orbit, creds, sub) = OrbitDev::subscribed(30_000, 5, "notify-rabbitmq-check").await;
    let db = TestDb::empty().await;
    let dsn = dsn_for(&db.name);
    init_with_outbox(&dsn);
    let env = [
        ("RECEIVER_NOTIFY_AMQP_QUEUE", queue.as_str()),
        ("AMQP_URL", node.url.as_str()),
    ];
    let check = || check_notify(&creds, &sub, &dsn, &env);
    assert_refused_at_start(
        &check(),
        &format!("queue {queue} does not exist in vhost /; declare it"),
        &mut Consume::on_test_db(&orbit, &creds, &db, &sub, &env),
        &format!("queue {queue} does not exist"),
    );

    declare_classic(&node.url, &queue).await;
    let out = check();
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("check=notify ok\n"),
        "{}",
        text(&out)
    );

    // Without the server to publish to: refused before anything connects.
    let out = receiver()
        .arg("relay")
        .env("ORBIT_RECEIVER_DSN", &dsn)
        .env("RECEIVER_NOTIFY_AMQP_QUEUE", &queue)
        .env_remove("AMQP_URL")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("RECEIVER_NOTIFY_AMQP_QUEUE: AMQP_URL is not set"),
        "{}",
        text(&out)
    );

    // The queue `consume --source rabbitmq` takes its deliveries from, or
    // its dead-letter queue: notifications that would come back.
    for own in [node.queue.clone(), node.failed()] {
        let out = receiver()
            .arg("consume")
            .envs(node.env())
            .env("ORBIT_RECEIVER_DSN", &dsn)
            .env("RECEIVER_NOTIFY_AMQP_QUEUE", &own)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert!(
            text(&out).contains("the queue this receiver consumes or its dead-letter queue"),
            "{}",
            text(&out)
        );
    }
}
