//! The export's machinery: the HTTP client on a runtime of its own, the
//! bound on spans waiting, the count of spans lost, the warning while
//! exports fail, and the lowest scheduling priority for the threads that
//! do the work.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use opentelemetry::Context;
use opentelemetry_http::hyper::HyperClient;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{BatchSpanProcessor, SpanData, SpanExporter, SpanProcessor};
use opentelemetry_sdk::Resource;

/// How long one export request may take.
pub(super) const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);
/// Spans waiting for export at most; more are dropped, never waited for.
pub(super) const QUEUE: usize = 4096;
/// The least time between two warnings about failed exports.
const WARNING_EVERY: Duration = Duration::from_secs(60);

/// The exporter's HTTP client: hyper with rustls (https:// and http://),
/// its requests run on a runtime of their own, so that the SDK's export
/// thread has a reactor and no request ever runs on the runtime that
/// handles deliveries.
#[derive(Debug, Clone)]
pub(super) struct OnOwnRuntime {
    client: HyperClient<
        hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    >,
    runtime: tokio::runtime::Handle,
}

impl OnOwnRuntime {
    pub(super) fn new() -> Self {
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
const SPANS_DROPPED: &str = "receiver_trace_spans_dropped_total";

/// Spans handed to the exporter whose export has not ended yet.
static PENDING: AtomicUsize = AtomicUsize::new(0);
/// Spans dropped since the last warning.
static UNREPORTED: AtomicU64 = AtomicU64::new(0);

fn dropped(reason: &'static str, spans: usize) {
    metrics::counter!(SPANS_DROPPED, "reason" => reason).increment(spans as u64);
    UNREPORTED.fetch_add(spans as u64, Ordering::Relaxed);
}

/// The batch processor behind a bound of [`QUEUE`] spans, which counts
/// what it drops.
#[derive(Debug)]
pub(super) struct Bounded(pub(super) BatchSpanProcessor);

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

/// The exporter, counting the spans whose export failed, warning of it,
/// and ending their place in the queue either way.
#[derive(Debug)]
pub(super) struct Counted<E> {
    pub(super) exporter: E,
    /// The endpoint as the warning may name it.
    pub(super) shown: String,
}

impl<E: SpanExporter> SpanExporter for Counted<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        // Polled on the batch processor's thread, which turns the spans
        // into the request here.
        yield_to_deliveries();
        let spans = batch.len();
        let exported = self.exporter.export(batch).await;
        PENDING.fetch_sub(spans, Ordering::SeqCst);
        if let Err(e) = &exported {
            dropped("export_failed", spans);
            warn_of_failure(&self.shown, e);
        }
        exported
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.exporter.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.exporter.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.exporter.set_resource(resource);
    }
}

/// A warning that exports fail, at most one every [`WARNING_EVERY`], with
/// the spans dropped since the last one (the metric counts every one):
/// enough for an operator to notice, never a line per batch. The error
/// says a status code or "network error", never the URL or the answer's
/// body.
fn warn_of_failure(shown: &str, error: &opentelemetry_sdk::error::OTelSdkError) {
    static LAST: Mutex<Option<Instant>> = Mutex::new(None);
    let mut last = LAST.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if last.is_some_and(|at| at.elapsed() < WARNING_EVERY) {
        return;
    }
    *last = Some(Instant::now());
    let dropped = UNREPORTED.swap(0, Ordering::Relaxed);
    tracing::warn!(
        target: "receiver",
        endpoint = %shown,
        dropped,
        error = %error,
        "trace export failed; spans dropped since the last such warning (at most one a minute, all counted in {SPANS_DROPPED})"
    );
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
