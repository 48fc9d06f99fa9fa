//! The consumer: one source's deliveries through a tower service, and an
//! ACK for every `Ok` — and only for those.
//!
//! The source is Orbit's subscription stream by default
//! ([`OrbitSource`], [`Consumer::connect`]); any [`Source`] of leased
//! deliveries works ([`Consumer::new`]). The description below speaks of
//! Orbit; for another source, "credit", "lease proof" and "ACK" are its
//! own equivalents.
//!
//! The consumer opens the subscription's WebSocket stream, grants credit
//! for its free handler slots plus a small `prefetch` (so at most
//! `concurrency + prefetch` deliveries are in its hands at once, and a slot
//! freed by a commit does not wait for a round trip to Orbit), and runs each
//! delivery through a clone of the service. When the service answers,
//! [`settle`] decides: `Ok` is ACKed with the attempt's lease proof over
//! HTTP, `Err` is left for redelivery.
//!
//! An ACK whose answer is lost (connection cut, time-out, server error) is
//! re-reported with the *same* proof until Orbit answers; that is safe because
//! the ACK is idempotent for its proof. A stream that breaks is reopened with
//! backoff while handlers and ACKs carry on.
//!
//! With a [`Probe`] of its database the consumer also has a breaker: while
//! the database cannot be reached it grants no credit and starts none of
//! the deliveries it holds, so nothing more is leased to it and no
//! delivery's retry budget burns during an outage; it probes with backoff
//! and takes deliveries again once the database answers. A held delivery
//! whose lease outlived the outage costs one attempt, as one in a handler
//! does.
//!
//! On shutdown the consumer stops taking deliveries (closes the stream),
//! gives the held ones back unstarted to a source that can take them
//! ([`Source::release`]; otherwise their leases run out), cancels in-flight
//! handlers — dropping an inbox transaction rolls it back, and an
//! interrupted COMMIT is simply not ACKed — then gives pending ACKs the
//! rest of the grace period. It never pauses the subscription: other
//! consumers of it carry on.

mod classify;
mod settle;
mod source;

use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::{sleep_until, timeout, timeout_at, Instant};
use tower::{Service, ServiceExt};
use tracing::{info, warn};

#[cfg(feature = "nats")]
pub(crate) use self::classify::chain;
pub use self::classify::{class, classify, is_malformed, is_unavailable, FailureClass};
pub use self::settle::{settle, Settlement};
pub use self::source::{AckOutcome, Incoming, LeaseStream, Source, SourceError};
use crate::delivery::{Delivery, DeliveryId};
use crate::ids::{QueueId, SubscriptionId};
use crate::orbit::{OrbitClient, OrbitError, OrbitSource};
use crate::telemetry;
use crate::BoxError;

/// How a consumer behaves.
#[derive(Debug, Clone)]
pub struct ConsumerOptions {
    /// Most deliveries handled at once. Default 4.
    pub concurrency: u32,
    /// Deliveries leased ahead of a free handler slot, so that a slot freed
    /// by a commit finds its next delivery already here instead of waiting
    /// for the source's round trip. Held deliveries are not started while
    /// the breaker is open, and are dropped unstarted at shutdown (their
    /// leases run out and they come again). `0` leases only for free
    /// slots. Default 4 (`receiver consume --source nats` uses 16,
    /// `nats::DEFAULT_PREFETCH`, so that credit goes out in bigger pull
    /// requests).
    pub prefetch: u32,
    /// First wait before reopening a broken stream, re-reporting an ACK or
    /// probing an unreachable database again; doubles up to `retry_max`.
    /// Default 200 ms.
    pub retry_min: Duration,
    /// Longest wait between retries. Default 5 s.
    pub retry_max: Duration,
    /// After shutdown is requested, how long pending ACKs may still take
    /// before the consumer returns anyway, counted from the moment the
    /// shutdown future resolved. Default 8 s, so that a process that exits
    /// right after stays within 10 s of its signal.
    pub shutdown_grace: Duration,
    /// A stream that delivers nothing, not even a ping, for this long is
    /// taken for dead and reopened (Orbit pings every 15 s). Default 60 s.
    pub stream_idle_timeout: Duration,
    /// How often the [`Probe`] runs while the database answers. Default 5 s.
    pub probe_interval: Duration,
    /// A probe that has not answered after this long counts as failed.
    /// Default 2 s.
    pub probe_timeout: Duration,
}

