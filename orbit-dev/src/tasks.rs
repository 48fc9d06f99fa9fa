//! Tasks, their states and versions, and the events their transitions emit.

use std::sync::Arc;
use std::time::SystemTime;

use axum::extract::State as Extract;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;

use crate::auth::{Scope, TokenGrant};
use crate::error::ApiError;
use crate::ids::{rfc3339, Id};
use crate::state::{json_response, App, RawBody, RawId, State};
use crate::trace::TraceContext;

/// A task's state.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum TaskState {
    /// Submitted, not finished.
    Pending,
    /// Finished successfully.
    Succeeded,
    /// Finished with a failure.
    Failed,
    /// Cancelled by a client.
    Cancelled,
    /// Finished, but a person must review it; not a success.
    NeedsReview,
}

impl TaskState {
    /// The wire name, e.g. `NEEDS_REVIEW`.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Pending => "PENDING",
            TaskState::Succeeded => "SUCCEEDED",
            TaskState::Failed => "FAILED",
            TaskState::Cancelled => "CANCELLED",
            TaskState::NeedsReview => "NEEDS_REVIEW",
        }
    }

    /// The event type a transition into this state emits.
    pub fn event_type(self) -> EventType {
        match self {
            TaskState::Pending => EventType::Submitted,
            TaskState::Succeeded => EventType::Succeeded,
            TaskState::Failed => EventType::Failed,
            TaskState::Cancelled => EventType::Cancelled,
            TaskState::NeedsReview => EventType::NeedsReview,
        }
    }

    /// Whether a task may still be cancelled or finished.
    fn is_open(self) -> bool {
        matches!(self, TaskState::Pending | TaskState::NeedsReview)
    }
}

/// The five task event types.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum EventType {
    /// `task.submitted`
    Submitted,
    /// `task.succeeded`
    Succeeded,
    /// `task.failed`
    Failed,
    /// `task.cancelled`
    Cancelled,
    /// `task.needs_review`
    NeedsReview,
}

impl EventType {
    /// Every event type.
    pub const ALL: [EventType; 5] = [
        EventType::Submitted,
        EventType::Succeeded,
        EventType::Failed,
        EventType::Cancelled,
        EventType::NeedsReview,
    ];

    /// The wire name, e.g. `task.succeeded`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Submitted => "task.submitted",
            EventType::Succeeded => "task.succeeded",
            EventType::Failed => "task.failed",
            EventType::Cancelled => "task.cancelled",
            EventType::NeedsReview => "task.needs_review",
        }
    }

    /// The event type with that wire name.
    pub fn parse(name: &str) -> Option<EventType> {
        EventType::ALL.into_iter().find(|t| t.as_str() == name)
    }
}

impl Serialize for EventType {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for EventType {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        EventType::parse(&name).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "unknown event type {name:?}, expected one of task.submitted, task.succeeded, \
                 task.failed, task.cancelled, task.needs_review"
            ))
        })
    }
}

pub(crate) struct Task {
    pub(crate) id: Id,
    pub(crate) queue_id: Id,
    pub(crate) version: u64,
    pub(crate) state: TaskState,
    pub(crate) input: Option<Box<RawValue>>,
    /// The result given with the finish that set the current state.
    pub(crate) result: Option<Box<RawValue>>,
    pub(crate) created_at: SystemTime,
    pub(crate) updated_at: SystemTime,
    /// The trace context of the request that submitted it, which every
    /// event of the task carries beside it, whoever made the transition.
    pub(crate) trace: Option<TraceContext>,
}

/// One event as delivered: its exact bytes, plus what inspection shows.
pub(crate) struct Event {
    pub(crate) id: Id,
    /// The task's queue; for an injected event, its subscription's queue
    /// (whatever the body says), so that `GET /v1/events/{id}` shows it to
    /// the tokens that could have received it.
    pub(crate) queue_id: Id,
    /// `None` for events injected by an admin.
    pub(crate) task_id: Option<Id>,
    pub(crate) raw: Box<str>,
    /// Sent beside `raw` in every delivery message of the event.
    pub(crate) trace: Option<TraceContext>,
}

#[derive(Serialize)]
struct TaskView<'a> {
    id: Id,
    queue_id: Id,
    version: u64,
    state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    input: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a RawValue>,
    created_at: String,
    updated_at: String,
}

impl Task {
    pub(crate) fn response(&self, status: StatusCode) -> Response {
        json_response(
            status,
            &TaskView {
                id: self.id,
                queue_id: self.queue_id,
                version: self.version,
                state: self.state.as_str(),
                input: self.input.as_deref(),
                result: self.result.as_deref(),
                created_at: rfc3339(self.created_at),
                updated_at: rfc3339(self.updated_at),
            },
        )
    }
}

#[derive(Serialize)]
struct Envelope<'a> {
    id: Id,
    #[serde(rename = "type")]
    event_type: &'static str,
    queue_id: Id,
    occurred_at: String,
    task: EnvelopeTask<'a>,
}

