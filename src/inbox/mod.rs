//! The inbox middleware: deduplicate, apply in the same transaction, commit.
//!
//! [`InboxLayer`] wraps any inner service that takes a
//! [`Delivery<Applying>`](Applying). For each raw [`Delivery<Bytes>`] the
//! resulting [`Inbox`] service
//!
//! 1. canonicalizes and validates the event (nothing is written for a bad one);
//! 2. opens a `READ COMMITTED` transaction and plainly `INSERT`s the inbox
//!    row. Only MySQL error 1062 (duplicate key) leads to the duplicate path:
//!    the committed row is read (the key conflict means it is committed;
//!    `READ COMMITTED` sees it) and the transaction ends; the row's digest
//!    decides between "duplicate" (same content, `Ok`) and a conflict. A racing insert
//!    of the same event waits on the row lock until the winner commits or
//!    rolls back, so an uncommitted row is never taken as success;
//! 3. calls the inner service with the event and the open transaction. The
//!    inner service checks the task version, does its writes and answers with
//!    a [`Verdict`]: advanced or stale. It never commits;
//! 4. records a stale verdict on the inbox row (the row was written as
//!    "applied", the common case, to save a statement) and COMMITs. Only a confirmed
//!    COMMIT yields `Ok`; a COMMIT whose answer was lost is
//!    [`InboxError::CommitUnconfirmed`].
//!
//! The whole sequence has one time budget (5 s by default). The inbox never
//! ACKs: turning `Ok` into an ACK is the consumer's job.
//!
//! # Where a `TimeoutLayer` goes
//!
//! Inside, around the inner service — not outside, around the inbox:
//!
//! ```text
//! ServiceBuilder::new()
//!     .layer(ConcurrencyLimitLayer::new(4))    // outside: fine
//!     .layer(InboxLayer::new(store))           // its own budget: StoreOptions::transaction_timeout
//!     .layer(TimeoutLayer::new(limit))         // inside: a slow business step becomes
//!     .service(my_service)                     //   a handler error, rolled back for certain
//! ```
//!
//! The inbox has its own time budget, and it knows where it is when the
//! budget runs out: before COMMIT it rolls back (`Timeout`), during COMMIT
//! it says so (`CommitUnconfirmed`). An outer timeout knows neither: when it
//! fires during COMMIT, nobody can tell whether the transaction committed.
//! That is still safe — an error is never ACKed, and the redelivery finds
//! the inbox row if there is one (`tests/embedding.rs` shows an outer
//! timeout ending in no ACK and no row) — but it turns a certain outcome
//! into an unknown one. An outer limit must also be longer than the inbox's
//! budget, or it cuts off the deadlock retries the budget leaves room for.
//! [`classify`] names tower's `Elapsed` as class `timeout`.
//!
//! # Permanent refusals
//!
//! An inner service that knows an event will never be applied returns a
//! [`Refusal`]: the inbox rolls back and answers [`InboxError::Refused`],
//! class `refused`, not retryable. It is not ACKed either (only a commit
//! is): the delivery spends its budget and ends `EXPIRED` for an operator.
//!
//! ```no_run
//! use result_inbox::inbox::{Applying, InboxError, InboxLayer, InboxStore, StoreOptions};
//! use result_inbox::delivery::Delivery;
//! use result_inbox::{db::Dsn, scope::{InboxScope, ReceiverName}, ids::QueueId};
//! use tower::{ServiceBuilder, service_fn};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let dsn: Dsn = "mysql://receiver@127.0.0.1:3306/receiver".parse()?;
//! let queue = QueueId::parse("0123456789abcdef0123456789abcdef").unwrap();
//! let store = InboxStore::connect(&dsn, InboxScope::new(ReceiverName::default(), queue), StoreOptions::default()).await?;
//!
//! let service = ServiceBuilder::new()
//!     .layer(InboxLayer::new(store))
//!     .service(service_fn(|mut delivery: Delivery<Applying>| async move {
//!         // Your own version check and business writes, in the inbox's transaction.
//!         let applying = delivery.body_mut();
//!         let version = applying.event().task().version as i64;
//!         sqlx::query("UPDATE orders SET task_version = ? WHERE task_version < ?")
//!             .bind(version)
//!             .bind(version)
//!             .execute(applying.connection())
//!             .await?;
//!         Ok::<_, InboxError>(delivery.into_body().applied())
//!     }));
//! # let _ = service;
//! # Ok(())
//! # }
//! ```

