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

/// The key of a row in key order: receiver name, queue, and the table's
/// own id (event or task).
pub(crate) type PageKey = (String, String, String);

/// An inbox row as `verify` reads it: key, stored digest, canonical text.
pub(crate) type InboxPageRow = (String, String, String, String, String);

/// A view row as `verify` reads it: key, version, last event, state.
pub(crate) type ViewPageRow = (String, String, String, u64, String, String);

/// A view's last event as `verify` reads it: key, applied, canonical text.
pub(crate) type LastEventRow = (String, String, String, bool, String);

/// One task's applied inbox rows, summed by the server beside its view
/// and its pruned rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskTotal {
    pub consumer: String,
    pub queue: String,
    pub task: String,
    /// Applied inbox rows present.
    pub present: u64,
    /// The highest version among them.
    pub highest: u64,
    /// Views of the task (0 or 1).
    pub views: u64,
    /// The view's `applied_events`, if there is a view.
    pub counted: Option<u64>,
    /// The view's version, if there is a view.
    pub version: Option<u64>,
    /// Applied rows `receiver prune` deleted and counted.
    pub pruned: u64,
}

/// An inbox row `receiver prune` locked: event id, digest, text, applied,
/// received at.
pub(crate) type LockedRow = (String, String, String, bool, String);

/// An effect's row as the outbox records it: every column the recording
/// statement writes, the rest being the engine's (state `pending`, no
/// attempt yet, times from the server's clock).
#[derive(Debug, Clone, Copy)]
pub struct NewEffectRow<'a> {
    pub effect_id: &'a str,
    pub consumer: &'a str,
    pub queue: &'a str,
    pub event: &'a str,
    pub target: &'a str,
    pub key: &'a str,
    pub ordering_key: &'a str,
    pub body: &'a [u8],
    pub headers: &'a str,
    pub traceparent: Option<&'a str>,
}

/// The first of `rows` whose effect id is one of `found`.
pub(crate) fn first_found(rows: &[NewEffectRow<'_>], found: &[String]) -> Option<usize> {
    rows.iter()
        .position(|r| found.iter().any(|f| f == r.effect_id))
}

impl<'a> NewEffectRow<'a> {
    /// `query` with this row's ten values bound after its others, in the
    /// order of the columns every engine's recording statement lists.
    pub(crate) fn bind<DB>(
        &self,
        query: sqlx::query::Query<'a, DB, DB::Arguments<'a>>,
    ) -> sqlx::query::Query<'a, DB, DB::Arguments<'a>>
    where
        DB: sqlx::Database,
        &'a str: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
        &'a [u8]: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
        Option<&'a str>: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    {
        query
            .bind(self.effect_id)
            .bind(self.consumer)
            .bind(self.queue)
            .bind(self.event)
            .bind(self.target)
            .bind(self.key)
            .bind(self.ordering_key)
            .bind(self.body)
            .bind(self.headers)
            .bind(self.traceparent)
    }
}

/// An effect claimed under a lease: what a relay needs to send it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedRow {
    pub seq: u64,
    pub effect_id: String,
    pub consumer: String,
    pub queue: String,
    pub event: String,
    pub target: String,
    pub key: String,
    pub ordering_key: String,
    pub body: Vec<u8>,
    pub headers: String,
    pub traceparent: Option<String>,
    pub attempts: u32,
    pub created_at: String,
}

/// An effect as an operator lists it: no body, no headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EffectRecord {
    pub seq: u64,
    pub effect_id: String,
    pub event: String,
    pub target: String,
    pub key: String,
    pub ordering_key: String,
    pub state: String,
    pub attempts: u32,
    pub last_result: Option<String>,
    pub created_at: String,
    pub next_attempt_at: String,
    /// How long ago it was recorded, by the server's clock.
    pub age_seconds: i64,
}

/// An effect whose event the inbox does not hold, as `verify` reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrphanEffect {
    pub consumer: String,
    pub queue: String,
    pub event: String,
    pub effect_id: String,
    pub target: String,
    pub state: String,
}

/// The outbox's effects by state, over every scope.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct EffectTotals {
    pub pending: u64,
    pub sent: u64,
    pub dead: u64,
    /// How long ago the oldest pending effect was recorded, by the
    /// server's clock, in whole seconds.
    pub oldest_pending_age_seconds: Option<i64>,
}
