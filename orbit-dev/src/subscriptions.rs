//! Subscriptions: an event-type filter on one queue, enabled or paused.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::State as Extract;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::auth::{Scope, TokenGrant};
use crate::deliveries::DeliveryState;
use crate::error::ApiError;
use crate::ids::Id;
use crate::state::{json_response, App, RawBody, RawId, State};
use crate::tasks::{Event, EventType};

/// How many subscriptions one namespace may have, paused ones included.
pub const MAX_SUBSCRIPTIONS_PER_NAMESPACE: usize = 64;

pub(crate) struct Subscription {
    pub(crate) id: Id,
    pub(crate) queue_id: Id,
    pub(crate) event_types: Vec<EventType>,
    pub(crate) enabled: bool,
    /// Every delivery ever made for it, oldest first.
    pub(crate) deliveries: Vec<Id>,
    /// Deliveries that may be leased now (state PENDING), by creation order.
    pub(crate) ready: BTreeMap<u64, Id>,
    /// Bumped whenever a delivery may have become leasable; streams watch it.
    pub(crate) wake: watch::Sender<u64>,
}

impl Subscription {
    pub(crate) fn wake(&self) {
        self.wake.send_modify(|n| *n = n.wrapping_add(1));
    }
}

#[derive(Serialize, Default)]
pub(crate) struct Counts {
    pending: usize,
    leased: usize,
    acked: usize,
    expired: usize,
}

#[derive(Serialize)]
pub(crate) struct SubscriptionView {
    id: Id,
    queue_id: Id,
    event_types: Vec<EventType>,
    enabled: bool,
    counts: Counts,
}

impl State {
    /// The subscription, if it exists (404) and is on the token's queue (403).
    pub(crate) fn subscription_for(
        &self,
        grant: &TokenGrant,
        id: Id,
    ) -> Result<&Subscription, ApiError> {
        let subscription = self
            .subscriptions
            .get(&id)
            .ok_or_else(ApiError::subscription_not_found)?;
        grant.require_queue(subscription.queue_id)?;
        Ok(subscription)
    }

    pub(crate) fn subscription_view(&self, id: Id) -> SubscriptionView {
        let subscription = &self.subscriptions[&id];
        let mut counts = Counts::default();
        for delivery_id in &subscription.deliveries {
            match self.deliveries[delivery_id].state {
                DeliveryState::Pending => counts.pending += 1,
                DeliveryState::Leased => counts.leased += 1,
                DeliveryState::Acked => counts.acked += 1,
                DeliveryState::Expired => counts.expired += 1,
            }
        }
        SubscriptionView {
            id: subscription.id,
            queue_id: subscription.queue_id,
            event_types: subscription.event_types.clone(),
            enabled: subscription.enabled,
            counts,
        }
    }

    /// Makes one delivery of `event` for every enabled subscription of the
    /// queue whose filter selects `event_type`.
    pub(crate) fn publish(&mut self, queue_id: Id, event_type: EventType, event: Arc<Event>) {
        let targets: Vec<Id> = self
            .subscriptions_by_queue
            .get(&queue_id)
            .into_iter()
            .flatten()
            .copied()
            .filter(|id| {
                let subscription = &self.subscriptions[id];
                subscription.enabled && subscription.event_types.contains(&event_type)
            })
            .collect();
        for subscription_id in targets {
            self.create_delivery(subscription_id, event.clone());
        }
    }

