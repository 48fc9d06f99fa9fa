//! What a target is: a tower [`Service`] from an [`Attempt`] to [`Sent`],
//! or an error that says what to do next ([`Failed`]); and the relay's
//! [`Targets`], a service for each target name.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use tower::util::BoxCloneSyncService;
use tower::{Service, ServiceExt};

use crate::outbox::{Claimed, OutboxError, Target};
use crate::BoxError;

/// One attempt to send a claimed effect: what a target is called with.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Attempt {
    /// The effect, as claimed: its id (the same on every attempt), its
    /// bytes, headers and the delivery's trace context.
    pub effect: Claimed,
    /// Which attempt this is, from 1.
    pub number: u32,
}

impl Attempt {
    /// The `number`th attempt at `effect` (from 1).
    pub fn new(effect: Claimed, number: u32) -> Self {
        Self { effect, number }
    }
}

/// The target took the effect: its answer, as the table keeps it (`200`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    result: String,
}

impl Sent {
    /// Taken, with the answer to keep (a status, `ack`).
    pub fn new(result: impl Into<String>) -> Self {
        Self {
            result: result.into(),
        }
    }

    /// The answer kept.
    pub fn result(&self) -> &str {
        &self.result
    }
}

/// What becomes of an effect whose attempt failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Disposition {
    /// Tried again later, under the same id, with backoff (a `503`, a
    /// timeout, a connection error): dead once the budget is spent.
    Retry,
    /// Dead at once: the target will never take it (a `400`, a redirect).
    Dead,
    /// Dead at once, and the target is gone (`410`): its other effects
    /// wait while the relay holds the target paused.
    Gone,
}

/// An attempt that did not end in [`Sent`]: what to do with the effect,
/// the answer to keep, and how long the target asked to be left alone.
///
/// A target returns it as its error; any other error a target (or a
/// layer in front of it, such as tower's timeout) returns is taken as
/// [`Disposition::Retry`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{result}")]
pub struct Failed {
    disposition: Disposition,
    result: String,
    retry_after: Option<Duration>,
}

impl Failed {
    /// Tried again later (`503`, `timeout`, `connect`).
    pub fn retry(result: impl Into<String>) -> Self {
        Self::of(Disposition::Retry, result)
    }

    /// Dead at once (`400`, `301`).
    pub fn dead(result: impl Into<String>) -> Self {
        Self::of(Disposition::Dead, result)
    }

    /// Dead at once, the target paused (`410`).
    pub fn gone(result: impl Into<String>) -> Self {
        Self::of(Disposition::Gone, result)
    }

    fn of(disposition: Disposition, result: impl Into<String>) -> Self {
        Self {
            disposition,
            result: result.into(),
            retry_after: None,
        }
    }

    /// The same failure, with the target asking not to be tried before
    /// `after` (HTTP's `Retry-After`).
    pub fn with_retry_after(mut self, after: Duration) -> Self {
        self.retry_after = Some(after);
        self
    }

    /// What becomes of the effect.
    pub fn disposition(&self) -> Disposition {
        self.disposition
    }

    /// The answer to keep (a status or an error class).
    pub fn result(&self) -> &str {
        &self.result
    }

    /// How long the target asked to be left alone, if it did.
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// A target's error as a failure: a [`Failed`] as it is; tower's
    /// timeout as `timeout` and its load shedding as `overloaded`, both
    /// tried again; anything else `error`, tried again.
    pub(super) fn from_error(e: BoxError) -> Self {
        match e.downcast::<Failed>() {
            Ok(failed) => *failed,
            Err(e) if e.is::<tower::timeout::error::Elapsed>() => Failed::retry("timeout"),
            Err(e) if e.is::<tower::load_shed::error::Overloaded>() => Failed::retry("overloaded"),
            Err(_) => Failed::retry("error"),
        }
    }
}

/// A target as the relay keeps it: any service from [`Attempt`] to
/// [`Sent`], boxed.
pub type BoxTarget = BoxCloneSyncService<Attempt, Sent, BoxError>;

/// The relay's targets: a service for each target name. An effect whose
/// target has none here stays pending, for a relay that knows it.
#[derive(Clone, Default)]
pub struct Targets {
    services: BTreeMap<Target, BoxTarget>,
}

impl Targets {
    /// No target.
    pub fn new() -> Self {
        Self::default()
    }

    /// The same targets, with `service` sending the effects of target
    /// `name` (replacing the one it had), or [`OutboxError::Invalid`] for
    /// a name no effect can have. Any tower layers may be in front of the
    /// service: a timeout, a rate limit, a concurrency limit.
    pub fn with<S>(mut self, name: &str, service: S) -> Result<Self, OutboxError>
    where
        S: Service<Attempt, Response = Sent> + Clone + Send + Sync + 'static,
        S::Error: Into<BoxError>,
        S::Future: Send + 'static,
    {
        let target = Target::parse(name)?;
        let service = service.map_err(Into::into);
        self.services
            .insert(target, BoxCloneSyncService::new(service));
        Ok(self)
    }

    /// The service of `target`, if there is one.
    pub(super) fn get(&self, target: &Target) -> Option<BoxTarget> {
        self.services.get(target).cloned()
    }

    /// The target names, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.services.keys().map(Target::as_str)
    }

    /// Whether there is no target.
    pub fn is_empty(&self) -> bool {
        self.services.is_empty()
    }
}

impl fmt::Debug for Targets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_that_is_not_a_failure_is_tried_again() {
        let failed: BoxError = Box::new(Failed::gone("410"));
        assert_eq!(Failed::from_error(failed).disposition(), Disposition::Gone);
        let elapsed: BoxError = Box::new(tower::timeout::error::Elapsed::new());
        assert_eq!(Failed::from_error(elapsed), Failed::retry("timeout"));
        let other: BoxError = "broken".into();
        assert_eq!(Failed::from_error(other), Failed::retry("error"));
    }
}
