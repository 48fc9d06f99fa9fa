//! Subscription limits, pausing, filters and fan-out.

mod common;

use std::time::Duration;

use common::Server;
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_65th_subscription_in_a_namespace_is_refused_even_when_some_are_paused() {
    let server = Server::start().await;
    let token = server.token("shared", "first").await;
    let sibling = server.token("shared", "second").await;
    let elsewhere = server.token("other", "first").await;
    for i in 0..64 {
        let id = server.subscribe(&token, &["task.succeeded"]).await;
        if i % 6 == 0 {
            let paused = server
                .post(&format!("/v1/subscriptions/{id}/pause"), &token.token, "")
                .await;
            assert_eq!(paused.status, 200);
        }
    }
    let body = r#"{"event_types":["task.succeeded"]}"#;
    let refused = server.post("/v1/subscriptions", &token.token, body).await;
    assert_eq!(refused.status, 409);
    assert_eq!(
        refused.error_code().as_deref(),
        Some("subscription_limit_reached")
    );
    let refused = server.post("/v1/subscriptions", &sibling.token, body).await;
    assert_eq!(
        refused.status, 409,
        "the limit is per namespace, not per queue"
    );

    let listed: Value = server
        .get("/v1/subscriptions", &token.token)
        .await
        .json()
        .unwrap();
    assert_eq!(listed["subscriptions"].as_array().unwrap().len(), 64);
    let listed: Value = server
        .get("/v1/subscriptions", &sibling.token)
        .await
        .json()
        .unwrap();
    assert_eq!(listed["subscriptions"].as_array().unwrap().len(), 0);

    let accepted = server
        .post("/v1/subscriptions", &elsewhere.token, body)
        .await;
    assert_eq!(accepted.status, 201, "another namespace has its own limit");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pausing_a_subscription_stops_new_deliveries_and_leasing_but_keeps_its_history_and_resuming_continues(
) {
    let server = Server::start().await;
    let token = server.token("default", "inbox").await;
    let subscription = server.subscribe(&token, &["task.submitted"]).await;
    let before_pause = server.submit(&token).await;

    let paused = server
        .post(
            &format!("/v1/subscriptions/{subscription}/pause"),
            &token.token,
            "",
        )
        .await;
    assert_eq!(paused.status, 200);
    let paused: Value = paused.json().unwrap();
    assert_eq!(paused["enabled"], false);
    let while_paused = server.submit(&token).await;

    let mut consumer = server.connect(&token.token, &subscription).await.unwrap();
    consumer.credit(5).await;
    consumer.expect_nothing(Duration::from_millis(200)).await;

    let view = server.subscription(&token, &subscription).await;
    assert_eq!(view["enabled"], false);
    assert_eq!(view["counts"]["pending"], 1);
    assert_eq!(view["counts"]["leased"], 0);
    let history = server.deliveries(&token, &subscription).await;
    assert_eq!(history.len(), 1);
    assert_eq!(history[0]["task_id"], before_pause.as_str());
    assert_eq!(history[0]["state"], "PENDING");
    assert_eq!(history[0]["attempts"], 0);

    let resumed = server
        .post(
            &format!("/v1/subscriptions/{subscription}/resume"),
            &token.token,
            "{}",
        )
        .await;
    assert_eq!(resumed.status, 200);
    let first = consumer.next_delivery().await;
    assert_eq!(first.event_json()["task"]["id"], before_pause.as_str());

    let after_resume = server.submit(&token).await;
    let second = consumer.next_delivery().await;
    assert_eq!(second.event_json()["task"]["id"], after_resume.as_str());
    assert_ne!(after_resume, while_paused);
    consumer.expect_nothing(Duration::from_millis(100)).await;

    let history = server.deliveries(&token, &subscription).await;
    assert_eq!(
        history.len(),
        2,
        "nothing is back-filled for the paused time"
    );
    let view = server.subscription(&token, &subscription).await;
    assert_eq!(view["counts"]["leased"], 2);
    drop(consumer);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_of_a_type_outside_the_filter_are_not_delivered() {
    let server = Server::start().await;
    let token = server.token("default", "inbox").await;
    let succeeded = server.subscribe(&token, &["task.succeeded"]).await;
    let cancelled = server.subscribe(&token, &["task.cancelled"]).await;

    let task_id = server.submit(&token).await;
    assert!(server.deliveries(&token, &succeeded).await.is_empty());
    assert!(server.deliveries(&token, &cancelled).await.is_empty());

    let finished = server.finish(&task_id, r#"{"outcome":"succeeded"}"#).await;
    assert_eq!(finished.status, 200);
    assert_eq!(server.deliveries(&token, &succeeded).await.len(), 1);
    assert!(server.deliveries(&token, &cancelled).await.is_empty());

    let mut consumer = server.connect(&token.token, &succeeded).await.unwrap();
    consumer.credit(5).await;
    let delivery = consumer.next_delivery().await;
    assert_eq!(delivery.event_json()["type"], "task.succeeded");
    consumer.expect_nothing(Duration::from_millis(100)).await;
    drop(consumer);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_event_goes_to_every_matching_enabled_subscription_of_its_queue() {
    let server = Server::start().await;
    let token = server.token("default", "inbox").await;
    let other_queue = server.token("default", "elsewhere").await;
    let a = server.subscribe(&token, &["task.submitted"]).await;
    let b = server
        .subscribe(&token, &["task.failed", "task.submitted"])
        .await;
    let paused = server.subscribe(&token, &["task.submitted"]).await;
    let foreign = server.subscribe(&other_queue, &["task.submitted"]).await;
    server
        .post(
            &format!("/v1/subscriptions/{paused}/pause"),
            &token.token,
            "",
        )
        .await;

    let task_id = server.submit(&token).await;
    let to_a = server.deliveries(&token, &a).await;
    let to_b = server.deliveries(&token, &b).await;
    assert_eq!((to_a.len(), to_b.len()), (1, 1));
    assert_eq!(to_a[0]["task_id"], task_id.as_str());
    assert_eq!(
        to_a[0]["event_id"], to_b[0]["event_id"],
        "one event, two deliveries"
    );
    assert_ne!(to_a[0]["id"], to_b[0]["id"]);
    assert!(server.deliveries(&token, &paused).await.is_empty());
    assert!(server.deliveries(&other_queue, &foreign).await.is_empty());
    server.stop().await;
}
