//! `receiver demo`: the whole path once, end to end, against a real Orbit.
//!
//! 1. Create a subscription that selects only `task.cancelled`.
//! 2. Submit a pending task and cancel it.
//! 3. Start the consumer. For the event of *this* task, run the same business
//!    transaction twice: the first advances the view, the second finds the
//!    committed inbox row (duplicate). Events of any other task are refused,
//!    not processed — so the demo needs a dedicated queue.
//! 4. The service returns `Ok`, the consumer ACKs; the demo waits until Orbit
//!    confirms the ACK, reads the view back, and pauses the subscription.
//!
//! On failure nothing is cleaned up: task, subscription, deliveries and rows
//! stay for inspection. On success the subscription is only paused, never
//! deleted.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;
use tower::{Service, ServiceBuilder, ServiceExt};

use crate::check::{self, Problem};
use crate::consumer::{Consumer, ConsumerOptions};
use crate::delivery::{Delivery, DeliveryId};
use crate::event::{Event, EventType};
use crate::ids::{SubscriptionId, TaskId};
use crate::inbox::{Inbox, InboxError, InboxLayer, InboxStore, Outcome};
use crate::orbit::{OrbitClient, OrbitError, Scope};
use crate::task_view::{self, TaskView};
use crate::BoxError;

/// Limits of one demo run.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// The whole demo, start to finish. Default 20 s.
    pub deadline: Duration,
    /// How long the consumer may take to shut down. Default 5 s.
    pub shutdown_grace: Duration,
}

impl Default for DemoOptions {
    fn default() -> Self {
        Self {
            deadline: Duration::from_secs(20),
            shutdown_grace: Duration::from_secs(5),
        }
    }
}

/// What the demo saw, for its two output lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DemoReport {
    /// The task it submitted and cancelled.
    pub task_id: TaskId,
    /// The view's state after the run.
    pub state: String,
    /// Whether the second apply of the event found the committed inbox row.
    pub inbox_duplicate: bool,
    /// How many events advanced the view.
    pub applied_events: u64,
    /// Deliveries of the subscription Orbit counts as acknowledged.
    pub ack_confirmed: u64,
    /// Deliveries of the subscription not yet acknowledged (pending or leased).
    pub pending: u64,
    /// Whether the subscription is still enabled after the demo paused it.
    pub subscription_enabled: bool,
}

impl DemoReport {
    /// The two lines the demo prints.
    pub fn lines(&self) -> [String; 2] {
        [
            format!(
                "task={} state={} inbox_duplicate={} applied_events={}",
                self.task_id, self.state, self.inbox_duplicate, self.applied_events
            ),
            format!(
                "ack_confirmed={} pending={} subscription_enabled={}",
                self.ack_confirmed, self.pending, self.subscription_enabled
            ),
        ]
    }
}

/// Why the demo failed. Everything it created is kept.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DemoError {
    /// A check before the demo created anything failed: the database
    /// (tables, columns, grants) or the token's scopes.
    #[error("{0}")]
    Check(Problem),
    /// Orbit refused or failed a call.
    #[error("Orbit: {0}")]
    Orbit(#[from] OrbitError),
    /// The consumer could not run.
    #[error("consumer: {0}")]
    Consumer(#[from] crate::consumer::ConsumerError),
    /// The inbox failed.
    #[error("inbox: {0}")]
    Inbox(#[from] InboxError),
    /// The database failed while reading the view back.
    #[error("database: {0}")]
    Database(#[from] crate::inbox::DbError),
    /// The demo ran out of time in the named step.
    #[error("demo did not finish within its time limit (while {0})")]
    Timeout(&'static str),
    /// The demo ran out of time waiting for its task's event while the
    /// subscription brought only events of other tasks, which it refused.
    #[error("demo did not finish within its time limit: it refused {refused} delivery(ies) of other tasks on this queue while waiting for its own task's event; run the demo on a dedicated queue")]
    OtherTasksOnly {
        /// Deliveries of other tasks that were refused.
        refused: u64,
    },
    /// A result was not what the inbox guarantees.
    #[error("unexpected result: {0}")]
    Unexpected(String),
}

/// A failed demo: why, and what it had created (kept for inspection).
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct DemoFailure {
    /// Why it failed.
    pub error: DemoError,
    /// What it created before it failed; nothing of it is removed.
    pub kept: Kept,
}

/// What a failed demo created and left in place.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Kept {
    /// The subscription it created, if it got that far.
    pub subscription: Option<SubscriptionId>,
    /// The task it submitted, if it got that far.
    pub task: Option<TaskId>,
}

impl Kept {
    /// Whether the run created anything.
    pub fn is_empty(&self) -> bool {
        self.subscription.is_none() && self.task.is_none()
    }
}

impl std::fmt::Display for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.subscription, &self.task) {
            (None, None) => f.write_str("nothing was created"),
            (Some(s), None) => write!(f, "subscription {s} is kept for inspection"),
            (None, Some(t)) => write!(f, "task {t} is kept for inspection"),
            (Some(s), Some(t)) => write!(
                f,
                "subscription {s}, task {t}, their deliveries and rows are kept for inspection"
            ),
        }
    }
}

