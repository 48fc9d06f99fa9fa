//! The relay's JetStream target against a real nats-server, on MySQL and
//! on PostgreSQL: effects recorded through a real delivery are published
//! once each under `Nats-Msg-Id` = their id; a relay stopped after the
//! `PubAck` and before its record publishes again under the same id, and
//! the stream keeps one message; with the server down effects are tried
//! again, and published once each when it is back; a subject no stream
//! captures is tried again, never dead; a message the stream can never
//! take is dead at once.
#![cfg(feature = "nats")]

use crate::common::nats::{header, notify_stream, stream_messages, NatsServer};
use crate::common::random_hex;
use crate::outbox::{body_of, Fixture, Recording, SentRows, Server, TRACEPARENT};
use crate::relay::{
    dead, pending, quick, run, settled, stopped_after_the_first_answer, tried,
    two_events_with_two_effects_each,
};

use std::collections::BTreeMap;
use std::time::Duration;

use result_inbox::nats::{self, NatsServers};
use result_inbox::relay::{JetStream, JetStreamError, RelayOptions, Targets};

/// A target of `subject` on `server`, each attempt given half a second.
async fn target(server: &NatsServer, subject: &str) -> JetStream {
    let client = nats::connect(&NatsServers::new(server.url()), Duration::from_secs(5))
        .await
        .unwrap();
    JetStream::new(client, subject)
        .unwrap()
        .with_timeout(Duration::from_millis(500))
}

fn subject() -> String {
    format!("notify.{}", random_hex(4))
}

fn js(target: JetStream) -> Targets {
    Targets::new().with("js", target).unwrap()
}

async fn effects_recorded_through_a_delivery_are_published_once_each_under_their_id<E: SentRows>() {
    let f = Fixture::<E>::new().await;
    let server = NatsServer::start();
    let jetstream = server.jetstream().await;
    let subject = subject();
    let stream = notify_stream(&jetstream, &subject, |_| {}).await;
    let relay = run(&f, js(target(&server, &subject).await), quick(4));

    let (first, second) = two_events_with_two_effects_each(&f, "js").await;
    settled(&f, Duration::from_secs(10)).await;
    // Nothing comes a second time.
    tokio::time::sleep(Duration::from_millis(300)).await;
    relay.stop().await;

    let messages = stream_messages(&jetstream, &stream).await;
    assert_eq!(messages.len(), 4, "each effect once");
    let by_id: BTreeMap<String, &_> = messages
        .iter()
        .map(|m| (header(m, "Nats-Msg-Id").expect("a Nats-Msg-Id"), m))
        .collect();
    assert_eq!(by_id.len(), 4, "four ids");
    for (event, traced) in [(&first, true), (&second, false)] {
        for key in ["shipped", "paid"] {
            let id = f.id(event, "js", key);
            let message = by_id[id.as_str()];
            assert_eq!(message.subject.as_str(), subject);
            assert_eq!(message.payload, body_of(event, key), "the stored bytes");
            assert_eq!(
                header(message, "content-type").as_deref(),
                Some("application/json")
            );
            assert_eq!(
                header(message, "traceparent").as_deref(),
                traced.then_some(TRACEPARENT)
            );
        }
    }
    let sent = E::sent(&f.dsn).await;
    assert_eq!(sent.len(), 4);
    for (id, result, attempts) in sent {
        let sequence = by_id[id.as_str()].sequence;
        assert_eq!((result, attempts), (format!("ack seq={sequence}"), 1));
    }
    assert!(dead(&f).await.is_empty());
}

async fn a_relay_stopped_after_the_puback_before_its_record_publishes_again_and_the_stream_keeps_one<
    E: SentRows,
>() {
    let f = Fixture::<E>::new().await;
    let server = NatsServer::start();
    let jetstream = server.jetstream().await;
    let subject = subject();
    let stream = notify_stream(&jetstream, &subject, |_| {}).await;
    let event = random_hex(16);
    f.apply(Recording::of(&[("js", "k", None)]), &f.event(&event, 1))
        .await
        .unwrap();
    let id = f.id(&event, "js", "k");

    stopped_after_the_first_answer(&f, "js", target(&server, &subject).await).await;
    assert_eq!(stream_messages(&jetstream, &stream).await.len(), 1);
    assert_eq!(
        f.pending().await,
        [id.as_str()],
        "the ack was never recorded"
    );

    let relay = run(&f, js(target(&server, &subject).await), quick(4));
    settled(&f, Duration::from_secs(10)).await;
    relay.stop().await;
    let messages = stream_messages(&jetstream, &stream).await;
    assert_eq!(messages.len(), 1, "the stream keeps one");
    assert_eq!(
        header(&messages[0], "Nats-Msg-Id").as_deref(),
        Some(id.as_str())
    );
    // The attempt whose ack was never recorded is not counted either.
    assert_eq!(
        E::sent(&f.dsn).await,
        [(id.as_str().to_owned(), "ack duplicate seq=1".to_owned(), 1)],
        "the duplicate PubAck counts as sent"
    );
}

async fn with_the_server_down_effects_are_tried_again_and_published_once_each_when_it_is_back<
    E: Server,
