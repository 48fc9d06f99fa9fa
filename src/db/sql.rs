//! Pieces of the receiver's statements that depend on how many rows they
//! name.

/// `item` `n` times, separated by commas: the placeholders of an
/// `IN (…)` list (`list("?", 3)` is `?, ?, ?`) or the rows of a multi-row
/// `VALUES`.
pub(crate) fn list(item: &str, n: usize) -> String {
    vec![item; n].join(", ")
}
