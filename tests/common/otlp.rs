//! An OTLP/HTTP receiver of traces for the tests: what a collector does
//! with `POST /v1/traces` (protobuf), so that the real exporter, its
//! batching and its HTTP requests run. Each request's body is kept as it
//! came and decoded with the protocol's own generated messages when the
//! test reads the spans: a collector decodes on a machine of its own, and
//! a benchmark on two cores should not charge its work to the receiver.
#![allow(dead_code)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use prost::Message;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// One span as the receiver got it, with its resource's attributes.
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    pub name: String,
    /// `SpanKind` as the protocol numbers it (2 server, 3 client, 5 consumer, 1 internal).
    pub kind: i32,
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: String,
    pub attributes: Vec<(String, String)>,
    /// Links: (trace id, span id).
    pub links: Vec<(String, String)>,
    /// Events: name and attributes.
    pub events: Vec<(String, Vec<(String, String)>)>,
    /// `Status.code`: 0 unset, 1 ok, 2 error.
    pub status: i32,
    pub resource: Vec<(String, String)>,
}

impl ReceivedSpan {
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

pub const KIND_INTERNAL: i32 = 1;
pub const KIND_CLIENT: i32 = 3;
pub const KIND_CONSUMER: i32 = 5;

/// A receiver on a free loopback port; stops when dropped.
pub struct OtlpReceiver {
    pub addr: SocketAddr,
    bodies: Arc<Mutex<Vec<Bytes>>>,
    refusing: Arc<AtomicBool>,
    /// Requests answered with 503 while refusing.
    refused: Arc<AtomicUsize>,
    accept: JoinHandle<()>,
}

impl OtlpReceiver {
    pub async fn start() -> OtlpReceiver {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let refusing = Arc::new(AtomicBool::new(false));
        let refused = Arc::new(AtomicUsize::new(0));
        let accept = tokio::spawn({
            let bodies = bodies.clone();
            let refusing = refusing.clone();
            let refused = refused.clone();
            async move {
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        return;
                    };
                    let bodies = bodies.clone();
                    let refusing = refusing.clone();
                    let refused = refused.clone();
                    tokio::spawn(async move {
                        let service = hyper::service::service_fn(move |request| {
                            receive(request, bodies.clone(), refusing.clone(), refused.clone())
                        });
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    });
                }
            }
        });
        OtlpReceiver {
            addr,
            bodies,
            refusing,
            refused,
            accept,
        }
    }

    /// `OTEL_EXPORTER_OTLP_ENDPOINT` for this receiver.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Answer every export with 503, as a collector that is overloaded.
    pub fn refuse(&self, refusing: bool) {
        self.refusing.store(refusing, Ordering::SeqCst);
    }

    /// How many requests were answered with 503 so far.
    pub fn refused(&self) -> usize {
        self.refused.load(Ordering::SeqCst)
    }

    /// Every span received so far, decoded; panics on a request that was
    /// not an `ExportTraceServiceRequest`.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        let bodies = self.bodies.lock().unwrap().clone();
        let mut spans = Vec::new();
        for body in bodies {
            let export = ExportTraceServiceRequest::decode(body)
                .expect("an export request is an ExportTraceServiceRequest in protobuf");
            decode_into(export, &mut spans);
        }
        spans
    }

    /// Waits until `done` holds for the spans received, or panics.
    pub async fn wait_for(
        &self,
        limit: Duration,
        done: impl Fn(&[ReceivedSpan]) -> bool,
    ) -> Vec<ReceivedSpan> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let spans = self.spans();
            if done(&spans) {
                return spans;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "spans received: {:#?}",
                spans.iter().map(|s| &s.name).collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The spans received once `n` of them are delivery attempts
    /// (`process …`), or a panic after 10 s.
    pub async fn wait_for_processes(&self, n: usize) -> Vec<ReceivedSpan> {
        self.wait_for(Duration::from_secs(10), |spans| {
            spans
                .iter()
                .filter(|s| s.name.starts_with("process"))
                .count()
                == n
        })
        .await
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn receive(
    request: Request<hyper::body::Incoming>,
    bodies: Arc<Mutex<Vec<Bytes>>>,
    refusing: Arc<AtomicBool>,
    refused: Arc<AtomicUsize>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = request.uri().path().to_owned();
    let body = request.into_body().collect().await.map(|b| b.to_bytes());
    let answer = |status: u16, body: Vec<u8>| {
        Ok(Response::builder()
            .status(status)
            .header("content-type", "application/x-protobuf")
            .body(Full::new(Bytes::from(body)))
            .unwrap())
    };
    if refusing.load(Ordering::SeqCst) {
        refused.fetch_add(1, Ordering::SeqCst);
        return answer(503, Vec::new());
    }
    let (Ok(body), "/v1/traces") = (body, path.as_str()) else {
        return answer(404, Vec::new());
    };
    bodies.lock().unwrap().push(body);
    answer(200, ExportTraceServiceResponse::default().encode_to_vec())
}

fn decode_into(export: ExportTraceServiceRequest, received: &mut Vec<ReceivedSpan>) {
    for resource_spans in export.resource_spans {
        let resource = resource_spans
            .resource
            .map(|r| pairs(&r.attributes))
            .unwrap_or_default();
        for scope in resource_spans.scope_spans {
            for span in scope.spans {
                received.push(ReceivedSpan {
                    name: span.name,
                    kind: span.kind,
                    trace_id: hex::encode(&span.trace_id),
                    span_id: hex::encode(&span.span_id),
                    parent_span_id: hex::encode(&span.parent_span_id),
                    attributes: pairs(&span.attributes),
                    links: span
                        .links
                        .iter()
                        .map(|l| (hex::encode(&l.trace_id), hex::encode(&l.span_id)))
                        .collect(),
                    events: span
                        .events
                        .iter()
                        .map(|e| (e.name.clone(), pairs(&e.attributes)))
                        .collect(),
                    status: span.status.map_or(0, |s| s.code),
                    resource: resource.clone(),
                });
            }
        }
    }
}

/// Attributes as text, whatever their type.
fn pairs(attributes: &[KeyValue]) -> Vec<(String, String)> {
    attributes
        .iter()
        .map(|kv| {
            let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(Value::StringValue(s)) => s.clone(),
                Some(Value::IntValue(i)) => i.to_string(),
                Some(Value::BoolValue(b)) => b.to_string(),
                Some(Value::DoubleValue(d)) => d.to_string(),
                Some(other) => format!("{other:?}"),
                None => String::new(),
            };
            (kv.key.clone(), value)
        })
        .collect()
}