impl Default for ConsumerOptions {
    fn default() -> Self {
        Self {
            concurrency: 4,
            prefetch: 4,
            retry_min: Duration::from_millis(200),
            retry_max: Duration::from_secs(5),
            shutdown_grace: Duration::from_secs(8),
            stream_idle_timeout: Duration::from_secs(60),
            probe_interval: Duration::from_secs(5),
            probe_timeout: Duration::from_secs(2),
        }
    }
}

/// A dependency of the service (its database) that can be asked whether it
/// answers right now, without touching any delivery.
///
/// With a probe, the consumer has a breaker: when a delivery fails because
/// the dependency cannot be reached ([`is_unavailable`]), or a probe fails,
/// it grants no more credit — so the platform leases nothing more to it and
/// no retry budget is spent — and probes with backoff until the dependency
/// answers. [`InboxStore`](crate::inbox::InboxStore) is one.
pub trait Probe: Send + Sync + 'static {
    /// `Ok` when the dependency can do its job now.
    fn probe(&self) -> BoxFuture<'static, Result<(), BoxError>>;
}

/// What a readiness endpoint needs to know: is the stream open, does the
/// database answer. Cheap to clone; every clone sees the same state.
#[derive(Debug, Clone)]
pub struct Health {
    state: Arc<HealthState>,
}

#[derive(Debug)]
struct HealthState {
    stream_open: AtomicBool,
    database_reachable: AtomicBool,
}

impl Default for Health {
    fn default() -> Self {
        Self::new()
    }
}

impl Health {
    /// A health that has seen no stream yet (not ready). Give it to
    /// [`Consumer::with_health`] to serve readiness before the consumer
    /// exists, e.g. while it waits for its database at start.
    pub fn new() -> Self {
        Self {
            state: Arc::new(HealthState {
                stream_open: AtomicBool::new(false),
                database_reachable: AtomicBool::new(true),
            }),
        }
    }

    /// Whether the delivery stream is open.
    pub fn stream_open(&self) -> bool {
        self.state.stream_open.load(Ordering::Relaxed)
    }

    /// Whether the database answered its last probe (always true for a
    /// consumer without a [`Probe`]).
    pub fn database_reachable(&self) -> bool {
        self.state.database_reachable.load(Ordering::Relaxed)
    }

    /// Ready to do its job: the stream is open and the database answers.
    pub fn is_ready(&self) -> bool {
        self.stream_open() && self.database_reachable()
    }

    fn set_stream_open(&self, open: bool) {
        self.state.stream_open.store(open, Ordering::Relaxed);
        telemetry::flag(telemetry::STREAM_OPEN, open);
    }

    fn set_database_reachable(&self, reachable: bool) {
        self.state
            .database_reachable
            .store(reachable, Ordering::Relaxed);
        telemetry::flag(telemetry::DATABASE_REACHABLE, reachable);
    }
}

