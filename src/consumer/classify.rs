//! What the consumer reads from a failed delivery's error, whatever tower
//! stack produced it.
//!
//! The consumer gets errors as [`BoxError`]s: the inbox's own
//! [`InboxError`](crate::inbox::InboxError), possibly boxed again or wrapped
//! by layers above it, or the errors of tower's own middleware. [`classify`]
//! looks through boxes and `source()` chains and names the failure with one
//! of the stable classes of the log and the metrics.

use std::fmt;

use crate::BoxError;

/// The stable class of a failed delivery. None of them is ever ACKed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailureClass {
    /// The event is malformed or not for this receiver (permanent).
    Rejected,
    /// The event contradicts a committed one (permanent).
    Conflict,
    /// The business refused it for good (permanent).
    Refused,
    /// COMMIT was sent and its outcome is unknown.
    Unconfirmed,
    /// A time limit outside the inbox (tower's `TimeoutLayer`) fired; if it
    /// fired during COMMIT, the outcome is unknown, as for `Unconfirmed`.
    Timeout,
    /// A load-shedding layer refused to take the delivery.
    Overloaded,
    /// Anything else: the database, the inner service, an unknown error.
    Error,
}

impl FailureClass {
    /// The word in the log and in the `class` label of the metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureClass::Rejected => "rejected",
            FailureClass::Conflict => "conflict",
            FailureClass::Refused => "refused",
            FailureClass::Unconfirmed => "unconfirmed",
            FailureClass::Timeout => "timeout",
            FailureClass::Overloaded => "overloaded",
            FailureClass::Error => "error",
        }
    }

    /// Whether every redelivery will fail the same way: the delivery can
    /// only spend its budget and end `EXPIRED`.
    pub fn is_permanent(self) -> bool {
        matches!(
            self,
            FailureClass::Rejected | FailureClass::Conflict | FailureClass::Refused
        )
    }
}

impl fmt::Display for FailureClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Names the failure behind `e`: the inbox's own class when an
/// `InboxError` is found in the box or its sources, `timeout` for tower's
/// `Elapsed`, `overloaded` for tower's `Overloaded`, `error` otherwise.
pub fn classify(e: &BoxError) -> FailureClass {
    for error in chain(e.as_ref()) {
        #[cfg(feature = "mysql")]
        if let Some(inbox) = error.downcast_ref::<crate::inbox::InboxError>() {
            return inbox.failure_class();
        }
        if error.is::<tower::timeout::error::Elapsed>() {
            return FailureClass::Timeout;
        }
        if error.is::<tower::load_shed::error::Overloaded>() {
            return FailureClass::Overloaded;
        }
    }
    FailureClass::Error
}

/// The stable class of a failed delivery as a word (see [`classify`]).
pub fn class(e: &BoxError) -> &'static str {
    classify(e).as_str()
}

/// Whether the error says that the database cannot be reached at all
/// (connection refused or lost, no connection in time, server shutting
/// down), rather than something about this one delivery. Such errors open
/// the consumer's breaker; deadlocks, conflicts and rejections do not.
pub fn is_unavailable(e: &BoxError) -> bool {
    #[cfg(feature = "mysql")]
    for error in chain(e.as_ref()) {
        if let Some(inbox) = error.downcast_ref::<crate::inbox::InboxError>() {
            return inbox.is_unavailable();
        }
    }
    let _ = e;
    false
}

/// Whether the error says that the delivery's bytes can never become a
/// valid event, whoever delivers them again: not strict JSON, too large,
/// a field missing or malformed. An event of another queue is not
/// malformed (the configuration may be what is wrong), nor is a conflict.
pub fn is_malformed(e: &BoxError) -> bool {
    for error in chain(e.as_ref()) {
        #[cfg(feature = "mysql")]
        if let Some(inbox) = error.downcast_ref::<crate::inbox::InboxError>() {
            return matches!(inbox, crate::inbox::InboxError::Rejected(e) if e.is_malformed());
        }
        if let Some(event) = error.downcast_ref::<crate::event::EventError>() {
            return event.is_malformed();
        }
    }
    false
}

/// `e` and its sources.
pub(crate) fn chain<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(e), |error| error.source())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tower_timeouts_and_load_shedding_have_classes_of_their_own() {
        let elapsed: BoxError = Box::new(tower::timeout::error::Elapsed::new());
        assert_eq!(classify(&elapsed), FailureClass::Timeout);
        assert!(!classify(&elapsed).is_permanent());
        let overloaded: BoxError = Box::new(tower::load_shed::error::Overloaded::new());
        assert_eq!(class(&overloaded), "overloaded");
    }

    #[test]
    fn any_other_error_is_of_class_error_and_not_an_outage() {
        let e: BoxError = "something else".into();
        assert_eq!(class(&e), "error");
        assert!(!is_unavailable(&e));
    }
}

#[cfg(all(test, feature = "mysql"))]
mod inbox_tests {
    use super::*;
    use crate::inbox::{InboxError, Refusal};

    #[derive(Debug, thiserror::Error)]
    #[error("outer layer failed")]
    struct Outer(#[source] InboxError);

    #[test]
    fn an_inbox_error_keeps_its_class_inside_a_box() {
        let e: BoxError = Box::new(InboxError::CommitUnconfirmed);
        assert_eq!(classify(&e), FailureClass::Unconfirmed);
        assert!(!is_unavailable(&e));
    }

    #[test]
    fn an_inbox_error_is_found_behind_another_layers_error() {
        let e: BoxError = Box::new(Outer(InboxError::CommitUnconfirmed));
        assert_eq!(class(&e), "unconfirmed");
    }

    #[test]
    fn a_refusal_is_permanent() {
        let e: BoxError = Box::new(InboxError::Refused(Refusal::new("closed")));
        assert_eq!(classify(&e), FailureClass::Refused);
        assert!(classify(&e).is_permanent());
    }
}
