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

mod only_this_task;
mod report;

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{oneshot, watch};
use tokio::time::Instant;
use tower::ServiceBuilder;

use result_inbox::consumer::{Consumer, ConsumerOptions};
use result_inbox::db::Engine;
use result_inbox::event::EventType;
use result_inbox::inbox::{InboxLayer, InboxStore};
use result_inbox::orbit::{OrbitClient, OrbitSource, Scope};
use result_inbox::task_view::{self, TaskView};

use self::only_this_task::OnlyThisTask;
pub use self::report::{DemoError, DemoFailure, DemoReport, Kept};
use crate::check;

/// The whole demo, start to finish.
const DEADLINE: Duration = Duration::from_secs(20);
/// How long the consumer may take to shut down.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Runs the demo with a client whose token has the demo scopes
/// (`events:read`, `events:consume`, `events:manage`, `tasks:submit`,
/// `tasks:cancel`) and a store for the receiver's scope.
///
/// Before creating anything it checks the database (tables, columns,
/// grants) and the token's scopes.
pub async fn run<E: Engine>(
    client: OrbitClient,
    store: InboxStore<E>,
) -> Result<DemoReport, DemoFailure> {
    let mut kept = Kept::default();
    let outcome = run_steps(client, store, &mut kept).await;
    outcome.map_err(|error| DemoFailure { error, kept })
}

async fn run_steps<E: Engine>(
    client: OrbitClient,
    store: InboxStore<E>,
    kept: &mut Kept,
) -> Result<DemoReport, DemoError> {
    let deadline = Instant::now() + DEADLINE;

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
    let source = OrbitSource::connect(
        client.clone(),
        subscription.id.clone(),
        &store.scope().queue_id,
    )
    .await
    .map_err(|e| DemoError::Consumer(e.into()))?;
    let consumer = Consumer::new(
        source,
        ConsumerOptions {
            shutdown_grace: SHUTDOWN_GRACE,
            ..ConsumerOptions::default()
        },
    );
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
}