/// Why a consumer could not start or had to stop.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConsumerError {
    /// The subscription is bound to another queue than the configured one.
    /// Nothing was leased.
    #[error("subscription {subscription} is bound to queue {actual}, but this receiver consumes queue {expected}")]
    QueueMismatch {
        /// The subscription.
        subscription: SubscriptionId,
        /// The configured queue.
        expected: QueueId,
        /// The subscription's queue.
        actual: QueueId,
    },
    /// Orbit refused to show the subscription because it belongs to another
    /// queue than the token's (`403 wrong_queue`). Nothing was leased.
    #[error("subscription {subscription} belongs to another queue than the token's (Orbit answered 403 wrong_queue); this receiver consumes queue {expected}: use a subscription of that queue and its credentials")]
    OtherQueue {
        /// The subscription.
        subscription: SubscriptionId,
        /// The configured queue.
        expected: QueueId,
    },
    /// Orbit knows no such subscription (`404 subscription_not_found`).
    #[error("subscription {subscription} does not exist (Orbit answered 404 subscription_not_found); check ORBIT_SUBSCRIPTION_ID")]
    UnknownSubscription {
        /// The subscription.
        subscription: SubscriptionId,
    },
    /// Orbit refused or could not be reached.
    #[error("{0}")]
    Orbit(#[from] OrbitError),
    /// NATS refused, or the stream or consumer cannot be consumed.
    #[cfg(feature = "nats")]
    #[cfg_attr(docsrs, doc(cfg(feature = "nats")))]
    #[error("{0}")]
    Nats(#[from] crate::nats::NatsError),
}

impl ConsumerError {
    /// Whether the configuration has to change before the consumer can run:
    /// a subscription of another queue, or a permanent refusal of the token,
    /// its scopes or the subscription id (401, 403, 404).
    pub fn is_configuration(&self) -> bool {
        match self {
            ConsumerError::QueueMismatch { .. }
            | ConsumerError::OtherQueue { .. }
            | ConsumerError::UnknownSubscription { .. } => true,
            ConsumerError::Orbit(e) => e.is_refusal(),
            #[cfg(feature = "nats")]
            ConsumerError::Nats(e) => e.is_configuration(),
        }
    }
}

/// What a consumer did, counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConsumerReport {
    /// Deliveries received from the stream.
    pub received: u64,
    /// Deliveries the service answered with `Ok`.
    pub succeeded: u64,
    /// Deliveries the service answered with `Err` (left un-ACKed).
    pub failed: u64,
    /// ACKs Orbit confirmed (including "already acknowledged with this proof").
    pub acked: u64,
    /// ACKs Orbit refused (e.g. the lease had passed to a newer attempt).
    pub ack_refused: u64,
    /// ACKs still unanswered when the shutdown grace ran out, handlers
    /// cancelled by shutdown and held deliveries it dropped unstarted.
    /// Their deliveries come again when their leases run out.
    pub abandoned: u64,
    /// Held deliveries given back unstarted at shutdown
    /// ([`Source::release`]: JetStream's `-NAK`); the source offers them
    /// again at once. Never applied by this consumer, never acknowledged.
    pub released: u64,
    /// Deliveries whose bytes can never be a valid event that the source
    /// dropped for good at the consumer's request (JetStream's `+TERM`);
    /// never applied, never acknowledged. Included in `failed`.
    pub terminated: u64,
}

/// A consumer of one subscription.
///
/// ```no_run
/// use std::time::Duration;
/// use result_inbox::consumer::{Consumer, ConsumerOptions};
/// use result_inbox::ids::{QueueId, SubscriptionId};
/// use result_inbox::inbox::{InboxLayer, InboxStore};
/// use result_inbox::orbit::{OrbitClient, OrbitUrl, Token};
/// use result_inbox::task_view::TaskView;
/// use tower::ServiceBuilder;
///
/// # async fn run(store: InboxStore) -> Result<(), Box<dyn std::error::Error>> {
/// let client = OrbitClient::new(
///     OrbitUrl::parse("https://orbit.example.com")?,
///     Token::new(std::env::var("ORBIT_TOKEN")?),
///     Duration::from_secs(10),
/// )?;
/// let queue = QueueId::parse("0123456789abcdef0123456789abcdef").unwrap();
/// let subscription = SubscriptionId::parse("fedcba9876543210fedcba9876543210").unwrap();
/// // Checks the subscription's queue before anything is leased.
/// let consumer = Consumer::connect(client, subscription, &queue, ConsumerOptions::default())
///     .await?
///     .with_probe(store.clone()); // no deliveries taken while the database is down
/// let service = ServiceBuilder::new()
///     .layer(InboxLayer::new(store))
///     .service(TaskView::new());
/// // Runs until the future resolves; ACKs exactly what the service answered `Ok`.
/// let report = consumer.run(service, async { let _ = tokio::signal::ctrl_c().await; }).await?;
/// println!("acked {}", report.acked);
/// # Ok(())
/// # }
/// ```
pub struct Consumer<Src: Source = OrbitSource> {
    source: Arc<Src>,
    options: ConsumerOptions,
    probe: Option<Arc<dyn Probe>>,
    health: Health,
}

impl<Src: Source + std::fmt::Debug> std::fmt::Debug for Consumer<Src> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("source", &self.source)
            .field("options", &self.options)
            .field("probe", &self.probe.is_some())
            .finish_non_exhaustive()
    }
}

struct Handled<R> {
    id: DeliveryId,
    /// What acknowledges this attempt; kept here, never given to a service.
    receipt: R,
    settlement: Settlement,
    /// The service failed because its database cannot be reached.
    unavailable: bool,
}

enum AckResult {
    Confirmed(DeliveryId, AckOutcome),
    Refused(DeliveryId, BoxError),
    /// The source dropped the delivery for good (`true`) or cannot
    /// (`false`).
    Terminated(DeliveryId, bool),
    /// The source took back a held delivery (`true`) or cannot (`false`).
    Released(bool),
}