/// Runs the demo with a client whose token has the demo scopes
/// (`events:read`, `events:consume`, `events:manage`, `tasks:submit`,
/// `tasks:cancel`) and a store for the receiver's scope.
///
/// Before creating anything it checks the database (tables, columns,
/// grants) and the token's scopes.
pub async fn run(
    client: OrbitClient,
    store: InboxStore,
    options: DemoOptions,
) -> Result<DemoReport, DemoFailure> {
    let mut kept = Kept::default();
    match run_steps(client, store, options, &mut kept).await {
        Ok(report) => Ok(report),
        Err(error) => Err(DemoFailure { error, kept }),
    }
}

async fn run_steps(
    client: OrbitClient,
    store: InboxStore,
    options: DemoOptions,
    kept: &mut Kept,
) -> Result<DemoReport, DemoError> {
    let deadline = Instant::now() + options.deadline;

    within(deadline, "checking the database", check::database(&store))
        .await?
        .map_err(DemoError::Check)?;
    within(
        deadline,
        "checking Orbit",
        check::orbit_access(&client, &Scope::DEMO),
    )
    .await?
    .map_err(DemoError::Check)?;

    let subscription = within(
        deadline,
        "creating the subscription",
        client.create_subscription(&[EventType::Cancelled]),
    )
    .await??;
    kept.subscription = Some(subscription.id.clone());
    let task = within(deadline, "submitting the task", client.submit_task()).await??;
    kept.task = Some(task.id.clone());
    within(
        deadline,
        "cancelling the task",
        client.cancel_task(&task.id),
    )
    .await??;

    let (seen_tx, seen) = oneshot::channel();
    let refused = Arc::new(AtomicU64::new(0));
    let service = OnlyThisTask {
        task: task.id.clone(),
        inbox: ServiceBuilder::new()
            .layer(InboxLayer::new(store.clone()))
            .service(TaskView::new()),
        seen: Arc::new(Mutex::new(Some(seen_tx))),
        refused: refused.clone(),
    };
    let consumer = Consumer::connect(
        client.clone(),
        subscription.id.clone(),
        &store.scope().queue_id,
        ConsumerOptions {
            shutdown_grace: options.shutdown_grace,
            ..ConsumerOptions::default()
        },
    )
    .await?;
    let (stop, stopped) = watch::channel(false);
    let consuming = tokio::spawn(consumer.run(service, async move {
        let mut stopped = stopped;
        let _ = stopped.wait_for(|s| *s).await;
    }));

    let outcome = async {
        let (delivery_id, inbox_duplicate) = within(deadline, "waiting for the task's event", seen)
            .await
            .map_err(|timeout| waited_in_vain(timeout, refused.load(Ordering::Relaxed)))?
            .map_err(|_| {
                DemoError::Unexpected("the consumer stopped before the event came".into())
            })??;
        let counts = loop {
            let delivery = within(
                deadline,
                "waiting for the ACK",
                client.delivery(&delivery_id),
            )
            .await??;
            let sub = within(
                deadline,
                "reading the subscription",
                client.subscription(&subscription.id),
            )
            .await??;
            if delivery.state == "ACKED" && sub.counts.pending + sub.counts.leased == 0 {
                break sub.counts;
            }
            within(
                deadline,
                "waiting for the ACK",
                tokio::time::sleep(Duration::from_millis(50)),
            )
            .await?;
        };
        let view = within(
            deadline,
            "reading the view",
            task_view::load_committed(&store, &task.id),
        )
        .await??
        .ok_or_else(|| DemoError::Unexpected("no task view row after the apply".into()))?;
        Ok::<_, DemoError>((counts, view, inbox_duplicate))
    }
    .await;

    let _ = stop.send(true);
    let stopped = within(deadline, "stopping the consumer", consuming).await?;
    let (counts, view, inbox_duplicate) = outcome?;
    stopped.map_err(|_| DemoError::Unexpected("the consumer task failed".into()))??;

    if view.last_state != "CANCELLED" || view.applied_events != 1 || !inbox_duplicate {
        return Err(DemoError::Unexpected(format!(
            "view state={} applied_events={} inbox_duplicate={inbox_duplicate}",
            view.last_state, view.applied_events
        )));
    }
    let paused = within(
        deadline,
        "pausing the subscription",
        client.pause_subscription(&subscription.id),
    )
    .await??;

    Ok(DemoReport {
        task_id: task.id,
        state: view.last_state,
        inbox_duplicate,
        applied_events: view.applied_events,
        ack_confirmed: counts.acked,
        pending: counts.pending + counts.leased,
        subscription_enabled: paused.enabled,
    })
}

