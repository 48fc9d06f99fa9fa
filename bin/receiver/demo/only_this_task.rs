//! The demo's service: its own task's event applied twice, every other
//! event refused.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::sync::oneshot;
use tower::{Service, ServiceExt};

use result_inbox::db::Engine;
use result_inbox::delivery::{Delivery, DeliveryId};
use result_inbox::event::Event;
use result_inbox::ids::TaskId;
use result_inbox::inbox::{Inbox, Outcome};
use result_inbox::task_view::TaskView;
use result_inbox::BoxError;

use super::DemoError;

pub(super) type Seen = oneshot::Sender<Result<(DeliveryId, bool), DemoError>>;

/// The demo's service: applies the event of its own task twice through the
/// inbox and refuses every other event.
pub(super) struct OnlyThisTask<E: Engine> {
    pub(super) task: TaskId,
    pub(super) inbox: Inbox<TaskView, E>,
    pub(super) seen: Arc<Mutex<Option<Seen>>>,
    /// Deliveries of other tasks refused so far.
    pub(super) refused: Arc<AtomicU64>,
}

/// An event of another task reached the demo's subscription.
#[derive(Debug, thiserror::Error)]
#[error("event of another task refused by the demo")]
struct OtherTask;

impl<E: Engine> Clone for OnlyThisTask<E> {
    fn clone(&self) -> Self {
        OnlyThisTask {
            task: self.task.clone(),
            inbox: self.inbox.clone(),
            seen: self.seen.clone(),
            refused: self.refused.clone(),
        }
    }
}

impl<E: Engine> Service<Delivery<Bytes>> for OnlyThisTask<E> {
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
