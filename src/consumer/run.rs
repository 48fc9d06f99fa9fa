//! The consumer itself: the loop that leases against credit, runs the
//! service and settles each delivery.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::task::JoinSet;
use tokio::time::{sleep_until, timeout, timeout_at, Instant};
use tower::{Service, ServiceExt};
use tracing::{error, info, warn, Instrument, Span};

use super::ack::{ack_until_answered, record_ack, release, retry, terminate, AckResult};
use super::breaker::Breaker;
use super::link::Link;
use super::span::{self, Spans, TraceParent};
use super::{settle, ConsumerError, ConsumerOptions, ConsumerReport, Health, Settlement};
use crate::delivery::{Delivery, DeliveryId};
use crate::failure;
use crate::probe::Probe;
use crate::source::{Incoming, LeaseStream, Source, SourceError};
use crate::telemetry;
use crate::BoxError;

/// A consumer of one source's deliveries.
///
/// ```no_run
/// use std::time::Duration;
/// use result_inbox::consumer::{Consumer, ConsumerOptions};
/// use result_inbox::ids::{QueueId, SubscriptionId};
/// use result_inbox::inbox::{InboxLayer, InboxStore};
/// use result_inbox::orbit::{OrbitClient, OrbitSource, OrbitUrl, Token};
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
/// let source = OrbitSource::connect(client, subscription, &queue).await?;
/// let consumer = Consumer::new(source, ConsumerOptions::default())
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
pub struct Consumer<Src: Source> {
    source: Arc<Src>,
    options: ConsumerOptions,
    probe: Option<Arc<dyn Probe>>,
    health: Health,
    trace_parent: Option<TraceParent>,
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

struct Handled<P> {
    id: DeliveryId,
    /// The attempt's span, which its acknowledgement goes under.
    span: Span,
    /// What acknowledges this attempt; kept here, never given to a service.
    proof: P,
    settlement: Settlement,
    /// The service failed because its database cannot be reached.
    unavailable: bool,
}

/// Longest the polite close of the stream may take at shutdown.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);

impl<Src: Source> Consumer<Src> {
    /// A consumer of `source`. The source's own checks (for Orbit, the
    /// subscription's queue) are its constructor's.
    pub fn new(source: Src, options: ConsumerOptions) -> Self {
        Self {
            source: Arc::new(source),
            options,
            probe: None,
            health: Health::new(),
            trace_parent: None,
        }
    }

    /// Gives each delivery's span the producer's trace as its parent, when
    /// the source handed one over with the delivery (a W3C `traceparent`):
    /// `parent` is called with the new span and that trace context. The
    /// `receiver` binary passes one that sets the OpenTelemetry parent;
    /// without it the spans start traces of their own.
    pub fn with_trace_parent(mut self, parent: TraceParent) -> Self {
        self.trace_parent = Some(parent);
        self
    }