#[derive(Serialize)]
struct EnvelopeTask<'a> {
    id: Id,
    version: u64,
    state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a RawValue>,
}

/// How an admin finishes a task.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Outcome {
    Succeeded,
    Failed,
    NeedsReview,
}

impl Outcome {
    fn state(self) -> TaskState {
        match self {
            Outcome::Succeeded => TaskState::Succeeded,
            Outcome::Failed => TaskState::Failed,
            Outcome::NeedsReview => TaskState::NeedsReview,
        }
    }
}

impl State {
    fn task_mut(&mut self, id: Id) -> Result<&mut Task, ApiError> {
        self.tasks.get_mut(&id).ok_or_else(ApiError::task_not_found)
    }

    /// Records the task's current state as an event and fans it out.
    fn emit_task_event(&mut self, task_id: Id) {
        let Some(task) = self.tasks.get(&task_id) else {
            return;
        };
        let event_type = task.state.event_type();
        let envelope = Envelope {
            id: Id::random(),
            event_type: event_type.as_str(),
            queue_id: task.queue_id,
            occurred_at: rfc3339(task.updated_at),
            task: EnvelopeTask {
                id: task.id,
                version: task.version,
                state: task.state.as_str(),
                result: task.result.as_deref(),
            },
        };
        let raw = match serde_json::to_string(&envelope) {
            Ok(raw) => raw.into_boxed_str(),
            Err(_) => return,
        };
        let queue_id = task.queue_id;
        let event = Arc::new(Event {
            id: envelope.id,
            queue_id,
            task_id: Some(task_id),
            raw,
            trace: task.trace.clone(),
        });
        self.record_event(event.clone());
        self.publish(queue_id, event_type, event);
    }

    /// Moves an open task to `to`: version + 1, one event.
    fn transition(
        &mut self,
        id: Id,
        to: TaskState,
        result: Option<Box<RawValue>>,
    ) -> Result<&Task, ApiError> {
        let task = self.task_mut(id)?;
        if !task.state.is_open() {
            return Err(ApiError::invalid_transition(
                task.state.as_str(),
                to.as_str(),
            ));
        }
        task.state = to;
        task.version += 1;
        task.result = result;
        task.updated_at = SystemTime::now();
        self.emit_task_event(id);
        Ok(&self.tasks[&id])
    }

    pub(crate) fn finish_task(
        &mut self,
        id: Id,
        outcome: Outcome,
        result: Option<Box<RawValue>>,
    ) -> Result<&Task, ApiError> {
        self.transition(id, outcome.state(), result)
    }
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct SubmitRequest {
    #[serde(default)]
    input: Option<Box<RawValue>>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CancelRequest {}

/// `POST /v1/tasks`: its `traceparent` and `tracestate` headers become the
/// trace context of the task's events.
pub(crate) async fn submit(
    Extract(app): Extract<App>,
    headers: HeaderMap,
    body: RawBody,
) -> Result<Response, ApiError> {
    let grant: TokenGrant = app.authenticate(&headers)?;
    grant.require(Scope::TasksSubmit)?;
    let request: SubmitRequest = body.json_or_empty()?;
    let trace = TraceContext::from_headers(&headers);
    let mut state = app.lock();
    let now = SystemTime::now();
    let id = Id::random();
    state.tasks.insert(
        id,
        Task {
            id,
            queue_id: grant.queue_id,
            version: 1,
            state: TaskState::Pending,
            input: request.input,
            result: None,
            created_at: now,
            updated_at: now,
            trace,
        },
    );
    state.emit_task_event(id);
    tracing::debug!(task_id = %id, "task submitted");
    let mut response = state.tasks[&id].response(StatusCode::CREATED);
    if let Ok(location) = HeaderValue::from_str(&format!("/v1/tasks/{id}")) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

/// `GET /v1/tasks/{id}`
pub(crate) async fn get_task(
    Extract(app): Extract<App>,
    headers: HeaderMap,
    id: RawId,
) -> Result<Response, ApiError> {
    let grant = app.authenticate(&headers)?;
    grant.require_any(&[Scope::TasksSubmit, Scope::EventsRead])?;
    let id = id.parse()?;
    let mut state = app.lock();
    let task = state.task_mut(id)?;
    grant.require_queue(task.queue_id)?;
    Ok(task.response(StatusCode::OK))
}

/// `POST /v1/tasks/{id}/cancel`
pub(crate) async fn cancel(
    Extract(app): Extract<App>,
    headers: HeaderMap,
    id: RawId,
    body: RawBody,
) -> Result<Response, ApiError> {
    let grant = app.authenticate(&headers)?;
    grant.require(Scope::TasksCancel)?;
    let id = id.parse()?;
    let CancelRequest {} = body.json_or_empty()?;
    let mut state = app.lock();
    grant.require_queue(state.task_mut(id)?.queue_id)?;
    let task = state.transition(id, TaskState::Cancelled, None)?;
    tracing::debug!(task_id = %id, "task cancelled");
    Ok(task.response(StatusCode::OK))
}