mod batch;
mod batching;
mod error;
pub mod future;
mod layer;
mod ready;
mod shelf;
mod store;
mod tx;

use std::mem;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use sqlx::mysql::MySql;
use tower::Service;

use self::batch::{Inner, Job};
use self::batching::Gather;
pub use self::batching::{ApplySet, Batching};
pub use self::error::{classify, Conflict, InboxError, Refusal};
pub use self::future::ResponseFuture;
pub use self::layer::InboxLayer;
pub use self::ready::Unready;
pub use self::store::{InboxStats, InboxStore, Session, SessionSettings, StoreOptions};
pub(crate) use self::tx::committed_row;
use self::tx::InboxTx;
use crate::db::{DbError, Engine};
use crate::delivery::{Delivery, TraceContext};
use crate::digest::Digest;
use crate::event::Event;
use crate::ids::{EventId, TaskId};
use crate::outbox;
use crate::retry::Backoff;
use crate::scope::InboxScope;
use crate::telemetry;
use crate::BoxError;

/// What became of a delivery whose transaction committed (or had committed
/// before). Every outcome is a success: each of them is ACKed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// First receipt; the view advanced to this event's version.
    Applied,
    /// First receipt of an older version; recorded with `applied = false`,
    /// the view left as it was.
    Stale,
    /// Received and committed before, with the same content. `applied` is
    /// what the original transaction did; nothing happened this time.
    Duplicate {
        /// Whether the original receipt advanced the view.
        applied: bool,
    },
}

impl Outcome {
    /// A stable one-word class for logs: `applied`, `stale` or `duplicate`.
    pub fn class(self) -> &'static str {
        match self {
            Outcome::Applied => "applied",
            Outcome::Stale => "stale",
            Outcome::Duplicate { .. } => "duplicate",
        }
    }
}

/// The answer of the inbox for one delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    /// What happened.
    pub outcome: Outcome,
    /// The event.
    pub event_id: EventId,
    /// The task the event is about.
    pub task_id: TaskId,
    /// The task version the event carries.
    pub task_version: u64,
    /// The digest of the event's canonical form.
    pub digest: Digest,
}

impl Receipt {
    fn new(event: &Event, outcome: Outcome) -> Self {
        Self {
            outcome,
            event_id: event.id().clone(),
            task_id: event.task().id.clone(),
            task_version: event.task().version,
            digest: *event.canonical().digest(),
        }
    }

    /// Whether this delivery was a duplicate of a committed one.
    pub fn is_duplicate(&self) -> bool {
        matches!(self.outcome, Outcome::Duplicate { .. })
    }
}

