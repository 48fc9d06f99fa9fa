//! Batching mode: deliveries that are waiting share one transaction.
//!
//! Each call still carries one delivery and resolves with its own answer.
//! Inside, a call queues its delivery and a transaction starts at once if
//! fewer than [`Batching::transactions`] are running; it takes every
//! delivery queued by then, up to [`Batching::max_batch`]. Nothing waits
//! for a batch to fill: a delivery alone on an idle inbox is a batch of
//! one. A transaction that ends takes the next deliveries queued meanwhile
//! before it gives up its place, as tower's `Buffer` worker takes the next
//! request.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures::future::BoxFuture;
use sqlx::mysql::MySql;
use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};

use super::batch::{self, Inner, Job};
use super::{InboxError, InboxStore, Receipt};
use crate::db::Engine;
use crate::event::Event;
use crate::scope::InboxScope;
use crate::telemetry;

/// How an inbox in batching mode gathers deliveries (see
/// [`InboxLayer::batching`](super::InboxLayer::batching)).
///
/// ```
/// use result_inbox::inbox::Batching;
/// let batching = Batching::new(16).transactions(4);
/// assert_eq!((batching.max_batch(), batching.max_transactions()), (16, 4));
/// ```
pub struct Batching<E: Engine = MySql> {
    max_batch: usize,
    transactions: usize,
    set: Option<Arc<dyn ApplySet<E>>>,
}

impl<E: Engine> Clone for Batching<E> {
    fn clone(&self) -> Self {
        Self {
            max_batch: self.max_batch,
            transactions: self.transactions,
            set: self.set.clone(),
        }
    }
}

impl Batching<MySql> {
    /// Up to `max_batch` deliveries per transaction (at least 1), in up to
    /// 4 transactions at once.
    pub fn new(max_batch: usize) -> Self {
        Self::up_to(max_batch)
    }
}

impl<E: Engine> Batching<E> {
    /// [`new`](Batching::new) for a store of engine `E`:
    /// `Batching::<sqlx::Postgres>::up_to(16)`.
    pub fn up_to(max_batch: usize) -> Self {
        Self {
            max_batch: max_batch.max(1),
            transactions: 4,
            set: None,
        }
    }

    /// Up to `n` transactions at once (at least 1). With batching, this is
    /// the inbox's concurrency: give the caller room for `n × max_batch`
    /// deliveries in flight, or the batches stay small.
    pub fn transactions(mut self, n: usize) -> Self {
        self.transactions = n.max(1);
        self
    }

    /// Applies a batch of first receipts with `set` instead of calling the
    /// inner service once per delivery, wherever `set` can (see
    /// [`ApplySet`]). It must have exactly the effects of the inner service.
    pub fn set_path(mut self, set: impl ApplySet<E>) -> Self {
        self.set = Some(Arc::new(set));
        self
    }

    /// Most deliveries in one transaction.
    pub fn max_batch(&self) -> usize {
        self.max_batch
    }

    /// Most transactions at once.
    pub fn max_transactions(&self) -> usize {
        self.transactions
    }
}

impl<E: Engine> fmt::Debug for Batching<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Batching")
            .field("max_batch", &self.max_batch)
            .field("transactions", &self.transactions)
            .field("set_path", &self.set.is_some())
            .finish()
    }
}

/// A set-oriented way to apply a batch: a few statements for all of its
/// events instead of a few per event.
///
/// The inbox calls it with the batch's events in order, their inbox rows
/// just inserted (as applied) in the open transaction, every event id
/// distinct. It answers, per event in that order, whether the event
/// advanced the business state: exactly what the inner service would have
/// answered had the events come one at a time in that order. It answers
/// `None` when it cannot say that for this batch (a conflict, a row that
/// another transaction created meanwhile): the inbox then rolls back and
/// calls the inner service once per delivery, as it does for batches with
/// duplicates. An error that rolled the transaction back is retried as the
/// whole batch; any other error also sends the batch one delivery at a
/// time, which finds whose it is.
pub trait ApplySet<E: Engine = MySql>: Send + Sync + 'static {
    /// Applies `events` in the transaction of `conn`; see the trait docs.
    fn apply_set<'a>(
        &'a self,
        conn: &'a mut E::Connection,
        scope: &'a InboxScope,
        events: &'a [&'a Event],
    ) -> BoxFuture<'a, Result<Option<Vec<bool>>, InboxError>>;
}

