//! Who is receiving: the receiver's fixed name and the queue it consumes.
//!
//! The pair is the deduplication scope. Every inbox row and task view row is
//! keyed by it, so restarts, scale-out and extra instances must reuse the
//! same name and queue; choosing a fresh name per start would turn every
//! redelivery into a first receipt.

use crate::ids::{text_type, QueueId};

/// The name a receiver is known by, e.g. `task-result-view`.
///
/// At most 64 ASCII characters; the first is a letter or digit, the rest are
/// letters, digits, `.`, `_` or `-`.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ReceiverName(String);

impl ReceiverName {
    /// The name used when none is configured.
    pub const DEFAULT: &'static str = "task-result-view";

    /// Longest accepted name, in characters.
    pub const MAX_LEN: usize = 64;

    /// Validates a name.
    pub fn parse(s: &str) -> Result<Self, InvalidReceiverName> {
        let mut bytes = s.bytes();
        let first_ok = bytes.next().is_some_and(|b| b.is_ascii_alphanumeric());
        let rest_ok = bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if first_ok && rest_ok && s.len() <= Self::MAX_LEN {
            Ok(Self(s.to_owned()))
        } else {
            Err(InvalidReceiverName(s.to_owned()))
        }
    }
}

text_type!(ReceiverName, "The name as text.");

impl Default for ReceiverName {
    fn default() -> Self {
        Self(Self::DEFAULT.to_owned())
    }
}

impl std::str::FromStr for ReceiverName {
    type Err = InvalidReceiverName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// A receiver name that breaks the naming rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is not a receiver name: 1 to 64 ASCII characters, a letter or digit, then letters, digits, '.', '_' or '-'"
)]
pub struct InvalidReceiverName(String);

/// The deduplication scope: one receiver name consuming one queue.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct InboxScope {
    /// The receiver's fixed name.
    pub receiver: ReceiverName,
    /// The only queue whose events this receiver accepts.
    pub queue_id: QueueId,
}

impl InboxScope {
    /// A scope for `receiver` consuming `queue_id`.
    pub fn new(receiver: ReceiverName, queue_id: QueueId) -> Self {
        Self { receiver, queue_id }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_name_is_valid() {
        assert!(ReceiverName::parse(ReceiverName::DEFAULT).is_ok());
    }

    #[test]
    fn names_follow_the_naming_rule() {
        for good in ["a", "9", "task-result-view", "A.b_c-d", &"x".repeat(64)] {
            assert!(ReceiverName::parse(good).is_ok(), "{good}");
        }
        for bad in ["", "-a", ".a", "_a", "a b", "a/b", "é", &"x".repeat(65)] {
            let refused = ReceiverName::parse(bad).unwrap_err();
            assert_eq!(refused, InvalidReceiverName(bad.to_owned()));
            assert!(
                refused.to_string().starts_with(&format!("{bad:?} is not")),
                "{refused}"
            );
        }
    }
}