/// The body the inner service receives: a validated event and the open
/// transaction in which its inbox row was just inserted.
///
/// The inner service does its writes through [`Applying::connection`] and
/// answers with [`Applying::applied`] or [`Applying::stale`], which hand the
/// transaction back. There is deliberately no way to commit from here.
/// Dropping it (by returning an error) rolls everything back.
///
/// # What the transaction survives, and what it cannot
///
/// The lent connection is in sqlx's own transaction, as a
/// [`sqlx::Transaction`] would be: the ordinary habits stay inside it.
/// `connection().begin()` (or [`sqlx::Acquire::begin`]) opens a
/// **savepoint** of the inbox's transaction, not a transaction of its
/// own; that nested transaction's `commit()` only releases the savepoint,
/// and dropping it rolls back to it. Whatever the inner service
/// committed that way is still undone when it then fails: nothing is
/// written until the inbox's COMMIT, after the inner service answered.
///
/// **Nothing can guard a statement that MySQL itself commits**, so the
/// inner service must never send one: a raw `COMMIT` or `ROLLBACK`, a
/// `BEGIN` or `START TRANSACTION` as SQL text (sqlx's `begin()` is safe,
/// the statement is not), DDL (`CREATE`, `ALTER`, `DROP`, `TRUNCATE`),
/// `LOCK TABLES`, or `SET autocommit = 1`. Each of these commits the
/// inbox row before the business writes are known to hold; a later
/// failure can no longer undo it, and the redelivery is taken for a
/// duplicate: the event is lost.
pub struct Applying<E: Engine = MySql> {
    // Shared with the inbox, which keeps it for a retry after a deadlock.
    event: Arc<Event>,
    scope: InboxScope,
    tx: InboxTx<E>,
    /// The delivery's trace context, which recorded effects carry.
    trace: Option<TraceContext>,
    recorded: outbox::Recorded,
}

impl<E: Engine> std::fmt::Debug for Applying<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Applying")
            .field("event", &self.event)
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

impl<E: Engine> Applying<E> {
    /// The validated event.
    pub fn event(&self) -> &Event {
        &self.event
    }

    /// The receiver name and queue this event is applied under.
    pub fn scope(&self) -> &InboxScope {
        &self.scope
    }

    /// The connection of the open transaction, to use as an executor.
    /// `begin()` on it is a savepoint of this transaction; see
    /// [what it cannot guard](Applying#what-the-transaction-survives-and-what-it-cannot).
    pub fn connection(&mut self) -> &mut E::Connection {
        self.tx.connection()
    }

    /// The connection, the scope and the event at once, for business code
    /// that writes (needs the connection) what the event says.
    pub fn split(&mut self) -> (&mut E::Connection, &InboxScope, &Event) {
        (self.tx.connection(), &self.scope, &self.event)
    }

    /// Records effects to be sent after COMMIT, in this transaction: each
    /// [`Recorder::record`](outbox::Recorder::record) writes its row in
    /// `receiver_outbox` at once, so it commits with this delivery or not
    /// at all (see [`outbox`]). Needs the table (`receiver init
    /// --outbox`).
    ///
    /// ```no_run
    /// use result_inbox::delivery::Delivery;
    /// use result_inbox::inbox::{Applying, Verdict};
    ///
    /// async fn notify(mut delivery: Delivery<Applying>) -> Result<Verdict, result_inbox::BoxError> {
    ///     let applying = delivery.body_mut();
    ///     let event = applying.event().id().as_str().to_owned();
    ///     // One effect per event for this target: the event is its key.
    ///     let body = format!("{{\"event\":\"{event}\"}}");
    ///     applying.outbox().record("customer-webhook", &event, body).await?;
    ///     Ok(delivery.into_body().applied())
    /// }
    /// ```
    pub fn outbox(&mut self) -> outbox::Recorder<'_, E> {
        outbox::Recorder::new(
            self.tx.connection(),
            &self.scope,
            self.event.id(),
            self.trace.as_ref(),
            &mut self.recorded,
        )
    }

    /// The event advanced the business state.
    pub fn applied(self) -> Verdict<E> {
        Verdict {
            applying: self,
            advanced: true,
        }
    }

    /// The event is older than what is stored and changed nothing.
    pub fn stale(self) -> Verdict<E> {
        Verdict {
            applying: self,
            advanced: false,
        }
    }
}

/// The inner service's answer: whether the event advanced the business
/// state, together with the transaction, which goes back to the inbox to be
/// committed.
#[derive(Debug)]
pub struct Verdict<E: Engine = MySql> {
    applying: Applying<E>,
    advanced: bool,
}

impl<E: Engine> Verdict<E> {
    /// Whether the event advanced the business state.
    pub fn is_applied(&self) -> bool {
        self.advanced
    }
}

