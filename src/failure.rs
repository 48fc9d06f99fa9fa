//! The vocabulary of failed deliveries: the stable classes of the log and
//! the metrics, and how an error says which one it is.
//!
//! A failure's class is decided once, by the error that knows it: an
//! error type of a layer (the inbox's) implements [`Classify`]; the event
//! model's [`EventError`] and tower's own errors are known here. Whoever
//! holds a `BoxError` from a whole tower stack — the consumer, an embedder —
//! finds the class with [`classify`], in one pass over the error and its
//! `source()` chain, asking a recognizer for the layer types it cannot
//! name (the inbox's `inbox::classify` is one). Nothing here knows a
//! database or a broker.

use std::fmt;

use crate::event::EventError;

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

/// Everything a consumer needs to know of a failed delivery's error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Failure {
    /// Its stable class.
    pub class: FailureClass,
    /// The dependency (the database) cannot be reached at all: connection
    /// refused or lost, no connection in time, server shutting down.
    /// Nothing about this one delivery; such errors open a consumer's
    /// breaker, deadlocks, conflicts and rejections do not.
    pub unavailable: bool,
    /// The delivery's bytes can never become a valid event, whoever
    /// delivers them again: not strict JSON, too large, a field missing or
    /// malformed. An event of another queue is not malformed (the
    /// configuration may be what is wrong), nor is a conflict.
    pub malformed: bool,
    /// The layer that failed the delivery has logged it already (the
    /// inbox logs every delivery it handles), so that it is logged once.
    pub logged: bool,
}

impl Failure {
    /// A failure of `class`, about this delivery alone, not yet logged.
    pub fn new(class: FailureClass) -> Self {
        Self {
            class,
            unavailable: false,
            malformed: false,
            logged: false,
        }
    }
}

/// An error that knows its own failure class.
pub trait Classify {
    /// What this error says about the delivery it failed.
    fn failure(&self) -> Failure;
}

impl Classify for EventError {
    fn failure(&self) -> Failure {
        Failure {
            malformed: self.is_malformed(),
            ..Failure::new(FailureClass::Rejected)
        }
    }
}

/// An error of your own that states its class: what an inner service (or
/// any layer of your stack) returns when its own error type knows whether
/// the delivery can ever succeed. Wherever it sits on an error's `source()`
/// chain, the inbox and the consumer take its class, as they take the
/// crate's own errors'.
///
/// ```
/// use result_inbox::failure::{Classified, Classify, Failure, FailureClass};
///
/// #[derive(Debug, thiserror::Error)]
/// enum OrderError {
///     #[error("the order {0} is closed")]
///     Closed(u64),
///     #[error("the stock service did not answer")]
///     StockUnavailable,
/// }
///
/// impl Classify for OrderError {
///     fn failure(&self) -> Failure {
///         match self {
///             // Every redelivery fails the same way: an operator looks.
///             OrderError::Closed(_) => Failure::new(FailureClass::Refused),
///             OrderError::StockUnavailable => Failure::new(FailureClass::Error),
///         }
///     }
/// }
///
/// // In the inner service: `.map_err(Classified::new)`, or `?` into a
/// // `BoxError` after it.
/// let e = Classified::new(OrderError::Closed(7));
/// assert_eq!(e.failure().class, FailureClass::Refused);
/// assert_eq!(e.to_string(), "the order 7 is closed");
/// ```
#[derive(Debug)]
pub struct Classified {
    failure: Failure,
    error: Box<dyn std::error::Error + Send + Sync + 'static>,
}

impl Classified {
    /// `error`, with the class it states.
    pub fn new<E>(error: E) -> Self
    where
        E: Classify + std::error::Error + Send + Sync + 'static,
    {
        Self {
            failure: error.failure(),
            error: Box::new(error),
        }
    }