/// Longest a credit grant may take to send; a stream that cannot take a few
/// bytes in that time is treated as broken.
const GRANT_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest the polite close of the stream may take at shutdown.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);

impl Consumer<OrbitSource> {
    /// Checks the subscription before anything is leased: it must exist, be
    /// readable with this token and be bound to `expected_queue`.
    ///
    /// An Orbit that cannot be reached yet (connection refused or reset,
    /// time-out, 5xx) is waited for with backoff and a warning per attempt;
    /// a permanent answer (401, 403, 404) returns at once. Drop the future
    /// to stop waiting.
    pub async fn connect(
        client: OrbitClient,
        subscription: SubscriptionId,
        expected_queue: &QueueId,
        options: ConsumerOptions,
    ) -> Result<Consumer, ConsumerError> {
        until_answered(
            &options,
            "Orbit",
            |e| matches!(e, ConsumerError::Orbit(e) if e.is_retryable()),
            || check_subscription(&client, &subscription, expected_queue),
        )
        .await?;
        Ok(Consumer::new(
            OrbitSource::new(client, subscription),
            options,
        ))
    }
}

/// Asks Orbit once whether `subscription` can be consumed for
/// `expected_queue`: it must exist, be readable with the client's token and
/// be bound to that queue. [`Consumer::connect`] asks until Orbit answers;
/// `receiver check` asks once.
pub async fn check_subscription(
    client: &OrbitClient,
    subscription: &SubscriptionId,
    expected_queue: &QueueId,
) -> Result<(), ConsumerError> {
    let found = match client.subscription(subscription).await {
        Ok(found) => found,
        Err(e) if e.code() == Some("wrong_queue") => {
            return Err(ConsumerError::OtherQueue {
                subscription: subscription.clone(),
                expected: expected_queue.clone(),
            })
        }
        Err(e) if e.code() == Some("subscription_not_found") => {
            return Err(ConsumerError::UnknownSubscription {
                subscription: subscription.clone(),
            })
        }
        Err(e) => return Err(e.into()),
    };
    if &found.queue_id != expected_queue {
        return Err(ConsumerError::QueueMismatch {
            subscription: subscription.clone(),
            expected: expected_queue.clone(),
            actual: found.queue_id,
        });
    }
    Ok(())
}

impl<Src: Source> Consumer<Src> {
    /// A consumer of any source. The source's own checks (the subscription's
    /// queue, for Orbit: [`Consumer::connect`]) are its constructor's.
    pub fn new(source: Src, options: ConsumerOptions) -> Self {
        Self {
            source: Arc::new(source),
            options,
            probe: None,
            health: Health::new(),
        }
    }

    /// Gives the consumer a breaker on `probe` (see [`Probe`]).
    pub fn with_probe(mut self, probe: impl Probe) -> Self {
        self.probe = Some(Arc::new(probe));
        self
    }

    /// Reports into `health` instead of a health of its own.
    pub fn with_health(mut self, health: Health) -> Self {
        self.health = health;
        self
    }

    /// The consumer's health, for a readiness endpoint. Stays valid while
    /// and after [`run`](Self::run) runs.
    pub fn health(&self) -> Health {
        self.health.clone()
    }

