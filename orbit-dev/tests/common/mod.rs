//! Shared test helpers: an in-process server on 127.0.0.1:0, an HTTP helper
//! and a WebSocket consumer.
#![allow(dead_code)]

use std::future::Future;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use orbit_dev::client::{self, BaseUrl, HttpResponse};
use orbit_dev::ids::random_secret;
use orbit_dev::Config;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// How long a test waits for something that should happen promptly.
pub const PATIENCE: Duration = Duration::from_secs(5);

pub struct Server {
    pub base: BaseUrl,
    pub url: String,
    pub admin_token: String,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

/// A queue token as bootstrap issued it.
#[derive(Clone, Debug)]
pub struct Token {
    pub token: String,
    pub queue_id: String,
}

impl Server {
    /// Starts a server with the default lease (30 s) and budget (5).
    pub async fn start() -> Server {
        Server::start_with(30_000, 5).await
    }

    pub async fn start_with(lease_ms: u64, budget: u64) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let admin_token = random_secret("oda_");
        let mut config = Config::new(admin_token.clone());
        config.lease = Duration::from_millis(lease_ms);
        config.budget = budget;
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(orbit_dev::serve(listener, config, async move {
            let _ = stopped.await;
        }));
        let url = format!("http://{address}");
        Server {
            base: BaseUrl::parse(&url).unwrap(),
            url,
            admin_token,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// Stops the server and waits for `serve` to return.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.unwrap().unwrap();
        }
    }

    /// One request; `token` goes in `Authorization: Bearer`.
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&str>,
    ) -> HttpResponse {
        let authorization = token.map(|t| format!("Bearer {t}"));
        let headers: Vec<(&str, &str)> = authorization
            .as_deref()
            .map(|a| vec![("Authorization", a)])
            .unwrap_or_default();
        client::send(&self.base, method, path, &headers, body.map(str::as_bytes))
            .await
            .unwrap()
    }

    pub async fn get(&self, path: &str, token: &str) -> HttpResponse {
        self.call("GET", path, Some(token), None).await
    }

    pub async fn post(&self, path: &str, token: &str, body: &str) -> HttpResponse {
        self.call("POST", path, Some(token), Some(body)).await
    }

    pub async fn admin(&self, path: &str, body: &str) -> HttpResponse {
        self.post(path, &self.admin_token.clone(), body).await
    }

    /// A token with every scope on `namespace`/`queue`.
    pub async fn token(&self, namespace: &str, queue: &str) -> Token {
        self.token_with(namespace, queue, None).await
    }

    /// A token with exactly `scopes` (or every scope when `None`).
    pub async fn token_with(&self, namespace: &str, queue: &str, scopes: Option<&[&str]>) -> Token {
        let mut request = json!({
            "application": "tests",
            "namespace": namespace,
            "environment": "development",
            "queue": queue,
            "event_access": true,
        });
        if let Some(scopes) = scopes {
            request = json!({
                "application": "tests",
                "namespace": namespace,
                "environment": "development",
                "queue": queue,
                "scopes": scopes,
            });
        }
        let response = self
            .admin("/v1/admin/bootstrap", &request.to_string())
            .await;
        assert_eq!(response.status, 201, "{}", response.text());
        let body: Value = response.json().unwrap();
        Token {
            token: body["token"].as_str().unwrap().to_string(),
            queue_id: body["queue_id"].as_str().unwrap().to_string(),
        }
    }

    /// Creates a subscription for `event_types`; returns its id.
    pub async fn subscribe(&self, token: &Token, event_types: &[&str]) -> String {
        let body = json!({ "event_types": event_types }).to_string();
        let response = self.post("/v1/subscriptions", &token.token, &body).await;
        assert_eq!(response.status, 201, "{}", response.text());
        let body: Value = response.json().unwrap();
        body["id"].as_str().unwrap().to_string()
    }

    /// Submits a task; returns its id.
    pub async fn submit(&self, token: &Token) -> String {
        self.submit_with_headers(token, &[]).await
    }

    /// Submits a task with more request headers (e.g. `traceparent`);
    /// returns its id.
    pub async fn submit_with_headers(&self, token: &Token, headers: &[(&str, &str)]) -> String {
        let authorization = format!("Bearer {}", token.token);
        let mut all = vec![("Authorization", authorization.as_str())];
        all.extend_from_slice(headers);
        let response = client::send(&self.base, "POST", "/v1/tasks", &all, Some(b"{}"))
            .await
            .unwrap();
        assert_eq!(response.status, 201, "{}", response.text());
        let body: Value = response.json().unwrap();
        body["id"].as_str().unwrap().to_string()
    }

    /// Finishes a task with a raw finish body.
    pub async fn finish(&self, task_id: &str, body: &str) -> HttpResponse {
        self.admin(&format!("/v1/admin/tasks/{task_id}/finish"), body)
            .await
    }

    pub async fn subscription(&self, token: &Token, id: &str) -> Value {
        let response = self
            .get(&format!("/v1/subscriptions/{id}"), &token.token)
            .await;
        assert_eq!(response.status, 200, "{}", response.text());
        response.json().unwrap()
    }

    pub async fn delivery(&self, token: &Token, id: &str) -> Value {
        let response = self
            .get(&format!("/v1/deliveries/{id}"), &token.token)
            .await;
        assert_eq!(response.status, 200, "{}", response.text());
        response.json().unwrap()
    }

    /// Every delivery of a subscription, oldest first.
    pub async fn deliveries(&self, token: &Token, subscription_id: &str) -> Vec<Value> {
        let response = self
            .get(
                &format!("/v1/subscriptions/{subscription_id}/deliveries?limit=1000"),
                &token.token,
            )
            .await;
        assert_eq!(response.status, 200, "{}", response.text());
        let body: Value = response.json().unwrap();
        body["deliveries"].as_array().unwrap().clone()
    }

    pub async fn ack(&self, token: &Token, delivery_id: &str, proof: &str) -> HttpResponse {
        let body = json!({ "lease_proof": proof }).to_string();
        self.post(
            &format!("/v1/deliveries/{delivery_id}/ack"),
            &token.token,
            &body,
        )
        .await
    }

    /// Opens a stream on a subscription.
    pub async fn connect(
        &self,
        token: &str,
        subscription_id: &str,
    ) -> Result<Consumer, tungstenite::Error> {
        let url = format!(
            "ws://{}/v1/subscriptions/{subscription_id}/stream",
            self.base.authority()
        );
        let mut request = url.into_client_request()?;
        request
            .headers_mut()
            .insert("Authorization", format!("Bearer {token}").parse().unwrap());
        let (socket, _) = tokio_tungstenite::connect_async(request).await?;
        Ok(Consumer { socket })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// A delivery message as received, with the event's raw text.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub delivery_id: String,
    pub subscription_id: String,
    pub attempt: u64,
    pub lease_proof: String,
    pub lease_expires_at: String,
    /// The event's bytes as they appear in the message.
    pub event: String,
    /// The message's `trace_context`, when it has one.
    pub trace_context: Option<Value>,
    /// The whole message text.
    pub text: String,
}

