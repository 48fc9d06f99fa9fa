//! Pieces of the receiver's statements: those that depend on how many rows
//! they name, and the one way a stored time is read as text.

/// `item` `n` times, separated by commas: the placeholders of an
/// `IN (…)` list (`list("?", 3)` is `?, ?, ?`) or the rows of a multi-row
/// `VALUES`.
pub(crate) fn list(item: &str, n: usize) -> String {
    vec![item; n].join(", ")
}

/// A `DATETIME(6)` column that holds UTC, read as RFC 3339 text
/// (`2026-12-01T10:58:55.418730Z`): the one form every tool prints a time
/// in.
pub(crate) fn rfc3339(column: &str) -> String {
    format!("CAST(DATE_FORMAT({column}, '%Y-%m-%dT%H:%i:%s.%fZ') AS CHAR)")
}
