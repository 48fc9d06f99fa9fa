//! One batch's transaction: every delivery's inbox row and business writes,
//! one COMMIT, an answer per delivery.
//!
//! The outcomes are those of applying the deliveries one at a time in
//! their order. Each delivery runs behind a savepoint (none is needed for
//! the first that writes: undoing it is undoing the transaction), so a
//! failed one — a conflict, a refusal, an inner error — is rolled back
//! alone and its siblings commit. A copy of an event that an earlier
//! delivery of the batch inserted meets that row as a duplicate key, as
//! it would meet the committed row one by one. An error that rolled the
//! whole transaction back (a deadlock, a certification failure, a lock
//! wait, a broken connection) runs the batch again inside its time budget;
//! a COMMIT without an answer leaves every delivery of the batch
//! unconfirmed. Nothing is answered before the COMMIT.
//!
//! With a set path ([`ApplySet`]) and distinct event ids, a batch first
//! tries a few statements for all of it: one multi-row inbox `INSERT`, the
//! set path's statements, at most one `UPDATE` for the stale ones. A
//! duplicate key or a batch the set path declines is rolled back and taken
//! one delivery at a time.

use std::sync::Arc;

use bytes::Bytes;
use tokio::time::{timeout_at, Instant};
use tower::{Service, ServiceExt};
use tracing::{field, Instrument, Span};

use super::batching::ApplySet;
use super::store::mark_stale_all;
use super::tx::{InboxTx, Row};
use super::{
    error, found, retry_backoff, retry_pause, Applying, InboxError, InboxStore, Outcome, Receipt,
    Verdict,
};
use crate::db::{DbError, Engine};
use crate::delivery::Delivery;
use crate::event::Event;
use crate::BoxError;

/// An inner service a batch calls: a per-delivery service whose errors
/// the inbox can read, runnable on a spawned transaction.
pub(super) trait Inner<E: Engine>:
    Service<Delivery<Applying<E>>, Response = Verdict<E>, Error: Into<BoxError>, Future: Send>
    + Send
    + 'static
{
}

impl<S, E: Engine> Inner<E> for S
where
    S: Service<Delivery<Applying<E>>, Response = Verdict<E>> + Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send,
{
}

/// One delivery of a batch: validated, its inner service polled ready.
pub(super) struct Job<S> {
    pub(super) inner: S,
    pub(super) delivery: Delivery<Bytes>,
    pub(super) event: Arc<Event>,
    /// The span the delivery is handled in (the consumer's, when there is
    /// one): a batch's shared transaction and each of its deliveries are
    /// linked both ways.
    pub(super) span: Span,
}

/// A failure of the whole batch: every delivery gets it.
#[derive(Debug, Clone)]
enum Whole {
    Database(DbError),
    Timeout,
    Unconfirmed,
}

impl Whole {
    /// As a span's `error.type`.
    fn kind(&self) -> &'static str {
        match self {
            Whole::Database(e) if e.is_rolled_back() => "rolled_back",
            Whole::Database(_) => "database",
            Whole::Timeout => "timeout",
            Whole::Unconfirmed => "unconfirmed",
        }
    }
}

impl From<sqlx::Error> for Whole {
    fn from(e: sqlx::Error) -> Self {
        Whole::Database(DbError::from(e))
    }
}

impl From<Whole> for InboxError {
    fn from(whole: Whole) -> Self {
        match whole {
            Whole::Database(e) => InboxError::Database(e),
            Whole::Timeout => InboxError::Timeout,
            Whole::Unconfirmed => InboxError::CommitUnconfirmed,
        }
    }
}

/// Per delivery: what the COMMIT makes durable, or its final failure.
type Fates = Vec<Result<Outcome, InboxError>>;

/// Above this many bytes of events a batch goes one delivery at a time: a
/// multi-row statement must fit the server's `max_allowed_packet` (16 MiB
/// by default on MariaDB, 64 MiB on MySQL).
const SET_BYTES: usize = 4 << 20;

