//! A real `orbit-dev` process for end-to-end tests, and a real `receiver`.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use result_inbox::event::EventType;
use result_inbox::ids::{QueueId, SubscriptionId};
use result_inbox::orbit::{OrbitClient, OrbitUrl, Token};

use super::{random_hex, write_private};

/// The `target/debug` (or release) directory the test binary runs from.
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(Path::parent).unwrap().to_owned()
}

/// A running `orbit-dev serve`, stopped when dropped.
pub struct OrbitDev {
    child: Child,
    pub url: String,
    admin_token: String,
    pub dir: PathBuf,
}

/// A queue token and its queue, from bootstrap.
#[derive(Clone)]
pub struct QueueCredentials {
    pub token: String,
    pub queue_id: String,
    pub file: PathBuf,
}

impl QueueCredentials {
    pub fn queue(&self) -> QueueId {
        QueueId::parse(&self.queue_id).unwrap()
    }
}

impl OrbitDev {
    /// Starts orbit-dev (see [`OrbitDev::start`]) with a queue in
    /// `namespace` and one subscription to every event type: the setup most
    /// end-to-end tests share.
    pub async fn subscribed(
        lease_ms: u64,
        budget: u32,
        namespace: &str,
    ) -> (OrbitDev, QueueCredentials, SubscriptionId) {
        let orbit = OrbitDev::start(lease_ms, budget);
        let creds = orbit.bootstrap(namespace, None).await;
        let sub = orbit
            .client(&creds)
            .create_subscription(&EventType::ALL)
            .await
            .unwrap();
        (orbit, creds, sub.id)
    }

    /// Starts orbit-dev on a free loopback port.
    pub fn start(lease_ms: u64, budget: u32) -> OrbitDev {
        let path = bin_dir().join("orbit-dev");
        assert!(
            path.exists(),
            "{} is missing: build the binaries first (`make test` does: cargo build --workspace --bins)",
            path.display()
        );
        let admin_token = format!("adm_{}", random_hex(16));
        let dir = std::env::temp_dir().join(format!("result-inbox-e2e-{}", random_hex(8)));
        std::fs::create_dir_all(&dir).unwrap();
        let mut child = Command::new(path)
            .args(["serve", "--listen", "127.0.0.1:0", "--ping-ms", "1000"])
            .args(["--lease-ms", &lease_ms.to_string()])
            .args(["--budget", &budget.to_string()])
            .env("ORBIT_DEV_ADMIN_TOKEN", &admin_token)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line
            .trim()
            .strip_prefix("orbit-dev listening on ")
            .unwrap_or_else(|| panic!("unexpected orbit-dev output: {line:?}"))
            .to_owned();
        OrbitDev {
            child,
            url,
            admin_token,
            dir,
        }
    }

    /// SIGKILL: the server ends at once, its connections with it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A new queue (in namespace `default`) and a token with `scopes`
    /// (`None`: all the demo's scopes), written to a 0600 credentials file.
    pub async fn bootstrap(&self, queue: &str, scopes: Option<&[&str]>) -> QueueCredentials {
        let mut body = serde_json::json!({
            "application": "inbox-example",
            "namespace": "default",
            "environment": "development",
            "queue": queue,
            "event_access": true,
        });
        if let Some(scopes) = scopes {
            body["scopes"] = serde_json::json!(scopes);
        }
        let (status, answer) = self
            .admin("POST", "/v1/admin/bootstrap", body.to_string())
            .await;
        assert_eq!(status, 201, "bootstrap failed");
        let v: serde_json::Value = serde_json::from_str(&answer).unwrap();
        let token = v["token"].as_str().unwrap().to_owned();
        let queue_id = v["queue_id"].as_str().unwrap().to_owned();
        let file = self.dir.join(format!("{}.credentials.json", random_hex(4)));
        // The whole file, as `orbit-dev bootstrap` writes it, so that
        // orbit-dev's own commands read it too.
        let creds = serde_json::json!({
            "orbit_url": self.url,
            "token": token,
            "queue_id": queue_id,
            "namespace": body["namespace"],
            "application": body["application"],
            "environment": body["environment"],
            "queue": queue,
            "scopes": v["scopes"],
        });
        write_private(&file, creds.to_string().as_bytes());
        QueueCredentials {
            token,
            queue_id,
            file,
        }
    }

    /// A library client with a queue token.
    pub fn client(&self, creds: &QueueCredentials) -> OrbitClient {
        OrbitClient::new(
            OrbitUrl::parse(&self.url).unwrap(),
            Token::new(creds.token.clone()),
            Duration::from_secs(10),
        )
        .unwrap()
    }

    /// The admin token, for a command that needs it (`receiver replay`).
    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// An admin call.
    pub async fn admin(&self, method: &str, path: &str, body: String) -> (u16, String) {
        http(
            method,
            &format!("{}{path}", self.url),
            &self.admin_token,
            body,
        )
        .await
    }

    /// Injects raw event bytes into a subscription; returns the delivery id.
    pub async fn inject(&self, subscription: &SubscriptionId, event: &str) -> String {
        let (status, answer) = self
            .admin(
                "POST",
                &format!("/v1/admin/subscriptions/{subscription}/events"),
                event.to_owned(),
            )
            .await;
        assert!(status == 200 || status == 201, "{status} {answer}");
        let v: serde_json::Value = serde_json::from_str(&answer).unwrap();
        v["delivery_id"]
            .as_str()
            .or_else(|| v["delivery"]["id"].as_str())
            .or_else(|| v["id"].as_str())
            .unwrap_or_else(|| panic!("no delivery id in {answer}"))
            .to_owned()
    }

