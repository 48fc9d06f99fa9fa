//! The Orbit calls behind `receiver failures`, against a real orbit-dev:
//! listing a subscription's EXPIRED deliveries page by page, reading each
//! one's event byte for byte, and adding budget with the admin token.

use crate::common;

use std::time::Duration;

use bytes::Bytes;
use common::orbit::OrbitDev;
use common::random_hex;
use result_inbox::event::EventType;
use result_inbox::ids::SubscriptionId;
use result_inbox::orbit::{
    DeliveryInfo, EventBody, OrbitClient, OrbitError, OrbitUrl, StreamMessage, Token,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// orbit-dev, and the calls these tests make with its admin token.
struct Orbit(OrbitDev);

impl Orbit {
    fn start(lease_ms: u64, budget: u32) -> Orbit {
        Orbit(OrbitDev::start(lease_ms, budget))
    }

    fn client(&self, token: &str) -> OrbitClient {
        client_for(&self.0.url, token)
    }

    fn admin_client(&self) -> OrbitClient {
        self.client(self.0.admin_token())
    }

    async fn admin(&self, path: &str, body: &str) -> serde_json::Value {
        let (status, answer) = self.0.admin("POST", path, body.to_owned()).await;
        assert!(status == 200 || status == 201, "{path}: {status}");
        serde_json::from_str(&answer).unwrap()
    }

    /// A token with every scope on a queue of its own.
    async fn queue_token(&self, queue: &str) -> String {
        let body = serde_json::json!({
            "application": "failures",
            "namespace": "default",
            "environment": "development",
            "queue": queue,
            "event_access": true,
        });
        let answer = self.admin("/v1/admin/bootstrap", &body.to_string()).await;
        answer["token"].as_str().unwrap().to_owned()
    }

    /// Injects `body` as an event; returns (delivery id, event id).
    async fn inject(&self, subscription: &SubscriptionId, body: &str) -> (String, String) {
        let answer = self
            .admin(
                &format!("/v1/admin/subscriptions/{subscription}/events"),
                body,
            )
            .await;
        let field = |name: &str| answer[name].as_str().unwrap().to_owned();
        (field("delivery_id"), field("event_id"))
    }
}

fn client_for(url: &str, token: &str) -> OrbitClient {
    OrbitClient::new(
        OrbitUrl::parse(url).unwrap(),
        Token::new(token),
        Duration::from_secs(10),
    )
    .unwrap()
}

/// One delivery as the stream sent it: id, attempt and event bytes.
struct Streamed {
    id: String,
    attempt: Option<u32>,
    event: Bytes,
}

/// Leases `n` deliveries on one stream; ACKs those `ack` selects (by
/// position) and lets the others' leases run out.
async fn lease(
    client: &OrbitClient,
    subscription: &SubscriptionId,
    n: u32,
    ack: impl Fn(usize) -> bool,
) -> Vec<Streamed> {
    let mut stream = client.open_stream(subscription).await.unwrap();
    let mut streamed = Vec::new();
    let mut granted = 0;
    while streamed.len() < n as usize {
        if granted == streamed.len() as u32 {
            let more = (n - granted).min(1000);
            stream.grant(more).await.unwrap();
            granted += more;
        }
        let message = tokio::time::timeout(Duration::from_secs(10), stream.next_message())
            .await
            .expect("a delivery within 10 s")
            .expect("the stream stays open")
            .unwrap();
        let StreamMessage::Delivery(delivery, proof) = message else {
            continue;
        };
        if ack(streamed.len()) {
            client.ack(delivery.id(), &proof).await.unwrap();
        }
        streamed.push(Streamed {
            id: delivery.id().to_string(),
            attempt: delivery.attempt(),
            event: delivery.into_body(),
        });
    }
    stream.close().await;
    streamed
}

/// Waits until the subscription has `n` EXPIRED deliveries.
async fn wait_for_expired(client: &OrbitClient, subscription: &SubscriptionId, n: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let counts = client.subscription(subscription).await.unwrap().counts;
        if counts.expired == n {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never {n} expired: {counts:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn found(body: EventBody) -> Bytes {
    match body {
        EventBody::Found(bytes) => bytes,
        other => panic!("expected the event, got {other:?}"),
    }
}

#[tokio::test]
async fn expired_deliveries_are_listed_with_task_and_attempts_and_their_events_read_back_byte_for_byte(
) {
    // Budget 1: a lease that runs out without an ACK expires the delivery.
    let orbit = Orbit::start(300, 1);
    let token = orbit.queue_token("failures").await;
    let client = orbit.client(&token);
    let sub = client
        .create_subscription(&EventType::ALL)
        .await
        .unwrap()
        .id;
    let task = client.submit_task().await.unwrap();
    let result = r#"{"big":123456789012345678901234567890,"price":1.10, "s":"\u00e9"}"#;
    orbit
        .admin(
            &format!("/v1/admin/tasks/{}/finish", task.id),
            &format!(r#"{{"outcome":"succeeded","result":{result}}}"#),
        )
        .await;
    let not_json = "{\"id\": not json, \"é\":\t\"x\"";
    let (injected, injected_event) = orbit.inject(&sub, not_json).await;
    let (acked, _) = orbit.inject(&sub, "{}").await;

    let streamed = lease(&client, &sub, 4, |i| i == 3).await;
    assert_eq!(streamed[3].id, acked);
    wait_for_expired(&client, &sub, 3).await;

    let expired = client.expired_deliveries(&sub).await.unwrap();
    let ids: Vec<&str> = expired.iter().map(|d| d.id.as_str()).collect();
    let wanted: Vec<&str> = streamed[..3].iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, wanted, "oldest first, the ACKed one left out");
    assert_eq!(expired[2].id, injected);
    for (delivery, streamed) in expired.iter().zip(&streamed) {
        assert_eq!(delivery.state, "EXPIRED");
        assert_eq!((delivery.attempts, delivery.budget), (1, 1));
        assert_eq!(streamed.attempt, Some(1));
        let event = found(client.event(&delivery.event_id).await.unwrap());
        assert_eq!(event, streamed.event, "{}", delivery.id);
        let shown = format!("{:?}", EventBody::Found(event.clone()));
        assert_eq!(shown, format!("Found(<{} bytes>)", event.len()));
    }
    let task_id = task.id.to_string();
    assert_eq!(expired[0].task_id.as_deref(), Some(task_id.as_str()));
    assert_eq!(expired[1].task_id.as_deref(), Some(task_id.as_str()));
    assert_eq!(expired[2].task_id, None, "an injected event has no task");
    assert_eq!(expired[2].event_id, injected_event);
    assert_eq!(streamed[2].event, not_json.as_bytes());
    let succeeded = found(client.event(&expired[1].event_id).await.unwrap());
    let succeeded = std::str::from_utf8(&succeeded).unwrap();
    assert!(succeeded.contains(result), "the result byte for byte");
    assert!(succeeded.contains(r#""type":"task.succeeded""#));

    // Unknown, and another queue's: the same answer.
    let unknown = client.event(&random_hex(16)).await.unwrap();
    assert_eq!(unknown, EventBody::Missing);
    let stranger = orbit.client(&orbit.queue_token("strangers").await);
    let refused = stranger.event(&expired[0].event_id).await.unwrap();
    assert_eq!(refused, EventBody::Missing);
    let malformed = client.event("../../healthz").await.unwrap_err();
    assert!(malformed.is_code("invalid_id"), "{malformed}");
}

#[tokio::test]
async fn added_budget_makes_an_expired_delivery_pending_with_the_admin_token_only_and_an_acked_one_is_refused(
) {
    let orbit = Orbit::start(300, 1);
    let token = orbit.queue_token("budget").await;
    let client = orbit.client(&token);
    let sub = client
        .create_subscription(&EventType::ALL)
        .await
        .unwrap()
        .id;
    let (expiring, _) = orbit.inject(&sub, "{}").await;
    let (acked, _) = orbit.inject(&sub, "{}").await;
    lease(&client, &sub, 2, |i| i == 1).await;
    wait_for_expired(&client, &sub, 1).await;
    let admin = orbit.admin_client();

    let refused = client.add_budget(&expiring, 2).await.unwrap_err();
    assert!(
        matches!(&refused, OrbitError::Status { status: 401, .. }),
        "{refused}"
    );
    assert!(refused.is_code("invalid_token"), "{refused}");
    let expired = client.expired_deliveries(&sub).await.unwrap();
    assert_eq!(expired.len(), 1, "a refused call changes nothing");
    assert_eq!(expired[0].id, expiring);

    let revived: DeliveryInfo = admin.add_budget(&expiring, 2).await.unwrap();
    assert_eq!(revived.id, expiring);
    assert_eq!(revived.state, "PENDING");
    assert_eq!((revived.attempts, revived.budget), (1, 3));
    assert!(client.expired_deliveries(&sub).await.unwrap().is_empty());

    let already = admin.add_budget(&acked, 1).await.unwrap_err();
    assert!(already.is_code("delivery_already_acked"), "{already}");
    assert!(
        matches!(&already, OrbitError::Status { status: 409, .. }),
        "{already}"
    );
    assert!(!already.is_code("invalid_token"));
    let unknown = admin.add_budget(&random_hex(16), 1).await.unwrap_err();
    assert!(unknown.is_code("delivery_not_found"), "{unknown}");
}

#[tokio::test]
async fn expired_deliveries_follows_every_page_and_leaves_the_other_states_out() {
    let orbit = Orbit::start(300, 1);
    let token = orbit.queue_token("pages").await;
    let client = orbit.client(&token);
    let sub = client
        .create_subscription(&EventType::ALL)
        .await
        .unwrap()
        .id;
    // One more than a page of EXPIRED deliveries, an ACKED one among them,
    // and a PENDING one after them.
    let total = 1_002;
    for _ in 0..total {
        orbit.inject(&sub, "{}").await;
    }
    let streamed = lease(&client, &sub, total, |i| i == 500).await;
    let (pending, _) = orbit.inject(&sub, "{}").await;
    wait_for_expired(&client, &sub, u64::from(total) - 1).await;

    let expired = client.expired_deliveries(&sub).await.unwrap();
    let ids: Vec<&str> = expired.iter().map(|d| d.id.as_str()).collect();
    let wanted: Vec<&str> = streamed
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 500)
        .map(|(_, s)| s.id.as_str())
        .collect();
    assert_eq!(ids.len(), 1_001);
    assert_eq!(ids, wanted);

    let first = client.deliveries(&sub, None, None, 2).await.unwrap();
    assert_eq!(first.deliveries.len(), 2);
    assert_eq!(first.next_after.as_deref(), Some(streamed[1].id.as_str()));
    let last = client
        .deliveries(&sub, Some("PENDING"), None, 1000)
        .await
        .unwrap();
    assert_eq!(last.next_after, None);
    assert_eq!(last.deliveries.len(), 1);
    assert_eq!(last.deliveries[0].id, pending);
    assert_eq!(last.deliveries[0].task_id, None);
    let after = client
        .deliveries(&sub, Some("ACKED"), Some(&streamed[499].id), 1)
        .await
        .unwrap();
    assert_eq!(after.deliveries[0].id, streamed[500].id);
    assert_eq!(after.next_after, None);
    let bad = client
        .deliveries(&sub, Some("GONE&limit=1"), None, 10)
        .await
        .unwrap_err();
    assert!(bad.is_code("invalid_query"), "{bad}");
}

/// A deployment that answers every request with `status` and `body`, as one
/// without `GET /v1/events/{id}` does.
async fn answering(status: &'static str, body: &'static str) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let response = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: application/json\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(response.as_bytes()).await;
            });
        }
    });
    url
}

#[tokio::test]
async fn a_deployment_without_the_event_call_is_told_apart_from_a_missing_event() {
    let cases = [
        (
            "404 Not Found",
            r#"{"error":{"code":"not_found","message":"no such endpoint"}}"#,
            Some(EventBody::NotOffered),
        ),
        ("405 Method Not Allowed", "", Some(EventBody::NotOffered)),
        (
            "404 Not Found",
            r#"{"error":{"code":"event_not_found","message":"no such event"}}"#,
            Some(EventBody::Missing),
        ),
        (
            "403 Forbidden",
            r#"{"error":{"code":"missing_scope","message":"no"}}"#,
            None,
        ),
    ];
    for (status, body, wanted) in cases {
        let client = client_for(&answering(status, body).await, "odt_test");
        let answer = client.event(&random_hex(16)).await;
        match wanted {
            Some(wanted) => assert_eq!(answer, Ok(wanted), "{status} {body}"),
            None => assert!(
                matches!(answer, Err(OrbitError::MissingScope { .. })),
                "{status}: {answer:?}"
            ),
        }
    }
}
