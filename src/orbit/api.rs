//! What Orbit reports of its subscriptions, tasks and deliveries, and the
//! wire forms they are read from.

use serde::Deserialize;

use super::OrbitError;
use crate::ids::{QueueId, SubscriptionId, TaskId};

/// Delivery counts of a subscription, by state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct DeliveryCounts {
    /// Waiting to be leased.
    pub pending: u64,
    /// Leased to a consumer, not yet acknowledged.
    pub leased: u64,
    /// Acknowledged.
    pub acked: u64,
    /// Budget spent; waiting for an operator.
    pub expired: u64,
}

/// A subscription as Orbit reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    /// Its id.
    pub id: SubscriptionId,
    /// The queue it is bound to.
    pub queue_id: QueueId,
    /// The event types it selects, as Orbit spells them.
    pub event_types: Vec<String>,
    /// Enabled (true) or paused.
    pub enabled: bool,
    /// Its deliveries by state.
    pub counts: DeliveryCounts,
}

#[derive(Deserialize)]
pub(super) struct WireSubscription {
    id: String,
    queue_id: String,
    event_types: Vec<String>,
    enabled: bool,
    counts: DeliveryCounts,
}

/// A task as Orbit reports it (without input or result bodies).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    /// Its id.
    pub id: TaskId,
    /// Its version.
    pub version: u64,
    /// Its state, as Orbit spells it.
    pub state: String,
}

#[derive(Deserialize)]
pub(super) struct WireTask {
    id: String,
    version: u64,
    state: String,
}

/// A delivery as Orbit reports it (never with its lease proof).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct DeliveryInfo {
    /// Its id.
    pub id: String,
    /// Its state: `PENDING`, `LEASED`, `ACKED` or `EXPIRED`.
    pub state: String,
    /// How many times it was leased.
    pub attempts: u32,
    /// How many attempts it may have.
    pub budget: u32,
    /// The event it carries.
    pub event_id: String,
}

#[derive(Deserialize)]
pub(super) struct WireAck {
    pub(super) already_acked: bool,
}

pub(super) fn subscription(wire: WireSubscription) -> Result<Subscription, OrbitError> {
    Ok(Subscription {
        id: SubscriptionId::parse(&wire.id)
            .map_err(|_| OrbitError::Protocol("bad subscription id"))?,
        queue_id: QueueId::parse(&wire.queue_id)
            .map_err(|_| OrbitError::Protocol("bad queue id"))?,
        event_types: wire.event_types,
        enabled: wire.enabled,
        counts: wire.counts,
    })
}

pub(super) fn task(wire: WireTask) -> Result<Task, OrbitError> {
    Ok(Task {
        id: TaskId::parse(&wire.id).map_err(|_| OrbitError::Protocol("bad task id"))?,
        version: wire.version,
        state: wire.state,
    })
}
