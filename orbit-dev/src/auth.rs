//! Bearer tokens, scopes and queue binding.

use std::fmt;

use axum::http::{header, HeaderMap};
use serde::{Serialize, Serializer};

use crate::error::ApiError;
use crate::ids::{secrets_equal, Id};
use crate::state::App;

/// What a token may do.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Scope {
    /// Inspect subscriptions, deliveries and tasks.
    EventsRead,
    /// Stream and acknowledge deliveries.
    EventsConsume,
    /// Create, pause and resume subscriptions.
    EventsManage,
    /// Submit (and read) tasks.
    TasksSubmit,
    /// Cancel tasks.
    TasksCancel,
}

impl Scope {
    /// Every scope, in the order the protocol lists them.
    pub const ALL: [Scope; 5] = [
        Scope::EventsRead,
        Scope::EventsConsume,
        Scope::EventsManage,
        Scope::TasksSubmit,
        Scope::TasksCancel,
    ];

    /// The scope's wire name, e.g. `events:consume`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::EventsRead => "events:read",
            Scope::EventsConsume => "events:consume",
            Scope::EventsManage => "events:manage",
            Scope::TasksSubmit => "tasks:submit",
            Scope::TasksCancel => "tasks:cancel",
        }
    }

    /// The scope with that wire name.
    pub fn parse(name: &str) -> Option<Scope> {
        Scope::ALL.into_iter().find(|s| s.as_str() == name)
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Scope {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// What one queue token grants: scopes, on exactly one queue.
#[derive(Clone, Debug)]
pub(crate) struct TokenGrant {
    pub(crate) queue_id: Id,
    pub(crate) namespace_id: Id,
    pub(crate) scopes: Vec<Scope>,
}

impl TokenGrant {
    pub(crate) fn require(&self, scope: Scope) -> Result<(), ApiError> {
        if self.scopes.contains(&scope) {
            Ok(())
        } else {
            Err(ApiError::missing_scope(scope.as_str()))
        }
    }

    /// Passes when the token has at least one of `scopes` (the error names the
    /// first).
    pub(crate) fn require_any(&self, scopes: &[Scope]) -> Result<(), ApiError> {
        if scopes.iter().any(|s| self.scopes.contains(s)) {
            Ok(())
        } else {
            Err(ApiError::missing_scope(scopes[0].as_str()))
        }
    }

    /// 403 `wrong_queue` unless the resource is on this token's queue.
    pub(crate) fn require_queue(&self, queue_id: Id) -> Result<(), ApiError> {
        if self.queue_id == queue_id {
            Ok(())
        } else {
            Err(ApiError::wrong_queue())
        }
    }
}

/// The token of an `Authorization: Bearer <token>` header.
fn bearer(headers: &HeaderMap) -> Result<&str, ApiError> {
    let value = headers
        .get(header::AUTHORIZATION)
        .ok_or_else(ApiError::missing_token)?;
    let text = value.to_str().map_err(|_| ApiError::invalid_token())?;
    let (scheme, token) = text.split_once(' ').ok_or_else(ApiError::invalid_token)?;
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
        return Err(ApiError::invalid_token());
    }
    Ok(token)
}

impl App {
    /// The grant of the request's queue token: 401 when missing or unknown.
    pub(crate) fn authenticate(&self, headers: &HeaderMap) -> Result<TokenGrant, ApiError> {
        let token = bearer(headers)?;
        self.lock()
            .tokens
            .get(token)
            .cloned()
            .ok_or_else(ApiError::invalid_token)
    }

    /// Passes only for the admin token: 401 otherwise (queue tokens included).
    pub(crate) fn authenticate_admin(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        let token = bearer(headers)?;
        if secrets_equal(token, &self.config.admin_token) {
            Ok(())
        } else {
            Err(ApiError::invalid_token())
        }
    }
}
