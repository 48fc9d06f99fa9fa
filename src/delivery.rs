//! What Orbit hands a consumer: one attempt at delivering one event.
//!
//! A [`Delivery`] is generic over its body, the way `http::Request<B>` is: the
//! consumer produces `Delivery<Bytes>` (the raw event as it came off the
//! wire), and a middleware such as the inbox may hand its inner service a
//! `Delivery` whose body is something richer (the validated event and the
//! open transaction). The lease proof travels with the delivery so that
//! whoever ACKs can prove it holds the current lease — and nobody else ever
//! sees it: its `Debug` and `Display` are redacted.

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
    attempt: u32,
    lease_proof: LeaseProof,
    body: B,
}

impl<B> Delivery<B> {
    /// A delivery as the platform announced it.
    pub fn new(id: DeliveryId, attempt: u32, lease_proof: LeaseProof, body: B) -> Self {
        Self {
            id,
            attempt,
            lease_proof,
            body,
        }
    }

    /// The delivery's id.
    pub fn id(&self) -> &DeliveryId {
        &self.id
    }

    /// Which attempt this is, starting at 1.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The proof that ACKs this attempt.
    pub fn lease_proof(&self) -> &LeaseProof {
        &self.lease_proof
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
            lease_proof: self.lease_proof,
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
            .field("lease_proof", &self.lease_proof)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_proof_never_shows_in_debug_output() {
        let d = Delivery::new(
            DeliveryId::new("d1"),
            1,
            LeaseProof::new("sentinel-proof"),
            "sentinel-body",
        );
        let shown = format!("{d:?}");
        assert!(shown.contains("d1"));
        assert!(!shown.contains("sentinel-proof"));
        assert!(!shown.contains("sentinel-body"));
    }

    #[test]
    fn mapping_the_body_keeps_id_attempt_and_proof() {
        let d =
            Delivery::new(DeliveryId::new("d1"), 3, LeaseProof::new("p"), 1).map_body(|n| n + 1);
        assert_eq!(
            (
                d.id().as_str(),
                d.attempt(),
                d.lease_proof().expose(),
                *d.body()
            ),
            ("d1", 3, "p", 2)
        );
    }
}