    /// Consumes until `shutdown` resolves, then drains as the module docs
    /// say. Returns an error only when the source refuses the stream for
    /// good (for Orbit: token, scope, queue, unknown subscription).
    pub async fn run<S>(
        self,
        service: S,
        shutdown: impl Future<Output = ()>,
    ) -> Result<ConsumerReport, ConsumerError>
    where
        S: Service<Delivery<Bytes>> + Clone + Send + 'static,
        S::Error: Into<BoxError>,
        S::Future: Send,
        S::Response: Send,
        ConsumerError: From<Src::Error>,
    {
        let concurrency = self.options.concurrency.max(1);
        let leased_at_most = concurrency.saturating_add(self.options.prefetch);
        let mut report = ConsumerReport::default();
        let mut handlers: JoinSet<Handled<Src::Receipt>> = JoinSet::new();
        // Leased deliveries waiting for a free slot (at most `prefetch`).
        let mut held: VecDeque<(Delivery<Bytes>, Src::Receipt)> = VecDeque::new();
        let mut acks: JoinSet<AckResult> = JoinSet::new();
        let mut link: Link<Src::Stream> = Link::new(&self.options, self.health.clone());
        let mut breaker = Breaker::new(self.probe.clone(), &self.options, self.health.clone());
        let idle = self.options.stream_idle_timeout;
        let mut fatal = None;
        // Series that exist from the start read 0, not "absent", on a
        // dashboard.
        metrics::counter!(telemetry::STREAM_RECONNECTS).increment(0);
        set_in_hand(0, 0);
        tokio::pin!(shutdown);

        loop {
            if link.stream.is_none() && Instant::now() >= link.reconnect_at {
                let opened = tokio::select! {
                    biased;
                    _ = &mut shutdown => break,
                    opened = self.source.open() => opened,
                };
                match opened {
                    Ok(s) => {
                        info!(subscription = %self.source.subscription(), "delivery stream open");
                        link.opened(s);
                    }
                    Err(e) if e.is_retryable() => {
                        warn!(error = %e, "delivery stream unavailable, retrying");
                        link.retry_later();
                    }
                    Err(e) => {
                        fatal = Some(e);
                        break;
                    }
                }
            }

            // A held delivery starts as soon as a slot is free, unless the
            // database is known to be away: then it waits for the probe
            // that closes the breaker, not for a failure of its own.
            while handlers.len() < concurrency as usize && !breaker.is_open() {
                let Some((delivery, receipt)) = held.pop_front() else {
                    break;
                };
                handlers.spawn(handle(service.clone(), delivery, receipt));
                set_in_hand(handlers.len(), held.len());
            }

            // Credit: up to `concurrency + prefetch` deliveries in hand,
            // none while the breaker is open, so the source never leases
            // much more than could be worked on now.
            let wanted = if breaker.is_open() {
                0
            } else {
                leased_at_most.saturating_sub((handlers.len() + held.len()) as u32)
            };
            // While deliveries are held a slot has its next one here, so
            // credit can wait until half the prefetch is due: half as many
            // pull requests, the same deliveries.
            let step = if held.is_empty() {
                1
            } else {
                (self.options.prefetch / 2).max(1)
            };
            link.top_up(wanted, step).await;
            let probe_at = breaker.next_at;

            tokio::select! {
                biased;
                _ = &mut shutdown => break,
                Some(done) = handlers.join_next(), if !handlers.is_empty() => {
                    set_in_hand(handlers.len(), held.len());
                    let Ok(done) = done else { continue };
                    match done.settlement {
                        Settlement::Ack => {
                            report.succeeded += 1;
                            let source = self.source.clone();
                            let backoff = Backoff::new(self.options.retry_min, self.options.retry_max);
                            acks.spawn(ack_until_answered(source, done.id, done.receipt, backoff));
                        }
                        Settlement::Leave => report.failed += 1,
                        Settlement::Terminate => {
                            report.failed += 1;
                            acks.spawn(terminate(self.source.clone(), done.id, done.receipt));
                        }
                    }
                    if done.unavailable {
                        breaker.trip();
                    }
                }
                Some(acked) = acks.join_next(), if !acks.is_empty() => {
                    if let Ok(acked) = acked {
                        record_ack(&mut report, acked);
                    }
                }
                message = next_message(&mut link.stream), if link.stream.is_some() => {
                    link.last_heard = Instant::now();
                    match message {
                    Some(Ok(Incoming::Keepalive)) => {}
                    Some(Ok(Incoming::Delivery(delivery, receipt))) => {
                        report.received += 1;
                        link.outstanding = link.outstanding.saturating_sub(1);
                        // Into a free slot at once, even with the breaker
                        // open (credit granted before it opened), as
                        // before there was a prefetch; behind the held
                        // ones otherwise, in the order they came.
                        if handlers.len() < concurrency as usize && held.is_empty() {
                            handlers.spawn(handle(service.clone(), delivery, receipt));
                        } else {
                            held.push_back((delivery, receipt));
                        }
                        set_in_hand(handlers.len(), held.len());
                    }
                    Some(Ok(Incoming::Notice(code))) => {
                        warn!(%code, "the source reported a stream error");
                    }
                    Some(Err(e)) => link.lost(&format!("delivery stream broke: {e}")),
                    None => link.lost("delivery stream closed by the source"),
                }},
                probed = breaker.finished(), if breaker.is_probing() => breaker.record(probed),
                _ = sleep_until(probe_at), if breaker.is_due() => breaker.start(),
                _ = sleep_until(link.last_heard + idle), if link.stream.is_some() => {
                    if let Some(s) = link.stream.take() {
                        let _ = timeout(CLOSE_TIMEOUT, s.close()).await;
                    }
                    link.lost("delivery stream silent for too long; reopening it");
                }
                _ = sleep_until(link.reconnect_at), if link.stream.is_none() => {}
            }
        }

        // Stop taking deliveries, cancel what is in flight, let ACKs finish.
        // The grace counts from here: the loop leaves as soon as `shutdown`
        // resolves, whatever it was waiting for.
        let deadline = Instant::now() + self.options.shutdown_grace;
        if let Some(s) = link.stream.take() {
            let _ = timeout_at(deadline.min(Instant::now() + CLOSE_TIMEOUT), s.close()).await;
        }
        self.health.set_stream_open(false);
        breaker.stop();
        // Never started, so giving them back cannot undo anything: the
        // next consumer gets them now, not after their leases.
        for (delivery, receipt) in held.drain(..) {
            acks.spawn(release(self.source.clone(), delivery.id().clone(), receipt));
        }
        report.abandoned += handlers.len() as u64;
        handlers.abort_all();
        while let Ok(Some(_)) = timeout_at(deadline, handlers.join_next()).await {}
        set_in_hand(0, 0);
        loop {
            tokio::select! {
                acked = acks.join_next() => match acked {
                    None => break,
                    Some(Ok(acked)) => record_ack(&mut report, acked),
                    Some(Err(_)) => {}
                },
                _ = sleep_until(deadline) => {
                    report.abandoned += acks.len() as u64;
                    acks.abort_all();
                    break;
                }
            }
        }
        match fatal {
            Some(e) => Err(e.into()),
            None => Ok(report),
        }
    }
}

