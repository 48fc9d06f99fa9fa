//! The relay's loop: claim, send with nothing held, record the answer.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::FutureExt as _;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;
use tracing::Instrument as _;

use super::clock;
use super::target::{Attempt, Disposition, Failed, Targets};
use crate::db::{DbError, Dsn, Engine};
use crate::outbox::{self, Claimed, OutboxError, Target};
use crate::telemetry;

/// How a relay claims, sends and gives up.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RelayOptions {
    /// The name its leases carry, unique to this relay (by default
    /// `relay-<pid>-<random>`). At most 128 bytes.
    pub owner: String,
    /// Effects sent at once, each of another ordering key. Default 16.
    pub concurrency: usize,
    /// How long a claimed effect is this relay's: longer than any target
    /// takes to answer (the webhook's timeout is 10 s by default), or
    /// another relay may send it while this one still waits. Default 60 s.
    pub lease: Duration,
    /// How often it looks for due effects when nothing wakes it. Default 1 s.
    pub poll_interval: Duration,
    /// The wait before the second attempt; each next one doubles it, with
    /// jitter (between half and all of it). Default 1 s.
    pub initial_backoff: Duration,
    /// The longest wait between attempts (a `Retry-After` may ask more).
    /// Default 10 min.
    pub max_backoff: Duration,
    /// Attempts before an effect that keeps failing is dead. Default 20.
    pub max_attempts: u32,
    /// Age (since it was recorded) after which an effect that fails again
    /// is dead. Default 24 h.
    pub max_age: Duration,
    /// How long a target that answered gone (`410`) is left alone before
    /// its next effect is tried. Default 10 min.
    pub gone_pause: Duration,
    /// How long a stopping relay waits for the sends in flight to finish;
    /// those still running then are abandoned (their leases run out, and
    /// they are sent again under the same id). Default 10 s.
    pub shutdown_grace: Duration,
    /// How often it counts the pending effects for its metrics. Default 15 s.
    pub report_interval: Duration,
    /// Connections of its own to the database. Default 4.
    pub max_connections: u32,
}

impl Default for RelayOptions {
    fn default() -> Self {
        Self {
            owner: format!(
                "relay-{}-{:08x}",
                std::process::id(),
                clock::random() as u32
            ),
            concurrency: 16,
            lease: Duration::from_secs(60),
            poll_interval: Duration::from_secs(1),
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(600),
            max_attempts: 20,
            max_age: Duration::from_secs(24 * 3600),
            gone_pause: Duration::from_secs(600),
            shutdown_grace: Duration::from_secs(10),
            report_interval: Duration::from_secs(15),
            max_connections: 4,
        }
    }
}

/// Why a relay did not start, or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RelayError {
    /// Options it cannot run with.
    #[error("invalid relay option {what}: expected {expected}")]
    Invalid {
        /// The option.
        what: &'static str,
        /// What it must be.
        expected: &'static str,
    },
    /// The table's statements refused, or the server lacks `SKIP LOCKED`.
    #[error(transparent)]
    Outbox(#[from] OutboxError),
    /// The database could not be reached at start.
    #[error("relay: {0}")]
    Database(#[from] DbError),
}

/// Wakes a relay so that it claims at once: what a consumer calls right
/// after a COMMIT that recorded effects. Cheap to clone; waking a relay
/// that is busy makes it look once more when it is done.
#[derive(Clone, Default)]
pub struct RelayWaker {
    notify: Arc<Notify>,
}

impl RelayWaker {
    /// Makes the relay claim at once.
    pub fn wake(&self) {
        self.notify.notify_one();
    }
}

impl fmt::Debug for RelayWaker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RelayWaker")
    }
}

/// Sends the outbox's effects to their targets after COMMIT, on engine
/// `E`: any number of relays, in any number of processes, claim disjoint
/// effects. See the module's documentation.
pub struct Relay<E: Engine> {
    dsn: Dsn,
    targets: Targets,
    options: RelayOptions,
    waker: RelayWaker,
    _engine: std::marker::PhantomData<fn() -> E>,
}

impl<E: Engine> fmt::Debug for Relay<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Relay")
            .field("dsn", &self.dsn)
            .field("targets", &self.targets)
            .field("options", &self.options)
            .finish()
    }
}

