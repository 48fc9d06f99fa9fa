//! The span of each delivery attempt, named and attributed as the
//! OpenTelemetry semantic conventions for messaging name a consumer's
//! processing: `process <destination>`, kind CONSUMER, with the messaging
//! system, the destination, the consumer group (the receiver name, which
//! the consumer's [`Probe`](crate::probe::Probe) knows) from its start
//! and, from the layer that knows them, the message id (the event id) and
//! the outcome. The acknowledgement is a `settle` span under it.
//!
//! Recorded with `tracing` only: a subscriber that exports spans (the
//! `receiver` binary's, with an OTLP endpoint) makes a trace of it. A
//! producer's trace context, which a source hands over with the delivery,
//! becomes the span's parent through a [`TraceParent`] hook, since only
//! the exporting side knows how its spans take a remote parent.

use std::sync::Arc;

use tracing::{field, Span};

use crate::delivery::{Delivery, TraceContext};

/// Makes a delivery's span the child of the producer's trace: called with
/// each new span, before anything happens in it, and the trace context the
/// delivery carried. See [`Consumer::with_trace_parent`](super::Consumer::with_trace_parent).
pub type TraceParent = Arc<dyn Fn(&Span, &TraceContext) + Send + Sync>;

/// What every delivery's span of one consumer shares.
#[derive(Clone)]
pub(super) struct Spans {
    pub(super) system: &'static str,
    pub(super) destination: String,
    /// The receiver name, when the probe knows one.
    pub(super) group: Option<String>,
    pub(super) parent: Option<TraceParent>,
}

impl Spans {
    /// The span of one attempt of `delivery`.
    pub(super) fn process<B>(&self, delivery: &Delivery<B>) -> Span {
        let span = tracing::info_span!(
            "process",
            otel.name = %format_args!("process {}", self.destination),
            otel.kind = "consumer",
            messaging.system = self.system,
            messaging.operation.type = "process",
            messaging.operation.name = "process",
            messaging.destination.name = %self.destination,
            messaging.consumer.group.name = self.group.as_deref(),
            messaging.message.id = field::Empty,
            delivery.id = %delivery.id(),
            delivery.attempt = delivery.attempt(),
            outcome = field::Empty,
            error.type = field::Empty,
            otel.status_code = field::Empty,
        );
        if let (Some(parent), Some(trace)) = (&self.parent, delivery.trace()) {
            parent(&span, trace);
        }
        span
    }

    /// The span of a delivery's acknowledgement (or of the request to drop
    /// it), under its processing span.
    pub(super) fn settle(&self, process: &Span, operation: &'static str) -> Span {
        tracing::info_span!(
            parent: process,
            "settle",
            otel.name = %format_args!("settle {}", self.destination),
            otel.kind = "client",
            messaging.system = self.system,
            messaging.operation.type = "settle",
            messaging.operation.name = operation,
            messaging.destination.name = %self.destination,
            outcome = field::Empty,
            otel.status_code = field::Empty,
        )
    }
}

/// Marks a delivery's span as failed with `class`.
pub(super) fn failed(span: &Span, class: &str) {
    span.record("outcome", class);
    span.record("error.type", class);
    span.record("otel.status_code", "ERROR");
}
