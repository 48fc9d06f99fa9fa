//! The error body every endpoint uses:
//! `{"error":{"code":"<stable_snake_case_code>","message":"<short text>"}}`.

use std::borrow::Cow;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// An API error: an HTTP status, a stable code and a short message.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: Cow<'static, str>,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<Cow<'static, str>>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    /// The stable code, e.g. `stale_lease_proof`.
    pub fn code(&self) -> &'static str {
        self.code
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    // 400
    pub(crate) fn invalid_json(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_json", message)
    }
    pub(crate) fn invalid_request(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }
    pub(crate) fn invalid_id() -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "invalid_id",
            "ids are 32 lowercase hex characters",
        )
    }
    pub(crate) fn invalid_query(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_query", message)
    }
    pub(crate) fn websocket_upgrade_required() -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "websocket_upgrade_required",
            "this endpoint only accepts a WebSocket upgrade request",
        )
    }
    // 401
    pub(crate) fn missing_token() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "missing_token",
            "an Authorization: Bearer <token> header is required",
        )
    }
    pub(crate) fn invalid_token() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "invalid_token",
            "the bearer token is malformed or unknown",
        )
    }
    // 403
    pub(crate) fn missing_scope(scope: &'static str) -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            "missing_scope",
            format!("the token lacks the scope {scope}"),
        )
    }
    pub(crate) fn wrong_queue() -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            "wrong_queue",
            "the resource belongs to another queue than the token's",
        )
    }
    // 404
    pub(crate) fn route_not_found() -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", "no such endpoint")
    }
    pub(crate) fn task_not_found() -> Self {
        Self::new(StatusCode::NOT_FOUND, "task_not_found", "no such task")
    }
    pub(crate) fn subscription_not_found() -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "subscription_not_found",
            "no such subscription",
        )
    }
    pub(crate) fn delivery_not_found() -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "delivery_not_found",
            "no such delivery",
        )
    }
    pub(crate) fn event_not_found() -> Self {
        Self::new(StatusCode::NOT_FOUND, "event_not_found", "no such event")
    }
    // 405
    pub(crate) fn method_not_allowed() -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "this endpoint does not accept that method",
        )
    }
    // 409
    pub(crate) fn invalid_transition(from: &'static str, to: &'static str) -> Self {
        Self::new(
            StatusCode::CONFLICT,
            "invalid_transition",
            format!("a task in state {from} cannot become {to}"),
        )
    }
    pub(crate) fn stale_lease_proof() -> Self {
        Self::new(
            StatusCode::CONFLICT,
            "stale_lease_proof",
            "the lease proof is not the delivery's current one",
        )
    }
    pub(crate) fn subscription_limit_reached(limit: usize) -> Self {
        Self::new(
            StatusCode::CONFLICT,
            "subscription_limit_reached",
            format!("the namespace already has {limit} subscriptions"),
        )
    }
    pub(crate) fn subscription_paused() -> Self {
        Self::new(
            StatusCode::CONFLICT,
            "subscription_paused",
            "a paused subscription receives no new deliveries",
        )
    }
    pub(crate) fn delivery_already_acked() -> Self {
        Self::new(
            StatusCode::CONFLICT,
            "delivery_already_acked",
            "the delivery is already acknowledged",
        )
    }
    // 413
    pub(crate) fn payload_too_large() -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            "the request body is too large",
        )
    }
    // 500
    pub(crate) fn internal(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal_error", message)
    }
}

#[derive(Serialize)]
struct Body<'a> {
    error: Inner<'a>,
}

#[derive(Serialize)]
struct Inner<'a> {
    code: &'a str,
    message: &'a str,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::to_string(&Body {
            error: Inner {
                code: self.code,
                message: &self.message,
            },
        })
        .unwrap_or_else(|_| String::from(r#"{"error":{"code":"internal_error","message":""}}"#));
        let mut response = (
            self.status,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            body,
        )
            .into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.code, self.status, self.message)
    }
}

impl std::error::Error for ApiError {}
