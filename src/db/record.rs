//! Rows as the operator tools read them from either engine: text, numbers
//! and RFC 3339 times, with nothing of a dialect left in them.

/// One inbox row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxRecord {
    pub consumer: String,
    pub queue: String,
    pub event: String,
    pub digest: String,
    pub applied: bool,
    pub received_at: String,
    pub canonical: String,
}

/// One task view row, without its result: the result's length in bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewRecord {
    pub consumer: String,
    pub queue: String,
    pub task: String,
    pub version: u64,
    pub last_event: String,
    pub state: String,
    pub result_bytes: Option<u64>,
    pub applied_events: u64,
    pub created_at: String,
    pub updated_at: String,
}

/// The inbox's totals, over every scope.
#[derive(Debug, Clone, PartialEq)]
pub struct InboxTotals {
    pub applied: u64,
    pub stale: u64,
    pub oldest: Option<String>,
    pub newest: Option<String>,
    /// How long ago the oldest row was received, by the server's clock.
    pub oldest_age_seconds: Option<i64>,
    pub average_bytes: f64,
    pub largest_bytes: u64,
}
