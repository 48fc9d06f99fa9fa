//! The one place that turns a service's answer into "ACK" or "do not ACK".

use crate::failure::Failure;

/// What the consumer does with a delivery once its service answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settlement {
    /// The service returned `Ok`: the effect is committed (now or before).
    /// Acknowledge with the attempt's lease proof.
    Ack,
    /// The service returned `Err`: nothing is known to be committed. Leave
    /// the delivery; the lease runs out and it is delivered again until its
    /// budget is spent.
    Leave,
    /// The service returned `Err` because the bytes can never be a valid
    /// event (not strict JSON, too large, a field missing or malformed).
    /// Nothing was written. Not acknowledged either: a source that can drop
    /// a message for good (JetStream's `+TERM`) is asked to; any other
    /// leaves it, as for [`Leave`](Settlement::Leave).
    Terminate,
}

/// `Ok` is ACKed, `Err` never is. The failure is consulted for one thing
/// only: whether the delivery's bytes can never become valid, so that a
/// source may stop redelivering them. Everything else that fails — a
/// conflict, an event of another queue, the database, an unconfirmed
/// COMMIT — is left to come again and, if it keeps failing, to spend its
/// budget where an operator finds it.
pub fn settle<R>(answer: &Result<R, Failure>) -> Settlement {
    match answer {
        Ok(_) => Settlement::Ack,
        Err(failure) if failure.malformed => Settlement::Terminate,
        Err(_) => Settlement::Leave,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failure::FailureClass;

    const CLASSES: [FailureClass; 7] = [
        FailureClass::Rejected,
        FailureClass::Conflict,
        FailureClass::Refused,
        FailureClass::Unconfirmed,
        FailureClass::Timeout,
        FailureClass::Overloaded,
        FailureClass::Error,
    ];

    #[test]
    fn ok_is_acked() {
        assert_eq!(settle::<()>(&Ok(())), Settlement::Ack);
    }

    #[test]
    fn an_error_is_never_acked_whatever_its_kind() {
        for class in CLASSES {
            for malformed in [false, true] {
                let failure = Failure {
                    malformed,
                    ..Failure::new(class)
                };
                assert_ne!(settle::<()>(&Err(failure)), Settlement::Ack, "{class}");
            }
        }
    }

    #[test]
    fn only_bytes_that_can_never_be_valid_are_terminated() {
        let malformed = Failure {
            malformed: true,
            ..Failure::new(FailureClass::Rejected)
        };
        assert_eq!(settle::<()>(&Err(malformed)), Settlement::Terminate);
        for class in CLASSES {
            assert_eq!(settle::<()>(&Err(Failure::new(class))), Settlement::Leave);
        }
    }
}
