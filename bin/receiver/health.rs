//! The `receiver` binary's HTTP endpoint for operators: `/metrics` in the
//! Prometheus text format, `/healthz` (the process runs) and `/readyz` (the
//! stream is open and the database answers; `503` otherwise), the way
//! Kubernetes probes and Prometheus scrapes expect them.
//!
//! Only the binary installs an exporter (see `result_inbox::telemetry`): a
//! program that embeds the library records into its own.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{header, Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};

use result_inbox::consumer::Health;
use result_inbox::scope::InboxScope;
use result_inbox::telemetry;

use crate::exit::{config, fail, Failed, EXIT_FAILED};

/// Buckets of the apply-duration histogram, in seconds: from a fast local
/// apply (about a millisecond) to the 5 s transaction budget.
const APPLY_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

/// Buckets of the batch-size histogram: up to `--batch-max`'s 64.
const BATCH_BUCKETS: [f64; 7] = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0];

/// Buckets of the outbox's COMMIT-to-sent histogram, in seconds: from a
/// relay woken by the COMMIT (milliseconds) through its poll (1 s) to an
/// endpoint that was down for minutes.
const COMMIT_TO_SENT_BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0, 600.0,
];

/// Buckets of the event-age histogram, in seconds: from an event applied
/// as it happens (a few milliseconds after the platform recorded it)
/// through redeliveries after a lease (tens of seconds) to a backlog of
/// hours.
const EVENT_AGE_BUCKETS: [f64; 16] = [
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
    21600.0,
];

/// Installs the process-wide Prometheus recorder (once per process) and
/// describes the receiver's series. `labels` go on every series: the
/// receiver's name and queue, one value each for the whole process, so
/// that one Prometheus can tell its receivers apart.
pub fn install_recorder(labels: &[(&str, String)]) -> Result<PrometheusHandle, BuildError> {
    let mut builder = PrometheusBuilder::new();
    for (name, value) in labels {
        builder = builder.add_global_label(*name, value.clone());
    }
    let handle = builder
        .set_buckets_for_metric(
            Matcher::Full(telemetry::EVENT_AGE.to_owned()),
            &EVENT_AGE_BUCKETS,
        )?
        .set_buckets_for_metric(
            Matcher::Full(telemetry::APPLY_DURATION.to_owned()),
            &APPLY_BUCKETS,
        )?
        .set_buckets_for_metric(
            Matcher::Full(telemetry::BATCH_SIZE.to_owned()),
            &BATCH_BUCKETS,
        )?
        .set_buckets_for_metric(
            Matcher::Full(telemetry::OUTBOX_COMMIT_TO_SENT.to_owned()),
            &COMMIT_TO_SENT_BUCKETS,
        )?
        .install_recorder()?;
    telemetry::describe();
    Ok(handle)
}

/// A running endpoint.
#[derive(Debug)]
pub struct Endpoint {
    /// The address it listens on (the real port when `:0` was asked for).
    pub addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Endpoint {
    /// Listens on `addr` and serves until [`Endpoint::stop`] or the end of
    /// the runtime.
    pub async fn start(
        addr: SocketAddr,
        metrics: PrometheusHandle,
        health: Health,
    ) -> std::io::Result<Endpoint> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(serve(listener, metrics, health));
        Ok(Endpoint { addr, task })
    }

    /// Stops listening.
    pub fn stop(self) {
        self.task.abort();
    }
}

async fn serve(listener: TcpListener, metrics: PrometheusHandle, health: Health) {
    // Histograms are folded into their buckets by the upkeep, which the
    // exporter leaves to whoever serves it. A JoinSet aborts its tasks when
    // dropped: the upkeep ends with this task.
    let mut upkeep = JoinSet::new();
    let handle = metrics.clone();
    upkeep.spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        loop {
            tick.tick().await;
            handle.run_upkeep();
        }
    });
    loop {
        let Ok((stream, _peer)) = listener.accept().await else {
            continue;
        };
        let metrics = metrics.clone();
        let health = health.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request: Request<Incoming>| {
                let answer = answer(&request, &metrics, &health);
                async move { Ok::<_, Infallible>(answer) }
            });
            // A client that goes away mid-request is its own business.
            let _ = http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(Duration::from_secs(5))
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

fn answer(
    request: &Request<Incoming>,
    metrics: &PrometheusHandle,
    health: &Health,
) -> Response<Full<Bytes>> {
    if request.method() != Method::GET {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET\n");
    }
    match request.uri().path() {
        "/metrics" => {
            let mut response = text(StatusCode::OK, metrics.render());
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            response
        }
        "/healthz" => text(StatusCode::OK, "ok\n"),
        "/readyz" => {
            let stream = health.stream_open();
            let database = health.database_reachable();
            let body = format!("stream_open={stream} database_reachable={database}\n");
            let status = if stream && database {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            text(status, body)
        }
        _ => text(StatusCode::NOT_FOUND, "not found\n"),
    }
}

fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    response
}

/// The metrics endpoint, when an address is configured.
pub(crate) async fn metrics_endpoint(
    addr: Option<String>,
    health: &Health,
) -> Result<Option<Endpoint>, Failed> {
    labelled_metrics_endpoint(addr, health, None).await
}

/// The metrics endpoint of a consumer of `scope`, when an address is
/// configured: every series carries `receiver` and `queue`.
pub(crate) async fn consumer_metrics_endpoint(
    addr: Option<String>,
    health: &Health,
    scope: &InboxScope,
) -> Result<Option<Endpoint>, Failed> {
    labelled_metrics_endpoint(addr, health, Some(scope)).await
}

async fn labelled_metrics_endpoint(
    addr: Option<String>,
    health: &Health,
    scope: Option<&InboxScope>,
) -> Result<Option<Endpoint>, Failed> {
    let Some(addr) = addr else {
        return Ok(None);
    };
    let addr: SocketAddr = addr.parse().map_err(|_| {
        config(format!(
            "RECEIVER_METRICS_ADDR: {addr:?} is not an address like 127.0.0.1:9464"
        ))
    })?;
    let labels: Vec<(&str, String)> = scope
        .map(|scope| {
            vec![
                ("receiver", scope.receiver.as_str().to_owned()),
                ("queue", scope.queue_id.as_str().to_owned()),
            ]
        })
        .unwrap_or_default();
    let handle = install_recorder(&labels)
        .map_err(|e| fail(EXIT_FAILED, format!("metrics recorder: {e}")))?;
    // The health was made before the recorder: its state from now on.
    health.report();
    let endpoint = Endpoint::start(addr, handle, health.clone())
        .await
        .map_err(|e| {
            config(format!(
                "RECEIVER_METRICS_ADDR: cannot listen on {addr}: {e}"
            ))
        })?;
    tracing::info!(addr = %endpoint.addr, "metrics endpoint listening (/metrics, /healthz, /readyz)");
    Ok(Some(endpoint))
}
