//! A dependency of the service that can be asked whether it answers.

use futures::future::BoxFuture;

use crate::failure::Failure;
use crate::ids::QueueId;
use crate::scope::ReceiverName;
use crate::BoxError;

/// A dependency of the service (its database) that can be asked whether it
/// answers right now, without touching any delivery, and that knows its
/// own errors when a delivery fails with one.
///
/// With a probe, a consumer has a breaker: when a delivery fails because
/// the dependency cannot be reached ([`Failure::unavailable`], as
/// [`recognize`](Probe::recognize) says), or a probe fails, it grants no
/// more credit — so the platform leases nothing more to it and no retry
/// budget is spent — and probes with backoff until the dependency answers.
/// The inbox's `InboxStore` is one.
pub trait Probe: Send + Sync + 'static {
    /// `Ok` when the dependency can do its job now.
    fn probe(&self) -> BoxFuture<'static, Result<(), BoxError>>;

    /// The failure `error` stands for when it is one of this dependency's
    /// own error types (one link of a failed delivery's error chain);
    /// `None` for any other. The default knows none.
    fn recognize(&self, error: &(dyn std::error::Error + 'static)) -> Option<Failure> {
        let _ = error;
        None
    }

    /// Whether the dependency's own work found it unreachable since it last
    /// answered (a delivery could not reach the database, or lost the
    /// answer to its COMMIT), before any probe: the consumer then starts no new delivery until a probe
    /// answers, instead of finding out from each delivery's failure. The
    /// default never says so.
    fn is_unavailable(&self) -> bool {
        false
    }

    /// The queue whose events the dependency applies, when it is bound to
    /// one (the inbox's store is): a consumer whose source delivers another
    /// queue's events refuses to start. The default knows none.
    fn queue(&self) -> Option<&QueueId> {
        None
    }

    /// The receiver name the dependency records deliveries under, when it
    /// has one (the inbox's store does): the consumer group that every
    /// delivery's span names from its start, whether or not its event can
    /// be read. The default knows none.
    fn receiver(&self) -> Option<&ReceiverName> {
        None
    }
}
