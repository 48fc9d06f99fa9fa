//! What Orbit reports of its subscriptions, tasks, deliveries and events,
//! and the wire forms they are read from.

use std::fmt;

use bytes::Bytes;
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
    /// The event it carries; [`OrbitClient::event`](super::OrbitClient::event)
    /// reads it.
    pub event_id: String,
    /// The task whose event it carries; `None` for an event an admin
    /// injected, which belongs to no task.
    #[serde(default)]
    pub task_id: Option<String>,
}

/// One page of a subscription's deliveries, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct DeliveryPage {
    /// The page's deliveries.
    pub deliveries: Vec<DeliveryInfo>,
    /// When more deliveries match: the id to pass as `after` for the next
    /// page.
    pub next_after: Option<String>,
}

/// What Orbit answered to a request for one event
/// ([`OrbitClient::event`](super::OrbitClient::event)).
///
/// `Debug` shows the length of a found event, never its bytes: an event
/// carries a task's result.
#[derive(Clone, PartialEq, Eq)]
pub enum EventBody {
    /// The event's bytes exactly as the stream splices them into a delivery
    /// message. Usually a JSON envelope, but an event an admin injected can
    /// be any text.
    Found(Bytes),
    /// No such event on the token's queue (`404 event_not_found`): unknown,
    /// of another queue, or no longer kept.
    Missing,
    /// The deployment does not offer `GET /v1/events/{id}` (`404
    /// not_found` or `405`): its deliveries can be listed, not diagnosed.
    NotOffered,
}

impl fmt::Debug for EventBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EventBody::Found(bytes) => write!(f, "Found(<{} bytes>)", bytes.len()),
            EventBody::Missing => f.write_str("Missing"),
            EventBody::NotOffered => f.write_str("NotOffered"),
        }
    }
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
