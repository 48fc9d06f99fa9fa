//! Why a call to Orbit failed: status and stable code only, never a body
//! or a token.

use http::StatusCode;
use serde::Deserialize;

use super::tls;
use super::Scope;
use crate::ids::{QueueId, SubscriptionId};

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
    /// A stream message that could not be read as any delivery (not even
    /// around an unreadable event). Only its length is kept: its content
    /// may hold a lease proof or a result.
    #[error("unexpected answer from Orbit: an unreadable stream message of {bytes} bytes that names no delivery")]
    UnreadableMessage {
        /// The message's length.
        bytes: usize,
    },
    /// The client is misconfigured.
    #[error("{0}")]
    Config(&'static str),
    /// The subscription is bound to another queue than the configured one.
    /// Nothing was leased.
    #[error("subscription {subscription} is bound to queue {actual}, but this receiver consumes queue {expected}")]
    QueueMismatch {
        /// The subscription.
        subscription: SubscriptionId,
        /// The configured queue.
        expected: QueueId,
        /// The subscription's queue.
        actual: QueueId,
    },
    /// Orbit refused to show the subscription because it belongs to another
    /// queue than the token's (`403 wrong_queue`). Nothing was leased.
    #[error("subscription {subscription} belongs to another queue than the token's (Orbit answered 403 wrong_queue); this receiver consumes queue {expected}: use a subscription of that queue and its credentials")]
    OtherQueue {
        /// The subscription.
        subscription: SubscriptionId,
        /// The configured queue.
        expected: QueueId,
    },
    /// Orbit knows no such subscription (`404 subscription_not_found`).
    #[error("subscription {subscription} does not exist (Orbit answered 404 subscription_not_found); check ORBIT_SUBSCRIPTION_ID")]
    UnknownSubscription {
        /// The subscription.
        subscription: SubscriptionId,
    },
}

impl OrbitError {
    /// Whether the same call may succeed later: lost connections, time-outs
    /// and server errors. Refusals (4xx) will be refused again.
    pub fn is_retryable(&self) -> bool {
        match self {
            OrbitError::Status { status, .. } => *status >= 500,
            OrbitError::Transport(_) | OrbitError::Timeout => true,
            OrbitError::MissingScope { .. }
            | OrbitError::Protocol(_)
            | OrbitError::UnreadableMessage { .. }
            | OrbitError::Config(_)
            | OrbitError::QueueMismatch { .. }
            | OrbitError::OtherQueue { .. }
            | OrbitError::UnknownSubscription { .. } => false,
        }
    }

    /// Whether Orbit refused for good what was configured: the token (401),
    /// its scopes or queue (403), an id that names nothing (404), a
    /// subscription this receiver cannot consume. Waiting does not help;
    /// the configuration has to change.
    pub fn is_refusal(&self) -> bool {
        match self {
            OrbitError::Status { status, .. } => matches!(status, 401 | 403 | 404),
            OrbitError::MissingScope { .. } => true,
            other => other.is_subscription_refusal(),
        }
    }

    /// Whether the subscription cannot be consumed by this receiver, as
    /// [`OrbitSource::check`](super::OrbitSource::check) found: unknown,
    /// of another queue than the token's, or bound to another queue than
    /// the configured one.
    pub fn is_subscription_refusal(&self) -> bool {
        matches!(
            self,
            OrbitError::QueueMismatch { .. }
                | OrbitError::OtherQueue { .. }
                | OrbitError::UnknownSubscription { .. }
        )
    }

    /// Orbit's error code, when it answered with one.
    pub fn code(&self) -> Option<&str> {
        match self {
            OrbitError::Status { code, .. } => Some(code),
            OrbitError::MissingScope { .. } => Some("missing_scope"),
            _ => None,
        }
    }

    /// Whether Orbit answered with the error code `code`, e.g.
    /// `delivery_already_acked` for budget added to an acknowledged
    /// delivery.
    pub fn is_code(&self, code: &str) -> bool {
        self.code() == Some(code)
    }

    /// A `403 missing_scope` answer to a call that needs `scope` names it.
    pub(super) fn needing(self, scope: Scope) -> Self {
        match self {
            OrbitError::Status { status: 403, code } if code == "missing_scope" => {
                OrbitError::MissingScope { scope }
            }
            other => other,
        }
    }

    /// A transport failure, described with its causes (joined by `: `):
    /// hyper's and tungstenite's own messages (`client error (Connect)`) say
    /// little. A failed TLS handshake is named as such (with a hint when the
    /// certificate is not trusted).
    pub(super) fn transport<E: std::error::Error + 'static>(e: E) -> Self {
        if let Some(tls) = tls::describe_failure(&e) {
            return OrbitError::Transport(tls);
        }
        let mut text = e.to_string();
        for cause in crate::failure::chain(&e).skip(1) {
            let part = cause.to_string();
            // Some errors repeat their cause in their own message.
            if !text.ends_with(&part) {
                text.push_str(": ");
                text.push_str(&part);
            }
        }
        OrbitError::Transport(text)
    }
}

impl crate::source::SourceError for OrbitError {
    fn is_retryable(&self) -> bool {
        OrbitError::is_retryable(self)
    }

    fn is_configuration(&self) -> bool {
        self.is_refusal()
    }

    fn cause(&self) -> &'static str {
        match self {
            OrbitError::Transport(_) => "transport",
            OrbitError::Timeout => "timeout",
            OrbitError::Status { .. } | OrbitError::MissingScope { .. } => "status",
            OrbitError::Protocol(_) => "protocol",
            OrbitError::UnreadableMessage { .. } => "unreadable_message",
            _ => "error",
        }
    }
}

#[derive(Deserialize)]
struct WireError {
    error: WireErrorBody,
}

#[derive(Deserialize)]
struct WireErrorBody {
    code: String,
}

pub(super) fn status_error(status: StatusCode, body: &[u8]) -> OrbitError {
    let code = serde_json::from_slice::<WireError>(body)
        .map(|e| e.error.code)
        .unwrap_or_else(|_| "unknown".to_owned());
    OrbitError::Status {
        status: status.as_u16(),
        code,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn a_message_that_names_no_delivery_is_its_own_cause_of_a_broken_stream() {
        use crate::source::SourceError;
        assert_eq!(
            OrbitError::UnreadableMessage { bytes: 9 }.cause(),
            "unreadable_message"
        );
        assert_eq!(OrbitError::Transport("reset".into()).cause(), "transport");
    }
}