    fn set_enabled(&mut self, grant: &TokenGrant, id: Id, enabled: bool) -> Result<(), ApiError> {
        self.subscription_for(grant, id)?;
        let subscription = self
            .subscriptions
            .get_mut(&id)
            .ok_or_else(ApiError::subscription_not_found)?;
        if subscription.enabled != enabled {
            subscription.enabled = enabled;
            tracing::info!(subscription_id = %id, enabled, "subscription state changed");
        }
        subscription.wake();
        Ok(())
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateRequest {
    event_types: Vec<EventType>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct EmptyRequest {}

/// `POST /v1/subscriptions`
pub(crate) async fn create(
    Extract(app): Extract<App>,
    headers: HeaderMap,
    body: RawBody,
) -> Result<Response, ApiError> {
    let grant = app.authenticate(&headers)?;
    grant.require(Scope::EventsManage)?;
    let request: CreateRequest = body.json()?;
    if request.event_types.is_empty() {
        return Err(ApiError::invalid_request(
            "event_types must name at least one event type",
        ));
    }
    for (i, event_type) in request.event_types.iter().enumerate() {
        if request.event_types[..i].contains(event_type) {
            return Err(ApiError::invalid_request(format!(
                "event_types names {} twice",
                event_type.as_str()
            )));
        }
    }
    let mut state = app.lock();
    let count = state
        .subscriptions_per_namespace
        .get(&grant.namespace_id)
        .copied()
        .unwrap_or(0);
    if count >= MAX_SUBSCRIPTIONS_PER_NAMESPACE {
        return Err(ApiError::subscription_limit_reached(
            MAX_SUBSCRIPTIONS_PER_NAMESPACE,
        ));
    }
    let id = Id::random();
    let (wake, _) = watch::channel(0);
    state.subscriptions.insert(
        id,
        Subscription {
            id,
            queue_id: grant.queue_id,
            event_types: request.event_types,
            enabled: true,
            deliveries: Vec::new(),
            ready: BTreeMap::new(),
            wake,
        },
    );
    state
        .subscriptions_by_queue
        .entry(grant.queue_id)
        .or_default()
        .push(id);
    *state
        .subscriptions_per_namespace
        .entry(grant.namespace_id)
        .or_default() += 1;
    tracing::info!(subscription_id = %id, queue_id = %grant.queue_id, "subscription created");
    Ok(json_response(
        StatusCode::CREATED,
        &state.subscription_view(id),
    ))
}

#[derive(Serialize)]
struct ListView {
    subscriptions: Vec<SubscriptionView>,
}

/// `GET /v1/subscriptions`
pub(crate) async fn list(
    Extract(app): Extract<App>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let grant = app.authenticate(&headers)?;
    grant.require(Scope::EventsRead)?;
    let state = app.lock();
    let subscriptions = state
        .subscriptions_by_queue
        .get(&grant.queue_id)
        .into_iter()
        .flatten()
        .map(|id| state.subscription_view(*id))
        .collect();
    Ok(json_response(StatusCode::OK, &ListView { subscriptions }))
}

/// `GET /v1/subscriptions/{id}`
pub(crate) async fn get_one(
    Extract(app): Extract<App>,
    headers: HeaderMap,
    id: RawId,
) -> Result<Response, ApiError> {
    let grant = app.authenticate(&headers)?;
    grant.require(Scope::EventsRead)?;
    let id = id.parse()?;
    let state = app.lock();
    state.subscription_for(&grant, id)?;
    Ok(json_response(StatusCode::OK, &state.subscription_view(id)))
}

async fn set_enabled(
    app: App,
    headers: HeaderMap,
    id: RawId,
    body: RawBody,
    enabled: bool,
) -> Result<Response, ApiError> {
    let grant = app.authenticate(&headers)?;
    grant.require(Scope::EventsManage)?;
    let id = id.parse()?;
    let EmptyRequest {} = body.json_or_empty()?;
    let mut state = app.lock();
    state.set_enabled(&grant, id, enabled)?;
    Ok(json_response(StatusCode::OK, &state.subscription_view(id)))
}

/// `POST /v1/subscriptions/{id}/pause`
pub(crate) async fn pause(
    Extract(app): Extract<App>,
    headers: HeaderMap,
    id: RawId,
    body: RawBody,
) -> Result<Response, ApiError> {
    set_enabled(app, headers, id, body, false).await
}

/// `POST /v1/subscriptions/{id}/resume`
pub(crate) async fn resume(
    Extract(app): Extract<App>,
    headers: HeaderMap,
    id: RawId,
    body: RawBody,
) -> Result<Response, ApiError> {
    set_enabled(app, headers, id, body, true).await
}
