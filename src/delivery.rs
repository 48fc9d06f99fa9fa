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
//! source needs to acknowledge — Orbit's lease proof, JetStream's ack
//! subject — is not part of the delivery: the consumer keeps it next to the
//! delivery's future, so the services that handle the delivery never hold
//! it.

use std::fmt;

use crate::ids::text_type;

/// The platform's id of one delivery (one event for one subscription).
///
/// Attempts of the same delivery share the id; each attempt has its own
/// proof, which the source hands the consumer beside it.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct DeliveryId(String);

impl DeliveryId {
    /// Wraps an id as the platform sent it.
    pub fn new(id: impl Into<String>) -> Self {
        Self(id.into())
    }
}

text_type!(DeliveryId, "The id as text.");

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
    fn a_body_never_shows_in_debug_output() {
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
