//! Where deleted rows go first.

use serde::Serialize;

/// One deleted inbox row, every column as stored: the canonical text
/// byte for byte, `received_at` as the server prints it (UTC,
/// microseconds). Its `Debug` gives the canonical text's size, not the
/// text, which holds the result.
#[derive(Clone, PartialEq, Eq, Serialize)]
pub struct PrunedRow {
    /// `consumer_name`.
    pub consumer_name: String,
    /// `queue_id`.
    pub queue_id: String,
    /// `event_id`.
    pub event_id: String,
    /// `event_digest`.
    pub event_digest: String,
    /// `event_canonical`. It contains the task's result.
    pub event_canonical: String,
    /// `applied` (0 or 1).
    pub applied: u8,
    /// `received_at`, e.g. `2026-11-30 08:02:44.123456`.
    pub received_at: String,
}

impl std::fmt::Debug for PrunedRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let canonical = format_args!("<{} bytes>", self.event_canonical.len());
        f.debug_struct("PrunedRow")
            .field("consumer_name", &self.consumer_name)
            .field("queue_id", &self.queue_id)
            .field("event_id", &self.event_id)
            .field("event_digest", &self.event_digest)
            .field("event_canonical", &canonical)
            .field("applied", &self.applied)
            .field("received_at", &self.received_at)
            .finish()
    }
}

impl PrunedRow {
    /// The row as one line of JSON (with its `\n`): the archive's format.
    pub fn json_line(&self) -> String {
        let mut line = serde_json::to_string(self).expect("strings and integers serialize");
        line.push('\n');
        line
    }
}

/// Keeps the rows a batch is about to delete.
///
/// [`keep`](Archive::keep) is called inside the batch's transaction,
/// before its `DELETE`, and must return only once the rows are durable
/// (written and synced): an error rolls the batch back and stops the
/// prune. A batch that is rolled back afterwards, or whose COMMIT answer is
/// lost, is kept again when it is run again, so an archive may hold a row
/// twice; it never lacks a deleted one.
pub trait Archive {
    /// Makes `rows` durable.
    fn keep(&mut self, rows: &[PrunedRow]) -> std::io::Result<()>;
}

/// No archive: the rows are only deleted.
impl Archive for () {
    fn keep(&mut self, _rows: &[PrunedRow]) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(canonical: &str) -> PrunedRow {
        PrunedRow {
            consumer_name: "task-result-view".into(),
            queue_id: "0".repeat(32),
            event_id: "f".repeat(32),
            event_digest: "a".repeat(64),
            event_canonical: canonical.into(),
            applied: 1,
            received_at: "2026-11-30 08:02:44.123456".into(),
        }
    }

    #[test]
    fn debug_output_gives_the_size_of_the_text_not_the_result_in_it() {
        let debug = format!("{:?}", row(r#"{"result":"sentinel-result"}"#));
        assert!(!debug.contains("sentinel-result"), "{debug}");
        assert!(debug.contains("event_canonical: <28 bytes>"), "{debug}");
    }

    #[test]
    fn a_line_reads_back_to_the_same_row_and_text() {
        let row = row(r#"{"id":"x","result":"line\nbreak \"quoted\" é"}"#);
        let line = row.json_line();
        assert!(line.ends_with('\n') && !line.trim_end().contains('\n'));
        let back: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(back["event_canonical"], row.event_canonical.as_str());
        assert_eq!(back["applied"], 1);
        assert_eq!(back["received_at"], row.received_at.as_str());
    }
}