/// Runs the batch's transaction, again while its budget lasts if it was
/// rolled back, and answers every delivery in order. A batch of one is the
/// default mode's transaction.
pub(super) async fn run<S: Inner<E>, E: Engine>(
    store: &InboxStore<E>,
    set: Option<&dyn ApplySet<E>>,
    jobs: &mut [Job<S>],
) -> Vec<Result<Receipt, InboxError>> {
    // The batch's transaction belongs to no delivery's trace alone: a span
    // of its own, linked to each delivery's and each linked to it.
    let span = tracing::info_span!(
        parent: None,
        "inbox transaction",
        deliveries = jobs.len(),
        retries = field::Empty,
        cause = field::Empty,
        error.type = field::Empty,
        otel.status_code = field::Empty,
    );
    for job in jobs.iter() {
        span.follows_from(&job.span);
        job.span.follows_from(&span);
    }
    let fates = settle(store, set, jobs).instrument(span).await;
    jobs.iter()
        .zip(fates)
        .map(|(job, fate)| fate.map(|outcome| Receipt::new(&job.event, outcome)))
        .collect()
}

/// The default mode's transaction: a batch of one, without the set path.
pub(super) async fn alone<S: Inner<E>, E: Engine>(
    store: &InboxStore<E>,
    job: Job<S>,
) -> Result<Receipt, InboxError> {
    let mut jobs = [job];
    let span = tracing::info_span!(
        "inbox transaction",
        deliveries = 1,
        retries = field::Empty,
        cause = field::Empty,
        error.type = field::Empty,
        otel.status_code = field::Empty,
    );
    let fate = settle(store, None, &mut jobs).instrument(span).await.pop();
    let [job] = jobs;
    let fate = fate.expect("a batch has a fate per delivery");
    fate.map(|outcome| Receipt::new(&job.event, outcome))
}

async fn settle<S: Inner<E>, E: Engine>(
    store: &InboxStore<E>,
    set: Option<&dyn ApplySet<E>>,
    jobs: &mut [Job<S>],
) -> Fates {
    let deadline = Instant::now() + store.transaction_timeout();
    let mut retried_connection = false;
    let mut backoff = retry_backoff();
    let mut fresh = true;
    let mut retries = 0u32;
    // The rollback the last retry answered: when the budget runs out in
    // the retry, it is what the delivery failed of, not the time.
    let mut last: Option<DbError> = None;
    // The first attempt runs in the transaction's span; each retry has a
    // span of its own that names the rollback it answers.
    let mut retry: Option<Span> = None;
    loop {
        let attempt = attempt(store, set, jobs, fresh, deadline);
        let attempt = match &retry {
            Some(span) => attempt.instrument(span.clone()).await,
            None => attempt.await,
        };
        fresh = false;
        let whole = match attempt {
            Ok(fates) => {
                Span::current().record("retries", retries);
                return fates;
            }
            Err(whole) => whole,
        };
        if let Some(span) = &retry {
            failed(span, &whole);
        }
        if let Whole::Database(e) = &whole {
            if e.is_rolled_back() {
                if let Some(pause) = retry_pause(store, e, &mut retried_connection, &mut backoff) {
                    let event = jobs.first().map(|j| j.event.id().clone());
                    tracing::info!(
                        target: "result_inbox::inbox",
                        event = %event.as_ref().map_or("-", |id| id.as_str()),
                        deliveries = jobs.len(),
                        retry = retries + 1,
                        retry_in_ms = pause.as_millis() as u64,
                        cause = %e,
                        "transaction rolled back; retrying"
                    );
                    if timeout_at(deadline, tokio::time::sleep(pause))
                        .await
                        .is_ok()
                    {
                        retries += 1;
                        retry = Some(tracing::info_span!(
                            "transaction retry",
                            retry = retries,
                            cause = %e,
                            error.type = field::Empty,
                            otel.status_code = field::Empty,
                        ));
                        last = Some(e.clone());
                        continue;
                    }
                }
            }
        }
        // A retry the budget cut short was rolled back for certain: it
        // failed of the rollback that made it (and of the inner service's
        // error behind that), which an operator can act on, where "timed
        // out" would name neither. A COMMIT without an answer stays
        // unconfirmed.
        let transaction = Span::current();
        transaction.record("retries", retries);
        failed(&transaction, &whole);
        let answer = match (whole, last) {
            (Whole::Timeout, Some(cause)) => Whole::Database(cause),
            (whole, _) => whole,
        };
        if let Whole::Database(e) = &answer {
            transaction.record("cause", field::display(e));
        }
        return jobs.iter().map(|_| Err(answer.clone().into())).collect();
    }
}

/// Marks the span of a transaction, or of one of its retries, as failed.
fn failed(span: &Span, whole: &Whole) {
    span.record("error.type", whole.kind());
    span.record("otel.status_code", "ERROR");
}