/// What the sends share with the loop.
struct Shared<E: Engine> {
    pool: sqlx::Pool<E>,
    options: RelayOptions,
    /// Targets that answered gone, until when they are left alone.
    paused: Mutex<HashMap<Target, Instant>>,
}

impl<E: Engine> Relay<E> {
    /// A relay of `targets` over the outbox of the database `dsn` names
    /// (an account with `SELECT, UPDATE` on `receiver_outbox` is enough).
    /// It connects when it [`run`](Self::run)s.
    pub fn new(dsn: Dsn, targets: Targets, options: RelayOptions) -> Self {
        Self {
            dsn,
            targets,
            options,
            waker: RelayWaker::default(),
            _engine: std::marker::PhantomData,
        }
    }

    /// The handle that makes it claim at once.
    pub fn waker(&self) -> RelayWaker {
        self.waker.clone()
    }

    /// Runs until `shutdown` is cancelled: refuses a server without `SKIP
    /// LOCKED`, then claims due effects (when woken, when a send ends, and
    /// every poll interval), sends each with no transaction or lock held,
    /// and records the answer. Once cancelled it claims nothing more,
    /// waits up to the shutdown grace for the sends in flight, abandons
    /// the rest, and returns. A database that cannot be reached at start
    /// is an error; one that cannot be reached while it runs is logged
    /// and tried again, and does not end the relay. Invalid options
    /// (no concurrency, no attempt, a bad owner) are an error at once.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), RelayError> {
        let options = self.options;
        if options.concurrency == 0 {
            return Err(RelayError::Invalid {
                what: "concurrency",
                expected: "at least 1",
            });
        }
        let owner = &options.owner;
        if owner.is_empty() || owner.len() > 128 || owner.chars().any(char::is_control) {
            return Err(RelayError::Invalid {
                what: "owner",
                expected: "1 to 128 bytes of UTF-8 without control characters",
            });
        }
        if options.max_attempts == 0 {
            return Err(RelayError::Invalid {
                what: "max_attempts",
                expected: "at least 1",
            });
        }
        let connect = E::connect_options(&self.dsn)
            .ok_or_else(|| DbError::wrong_engine(self.dsn.engine()))?;
        // An address of several hosts: the one that takes writes now.
        let connect = E::writable_options(&self.dsn).await.unwrap_or(connect);
        let pool = E::pool_options(options.max_connections.max(2), Duration::from_secs(5))
            .connect_lazy_with(connect);
        {
            let mut conn = pool
                .acquire()
                .await
                .map_err(|e| DbError::from(e).connecting_to(self.dsn.engine()))?;
            outbox::check_skip_locked::<E>(&mut conn).await?;
        }
        for target in self.targets.names() {
            telemetry::start_outbox(target);
        }
        tracing::info!(
            owner = %options.owner,
            targets = ?self.targets,
            concurrency = options.concurrency,
            "relay started"
        );
        let shared = Arc::new(Shared {
            pool,
            options: options.clone(),
            paused: Mutex::new(HashMap::new()),
        });
        let mut in_flight = JoinSet::new();
        let mut warned = BTreeSet::new();
        let mut next_report = Instant::now();
        let notified = self.waker.notify.clone();
        while !shutdown.is_cancelled() {
            if Instant::now() >= next_report {
                report::<E>(&shared).await;
                next_report = Instant::now() + options.report_interval;
            }
            claim_and_send(&shared, &self.targets, &mut in_flight, &mut warned).await;
            tokio::select! {
                biased;
                () = shutdown.cancelled() => break,
                Some(_) = in_flight.join_next(), if !in_flight.is_empty() => {
                    // Every send that ended meanwhile frees its slot for
                    // the same claim: one claim for several, not one each.
                    while let Some(Some(_)) = in_flight.join_next().now_or_never() {}
                }
                () = notified.notified() => {}
                () = tokio::time::sleep(options.poll_interval) => {}
            }
        }
        let finished = tokio::time::timeout(options.shutdown_grace, async {
            while in_flight.join_next().await.is_some() {}
        })
        .await;
        if finished.is_err() {
            tracing::warn!(
                abandoned = in_flight.len(),
                "relay stopped with sends in flight: their leases run out and they are sent again under the same id"
            );
            in_flight.abort_all();
            while in_flight.join_next().await.is_some() {}
        }
        shared.pool.close().await;
        tracing::info!(owner = %options.owner, "relay stopped");
        Ok(())
    }
}

