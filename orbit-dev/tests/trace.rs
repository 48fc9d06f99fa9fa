//! The producer's trace context: taken from the submit request's headers,
//! sent beside every event of the task, in every attempt.

mod common;

use common::Server;
use orbit_dev::client;
use serde_json::{json, Value};

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const TRACESTATE: &str = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7";
/// Another producer's: what a later request on the task sends.
const OTHER_TRACEPARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_attempt_of_every_event_of_a_task_carries_the_trace_context_of_its_submit() {
    let server = Server::start_with(300, 5).await;
    let token = server.token("default", "inbox").await;
    let subscription = server.subscribe(&token, &["task.submitted"]).await;
    let task_id = server
        .submit_with_headers(
            &token,
            &[("traceparent", TRACEPARENT), ("tracestate", TRACESTATE)],
        )
        .await;
    let expected = json!({ "traceparent": TRACEPARENT, "tracestate": TRACESTATE });

    let mut consumer = server.connect(&token.token, &subscription).await.unwrap();
    consumer.credit(2).await;
    let first = consumer.next_delivery().await;
    let again = consumer.next_delivery().await;
    assert_eq!(first.event_json()["task"]["id"], task_id.as_str());
    assert_eq!((first.attempt, again.attempt), (1, 2));
    assert_eq!(again.delivery_id, first.delivery_id);
    assert_eq!(first.trace_context.as_ref(), Some(&expected));
    assert_eq!(again.trace_context.as_ref(), Some(&expected));
    assert_eq!(again.event, first.event, "the event's bytes stay the same");
    assert!(
        !first.event.contains("traceparent"),
        "the context is beside the event, not in it"
    );
    // Before the event, where a consumer can read it even around an event
    // that is not JSON.
    assert!(first.text.find("\"trace_context\"") < first.text.find("\"event\""));
    drop(consumer);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finish_or_a_cancel_keeps_the_submit_s_context_whatever_its_own_request_sent() {
    let server = Server::start().await;
    let token = server.token("default", "inbox").await;
    let subscription = server
        .subscribe(&token, &["task.succeeded", "task.cancelled"])
        .await;
    let traced = [("traceparent", TRACEPARENT)];
    let finished = server.submit_with_headers(&token, &traced).await;
    let cancelled = server.submit_with_headers(&token, &traced).await;

    let response = server.finish(&finished, r#"{"outcome":"succeeded"}"#).await;
    assert_eq!(response.status, 200, "{}", response.text());
    let authorization = format!("Bearer {}", token.token);
    let response = client::send(
        &server.base,
        "POST",
        &format!("/v1/tasks/{cancelled}/cancel"),
        &[
            ("Authorization", authorization.as_str()),
            ("traceparent", OTHER_TRACEPARENT),
        ],
        Some(b"{}"),
    )
    .await
    .unwrap();
    assert_eq!(response.status, 200, "{}", response.text());

    let mut consumer = server.connect(&token.token, &subscription).await.unwrap();
    consumer.credit(2).await;
    let mut seen = Vec::new();
    for _ in 0..2 {
        let delivery = consumer.next_delivery().await;
        let event = delivery.event_json();
        seen.push((
            event["type"].as_str().unwrap().to_owned(),
            event["task"]["id"].as_str().unwrap().to_owned(),
            delivery.trace_context,
        ));
    }
    seen.sort_by(|a, b| a.0.cmp(&b.0));
    let expected = Some(json!({ "traceparent": TRACEPARENT }));
    assert_eq!(
        seen,
        [
            ("task.cancelled".to_owned(), cancelled, expected.clone()),
            ("task.succeeded".to_owned(), finished, expected),
        ]
    );
    drop(consumer);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submit_without_a_traceparent_of_the_right_shape_gives_deliveries_without_the_field() {
    let server = Server::start().await;
    let token = server.token("default", "inbox").await;
    let subscription = server.subscribe(&token, &["task.submitted"]).await;
    let short = &TRACEPARENT[..54];
    let extra = format!("{TRACEPARENT}0");
    let submits: [&[(&str, &str)]; 5] = [
        &[],
        &[("tracestate", TRACESTATE)],
        &[("traceparent", short), ("tracestate", TRACESTATE)],
        &[("traceparent", &extra)],
        &[("traceparent", TRACEPARENT), ("traceparent", TRACEPARENT)],
    ];
    for headers in submits {
        server.submit_with_headers(&token, headers).await;
    }
    let mut consumer = server.connect(&token.token, &subscription).await.unwrap();
    consumer.credit(submits.len() as u64).await;
    for _ in submits {
        let delivery = consumer.next_delivery().await;
        assert_eq!(delivery.trace_context, None, "{}", delivery.text);
        assert!(
            !delivery.text.contains("trace_context"),
            "{}",
            delivery.text
        );
    }
    drop(consumer);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_shape_is_checked_and_several_tracestates_are_one_list() {
    let server = Server::start().await;
    let token = server.token("default", "inbox").await;
    let subscription = server.subscribe(&token, &["task.submitted"]).await;
    // Upper-case hex is not a valid traceparent, but it has the shape of
    // one: passed on for the consumer to refuse.
    let upper = TRACEPARENT.to_uppercase();
    server
        .submit_with_headers(
            &token,
            &[
                ("traceparent", &upper),
                ("tracestate", "a=1"),
                ("tracestate", "b=2"),
            ],
        )
        .await;
    let mut consumer = server.connect(&token.token, &subscription).await.unwrap();
    consumer.credit(1).await;
    let delivery = consumer.next_delivery().await;
    assert_eq!(
        delivery.trace_context,
        Some(json!({ "traceparent": upper, "tracestate": "a=1,b=2" }))
    );
    drop(consumer);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_injected_event_carries_the_context_of_the_inject_request_even_when_it_is_not_json() {
    let server = Server::start().await;
    let token = server.token("default", "inbox").await;
    let subscription = server.subscribe(&token, &["task.submitted"]).await;
    let authorization = format!("Bearer {}", server.admin_token);
    let response = client::send(
        &server.base,
        "POST",
        &format!("/v1/admin/subscriptions/{subscription}/events"),
        &[
            ("Authorization", authorization.as_str()),
            ("traceparent", TRACEPARENT),
        ],
        Some(b"garbage{"),
    )
    .await
    .unwrap();
    assert_eq!(response.status, 201, "{}", response.text());
    let mut consumer = server.connect(&token.token, &subscription).await.unwrap();
    consumer.credit(1).await;
    let text = match consumer.next_frame(common::PATIENCE).await {
        Some(tokio_tungstenite::tungstenite::Message::Text(text)) => text.to_string(),
        other => panic!("expected a delivery, got {other:?}"),
    };
    let (before, event) = text.split_once(r#""event":"#).unwrap();
    assert_eq!(event, "garbage{}");
    let context = format!(r#""trace_context":{{"traceparent":"{TRACEPARENT}"}},"#);
    assert!(before.ends_with(&context), "{text}");
    // What precedes the event is JSON of its own.
    let _: Value = serde_json::from_str(&format!("{before}\"event\":null}}")).unwrap();
    drop(consumer);
    server.stop().await;
}
