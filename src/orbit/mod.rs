//! A client of the Orbit API, as `docs/orbit-protocol.md` describes it.
//!
//! Every call has a timeout. Errors keep the HTTP status and Orbit's stable
//! error code, never a body or a token. The token itself lives in a
//! [`Token`], which redacts itself everywhere but in the `Authorization`
//! header.
//!
//! [`OrbitSource`] is one subscription as the consumer's
//! [`Source`](crate::consumer::Source).
//!
//! `https://` URLs use TLS for the API calls and `wss://` for the delivery
//! stream, both with the one rustls configuration of an [`OrbitTls`]:
//! Mozilla's root certificates, plus a private CA when one is configured
//! (`ORBIT_CA_FILE`).

mod credentials;
mod source;
mod stream;
mod tls;

use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use http::{header, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde::Deserialize;

pub use self::credentials::{Credentials, CredentialsError};
pub use self::source::OrbitSource;
pub use self::stream::{DeliveryStream, StreamMessage};
pub use self::tls::{CaFileError, OrbitTls};
use crate::delivery::{DeliveryId, LeaseProof};
use crate::event::EventType;
use crate::ids::{QueueId, SubscriptionId, TaskId};

/// A bearer token. Shown nowhere: `Debug` prints `Token(<redacted>)`.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    /// Wraps a token.
    pub fn new(token: impl Into<String>) -> Self {
        Self(token.into())
    }

    fn header_value(&self) -> Result<http::HeaderValue, OrbitError> {
        let mut v = http::HeaderValue::from_str(&format!("Bearer {}", self.0))
            .map_err(|_| OrbitError::Config("token is not a valid header value"))?;
        v.set_sensitive(true);
        Ok(v)
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

/// The base URL of an Orbit deployment: `http://` or `https://`, no path.
#[derive(Clone, PartialEq, Eq)]
pub struct OrbitUrl {
    base: String,
    tls: bool,
    loopback: bool,
}

impl OrbitUrl {
    /// Parses `http://host:port` or `https://host[:port]` (a trailing `/` is
    /// accepted, any other path is not).
    pub fn parse(s: &str) -> Result<Self, OrbitError> {
        let trimmed = s.trim_end_matches('/');
        let uri: http::Uri = trimmed
            .parse()
            .map_err(|_| OrbitError::Config("ORBIT_URL is not a valid URL"))?;
        let tls = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => {
                return Err(OrbitError::Config(
                    "ORBIT_URL must start with http:// or https://",
                ))
            }
        };
        let host = uri
            .host()
            .ok_or(OrbitError::Config("ORBIT_URL has no host"))?;
        if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
            return Err(OrbitError::Config(
                "ORBIT_URL must not have a path or query",
            ));
        }
        let loopback = host == "localhost"
            || host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        Ok(Self {
            base: trimmed.to_owned(),
            tls,
            loopback,
        })
    }

    /// Whether the URL uses TLS (`https://`, and so `wss://` for streams).
    pub fn is_tls(&self) -> bool {
        self.tls
    }

    /// Whether the host is a loopback address.
    pub fn is_loopback(&self) -> bool {
        self.loopback
    }

    /// The URL of an API path.
    fn http(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The WebSocket URL of an API path.
    fn ws(&self, path: &str) -> String {
        let rest = self
            .base
            .split_once("://")
            .map(|(_, rest)| rest)
            .unwrap_or(&self.base);
        let scheme = if self.tls { "wss" } else { "ws" };
        format!("{scheme}://{rest}{path}")
    }
}

impl fmt::Display for OrbitUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.base)
    }
}

impl fmt::Debug for OrbitUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OrbitUrl({})", self.base)
    }
}

/// A scope of a queue token (`docs/orbit-protocol.md`, section 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Read subscriptions, deliveries and tasks.
    EventsRead,
    /// Open delivery streams, acknowledge deliveries.
    EventsConsume,
    /// Create, pause and resume subscriptions.
    EventsManage,
    /// Submit tasks.
    TasksSubmit,
    /// Cancel tasks.
    TasksCancel,
}

impl Scope {
    /// What `receiver consume` needs.
    pub const CONSUME: [Scope; 2] = [Scope::EventsRead, Scope::EventsConsume];
    /// What `receiver demo` needs.
    pub const DEMO: [Scope; 5] = [
        Scope::EventsRead,
        Scope::EventsConsume,
        Scope::EventsManage,
        Scope::TasksSubmit,
        Scope::TasksCancel,
    ];

