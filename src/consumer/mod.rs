//! The consumer: one subscription's deliveries through a tower service, and
//! an ACK for every `Ok` — and only for those.
//!
//! The consumer opens the subscription's WebSocket stream, grants as much
//! credit as it has free handler slots (so at most `concurrency` deliveries
//! are in its hands at once), and runs each delivery through a clone of the
//! service. When the service answers, [`settle`] decides: `Ok` is ACKed with
//! the attempt's lease proof over HTTP, `Err` is left for redelivery.
//!
//! An ACK whose answer is lost (connection cut, time-out, server error) is
//! re-reported with the *same* proof until Orbit answers; that is safe because
//! the ACK is idempotent for its proof. A stream that breaks is reopened with
//! backoff while handlers and ACKs carry on.
//!
//! On shutdown the consumer stops taking deliveries (closes the stream),
//! cancels in-flight handlers — dropping an inbox transaction rolls it back,
//! and an interrupted COMMIT is simply not ACKed — then gives pending ACKs
//! the rest of the grace period. It never pauses the subscription: other
//! consumers of it carry on.

mod settle;

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use tokio::task::JoinSet;
use tokio::time::{sleep_until, Instant};
use tower::{Service, ServiceExt};
use tracing::{info, warn};

pub use self::settle::{settle, Settlement};
use crate::delivery::{Delivery, DeliveryId, LeaseProof};
use crate::ids::{QueueId, SubscriptionId};
use crate::orbit::{AckOutcome, DeliveryStream, OrbitClient, OrbitError, StreamMessage};
use crate::BoxError;

/// How a consumer behaves.
#[derive(Debug, Clone)]
pub struct ConsumerOptions {
    /// Most deliveries handled at once. Default 4.
    pub concurrency: u32,
    /// First wait before reopening a broken stream or re-reporting an ACK;
    /// doubles up to `retry_max`. Default 200 ms.
    pub retry_min: Duration,
    /// Longest wait between retries. Default 5 s.
    pub retry_max: Duration,
    /// After shutdown is requested, how long pending ACKs may still take
    /// before the consumer returns anyway. Default 10 s.
    pub shutdown_grace: Duration,
    /// A stream that delivers nothing, not even a ping, for this long is
    /// taken for dead and reopened (Orbit pings every 15 s). Default 60 s.
    pub stream_idle_timeout: Duration,
}

