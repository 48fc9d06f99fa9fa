//! The one place that turns a service's answer into "ACK" or "do not ACK".

use super::classify::is_malformed;
use crate::BoxError;

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

/// `Ok` is ACKed, `Err` never is. The error is consulted for one thing
/// only: whether the delivery's bytes can never become valid, so that a
/// source may stop redelivering them. Everything else that fails — a
/// conflict, an event of another queue, the database, an unconfirmed
/// COMMIT — is left to come again and, if it keeps failing, to spend its
/// budget where an operator finds it.
pub fn settle<R>(answer: &Result<R, BoxError>) -> Settlement {
    match answer {
        Ok(_) => Settlement::Ack,
        Err(e) if is_malformed(e) => Settlement::Terminate,
        Err(_) => Settlement::Leave,
    }
}

#[cfg(all(test, feature = "mysql"))]
mod tests {
    use super::*;
    use crate::digest::DigestError;
    use crate::event::EventError;
    use crate::ids::{QueueId, TaskId};
    use crate::inbox::{Conflict, InboxError};

    fn err(e: InboxError) -> Result<(), BoxError> {
        Err(Box::new(e))
    }

    #[test]
    fn ok_is_acked() {
        assert_eq!(settle::<()>(&Ok(())), Settlement::Ack);
    }

    #[test]
    fn an_error_is_never_acked_whatever_its_kind() {
        for answer in [
            err(InboxError::CommitUnconfirmed),
            err(InboxError::Timeout),
            err(InboxError::Conflict(Conflict::VersionTaken {
                task_id: TaskId::parse(&"c".repeat(32)).unwrap(),
                version: 2,
            })),
            err(InboxError::Rejected(EventError::InvalidVersion)),
            Err("anything".into()),
        ] {
            assert_ne!(settle(&answer), Settlement::Ack);
        }
    }

    #[test]
    fn only_bytes_that_can_never_be_valid_are_terminated() {
        assert_eq!(
            settle(&err(InboxError::Rejected(EventError::Json(
                DigestError::TooLarge { len: 600 * 1024 }
            )))),
            Settlement::Terminate
        );
        assert_eq!(
            settle(&err(InboxError::Rejected(EventError::Malformed {
                field: "task.id",
                problem: "is missing"
            }))),
            Settlement::Terminate
        );
    }

    #[test]
    fn a_conflict_or_an_event_of_another_queue_is_left_not_terminated() {
        let queue = |c: char| QueueId::parse(&c.to_string().repeat(32)).unwrap();
        assert_eq!(
            settle(&err(InboxError::Rejected(EventError::QueueMismatch {
                expected: queue('a'),
                actual: queue('b'),
            }))),
            Settlement::Leave
        );
        assert_eq!(
            settle(&err(InboxError::Conflict(Conflict::VersionTaken {
                task_id: TaskId::parse(&"c".repeat(32)).unwrap(),
                version: 2,
            }))),
            Settlement::Leave
        );
    }
}
