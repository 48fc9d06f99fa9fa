//! The effect id: stable, derived from where the effect came from.
//!
//! See [`EffectId`], whose documentation gives the derivation.

use sha2::{Digest as _, Sha256};

use super::effect::{EffectKey, Target};
use crate::ids::EventId;
use crate::scope::InboxScope;

/// The version tag the derivation hashes first.
const DOMAIN: &[u8] = b"result-inbox/outbox/effect-id/v1";

/// An effect's id: 32 lowercase hex digits, derived by
/// [`derive`](Self::derive).
///
/// `effect_id` is the first 16 bytes, as 32 lowercase hex digits, of
/// SHA-256 over
///
/// ```text
/// "result-inbox/outbox/effect-id/v1" 0x00
/// u32be(len) consumer_name  u32be(len) queue_id  u32be(len) event_id
/// u32be(len) target         u32be(len) effect_key
/// ```
///
/// each field its UTF-8 bytes after its length as a 4-byte big-endian
/// number, so no two lists of fields encode alike. The same event applied
/// again — redelivered after a lost COMMIT answer, re-applied after its
/// inbox row was pruned, replayed on a fresh database — gives the same id
/// for the same effect: a target that keeps the ids it has seen (Standard
/// Webhooks' `webhook-id`, an `Idempotency-Key`, JetStream's
/// `Nats-Msg-Id`) takes it once. The derivation is frozen as the digest's
/// canonical form is: stored ids and the ids a target has seen depend on
/// it, and `tests/outbox.rs`'s golden vectors lock it. A new one would
/// be a new version tag, never a change of this one.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EffectId(String);

impl EffectId {
    /// The id of the effect with `key` for `target`, recorded while
    /// applying `event` in `scope`.
    pub fn derive(scope: &InboxScope, event: &EventId, target: &Target, key: &EffectKey) -> Self {
        let mut hash = Sha256::new();
        hash.update(DOMAIN);
        hash.update([0]);
        for field in [
            scope.receiver.as_str(),
            scope.queue_id.as_str(),
            event.as_str(),
            target.as_str(),
            key.as_str(),
        ] {
            // A field is at most 255 bytes (the columns'), far below u32.
            hash.update((field.len() as u32).to_be_bytes());
            hash.update(field.as_bytes());
        }
        let digest = hash.finalize();
        let mut hex = String::with_capacity(32);
        for byte in &digest[..16] {
            hex.push_str(&format!("{byte:02x}"));
        }
        EffectId(hex)
    }

    /// An id as an operator or a relay gives it back: 32 lowercase hex
    /// digits, or `None`.
    pub fn parse(text: &str) -> Option<Self> {
        let valid =
            text.len() == 32 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        valid.then(|| EffectId(text.to_owned()))
    }

    /// The 32 hex digits.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for EffectId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::QueueId;
    use crate::scope::ReceiverName;

    fn scope(name: &str) -> InboxScope {
        InboxScope::new(
            ReceiverName::parse(name).unwrap(),
            QueueId::parse("0123456789abcdef0123456789abcdef").unwrap(),
        )
    }

    #[test]
    fn the_id_changes_with_every_field_and_never_by_moving_bytes_between_two() {
        let event = EventId::parse("fedcba9876543210fedcba9876543210").unwrap();
        let id = |name: &str, target: &str, key: &str| {
            EffectId::derive(
                &scope(name),
                &event,
                &Target::parse(target).unwrap(),
                &EffectKey::parse(key).unwrap(),
            )
        };
        let base = id("orders", "hook", "ab");
        assert_eq!(base, id("orders", "hook", "ab"));
        assert_ne!(base, id("orders2", "hook", "ab"));
        assert_ne!(base, id("orders", "hook2", "ab"));
        assert_ne!(base, id("orders", "hook", "abc"));
        // The same bytes split otherwise between target and key.
        assert_ne!(id("orders", "hooka", "b"), base);
        assert_eq!(EffectId::parse(base.as_str()), Some(base.clone()));
        assert_eq!(EffectId::parse(&base.as_str().to_uppercase()), None);
        assert_eq!(EffectId::parse("abc"), None);
    }
}
