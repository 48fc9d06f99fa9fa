//! The acknowledgement path: ACKs re-reported until answered, and the
//! one-try requests to drop or give back a delivery.

use std::sync::Arc;

use tracing::{debug, info, warn};

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
    let mut rereports = 0u32;
    loop {
        match source.ack(&id, &proof).await {
            Ok(outcome) => {
                telemetry::ack("confirmed");
                tracing::Span::current().record("outcome", "confirmed");
                return AckResult::Confirmed(id, outcome);
            }
            Err(e) if e.is_retryable() => {
                telemetry::ack("rereported");
                rereports = rereports.saturating_add(1);
                if worth_a_warning(rereports) {
                    warn!(delivery = %id, error = %e, rereports, "ACK answer lost; re-reporting with the same proof");
                } else {
                    debug!(delivery = %id, error = %e, rereports, "ACK answer lost; re-reporting with the same proof");
                }
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

/// Whether the `n`th re-report of one ACK is logged as a warning: the
/// first, then the 2nd, 4th, 8th…, so that a broker that answers no one
/// for a while (an election) writes a few lines per delivery, not one per
/// attempt; `receiver_acks_total{result="rereported"}` counts them all.
fn worth_a_warning(n: u32) -> bool {
    n.is_power_of_two()
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

#[cfg(test)]
mod tests {
    use super::worth_a_warning;

    #[test]
    fn an_ack_re_reported_again_and_again_warns_at_the_first_and_then_at_each_doubling() {
        let warned: Vec<u32> = (1..=40).filter(|n| worth_a_warning(*n)).collect();
        assert_eq!(warned, [1, 2, 4, 8, 16, 32]);
    }
}
