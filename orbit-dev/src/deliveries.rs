//! Deliveries: one event for one subscription, leased to consumers one
//! attempt at a time until it is acknowledged or its budget is spent.

use std::future::pending;
use std::sync::Arc;
use std::time::SystemTime;

use axum::extract::State as Extract;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use serde::{Deserialize, Serialize};
use tokio::time::{sleep_until, Instant};

use crate::auth::{Scope, TokenGrant};
use crate::error::ApiError;
use crate::ids::{random_secret, rfc3339, secrets_equal, Id};
use crate::state::{json_response, App, RawBody, RawId, State};
use crate::tasks::Event;

/// Most deliveries one listing page returns.
pub const MAX_PAGE: usize = 1000;
/// Deliveries one listing page returns when `limit` is not given.
pub const DEFAULT_PAGE: usize = 100;

/// A delivery's state.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum DeliveryState {
    /// Waiting to be leased.
    Pending,
    /// Leased to a consumer until its lease runs out.
    Leased,
    /// Acknowledged: final.
    Acked,
    /// Every attempt of the budget was leased and none acknowledged.
    Expired,
}

impl DeliveryState {
    /// The wire name, e.g. `LEASED`.
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryState::Pending => "PENDING",
            DeliveryState::Leased => "LEASED",
            DeliveryState::Acked => "ACKED",
            DeliveryState::Expired => "EXPIRED",
        }
    }

    fn parse(name: &str) -> Option<Self> {
        [
            DeliveryState::Pending,
            DeliveryState::Leased,
            DeliveryState::Acked,
            DeliveryState::Expired,
        ]
        .into_iter()
        .find(|s| s.as_str() == name)
    }
}

/// The latest attempt's lease. It stays after the lease ends, so that its
/// proof can still acknowledge the delivery until a newer lease replaces it.
pub(crate) struct Lease {
    pub(crate) proof: String,
    pub(crate) expires_at: Instant,
    pub(crate) expires_at_wall: SystemTime,
}

pub(crate) struct Delivery {
    pub(crate) id: Id,
    /// Creation order across all deliveries.
    pub(crate) seq: u64,
    /// Position in its subscription's list of deliveries.
    pub(crate) index: usize,
    pub(crate) subscription_id: Id,
    pub(crate) event: Arc<Event>,
    pub(crate) state: DeliveryState,
    pub(crate) attempts: u64,
    pub(crate) budget: u64,
    pub(crate) lease: Option<Lease>,
}

#[derive(Serialize)]
pub(crate) struct DeliveryView {
    id: Id,
    subscription_id: Id,
    event_id: Id,
    task_id: Option<Id>,
    state: &'static str,
    attempts: u64,
    budget: u64,
    lease_expires_at: Option<String>,
}

impl Delivery {
    pub(crate) fn view(&self) -> DeliveryView {
        DeliveryView {
            id: self.id,
            subscription_id: self.subscription_id,
            event_id: self.event.id,
            task_id: self.event.task_id,
            state: self.state.as_str(),
            attempts: self.attempts,
            budget: self.budget,
            lease_expires_at: match (&self.lease, self.state) {
                (Some(lease), DeliveryState::Leased) => Some(rfc3339(lease.expires_at_wall)),
                _ => None,
            },
        }
    }
}

/// What a stream needs to send one leased delivery.
pub(crate) struct Leased {
    pub(crate) delivery_id: Id,
    pub(crate) subscription_id: Id,
    pub(crate) attempt: u64,
    pub(crate) lease_proof: String,
    pub(crate) lease_expires_at: String,
    pub(crate) event: Arc<Event>,
}

/// How an acknowledgement went.
pub(crate) enum Acked {
    Now,
    Already,
}

impl State {
    /// Creates a PENDING delivery of `event` for the subscription.
    pub(crate) fn create_delivery(&mut self, subscription_id: Id, event: Arc<Event>) -> Id {
        let id = Id::random();
        let seq = self.next_delivery_seq;
        self.next_delivery_seq += 1;
        let budget = self.config.budget;
        let subscription = self
            .subscriptions
            .get_mut(&subscription_id)
            .expect("deliveries are only made for existing subscriptions");
        let index = subscription.deliveries.len();
        subscription.deliveries.push(id);
        subscription.ready.insert(seq, id);
        subscription.wake();
        self.deliveries.insert(
            id,
            Delivery {
                id,
                seq,
                index,
                subscription_id,
                event,
                state: DeliveryState::Pending,
                attempts: 0,
                budget,
                lease: None,
            },
        );
        id
    }