/// One run of the batch's transaction, up to the end of its COMMIT.
async fn attempt<S: Inner<E>, E: Engine>(
    store: &InboxStore<E>,
    set: Option<&dyn ApplySet<E>>,
    jobs: &mut [Job<S>],
    fresh: bool,
    deadline: Instant,
) -> Result<Fates, Whole> {
    // Waiting for a connection is told apart from waiting inside the
    // transaction: only the first says the database cannot be reached. A
    // retry that the budget ends while it waits for one is a retry the
    // budget cut short, answered with the rollback that made it.
    let mut tx = match timeout_at(deadline, InboxTx::acquire(store.shelf())).await {
        Err(_elapsed) if !fresh => return Err(Whole::Timeout),
        Err(_elapsed) => return Err(Whole::Database(DbError::pool_timeout())),
        Ok(tx) => tx?,
    };
    let written = timeout_at(deadline, async {
        if let Some(set) = set.filter(|_| suits_set(jobs)) {
            let events: Vec<&Event> = jobs.iter().map(|j| &*j.event).collect();
            if let Some(fates) = as_set(store, set, &mut tx, &events).await? {
                return Ok((tx, fates, true));
            }
        }
        one_by_one(store, tx, jobs, fresh).await
    })
    .await
    .map_err(|_elapsed| Whole::Timeout)?;
    let (tx, fates, wrote) = written?;
    if !wrote {
        // Only duplicates and failures: nothing to commit. A rollback that
        // goes wrong closes the connection, which changes no answer.
        let _ = tx.rollback().await;
        return Ok(fates);
    }
    match timeout_at(deadline, tx.commit()).await {
        Err(_elapsed) => Err(Whole::Unconfirmed),
        Ok(Err(e)) => match error::commit_error(e) {
            InboxError::Database(e) => Err(Whole::Database(e)),
            _ => Err(Whole::Unconfirmed),
        },
        Ok(Ok(())) => Ok(fates),
    }
}