impl Default for ConsumerOptions {
    fn default() -> Self {
        Self {
            concurrency: 4,
            retry_min: Duration::from_millis(200),
            retry_max: Duration::from_secs(5),
            shutdown_grace: Duration::from_secs(10),
            stream_idle_timeout: Duration::from_secs(60),
        }
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
    /// Orbit refused or could not be reached.
    #[error("{0}")]
    Orbit(#[from] OrbitError),
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
    /// ACKs still unanswered when the shutdown grace ran out, and handlers
    /// cancelled by shutdown. Their deliveries come again.
    pub abandoned: u64,
}

/// A consumer of one subscription.
#[derive(Debug)]
pub struct Consumer {
    client: OrbitClient,
    subscription: SubscriptionId,
    options: ConsumerOptions,
}

struct Handled {
    id: DeliveryId,
    proof: LeaseProof,
    settlement: Settlement,
}

enum AckResult {
    Confirmed(DeliveryId, AckOutcome),
    Refused(DeliveryId, OrbitError),
}

impl Consumer {
    /// Checks the subscription before anything is leased: it must exist, be
    /// readable with this token and be bound to `expected_queue`.
    pub async fn connect(
        client: OrbitClient,
        subscription: SubscriptionId,
        expected_queue: &QueueId,
        options: ConsumerOptions,
    ) -> Result<Consumer, ConsumerError> {
        let found = client.subscription(&subscription).await?;
        if &found.queue_id != expected_queue {
            return Err(ConsumerError::QueueMismatch {
                subscription,
                expected: expected_queue.clone(),
                actual: found.queue_id,
            });
        }
        Ok(Consumer {
            client,
            subscription,
            options,
        })
    }

    /// Consumes until `shutdown` resolves, then drains as the module docs
    /// say. Returns an error only when Orbit refuses the stream for good
    /// (token, scope, queue, unknown subscription).
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
        let concurrency = self.options.concurrency.max(1);
        let mut report = ConsumerReport::default();
        let mut handlers: JoinSet<Handled> = JoinSet::new();
        let mut acks: JoinSet<AckResult> = JoinSet::new();
        let mut stream: Option<DeliveryStream> = None;
        let mut backoff = Backoff::new(self.options.retry_min, self.options.retry_max);
        let mut reconnect_at = Instant::now();
        let mut last_heard = Instant::now();
        let idle = self.options.stream_idle_timeout;
        let mut fatal = None;
        tokio::pin!(shutdown);

        loop {
            if stream.is_none() && Instant::now() >= reconnect_at {
                let opened = tokio::select! {
                    biased;
                    _ = &mut shutdown => break,
                    opened = self.open(concurrency.saturating_sub(handlers.len() as u32)) => opened,
                };
                match opened {
                    Ok(s) => {
                        info!(subscription = %self.subscription, "delivery stream open");
                        stream = Some(s);
                        last_heard = Instant::now();
                        backoff.reset();
                    }
                    Err(e) if e.is_retryable() => {
                        warn!(error = %e, "delivery stream unavailable, retrying");
                        reconnect_at = Instant::now() + backoff.next();
                    }
                    Err(e) => {
                        fatal = Some(e);
                        break;
                    }
                }
            }

            tokio::select! {
                biased;
                _ = &mut shutdown => break,
                Some(done) = handlers.join_next(), if !handlers.is_empty() => {
                    let Ok(done) = done else { continue };
                    match done.settlement {
                        Settlement::Ack => {
                            report.succeeded += 1;
                            let client = self.client.clone();
                            let backoff = Backoff::new(self.options.retry_min, self.options.retry_max);
                            acks.spawn(ack_until_answered(client, done.id, done.proof, backoff));
                        }
                        Settlement::Leave => report.failed += 1,
                    }
                    if let Some(s) = stream.as_mut() {
                        if let Err(e) = s.grant(1).await {
                            warn!(error = %e, "delivery stream broke");
                            stream = None;
                            reconnect_at = Instant::now() + backoff.next();
                        }
                    }
                }
                Some(acked) = acks.join_next(), if !acks.is_empty() => {
                    if let Ok(acked) = acked {
                        record_ack(&mut report, acked);
                    }
                }
                message = next_message(&mut stream), if stream.is_some() => {
                    last_heard = Instant::now();
                    match message {
                    Some(Ok(StreamMessage::Keepalive)) => {}
                    Some(Ok(StreamMessage::Delivery(delivery))) => {
                        report.received += 1;
                        handlers.spawn(handle(service.clone(), delivery));
                    }
                    Some(Ok(StreamMessage::Error { code })) => {
                        warn!(%code, "Orbit reported a stream error");
                    }
                    Some(Err(e)) => {
                        warn!(error = %e, "delivery stream broke");
                        stream = None;
                        reconnect_at = Instant::now() + backoff.next();
                    }
                    None => {
                        info!("delivery stream closed by Orbit");
                        stream = None;
                        reconnect_at = Instant::now() + backoff.next();
                    }
                }},
                _ = sleep_until(last_heard + idle), if stream.is_some() => {
                    warn!("delivery stream silent for too long; reopening it");
                    if let Some(s) = stream.take() {
                        let _ = tokio::time::timeout(Duration::from_secs(1), s.close()).await;
                    }
                    reconnect_at = Instant::now() + backoff.next();
                }
                _ = sleep_until(reconnect_at), if stream.is_none() => {}
            }
        }

        // Stop taking deliveries, cancel what is in flight, let ACKs finish.
        let deadline = Instant::now() + self.options.shutdown_grace;
        if let Some(s) = stream.take() {
            let _ = tokio::time::timeout_at(deadline, s.close()).await;
        }
        report.abandoned += handlers.len() as u64;
        handlers.abort_all();
        while handlers.join_next().await.is_some() {}
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

    async fn open(&self, credit: u32) -> Result<DeliveryStream, OrbitError> {
        let mut stream = self.client.open_stream(&self.subscription).await?;
        stream.grant(credit).await?;
        Ok(stream)
    }
}

async fn next_message(
    stream: &mut Option<DeliveryStream>,
) -> Option<Result<StreamMessage, OrbitError>> {
    match stream {
        Some(s) => s.next_message().await,
        None => std::future::pending().await,
    }
}

async fn handle<S>(service: S, delivery: Delivery<Bytes>) -> Handled
where
    S: Service<Delivery<Bytes>>,
    S::Error: Into<BoxError>,
{
    let id = delivery.id().clone();
    let attempt = delivery.attempt();
    let proof = delivery.lease_proof().clone();
    let answer = match service.oneshot(delivery).await {
        Ok(_) => Ok(()),
        Err(e) => Err(e.into()),
    };
    if let Err(e) = &answer {
        info!(delivery = %id, attempt, error = %e, "not acknowledged; left for redelivery");
    }
    Handled {
        id,
        proof,
        settlement: settle(&answer),
    }
}

async fn ack_until_answered(
    client: OrbitClient,
    id: DeliveryId,
    proof: LeaseProof,
    mut backoff: Backoff,
) -> AckResult {
    loop {
        match client.ack(&id, &proof).await {
            Ok(outcome) => return AckResult::Confirmed(id, outcome),
            Err(e) if e.is_retryable() => {
                warn!(delivery = %id, error = %e, "ACK answer lost; re-reporting with the same proof");
                tokio::time::sleep(backoff.next()).await;
            }
            Err(e) => return AckResult::Refused(id, e),
        }
    }
}

fn record_ack(report: &mut ConsumerReport, acked: AckResult) {
    match acked {
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

/// Exponential backoff with jitter, so that many consumers do not retry in
/// lockstep.
#[derive(Debug)]
struct Backoff {
    min: Duration,
    max: Duration,
    current: Duration,
}

impl Backoff {
    fn new(min: Duration, max: Duration) -> Self {
        Self {
            min,
            max,
            current: min,
        }
    }

    fn reset(&mut self) {
        self.current = self.min;
    }

    fn next(&mut self) -> Duration {
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