/// Claims as many effects as there are free slots, and sends each that
/// has a target that is not paused. An effect it cannot send keeps its
/// lease until it runs out, then any relay may claim it again.
async fn claim_and_send<E: Engine>(
    shared: &Arc<Shared<E>>,
    targets: &Targets,
    in_flight: &mut JoinSet<()>,
    warned: &mut BTreeSet<Target>,
) {
    let options = &shared.options;
    // A batch of effects none of which can be sent leaves room for more.
    for _ in 0..4 {
        let free = options.concurrency.saturating_sub(in_flight.len());
        if free == 0 {
            return;
        }
        let claimed = match claim::<E>(shared, free).await {
            Ok(claimed) => claimed,
            Err(e) => {
                tracing::warn!(error = %e, "relay could not claim effects; trying again");
                return;
            }
        };
        let fetched = claimed.len();
        let mut started = 0;
        for effect in claimed {
            let Some(service) = targets.get(&effect.target) else {
                if warned.insert(effect.target.clone()) {
                    tracing::warn!(
                        target_name = effect.target.as_str(),
                        effect_id = %effect.id,
                        "relay has no target of this name: its effects stay pending for a relay that has"
                    );
                }
                continue;
            };
            if is_paused(shared, &effect.target) {
                continue;
            }
            started += 1;
            in_flight.spawn(send(shared.clone(), service, effect));
        }
        if fetched < free || started == fetched {
            return;
        }
    }
}

async fn claim<E: Engine>(shared: &Shared<E>, limit: usize) -> Result<Vec<Claimed>, OutboxError> {
    let mut conn = shared.pool.acquire().await?;
    let limit = u32::try_from(limit).unwrap_or(u32::MAX);
    outbox::claim::<E>(
        &mut conn,
        &shared.options.owner,
        shared.options.lease,
        limit,
    )
    .await
}

fn is_paused<E: Engine>(shared: &Shared<E>, target: &Target) -> bool {
    let mut paused = shared.paused.lock().unwrap_or_else(|e| e.into_inner());
    match paused.get(target) {
        Some(until) if Instant::now() < *until => true,
        Some(_) => {
            paused.remove(target);
            metrics::gauge!(telemetry::OUTBOX_TARGET_PAUSED, "target" => target.as_str().to_owned())
                .set(0.0);
            tracing::info!(
                target_name = target.as_str(),
                "relay tries the gone target again"
            );
            false
        }
        None => false,
    }
}

/// Sets the pending count and the oldest pending effect's age.
async fn report<E: Engine>(shared: &Shared<E>) {
    let summary = async {
        let mut conn = shared.pool.acquire().await?;
        outbox::pending_summary::<E>(&mut conn).await
    };
    match summary.await {
        Ok((count, oldest)) => {
            metrics::gauge!(telemetry::OUTBOX_PENDING).set(count as f64);
            metrics::gauge!(telemetry::OUTBOX_OLDEST_PENDING)
                .set(oldest.unwrap_or_default().as_secs_f64());
        }
        Err(e) => tracing::warn!(error = %e, "relay could not count pending effects"),
    }
}

/// What the relay records after an attempt.
enum Settle {
    Sent(String),
    Retry(Duration, String),
    Dead(String),
}