    /// Leases the subscription's oldest PENDING delivery, if it is enabled:
    /// attempts + 1, a fresh proof, a lease running from now.
    pub(crate) fn lease_next(&mut self, subscription_id: Id, now: Instant) -> Option<Leased> {
        let subscription = self.subscriptions.get_mut(&subscription_id)?;
        if !subscription.enabled {
            return None;
        }
        let (_, delivery_id) = subscription.ready.pop_first()?;
        let delivery = self.deliveries.get_mut(&delivery_id)?;
        debug_assert_eq!(delivery.state, DeliveryState::Pending);
        let expires_at = now + self.config.lease;
        let expires_at_wall = SystemTime::now() + self.config.lease;
        delivery.attempts += 1;
        delivery.state = DeliveryState::Leased;
        let lease = Lease {
            proof: random_secret("lp_"),
            expires_at,
            expires_at_wall,
        };
        let leased = Leased {
            delivery_id,
            subscription_id,
            attempt: delivery.attempts,
            lease_proof: lease.proof.clone(),
            lease_expires_at: rfc3339(expires_at_wall),
            event: delivery.event.clone(),
        };
        delivery.lease = Some(lease);
        let earliest = self.lease_deadlines.first().map(|(at, _)| *at);
        self.lease_deadlines.insert((expires_at, delivery_id));
        if !matches!(earliest, Some(at) if at <= expires_at) {
            self.reaper.notify_one();
        }
        Some(leased)
    }

    /// Ends every lease whose time is up: the delivery becomes PENDING again,
    /// or EXPIRED when its attempts have reached its budget.
    pub(crate) fn expire_due(&mut self, now: Instant) {
        while let Some(&(at, delivery_id)) = self.lease_deadlines.first() {
            if at > now {
                break;
            }
            self.lease_deadlines.pop_first();
            let Some(delivery) = self.deliveries.get_mut(&delivery_id) else {
                continue;
            };
            if delivery.state != DeliveryState::Leased {
                continue;
            }
            if delivery.attempts >= delivery.budget {
                delivery.state = DeliveryState::Expired;
                tracing::debug!(delivery_id = %delivery_id, "delivery expired");
            } else {
                delivery.state = DeliveryState::Pending;
                let (seq, subscription_id) = (delivery.seq, delivery.subscription_id);
                if let Some(subscription) = self.subscriptions.get_mut(&subscription_id) {
                    subscription.ready.insert(seq, delivery_id);
                    subscription.wake();
                }
            }
        }
    }

    /// When the next lease ends, if any is running.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.lease_deadlines.first().map(|(at, _)| *at)
    }

    /// The delivery, if it exists (404) and its subscription is on the
    /// token's queue (403).
    pub(crate) fn delivery_for(&self, grant: &TokenGrant, id: Id) -> Result<&Delivery, ApiError> {
        let delivery = self
            .deliveries
            .get(&id)
            .ok_or_else(ApiError::delivery_not_found)?;
        grant.require_queue(self.subscriptions[&delivery.subscription_id].queue_id)?;
        Ok(delivery)
    }

    /// Acknowledges with a lease proof. The proof of the latest attempt is
    /// accepted until a newer attempt is leased, even after its lease ran out
    /// (the delivery is then PENDING or EXPIRED): the work was done.
    fn ack(&mut self, id: Id, proof: &str) -> Result<Acked, ApiError> {
        let delivery = self
            .deliveries
            .get_mut(&id)
            .ok_or_else(ApiError::delivery_not_found)?;
        let current = delivery
            .lease
            .as_ref()
            .is_some_and(|lease| secrets_equal(&lease.proof, proof));
        if !current {
            return Err(ApiError::stale_lease_proof());
        }
        let (expires_at, seq) = (delivery.lease.as_ref().map(|l| l.expires_at), delivery.seq);
        match delivery.state {
            DeliveryState::Acked => return Ok(Acked::Already),
            DeliveryState::Leased => {
                if let Some(at) = expires_at {
                    self.lease_deadlines.remove(&(at, id));
                }
            }
            DeliveryState::Pending => {
                if let Some(subscription) = self.subscriptions.get_mut(&delivery.subscription_id) {
                    subscription.ready.remove(&seq);
                }
            }
            DeliveryState::Expired => {}
        }
        delivery.state = DeliveryState::Acked;
        Ok(Acked::Now)
    }

    /// Raises a delivery's budget by `add`; an EXPIRED delivery becomes
    /// PENDING again.
    pub(crate) fn add_budget(&mut self, id: Id, add: u64) -> Result<&Delivery, ApiError> {
        let delivery = self
            .deliveries
            .get_mut(&id)
            .ok_or_else(ApiError::delivery_not_found)?;
        if delivery.state == DeliveryState::Acked {
            return Err(ApiError::delivery_already_acked());
        }
        delivery.budget += add;
        if delivery.state == DeliveryState::Expired {
            delivery.state = DeliveryState::Pending;
            let (seq, subscription_id) = (delivery.seq, delivery.subscription_id);
            if let Some(subscription) = self.subscriptions.get_mut(&subscription_id) {
                subscription.ready.insert(seq, id);
                subscription.wake();
            }
        }
        Ok(&self.deliveries[&id])
    }
}