>() {
    let f = Fixture::<E>::new().await;
    let mut server = NatsServer::start();
    let subject = subject();
    let stream = notify_stream(&server.jetstream().await, &subject, |_| {}).await;
    let relay = run(&f, js(target(&server, &subject).await), quick(4));
    server.kill();

    let event = random_hex(16);
    f.apply(
        Recording::of(&[("js", "a", None), ("js", "b", None)]),
        &f.event(&event, 1),
    )
    .await
    .unwrap();
    tried(&f, 2, Duration::from_secs(10)).await;
    let waiting = pending(&f).await;
    assert_eq!(waiting.len(), 2, "{waiting:?}");
    // No PubAck came (or the connection was gone): tried again.
    for (_, _, last) in &waiting {
        let last = last.as_deref().unwrap_or_default();
        assert!(["timeout", "connection"].contains(&last), "{waiting:?}");
    }
    assert!(dead(&f).await.is_empty(), "never dead for a server away");

    server.restart();
    settled(&f, Duration::from_secs(20)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    relay.stop().await;
    // What the client held while it was disconnected went out once it was
    // back, and so did the next attempts: one message per id.
    let messages = stream_messages(&server.jetstream().await, &stream).await;
    let mut ids: Vec<String> = messages
        .iter()
        .map(|m| header(m, "Nats-Msg-Id").unwrap())
        .collect();
    ids.sort();
    let mut expected = vec![
        f.id(&event, "js", "a").as_str().to_owned(),
        f.id(&event, "js", "b").as_str().to_owned(),
    ];
    expected.sort();
    assert_eq!(ids, expected);
}

async fn a_subject_no_stream_captures_is_tried_again_never_dead_and_published_once_one_does<
    E: Server,
>() {
    let f = Fixture::<E>::new().await;
    let server = NatsServer::start();
    let subject = subject();
    let event = random_hex(16);
    f.apply(Recording::of(&[("js", "k", None)]), &f.event(&event, 1))
        .await
        .unwrap();
    let relay = run(&f, js(target(&server, &subject).await), quick(4));
    tried(&f, 3, Duration::from_secs(10)).await;
    let waiting = pending(&f).await;
    assert_eq!(waiting[0].2.as_deref(), Some("no-responders"));
    assert!(dead(&f).await.is_empty());

    let jetstream = server.jetstream().await;
    let stream = notify_stream(&jetstream, &subject, |_| {}).await;
    settled(&f, Duration::from_secs(10)).await;
    relay.stop().await;
    let messages = stream_messages(&jetstream, &stream).await;
    assert_eq!(messages.len(), 1);
    assert_eq!(
        header(&messages[0], "Nats-Msg-Id").as_deref(),
        Some(f.id(&event, "js", "k").as_str())
    );
}

async fn a_message_larger_than_the_stream_takes_is_dead_at_once<E: Server>() {
    let f = Fixture::<E>::new().await;
    let server = NatsServer::start();
    let jetstream = server.jetstream().await;
    let subject = subject();
    let stream = notify_stream(&jetstream, &subject, |c| c.max_message_size = 16).await;
    let event = random_hex(16);
    f.apply(Recording::of(&[("js", "k", None)]), &f.event(&event, 1))
        .await
        .unwrap();
    let relay = run(&f, js(target(&server, &subject).await), quick(4));
    settled(&f, Duration::from_secs(10)).await;
    relay.stop().await;
    let id = f.id(&event, "js", "k");
    assert_eq!(
        dead(&f).await,
        [(
            id.as_str().to_owned(),
            Some("jetstream 10054".to_owned()),
            1
        )]
    );
    assert!(stream_messages(&jetstream, &stream).await.is_empty());
}

#[tokio::test]
async fn the_target_names_the_stream_that_captures_its_subject_and_its_duplicate_window() {
    let server = NatsServer::start();
    let jetstream = server.jetstream().await;
    let subject = subject();
    let stream = notify_stream(&jetstream, &subject, |c| {
        c.duplicate_window = Duration::from_secs(900)
    })
    .await;
    let found = target(&server, &subject).await.stream().await.unwrap();
    assert_eq!(
        (found.name.as_str(), found.duplicate_window),
        (stream.as_str(), Duration::from_secs(900))
    );
    let elsewhere = format!("elsewhere.{}", random_hex(4));
    assert_eq!(
        target(&server, &elsewhere)
            .await
            .stream()
            .await
            .unwrap_err(),
        JetStreamError::NoStream {
            subject: elsewhere.clone()
        }
    );
    let silent = subject.replace("notify.", "silent.");
    notify_stream(&jetstream, &silent, |c| c.no_ack = true).await;
    let refused = target(&server, &silent).await.stream().await.unwrap_err();
    assert!(matches!(refused, JetStreamError::NoAck { .. }), "{refused}");
    let client = nats::connect(&NatsServers::new(server.url()), Duration::from_secs(5))
        .await
        .unwrap();
    for bad in ["notify.*", "notify.>", "notify..x", "two words"] {
        assert_eq!(
            JetStream::new(client.clone(), bad).unwrap_err(),
            JetStreamError::InvalidSubject(bad.to_owned())
        );
    }
    // The window a relay's retries need: its longest wait plus a timeout.
    let options = RelayOptions::default();
    let needed = target(&server, &subject).await.window_needed(&options);
    assert_eq!(needed, options.max_backoff + Duration::from_millis(500));
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
    async fn a_relay_stopped_after_the_puback_before_its_record_publishes_again_and_the_stream_keeps_one(
    ) {
        super::a_relay_stopped_after_the_puback_before_its_record_publishes_again_and_the_stream_keeps_one::<sqlx::MySql>().await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn with_the_server_down_effects_are_tried_again_and_published_once_each_when_it_is_back()
    {
        super::with_the_server_down_effects_are_tried_again_and_published_once_each_when_it_is_back::<sqlx::MySql>().await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_message_larger_than_the_stream_takes_is_dead_at_once() {
        super::a_message_larger_than_the_stream_takes_is_dead_at_once::<sqlx::MySql>().await
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
    async fn a_subject_no_stream_captures_is_tried_again_never_dead_and_published_once_one_does() {
        super::a_subject_no_stream_captures_is_tried_again_never_dead_and_published_once_one_does::<
            sqlx::Postgres,
        >()
        .await
    }
}
