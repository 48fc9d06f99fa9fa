//! Effects held for the COMMIT that writes them.
//!
//! A row written as it is recorded costs the delivery a round trip of its
//! own, a fourth beside the inbox's `INSERT`, the view's statement and
//! the `COMMIT`. Held instead, a transaction's effects go in the same
//! round trip as its `COMMIT` (`InboxTx::commit`): one statement for all
//! of them, then `COMMIT`. They belong to the transaction as its writes
//! do: a delivery of a batch rolled back to its savepoint takes the
//! effects it recorded after that savepoint with it.

use crate::db::record::NewEffectRow;

/// Held effects above this many bytes (bodies and headers) are written
/// before the `COMMIT`, bound to a prepared statement, in statements of
/// at most [`CHUNK_BYTES`]: held ones go as literals, whose hex doubles
/// them, and one statement must fit the server's `max_allowed_packet`.
pub(crate) const FUSE_BYTES: usize = 64 << 10;

/// The most bytes of effects one statement writes before the `COMMIT`
/// (an effect larger than that goes alone).
pub(crate) const CHUNK_BYTES: usize = 4 << 20;

/// The effects a transaction holds, in the order they were recorded.
#[derive(Debug, Default)]
pub(crate) struct Held {
    rows: Vec<HeldRow>,
    /// How many rows the transaction had at its last savepoint.
    mark: usize,
    /// Each effect is written as it is recorded: a run of a transaction
    /// whose held effects were refused at COMMIT, so that the inner
    /// service learns why where it recorded them.
    at_once: bool,
}

impl Held {
    /// From now on, effects are written as they are recorded.
    pub(crate) fn write_at_once(&mut self) {
        self.at_once = true;
    }

    /// Whether effects are written as they are recorded.
    pub(crate) fn at_once(&self) -> bool {
        self.at_once
    }

    /// Holds `rows`, in their order, after those held already.
    pub(crate) fn hold(&mut self, rows: &[NewEffectRow<'_>]) {
        self.rows.extend(rows.iter().map(HeldRow::from));
    }

    /// Whether any effect is held.
    pub(crate) fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The bytes of the held effects' bodies and headers.
    pub(crate) fn bytes(&self) -> usize {
        self.rows.iter().map(HeldRow::bytes).sum()
    }

    /// The held rows, in record order, in runs of at most [`CHUNK_BYTES`]
    /// (a larger row alone).
    pub(crate) fn chunks(&self) -> Vec<Vec<NewEffectRow<'_>>> {
        let mut chunks: Vec<Vec<NewEffectRow<'_>>> = Vec::new();
        let mut bytes = 0;
        for row in &self.rows {
            match chunks.last_mut() {
                Some(chunk) if bytes + row.bytes() <= CHUNK_BYTES => chunk.push(row.as_new()),
                _ => {
                    chunks.push(vec![row.as_new()]);
                    bytes = 0;
                }
            }
            bytes += row.bytes();
        }
        chunks
    }

    /// Every held row, in record order.
    pub(crate) fn rows(&self) -> Vec<NewEffectRow<'_>> {
        self.rows.iter().map(HeldRow::as_new).collect()
    }

    /// A savepoint: what is held now stays if the transaction is rolled
    /// back to it.
    pub(crate) fn mark(&mut self) {
        self.mark = self.rows.len();
    }

    /// The transaction rolled back to its last savepoint.
    pub(crate) fn back_to_mark(&mut self) {
        self.rows.truncate(self.mark);
    }

    /// The transaction ended: nothing is held any more.
    pub(crate) fn clear(&mut self) {
        self.rows.clear();
        self.mark = 0;
    }
}

/// One held effect's row, owned.
#[derive(Debug)]
struct HeldRow {
    effect_id: String,
    consumer: String,
    queue: String,
    event: String,
    target: String,
    key: String,
    ordering_key: String,
    body: Vec<u8>,
    headers: String,
    traceparent: Option<String>,
}

impl HeldRow {
    fn bytes(&self) -> usize {
        self.body.len() + self.headers.len()
    }

    fn as_new(&self) -> NewEffectRow<'_> {
        NewEffectRow {
            effect_id: &self.effect_id,
            consumer: &self.consumer,
            queue: &self.queue,
            event: &self.event,
            target: &self.target,
            key: &self.key,
            ordering_key: &self.ordering_key,
            body: &self.body,
            headers: &self.headers,
            traceparent: self.traceparent.as_deref(),
        }
    }
}

impl From<&NewEffectRow<'_>> for HeldRow {
    fn from(row: &NewEffectRow<'_>) -> Self {
        HeldRow {
            effect_id: row.effect_id.to_owned(),
            consumer: row.consumer.to_owned(),
            queue: row.queue.to_owned(),
            event: row.event.to_owned(),
            target: row.target.to_owned(),
            key: row.key.to_owned(),
            ordering_key: row.ordering_key.to_owned(),
            body: row.body.to_vec(),
            headers: row.headers.to_owned(),
            traceparent: row.traceparent.map(str::to_owned),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row<'a>(id: &'a str, body: &'a [u8]) -> NewEffectRow<'a> {
        NewEffectRow {
            effect_id: id,
            consumer: "c",
            queue: "q",
            event: "e",
            target: "t",
            key: id,
            ordering_key: "o",
            body,
            headers: "{}",
            traceparent: None,
        }
    }

    fn ids(rows: &[NewEffectRow<'_>]) -> Vec<String> {
        rows.iter().map(|r| r.effect_id.to_owned()).collect()
    }

    #[test]
    fn a_rollback_to_the_savepoint_drops_only_what_was_held_after_it() {
        let mut held = Held::default();
        held.hold(&[row("a", b"1")]);
        held.mark();
        held.hold(&[row("b", b"2"), row("c", b"3")]);
        held.back_to_mark();
        assert_eq!(ids(&held.rows()), ["a"]);
        held.clear();
        assert!(held.is_empty());
    }

    #[test]
    fn chunks_keep_the_record_order_and_put_a_large_effect_alone() {
        let large = vec![0u8; CHUNK_BYTES];
        let small = vec![0u8; CHUNK_BYTES / 2];
        let mut held = Held::default();
        held.hold(&[row("a", &small), row("b", &large), row("c", &small)]);
        held.hold(&[row("d", &small[..10])]);
        let chunks: Vec<Vec<String>> = held.chunks().iter().map(|c| ids(c)).collect();
        assert_eq!(chunks, [vec!["a"], vec!["b"], vec!["c", "d"]]);
    }
}
