//! The relay's RabbitMQ target against a real RabbitMQ node, on MySQL and
//! on PostgreSQL: effects recorded through a real delivery are published
//! once each, confirmed, under `message_id` = their id; a relay stopped
//! after the confirm and before its record publishes again under the same
//! id (RabbitMQ keeps both copies: the id is what a consumer deduplicates
//! by); a publish whose confirm never comes is tried again, never dead,
//! and reaches the queue once; a queue that is not there is tried again,
//! never dead, and published to once it is.
#![cfg(feature = "rabbitmq")]

use crate::common::rabbitmq::{FreezingProxy, RabbitNode, RabbitQueue};
use crate::common::random_hex;
use crate::outbox::{body_of, Fixture, Recording, SentRows, Server, TRACEPARENT};
use crate::relay::{
    dead, pending, quick, run, settled, stopped_after_the_first_answer, tried,
    two_events_with_two_effects_each,
};

use std::time::Duration;

use amqprs::{BasicProperties, FieldName, FieldValue};
use result_inbox::rabbitmq::AmqpUrl;
use result_inbox::relay::{RabbitMq, Targets};

/// A target of `queue` at `url`, each attempt given half a second.
fn target(url: &str, queue: &str) -> RabbitMq {
    RabbitMq::new(AmqpUrl::parse(url).unwrap(), queue).with_timeout(Duration::from_millis(500))
}

fn amqp(target: RabbitMq) -> Targets {
    Targets::new().with("amqp", target).unwrap()
}

/// Every message of `queue`, taken for good.
async fn drained(queue: &RabbitQueue) -> Vec<(BasicProperties, Vec<u8>)> {
    let mut messages = Vec::new();
    while let Some(message) = queue.take(&queue.queue).await {
        messages.push(message);
    }
    messages
}

fn header(properties: &BasicProperties, name: &str) -> Option<String> {
    match properties
        .headers()?
        .get(&FieldName::try_from(name).unwrap())?
    {
        FieldValue::S(text) => Some(text.to_string()),
        other => panic!("{name}: {other:?}"),
    }
}