    /// Gives the consumer a breaker on `probe` (see [`Probe`]), and the
    /// probe's knowledge of its dependency's errors: with the inbox's store
    /// as the probe, a failed delivery's class is the inbox's, and the
    /// consumer leaves its logging to the inbox. Without a probe the
    /// consumer logs each failure itself, with the class the vocabulary
    /// finds (`error` for an inbox error).
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
    {
        if let (Some(source), Some(applied)) = (
            self.source.queue(),
            self.probe.as_deref().and_then(Probe::queue),
        ) {
            if source != applied {
                return Err(ConsumerError::queue_mismatch(source, applied));
            }
        }
        let concurrency = self.options.concurrency.max(1);
        let leased_at_most = concurrency.saturating_add(self.options.prefetch);
        let mut report = ConsumerReport::default();
        let mut handlers: JoinSet<Handled<Src::Proof>> = JoinSet::new();
        // Leased deliveries waiting for a free slot (at most `prefetch`).
        let mut held: VecDeque<(Delivery<Bytes>, Src::Proof)> = VecDeque::new();
        let mut acks: JoinSet<AckResult> = JoinSet::new();
        // Failed attempts being given back (`Source::retry`): not waited
        // for at shutdown, where the source takes back what is unsettled.
        let mut retries: JoinSet<()> = JoinSet::new();
        let mut link: Link<Src::Stream> = Link::new(&self.options, self.health.clone());
        let mut breaker = Breaker::new(self.probe.clone(), &self.options, self.health.clone());
        let idle = self.options.stream_idle_timeout;
        let mut fatal = None;
        let spans = Spans {
            system: self.source.system(),
            destination: self.source.destination(),
            group: self
                .probe
                .as_deref()
                .and_then(Probe::receiver)
                .map(|name| name.as_str().to_owned()),
            parent: self.trace_parent.clone(),
        };
        // Series that exist from the start read 0, not "absent", on a
        // dashboard.
        metrics::counter!(telemetry::STREAM_RECONNECTS).increment(0);
        telemetry::start_acks();
        set_in_hand(0, 0);
        tokio::pin!(shutdown);

        loop {
            // While the breaker is open no delivery may start, so no stream
            // is opened either: it would only take credit.
            let paused = breaker.is_open();
            if paused && link.outstanding > 0 {
                info!(credit = link.outstanding, "closing the delivery stream to give up its unspent credit while the database is unreachable");
                link.give_up_credit(CLOSE_TIMEOUT).await;
            }
            if link.stream.is_none() && !paused && Instant::now() >= link.reconnect_at {
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
                        fatal = Some(ConsumerError::from(e));
                        break;
                    }
                }
            }

            // A held delivery starts as soon as a slot is free, unless the
            // database is known to be away: then it waits for the probe
            // that closes the breaker, not for a failure of its own.
            while handlers.len() < concurrency as usize && !breaker.is_open() {
                let Some((delivery, proof)) = held.pop_front() else {
                    break;
                };
                let span = spans.process(&delivery);
                handlers.spawn(handle(
                    service.clone(),
                    delivery,
                    proof,
                    self.probe.clone(),
                    span,
                ));
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
                            let backoff = self.options.backoff();
                            let settle = spans.settle(&done.span, "ack");
                            acks.spawn(ack_until_answered(source, done.id, done.proof, backoff).instrument(settle));
                        }
                        Settlement::Leave => {
                            report.failed += 1;
                            retries.spawn(retry(self.source.clone(), done.id, done.proof));
                        }
                        Settlement::Terminate => {
                            report.failed += 1;
                            let settle = spans.settle(&done.span, "terminate");
                            acks.spawn(terminate(self.source.clone(), done.id, done.proof).instrument(settle));
                        }
                    }
                    if done.unavailable {
                        breaker.trip();
                    }
                }
                Some(_) = retries.join_next(), if !retries.is_empty() => {}
                Some(acked) = acks.join_next(), if !acks.is_empty() => {
                    if let Ok(acked) = acked {
                        record_ack(&mut report, acked);
                    }
                }
                message = next_message(&mut link.stream), if link.stream.is_some() => {
                    link.last_heard = Instant::now();
                    match message {
                    Some(Ok(Incoming::Keepalive)) => {}
                    Some(Ok(Incoming::Delivery(delivery, proof))) => {
                        report.received += 1;
                        link.outstanding = link.outstanding.saturating_sub(1);
                        // Into a free slot at once; behind the held ones
                        // otherwise, in the order they came, and held too
                        // while the breaker is open (credit granted before
                        // it opened): started now it would only spend an
                        // attempt on a database that is away.
                        if handlers.len() < concurrency as usize && held.is_empty() && !breaker.is_open() {
                            let span = spans.process(&delivery);
                            handlers.spawn(handle(service.clone(), delivery, proof, self.probe.clone(), span));
                        } else {
                            held.push_back((delivery, proof));
                        }
                        set_in_hand(handlers.len(), held.len());
                    }
                    Some(Ok(Incoming::Notice(code))) => {
                        warn!(%code, "the source reported a stream error");
                    }
                    Some(Err(e)) => {
                        telemetry::stream_error(e.cause());
                        link.lost(&format!("delivery stream broke: {e}"));
                    }
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
                _ = sleep_until(link.reconnect_at), if link.stream.is_none() && !paused => {}
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
        for (delivery, proof) in held.drain(..) {
            acks.spawn(release(self.source.clone(), delivery.id().clone(), proof));
        }
        report.abandoned += handlers.len() as u64;
        handlers.abort_all();
        retries.abort_all();
        while let Ok(Some(_)) = timeout_at(deadline, handlers.join_next()).await {}
        set_in_hand(0, 0);
        while let Ok(Some(acked)) = timeout_at(deadline, acks.join_next()).await {
            if let Ok(acked) = acked {
                record_ack(&mut report, acked);
            }
        }
        report.abandoned += acks.len() as u64;
        acks.abort_all();
        // A moment beyond the grace, so that acknowledgements handed over
        // at its end still leave.
        let _ = timeout_at(
            deadline.max(Instant::now()) + CLOSE_TIMEOUT,
            self.source.shutdown(),
        )
        .await;
        fatal.map_or(Ok(report), Err)
    }
}