/// The service made by [`InboxLayer`]. See the [module docs](self).
#[derive(Debug)]
pub struct Inbox<S, E: Engine = MySql> {
    inner: S,
    store: InboxStore<E>,
    /// In batching mode, the queue every clone shares.
    gather: Option<Arc<Gather<S, E>>>,
}

impl<S: Clone, E: Engine> Clone for Inbox<S, E> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            store: self.store.clone(),
            gather: self.gather.clone(),
        }
    }
}

impl<S, E: Engine> Inbox<S, E> {
    /// Wraps `inner`; each delivery is one transaction on `store`.
    pub fn new(inner: S, store: InboxStore<E>) -> Self {
        telemetry::start_deliveries();
        Self {
            inner,
            store,
            gather: None,
        }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Gives up the middleware for the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }

    /// The store the transactions run on.
    pub fn store(&self) -> &InboxStore<E> {
        &self.store
    }
}

impl<S, E: Engine> Inbox<S, E>
where
    S: Service<Delivery<Applying<E>>, Response = Verdict<E>> + Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send,
{
    /// Wraps `inner` in batching mode: deliveries that are waiting share a
    /// transaction on `store` (see [`Batching`]).
    pub fn batched(inner: S, store: InboxStore<E>, batching: Batching<E>) -> Self {
        telemetry::start_deliveries();
        let gather = Arc::new(Gather::new(store.clone(), batching));
        Self {
            inner,
            store,
            gather: Some(gather),
        }
    }
}

impl<S, E: Engine> Service<Delivery<Bytes>> for Inbox<S, E>
where
    S: Service<Delivery<Applying<E>>, Response = Verdict<E>> + Clone + Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = Receipt;
    type Error = InboxError;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), InboxError>> {
        self.inner
            .poll_ready(cx)
            .map_err(|e| InboxError::from_inner(e.into()))
    }

    fn call(&mut self, delivery: Delivery<Bytes>) -> ResponseFuture {
        // The clone that was polled ready is the one that is called.
        let clone = self.inner.clone();
        let inner = mem::replace(&mut self.inner, clone);
        let gather = self.gather.clone();
        ResponseFuture::new(Box::pin(apply(self.store.clone(), gather, inner, delivery)))
    }
}

/// Applies one delivery and reports it: one log line per delivery, with a
/// stable class (`applied`, `duplicate`, `stale`, `conflict`, `rejected`,
/// `unconfirmed`, `error`) and the event id when the event could be read,
/// and the same class in the metrics (see [`crate::telemetry`]).
async fn apply<S: Inner<E>, E: Engine>(
    store: InboxStore<E>,
    gather: Option<Arc<Gather<S, E>>>,
    inner: S,
    delivery: Delivery<Bytes>,
) -> Result<Receipt, InboxError> {
    let started = std::time::Instant::now();
    let delivery_id = delivery.id().clone();
    let attempt = delivery.attempt();
    let event = match Event::from_json(delivery.body()) {
        Ok(event) => event,
        Err(e) => {
            let e = InboxError::from(e);
            // The id of an event that is otherwise invalid still tells an
            // operator which one it was.
            let id = crate::event::readable_id(delivery.body());
            let event = id.as_ref().map_or("-", |id| id.as_str());
            tracing::Span::current().record("outcome", e.class());
            tracing::warn!(class = e.class(), delivery = %delivery_id, attempt, event = %event, error = %e, "delivery");
            telemetry::delivery(e.class(), started.elapsed());
            return Err(e);
        }
    };
    let event_id = event.id().clone();
    let occurred_at = crate::digest::unix_seconds(event.occurred_at());
    // The delivery's span (the consumer's, when the inbox runs under one)
    // learns what only the inbox knows: the event. The receiver name it has
    // from its start, through the consumer's probe (the store): recorded
    // again here, it would be a second attribute of the same name.
    let span = tracing::Span::current();
    span.record("messaging.message.id", event_id.as_str());
    let answer = match event.check_queue(&store.scope().queue_id) {
        Err(e) => Err(e.into()),
        Ok(()) => {
            let job = Job {
                inner,
                delivery,
                event: Arc::new(event),
                span: span.clone(),
            };
            match gather {
                Some(gather) => gather.submit(job).await,
                None => batch::alone(&store, job).await,
            }
        }
    };
    // Whether the database answered: a COMMIT whose answer was lost or never
    // came counts as no answer, and until a probe sees it answer nothing
    // more is started on it.
    match &answer {
        Ok(_) => store.mark_reachable(),
        Err(e) if e.is_unavailable() || matches!(e, InboxError::CommitUnconfirmed) => {
            store.mark_unreachable();
        }
        Err(_) => {}
    }
    match &answer {
        Ok(receipt) => {
            span.record("outcome", receipt.outcome.class());
            tracing::info!(class = receipt.outcome.class(), delivery = %delivery_id, attempt, event = %event_id, "delivery");
            telemetry::delivery(receipt.outcome.class(), started.elapsed());
            // The answer comes right after the COMMIT that applied it.
            if let (Outcome::Applied, Some(occurred_at)) = (receipt.outcome, occurred_at) {
                telemetry::event_age(occurred_at);
            }
        }
        Err(e) => {
            span.record("outcome", e.class());
            tracing::warn!(class = e.class(), delivery = %delivery_id, attempt, event = %event_id, error = %e, "delivery");
            telemetry::delivery(e.class(), started.elapsed());
        }
    }
    answer
}