fn set_in_hand(running: usize, held: usize) {
    metrics::gauge!(telemetry::IN_FLIGHT).set(running as f64);
    metrics::gauge!(telemetry::HELD).set(held as f64);
}

/// The delivery stream and its credit: how much of it was granted and not
/// yet spent, and when to reopen it after it broke.
struct Link<T> {
    stream: Option<T>,
    /// Credit granted on `stream` and not yet spent by a delivery.
    outstanding: u32,
    reconnect_at: Instant,
    last_heard: Instant,
    backoff: Backoff,
    health: Health,
}

impl<T: LeaseStream> Link<T>
where
    T::Error: std::fmt::Display,
{
    fn new(options: &ConsumerOptions, health: Health) -> Self {
        Self {
            stream: None,
            outstanding: 0,
            reconnect_at: Instant::now(),
            last_heard: Instant::now(),
            backoff: Backoff::new(options.retry_min, options.retry_max),
            health,
        }
    }

    fn opened(&mut self, stream: T) {
        // A new stream starts without credit (the protocol's rule).
        self.stream = Some(stream);
        self.outstanding = 0;
        self.last_heard = Instant::now();
        self.backoff.reset();
        self.health.set_stream_open(true);
    }

    fn retry_later(&mut self) {
        self.reconnect_at = Instant::now() + self.backoff.next();
    }

    /// The stream broke, closed or fell silent: reopen it after a backoff.
    fn lost(&mut self, why: &str) {
        warn!("{why}");
        self.stream = None;
        self.outstanding = 0;
        self.health.set_stream_open(false);
        metrics::counter!(telemetry::STREAM_RECONNECTS).increment(1);
        self.retry_later();
    }

    /// Grants credit until `wanted` deliveries are granted but not yet
    /// received, on top of those in the consumer's hands, once at least
    /// `step` are missing.
    async fn top_up(&mut self, wanted: u32, step: u32) {
        let Some(stream) = self.stream.as_mut() else {
            return;
        };
        let more = wanted.saturating_sub(self.outstanding);
        if more == 0 || more < step {
            return;
        }
        match timeout(GRANT_TIMEOUT, stream.grant(more)).await {
            Ok(Ok(())) => self.outstanding += more,
            Ok(Err(e)) => self.lost(&format!("delivery stream broke: {e}")),
            Err(_) => self.lost("delivery stream took no credit in time"),
        }
    }
}

/// Stops taking deliveries while the database cannot be reached: opened by
/// a delivery that failed for that reason or by a failed probe, closed by a
/// probe that answers. Without a probe it never opens.
struct Breaker {
    probe: Option<Arc<dyn Probe>>,
    open: bool,
    running: Option<JoinHandle<Result<(), BoxError>>>,
    next_at: Instant,
    interval: Duration,
    probe_timeout: Duration,
    backoff: Backoff,
    health: Health,
}