    /// The wire name, e.g. `events:consume`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::EventsRead => "events:read",
            Scope::EventsConsume => "events:consume",
            Scope::EventsManage => "events:manage",
            Scope::TasksSubmit => "tasks:submit",
            Scope::TasksCancel => "tasks:cancel",
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a call to Orbit failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OrbitError {
    /// Orbit answered with an error status and its stable error code.
    #[error("Orbit answered {status} {code}")]
    Status {
        /// The HTTP status.
        status: u16,
        /// Orbit's stable error code (`stale_lease_proof`, `wrong_queue`, …).
        code: String,
    },
    /// The request could not be sent or its answer was lost, or the TLS
    /// handshake failed (e.g. an untrusted certificate). The message names
    /// the cause and its causes, never a token or a body.
    #[error("cannot reach Orbit: {0}")]
    Transport(String),
    /// No answer within the request timeout.
    #[error("Orbit did not answer in time")]
    Timeout,
    /// Orbit answered `403 missing_scope` to a call that needs `scope`.
    #[error("the token lacks the scope {scope} (Orbit answered 403 missing_scope)")]
    MissingScope {
        /// The scope the refused call needs.
        scope: Scope,
    },
    /// The answer was not what the protocol describes.
    #[error("unexpected answer from Orbit: {0}")]
    Protocol(&'static str),
    /// The client is misconfigured.
    #[error("{0}")]
    Config(&'static str),
}

impl OrbitError {
    /// Whether the same call may succeed later: lost connections, time-outs
    /// and server errors. Refusals (4xx) will be refused again.
    pub fn is_retryable(&self) -> bool {
        match self {
            OrbitError::Status { status, .. } => *status >= 500,
            OrbitError::Transport(_) | OrbitError::Timeout => true,
            OrbitError::MissingScope { .. } | OrbitError::Protocol(_) | OrbitError::Config(_) => {
                false
            }
        }
    }

    /// Whether Orbit refused for good what was configured: the token (401),
    /// its scopes or queue (403), an id that names nothing (404). Waiting
    /// does not help; the configuration has to change.
    pub fn is_refusal(&self) -> bool {
        match self {
            OrbitError::Status { status, .. } => matches!(status, 401 | 403 | 404),
            OrbitError::MissingScope { .. } => true,
            _ => false,
        }
    }

    /// Orbit's error code, when it answered with one.
    pub fn code(&self) -> Option<&str> {
        match self {
            OrbitError::Status { code, .. } => Some(code),
            OrbitError::MissingScope { .. } => Some("missing_scope"),
            _ => None,
        }
    }

    /// A `403 missing_scope` answer to a call that needs `scope` names it.
    fn needing(self, scope: Scope) -> Self {
        match self {
            OrbitError::Status { status: 403, code } if code == "missing_scope" => {
                OrbitError::MissingScope { scope }
            }
            other => other,
        }
    }

    /// A transport failure, described with its causes: hyper's and
    /// tungstenite's own messages (`client error (Connect)`) say little.
    fn transport<E: std::error::Error + 'static>(e: E) -> Self {
        OrbitError::Transport(describe_chain(&e))
    }
}

/// Delivery counts of a subscription, by state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct DeliveryCounts {
    /// Waiting to be leased.
    pub pending: u64,
    /// Leased to a consumer, not yet acknowledged.
    pub leased: u64,
    /// Acknowledged.
    pub acked: u64,
    /// Budget spent; waiting for an operator.
    pub expired: u64,
}

/// A subscription as Orbit reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    /// Its id.
    pub id: SubscriptionId,
    /// The queue it is bound to.
    pub queue_id: QueueId,
    /// The event types it selects, as Orbit spells them.
    pub event_types: Vec<String>,
    /// Enabled (true) or paused.
    pub enabled: bool,
    /// Its deliveries by state.
    pub counts: DeliveryCounts,
}

#[derive(Deserialize)]
struct WireSubscription {
    id: String,
    queue_id: String,
    event_types: Vec<String>,
    enabled: bool,
    counts: DeliveryCounts,
}

/// A task as Orbit reports it (without input or result bodies).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    /// Its id.
    pub id: TaskId,
    /// Its version.
    pub version: u64,
    /// Its state, as Orbit spells it.
    pub state: String,
}

#[derive(Deserialize)]
struct WireTask {
    id: String,
    version: u64,
    state: String,
}