fn set_in_hand(running: usize, held: usize) {
    metrics::gauge!(telemetry::IN_FLIGHT).set(running as f64);
    metrics::gauge!(telemetry::HELD).set(held as f64);
}

async fn next_message<T: LeaseStream>(
    stream: &mut Option<T>,
) -> Option<Result<Incoming<T::Proof>, T::Error>> {
    match stream {
        Some(s) => s.next().await,
        None => std::future::pending().await,
    }
}

/// Runs one delivery through the service; the proof stays here, next to
/// the future, for the ACK — the service never sees it.
async fn handle<S, P>(
    service: S,
    delivery: Delivery<Bytes>,
    proof: P,
    probe: Option<Arc<dyn Probe>>,
    span: Span,
) -> Handled<P>
where
    S: Service<Delivery<Bytes>>,
    S::Error: Into<BoxError>,
{
    let id = delivery.id().clone();
    let attempt = delivery.attempt();
    let last = delivery
        .attempts_allowed()
        .filter(|_| delivery.is_last_attempt());
    let answer = match service.oneshot(delivery).instrument(span.clone()).await {
        Ok(_) => Ok(()),
        Err(e) => {
            let e: BoxError = e.into();
            // One pass over the error chain; the probe knows its own
            // dependency's errors (the inbox's), the vocabulary the rest.
            let failure = failure::classify(&*e, &|error| {
                probe.as_ref().and_then(|probe| probe.recognize(error))
            });
            // The layer that made the error logged the delivery already
            // (the inbox logs each one it handles); a tower layer outside
            // it (a timeout, load shedding) or a service of one's own did
            // not.
            if !failure.logged {
                info!(class = failure.class.as_str(), delivery = %id, attempt, error = %e, "delivery");
            }
            // The source gives up on it now: the one line an operator must
            // see, once per delivery, and where to go from it. A malformed
            // one is dropped for good (`Terminate`) and said so by itself.
            if let Some(allowed) = last.filter(|_| !failure.malformed) {
                error!(
                    delivery = %id,
                    attempt,
                    attempts_allowed = allowed,
                    error = %e,
                    "the last attempt the source allows failed: it gives the delivery up; `receiver failures` lists it and what it would become, `receiver replay` brings it back"
                );
            }
            span::failed(&span, failure.class.as_str());
            Err(failure)
        }
    };
    Handled {
        id,
        span,
        settlement: settle(&answer),
        unavailable: answer.as_ref().err().is_some_and(|f| f.unavailable),
        proof,
    }
}