/// A batch the set path may try: more than one delivery, no event twice,
/// not too large for one statement.
fn suits_set<S>(jobs: &[Job<S>]) -> bool {
    if jobs.len() < 2 {
        return false;
    }
    let bytes: usize = jobs
        .iter()
        .map(|j| j.event.canonical().as_str().len())
        .sum();
    let mut ids: Vec<&str> = jobs.iter().map(|j| j.event.id().as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    bytes <= SET_BYTES && ids.len() == jobs.len()
}

/// The batch in a few statements, or `None` (rolled back) where it has to
/// go one delivery at a time.
async fn as_set<E: Engine>(
    store: &InboxStore<E>,
    set: &dyn ApplySet<E>,
    tx: &mut InboxTx<E>,
    events: &[&Event],
) -> Result<Option<Fates>, Whole> {
    let scope = store.scope();
    match tx.insert_all(scope, events).await {
        Ok(true) => {}
        Ok(false) => return decline(tx).await,
        Err(e) => return rolled_back_or_declined(tx, DbError::from(e)).await,
    }
    let advanced = match set.apply_set(tx.connection(), scope, events).await {
        Ok(Some(advanced)) if advanced.len() == events.len() => advanced,
        Err(InboxError::Database(e)) => return rolled_back_or_declined(tx, e).await,
        Ok(_) | Err(_) => return decline(tx).await,
    };
    let stale: Vec<&Event> = events
        .iter()
        .zip(&advanced)
        .filter(|(_, advanced)| !**advanced)
        .map(|(event, _)| *event)
        .collect();
    if !stale.is_empty() {
        mark_stale_all::<E>(tx.connection(), scope, &stale).await?;
    }
    Ok(Some(
        advanced
            .into_iter()
            .map(|a| Ok(if a { Outcome::Applied } else { Outcome::Stale }))
            .collect(),
    ))
}

/// An error of the set path's statements: the whole batch again if it was
/// rolled back, otherwise the batch one delivery at a time, which finds
/// whose error it is.
async fn rolled_back_or_declined<E: Engine>(
    tx: &mut InboxTx<E>,
    e: DbError,
) -> Result<Option<Fates>, Whole> {
    if e.is_rolled_back() {
        return Err(Whole::Database(e));
    }
    decline(tx).await
}

/// Undoes what the set path wrote, for the batch to go one delivery at a
/// time.
async fn decline<E: Engine>(tx: &mut InboxTx<E>) -> Result<Option<Fates>, Whole> {
    tx.rollback_all().await?;
    Ok(None)
}

/// Each delivery behind its own savepoint. Returns the transaction, the
/// fates, and whether anything was written that the COMMIT must keep.
async fn one_by_one<S: Inner<E>, E: Engine>(
    store: &InboxStore<E>,
    mut tx: InboxTx<E>,
    jobs: &mut [Job<S>],
    fresh: bool,
) -> Result<(InboxTx<E>, Fates, bool), Whole> {
    let mut fates = Vec::with_capacity(jobs.len());
    let mut wrote = false;
    for job in jobs.iter_mut() {
        if wrote {
            tx.savepoint().await?;
        }
        let (back, step) = one(store, tx, job, fresh).await?;
        tx = back;
        match step {
            Step::Wrote(outcome) => {
                wrote = true;
                fates.push(Ok(outcome));
            }
            // The statement that met the key wrote nothing.
            Step::Found(fate) => fates.push(fate),
            Step::Failed(e) => {
                if wrote {
                    tx.rollback_to_savepoint().await?;
                } else {
                    tx.rollback_all().await?;
                }
                fates.push(Err(e));
            }
        }
    }
    Ok((tx, fates, wrote))
}

/// What one delivery did inside the batch's transaction.
enum Step {
    /// Its writes are in the transaction.
    Wrote(Outcome),
    /// Its row existed: a duplicate, or a conflict of content. Nothing
    /// was written.
    Found(Result<Outcome, InboxError>),
    /// It failed; what it wrote is still to be undone.
    Failed(InboxError),
}

/// One delivery inside the batch's transaction. An error that rolled the
/// transaction back is the whole batch's.
async fn one<S: Inner<E>, E: Engine>(
    store: &InboxStore<E>,
    mut tx: InboxTx<E>,
    job: &mut Job<S>,
    fresh: bool,
) -> Result<(InboxTx<E>, Step), Whole> {
    let scope = store.scope();
    match tx.insert_row(scope, &job.event).await {
        Ok(Row::Inserted) => {}
        Ok(Row::Duplicate { digest, applied }) => {
            return Ok((tx, Step::Found(found(&job.event, digest, applied))))
        }
        Err(e) => return own_or_whole(tx, e),
    }
    if !fresh {
        // A retry: the service was called in the attempt before.
        if let Err(e) = job.inner.ready().await {
            return own_or_whole(tx, InboxError::from_inner(e.into()));
        }
    }
    if let Err(e) = tx.open_for_lending().await {
        return own_or_whole(tx, e.into());
    }
    let (lent, back) = tx.lend();
    let applying = Applying {
        event: job.event.clone(),
        scope: scope.clone(),
        tx: lent,
        trace: job.delivery.trace().cloned(),
        recorded: Default::default(),
    };
    // The inner service's work (the task view, the business), in a span of
    // its own under the delivery's part of the transaction.
    let service = tracing::info_span!("inner service", otel.status_code = field::Empty);
    let called = job
        .inner
        .call(job.delivery.clone().map_body(|_| applying))
        .instrument(service.clone())
        .await
        .map_err(|e| InboxError::from_inner(e.into()));
    if called.is_err() {
        service.record("otel.status_code", "ERROR");
    }
    match called {
        Ok(verdict) => {
            let Verdict { applying, advanced } = verdict;
            let mut tx = applying.tx.keep();
            if let Err(e) = tx.close_nested().await {
                return own_or_whole(tx, e.into());
            }
            if !advanced {
                if let Err(e) = mark_stale_all::<E>(tx.connection(), scope, &[&job.event]).await {
                    return own_or_whole(tx, e.into());
                }
            }
            let outcome = if advanced {
                Outcome::Applied
            } else {
                Outcome::Stale
            };
            Ok((tx, Step::Wrote(outcome)))
        }
        Err(e) => {
            // The service dropped the transaction when it failed; it came
            // back here instead of closing.
            let Ok(tx) = back.await else {
                return Err(Whole::Database(DbError::inconsistent()));
            };
            own_or_whole(tx, e)
        }
    }
}

/// A delivery's error is its own unless it rolled the transaction back.
fn own_or_whole<E: Engine>(tx: InboxTx<E>, e: InboxError) -> Result<(InboxTx<E>, Step), Whole> {
    match e {
        InboxError::Database(e) if e.is_rolled_back() => Err(Whole::Database(e)),
        e => Ok((tx, Step::Failed(e))),
    }
}
