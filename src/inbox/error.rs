//! What can go wrong around one delivery, as the caller needs to act on it.

use std::fmt;

use crate::db::DbError;
use crate::digest::Digest;
use crate::event::{EventError, EventId, TaskId};
use crate::failure::{self, Classify, Failure, FailureClass};
use crate::BoxError;

/// An event that may not be applied because it contradicts what is stored.
/// Nothing is changed and nothing is ACKed; an operator has to look.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Conflict {
    /// An event with this id was received before with other content.
    ContentMismatch {
        /// The event id both copies claim.
        event_id: EventId,
        /// The digest stored with the first copy.
        stored: Digest,
        /// The digest of this copy.
        incoming: Digest,
    },
    /// Another event already brought this task to this version.
    VersionTaken {
        /// The task.
        task_id: TaskId,
        /// The version both events claim.
        version: u64,
    },
}

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Conflict::ContentMismatch {
                event_id,
                stored,
                incoming,
            } => write!(
                f,
                "event {event_id} was received before with a different digest \
                 (stored sha256={stored}, incoming sha256={incoming})"
            ),
            Conflict::VersionTaken { task_id, version } => write!(
                f,
                "task {task_id} version {version} was already applied by another event"
            ),
        }
    }
}

/// A business refusal: the inner service says this event will never be
/// applied, whatever happens (a closed account, a task the business does
/// not know). Return it — boxed, or through `?` into any error type that
/// keeps it as a source — and the inbox answers
/// [`InboxError::Refused`]: rolled back, not retryable, class `refused`.
///
/// It is still never ACKed (only a commit is): the delivery spends its
/// retry budget and ends `EXPIRED`, where an operator finds it.
///
/// ```
/// use result_inbox::inbox::Refusal;
/// let refusal = Refusal::new("the customer account is closed");
/// assert_eq!(refusal.to_string(), "refused: the customer account is closed");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("refused: {reason}")]
pub struct Refusal {
    reason: String,
}

impl Refusal {
    /// A refusal with a short reason for the log (no result bodies).
    pub fn new(reason: impl Into<String>) -> Self {
        Self {
            reason: reason.into(),
        }
    }

    /// The reason given.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

/// Why a delivery was not applied. None of these is ever ACKed.
///
/// ```
/// use result_inbox::inbox::{InboxError, Refusal};
///
/// fn what_to_do(e: &InboxError) -> &'static str {
///     match e.class() {
///         // Will fail the same way on every redelivery: an operator looks.
///         "rejected" | "conflict" | "refused" => "alert",
///         // The redelivery decides: it finds the committed row or applies.
///         "unconfirmed" => "wait",
///         _ if e.is_unavailable() => "check the database",
///         _ => "let the redelivery retry",
///     }
/// }
/// assert_eq!(what_to_do(&InboxError::Refused(Refusal::new("closed"))), "alert");
/// assert!(InboxError::CommitUnconfirmed.is_retryable());
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InboxError {
    /// The event is malformed or not meant for this receiver. Nothing was
    /// written; the same bytes will be refused again.
    #[error("rejected: {0}")]
    Rejected(#[from] EventError),
    /// The event contradicts a committed one; everything was rolled back.
    #[error("conflict: {0}")]
    Conflict(Conflict),
    /// COMMIT was sent but its outcome is unknown (connection lost or time
    /// ran out while committing). A redelivery finds the inbox row if the
    /// commit happened and applies the event if it did not.
    #[error("commit unconfirmed: the outcome of COMMIT is unknown")]
    CommitUnconfirmed,
    /// The database failed before COMMIT; the transaction did not commit.
    #[error("database: {0}")]
    Database(DbError),
    /// The transaction did not finish within its time budget and was
    /// abandoned before COMMIT.
    #[error("transaction timed out before commit")]
    Timeout,
    /// The inner service refused the event for good ([`Refusal`]); its
    /// transaction was rolled back. A redelivery will be refused again.
    #[error("{0}")]
    Refused(Refusal),
    /// The inner service failed; its transaction was rolled back.
    #[error("inner service failed: {0}")]
    Handler(BoxError),
}

impl InboxError {
    /// Whether a redelivery of the same event may succeed without anyone
    /// changing anything. Rejections and conflicts will fail the same way.
    pub fn is_retryable(&self) -> bool {
        !matches!(
            self,
            InboxError::Rejected(_) | InboxError::Conflict(_) | InboxError::Refused(_)
        )
    }

    /// Whether the database could not be reached at all (see
    /// [`DbError::is_unavailable`]): a matter of the database, not of this
    /// delivery. The consumer stops taking deliveries on such errors.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, InboxError::Database(e) if e.is_unavailable())
    }

    /// A stable one-word class for logs and metrics: `rejected`, `conflict`,
    /// `refused`, `unconfirmed` or `error`.
    pub fn class(&self) -> &'static str {
        self.failure_class().as_str()
    }

    /// The class in the failure vocabulary of the log and the metrics.
    pub fn failure_class(&self) -> FailureClass {
        match self {
            InboxError::Rejected(_) => FailureClass::Rejected,
            InboxError::Conflict(_) => FailureClass::Conflict,
            InboxError::Refused(_) => FailureClass::Refused,
            InboxError::CommitUnconfirmed => FailureClass::Unconfirmed,
            InboxError::Database(_) | InboxError::Timeout | InboxError::Handler(_) => {
                FailureClass::Error
            }
        }
    }