/// Whether a transaction that was rolled back is run again, and after
/// what pause; counts the retry.
///
/// A deadlock, a lost certification or a lock wait is run again after the
/// next wait of `backoff`, which grows with each retry (see
/// [`retry_backoff`]): a rollback that comes back at once (a rival that
/// keeps the locks, an inner service whose own statement always meets one)
/// spends the budget on a few attempts, not on one every few milliseconds.
///
/// A connection that broke is run again once, and only by the first
/// transaction to meet one since the database last answered (a pooled
/// connection the server had dropped explains one); after that the
/// database counts as unreachable: the delivery fails now, unacknowledged,
/// and the consumer's breaker and its probe take over, instead of every
/// delivery retrying until its budget is gone.
fn retry_pause<E: Engine>(
    store: &InboxStore<E>,
    e: &DbError,
    retried_connection: &mut bool,
    backoff: &mut Backoff,
) -> Option<std::time::Duration> {
    let pause = if e.is_unavailable() {
        let first = store.mark_unreachable();
        if *retried_connection || !first {
            return None;
        }
        *retried_connection = true;
        CONNECTION_RETRY_PAUSE
    } else {
        backoff.next()
    };
    store.record_retry(e.kind());
    Some(pause)
}

/// The waits between the runs of one rolled-back transaction: from 20 ms,
/// so that a one-off deadlock costs the delivery little, doubling (with up
/// to 50 % jitter, so that the two sides of a deadlock do not meet again in
/// step) up to 1 s; a 5 s budget holds about ten runs.
fn retry_backoff() -> Backoff {
    Backoff::new(RETRY_PAUSE, RETRY_PAUSE_MAX)
}

/// The answer to a copy of an event whose inbox row exists: a duplicate
/// when the stored digest is the copy's, otherwise a conflict.
pub(crate) fn found(event: &Event, stored: Digest, applied: bool) -> Result<Outcome, InboxError> {
    let incoming = *event.canonical().digest();
    if stored == incoming {
        Ok(Outcome::Duplicate { applied })
    } else {
        Err(InboxError::Conflict(Conflict::ContentMismatch {
            event_id: event.id().clone(),
            stored,
            incoming,
        }))
    }
}

/// The first pause before running a rolled-back transaction again, so
/// that the transaction that won the lock can finish.
const RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(20);

/// The longest pause between two runs of a rolled-back transaction.
const RETRY_PAUSE_MAX: std::time::Duration = std::time::Duration::from_secs(1);

/// Pause before running a transaction again whose connection broke: long
/// enough for a pool to hand out a fresh connection, short against a lease.
const CONNECTION_RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(50);
