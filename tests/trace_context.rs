//! A producer's W3C trace context reaches every delivery of its task's
//! events, beside the event and never in it: from the submit request's
//! headers, through orbit-dev's delivery message (Orbit) or through
//! `orbit-dev bridge`'s message headers (NATS), to `Delivery::trace`.

use crate::common;

use std::time::Duration;

use bytes::Bytes;
use common::orbit::{http_with_headers, OrbitDev};
use result_inbox::delivery::Delivery;
use result_inbox::orbit::{DeliveryStream, LeaseProof, StreamMessage};

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const TRACESTATE: &str = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7";

/// How long a test waits for a delivery that should come.
const PATIENCE: Duration = Duration::from_secs(10);

/// The next delivery on the stream (keepalives passed over).
async fn next_delivery(stream: &mut DeliveryStream) -> (Delivery<Bytes>, LeaseProof) {
    tokio::time::timeout(PATIENCE, async {
        loop {
            match stream.next_message().await {
                Some(Ok(StreamMessage::Delivery(delivery, proof))) => return (delivery, proof),
                Some(Ok(StreamMessage::Keepalive)) => continue,
                other => panic!("expected a delivery, got {other:?}"),
            }
        }
    })
    .await
    .expect("a delivery should have come")
}

/// The task id of a delivery's event.
fn task_of(delivery: &Delivery<Bytes>) -> String {
    let event: serde_json::Value = serde_json::from_slice(delivery.body()).unwrap();
    event["task"]["id"].as_str().unwrap().to_owned()
}

/// A delivery's trace context as (traceparent, tracestate).
fn trace_of(delivery: &Delivery<Bytes>) -> Option<(&str, Option<&str>)> {
    delivery
        .trace()
        .map(|trace| (trace.traceparent(), trace.tracestate()))
}

#[tokio::test]
async fn every_attempt_of_every_event_of_a_task_has_the_trace_context_of_its_submit_over_orbit() {
    let (orbit, creds, sub) = OrbitDev::subscribed(400, 5, "trace-orbit").await;
    let task = orbit
        .submit_with_headers(
            &creds,
            &[("traceparent", TRACEPARENT), ("tracestate", TRACESTATE)],
        )
        .await;
    let client = orbit.client(&creds);
    let mut stream = client.open_stream(&sub).await.unwrap();
    stream.grant(2).await.unwrap();
    let (first, _) = next_delivery(&mut stream).await;
    let (again, proof) = next_delivery(&mut stream).await;
    assert_eq!(task_of(&first), task);
    assert_eq!(
        (first.id(), first.attempt(), again.attempt()),
        (again.id(), Some(1), Some(2))
    );
    for delivery in [&first, &again] {
        assert_eq!(trace_of(delivery), Some((TRACEPARENT, Some(TRACESTATE))));
        let trace = delivery.trace().unwrap();
        assert_eq!(
            (trace.trace_id(), trace.parent_span_id(), trace.sampled()),
            ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", true)
        );
    }
    assert_eq!(
        again.body(),
        first.body(),
        "the event's bytes stay the same"
    );
    client.ack(again.id(), &proof).await.unwrap();

    // A later event of the task, made by another request, has the submit's.
    orbit.finish(&task, "succeeded", None).await;
    stream.grant(1).await.unwrap();
    let (finished, _) = next_delivery(&mut stream).await;
    assert_eq!(task_of(&finished), task);
    assert_ne!(finished.id(), first.id());
    assert_eq!(trace_of(&finished), Some((TRACEPARENT, Some(TRACESTATE))));
    stream.close().await;
}

#[tokio::test]
async fn only_a_valid_traceparent_becomes_a_delivery_s_trace_and_a_bad_one_changes_nothing_else() {
    let (orbit, creds, sub) = OrbitDev::subscribed(30_000, 5, "trace-checked").await;
    // orbit-dev passes on whatever has the shape of a traceparent: the
    // library checks the rest.
    let upper = TRACEPARENT.to_uppercase();
    let later = format!("cc{}-what-comes-next", &TRACEPARENT[2..]);
    let plain = orbit.submit_with_headers(&creds, &[]).await;
    let refused = orbit
        .submit_with_headers(&creds, &[("traceparent", &upper), ("tracestate", "a=1")])
        .await;
    let later_version = orbit
        .submit_with_headers(&creds, &[("traceparent", &later)])
        .await;
    let client = orbit.client(&creds);
    let mut stream = client.open_stream(&sub).await.unwrap();
    stream.grant(3).await.unwrap();
    let mut seen = Vec::new();
    for _ in 0..3 {
        let (delivery, _) = next_delivery(&mut stream).await;
        assert_eq!(delivery.attempt(), Some(1));
        seen.push((
            task_of(&delivery),
            trace_of(&delivery).map(|(parent, state)| (parent.to_owned(), state.is_some())),
        ));
    }
    seen.sort();
    let mut expected = vec![
        (plain, None),
        (refused, None),
        (later_version, Some((later.clone(), false))),
    ];
    expected.sort();
    assert_eq!(seen, expected);
    stream.close().await;
}