/// A delivery as Orbit reports it (never with its lease proof).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct DeliveryInfo {
    /// Its id.
    pub id: String,
    /// Its state: `PENDING`, `LEASED`, `ACKED` or `EXPIRED`.
    pub state: String,
    /// How many times it was leased.
    pub attempts: u32,
    /// How many attempts it may have.
    pub budget: u32,
    /// The event it carries.
    pub event_id: String,
}

pub use crate::consumer::AckOutcome;

#[derive(Deserialize)]
struct WireAck {
    already_acked: bool,
}

#[derive(Deserialize)]
struct WireError {
    error: WireErrorBody,
}

#[derive(Deserialize)]
struct WireErrorBody {
    code: String,
}

/// `e` and its causes, joined by `: `; a failed TLS handshake is named as
/// such (with a hint when the certificate is not trusted).
fn describe_chain(e: &(dyn std::error::Error + 'static)) -> String {
    if let Some(tls) = tls::describe_failure(e) {
        return tls;
    }
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let part = cause.to_string();
        // Some errors repeat their cause in their own message.
        if !text.ends_with(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        next = cause.source();
    }
    text
}

/// A client of one Orbit deployment with one token.
///
/// ```no_run
/// use std::time::Duration;
/// use result_inbox::event::EventType;
/// use result_inbox::orbit::{OrbitClient, OrbitUrl, Scope, Token};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let client = OrbitClient::new(
///     OrbitUrl::parse("https://orbit.example.com")?,
///     Token::new(std::env::var("ORBIT_TOKEN")?),
///     Duration::from_secs(10),
/// )?;
/// if client.has_scope(Scope::EventsManage).await? {
///     let subscription = client.create_subscription(&[EventType::Cancelled]).await?;
///     println!("subscription={}", subscription.id);
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct OrbitClient {
    url: OrbitUrl,
    token: Token,
    timeout: Duration,
    tls: OrbitTls,
    http: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
}

impl fmt::Debug for OrbitClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OrbitClient")
            .field("url", &self.url)
            .field("token", &self.token)
            .field("timeout", &self.timeout)
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}

impl OrbitClient {
    /// A client for `url` that authenticates with `token`; every request
    /// (and every stream handshake) is limited to `timeout`. An `https://`
    /// URL trusts Mozilla's root certificates ([`OrbitTls::public_roots`]);
    /// see [`OrbitClient::with_tls`] for a private CA.
    pub fn new(url: OrbitUrl, token: Token, timeout: Duration) -> Result<Self, OrbitError> {
        Self::with_tls(url, token, timeout, OrbitTls::public_roots())
    }

