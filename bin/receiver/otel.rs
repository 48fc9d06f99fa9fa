//! The receiver's traces: the library's `tracing` spans (a delivery's
//! processing, its transaction, each statement, its acknowledgement)
//! bridged to OpenTelemetry and exported over OTLP/HTTP (protobuf).
//!
//! Configured by the standard variables only: nothing is exported, and
//! nothing is paid, unless `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or
//! `OTEL_EXPORTER_OTLP_ENDPOINT` is set. `OTEL_SERVICE_NAME` (default
//! `receiver`), `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER` and
//! `OTEL_TRACES_SAMPLER_ARG` (parent-based by default) are read by the SDK
//! as its specification says.
//!
//! The export never stands in a delivery's way: spans go to a bounded
//! queue that a thread of the SDK drains, its requests run on a small
//! runtime of their own, both threads run at the lowest scheduling
//! priority, a collector that is down or slow only makes the queue drop
//! spans, and the flush at shutdown has a bound of its own.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry::Context;
use opentelemetry_http::hyper::HyperClient;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider, SpanData, SpanExporter,
    SpanProcessor,
};
use opentelemetry_sdk::Resource;

use result_inbox::consumer::TraceParent;

/// How long one export request may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);
/// Spans waiting for export at most; more are dropped, never waited for.
const QUEUE: usize = 4096;
/// How long the flush at shutdown may take, within the 10 s limit.
pub(crate) const FLUSH_LIMIT: Duration = Duration::from_secs(2);

/// The traces endpoint the standard variables configure, if any.
pub(crate) fn endpoint() -> Option<String> {
    let set = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").or_else(|| {
        set("OTEL_EXPORTER_OTLP_ENDPOINT")
            .map(|base| format!("{}/v1/traces", base.trim_end_matches('/')))
    })
}

/// The endpoint as it may be printed: without a `user:password@`.
pub(crate) fn shown(endpoint: &str) -> String {
    let Some((scheme, rest)) = endpoint.split_once("://") else {
        return endpoint.to_owned();
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((_, host)) => format!("{scheme}://<redacted>@{host}{path}"),
        None => endpoint.to_owned(),
    }
}

/// The exporting provider, once made: flushed and shut down at exit.
static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

/// The bridge from `tracing` to an exporting OpenTelemetry tracer, when an
/// endpoint is configured; `None` otherwise.
pub(crate) fn layer<S>() -> Result<
    Option<tracing_opentelemetry::OpenTelemetryLayer<S, opentelemetry_sdk::trace::Tracer>>,
    String,
>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    let Some(endpoint) = endpoint() else {
        return Ok(None);
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(endpoint.clone())
        .with_timeout(EXPORT_TIMEOUT)
        .with_http_client(OnOwnRuntime::new())
        .build()
        .map_err(|e| format!("OTEL_EXPORTER_OTLP_ENDPOINT: {e}"))?;
    // The batch processor's own queue is larger than ours: the spans it
    // would drop silently are dropped, and counted, before they reach it.
    let processor = BatchSpanProcessor::builder(Counted(exporter))
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
        .with_resource(resource.build())
        .build();
    let tracer = provider.tracer("receiver");
    let _ = PROVIDER.set(provider);
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

/// The exporter's HTTP client: hyper with rustls (https:// and http://),
/// its requests run on a runtime of their own, so that the SDK's export
/// thread has a reactor and no request ever runs on the runtime that
/// handles deliveries.
#[derive(Debug, Clone)]
struct OnOwnRuntime {
    client: HyperClient<
        hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    >,
    runtime: tokio::runtime::Handle,
}

impl OnOwnRuntime {
    fn new() -> Self {
        static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
        let runtime = RUNTIME.get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("otel-export")
                .on_thread_start(yield_to_deliveries)
                .enable_all()
                .build()
                .expect("a runtime for the trace exporter")
        });
        // Mozilla's roots, as for Orbit; the connector sets its own ALPN.
        let mut tls = (*result_inbox::orbit::OrbitTls::public_roots().config()).clone();
        tls.alpn_protocols.clear();
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .build();
        Self {
            client: HyperClient::new(connector, EXPORT_TIMEOUT, None),
            runtime: runtime.handle().clone(),
        }
    }
}

#[async_trait::async_trait]
impl HttpClient for OnOwnRuntime {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        self.runtime
            .spawn(async move { client.send_bytes(request).await })
            .await
            .map_err(|e| Box::new(e) as HttpError)?
    }
}

/// The metric of spans that were never exported, by `reason`:
/// `queue_full` (the collector is slower than the receiver, or away) or
/// `export_failed` (it refused or did not answer).
pub(crate) const SPANS_DROPPED: &str = "receiver_trace_spans_dropped_total";

/// Spans handed to the exporter whose export has not ended yet.
static PENDING: AtomicUsize = AtomicUsize::new(0);

fn dropped(reason: &'static str, spans: usize) {
    metrics::counter!(SPANS_DROPPED, "reason" => reason).increment(spans as u64);
}

/// The batch processor behind a bound of [`QUEUE`] spans, which counts
/// what it drops.
#[derive(Debug)]
struct Bounded(BatchSpanProcessor);

impl SpanProcessor for Bounded {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, cx: &Context) {
        self.0.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        if PENDING.fetch_add(1, Ordering::SeqCst) >= QUEUE {
            PENDING.fetch_sub(1, Ordering::SeqCst);
            dropped("queue_full", 1);
            return;
        }
        self.0.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.0.set_resource(resource);
    }
}

/// The exporter, counting the spans whose export failed and ending their
/// place in the queue either way.
#[derive(Debug)]
struct Counted<E>(E);

impl<E: SpanExporter> SpanExporter for Counted<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        // Polled on the batch processor's thread, which turns the spans
        // into the request here.
        yield_to_deliveries();
        let spans = batch.len();
        let exported = self.0.export(batch).await;
        PENDING.fetch_sub(spans, Ordering::SeqCst);
        if exported.is_err() {
            dropped("export_failed", spans);
        }
        exported
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.0.set_resource(resource);
    }
}

/// Lowers the calling thread to the lowest scheduling priority (nice 19),
/// once: the export's work (spans turned into OTLP requests, the requests
/// sent) then runs on the CPU time that deliveries leave, and a machine
/// short of it drops spans (counted) rather than slowing deliveries. On
/// Linux a nice value belongs to one thread; elsewhere it would lower the
/// whole process, so nothing is changed there.
fn yield_to_deliveries() {
    #[cfg(target_os = "linux")]
    {
        thread_local!(static LOWERED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) });
        if !LOWERED.replace(true) {
            // SAFETY: setpriority takes three integers and touches no
            // memory of this process; `0` names the calling thread.
            let _ = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, NICEST) };
        }
    }
}

/// The lowest scheduling priority a thread may take.
#[cfg(target_os = "linux")]
const NICEST: libc::c_int = 19;
