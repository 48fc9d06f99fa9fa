//! Admin endpoints: bootstrap, finishing tasks, adding budget, injecting raw
//! events. They take the admin token, never a queue token.

use std::sync::Arc;

use axum::extract::State as Extract;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::auth::{Scope, TokenGrant};
use crate::error::ApiError;
use crate::ids::{random_secret, Id};
use crate::state::{json_response, App, RawBody, RawId};
use crate::tasks::{Event, Outcome};
use crate::trace::TraceContext;

/// Most a single add-budget call may add.
pub const MAX_BUDGET_ADD: u64 = 100;
/// Longest application, namespace, environment or queue name.
pub const MAX_NAME_LEN: usize = 64;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BootstrapRequest {
    application: String,
    namespace: String,
    environment: String,
    queue: String,
    #[serde(default)]
    event_access: bool,
    #[serde(default)]
    scopes: Option<Vec<String>>,
}

#[derive(Serialize)]
struct BootstrapView<'a> {
    token: &'a str,
    queue_id: Id,
    namespace_id: Id,
    application_id: Id,
    namespace: &'a str,
    application: &'a str,
    environment: &'a str,
    queue: &'a str,
    scopes: &'a [Scope],
}

/// Names are 1–64 characters of `A-Z a-z 0-9 . _ -`, starting with a letter or
/// digit.
fn check_name(field: &str, name: &str) -> Result<(), ApiError> {
    let valid = !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if valid {
        Ok(())
    } else {
        Err(ApiError::invalid_request(format!(
            "{field} must be 1 to {MAX_NAME_LEN} characters of A-Z a-z 0-9 . _ -, \
             starting with a letter or digit"
        )))
    }
}

fn requested_scopes(request: &BootstrapRequest) -> Result<Vec<Scope>, ApiError> {
    let Some(names) = &request.scopes else {
        let mut scopes = vec![Scope::TasksSubmit, Scope::TasksCancel];
        if request.event_access {
            scopes.extend([Scope::EventsRead, Scope::EventsConsume, Scope::EventsManage]);
        }
        return Ok(scopes);
    };
    if names.is_empty() {
        return Err(ApiError::invalid_request(
            "scopes must name at least one scope",
        ));
    }
    let mut scopes = Vec::new();
    for name in names {
        let scope = Scope::parse(name)
            .ok_or_else(|| ApiError::invalid_request(format!("unknown scope {name:?}")))?;
        if scopes.contains(&scope) {
            return Err(ApiError::invalid_request(format!(
                "scopes names {name} twice"
            )));
        }
        scopes.push(scope);
    }
    Ok(scopes)
}

/// `POST /v1/admin/bootstrap`
pub(crate) async fn bootstrap(
    Extract(app): Extract<App>,
    headers: HeaderMap,
    body: RawBody,
) -> Result<Response, ApiError> {
    app.authenticate_admin(&headers)?;
    let request: BootstrapRequest = body.json()?;
    check_name("application", &request.application)?;
    check_name("namespace", &request.namespace)?;
    check_name("environment", &request.environment)?;
    check_name("queue", &request.queue)?;
    let scopes = requested_scopes(&request)?;

    let mut state = app.lock();
    let namespace_id = *state
        .namespaces
        .entry(request.namespace.clone())
        .or_insert_with(Id::random);
    let application_id = *state
        .applications
        .entry((namespace_id, request.application.clone()))
        .or_insert_with(Id::random);
    let queue_id = *state
        .queues
        .entry((
            application_id,
            request.environment.clone(),
            request.queue.clone(),
        ))
        .or_insert_with(Id::random);
    let token = random_secret("odt_");
    state.tokens.insert(
        token.clone(),
        TokenGrant {
            queue_id,
            namespace_id,
            scopes: scopes.clone(),
        },
    );
    tracing::info!(queue_id = %queue_id, namespace = %request.namespace, queue = %request.queue, "token issued");
    Ok(json_response(
        StatusCode::CREATED,
        &BootstrapView {
            token: &token,
            queue_id,
            namespace_id,
            application_id,
            namespace: &request.namespace,
            application: &request.application,
            environment: &request.environment,
            queue: &request.queue,
            scopes: &scopes,
        },
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FinishRequest {
    outcome: Outcome,
    #[serde(default)]
    result: Option<Box<RawValue>>,
}

/// `POST /v1/admin/tasks/{id}/finish`
pub(crate) async fn finish(
    Extract(app): Extract<App>,
    headers: HeaderMap,
    id: RawId,
    body: RawBody,
) -> Result<Response, ApiError> {
    app.authenticate_admin(&headers)?;
    let id = id.parse()?;
    let request: FinishRequest = body.json()?;
    let mut state = app.lock();
    let task = state.finish_task(id, request.outcome, request.result)?;
    tracing::debug!(task_id = %id, state = task.state.as_str(), "task finished");
    Ok(task.response(StatusCode::OK))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BudgetRequest {
    add: u64,
}

/// `POST /v1/admin/deliveries/{id}/budget`
pub(crate) async fn add_budget(
    Extract(app): Extract<App>,
    headers: HeaderMap,
    id: RawId,
    body: RawBody,
) -> Result<Response, ApiError> {
    app.authenticate_admin(&headers)?;
    let id = id.parse()?;
    let request: BudgetRequest = body.json()?;
    if !(1..=MAX_BUDGET_ADD).contains(&request.add) {
        return Err(ApiError::invalid_request(format!(
            "add must be an integer from 1 to {MAX_BUDGET_ADD}"
        )));
    }
    let mut state = app.lock();
    let delivery = state.add_budget(id, request.add)?;
    tracing::debug!(delivery_id = %id, budget = delivery.budget, "budget added");
    Ok(json_response(StatusCode::OK, &delivery.view()))
}

#[derive(Serialize)]
struct InjectedView {
    delivery_id: Id,
    event_id: Id,
    subscription_id: Id,
}

/// `POST /v1/admin/subscriptions/{id}/events`: the body, whatever it is (as
/// long as it is UTF-8), becomes the `event` of one new delivery; the
/// request's `traceparent` and `tracestate`, its trace context.
pub(crate) async fn inject_event(
    Extract(app): Extract<App>,
    headers: HeaderMap,
    id: RawId,
    body: RawBody,
) -> Result<Response, ApiError> {
    app.authenticate_admin(&headers)?;
    let id = id.parse()?;
    let bytes = body.bytes()?;
    let raw = std::str::from_utf8(&bytes)
        .map_err(|_| ApiError::invalid_request("the event body must be UTF-8"))?;
    let trace = TraceContext::from_headers(&headers);
    let mut state = app.lock();
    let subscription = state
        .subscriptions
        .get(&id)
        .ok_or_else(ApiError::subscription_not_found)?;
    if !subscription.enabled {
        return Err(ApiError::subscription_paused());
    }
    let event = Arc::new(Event {
        id: Id::random(),
        queue_id: subscription.queue_id,
        task_id: None,
        raw: raw.into(),
        trace,
    });
    let event_id = event.id;
    state.record_event(event.clone());
    let delivery_id = state.create_delivery(id, event);
    tracing::debug!(subscription_id = %id, delivery_id = %delivery_id, "raw event injected");
    Ok(json_response(
        StatusCode::CREATED,
        &InjectedView {
            delivery_id,
            event_id,
            subscription_id: id,
        },
    ))
}