#[tokio::test]
async fn a_trace_context_before_an_event_that_is_not_json_is_still_read() {
    let (orbit, creds, sub) = OrbitDev::subscribed(30_000, 5, "trace-garbage").await;
    // The admin call's own headers are the injected event's context.
    let (status, answer) = http_with_headers(
        "POST",
        &format!("{}/v1/admin/subscriptions/{sub}/events", orbit.url),
        orbit.admin_token(),
        &[("traceparent", TRACEPARENT), ("tracestate", TRACESTATE)],
        "garbage{".to_owned(),
    )
    .await;
    assert_eq!(status, 201, "{answer}");
    let client = orbit.client(&creds);
    let mut stream = client.open_stream(&sub).await.unwrap();
    stream.grant(1).await.unwrap();
    let (delivery, _) = next_delivery(&mut stream).await;
    assert_eq!(&delivery.body()[..], b"garbage{");
    assert_eq!(trace_of(&delivery), Some((TRACEPARENT, Some(TRACESTATE))));
    stream.close().await;
}

#[cfg(feature = "nats")]
mod nats {
    use super::*;

    use std::process::{Child, Command, Stdio};

    use common::nats::{JetStreamQueue, NatsServer};
    use result_inbox::nats::{AckSubject, JetStreamSource, PullStream};
    use result_inbox::source::{Incoming, LeaseStream, Source};

    /// `orbit-dev bridge`, stopped when dropped.
    struct Bridge(Child);

    impl Drop for Bridge {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    async fn next_delivery(stream: &mut PullStream) -> (Delivery<Bytes>, AckSubject) {
        tokio::time::timeout(PATIENCE, async {
            loop {
                match stream.next().await {
                    Some(Ok(Incoming::Delivery(delivery, proof))) => return (delivery, proof),
                    Some(Ok(Incoming::Keepalive | Incoming::Notice(_))) => continue,
                    other => panic!("expected a delivery, got {other:?}"),
                }
            }
        })
        .await
        .expect("a delivery should have come")
    }

    #[tokio::test]
    async fn the_bridge_carries_the_submit_s_trace_context_to_every_jetstream_delivery() {
        let server = NatsServer::start();
        let (orbit, creds, sub) = OrbitDev::subscribed(30_000, 5, "trace-nats").await;
        let queue =
            JetStreamQueue::create(&server, &creds.queue_id, Duration::from_secs(1), 5).await;
        let traced = orbit
            .submit_with_headers(
                &creds,
                &[("traceparent", TRACEPARENT), ("tracestate", TRACESTATE)],
            )
            .await;
        let plain = orbit.submit_with_headers(&creds, &[]).await;
        let mut bridge = Bridge(
            Command::new(common::orbit::bin_dir().join("orbit-dev"))
                .arg("bridge")
                .env("ORBIT_CREDENTIALS_FILE", &creds.file)
                .env("ORBIT_SUBSCRIPTION_ID", sub.as_str())
                .env("NATS_URL", server.url())
                .env_remove("ORBIT_URL")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while queue.info().await.num_pending < 2 {
            assert!(
                tokio::time::Instant::now() < deadline && bridge.0.try_wait().unwrap().is_none(),
                "the bridge did not publish both events"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        drop(bridge);

        let source = JetStreamSource::connect(&queue.settings(&server.url()), PATIENCE)
            .await
            .unwrap();
        let mut stream = source.open().await.unwrap();
        // Not acknowledged: each comes again after AckWait (1 s), with the
        // same headers.
        for attempt in 1..=2 {
            stream.grant(2).await.unwrap();
            let mut seen = Vec::new();
            for _ in 0..2 {
                let (delivery, _) = next_delivery(&mut stream).await;
                assert_eq!(delivery.attempt(), Some(attempt));
                seen.push((
                    task_of(&delivery),
                    trace_of(&delivery).map(|(p, s)| (p.to_owned(), s.map(str::to_owned))),
                ));
            }
            seen.sort();
            let mut expected = vec![
                (
                    traced.clone(),
                    Some((TRACEPARENT.to_owned(), Some(TRACESTATE.to_owned()))),
                ),
                (plain.clone(), None),
            ];
            expected.sort();
            assert_eq!(seen, expected, "attempt {attempt}");
        }
        stream.close().await;
    }
}
