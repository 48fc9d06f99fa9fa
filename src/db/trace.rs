//! One span per statement the receiver sends, as the OpenTelemetry
//! semantic conventions for databases name them: kind CLIENT, named
//! `<operation> <table>`, with `db.system.name`, `db.operation.name`,
//! `db.collection.name` and, when the server refused it, its error number
//! as `db.response.status_code`. Never a statement's text or values: an
//! event's canonical text and a result are values.
//!
//! A statement is recorded only inside a span of the caller's (a
//! delivery's transaction, or an embedder's own span around its work):
//! one sent outside any (the breaker's probe every few seconds, the
//! start-up checks) belongs to no delivery, and as a span of its own it
//! would be a trace of its own, thousands a day from an idle consumer.
//!
//! Spans are recorded with `tracing` only; whoever embeds the library
//! decides whether anything exports them (the `receiver` binary does, to
//! OTLP, when an endpoint is configured).

use std::future::Future;

use tracing::{field, Span};

use super::DbError;

/// A CLIENT span for one statement to a server of `system` (the
/// conventions' `mysql` or `postgresql`): `operation` (`INSERT`, `SELECT`,
/// `COMMIT`, …) on `table`, if the statement names one. None outside a
/// span.
pub(crate) fn statement(
    system: &'static str,
    operation: &'static str,
    table: Option<&'static str>,
) -> Span {
    if !inside_a_span() {
        return Span::none();
    }
    let name = match table {
        Some(table) => format!("{operation} {table}"),
        None => operation.to_owned(),
    };
    tracing::info_span!(
        "db",
        otel.name = %name,
        otel.kind = "client",
        db.system.name = system,
        db.operation.name = operation,
        db.collection.name = table,
        db.response.status_code = field::Empty,
        error.type = field::Empty,
        otel.status_code = field::Empty,
    )
}

/// Whether the caller runs inside a span that the subscriber records.
/// Asked of the dispatcher without cloning the span, as `Span::current`
/// would.
fn inside_a_span() -> bool {
    tracing::dispatcher::get_default(|dispatch| dispatch.current_span().id().is_some())
}

/// Runs one statement's future while its span is open, and records the
/// server's error number on the span when it fails. The span is a leaf:
/// it is never entered, so polling the statement costs nothing more; it
/// lasts from before the statement is sent to after its answer.
pub(crate) async fn traced<T>(
    span: Span,
    statement: impl Future<Output = Result<T, sqlx::Error>>,
) -> Result<T, sqlx::Error> {
    let result = statement.await;
    if let Err(e) = &result {
        failed(&span, e);
    }
    drop(span);
    result
}

/// Marks `span` as failed by `e`: the server's code when it sent one
/// (MySQL's error number, PostgreSQL's SQLSTATE), otherwise the kind of
/// failure (connection, timeout, …).
pub(crate) fn failed(span: &Span, e: &sqlx::Error) {
    match status_code(e) {
        Some(code) => {
            span.record("db.response.status_code", code.as_str());
            span.record("error.type", code.as_str());
        }
        None => {
            span.record("error.type", error_type(e));
        }
    }
    span.record("otel.status_code", "ERROR");
}

/// The code the server answered `e` with, as the conventions' status code:
/// its number where the engine numbers its errors (MySQL), else its
/// SQLSTATE (PostgreSQL), as the engine's mapping into [`DbError`] keeps it.
fn status_code(e: &sqlx::Error) -> Option<String> {
    let error = DbError::from(e);
    match error.number() {
        Some(number) => Some(number.to_string()),
        None => error.sqlstate().map(str::to_owned),
    }
}

/// A failure the server did not number, as one word.
fn error_type(e: &sqlx::Error) -> &'static str {
    match e {
        sqlx::Error::Io(_) | sqlx::Error::Tls(_) => "connection",
        sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed => "pool",
        sqlx::Error::Protocol(_) => "protocol",
        _ => "other",
    }
}