    /// Like [`OrbitClient::new`], with the certificate authorities of `tls`
    /// for `https://` and `wss://` (unused for `http://`). Makes no
    /// connection: the first call does.
    pub fn with_tls(
        url: OrbitUrl,
        token: Token,
        timeout: Duration,
        tls: OrbitTls,
    ) -> Result<Self, OrbitError> {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(timeout));
        connector.set_nodelay(true);
        // The TLS layer below takes https:// URLs through this connector.
        connector.enforce_http(false);
        let mut connector = HttpsConnector::from((connector, tls.config()));
        if url.is_tls() {
            // Never fall back to plain HTTP on an https:// deployment.
            connector.enforce_https();
        }
        let http = Client::builder(TokioExecutor::new()).build(connector);
        Ok(Self {
            url,
            token,
            timeout,
            tls,
            http,
        })
    }

    /// The deployment's base URL.
    pub fn url(&self) -> &OrbitUrl {
        &self.url
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<String>,
    ) -> Result<Bytes, OrbitError> {
        let mut request = Request::builder()
            .method(method)
            .uri(self.url.http(path))
            .header(header::AUTHORIZATION, self.token.header_value()?);
        if body.is_some() {
            request = request.header(header::CONTENT_TYPE, "application/json");
        }
        let request = request
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|_| OrbitError::Config("invalid request"))?;
        let exchange = async {
            let response = self
                .http
                .request(request)
                .await
                .map_err(OrbitError::transport)?;
            let status = response.status();
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(OrbitError::transport)?
                .to_bytes();
            Ok::<_, OrbitError>((status, body))
        };
        let (status, body) = tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| OrbitError::Timeout)??;
        if status.is_success() {
            Ok(body)
        } else {
            Err(status_error(status, &body))
        }
    }

    async fn call_json<T: serde::de::DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<String>,
    ) -> Result<T, OrbitError> {
        let bytes = self.call(method, path, body).await?;
        serde_json::from_slice(&bytes).map_err(|_| OrbitError::Protocol("malformed JSON answer"))
    }

    /// `GET /v1/subscriptions/{id}`.
    pub async fn subscription(&self, id: &SubscriptionId) -> Result<Subscription, OrbitError> {
        let wire: WireSubscription = self
            .call_json(Method::GET, &format!("/v1/subscriptions/{id}"), None)
            .await
            .map_err(|e| e.needing(Scope::EventsRead))?;
        subscription(wire)
    }

    /// `POST /v1/subscriptions`: a new enabled subscription on the token's
    /// queue for `event_types`.
    pub async fn create_subscription(
        &self,
        event_types: &[EventType],
    ) -> Result<Subscription, OrbitError> {
        let types: Vec<&str> = event_types.iter().map(|t| t.as_str()).collect();
        let body = serde_json::json!({ "event_types": types }).to_string();
        let wire: WireSubscription = self
            .call_json(Method::POST, "/v1/subscriptions", Some(body))
            .await
            .map_err(|e| e.needing(Scope::EventsManage))?;
        subscription(wire)
    }

    /// `POST /v1/subscriptions/{id}/pause`. Only the operator or the demo
    /// pause a subscription; a consumer never does.
    pub async fn pause_subscription(
        &self,
        id: &SubscriptionId,
    ) -> Result<Subscription, OrbitError> {
        let wire: WireSubscription = self
            .call_json(
                Method::POST,
                &format!("/v1/subscriptions/{id}/pause"),
                Some("{}".into()),
            )
            .await
            .map_err(|e| e.needing(Scope::EventsManage))?;
        subscription(wire)
    }

    /// `POST /v1/tasks`: a new pending task on the token's queue.
    pub async fn submit_task(&self) -> Result<Task, OrbitError> {
        let wire: WireTask = self
            .call_json(Method::POST, "/v1/tasks", Some("{}".into()))
            .await
            .map_err(|e| e.needing(Scope::TasksSubmit))?;
        task(wire)
    }

    /// `POST /v1/tasks/{id}/cancel`.
    pub async fn cancel_task(&self, id: &TaskId) -> Result<Task, OrbitError> {
        let wire: WireTask = self
            .call_json(
                Method::POST,
                &format!("/v1/tasks/{id}/cancel"),
                Some("{}".into()),
            )
            .await
            .map_err(|e| e.needing(Scope::TasksCancel))?;
        task(wire)
    }

    /// `GET /v1/deliveries/{id}`.
    pub async fn delivery(&self, id: &DeliveryId) -> Result<DeliveryInfo, OrbitError> {
        self.call_json(Method::GET, &format!("/v1/deliveries/{id}"), None)
            .await
            .map_err(|e| e.needing(Scope::EventsRead))
    }

    /// `POST /v1/deliveries/{id}/ack` with the attempt's proof. Safe to repeat
    /// with the same proof when an answer was lost.
    pub async fn ack(&self, id: &DeliveryId, proof: &LeaseProof) -> Result<AckOutcome, OrbitError> {
        let body = serde_json::json!({ "lease_proof": proof.expose() }).to_string();
        let wire: WireAck = self
            .call_json(
                Method::POST,
                &format!("/v1/deliveries/{id}/ack"),
                Some(body),
            )
            .await
            .map_err(|e| e.needing(Scope::EventsConsume))?;
        Ok(if wire.already_acked {
            AckOutcome::AlreadyAcked
        } else {
            AckOutcome::Acked
        })
    }

    /// Opens the delivery stream of a subscription (WebSocket upgrade with
    /// the bearer token in the header, never in the URL).
    pub async fn open_stream(&self, id: &SubscriptionId) -> Result<DeliveryStream, OrbitError> {
        let url = self.url.ws(&format!("/v1/subscriptions/{id}/stream"));
        let header = self.token.header_value()?;
        let connector = tokio_tungstenite::Connector::Rustls(self.tls.config());
        tokio::time::timeout(
            self.timeout,
            DeliveryStream::connect(&url, header, connector),
        )
        .await
        .map_err(|_| OrbitError::Timeout)?
        .map_err(|e| e.needing(Scope::EventsConsume))
    }

    /// `GET /healthz`: whether Orbit answers at all (no token needed).
    pub async fn health(&self) -> Result<(), OrbitError> {
        self.call(Method::GET, "/healthz", None).await.map(|_| ())
    }

    /// Whether the token has `scope`, asked without changing anything.
    ///
    /// Orbit checks the scope before anything else of a request
    /// (`docs/orbit-protocol.md`, section 3, order of checks): a request
    /// that is certain to be refused for a later reason — a malformed id,
    /// a body that is not JSON — tells from its answer whether the scope is
    /// there (`400`) or not (`403 missing_scope`), and a refused request
    /// changes no state. `events:read` is asked with a plain list.
    pub async fn has_scope(&self, scope: Scope) -> Result<bool, OrbitError> {
        // Not 32 hex characters: refused as `invalid_id` after the scope check.
        const NO_ID: &str = "scope-check";
        let (method, path, body, expected) = match scope {
            Scope::EventsRead => (Method::GET, "/v1/subscriptions".to_owned(), None, None),
            Scope::EventsConsume => (
                Method::POST,
                format!("/v1/deliveries/{NO_ID}/ack"),
                Some("{}".to_owned()),
                Some("invalid_id"),
            ),
            Scope::EventsManage => (
                Method::POST,
                format!("/v1/subscriptions/{NO_ID}/pause"),
                Some("{}".to_owned()),
                Some("invalid_id"),
            ),
            // Never an empty or valid body here: that would submit a task.
            Scope::TasksSubmit => (
                Method::POST,
                "/v1/tasks".to_owned(),
                Some("scope-check: not JSON".to_owned()),
                Some("invalid_json"),
            ),
            Scope::TasksCancel => (
                Method::POST,
                format!("/v1/tasks/{NO_ID}/cancel"),
                Some("{}".to_owned()),
                Some("invalid_id"),
            ),
        };
        match (self.call(method, &path, body).await, expected) {
            (Ok(_), None) => Ok(true),
            (Err(OrbitError::Status { status: 400, code }), Some(wanted)) if code == wanted => {
                Ok(true)
            }
            (Err(OrbitError::Status { status: 403, code }), _) if code == "missing_scope" => {
                Ok(false)
            }
            (Err(e), _) => Err(e),
            (Ok(_), Some(_)) => Err(OrbitError::Protocol(
                "a scope check that must be refused was accepted",
            )),
        }
    }
}

