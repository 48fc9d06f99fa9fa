//! The queue token and its scopes.

use std::fmt;

use super::OrbitError;

/// A bearer token. Shown nowhere: `Debug` prints `Token(<redacted>)`.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    /// Wraps a token.
    pub fn new(token: impl Into<String>) -> Self {
        Self(token.into())
    }

    pub(super) fn header_value(&self) -> Result<http::HeaderValue, OrbitError> {
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
