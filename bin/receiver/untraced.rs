//! The receiver built without the `otel` feature (the `cli-core` feature
//! alone, as `make demo` builds it: the OpenTelemetry SDK, the OTLP
//! exporter and their HTTP/2 stack are a fifth of what the binary
//! compiles). It exports no traces, and a command asked to export them by
//! the standard variables stops naming the feature that would, instead of
//! running without the traces its operator expects.

use result_inbox::consumer::TraceParent;

/// The variables that ask for traces (`otel/settings.rs` reads them when
/// the exporter is built in).
const VARIABLES: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
];

/// Where traces would go: this build has nowhere.
pub(crate) enum Endpoint {}

impl Endpoint {
    pub(crate) fn shown(&self) -> String {
        match *self {}
    }

    pub(crate) fn warning(&self) -> Option<String> {
        match *self {}
    }
}

/// No endpoint; an error when a variable asks for one, as an exporting
/// build's error for a value it cannot read.
pub(crate) fn endpoint() -> Result<Option<Endpoint>, String> {
    // An empty value is unset, as the SDK takes it.
    let asked = VARIABLES
        .into_iter()
        .find(|name| std::env::var(name).is_ok_and(|v| !v.trim().is_empty()));
    match asked {
        Some(name) => Err(format!(
            "{name} is set, but this receiver is built without traces: build it with the `cli` feature (`make build`, or `cargo install --path . --features cli`)"
        )),
        None => Ok(None),
    }
}

/// No layer: nothing is exported.
pub(crate) fn layer() -> Result<Option<tracing_subscriber::layer::Identity>, String> {
    endpoint().map(|_| None)
}

pub(crate) fn exporting() -> Option<&'static Endpoint> {
    None
}

pub(crate) async fn collector_answers(endpoint: &Endpoint) -> Result<(), String> {
    match *endpoint {}
}

pub(crate) fn shutdown() {}

pub(crate) fn trace_parent() -> Option<TraceParent> {
    None
}
