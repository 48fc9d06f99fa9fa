//! A webhook endpoint for the relay's tests and examples: a Python
//! process (`tests/webhook_endpoint.py`) on a free loopback port, which
//! records every request, verifies each signature with the
//! `standardwebhooks` package and answers what the test scripted.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use result_inbox::relay::{Webhook, WebhookSecret};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::random_hex;

/// The endpoint: a Python process on a free loopback port, killed when
/// dropped, and its secret file removed.
pub struct Endpoint {
    child: Child,
    pub port: u16,
    pub secret: String,
    secret_file: PathBuf,
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.secret_file);
    }
}

/// One request the endpoint received.
#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub id: String,
    pub idempotency_key: String,
    pub timestamp: String,
    pub traceparent: Option<String>,
    pub content_type: String,
    pub verified: bool,
    pub verify_error: String,
    pub body_hex: String,
    pub start: f64,
    pub end: f64,
    pub status: u64,
}

/// What the endpoint saw.
pub struct Seen {
    pub requests: Vec<Received>,
    /// Requests received and not answered yet.
    pub in_flight: u64,
    pub max_in_flight: u64,
    pub overlapping: Vec<String>,
}

impl Endpoint {
    pub fn start() -> Self {
        let key: Vec<u8> = (0..24).map(|_| rand_byte()).collect();
        let secret = format!("whsec_{}", data_encoding::BASE64.encode(&key));
        let secret_file = std::env::temp_dir().join(format!("webhook-secret-{}", random_hex(8)));
        std::fs::write(&secret_file, &secret).unwrap();
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/webhook_endpoint.py");
        let mut child = Command::new("python3")
            .arg(script)
            .arg(&secret_file)
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs tests/webhook_endpoint.py");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .strip_prefix("port ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| {
                panic!(
                    "tests/webhook_endpoint.py did not start: it needs the standardwebhooks \
                     package (python3 -m pip install standardwebhooks; make test installs it)"
                )
            });
        Endpoint {
            child,
            port,
            secret,
            secret_file,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn webhook(&self, path: &str) -> Webhook {
        Webhook::new(&self.url(path), WebhookSecret::parse(&self.secret).unwrap())
            .unwrap()
            .with_timeout(Duration::from_secs(2))
    }

    pub async fn call(&self, method: &str, path: &str, body: &str) -> String {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", self.port))
            .await
            .unwrap();
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        answer
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_owned())
            .unwrap_or_default()
    }

    /// `path` answers `answers` (JSON objects) in order, then `default`.
    pub async fn script(&self, path: &str, answers: &str, default: &str) {
        let body = format!(r#"{{"path":"{path}","answers":{answers},"default":{default}}}"#);
        self.call("PUT", "/_answers", &body).await;
    }

    pub async fn seen(&self) -> Seen {
        let v: Value = serde_json::from_str(&self.call("GET", "/_requests", "").await).unwrap();
        let s = |r: &Value, k: &str| r[k].as_str().unwrap_or_default().to_owned();
        let requests = v["requests"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| Received {
                path: s(r, "path"),
                id: s(r, "id"),
                idempotency_key: s(r, "idempotency_key"),
                timestamp: s(r, "timestamp"),
                traceparent: r["traceparent"].as_str().map(str::to_owned),
                content_type: s(r, "content_type"),
                verified: r["verified"].as_bool().unwrap(),
                verify_error: s(r, "verify_error"),
                body_hex: s(r, "body_hex"),
                start: r["start"].as_f64().unwrap(),
                end: r["end"].as_f64().unwrap(),
                status: r["status"].as_u64().unwrap(),
            })
            .collect();
        Seen {
            requests,
            in_flight: v["in_flight"].as_u64().unwrap(),
            max_in_flight: v["max_in_flight"].as_u64().unwrap(),
            overlapping: v["overlapping"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i.as_str().unwrap_or_default().to_owned())
                .collect(),
        }
    }

    /// Waits until `n` requests are being answered at once (received, their
    /// answer held by a scripted delay), within `within`.
    pub async fn wait_in_flight(&self, n: u64, within: Duration) {
        let until = Instant::now() + within;
        loop {
            let seen = self.seen().await;
            if seen.in_flight >= n {
                return;
            }
            assert!(
                Instant::now() < until,
                "{} requests in flight, not {n}: {:?}",
                seen.in_flight,
                seen.requests
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The requests once there are at least `n`, within `within`.
    pub async fn wait_for(&self, n: usize, within: Duration) -> Vec<Received> {
        let until = Instant::now() + within;
        loop {
            let seen = self.seen().await.requests;
            if seen.len() >= n {
                return seen;
            }
            assert!(
                Instant::now() < until,
                "the endpoint got {} requests, not {n}: {seen:?}",
                seen.len()
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}

fn rand_byte() -> u8 {
    random_hex(1)
        .chars()
        .fold(0u8, |b, c| b * 16 + c.to_digit(16).unwrap() as u8)
}