/// The error of a demo that ran out of time waiting for its task's event:
/// when it refused other tasks' deliveries meanwhile, that is the news.
fn waited_in_vain(timeout: DemoError, refused: u64) -> DemoError {
    match refused {
        0 => timeout,
        refused => DemoError::OtherTasksOnly { refused },
    }
}

/// `f`, unless the demo's deadline passes first.
async fn within<F: Future>(
    deadline: Instant,
    step: &'static str,
    f: F,
) -> Result<F::Output, DemoError> {
    tokio::time::timeout_at(deadline, f)
        .await
        .map_err(|_| DemoError::Timeout(step))
}

type Seen = oneshot::Sender<Result<(DeliveryId, bool), DemoError>>;

/// The demo's service: applies the event of its own task twice through the
/// inbox and refuses every other event.
#[derive(Clone)]
struct OnlyThisTask {
    task: TaskId,
    inbox: Inbox<TaskView>,
    seen: Arc<Mutex<Option<Seen>>>,
    /// Deliveries of other tasks refused so far.
    refused: Arc<AtomicU64>,
}

/// An event of another task reached the demo's subscription.
#[derive(Debug, thiserror::Error)]
#[error("event of another task refused by the demo")]
struct OtherTask;

impl Service<Delivery<Bytes>> for OnlyThisTask {
    type Response = ();
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<(), BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, delivery: Delivery<Bytes>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let ours = Event::from_json(delivery.body()).is_ok_and(|e| e.task().id == this.task);
            if !ours {
                this.refused.fetch_add(1, Ordering::Relaxed);
                return Err(OtherTask.into());
            }
            let id = delivery.id().clone();
            let first = this.inbox.clone().oneshot(delivery.clone()).await;
            let second = this.inbox.clone().oneshot(delivery).await;
            let verdict = match (first, second) {
                (Ok(a), Ok(b)) if a.outcome == Outcome::Applied => {
                    Ok((id, b.outcome == Outcome::Duplicate { applied: true }))
                }
                (Ok(a), Ok(_)) => Err(DemoError::Unexpected(format!(
                    "first apply was {:?}, not applied",
                    a.outcome
                ))),
                (Err(e), _) | (_, Err(e)) => Err(DemoError::Inbox(e)),
            };
            let ok = verdict.is_ok();
            if let Some(seen) = this.seen.lock().expect("not poisoned").take() {
                let _ = seen.send(verdict);
            }
            if ok {
                Ok(())
            } else {
                Err("the demo's apply did not go as expected".into())
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_after_refusing_other_tasks_says_so_and_asks_for_a_dedicated_queue() {
        let e = waited_in_vain(DemoError::Timeout("waiting for the task's event"), 3);
        let text = e.to_string();
        assert!(
            text.contains("refused 3 delivery(ies) of other tasks"),
            "{text}"
        );
        assert!(text.contains("dedicated queue"), "{text}");
        let plain = waited_in_vain(DemoError::Timeout("waiting for the task's event"), 0);
        assert!(matches!(plain, DemoError::Timeout(_)));
    }

    #[test]
    fn only_what_was_created_is_said_to_be_kept() {
        assert_eq!(Kept::default().to_string(), "nothing was created");
        let sub = SubscriptionId::parse("0123456789abcdef0123456789abcdef").unwrap();
        let kept = Kept {
            subscription: Some(sub),
            task: None,
        };
        assert!(kept.to_string().ends_with("is kept for inspection"));
    }
}