impl Delivery {
    pub fn event_json(&self) -> Value {
        serde_json::from_str(&self.event).unwrap()
    }
}

#[derive(Deserialize)]
struct Wire<'a> {
    #[serde(rename = "type")]
    kind: String,
    delivery_id: String,
    subscription_id: String,
    attempt: u64,
    lease_proof: String,
    lease_expires_at: String,
    #[serde(borrow)]
    event: &'a RawValue,
    #[serde(default)]
    trace_context: Option<Value>,
}

pub struct Consumer {
    pub socket: WebSocketStream<MaybeTlsStream<TcpStream>>,
}

impl Consumer {
    pub async fn credit(&mut self, n: u64) {
        let text = json!({ "type": "credit", "n": n }).to_string();
        self.socket.send(Message::text(text)).await.unwrap();
    }

    pub async fn send_text(&mut self, text: &str) {
        self.socket.send(Message::text(text)).await.unwrap();
    }

    /// The next text or close frame (pings and pongs skipped); `None` on
    /// timeout or end of stream.
    pub async fn next_frame(&mut self, wait: Duration) -> Option<Message> {
        tokio::time::timeout(wait, async {
            loop {
                match self.socket.next().await {
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                    Some(Ok(message)) => return Some(message),
                    _ => return None,
                }
            }
        })
        .await
        .ok()
        .flatten()
    }

    /// The next message, which must be a delivery.
    pub async fn next_delivery(&mut self) -> Delivery {
        self.next_delivery_within(PATIENCE)
            .await
            .expect("a delivery should have arrived")
    }

    pub async fn next_delivery_within(&mut self, wait: Duration) -> Option<Delivery> {
        let message = self.next_frame(wait).await?;
        let Message::Text(text) = message else {
            panic!("expected a delivery, got {message:?}");
        };
        Some(parse_delivery(text.as_str()))
    }

    /// Asserts that nothing arrives for `wait`.
    pub async fn expect_nothing(&mut self, wait: Duration) {
        if let Some(message) = self.next_frame(wait).await {
            panic!("expected nothing, got {message:?}");
        }
    }
}

pub fn parse_delivery(text: &str) -> Delivery {
    let wire: Wire = serde_json::from_str(text).expect("a delivery message is JSON");
    assert_eq!(wire.kind, "delivery");
    Delivery {
        delivery_id: wire.delivery_id,
        subscription_id: wire.subscription_id,
        attempt: wire.attempt,
        lease_proof: wire.lease_proof,
        lease_expires_at: wire.lease_expires_at,
        event: wire.event.get().to_string(),
        trace_context: wire.trace_context,
        text: text.to_string(),
    }
}

/// Polls `check` until it returns `Some`, or panics after [`PATIENCE`].
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub fn is_id(text: &str) -> bool {
    text.len() == 32
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}
