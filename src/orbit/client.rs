//! The HTTP client of one Orbit deployment.

use std::time::Duration;

use bytes::Bytes;
use http::{header, Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use super::api::{self, DeliveryInfo, DeliveryPage, EventBody, Subscription, Task, WireAck};
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
        from_json(&bytes)
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

    /// `GET /v1/subscriptions/{id}/deliveries`: one page of the
    /// subscription's deliveries, oldest first.
    ///
    /// `state` keeps only the deliveries in that state (`PENDING`,
    /// `LEASED`, `ACKED` or `EXPIRED`); `after` starts after that delivery
    /// (the previous page's [`DeliveryPage::next_after`]); `limit` is the
    /// page size, 1 to 1000 (Orbit refuses others with `400
    /// invalid_query`).
    pub async fn deliveries(
        &self,
        subscription: &SubscriptionId,
        state: Option<&str>,
        after: Option<&str>,
        limit: u32,
    ) -> Result<DeliveryPage, OrbitError> {
        let mut path = format!("/v1/subscriptions/{subscription}/deliveries?limit={limit}");
        if let Some(state) = state {
            path.push_str("&state=");
            path.push_str(&encoded(state));
        }
        if let Some(after) = after {
            path.push_str("&after=");
            path.push_str(&encoded(after));
        }
        self.call_json(Scope::EventsRead, Method::GET, &path, None)
            .await
    }

    /// Every `EXPIRED` delivery of the subscription, oldest first: the
    /// deliveries Orbit gave up on, which wait for an operator.
    ///
    /// Follows every page of [`OrbitClient::deliveries`] (1000 a page, each
    /// request with the client's timeout). The pages are read one after
    /// another, not as one snapshot: a delivery that expires, or gets
    /// budget, meanwhile may or may not be listed.
    pub async fn expired_deliveries(
        &self,
        subscription: &SubscriptionId,
    ) -> Result<Vec<DeliveryInfo>, OrbitError> {
        const PAGE: u32 = 1000;
        let mut expired = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = self
                .deliveries(subscription, Some("EXPIRED"), after.as_deref(), PAGE)
                .await?;
            let Some(next) = page.next_after else {
                expired.extend(page.deliveries);
                return Ok(expired);
            };
            // A cursor that does not move would be followed forever.
            if page.deliveries.is_empty() || after.as_deref() == Some(next.as_str()) {
                return Err(OrbitError::Protocol(
                    "a page of deliveries whose next_after does not move on",
                ));
            }
            expired.extend(page.deliveries);
            after = Some(next);
        }
    }

    /// `GET /v1/events/{id}`: the event's bytes exactly as delivery messages
    /// carry them, for an event of the token's queue.
    ///
    /// The stream never sends an `EXPIRED` delivery again (unless budget
    /// is added): this is how its event is read, to find out why it was
    /// never acknowledged. An unknown event, or one of another queue, is
    /// [`EventBody::Missing`]; a deployment without the call (`404
    /// not_found` or `405`) is [`EventBody::NotOffered`], which is no
    /// error: its deliveries can still be listed, only not diagnosed. The
    /// bytes hold a task's result: never log them.
    pub async fn event(&self, id: &str) -> Result<EventBody, OrbitError> {
        let path = format!("/v1/events/{}", encoded(id));
        match self.call(Method::GET, &path, None).await {
            Ok(bytes) => Ok(EventBody::Found(bytes)),
            Err(OrbitError::Status { status: 404, code }) if code == "event_not_found" => {
                Ok(EventBody::Missing)
            }
            Err(OrbitError::Status { status: 404, code }) if code == "not_found" => {
                Ok(EventBody::NotOffered)
            }
            Err(OrbitError::Status { status: 405, .. }) => Ok(EventBody::NotOffered),
            Err(e) => Err(e.needing(Scope::EventsRead)),
        }
    }

    /// `POST /v1/admin/deliveries/{id}/budget` with `{"add": add}`: the
    /// delivery may have `add` (1 to 100) more attempts, and an `EXPIRED`
    /// one becomes `PENDING`, to be leased again. Answers the delivery as
    /// it is now.
    ///
    /// An admin call (`docs/orbit-protocol.md`, section 12.3): the client
    /// must hold the admin token, as in `OrbitClient::new(url,
    /// Token::new(admin_token), timeout)`; a queue token is refused with
    /// `401 invalid_token`. A production Orbit need not offer the call. An
    /// acknowledged delivery is refused with `409 delivery_already_acked`,
    /// which [`OrbitError::is_code`] tells apart.
    pub async fn add_budget(&self, delivery: &str, add: u32) -> Result<DeliveryInfo, OrbitError> {
        let path = format!("/v1/admin/deliveries/{}/budget", encoded(delivery));
        let body = serde_json::json!({ "add": add }).to_string();
        from_json(&self.call(Method::POST, &path, Some(body)).await?)
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

/// A JSON answer read as `T`.
fn from_json<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, OrbitError> {
    serde_json::from_slice(bytes).map_err(|_| OrbitError::Protocol("malformed JSON answer"))
}

/// `text` as one path segment or query value. Ids come from Orbit's own
/// answers or from an operator: percent-encoding everything but letters,
/// digits, `-` and `_` keeps one from reaching another path (`../`) or
/// adding a query parameter, and Orbit refuses it as `400 invalid_id`.
fn encoded(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
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

    #[test]
    fn an_id_stays_one_path_segment_or_query_value() {
        assert_eq!(encoded("0123abcdEF-_"), "0123abcdEF-_");
        assert_eq!(encoded("../x?a=1&b"), "%2E%2E%2Fx%3Fa%3D1%26b");
        assert_eq!(encoded("é"), "%C3%A9");
    }

    #[test]
    fn an_events_debug_output_shows_its_length_only() {
        let found = EventBody::Found(Bytes::from_static(b"{\"result\":\"sentinel\"}"));
        let shown = format!("{found:?}");
        assert_eq!(shown, "Found(<21 bytes>)");
        assert_eq!(format!("{:?}", EventBody::NotOffered), "NotOffered");
    }
}