    /// Injects a `task.submitted` event of a new task (version 1) into a
    /// subscription of `creds`' queue; returns (event id, task id).
    pub async fn inject_new_task(
        &self,
        creds: &QueueCredentials,
        subscription: &SubscriptionId,
    ) -> (String, String) {
        let task = random_hex(16);
        let spec = super::EventSpec::submitted(&creds.queue_id, &task);
        self.inject(subscription, &spec.json()).await;
        (spec.id, task)
    }

    /// Submits a task with a queue token and more request headers (e.g. a
    /// producer's `traceparent`); returns the task id.
    pub async fn submit_with_headers(
        &self,
        creds: &QueueCredentials,
        headers: &[(&str, &str)],
    ) -> String {
        let (status, answer) = http_with_headers(
            "POST",
            &format!("{}/v1/tasks", self.url),
            &creds.token,
            headers,
            "{}".to_owned(),
        )
        .await;
        assert_eq!(status, 201, "{answer}");
        let v: serde_json::Value = serde_json::from_str(&answer).unwrap();
        v["id"].as_str().unwrap().to_owned()
    }

    /// Finishes a task (`succeeded`, `failed`, `needs_review`).
    pub async fn finish(&self, task: &str, outcome: &str, result: Option<&str>) {
        let body = match result {
            Some(r) => format!(r#"{{"outcome":"{outcome}","result":{r}}}"#),
            None => format!(r#"{{"outcome":"{outcome}"}}"#),
        };
        let (status, answer) = self
            .admin("POST", &format!("/v1/admin/tasks/{task}/finish"), body)
            .await;
        assert_eq!(status, 200, "{answer}");
    }

    /// `GET` with a queue token, as JSON.
    pub async fn get(&self, creds: &QueueCredentials, path: &str) -> serde_json::Value {
        let (status, answer) = http(
            "GET",
            &format!("{}{path}", self.url),
            &creds.token,
            String::new(),
        )
        .await;
        assert_eq!(status, 200, "{answer}");
        serde_json::from_str(&answer).unwrap()
    }

    /// Every delivery of a subscription.
    pub async fn deliveries(
        &self,
        creds: &QueueCredentials,
        sub: &SubscriptionId,
    ) -> Vec<serde_json::Value> {
        let v = self
            .get(
                creds,
                &format!("/v1/subscriptions/{sub}/deliveries?limit=1000"),
            )
            .await;
        v["deliveries"].as_array().cloned().unwrap_or_default()
    }

    /// Waits until `check` holds for the subscription's counts, or panics.
    pub async fn wait_for_counts(
        &self,
        creds: &QueueCredentials,
        sub: &SubscriptionId,
        within: Duration,
        check: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let s = self.get(creds, &format!("/v1/subscriptions/{sub}")).await;
            if check(&s["counts"]) {
                return s["counts"].clone();
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "counts never reached the expected state: {}",
                s["counts"]
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for OrbitDev {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One plain HTTP request with a bearer token.
pub async fn http(method: &str, url: &str, token: &str, body: String) -> (u16, String) {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let request = http::Request::builder()
        .method(method)
        .uri(url)
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let response = client.request(request).await.unwrap();
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

/// [`http`] with more request headers, each sent as given (a name given
/// twice is sent twice).
pub async fn http_with_headers(
    method: &str,
    url: &str,
    token: &str,
    headers: &[(&str, &str)],
    body: String,
) -> (u16, String) {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut request = http::Request::builder()
        .method(method)
        .uri(url)
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(Full::new(Bytes::from(body))).unwrap();
    let response = client.request(request).await.unwrap();
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

/// The `receiver` binary that `make build` (feature `cli`) put next to
/// the test binaries.
pub fn receiver_path() -> PathBuf {
    let path = bin_dir().join("receiver");
    assert!(
        path.exists(),
        "{} is missing: build it first (`make test` does: cargo build --features result-inbox/cli)",
        path.display()
    );
    path
}

/// The `receiver` binary, with a clean environment for its variables.
pub fn receiver() -> Command {
    let mut cmd = Command::new(receiver_path());
    for var in [
        "ORBIT_URL",
        "ORBIT_CREDENTIALS_FILE",
        "ORBIT_SUBSCRIPTION_ID",
        "ORBIT_RECEIVER_DSN",
        "RECEIVER_NAME",
        "ORBIT_TOKEN",
        "ORBIT_QUEUE_ID",
        "ORBIT_CA_FILE",
        "RECEIVER_LOG",
        "RECEIVER_SOURCE",
        "NATS_URL",
        "NATS_STREAM",
        "NATS_CONSUMER",
        "NATS_SUBJECT",
        "NATS_TOKEN",
        "NATS_CREDS_FILE",
        "NATS_CA_FILE",
        "NATS_REQUIRE_TLS",
        "RECEIVER_PRUNE_DSN",
        "RECEIVER_PRUNE_MIN_RETENTION",
        "ORBIT_RECEIVER_DSN_FILE",
        "RECEIVER_PRUNE_DSN_FILE",
        "ORBIT_TOKEN_FILE",
        "NATS_TOKEN_FILE",
        "RECEIVER_NOTIFY_URL_FILE",
        "NOTIFY_SOCKET",
    ] {
        cmd.env_remove(var);
    }
    cmd
}
