//! What a source hands a consumer: one attempt at delivering one event.
//!
//! A [`Delivery`] is generic over its body, the way `http::Request<B>` is: the
//! consumer produces `Delivery<Bytes>` (the raw event as it came off the
//! wire), and a middleware such as the inbox may hand its inner service a
//! `Delivery` whose body is something richer (the validated event and the
//! open transaction).
//!
//! What every source must provide is an id for the delivery (the same for
//! every attempt) and the event's bytes; the attempt number is optional
//! (Orbit and JetStream count attempts, a plain queue may not). What a
//! source needs to acknowledge — Orbit's [`LeaseProof`] — is not part of the
//! delivery: the consumer keeps it next to the delivery's future, so the
//! services that handle the delivery never hold it, and its `Debug` is
//! redacted wherever it is.

use std::fmt;

/// The platform's id of one delivery (one event for one subscription).
///
/// Attempts of the same delivery share the id; each attempt has its own
/// [`LeaseProof`].
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct DeliveryId(String);

impl DeliveryId {
    /// Wraps an id as the platform sent it.
    pub fn new(id: impl Into<String>) -> Self {
        Self(id.into())
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for DeliveryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for DeliveryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DeliveryId({})", self.0)
    }
}

/// The secret that ACKs one attempt of a delivery.
///
/// It is a bearer credential for that attempt: it is never printed, logged or
/// compared in a way that shows it. Only [`LeaseProof::expose`] reveals it,
/// for the ACK request itself.
#[derive(Clone, PartialEq, Eq)]
pub struct LeaseProof(String);

impl LeaseProof {
    /// Wraps a proof as the platform sent it.
    pub fn new(proof: impl Into<String>) -> Self {
        Self(proof.into())
    }

    /// The proof itself, to be sent back in an ACK and nowhere else.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for LeaseProof {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LeaseProof(<redacted>)")
    }
}

/// One attempt at delivering one event, with a body of type `B`.
#[derive(Clone)]
pub struct Delivery<B> {
    id: DeliveryId,
    attempt: Option<u32>,
    body: B,
}

impl<B> Delivery<B> {
    /// A delivery of `body` under the source's id for it.
    pub fn new(id: DeliveryId, body: B) -> Self {
        Self {
            id,
            attempt: None,
            body,
        }
    }

    /// The same delivery, known to be attempt `attempt` (from 1), for
    /// sources that count attempts.
    pub fn with_attempt(mut self, attempt: u32) -> Self {
        self.attempt = Some(attempt);
        self
    }

    /// The delivery's id.
    pub fn id(&self) -> &DeliveryId {
        &self.id
    }

    /// Which attempt this is, starting at 1, when the source counts them.
    pub fn attempt(&self) -> Option<u32> {
        self.attempt
    }

    /// The body.
    pub fn body(&self) -> &B {
        &self.body
    }

    /// The body, mutably.
    pub fn body_mut(&mut self) -> &mut B {
        &mut self.body
    }

    /// Gives up the delivery for its body.
    pub fn into_body(self) -> B {
        self.body
    }

    /// The same delivery with another body.
    pub fn map_body<C>(self, f: impl FnOnce(B) -> C) -> Delivery<C> {
        Delivery {
            id: self.id,
            attempt: self.attempt,
            body: f(self.body),
        }
    }
}

impl<B> fmt::Debug for Delivery<B> {
    // The body is an event or a transaction: neither belongs in a log line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Delivery")
            .field("id", &self.id)
            .field("attempt", &self.attempt)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_proof_never_shows_in_debug_output() {
        assert_eq!(
            format!("{:?}", LeaseProof::new("sentinel-proof")),
            "LeaseProof(<redacted>)"
        );
        let d = Delivery::new(DeliveryId::new("d1"), "sentinel-body");
        let shown = format!("{d:?}");
        assert!(shown.contains("d1"));
        assert!(!shown.contains("sentinel-body"));
    }

    #[test]
    fn a_delivery_needs_only_an_id_and_a_body() {
        let d = Delivery::new(DeliveryId::new("d1"), 1);
        assert_eq!(d.attempt(), None);
        let d = d.with_attempt(3).map_body(|n| n + 1);
        assert_eq!(
            (d.id().as_str(), d.attempt(), *d.body()),
            ("d1", Some(3), 2)
        );
    }
}
