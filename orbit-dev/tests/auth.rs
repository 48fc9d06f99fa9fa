//! Authentication, scopes, queue binding and request validation.

mod common;

use common::Server;
use serde_json::Value;
use tokio_tungstenite::tungstenite;

async fn subscription_count(server: &Server, token: &common::Token) -> usize {
    let listed: Value = server
        .get("/v1/subscriptions", &token.token)
        .await
        .json()
        .unwrap();
    listed["subscriptions"].as_array().unwrap().len()
}

const BODY: &str = r#"{"event_types":["task.succeeded"]}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_without_a_token_is_refused_with_401_missing_token_and_changes_nothing() {
    let server = Server::start().await;
    let token = server.token("default", "inbox").await;
    let response = server
        .call("POST", "/v1/subscriptions", None, Some(BODY))
        .await;
    assert_eq!(response.status, 401);
    assert_eq!(response.error_code().as_deref(), Some("missing_token"));
    assert_eq!(response.header("www-authenticate"), Some("Bearer"));
    assert_eq!(subscription_count(&server, &token).await, 0);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_or_malformed_token_is_refused_with_401_invalid_token_and_changes_nothing() {
    let server = Server::start().await;
    let token = server.token("default", "inbox").await;
    let unknown = server
        .post("/v1/subscriptions", "odt_0000000000000000", BODY)
        .await;
    assert_eq!(unknown.status, 401);
    assert_eq!(unknown.error_code().as_deref(), Some("invalid_token"));
    let malformed = client_with_header(&server, &format!("Basic {}", token.token)).await;
    assert_eq!(malformed.status, 401);
    assert_eq!(malformed.error_code().as_deref(), Some("invalid_token"));
    assert_eq!(subscription_count(&server, &token).await, 0);
    server.stop().await;
}

