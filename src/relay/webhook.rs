//! The HTTP webhook target, by Standard Webhooks 1.0: a `POST` of the
//! effect's stored bytes, signed with the endpoint's secret, under the
//! effect's id.
//!
//! Each attempt carries
//!
//! - the effect's stored headers, and `content-type: application/json`
//!   unless they give one;
//! - `webhook-id` and `Idempotency-Key`: the effect's id, the same on every
//!   attempt, so an endpoint that keeps the ids it has seen takes it once;
//! - `webhook-timestamp`: now, in Unix seconds, for this attempt;
//! - `webhook-signature: v1,<base64 of HMAC-SHA256 over
//!   "{webhook-id}.{webhook-timestamp}.{body}">` with the endpoint's key;
//! - `traceparent`: the delivery's trace context, when it came with one.
//!
//! Answers: a 2xx is [`Sent`]; `410` is gone (dead, the target paused);
//! `429`, `502`, `503`, `504`, a timeout and a connection error are tried
//! again, honouring `Retry-After`; any other status, redirects included
//! (they are never followed), is dead at once with its status. A request
//! whose answer never came (a timeout after it was sent, a connection
//! lost) has an unknown outcome: the endpoint may have acted on it. It is
//! tried again under the same id: that is what the id is for.

use std::fmt;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use bytes::Bytes;
use hmac::{Hmac, Mac};
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER, USER_AGENT};
use http::{Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt as _, Full, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use rustls::{ClientConfig, RootCertStore};
use sha2::Sha256;
use tower::Service;

use super::clock;
use super::target::{Attempt, Failed, Sent};

/// The secret prefix of Standard Webhooks.
const PREFIX: &str = "whsec_";
/// How much of an answer's body is read (and dropped) so that the
/// connection can be used again.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// Why a webhook cannot be set up. Never quotes a secret.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WebhookError {
    /// The secret is not `whsec_` followed by a non-empty base64 key.
    #[error(
        "invalid webhook secret: expected whsec_ followed by the key in base64 (Standard Webhooks)"
    )]
    InvalidSecret,
    /// The secret's file cannot be read.
    #[error("cannot read the webhook secret file {path}: {source}")]
    SecretFile {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The endpoint is not an absolute `http://` or `https://` URL.
    #[error("invalid webhook URL: expected an absolute http:// or https:// URL")]
    InvalidUrl,
}

/// An endpoint's signing key, from its `whsec_<base64>` form. Its Debug
/// shows nothing of it.
#[derive(Clone)]
pub struct WebhookSecret {
    key: Arc<[u8]>,
}

impl WebhookSecret {
    /// The key of `secret` (`whsec_` and the key in base64, padded or
    /// not; surrounding whitespace is ignored), or
    /// [`WebhookError::InvalidSecret`].
    pub fn parse(secret: &str) -> Result<Self, WebhookError> {
        let encoded = secret
            .trim()
            .strip_prefix(PREFIX)
            .ok_or(WebhookError::InvalidSecret)?;
        let key = base64::engine::general_purpose::STANDARD_NO_PAD
            .decode(encoded.trim_end_matches('='))
            .map_err(|_| WebhookError::InvalidSecret)?;
        if key.is_empty() {
            return Err(WebhookError::InvalidSecret);
        }
        Ok(Self { key: key.into() })
    }

    /// The secret in the file at `path` (its only content, a trailing
    /// newline allowed).
    pub fn from_file(path: &Path) -> Result<Self, WebhookError> {
        let text = std::fs::read_to_string(path).map_err(|source| WebhookError::SecretFile {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text)
    }

    /// The `webhook-signature` value for a message `id` sent at
    /// `timestamp` (Unix seconds) with `body`: `v1,` and the base64 of
    /// HMAC-SHA256 over `{id}.{timestamp}.{body}`.
    pub fn sign(&self, id: &str, timestamp: u64, body: &[u8]) -> String {
        let mut mac =
            <Hmac<Sha256> as Mac>::new_from_slice(&self.key).expect("HMAC takes a key of any size");
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
    }
}

impl fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WebhookSecret(..)")
    }
}

/// The webhook target: sends each effect to one endpoint. Cheap to clone
/// (one connection pool is shared).
#[derive(Clone)]
pub struct Webhook {
    endpoint: Uri,
    secret: WebhookSecret,
    timeout: Duration,
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
}

impl fmt::Debug for Webhook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The path and query may hold a token: only where it goes.
        let host = self.endpoint.host().unwrap_or_default();
        f.debug_struct("Webhook")
            .field("scheme", &self.endpoint.scheme_str().unwrap_or_default())
            .field("host", &host)
            .field("port", &self.endpoint.port_u16())
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

fn public_roots() -> Arc<ClientConfig> {
    static PUBLIC: OnceLock<Arc<ClientConfig>> = OnceLock::new();
    PUBLIC
        .get_or_init(|| {
            let roots = RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
            };
            tls_config(roots)
        })
        .clone()
}

fn tls_config(roots: RootCertStore) -> Arc<ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("the ring provider supports TLS 1.2 and 1.3")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

impl Webhook {
    /// A webhook to `url` (`http://` or `https://`, trusting Mozilla's
    /// roots for https), signed with `secret`, each attempt given 10 s.
    pub fn new(url: &str, secret: WebhookSecret) -> Result<Self, WebhookError> {
        Self::with_tls(url, secret, public_roots())
    }

