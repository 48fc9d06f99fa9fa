//! The in-memory state shared by all handlers, and the small request/response
//! helpers every endpoint uses.

use std::collections::{BTreeSet, HashMap};
use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use crate::auth::TokenGrant;
use crate::deliveries::Delivery;
use crate::error::ApiError;
use crate::ids::Id;
use crate::subscriptions::Subscription;
use crate::tasks::{Event, Task};
use crate::Config;

/// Everything orbit-dev knows. One mutex guards it all: every operation is a
/// short, non-blocking change, and one lock keeps the invariants simple.
pub(crate) struct State {
    pub(crate) config: Config,
    /// Namespace name → namespace id.
    pub(crate) namespaces: HashMap<String, Id>,
    /// (namespace id, application name) → application id.
    pub(crate) applications: HashMap<(Id, String), Id>,
    /// (application id, environment, queue name) → queue id.
    pub(crate) queues: HashMap<(Id, String, String), Id>,
    /// Bearer token → what it grants.
    pub(crate) tokens: HashMap<String, TokenGrant>,
    pub(crate) tasks: HashMap<Id, Task>,
    pub(crate) subscriptions: HashMap<Id, Subscription>,
    /// Queue id → its subscriptions, in creation order.
    pub(crate) subscriptions_by_queue: HashMap<Id, Vec<Id>>,
    /// Namespace id → how many subscriptions it has (paused ones included).
    pub(crate) subscriptions_per_namespace: HashMap<Id, usize>,
    pub(crate) deliveries: HashMap<Id, Delivery>,
    /// Every event ever emitted or injected, for `GET /v1/events/{id}`.
    pub(crate) events: HashMap<Id, Arc<Event>>,
    /// Every running lease: (expiry, delivery id).
    pub(crate) lease_deadlines: BTreeSet<(Instant, Id)>,
    /// Wakes the lease reaper when a lease ends earlier than it planned for.
    pub(crate) reaper: Arc<Notify>,
    /// Creation order of deliveries: leasing takes the oldest available first.
    pub(crate) next_delivery_seq: u64,
}

pub(crate) struct Shared {
    state: Mutex<State>,
    pub(crate) config: Config,
    pub(crate) reaper: Arc<Notify>,
    /// `true` once the server is stopping; every open stream watches it.
    pub(crate) shutdown: watch::Sender<bool>,
}

/// A cheap handle on the shared state, given to every handler.
#[derive(Clone)]
pub(crate) struct App(Arc<Shared>);

impl std::ops::Deref for App {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}

impl App {
    pub(crate) fn new(config: Config) -> Self {
        let reaper = Arc::new(Notify::new());
        let state = State {
            config: config.clone(),
            namespaces: HashMap::new(),
            applications: HashMap::new(),
            queues: HashMap::new(),
            tokens: HashMap::new(),
            tasks: HashMap::new(),
            subscriptions: HashMap::new(),
            subscriptions_by_queue: HashMap::new(),
            subscriptions_per_namespace: HashMap::new(),
            deliveries: HashMap::new(),
            events: HashMap::new(),
            lease_deadlines: BTreeSet::new(),
            reaper: reaper.clone(),
            next_delivery_seq: 0,
        };
        let (shutdown, _) = watch::channel(false);
        App(Arc::new(Shared {
            state: Mutex::new(state),
            config,
            reaper,
            shutdown,
        }))
    }

    /// Locks the state, first ending every lease whose time has passed, so
    /// that no caller ever sees a lease that should already be over.
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        let mut guard = self.state.lock().unwrap_or_else(|e| e.into_inner());
        guard.expire_due(Instant::now());
        guard
    }

    pub(crate) fn begin_shutdown(&self) {
        self.shutdown.send_replace(true);
    }
}

/// The `{id}` segment of a path, kept raw so that a handler validates it only
/// after authentication (errors have a fixed precedence, see the protocol).
pub(crate) struct RawId(Option<String>);

impl RawId {
    pub(crate) fn parse(&self) -> Result<Id, ApiError> {
        self.0
            .as_deref()
            .and_then(Id::parse)
            .ok_or_else(ApiError::invalid_id)
    }
}

impl<S: Send + Sync> FromRequestParts<S> for RawId {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Infallible> {
        let raw = Path::<String>::from_request_parts(parts, state).await.ok();
        Ok(RawId(raw.map(|Path(id)| id)))
    }
}

/// The request body, kept raw so that it is read only after authentication.
pub(crate) struct RawBody(Result<Bytes, ApiError>);

impl<S: Send + Sync> FromRequest<S> for RawBody {
    type Rejection = Infallible;

    async fn from_request(request: Request, state: &S) -> Result<Self, Infallible> {
        let bytes = Bytes::from_request(request, state).await.map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::payload_too_large()
            } else {
                ApiError::invalid_request("the request body could not be read")
            }
        });
        Ok(RawBody(bytes))
    }
}

impl RawBody {
    /// The body's bytes as received.
    pub(crate) fn bytes(self) -> Result<Bytes, ApiError> {
        self.0
    }

    /// Parses a required JSON body.
    pub(crate) fn json<T: DeserializeOwned>(self) -> Result<T, ApiError> {
        let bytes = self.0?;
        serde_json::from_slice(&bytes).map_err(|e| {
            if e.is_data() {
                ApiError::invalid_request(e.to_string())
            } else {
                ApiError::invalid_json("the request body is not valid JSON")
            }
        })
    }

    /// Parses an optional JSON body: an empty (or all-whitespace) body is the
    /// same as `{}`.
    pub(crate) fn json_or_empty<T: DeserializeOwned + Default>(self) -> Result<T, ApiError> {
        match &self.0 {
            Ok(bytes) if bytes.iter().all(u8::is_ascii_whitespace) => Ok(T::default()),
            _ => self.json(),
        }
    }
}

/// A JSON response with the given status.
pub(crate) fn json_response<T: Serialize>(status: StatusCode, body: &T) -> Response {
    match serde_json::to_string(body) {
        Ok(text) => (
            status,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            text,
        )
            .into_response(),
        Err(_) => ApiError::internal("a response could not be encoded").into_response(),
    }
}