async fn client_with_header(
    server: &Server,
    authorization: &str,
) -> orbit_dev::client::HttpResponse {
    orbit_dev::client::send(
        &server.base,
        "POST",
        "/v1/subscriptions",
        &[("Authorization", authorization)],
        Some(BODY.as_bytes()),
    )
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consume_only_token_cannot_create_subscriptions() {
    let server = Server::start().await;
    let full = server.token("default", "inbox").await;
    let consume_only = server
        .token_with("default", "inbox", Some(&["events:consume"]))
        .await;
    assert_eq!(
        consume_only.queue_id, full.queue_id,
        "bootstrap reuses the queue"
    );
    let response = server
        .post("/v1/subscriptions", &consume_only.token, BODY)
        .await;
    assert_eq!(response.status, 403);
    assert_eq!(response.error_code().as_deref(), Some("missing_scope"));
    assert_eq!(subscription_count(&server, &full).await, 0);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_of_another_queue_cannot_read_pause_stream_or_ack_this_queues_subscription() {
    let server = Server::start().await;
    let owner = server.token("default", "inbox").await;
    let stranger = server.token("default", "other").await;
    let subscription = server.subscribe(&owner, &["task.submitted"]).await;
    server.submit(&owner).await;
    let mut consumer = server.connect(&owner.token, &subscription).await.unwrap();
    consumer.credit(1).await;
    let leased = consumer.next_delivery().await;

    for path in [
        format!("/v1/subscriptions/{subscription}"),
        format!("/v1/subscriptions/{subscription}/deliveries"),
        format!("/v1/deliveries/{}", leased.delivery_id),
    ] {
        let response = server.get(&path, &stranger.token).await;
        assert_eq!(response.status, 403, "{path}");
        assert_eq!(response.error_code().as_deref(), Some("wrong_queue"));
    }
    let pause = server
        .post(
            &format!("/v1/subscriptions/{subscription}/pause"),
            &stranger.token,
            "",
        )
        .await;
    assert_eq!(pause.status, 403);
    assert_eq!(
        server.subscription(&owner, &subscription).await["enabled"],
        true
    );

    match server.connect(&stranger.token, &subscription).await {
        Err(tungstenite::Error::Http(response)) => {
            assert_eq!(response.status(), 403);
            let body: Value = serde_json::from_slice(response.body().as_deref().unwrap()).unwrap();
            assert_eq!(body["error"]["code"], "wrong_queue");
        }
        other => panic!("the stream should be refused, got {:?}", other.map(|_| ())),
    }

    let ack = server
        .ack(&stranger, &leased.delivery_id, &leased.lease_proof)
        .await;
    assert_eq!(ack.status, 403);
    assert_eq!(ack.error_code().as_deref(), Some("wrong_queue"));
    assert_eq!(
        server.delivery(&owner, &leased.delivery_id).await["state"],
        "LEASED"
    );
    let ack = server
        .ack(&owner, &leased.delivery_id, &leased.lease_proof)
        .await;
    assert_eq!(ack.status, 200, "the owner's ACK still works");
    drop(consumer);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_are_refused_with_400_and_change_nothing() {
    let server = Server::start().await;
    let token = server.token("default", "inbox").await;
    let subscription = server.subscribe(&token, &["task.submitted"]).await;
    server.submit(&token).await;
    let mut consumer = server.connect(&token.token, &subscription).await.unwrap();
    consumer.credit(1).await;
    let leased = consumer.next_delivery().await;

    for (body, code) in [
        (r#"{"event_types":["#, "invalid_json"),
        ("", "invalid_json"),
        (r#"{"event_types":["task.nope"]}"#, "invalid_request"),
        (r#"{"event_types":[]}"#, "invalid_request"),
        (
            r#"{"event_types":["task.failed","task.failed"]}"#,
            "invalid_request",
        ),
        (
            r#"{"event_types":["task.failed"],"extra":1}"#,
            "invalid_request",
        ),
    ] {
        let response = server.post("/v1/subscriptions", &token.token, body).await;
        assert_eq!(response.status, 400, "{body}");
        assert_eq!(response.error_code().as_deref(), Some(code), "{body}");
    }
    assert_eq!(subscription_count(&server, &token).await, 1);

    let ack_path = format!("/v1/deliveries/{}/ack", leased.delivery_id);
    let bad_ack = server
        .post(&ack_path, &token.token, r#"{"lease_proof":"#)
        .await;
    assert_eq!(bad_ack.status, 400);
    assert_eq!(bad_ack.error_code().as_deref(), Some("invalid_json"));
    let bad_ack = server
        .post(&ack_path, &token.token, r#"{"lease_proof":7}"#)
        .await;
    assert_eq!(bad_ack.error_code().as_deref(), Some("invalid_request"));
    assert_eq!(
        server.delivery(&token, &leased.delivery_id).await["state"],
        "LEASED"
    );

    let bad_id = server
        .get("/v1/subscriptions/NOT-AN-ID", &token.token)
        .await;
    assert_eq!(bad_id.status, 400);
    assert_eq!(bad_id.error_code().as_deref(), Some("invalid_id"));
    let unknown = server
        .get(
            "/v1/subscriptions/0123456789abcdef0123456789abcdef",
            &token.token,
        )
        .await;
    assert_eq!(unknown.status, 404);
    assert_eq!(
        unknown.error_code().as_deref(),
        Some("subscription_not_found")
    );
    drop(consumer);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_endpoints_refuse_queue_tokens_and_queue_endpoints_refuse_the_admin_token() {
    let server = Server::start().await;
    let token = server.token("default", "inbox").await;
    let task_id = server.submit(&token).await;
    let finish = server
        .post(
            &format!("/v1/admin/tasks/{task_id}/finish"),
            &token.token,
            r#"{"outcome":"succeeded"}"#,
        )
        .await;
    assert_eq!(finish.status, 401);
    assert_eq!(finish.error_code().as_deref(), Some("invalid_token"));
    let task: Value = server
        .get(&format!("/v1/tasks/{task_id}"), &token.token)
        .await
        .json()
        .unwrap();
    assert_eq!(task["state"], "PENDING");

    let as_admin = server.get("/v1/subscriptions", &server.admin_token).await;
    assert_eq!(as_admin.status, 401);
    assert_eq!(as_admin.error_code().as_deref(), Some("invalid_token"));
    server.stop().await;
}