    /// `error`, of `class`.
    pub fn with_class<E>(class: FailureClass, error: E) -> Self
    where
        E: Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    {
        Self {
            failure: Failure::new(class),
            error: error.into(),
        }
    }

    /// `error`, with all of `failure` (its class, and whether the
    /// dependency is unreachable or the bytes malformed).
    pub fn with_failure<E>(failure: Failure, error: E) -> Self
    where
        E: Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    {
        Self {
            failure,
            error: error.into(),
        }
    }

    /// The error it classifies.
    pub fn get_ref(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.error
    }
}

impl Classify for Classified {
    fn failure(&self) -> Failure {
        self.failure
    }
}

impl fmt::Display for Classified {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

impl std::error::Error for Classified {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.error.source()
    }
}

/// Finds the failure behind `e` in one pass over `e` and its sources: the
/// first link that `recognize` names (a layer's own error type), is a
/// [`Classified`] or an [`EventError`], or is tower's `Elapsed` (`timeout`)
/// or `Overloaded` (`overloaded`); class `error` when none is.
pub fn classify(
    e: &(dyn std::error::Error + 'static),
    recognize: &dyn Fn(&(dyn std::error::Error + 'static)) -> Option<Failure>,
) -> Failure {
    for error in chain(e) {
        if let Some(failure) = recognize(error) {
            return failure;
        }
        if let Some(classified) = error.downcast_ref::<Classified>() {
            return classified.failure();
        }
        if let Some(event) = error.downcast_ref::<EventError>() {
            return event.failure();
        }
        if error.is::<tower::timeout::error::Elapsed>() {
            return Failure::new(FailureClass::Timeout);
        }
        if error.is::<tower::load_shed::error::Overloaded>() {
            return Failure::new(FailureClass::Overloaded);
        }
    }
    Failure::new(FailureClass::Error)
}

/// `e` and its sources.
pub fn chain<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(e), |error| error.source())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::BoxError;

    fn nothing(_: &(dyn std::error::Error + 'static)) -> Option<Failure> {
        None
    }

    #[test]
    fn tower_timeouts_and_load_shedding_have_classes_of_their_own() {
        let elapsed: BoxError = Box::new(tower::timeout::error::Elapsed::new());
        assert_eq!(classify(&*elapsed, &nothing).class, FailureClass::Timeout);
        assert!(!FailureClass::Timeout.is_permanent());
        let overloaded: BoxError = Box::new(tower::load_shed::error::Overloaded::new());
        assert_eq!(
            classify(&*overloaded, &nothing).class.as_str(),
            "overloaded"
        );
    }

    #[test]
    fn any_other_error_is_of_class_error_and_not_an_outage() {
        let e: BoxError = "something else".into();
        let failure = classify(&*e, &nothing);
        assert_eq!(failure.class.as_str(), "error");
        assert!(!failure.unavailable && !failure.malformed && !failure.logged);
    }

    #[test]
    fn an_error_that_states_its_class_is_found_behind_other_errors() {
        #[derive(Debug, thiserror::Error)]
        #[error("outer")]
        struct Outer(#[source] Classified);
        let e: BoxError = Box::new(Outer(Classified::with_class(
            FailureClass::Refused,
            "closed",
        )));
        assert_eq!(classify(&*e, &nothing).class, FailureClass::Refused);
    }

    #[test]
    fn a_recognized_layer_error_decides_before_what_it_wraps() {
        #[derive(Debug, thiserror::Error)]
        #[error("outer")]
        struct Outer(#[source] EventError);
        let e: BoxError = Box::new(Outer(EventError::InvalidVersion));
        assert!(classify(&*e, &nothing).malformed);
        let conflict = |error: &(dyn std::error::Error + 'static)| {
            error
                .is::<Outer>()
                .then(|| Failure::new(FailureClass::Conflict))
        };
        let failure = classify(&*e, &conflict);
        assert_eq!(failure.class, FailureClass::Conflict);
        assert!(!failure.malformed);
    }
}