async fn effects_recorded_through_a_delivery_are_published_once_each_under_their_id<E: SentRows>() {
    let f = Fixture::<E>::new().await;
    let queue = RabbitQueue::create(&RabbitNode::shared(), 20).await;
    let relay = run(&f, amqp(target(&queue.url, &queue.queue)), quick(4));

    let (first, second) = two_events_with_two_effects_each(&f, "amqp").await;
    settled(&f, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    relay.stop().await;

    let messages = drained(&queue).await;
    assert_eq!(messages.len(), 4, "each effect once");
    for (event, traced) in [(&first, true), (&second, false)] {
        for key in ["shipped", "paid"] {
            let id = f.id(event, "amqp", key);
            let (properties, body) = messages
                .iter()
                .find(|(p, _)| p.message_id().map(String::as_str) == Some(id.as_str()))
                .unwrap_or_else(|| panic!("no message {id}"));
            assert_eq!(
                body.as_slice(),
                &body_of(event, key)[..],
                "the stored bytes"
            );
            assert_eq!(
                properties.content_type().map(String::as_str),
                Some("application/json")
            );
            assert_eq!(properties.delivery_mode(), Some(2), "persistent");
            assert_eq!(
                header(properties, "traceparent").as_deref(),
                traced.then_some(TRACEPARENT)
            );
        }
    }
    let sent = E::sent(&f.dsn).await;
    assert_eq!(sent.len(), 4);
    assert!(
        sent.iter()
            .all(|(_, result, attempts)| result == "ack" && *attempts == 1),
        "{sent:?}"
    );
    assert!(dead(&f).await.is_empty());
}

async fn a_relay_stopped_after_the_confirm_before_its_record_publishes_again_under_the_same_id<
    E: Server,
>() {
    let f = Fixture::<E>::new().await;
    let queue = RabbitQueue::create(&RabbitNode::shared(), 20).await;
    let event = random_hex(16);
    f.apply(Recording::of(&[("amqp", "k", None)]), &f.event(&event, 1))
        .await
        .unwrap();
    let id = f.id(&event, "amqp", "k");

    stopped_after_the_first_answer(&f, "amqp", target(&queue.url, &queue.queue)).await;
    assert_eq!(queue.ready(&queue.queue).await, 1);
    assert_eq!(
        f.pending().await,
        [id.as_str()],
        "the confirm was never recorded"
    );

    let relay = run(&f, amqp(target(&queue.url, &queue.queue)), quick(4));
    settled(&f, Duration::from_secs(10)).await;
    relay.stop().await;
    let messages = drained(&queue).await;
    let ids: Vec<Option<&str>> = messages
        .iter()
        .map(|(p, _)| p.message_id().map(String::as_str))
        .collect();
    assert_eq!(
        ids,
        [Some(id.as_str()), Some(id.as_str())],
        "two copies, one id"
    );
}

async fn a_publish_whose_confirm_never_comes_is_tried_again_never_dead_and_reaches_the_queue_once<
    E: Server,
>() {
    let f = Fixture::<E>::new().await;
    let node = RabbitNode::shared();
    let queue = RabbitQueue::create(&node, 20).await;
    let proxy = FreezingProxy::start(node.port).await;
    let relay = run(&f, amqp(target(&proxy.url(), &queue.queue)), quick(4));
    let opened = random_hex(16);
    f.apply(Recording::of(&[("amqp", "k", None)]), &f.event(&opened, 1))
        .await
        .unwrap();
    settled(&f, Duration::from_secs(10)).await;

    // From here on nothing the relay sends reaches the server.
    proxy.freeze();
    let event = random_hex(16);
    f.apply(Recording::of(&[("amqp", "k", None)]), &f.event(&event, 2))
        .await
        .unwrap();
    tried(&f, 3, Duration::from_secs(20)).await;
    let waiting = pending(&f).await;
    assert_eq!(waiting.len(), 1, "{waiting:?}");
    let last = waiting[0].2.as_deref().unwrap_or_default();
    assert!(["timeout", "connection"].contains(&last), "{waiting:?}");
    assert!(
        dead(&f).await.is_empty(),
        "never dead for a server that does not answer"
    );
    relay.stop().await;

    let relay = run(&f, amqp(target(&queue.url, &queue.queue)), quick(4));
    settled(&f, Duration::from_secs(10)).await;
    relay.stop().await;
    let id = f.id(&event, "amqp", "k");
    let copies = drained(&queue)
        .await
        .into_iter()
        .filter(|(p, _)| p.message_id().map(String::as_str) == Some(id.as_str()))
        .count();
    assert_eq!(copies, 1, "the frozen attempts never reached the queue");
}

async fn a_queue_that_is_not_there_is_tried_again_never_dead_and_published_to_once_it_is<
    E: Server,
>() {
    let f = Fixture::<E>::new().await;
    let node = RabbitNode::shared();
    let queue_id = random_hex(16);
    let name = format!("orbit.results.{queue_id}");
    let relay = run(&f, amqp(target(&node.url(), &name)), quick(4));
    let event = random_hex(16);
    f.apply(Recording::of(&[("amqp", "k", None)]), &f.event(&event, 1))
        .await
        .unwrap();
    tried(&f, 2, Duration::from_secs(10)).await;
    let waiting = pending(&f).await;
    assert_eq!(waiting[0].2.as_deref(), Some("unroutable"), "{waiting:?}");
    assert!(dead(&f).await.is_empty());

    let queue = RabbitQueue::create_for(&node, &queue_id, 20).await;
    assert_eq!(queue.queue, name);
    settled(&f, Duration::from_secs(10)).await;
    relay.stop().await;
    let messages = drained(&queue).await;
    assert_eq!(messages.len(), 1, "what no queue took is gone, not kept");
    assert_eq!(
        messages[0].0.message_id().map(String::as_str),
        Some(f.id(&event, "amqp", "k").as_str())
    );
}

mod on_mysql {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn effects_recorded_through_a_delivery_are_published_once_each_under_their_id() {
        super::effects_recorded_through_a_delivery_are_published_once_each_under_their_id::<
            sqlx::MySql,
        >()
        .await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_relay_stopped_after_the_confirm_before_its_record_publishes_again_under_the_same_id()
    {
        super::a_relay_stopped_after_the_confirm_before_its_record_publishes_again_under_the_same_id::<sqlx::MySql>().await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_publish_whose_confirm_never_comes_is_tried_again_never_dead_and_reaches_the_queue_once(
    ) {
        super::a_publish_whose_confirm_never_comes_is_tried_again_never_dead_and_reaches_the_queue_once::<sqlx::MySql>().await
    }
}

mod on_postgres {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn effects_recorded_through_a_delivery_are_published_once_each_under_their_id() {
        super::effects_recorded_through_a_delivery_are_published_once_each_under_their_id::<
            sqlx::Postgres,
        >()
        .await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_queue_that_is_not_there_is_tried_again_never_dead_and_published_to_once_it_is() {
        super::a_queue_that_is_not_there_is_tried_again_never_dead_and_published_to_once_it_is::<
            sqlx::Postgres,
        >()
        .await
    }
}
