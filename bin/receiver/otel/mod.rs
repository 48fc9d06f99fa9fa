//! The receiver's traces: the library's `tracing` spans (a delivery's
//! processing, its transaction, each statement, its acknowledgement)
//! bridged to OpenTelemetry and exported over OTLP/HTTP (protobuf).
//!
//! Configured by the standard variables only (`settings.rs`): nothing is
//! exported, and nothing is paid, unless
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT`
//! is set. `OTEL_SERVICE_NAME` (default `receiver`) and
//! `OTEL_RESOURCE_ATTRIBUTES` are read by the SDK; the sampler and the
//! protocol are read here, so that a value that cannot be read stops the
//! command instead of being replaced by a default.
//!
//! The export never stands in a delivery's way (`export.rs`): spans go to
//! a bounded queue that a thread of the SDK drains, its requests run on a
//! small runtime of their own, both threads run at the lowest scheduling
//! priority, a collector that is down or slow only makes the queue drop
//! spans (counted, and warned of at most once a minute), and the flush at
//! shutdown has a bound of its own.

mod export;
mod settings;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry::Context;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider, SpanExporter,
};
use opentelemetry_sdk::Resource;

use result_inbox::consumer::TraceParent;

use self::export::{Bounded, Counted, OnOwnRuntime, EXPORT_TIMEOUT, QUEUE};
pub(crate) use self::settings::Endpoint;

/// How long the flush at shutdown may take, within the 10 s limit.
pub(crate) const FLUSH_LIMIT: Duration = Duration::from_secs(2);

/// The traces endpoint the standard variables configure, if any, checked
/// with the protocol and the sampler: a command that exports nothing
/// reads none of them.
pub(crate) fn endpoint() -> Result<Option<Endpoint>, String> {
    let Some(endpoint) = Endpoint::configured()? else {
        return Ok(None);
    };
    settings::check_protocol()?;
    settings::sampler()?;
    Ok(Some(endpoint))
}

/// The exporting provider, once made: flushed and shut down at exit.
static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();
/// Where the provider exports.
static EXPORTING: OnceLock<Endpoint> = OnceLock::new();

/// The OTLP/HTTP exporter to `endpoint`, as the variables configure its
/// headers, compression and time-out.
fn exporter(endpoint: &Endpoint) -> Result<opentelemetry_otlp::SpanExporter, String> {
    opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(endpoint.url.clone())
        .with_timeout(EXPORT_TIMEOUT)
        .with_http_client(OnOwnRuntime::new())
        .build()
        .map_err(|e| format!("{}: {e}", endpoint.variable))
}

/// The bridge from `tracing` to an exporting OpenTelemetry tracer, when an
/// endpoint is configured; `None` otherwise.
pub(crate) fn layer<S>() -> Result<
    Option<tracing_opentelemetry::OpenTelemetryLayer<S, opentelemetry_sdk::trace::Tracer>>,
    String,
>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    let Some(endpoint) = endpoint()? else {
        return Ok(None);
    };
    let sampler = settings::sampler()?;
    let exporter = Counted {
        exporter: exporter(&endpoint)?,
        shown: endpoint.shown(),
    };
    // The batch processor's own queue is larger than ours: the spans it
    // would drop silently are dropped, and counted, before they reach it.
    let processor = BatchSpanProcessor::builder(exporter)
        .with_batch_config(
            BatchConfigBuilder::default()
                .with_max_queue_size(2 * QUEUE)
                .build(),
        )
        .build();
    let processor = Bounded(processor);
    let mut resource = Resource::builder();
    if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name("receiver");
    }
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_sampler(sampler)
        .with_resource(resource.build())
        .build();
    let tracer = provider.tracer("receiver");
    let _ = PROVIDER.set(provider);
    let _ = EXPORTING.set(endpoint);
    Ok(Some(
        // Only what a trace needs: no source locations, module paths,
        // thread names or busy/idle times on every span, and no
        // OpenTelemetry context made current on each enter (nothing here
        // reads it).
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_tracked_inactivity(false)
            .with_location(false)
            .with_target(false)
            .with_threads(false)
            .with_context_activation(false),
    ))
}

/// Where traces are exported, once [`layer`] made the exporter.
pub(crate) fn exporting() -> Option<&'static Endpoint> {
    EXPORTING.get()
}

/// Whether the collector at `endpoint` takes an export: one request with
/// no span, sent as the exporter sends every batch (its headers, its
/// client, its retries within [`EXPORT_TIMEOUT`]). The error says what
/// the exporter says (a status code, or a network error), never the URL's
/// credentials.
pub(crate) async fn collector_answers(endpoint: &Endpoint) -> Result<(), String> {
    use opentelemetry_sdk::error::OTelSdkError;
    let answered = exporter(endpoint)?.export(Vec::new()).await;
    answered.map_err(|e| {
        let why = match e {
            OTelSdkError::InternalFailure(why) => why,
            OTelSdkError::Timeout(limit) => format!("no answer within {limit:?}"),
            other => other.to_string(),
        };
        format!(
            "the collector at {} took no export: {why}",
            endpoint.shown()
        )
    })
}

/// Exports what is still queued, within [`FLUSH_LIMIT`], and stops the
/// exporter. Nothing to do when nothing is exported.
pub(crate) fn shutdown() {
    let Some(provider) = PROVIDER.get() else {
        return;
    };
    let provider = provider.clone();
    let done = std::thread::spawn(move || {
        let _ = provider.force_flush();
        let _ = provider.shutdown();
    });
    let deadline = std::time::Instant::now() + FLUSH_LIMIT;
    while !done.is_finished() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Makes a delivery's span the child of the producer's span its trace
/// context names; a malformed one was never handed over. `None` when
/// nothing is exported: no delivery then pays for reading its context.
pub(crate) fn trace_parent() -> Option<TraceParent> {
    PROVIDER.get()?;
    Some(Arc::new(|span, trace| {
        use opentelemetry::propagation::TextMapPropagator;
        use tracing_opentelemetry::OpenTelemetrySpanExt;
        let mut carrier = std::collections::HashMap::new();
        carrier.insert("traceparent".to_owned(), trace.traceparent().to_owned());
        if let Some(state) = trace.tracestate() {
            carrier.insert("tracestate".to_owned(), state.to_owned());
        }
        let propagator = opentelemetry_sdk::propagation::TraceContextPropagator::new();
        let parent = propagator.extract_with_context(&Context::new(), &carrier);
        if parent.span().span_context().is_valid() {
            let _ = span.set_parent(parent);
        }
    }))
}
