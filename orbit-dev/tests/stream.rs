//! The WebSocket stream: credits, sharing between consumers, verbatim events.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::Server;
use serde_json::value::RawValue;
use serde_json::Value;
use tokio_tungstenite::tungstenite::Message;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_consumers_on_one_subscription_never_hold_the_same_delivery_at_the_same_time() {
    let server = Server::start().await;
    let token = server.token("default", "inbox").await;
    let subscription = server.subscribe(&token, &["task.submitted"]).await;
    let mut a = server.connect(&token.token, &subscription).await.unwrap();
    let mut b = server.connect(&token.token, &subscription).await.unwrap();
    a.credit(50).await;
    b.credit(50).await;
    for _ in 0..50 {
        server.submit(&token).await;
    }

    let (mut held_by_a, mut held_by_b) = (HashSet::new(), HashSet::new());
    let collect = async {
        while held_by_a.len() + held_by_b.len() < 50 {
            tokio::select! {
                d = a.next_delivery() => assert!(held_by_a.insert(d.delivery_id)),
                d = b.next_delivery() => assert!(held_by_b.insert(d.delivery_id)),
            }
        }
    };
    tokio::time::timeout(common::PATIENCE, collect)
        .await
        .expect("all 50 deliveries should arrive");
    assert!(held_by_a.is_disjoint(&held_by_b));
    a.expect_nothing(Duration::from_millis(100)).await;
    b.expect_nothing(Duration::from_millis(10)).await;

    let all: HashSet<String> = server
        .deliveries(&token, &subscription)
        .await
        .iter()
        .map(|d| d["id"].as_str().unwrap().to_string())
        .collect();
    let delivered: HashSet<String> = held_by_a.union(&held_by_b).cloned().collect();
    assert_eq!(all.len(), 50);
    assert_eq!(delivered, all);
    assert_eq!(
        server.subscription(&token, &subscription).await["counts"]["leased"],
        50
    );
    drop((a, b));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finish_result_reaches_the_delivered_event_byte_for_byte() {
    let server = Server::start().await;
    let token = server.token("default", "inbox").await;
    let subscription = server.subscribe(&token, &["task.succeeded"]).await;
    let task_id = server.submit(&token).await;
    let result = r#"{"big":123456789012345678901234567890,"price":1.10, "list" : [1.0e3,-0.0]}"#;
    let finished = server
        .finish(
            &task_id,
            &format!(r#"{{"outcome":"succeeded","result":{result}}}"#),
        )
        .await;
    assert_eq!(finished.status, 200, "{}", finished.text());
    assert!(finished.text().contains(result));

    let mut consumer = server.connect(&token.token, &subscription).await.unwrap();
    consumer.credit(1).await;
    let delivery = consumer.next_delivery().await;
    assert!(delivery.text.contains(result));

    #[derive(serde::Deserialize)]
    struct Event<'a> {
        #[serde(borrow)]
        task: Task<'a>,
    }
    #[derive(serde::Deserialize)]
    struct Task<'a> {
        #[serde(borrow)]
        result: &'a RawValue,
    }
    let event: Event = serde_json::from_str(&delivery.event).unwrap();
    assert_eq!(event.task.result.get(), result);
    drop(consumer);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_injected_raw_event_is_delivered_byte_for_byte_even_when_it_is_not_valid_json() {
    let server = Server::start().await;
    let token = server.token("default", "inbox").await;
    let subscription = server.subscribe(&token, &["task.submitted"]).await;
    let mut consumer = server.connect(&token.token, &subscription).await.unwrap();
    consumer.credit(2).await;
    let path = format!("/v1/admin/subscriptions/{subscription}/events");

    let duplicate_keys = r#"{"id":"a","id":"b","type":"task.succeeded", "task":{"version":0}}"#;
    let injected = server.admin(&path, duplicate_keys).await;
    assert_eq!(injected.status, 201, "{}", injected.text());
    let injected: Value = injected.json().unwrap();
    let delivery = consumer.next_delivery().await;
    assert_eq!(
        delivery.delivery_id,
        injected["delivery_id"].as_str().unwrap()
    );
    assert_eq!(delivery.event, duplicate_keys);

    let broken = r#"{"id": not json"#;
    assert_eq!(server.admin(&path, broken).await.status, 201);
    let Some(Message::Text(text)) = consumer.next_frame(common::PATIENCE).await else {
        panic!("expected a text frame");
    };
    assert!(text.as_str().starts_with(r#"{"type":"delivery","#));
    assert!(text.as_str().ends_with(&format!(r#","event":{broken}}}"#)));

    let view = server.delivery(&token, &delivery.delivery_id).await;
    assert!(view["task_id"].is_null());
    assert_eq!(view["event_id"], injected["event_id"]);
    drop(consumer);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_sends_no_more_deliveries_than_the_credit_it_was_granted() {
    let server = Server::start().await;
    let token = server.token("default", "inbox").await;
    let subscription = server.subscribe(&token, &["task.submitted"]).await;
    let mut consumer = server.connect(&token.token, &subscription).await.unwrap();
    for _ in 0..3 {
        server.submit(&token).await;
    }
    consumer.expect_nothing(Duration::from_millis(150)).await;
    consumer.credit(1).await;
    consumer.next_delivery().await;
    consumer.expect_nothing(Duration::from_millis(150)).await;
    consumer.credit(5).await;
    consumer.next_delivery().await;
    consumer.next_delivery().await;
    consumer.expect_nothing(Duration::from_millis(100)).await;
    let counts = &server.subscription(&token, &subscription).await["counts"];
    assert_eq!(
        (counts["leased"].as_u64(), counts["pending"].as_u64()),
        (Some(3), Some(0))
    );
    drop(consumer);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_client_message_gets_an_error_message_and_a_1008_close() {
    let server = Server::start().await;
    let token = server.token("default", "inbox").await;
    let subscription = server.subscribe(&token, &["task.submitted"]).await;
    let mut consumer = server.connect(&token.token, &subscription).await.unwrap();
    consumer.send_text(r#"{"type":"ack"}"#).await;
    let Some(Message::Text(text)) = consumer.next_frame(common::PATIENCE).await else {
        panic!("expected an error message");
    };
    let error: Value = serde_json::from_str(text.as_str()).unwrap();
    assert_eq!(error["type"], "error");
    assert_eq!(error["code"], "unknown_message_type");
    let Some(Message::Close(Some(frame))) = consumer.next_frame(common::PATIENCE).await else {
        panic!("expected a close frame");
    };
    assert_eq!(u16::from(frame.code), 1008);
    drop(consumer);
    server.stop().await;
}