impl Breaker {
    fn new(probe: Option<Arc<dyn Probe>>, options: &ConsumerOptions, health: Health) -> Self {
        telemetry::flag(telemetry::BREAKER_OPEN, false);
        if probe.is_some() {
            health.set_database_reachable(true);
        }
        Self {
            probe,
            open: false,
            running: None,
            next_at: Instant::now(),
            interval: options.probe_interval,
            probe_timeout: options.probe_timeout,
            backoff: Backoff::new(options.retry_min, options.retry_max),
            health,
        }
    }

    fn is_open(&self) -> bool {
        self.open
    }

    fn is_probing(&self) -> bool {
        self.running.is_some()
    }

    fn is_due(&self) -> bool {
        self.probe.is_some() && self.running.is_none()
    }

    /// A delivery failed because the database cannot be reached.
    fn trip(&mut self) {
        if self.probe.is_none() || self.open {
            return;
        }
        self.set_open(true);
        self.health.set_database_reachable(false);
        // Probe soon, not only at the next regular interval.
        self.next_at = Instant::now() + self.backoff.next();
    }

    fn set_open(&mut self, open: bool) {
        if open == self.open {
            return;
        }
        self.open = open;
        telemetry::flag(telemetry::BREAKER_OPEN, open);
        if open {
            warn!("database unreachable: taking no new deliveries until it answers (no retry budget is spent meanwhile)");
        } else {
            info!("database answers again: taking deliveries");
        }
    }

    fn start(&mut self) {
        let Some(probe) = self.probe.clone() else {
            return;
        };
        let limit = self.probe_timeout;
        self.running = Some(tokio::spawn(async move {
            match timeout(limit, probe.probe()).await {
                Ok(answer) => answer,
                Err(_) => Err("the database did not answer its probe in time".into()),
            }
        }));
    }

    async fn finished(&mut self) -> Result<(), BoxError> {
        match self.running.as_mut() {
            Some(running) => running
                .await
                .unwrap_or_else(|_| Err("the probe task failed".into())),
            None => std::future::pending().await,
        }
    }

    fn record(&mut self, answer: Result<(), BoxError>) {
        self.running = None;
        match answer {
            Ok(()) => {
                self.health.set_database_reachable(true);
                self.set_open(false);
                self.backoff.reset();
                self.next_at = Instant::now() + self.interval;
            }
            Err(e) => {
                if !self.open {
                    warn!(error = %e, "database probe failed");
                }
                self.health.set_database_reachable(false);
                self.set_open(true);
                self.next_at = Instant::now() + self.backoff.next();
            }
        }
    }

    fn stop(&mut self) {
        if let Some(running) = self.running.take() {
            running.abort();
        }
    }
}

async fn next_message<T: LeaseStream>(
    stream: &mut Option<T>,
) -> Option<Result<Incoming<T::Receipt>, T::Error>> {
    match stream {
        Some(s) => s.next().await,
        None => std::future::pending().await,
    }
}

/// Runs one delivery through the service; the receipt stays here, next to
/// the future, for the ACK — the service never sees it.
async fn handle<S, R>(service: S, delivery: Delivery<Bytes>, receipt: R) -> Handled<R>
where
    S: Service<Delivery<Bytes>>,
    S::Error: Into<BoxError>,
{
    let id = delivery.id().clone();
    let attempt = delivery.attempt();
    let answer = match service.oneshot(delivery).await {
        Ok(_) => Ok(()),
        Err(e) => Err(e.into()),
    };
    let unavailable = answer.as_ref().err().is_some_and(is_unavailable);
    if let Err(e) = &answer {
        let class = classify(e);
        if class.is_permanent() {
            info!(%class, delivery = %id, attempt, error = %e, "not acknowledged; permanent: every redelivery fails the same way until the budget is spent");
        } else {
            info!(%class, delivery = %id, attempt, error = %e, "not acknowledged; left for redelivery");
        }
    }
    Handled {
        id,
        receipt,
        settlement: settle(&answer),
        unavailable,
    }
}