    /// The same with a rustls configuration of the caller's (a private
    /// CA, a client certificate).
    pub fn with_tls(
        url: &str,
        secret: WebhookSecret,
        tls: Arc<ClientConfig>,
    ) -> Result<Self, WebhookError> {
        let endpoint: Uri = url.parse().map_err(|_| WebhookError::InvalidUrl)?;
        let https = match endpoint.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(WebhookError::InvalidUrl),
        };
        if endpoint.host().is_none_or(str::is_empty) {
            return Err(WebhookError::InvalidUrl);
        }
        let timeout = Duration::from_secs(10);
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(timeout));
        connector.set_nodelay(true);
        connector.enforce_http(false);
        let mut connector = HttpsConnector::from((connector, tls));
        if https {
            connector.enforce_https();
        }
        let client = Client::builder(TokioExecutor::new()).build(connector);
        Ok(Self {
            endpoint,
            secret,
            timeout,
            client,
        })
    }

    /// The same webhook, each attempt given `timeout` (connection, request
    /// and the answer's head); keep it below the relay's lease.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    fn request(&self, attempt: &Attempt) -> Result<Request<Full<Bytes>>, Failed> {
        let effect = &attempt.effect;
        let id = effect.id.as_str();
        let timestamp = clock::unix_now() as u64;
        let mut request = Request::builder()
            .method(Method::POST)
            .uri(self.endpoint.clone())
            .body(Full::new(effect.body.clone()))
            .map_err(|_| Failed::dead("request"))?;
        let headers = request.headers_mut();
        for (name, value) in effect.headers.iter() {
            let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(value),
            ) else {
                return Err(Failed::dead("header"));
            };
            headers.insert(name, value);
        }
        if !headers.contains_key(CONTENT_TYPE) {
            headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
        headers.insert(
            USER_AGENT,
            HeaderValue::from_static(concat!("result-inbox/", env!("CARGO_PKG_VERSION"))),
        );
        let signature = self.secret.sign(id, timestamp, &effect.body);
        for (name, value) in [
            ("webhook-id", id.to_owned()),
            ("webhook-timestamp", timestamp.to_string()),
            ("webhook-signature", signature),
            ("idempotency-key", id.to_owned()),
        ] {
            let value = HeaderValue::from_str(&value).map_err(|_| Failed::dead("header"))?;
            headers.insert(HeaderName::from_static(name), value);
        }
        if let Some(traceparent) = effect
            .traceparent
            .as_deref()
            .and_then(|t| HeaderValue::from_str(t).ok())
        {
            headers.insert(HeaderName::from_static("traceparent"), traceparent);
        }
        Ok(request)
    }
}

/// What an answer's status makes of the attempt.
fn answer(status: StatusCode, retry_after: Option<&HeaderValue>) -> Result<Sent, Failed> {
    let code = status.as_str();
    match status.as_u16() {
        200..=299 => Ok(Sent::new(code)),
        410 => Err(Failed::gone(code)),
        429 | 502 | 503 | 504 => {
            let failed = Failed::retry(code);
            let after = retry_after
                .and_then(|v| v.to_str().ok())
                .and_then(|v| clock::retry_after(v, clock::unix_now()));
            Err(match after {
                Some(after) => failed.with_retry_after(after),
                None => failed,
            })
        }
        _ => Err(Failed::dead(code)),
    }
}

impl Service<Attempt> for Webhook {
    type Response = Sent;
    type Error = Failed;
    type Future = Pin<Box<dyn Future<Output = Result<Sent, Failed>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Failed>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, attempt: Attempt) -> Self::Future {
        let request = self.request(&attempt);
        let client = self.client.clone();
        let timeout = self.timeout;
        Box::pin(async move {
            let request = request?;
            let response = match tokio::time::timeout(timeout, client.request(request)).await {
                Err(_) => return Err(Failed::retry("timeout")),
                Ok(Err(e)) if e.is_connect() => return Err(Failed::retry("connect")),
                Ok(Err(_)) => return Err(Failed::retry("connection")),
                Ok(Ok(response)) => response,
            };
            let outcome = answer(response.status(), response.headers().get(RETRY_AFTER));
            // Read what little the endpoint says, so that the connection
            // serves the next attempt; its content is not kept.
            let body = Limited::new(response.into_body(), MAX_ANSWER_BYTES);
            let _ = tokio::time::timeout(timeout, body.collect()).await;
            outcome
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_is_whsec_and_base64_and_its_debug_shows_nothing_of_it() {
        let secret = WebhookSecret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n").unwrap();
        assert_eq!(format!("{secret:?}"), "WebhookSecret(..)");
        for bad in [
            "",
            "whsec_",
            "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "whsec_not base64!",
        ] {
            let e = WebhookSecret::parse(bad).unwrap_err();
            assert!(e.to_string().contains("whsec_"), "{e}");
        }
    }

    #[test]
    fn the_signature_is_that_of_the_standard_webhooks_example() {
        // The example of the Standard Webhooks specification.
        let secret = WebhookSecret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let signature = secret.sign(
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(signature, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn answers_are_sent_gone_retried_or_dead_by_their_status() {
        use super::super::target::Disposition;
        let of = |code: u16| answer(StatusCode::from_u16(code).unwrap(), None);
        assert_eq!(of(204).unwrap().result(), "204");
        assert_eq!(of(410).unwrap_err().disposition(), Disposition::Gone);
        for code in [429, 502, 503, 504] {
            assert_eq!(of(code).unwrap_err().disposition(), Disposition::Retry);
        }
        for code in [301, 302, 307, 400, 401, 404, 500] {
            let failed = of(code).unwrap_err();
            assert_eq!(failed.disposition(), Disposition::Dead);
            assert_eq!(failed.result(), code.to_string());
        }
        let after = HeaderValue::from_static("3");
        let failed = answer(StatusCode::SERVICE_UNAVAILABLE, Some(&after)).unwrap_err();
        assert_eq!(failed.retry_after(), Some(Duration::from_secs(3)));
    }
}