/// One attempt at `effect`, then its answer recorded: the send holds no
/// transaction and no connection.
async fn send<E: Engine>(shared: Arc<Shared<E>>, service: super::BoxTarget, effect: Claimed) {
    let target = effect.target.clone();
    let id = effect.id.clone();
    let created = clock::parse_rfc3339_utc(&effect.created_at);
    let number = effect.attempts.saturating_add(1);
    let attempt = Attempt::new(effect, number);
    let span = tracing::info_span!(
        "send",
        otel.name = %format_args!("send {}", target.as_str()),
        otel.kind = "producer",
        effect_id = %id,
        target_name = target.as_str(),
        attempt = number,
        traceparent = attempt.effect.traceparent.as_deref(),
        result = tracing::field::Empty,
    );
    let outcome = service
        .oneshot(attempt)
        .instrument(span.clone())
        .map(|r| r.map_err(Failed::from_error))
        .await;
    let options = &shared.options;
    let age = created.map(|c| (clock::unix_now() - c).max(0.0));
    let settle = match outcome {
        Ok(sent) => {
            if let Some(age) = age {
                metrics::histogram!(telemetry::OUTBOX_COMMIT_TO_SENT, "target" => target.as_str().to_owned())
                    .record(age);
            }
            Settle::Sent(sent.result().to_owned())
        }
        Err(failed) => match failed.disposition() {
            Disposition::Gone => {
                let until = Instant::now() + options.gone_pause;
                shared
                    .paused
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(target.clone(), until);
                metrics::gauge!(telemetry::OUTBOX_TARGET_PAUSED, "target" => target.as_str().to_owned())
                    .set(1.0);
                tracing::error!(
                    parent: &span,
                    target_name = target.as_str(),
                    effect_id = %id,
                    result = failed.result(),
                    pause_s = options.gone_pause.as_secs(),
                    "target is gone: the effect is dead and the target's other effects wait"
                );
                Settle::Dead(failed.result().to_owned())
            }
            Disposition::Dead => Settle::Dead(failed.result().to_owned()),
            _ => {
                let spent = number >= options.max_attempts
                    || age.is_some_and(|a| a >= options.max_age.as_secs_f64());
                if spent {
                    Settle::Dead(failed.result().to_owned())
                } else {
                    let wait = clock::backoff(options.initial_backoff, options.max_backoff, number);
                    let wait = failed.retry_after().map_or(wait, |after| after.max(wait));
                    Settle::Retry(wait, failed.result().to_owned())
                }
            }
        },
    };
    let (class, result) = match &settle {
        Settle::Sent(r) => ("sent", r),
        Settle::Retry(_, r) => ("retry", r),
        Settle::Dead(r) => ("dead", r),
    };
    span.record("result", result.as_str());
    metrics::counter!(
        telemetry::OUTBOX_ATTEMPTS,
        "target" => target.as_str().to_owned(),
        "result" => class
    )
    .increment(1);
    match &settle {
        Settle::Dead(result) => {
            metrics::counter!(telemetry::OUTBOX_DEAD, "target" => target.as_str().to_owned())
                .increment(1);
            tracing::warn!(parent: &span, effect_id = %id, target_name = target.as_str(), attempts = number, result = %result, "effect is dead");
        }
        Settle::Retry(wait, result) => {
            tracing::info!(parent: &span, effect_id = %id, target_name = target.as_str(), attempts = number, result = %result, retry_in_ms = wait.as_millis() as u64, "effect will be tried again");
        }
        Settle::Sent(_) => {
            tracing::debug!(parent: &span, effect_id = %id, "effect sent");
        }
    }
    record::<E>(&shared, &id, &settle).await;
}

/// Records an attempt's answer, trying a few times while the database is
/// away; one never recorded leaves the lease to run out, and the effect is
/// sent again under the same id.
async fn record<E: Engine>(shared: &Shared<E>, id: &outbox::EffectId, settle: &Settle) {
    let owner = shared.options.owner.as_str();
    let mut pause = Duration::from_millis(100);
    for tries in 1..=5 {
        let done = async {
            let mut conn = shared.pool.acquire().await?;
            match settle {
                Settle::Sent(result) => outbox::mark_sent::<E>(&mut conn, id, owner, result).await,
                Settle::Retry(wait, result) => {
                    outbox::mark_failed::<E>(&mut conn, id, owner, *wait, result).await
                }
                Settle::Dead(result) => outbox::mark_dead::<E>(&mut conn, id, owner, result).await,
            }
        }
        .await;
        match done {
            Ok(true) => return,
            Ok(false) if tries == 1 => {
                tracing::warn!(
                    effect_id = %id,
                    "relay's lease on the effect ran out before its answer was recorded: another relay may send it again under the same id"
                );
                return;
            }
            // An earlier try may have committed with its reply lost: the
            // row is then no longer this relay's to change.
            Ok(false) => {
                tracing::info!(
                    effect_id = %id,
                    tries,
                    "relay's answer found already recorded, by an earlier try whose reply was lost, or its lease ran out meanwhile (another relay may then send it again under the same id)"
                );
                return;
            }
            Err(e) if tries < 5 && e.is_retryable() => {
                tracing::warn!(effect_id = %id, error = %e, "relay could not record an answer; trying again");
                tokio::time::sleep(pause).await;
                pause *= 2;
            }
            Err(e) => {
                tracing::error!(
                    effect_id = %id,
                    error = %e,
                    "relay could not record an answer: the lease runs out and the effect is sent again under the same id"
                );
                return;
            }
        }
    }
}
