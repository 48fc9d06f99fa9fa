//! Reading one event by its id: how an operator sees what an EXPIRED
//! delivery carried, since the stream never sends it again.

use std::sync::Arc;

use axum::extract::State as Extract;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::auth::{Scope, TokenGrant};
use crate::error::ApiError;
use crate::ids::Id;
use crate::state::{App, RawId, State};
use crate::tasks::Event;

impl State {
    /// Keeps an event for `GET /v1/events/{id}`; called once per event,
    /// whether or not any subscription selects it.
    pub(crate) fn record_event(&mut self, event: Arc<Event>) {
        self.events.insert(event.id, event);
    }

    /// The event, if it exists on the token's queue. Another queue's event
    /// is `404 event_not_found` too, not `403 wrong_queue`: event ids are
    /// not bound to a subscription the caller already knows, so the answer
    /// must not tell a stranger that the id exists.
    fn event_for(&self, grant: &TokenGrant, id: Id) -> Result<&Arc<Event>, ApiError> {
        self.events
            .get(&id)
            .filter(|event| grant.require_queue(event.queue_id).is_ok())
            .ok_or_else(ApiError::event_not_found)
    }
}

/// `GET /v1/events/{id}`: the event's bytes exactly as every delivery
/// message splices them in, even when an admin injected text that is not
/// JSON.
pub(crate) async fn get_one(
    Extract(app): Extract<App>,
    headers: HeaderMap,
    id: RawId,
) -> Result<Response, ApiError> {
    let grant = app.authenticate(&headers)?;
    grant.require(Scope::EventsRead)?;
    let id = id.parse()?;
    // A clone of the Arc lets the lock go before the body is copied out.
    let event = app.lock().event_for(&grant, id)?.clone();
    Ok((
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        event.raw.to_string(),
    )
        .into_response())
}