fn status_error(status: StatusCode, body: &[u8]) -> OrbitError {
    let code = serde_json::from_slice::<WireError>(body)
        .map(|e| e.error.code)
        .unwrap_or_else(|_| "unknown".to_owned());
    OrbitError::Status {
        status: status.as_u16(),
        code,
    }
}

fn subscription(wire: WireSubscription) -> Result<Subscription, OrbitError> {
    Ok(Subscription {
        id: SubscriptionId::parse(&wire.id).ok_or(OrbitError::Protocol("bad subscription id"))?,
        queue_id: QueueId::parse(&wire.queue_id).ok_or(OrbitError::Protocol("bad queue id"))?,
        event_types: wire.event_types,
        enabled: wire.enabled,
        counts: wire.counts,
    })
}

fn task(wire: WireTask) -> Result<Task, OrbitError> {
    Ok(Task {
        id: TaskId::parse(&wire.id).ok_or(OrbitError::Protocol("bad task id"))?,
        version: wire.version,
        state: wire.state,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_map_to_http_and_websocket_endpoints() {
        let url = OrbitUrl::parse("http://127.0.0.1:8080/").unwrap();
        assert_eq!(url.http("/v1/tasks"), "http://127.0.0.1:8080/v1/tasks");
        assert_eq!(url.ws("/v1/x"), "ws://127.0.0.1:8080/v1/x");
        assert!(url.is_loopback() && !url.is_tls());
        let tls = OrbitUrl::parse("https://orbit.example").unwrap();
        assert_eq!(tls.ws("/v1/x"), "wss://orbit.example/v1/x");
        assert!(tls.is_tls() && !tls.is_loopback());
    }

    #[test]
    fn urls_with_paths_or_other_schemes_are_refused() {
        for bad in [
            "ftp://h",
            "http://h/api",
            "127.0.0.1:8080",
            "http://h?x=1",
            "",
        ] {
            assert!(OrbitUrl::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_token_never_shows_in_debug_output() {
        let client = OrbitClient::new(
            OrbitUrl::parse("http://127.0.0.1:1").unwrap(),
            Token::new("sentinel-token"),
            Duration::from_secs(1),
        )
        .unwrap();
        assert!(!format!("{client:?}").contains("sentinel-token"));
    }

    #[test]
    fn only_transport_failures_and_server_errors_are_retryable() {
        let status = |s: u16| OrbitError::Status {
            status: s,
            code: "x".into(),
        };
        assert!(status(503).is_retryable());
        assert!(!status(409).is_retryable());
        assert!(OrbitError::Timeout.is_retryable());
        assert!(OrbitError::Transport("reset".into()).is_retryable());
    }
}
