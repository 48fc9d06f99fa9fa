//! The one place that turns a service's answer into "ACK" or "do not ACK".

/// What the consumer does with a delivery once its service answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settlement {
    /// The service returned `Ok`: the effect is committed (now or before).
    /// Acknowledge with the attempt's lease proof.
    Ack,
    /// The service returned `Err`: nothing is known to be committed. Leave
    /// the delivery; the lease runs out and Orbit delivers it again until
    /// its budget is spent.
    Leave,
}

/// `Ok` is ACKed, `Err` never is. Nothing else is consulted: not the kind of
/// error, not whether it is retryable. A non-retryable error (a conflict, a
/// rejected event) is still not ACKed — it is left to spend its budget and
/// end `EXPIRED`, where an operator finds it.
pub fn settle<R, E>(answer: &Result<R, E>) -> Settlement {
    match answer {
        Ok(_) => Settlement::Ack,
        Err(_) => Settlement::Leave,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ok_is_acked() {
        assert_eq!(settle::<_, ()>(&Ok(())), Settlement::Ack);
    }

    #[test]
    fn an_error_is_never_acked_whatever_its_kind() {
        assert_eq!(settle::<(), _>(&Err("conflict")), Settlement::Leave);
        assert_eq!(
            settle::<(), _>(&Err("commit unconfirmed")),
            Settlement::Leave
        );
    }
}