/// Ends leases on time, so that streams see redeliveries without waiting for
/// some request to come by. Runs until the server stops.
pub(crate) async fn reaper(app: App) {
    loop {
        // Locking ends every lease already due.
        let next = app.lock().next_deadline();
        let wait = async {
            match next {
                Some(at) => sleep_until(at).await,
                None => pending().await,
            }
        };
        tokio::select! {
            () = wait => {}
            () = app.reaper.notified() => {}
        }
    }
}

/// `GET /v1/deliveries/{id}`
pub(crate) async fn get_one(
    Extract(app): Extract<App>,
    headers: HeaderMap,
    id: RawId,
) -> Result<Response, ApiError> {
    let grant = app.authenticate(&headers)?;
    grant.require(Scope::EventsRead)?;
    let id = id.parse()?;
    let state = app.lock();
    let delivery = state.delivery_for(&grant, id)?;
    Ok(json_response(StatusCode::OK, &delivery.view()))
}

struct ListQuery {
    state: Option<DeliveryState>,
    limit: usize,
    after: Option<Id>,
}

fn parse_list_query(query: Option<&str>) -> Result<ListQuery, ApiError> {
    let mut parsed = ListQuery {
        state: None,
        limit: DEFAULT_PAGE,
        after: None,
    };
    let mut seen: Vec<&str> = Vec::new();
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        if seen.contains(&name) {
            return Err(ApiError::invalid_query(format!("{name} is given twice")));
        }
        seen.push(name);
        match name {
            "state" => {
                parsed.state = Some(DeliveryState::parse(value).ok_or_else(|| {
                    ApiError::invalid_query("state is one of PENDING, LEASED, ACKED, EXPIRED")
                })?)
            }
            "limit" => {
                parsed.limit = value
                    .parse()
                    .ok()
                    .filter(|n| (1..=MAX_PAGE).contains(n))
                    .ok_or_else(|| {
                        ApiError::invalid_query(format!("limit is an integer from 1 to {MAX_PAGE}"))
                    })?
            }
            "after" => {
                parsed.after = Some(
                    Id::parse(value)
                        .ok_or_else(|| ApiError::invalid_query("after is a delivery id"))?,
                )
            }
            _ => return Err(ApiError::invalid_query("unknown query parameter")),
        }
    }
    Ok(parsed)
}

#[derive(Serialize)]
struct ListView {
    deliveries: Vec<DeliveryView>,
    next_after: Option<Id>,
}

/// `GET /v1/subscriptions/{id}/deliveries`
pub(crate) async fn list(
    Extract(app): Extract<App>,
    headers: HeaderMap,
    id: RawId,
    uri: Uri,
) -> Result<Response, ApiError> {
    let grant = app.authenticate(&headers)?;
    grant.require(Scope::EventsRead)?;
    let id = id.parse()?;
    let query = parse_list_query(uri.query())?;
    let state = app.lock();
    let subscription = state.subscription_for(&grant, id)?;
    let start = match query.after {
        None => 0,
        Some(after) => match state.deliveries.get(&after) {
            Some(d) if d.subscription_id == id => d.index + 1,
            _ => {
                return Err(ApiError::invalid_query(
                    "after is not a delivery of this subscription",
                ))
            }
        },
    };
    let mut deliveries = Vec::new();
    let mut next_after = None;
    for delivery_id in &subscription.deliveries[start..] {
        let delivery = &state.deliveries[delivery_id];
        if query.state.is_some_and(|s| s != delivery.state) {
            continue;
        }
        if deliveries.len() == query.limit {
            next_after = deliveries.last().map(|d: &DeliveryView| d.id);
            break;
        }
        deliveries.push(delivery.view());
    }
    Ok(json_response(
        StatusCode::OK,
        &ListView {
            deliveries,
            next_after,
        },
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AckRequest {
    lease_proof: String,
}

#[derive(Serialize)]
struct AckView {
    delivery_id: Id,
    state: &'static str,
    already_acked: bool,
}

/// `POST /v1/deliveries/{id}/ack`
pub(crate) async fn ack(
    Extract(app): Extract<App>,
    headers: HeaderMap,
    id: RawId,
    body: RawBody,
) -> Result<Response, ApiError> {
    let grant = app.authenticate(&headers)?;
    grant.require(Scope::EventsConsume)?;
    let id = id.parse()?;
    let request: AckRequest = body.json()?;
    if request.lease_proof.is_empty() {
        return Err(ApiError::invalid_request("lease_proof must not be empty"));
    }
    let mut state = app.lock();
    state.delivery_for(&grant, id)?;
    let acked = state.ack(id, &request.lease_proof)?;
    let already_acked = matches!(acked, Acked::Already);
    if !already_acked {
        tracing::debug!(delivery_id = %id, "delivery acknowledged");
    }
    Ok(json_response(
        StatusCode::OK,
        &AckView {
            delivery_id: id,
            state: DeliveryState::Acked.as_str(),
            already_acked,
        },
    ))
}
