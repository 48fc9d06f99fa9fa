//! `GET /v1/events/{id}`: an event's bytes as the stream delivered them, to
//! the event's queue only.

mod common;

use common::Server;
use serde_json::Value;
use tokio_tungstenite::tungstenite::Message;

fn event_path(id: &str) -> String {
    format!("/v1/events/{id}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_event_reads_back_byte_for_byte_as_the_stream_delivered_it() {
    let server = Server::start().await;
    let token = server.token("default", "inbox").await;
    let subscription = server.subscribe(&token, &["task.succeeded"]).await;
    let task_id = server.submit(&token).await;
    // Spelling that a JSON round trip would change: the answer must keep it.
    let result = r#"{"big":123456789012345678901234567890,"price":1.10, "list" : [1.0e3,-0.0],"s":"\u00e9"}"#;
    let finished = server
        .finish(
            &task_id,
            &format!(r#"{{"outcome":"succeeded","result":{result}}}"#),
        )
        .await;
    assert_eq!(finished.status, 200, "{}", finished.text());

    let mut consumer = server.connect(&token.token, &subscription).await.unwrap();
    consumer.credit(1).await;
    let delivery = consumer.next_delivery().await;
    let view = server.delivery(&token, &delivery.delivery_id).await;
    let event_id = view["event_id"].as_str().unwrap();
    assert_eq!(delivery.event_json()["id"], event_id);

    let read = server.get(&event_path(event_id), &token.token).await;
    assert_eq!(read.status, 200, "{}", read.text());
    assert_eq!(read.header("content-type"), Some("application/json"));
    assert_eq!(read.body, delivery.event.as_bytes());
    assert!(read.text().contains(result));
    drop(consumer);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_injected_event_that_is_not_json_reads_back_byte_for_byte() {
    let server = Server::start().await;
    let token = server.token("default", "inbox").await;
    let subscription = server.subscribe(&token, &["task.submitted"]).await;
    let mut consumer = server.connect(&token.token, &subscription).await.unwrap();
    consumer.credit(1).await;

    let broken = "{\"id\": not json, \"é\":\t\"x\"";
    let injected = server
        .admin(
            &format!("/v1/admin/subscriptions/{subscription}/events"),
            broken,
        )
        .await;
    assert_eq!(injected.status, 201, "{}", injected.text());
    let injected: Value = injected.json().unwrap();
    let Some(Message::Text(text)) = consumer.next_frame(common::PATIENCE).await else {
        panic!("expected a delivery message");
    };
    let (_, delivered) = text.as_str().split_once(r#","event":"#).unwrap();
    let delivered = delivered.strip_suffix('}').unwrap();
    assert_eq!(delivered, broken);

    let read = server
        .get(
            &event_path(injected["event_id"].as_str().unwrap()),
            &token.token,
        )
        .await;
    assert_eq!(read.status, 200, "{}", read.text());
    assert_eq!(read.header("content-type"), Some("application/json"));
    assert_eq!(read.body, delivered.as_bytes());

    let empty = server
        .admin(
            &format!("/v1/admin/subscriptions/{subscription}/events"),
            "",
        )
        .await;
    let empty: Value = empty.json().unwrap();
    let read = server
        .get(
            &event_path(empty["event_id"].as_str().unwrap()),
            &token.token,
        )
        .await;
    assert_eq!(read.status, 200, "{}", read.text());
    assert!(read.body.is_empty());
    drop(consumer);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_an_event_takes_a_queue_token_with_events_read_and_checks_the_scope_before_the_id()
{
    let server = Server::start().await;
    let token = server.token("default", "inbox").await;
    let subscription = server.subscribe(&token, &["task.submitted"]).await;
    server.submit(&token).await;
    let event_id = server.deliveries(&token, &subscription).await[0]["event_id"]
        .as_str()
        .unwrap()
        .to_string();
    let path = event_path(&event_id);

    let anonymous = server.call("GET", &path, None, None).await;
    assert_eq!(anonymous.status, 401);
    assert_eq!(anonymous.error_code().as_deref(), Some("missing_token"));
    assert_eq!(anonymous.header("www-authenticate"), Some("Bearer"));
    for (what, bearer) in [
        ("unknown token", "odt_0000000000000000"),
        ("admin token", server.admin_token.as_str()),
    ] {
        let refused = server.get(&path, bearer).await;
        assert_eq!(refused.status, 401, "{what}");
        assert_eq!(
            refused.error_code().as_deref(),
            Some("invalid_token"),
            "{what}"
        );
    }

    let without_read = server
        .token_with(
            "default",
            "inbox",
            Some(&["events:consume", "tasks:submit"]),
        )
        .await;
    for path in [path.clone(), event_path("NOT-AN-ID")] {
        let refused = server.get(&path, &without_read.token).await;
        assert_eq!(refused.status, 403, "{path}");
        assert_eq!(refused.error_code().as_deref(), Some("missing_scope"));
    }
    let read_only = server
        .token_with("default", "inbox", Some(&["events:read"]))
        .await;
    assert_eq!(server.get(&path, &read_only.token).await.status, 200);

    let malformed = server.get(&event_path("NOT-AN-ID"), &token.token).await;
    assert_eq!(malformed.status, 400);
    assert_eq!(malformed.error_code().as_deref(), Some("invalid_id"));
    let post = server.post(&path, &token.token, "{}").await;
    assert_eq!(post.status, 405);
    assert_eq!(post.error_code().as_deref(), Some("method_not_allowed"));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_queues_event_is_not_found_exactly_like_an_unknown_one() {
    let server = Server::start().await;
    let owner = server.token("default", "inbox").await;
    let stranger = server.token("default", "other").await;
    let subscription = server.subscribe(&owner, &["task.submitted"]).await;
    server.submit(&owner).await;
    let injected = server
        .admin(
            &format!("/v1/admin/subscriptions/{subscription}/events"),
            "{}",
        )
        .await;
    let injected: Value = injected.json().unwrap();
    let task_event = server.deliveries(&owner, &subscription).await[0]["event_id"]
        .as_str()
        .unwrap()
        .to_string();

    let unknown = server
        .get(
            &event_path("0123456789abcdef0123456789abcdef"),
            &stranger.token,
        )
        .await;
    assert_eq!(unknown.status, 404);
    assert_eq!(unknown.error_code().as_deref(), Some("event_not_found"));
    for id in [task_event.as_str(), injected["event_id"].as_str().unwrap()] {
        let refused = server.get(&event_path(id), &stranger.token).await;
        assert_eq!(refused.status, 404, "{id}");
        assert_eq!(refused.body, unknown.body, "{id}");
        assert_eq!(
            refused.header("content-type"),
            unknown.header("content-type")
        );
        assert_eq!(server.get(&event_path(id), &owner.token).await.status, 200);
    }
    server.stop().await;
}
