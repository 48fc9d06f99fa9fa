//! The secret that acknowledges one attempt of an Orbit delivery.

use std::fmt;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_proof_never_shows_in_debug_output() {
        assert_eq!(
            format!("{:?}", LeaseProof::new("sentinel-proof")),
            "LeaseProof(<redacted>)"
        );
    }
}