    /// Recovers an `InboxError` from an inner service's boxed error: the task
    /// view reports conflicts as `InboxError`, and sqlx errors become
    /// redacted database errors.
    pub(crate) fn from_inner(e: BoxError) -> Self {
        let e = match e.downcast::<InboxError>() {
            Ok(e) => return *e,
            Err(e) => e,
        };
        let e = match e.downcast::<sqlx::Error>() {
            Ok(e) => return InboxError::Database(DbError::from(*e)),
            Err(e) => e,
        };
        // A refusal may come wrapped in the service's own error type.
        let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e.as_ref());
        while let Some(error) = next {
            if let Some(refusal) = error.downcast_ref::<Refusal>() {
                return InboxError::Refused(refusal.clone());
            }
            next = error.source();
        }
        InboxError::Handler(e)
    }
}

/// The inbox says its own class; it has logged the delivery (one line per
/// delivery it handles), so a consumer does not log it again.
impl Classify for InboxError {
    fn failure(&self) -> Failure {
        Failure {
            class: self.failure_class(),
            unavailable: self.is_unavailable(),
            malformed: matches!(self, InboxError::Rejected(e) if e.is_malformed()),
            logged: true,
        }
    }
}

/// The failure behind a `BoxError` from any tower stack around the inbox:
/// the inbox's own class when an [`InboxError`] is found in the box or its
/// `source()` chain, otherwise what [`failure::classify`] finds (tower's
/// `Elapsed` is `timeout`, `Overloaded` is `overloaded`, anything else
/// `error`).
pub fn classify(e: &(dyn std::error::Error + 'static)) -> Failure {
    failure::classify(e, &recognize)
}

/// The failure an error stands for when it is the inbox's own.
pub(crate) fn recognize(error: &(dyn std::error::Error + 'static)) -> Option<Failure> {
    error.downcast_ref::<InboxError>().map(Classify::failure)
}

impl From<sqlx::Error> for InboxError {
    fn from(e: sqlx::Error) -> Self {
        InboxError::Database(DbError::from(e))
    }
}

/// Whether a failed COMMIT left its outcome unknown. A server error answer
/// means it did not commit; anything that lost the answer means "unknown".
pub(crate) fn commit_error(e: sqlx::Error) -> InboxError {
    match e {
        sqlx::Error::Database(_) => InboxError::Database(DbError::from(e)),
        _ => InboxError::CommitUnconfirmed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::DbErrorKind;

    #[derive(Debug, thiserror::Error)]
    #[error("outer layer failed")]
    struct Outer(#[source] InboxError);

    fn refused_connection() -> DbError {
        DbError::from(sqlx::Error::Io(std::io::Error::from(
            std::io::ErrorKind::ConnectionRefused,
        )))
    }

    #[test]
    fn only_a_database_that_cannot_be_reached_is_unavailable() {
        assert!(InboxError::Database(refused_connection()).is_unavailable());
        for about_one_delivery in [
            InboxError::Database(DbError::of(DbErrorKind::Deadlock)),
            InboxError::Database(DbError::of(DbErrorKind::LockWaitTimeout)),
            InboxError::Conflict(Conflict::VersionTaken {
                task_id: TaskId::parse("0123456789abcdef0123456789abcdef").unwrap(),
                version: 1,
            }),
            InboxError::Rejected(EventError::Malformed {
                field: "id",
                problem: "is missing",
            }),
            InboxError::Timeout,
            InboxError::CommitUnconfirmed,
        ] {
            assert!(!about_one_delivery.is_unavailable(), "{about_one_delivery}");
        }
    }

    #[test]
    fn an_error_answer_to_commit_is_a_known_rollback_and_a_lost_answer_is_unconfirmed() {
        let lost = commit_error(sqlx::Error::Io(std::io::Error::from(
            std::io::ErrorKind::ConnectionReset,
        )));
        assert!(matches!(lost, InboxError::CommitUnconfirmed));
        let closed = commit_error(sqlx::Error::PoolClosed);
        assert!(matches!(closed, InboxError::CommitUnconfirmed));
    }

    #[test]
    fn an_inbox_error_keeps_its_class_inside_a_box() {
        let e: BoxError = Box::new(InboxError::CommitUnconfirmed);
        let failure = classify(&*e);
        assert_eq!(failure.class, FailureClass::Unconfirmed);
        assert!(!failure.unavailable && failure.logged);
    }

    #[test]
    fn an_inbox_error_is_found_behind_another_layers_error() {
        let e: BoxError = Box::new(Outer(InboxError::Database(refused_connection())));
        let failure = classify(&*e);
        assert_eq!(failure.class.as_str(), "error");
        assert!(failure.unavailable);
    }

    #[test]
    fn a_refusal_is_permanent() {
        let e: BoxError = Box::new(InboxError::Refused(Refusal::new("closed")));
        assert_eq!(classify(&*e).class, FailureClass::Refused);
        assert!(classify(&*e).class.is_permanent());
    }

    #[test]
    fn only_bytes_that_can_never_be_valid_are_malformed() {
        let malformed = InboxError::Rejected(EventError::InvalidVersion);
        assert!(malformed.failure().malformed);
        let other_queue = InboxError::Rejected(EventError::QueueMismatch {
            expected: crate::ids::QueueId::parse(&"a".repeat(32)).unwrap(),
            actual: crate::ids::QueueId::parse(&"b".repeat(32)).unwrap(),
        });
        assert!(!other_queue.failure().malformed);
    }
}