/// A delivery waiting for a transaction, and where its answer goes.
struct Queued<S> {
    job: Job<S>,
    reply: oneshot::Sender<Result<Receipt, InboxError>>,
}

/// The queue of an inbox in batching mode, shared by all its clones, and
/// the places of its running transactions.
pub(super) struct Gather<S, E: Engine> {
    store: InboxStore<E>,
    batching: Batching<E>,
    queue: Mutex<VecDeque<Queued<S>>>,
    places: Arc<Semaphore>,
}

impl<S, E: Engine> fmt::Debug for Gather<S, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gather")
            .field("batching", &self.batching)
            .field("queued", &self.lock().len())
            .finish_non_exhaustive()
    }
}

impl<S: Inner<E>, E: Engine> Gather<S, E> {
    pub(super) fn new(store: InboxStore<E>, batching: Batching<E>) -> Self {
        let places = Arc::new(Semaphore::new(batching.transactions));
        Self {
            store,
            batching,
            queue: Mutex::new(VecDeque::new()),
            places,
        }
    }

    /// Queues one delivery (validated, polled ready) and waits for the
    /// answer of the transaction that took it.
    pub(super) async fn submit(self: Arc<Self>, job: Job<S>) -> Result<Receipt, InboxError> {
        let (reply, answer) = oneshot::channel();
        self.lock().push_back(Queued { job, reply });
        self.start();
        // Only a transaction that was torn down (a panic, a runtime shutting
        // down) drops the answer; it may have been in its COMMIT.
        answer.await.unwrap_or(Err(InboxError::CommitUnconfirmed))
    }

    /// Starts a transaction for what is queued, while there is a free
    /// place. Called after queueing and after giving up a place, so that
    /// whichever comes second sees both the delivery and the place.
    fn start(self: &Arc<Self>) {
        // A place given up while the runtime itself is going away has no
        // runtime to start anything on; the callers' answers are dropped,
        // which none of them takes for a commit.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        loop {
            if self.lock().is_empty() {
                return;
            }
            let Ok(place) = self.places.clone().try_acquire_owned() else {
                return;
            };
            let batch = self.take();
            if batch.is_empty() {
                continue;
            }
            let place = Place {
                gather: self.clone(),
                permit: Some(place),
            };
            runtime.spawn(place.work(batch));
        }
    }

    /// What is queued, up to a batch, leaving out deliveries whose caller
    /// stopped waiting (they are not ACKed; they come again).
    fn take(&self) -> Vec<Queued<S>> {
        let mut queue = self.lock();
        let mut batch = Vec::new();
        while batch.len() < self.batching.max_batch {
            let Some(queued) = queue.pop_front() else {
                break;
            };
            if !queued.reply.is_closed() {
                batch.push(queued);
            }
        }
        batch
    }
}

impl<S, E: Engine> Gather<S, E> {
    fn lock(&self) -> MutexGuard<'_, VecDeque<Queued<S>>> {
        // Nothing panics while holding it; a poisoned queue is still a queue.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A running transaction's place. Given up when dropped, also by a panic,
/// and then whatever was queued meanwhile is started.
struct Place<S: Inner<E>, E: Engine> {
    gather: Arc<Gather<S, E>>,
    permit: Option<OwnedSemaphorePermit>,
}

impl<S: Inner<E>, E: Engine> Place<S, E> {
    async fn work(self, mut batch: Vec<Queued<S>>) {
        let set = self.gather.batching.set.as_deref();
        while !batch.is_empty() {
            telemetry::batch_size(batch.len());
            let (mut jobs, replies): (Vec<_>, Vec<_>) =
                batch.into_iter().map(|q| (q.job, q.reply)).unzip();
            let answers = batch::run(&self.gather.store, set, &mut jobs).await;
            for (reply, answer) in replies.into_iter().zip(answers) {
                // A caller that stopped waiting is not ACKed; its delivery
                // comes again.
                let _ = reply.send(answer);
            }
            batch = self.gather.take();
        }
    }
}

impl<S: Inner<E>, E: Engine> Drop for Place<S, E> {
    fn drop(&mut self) {
        drop(self.permit.take());
        self.gather.start();
    }
}