async fn ack_until_answered<Src: Source>(
    source: Arc<Src>,
    id: DeliveryId,
    receipt: Src::Receipt,
    mut backoff: Backoff,
) -> AckResult {
    loop {
        match source.ack(&id, &receipt).await {
            Ok(outcome) => {
                telemetry::ack("confirmed");
                return AckResult::Confirmed(id, outcome);
            }
            Err(e) if e.is_retryable() => {
                telemetry::ack("rereported");
                warn!(delivery = %id, error = %e, "ACK answer lost; re-reporting with the same proof");
                tokio::time::sleep(backoff.next()).await;
            }
            Err(e) => {
                telemetry::ack("refused");
                return AckResult::Refused(id, Box::new(e));
            }
        }
    }
}

/// One try: a lost `+TERM` costs nothing, the delivery comes again and is
/// rejected again.
async fn terminate<Src: Source>(
    source: Arc<Src>,
    id: DeliveryId,
    receipt: Src::Receipt,
) -> AckResult {
    match source.terminate(&id, &receipt).await {
        Ok(done) => AckResult::Terminated(id, done),
        Err(e) => {
            warn!(delivery = %id, error = %e, "could not ask the source to drop a malformed delivery; it will come again");
            AckResult::Terminated(id, false)
        }
    }
}

/// One try: a lost `-NAK` costs what not sending it costs, the lease runs
/// out.
async fn release<Src: Source>(
    source: Arc<Src>,
    id: DeliveryId,
    receipt: Src::Receipt,
) -> AckResult {
    match source.release(&id, &receipt).await {
        Ok(done) => AckResult::Released(done),
        Err(e) => {
            warn!(delivery = %id, error = %e, "could not give a held delivery back; it comes again when its lease runs out");
            AckResult::Released(false)
        }
    }
}

fn record_ack(report: &mut ConsumerReport, acked: AckResult) {
    match acked {
        AckResult::Released(true) => report.released += 1,
        AckResult::Released(false) => report.abandoned += 1,
        AckResult::Terminated(id, true) => {
            report.terminated += 1;
            warn!(delivery = %id, "malformed delivery dropped by the source for good (not applied, not acknowledged)");
        }
        AckResult::Terminated(_, false) => {}
        AckResult::Confirmed(id, outcome) => {
            report.acked += 1;
            info!(delivery = %id, already = outcome == AckOutcome::AlreadyAcked, "acknowledged");
        }
        AckResult::Refused(id, e) => {
            report.ack_refused += 1;
            warn!(delivery = %id, error = %e, "ACK refused; the event will come again and be deduplicated");
        }
    }
}

/// Runs `attempt` until it succeeds or fails for good; a failure that
/// `transient` says may pass (a server not reachable yet) is logged once
/// per attempt and retried with the options' backoff. Nothing is leased
/// meanwhile: every caller runs it before its stream opens.
pub(crate) async fn until_answered<T, E, F, Fut>(
    options: &ConsumerOptions,
    what: &'static str,
    transient: fn(&E) -> bool,
    mut attempt: F,
) -> Result<T, E>
where
    E: std::fmt::Display,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let mut backoff = Backoff::new(options.retry_min, options.retry_max);
    loop {
        match attempt().await {
            Err(e) if transient(&e) => {
                let wait = backoff.next();
                warn!(
                    error = %e,
                    retry_in_ms = wait.as_millis() as u64,
                    "{what} not reachable yet; nothing is leased until it answers"
                );
                tokio::time::sleep(wait).await;
            }
            other => return other,
        }
    }
}

/// Exponential backoff with jitter, so that many consumers do not retry in
/// lockstep.
#[derive(Debug)]
pub(crate) struct Backoff {
    min: Duration,
    max: Duration,
    current: Duration,
}

impl Backoff {
    pub(crate) fn new(min: Duration, max: Duration) -> Self {
        Self {
            min,
            max,
            current: min,
        }
    }

    fn reset(&mut self) {
        self.current = self.min;
    }

    pub(crate) fn next(&mut self) -> Duration {
        let base = self.current;
        self.current = (self.current * 2).min(self.max);
        // Up to +50 %: a cheap random factor from the std hasher's seed.
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(base.as_nanos() as u64);
        let jitter = (h.finish() % 500) as u32;
        base + base * jitter / 1000
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_maximum_and_resets() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(400));
        let waits: Vec<_> = (0..4).map(|_| b.next()).collect();
        for (wait, base) in waits.iter().zip([100u64, 200, 400, 400]) {
            assert!(
                *wait >= Duration::from_millis(base)
                    && *wait < Duration::from_millis(base * 3 / 2 + 1)
            );
        }
        b.reset();
        assert!(b.next() < Duration::from_millis(151));
    }
}
