//! The acknowledgement path: ACKs re-reported until answered, and the
//! one-try requests to drop or give back a delivery.

use std::sync::Arc;

use tracing::{info, warn};

use super::ConsumerReport;
use crate::delivery::DeliveryId;
use crate::retry::Backoff;
use crate::source::{AckOutcome, Source, SourceError};
use crate::telemetry;
use crate::BoxError;

pub(super) enum AckResult {
    Confirmed(DeliveryId, AckOutcome),
    Refused(DeliveryId, BoxError),
    /// The source dropped the delivery for good (`true`) or cannot
    /// (`false`).
    Terminated(DeliveryId, bool),
    /// The source took back a held delivery (`true`) or cannot (`false`).
    Released(bool),
}

pub(super) async fn ack_until_answered<Src: Source>(
    source: Arc<Src>,
    id: DeliveryId,
    proof: Src::Proof,
    mut backoff: Backoff,
) -> AckResult {
    loop {
        match source.ack(&id, &proof).await {
            Ok(outcome) => {
                telemetry::ack("confirmed");
                tracing::Span::current().record("outcome", "confirmed");
                return AckResult::Confirmed(id, outcome);
            }
            Err(e) if e.is_retryable() => {
                telemetry::ack("rereported");
                warn!(delivery = %id, error = %e, "ACK answer lost; re-reporting with the same proof");
                tokio::time::sleep(backoff.next()).await;
            }
            Err(e) => {
                telemetry::ack("refused");
                let span = tracing::Span::current();
                span.record("outcome", "refused");
                span.record("otel.status_code", "ERROR");
                return AckResult::Refused(id, Box::new(e));
            }
        }
    }
}

/// One try: a lost `+TERM` costs nothing, the delivery comes again and is
/// rejected again.
pub(super) async fn terminate<Src: Source>(
    source: Arc<Src>,
    id: DeliveryId,
    proof: Src::Proof,
) -> AckResult {
    let done = source.terminate(&id, &proof).await.unwrap_or_else(|e| {
        warn!(delivery = %id, error = %e, "could not ask the source to drop a malformed delivery; it will come again");
        false
    });
    AckResult::Terminated(id, done)
}

/// One try: a lost `-NAK` costs what not sending it costs, the lease runs
/// out.
pub(super) async fn release<Src: Source>(
    source: Arc<Src>,
    id: DeliveryId,
    proof: Src::Proof,
) -> AckResult {
    AckResult::Released(source.release(&id, &proof).await.unwrap_or_else(|e| {
        warn!(delivery = %id, error = %e, "could not give a held delivery back; it comes again when its lease runs out");
        false
    }))
}

/// One try: a failed attempt the source could not be told of comes again
/// when the source's own time runs out (RabbitMQ: its channel closes).
pub(super) async fn retry<Src: Source>(source: Arc<Src>, id: DeliveryId, proof: Src::Proof) {
    if let Err(e) = source.retry(&id, &proof).await {
        warn!(delivery = %id, error = %e, "could not give a failed delivery back; it comes again when the source gives up on it");
    }
}

pub(super) fn record_ack(report: &mut ConsumerReport, acked: AckResult) {
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
