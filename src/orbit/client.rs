//! The HTTP client of one Orbit deployment.

use std::time::Duration;

use bytes::Bytes;
use http::{header, Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use super::api::{self, DeliveryInfo, Subscription, Task, WireAck};
use super::error::status_error;
use super::{DeliveryStream, LeaseProof, OrbitError, OrbitTls, OrbitUrl, Scope, Token};
use crate::delivery::DeliveryId;
use crate::event::EventType;
use crate::ids::{SubscriptionId, TaskId};
use crate::source::AckOutcome;

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
#[derive(Clone, Debug)]
pub struct OrbitClient {
    url: OrbitUrl,
    token: Token,
    timeout: Duration,
    tls: OrbitTls,
    http: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
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

    /// A call that needs `scope` and answers JSON.
    async fn call_json<T: serde::de::DeserializeOwned>(
        &self,
        scope: Scope,
        method: Method,
        path: &str,
        body: Option<String>,
    ) -> Result<T, OrbitError> {
        let bytes = self
            .call(method, path, body)
            .await
            .map_err(|e| e.needing(scope))?;
        serde_json::from_slice(&bytes).map_err(|_| OrbitError::Protocol("malformed JSON answer"))
    }

    /// `GET /v1/subscriptions/{id}`.
    pub async fn subscription(&self, id: &SubscriptionId) -> Result<Subscription, OrbitError> {
        let path = format!("/v1/subscriptions/{id}");
        api::subscription(
            self.call_json(Scope::EventsRead, Method::GET, &path, None)
                .await?,
        )
    }

    /// `POST /v1/subscriptions`: a new enabled subscription on the token's
    /// queue for `event_types`.
    pub async fn create_subscription(
        &self,
        event_types: &[EventType],
    ) -> Result<Subscription, OrbitError> {
        let types: Vec<&str> = event_types.iter().map(|t| t.as_str()).collect();
        let body = serde_json::json!({ "event_types": types }).to_string();
        let path = "/v1/subscriptions";
        api::subscription(
            self.call_json(Scope::EventsManage, Method::POST, path, Some(body))
                .await?,
        )
    }

    /// `POST /v1/subscriptions/{id}/pause`. Only the operator or the demo
    /// pause a subscription; a consumer never does.
    pub async fn pause_subscription(
        &self,
        id: &SubscriptionId,
    ) -> Result<Subscription, OrbitError> {
        let path = format!("/v1/subscriptions/{id}/pause");
        api::subscription(
            self.call_json(Scope::EventsManage, Method::POST, &path, empty())
                .await?,
        )
    }

    /// `POST /v1/tasks`: a new pending task on the token's queue.
    pub async fn submit_task(&self) -> Result<Task, OrbitError> {
        let path = "/v1/tasks";
        api::task(
            self.call_json(Scope::TasksSubmit, Method::POST, path, empty())
                .await?,
        )
    }

    /// `POST /v1/tasks/{id}/cancel`.
    pub async fn cancel_task(&self, id: &TaskId) -> Result<Task, OrbitError> {
        let path = format!("/v1/tasks/{id}/cancel");
        api::task(
            self.call_json(Scope::TasksCancel, Method::POST, &path, empty())
                .await?,
        )
    }

    /// `GET /v1/deliveries/{id}`.
    pub async fn delivery(&self, id: &DeliveryId) -> Result<DeliveryInfo, OrbitError> {
        let path = format!("/v1/deliveries/{id}");
        self.call_json(Scope::EventsRead, Method::GET, &path, None)
            .await
    }

    /// `POST /v1/deliveries/{id}/ack` with the attempt's proof. Safe to repeat
    /// with the same proof when an answer was lost.
    pub async fn ack(&self, id: &DeliveryId, proof: &LeaseProof) -> Result<AckOutcome, OrbitError> {
        let body = serde_json::json!({ "lease_proof": proof.expose() }).to_string();
        let path = format!("/v1/deliveries/{id}/ack");
        let wire: WireAck = self
            .call_json(Scope::EventsConsume, Method::POST, &path, Some(body))
            .await?;
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
        let invalid_id = |path| (Method::POST, path, empty(), Some("invalid_id"));
        let (method, path, body, expected) = match scope {
            Scope::EventsRead => (Method::GET, "/v1/subscriptions".to_owned(), None, None),
            Scope::EventsConsume => invalid_id(format!("/v1/deliveries/{NO_ID}/ack")),
            Scope::EventsManage => invalid_id(format!("/v1/subscriptions/{NO_ID}/pause")),
            // Never an empty or valid body here: that would submit a task.
            Scope::TasksSubmit => (
                Method::POST,
                "/v1/tasks".to_owned(),
                Some("scope-check: not JSON".to_owned()),
                Some("invalid_json"),
            ),
            Scope::TasksCancel => invalid_id(format!("/v1/tasks/{NO_ID}/cancel")),
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

/// The body of a POST that carries nothing.
fn empty() -> Option<String> {
    Some("{}".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
