//! orbit-dev: a local development stand-in for the Orbit task platform.
//!
//! It implements, in memory, the part of Orbit's API that `result-inbox`
//! uses: queue tokens with scopes, tasks and their events, subscriptions,
//! leased deliveries with a retry budget, a credit-based WebSocket stream and
//! HTTP acknowledgements, plus admin endpoints for tests. The contract is
//! `docs/orbit-protocol.md`.
//!
//! [`serve`] runs the server on a listener you bind, so tests can start it on
//! `127.0.0.1:0` in-process; the `orbit-dev` binary wraps it.

use std::future::Future;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use tokio::net::TcpListener;

mod admin;
pub mod auth;
#[cfg(any(feature = "nats", feature = "rabbitmq"))]
pub mod bridge;
pub mod client;
pub mod credentials;
pub mod deliveries;
pub mod error;
pub mod events;
pub mod ids;
mod state;
pub mod stream;
pub mod subscriptions;
pub mod tasks;
pub mod trace;

use error::ApiError;
use state::{json_response, App};

/// Default lease length.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);
/// Default retry budget: how many attempts a delivery gets.
pub const DEFAULT_BUDGET: u64 = 5;
/// Default interval between the stream's WebSocket pings.
pub const DEFAULT_PING_INTERVAL: Duration = Duration::from_secs(15);
/// Largest request body accepted.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// How the server behaves.
#[derive(Clone)]
pub struct Config {
    /// The token the admin endpoints require. Secret.
    pub admin_token: String,
    /// How long a lease lasts.
    pub lease: Duration,
    /// How many attempts a new delivery gets.
    pub budget: u64,
    /// How often a stream pings its client.
    pub ping_interval: Duration,
}

impl Config {
    /// The defaults, with the given admin token.
    pub fn new(admin_token: impl Into<String>) -> Self {
        Config {
            admin_token: admin_token.into(),
            lease: DEFAULT_LEASE,
            budget: DEFAULT_BUDGET,
            ping_interval: DEFAULT_PING_INTERVAL,
        }
    }
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("admin_token", &"<redacted>")
            .field("lease", &self.lease)
            .field("budget", &self.budget)
            .field("ping_interval", &self.ping_interval)
            .finish()
    }
}

/// Serves the Orbit API on `listener` until `shutdown` completes, then stops
/// accepting, closes open streams (code 1001) and returns.
pub async fn serve(
    listener: TcpListener,
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = App::new(config);
    let reaper = tokio::spawn(deliveries::reaper(app.clone()));
    let on_shutdown = app.clone();
    let result = axum::serve(listener, router(app.clone()))
        .with_graceful_shutdown(async move {
            shutdown.await;
            on_shutdown.begin_shutdown();
        })
        .await;
    app.begin_shutdown();
    // Let open streams send their close frames.
    let _ = tokio::time::timeout(Duration::from_secs(2), app.shutdown.closed()).await;
    reaper.abort();
    result
}

fn router(app: App) -> Router {
    Router::new()
        .route("/healthz", get(health))
        .route("/v1/tasks", post(tasks::submit))
        .route("/v1/tasks/{id}", get(tasks::get_task))
        .route("/v1/tasks/{id}/cancel", post(tasks::cancel))
        .route(
            "/v1/subscriptions",
            post(subscriptions::create).get(subscriptions::list),
        )
        .route("/v1/subscriptions/{id}", get(subscriptions::get_one))
        .route("/v1/subscriptions/{id}/pause", post(subscriptions::pause))
        .route("/v1/subscriptions/{id}/resume", post(subscriptions::resume))
        .route("/v1/subscriptions/{id}/deliveries", get(deliveries::list))
        .route("/v1/subscriptions/{id}/stream", get(stream::open))
        .route("/v1/deliveries/{id}", get(deliveries::get_one))
        .route("/v1/deliveries/{id}/ack", post(deliveries::ack))
        .route("/v1/events/{id}", get(events::get_one))
        .route("/v1/admin/bootstrap", post(admin::bootstrap))
        .route("/v1/admin/tasks/{id}/finish", post(admin::finish))
        .route("/v1/admin/deliveries/{id}/budget", post(admin::add_budget))
        .route(
            "/v1/admin/subscriptions/{id}/events",
            post(admin::inject_event),
        )
        .fallback(|| async { ApiError::route_not_found() })
        .method_not_allowed_fallback(|| async { ApiError::method_not_allowed() })
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(app)
}

async fn health() -> Response {
    #[derive(serde::Serialize)]
    struct Health {
        status: &'static str,
    }
    json_response(StatusCode::OK, &Health { status: "ok" }).into_response()
}
