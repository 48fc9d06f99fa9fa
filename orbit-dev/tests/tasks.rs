//! Task transitions, versions and the event envelope.

mod common;

use common::{is_id, Server};
use serde_json::Value;

const ALL_TYPES: [&str; 5] = [
    "task.submitted",
    "task.succeeded",
    "task.failed",
    "task.cancelled",
    "task.needs_review",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_transition_raises_the_version_by_one_and_emits_the_matching_event() {
    let server = Server::start().await;
    let token = server.token("default", "inbox").await;
    let subscription = server.subscribe(&token, &ALL_TYPES).await;
    let mut consumer = server.connect(&token.token, &subscription).await.unwrap();
    consumer.credit(10).await;

    let task_id = server.submit(&token).await;
    let submitted = consumer.next_delivery().await.event_json();
    assert!(is_id(submitted["id"].as_str().unwrap()));
    assert_eq!(submitted["type"], "task.submitted");
    assert_eq!(submitted["queue_id"], token.queue_id.as_str());
    let occurred_at = submitted["occurred_at"].as_str().unwrap();
    assert_eq!(occurred_at.len(), "2026-11-30T16:02:44.123456Z".len());
    assert!(occurred_at.ends_with('Z') && occurred_at.as_bytes()[10] == b'T');
    assert_eq!(submitted["task"]["id"], task_id.as_str());
    assert_eq!(submitted["task"]["version"], 1);
    assert_eq!(submitted["task"]["state"], "PENDING");
    assert!(submitted["task"].get("result").is_none());

    let review = server
        .finish(
            &task_id,
            r#"{"outcome":"needs_review","result":{"why":"odd"}}"#,
        )
        .await;
    assert_eq!(review.status, 200, "{}", review.text());
    let event = consumer.next_delivery().await.event_json();
    assert_eq!(event["type"], "task.needs_review");
    assert_eq!(event["task"]["version"], 2);
    assert_eq!(event["task"]["state"], "NEEDS_REVIEW");
    assert_eq!(event["task"]["result"]["why"], "odd");

    let done = server
        .finish(&task_id, r#"{"outcome":"succeeded","result":[1]}"#)
        .await;
    assert_eq!(done.status, 200);
    let event = consumer.next_delivery().await.event_json();
    assert_eq!(event["type"], "task.succeeded");
    assert_eq!(event["task"]["version"], 3);
    assert_eq!(event["task"]["state"], "SUCCEEDED");
    assert_ne!(event["id"], submitted["id"]);

    let task: Value = server
        .get(&format!("/v1/tasks/{task_id}"), &token.token)
        .await
        .json()
        .unwrap();
    assert_eq!(task["version"], 3);
    assert_eq!(task["state"], "SUCCEEDED");
    assert_eq!(task["result"], serde_json::json!([1]));
    drop(consumer);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_or_finished_task_refuses_further_transitions_with_409_invalid_transition() {
    let server = Server::start().await;
    let token = server.token("default", "inbox").await;
    let subscription = server.subscribe(&token, &ALL_TYPES).await;
    let task_id = server.submit(&token).await;

    let cancelled = server
        .post(&format!("/v1/tasks/{task_id}/cancel"), &token.token, "")
        .await;
    assert_eq!(cancelled.status, 200);
    let cancelled: Value = cancelled.json().unwrap();
    assert_eq!(
        (cancelled["state"].as_str(), cancelled["version"].as_u64()),
        (Some("CANCELLED"), Some(2))
    );

    let again = server
        .post(&format!("/v1/tasks/{task_id}/cancel"), &token.token, "")
        .await;
    assert_eq!(again.status, 409);
    assert_eq!(again.error_code().as_deref(), Some("invalid_transition"));
    let finish = server.finish(&task_id, r#"{"outcome":"failed"}"#).await;
    assert_eq!(finish.status, 409);
    assert_eq!(finish.error_code().as_deref(), Some("invalid_transition"));

    let task: Value = server
        .get(&format!("/v1/tasks/{task_id}"), &token.token)
        .await
        .json()
        .unwrap();
    assert_eq!(
        (task["state"].as_str(), task["version"].as_u64()),
        (Some("CANCELLED"), Some(2))
    );
    let history = server.deliveries(&token, &subscription).await;
    assert_eq!(history.len(), 2, "task.submitted and task.cancelled only");
    server.stop().await;
}
