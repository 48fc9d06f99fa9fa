//! What can go wrong around one delivery, as the caller needs to act on it.

use std::fmt;

use crate::db::DbError;
use crate::digest::Digest;
use crate::event::EventError;
use crate::failure::{self, Classified, Classify, Failure, FailureClass};
use crate::ids::{EventId, TaskId};
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
    /// Also the answer when the budget ran out while a rolled-back
    /// transaction (a deadlock, a lost certification, a lock wait) was run
    /// again: the last rollback, with the inner service's error behind it
    /// when its statement met it, rather than [`Timeout`](Self::Timeout).
    #[error("database: {0}")]
    Database(#[source] DbError),
    /// The transaction did not finish within its time budget, or a
    /// `TimeoutLayer` around the inner service fired, and it was abandoned
    /// before COMMIT, with no rollback to blame (see
    /// [`Database`](Self::Database)). Class `timeout`.
    #[error("transaction timed out before commit")]
    Timeout,
    /// The inner service refused the event for good ([`Refusal`]); its
    /// transaction was rolled back. A redelivery will be refused again.
    #[error("{0}")]
    Refused(Refusal),
    /// The inner service failed; its transaction was rolled back.
    #[error("inner service failed: {0}")]
    Handler(BoxError),
    /// The inner service failed with an error that states its own class
    /// ([`Classified`]); its transaction was rolled back.
    #[error("inner service failed: {0}")]
    Classified(Classified),
}

impl InboxError {
    /// Whether a redelivery of the same event may succeed without anyone
    /// changing anything. Rejections, conflicts and refusals will fail the
    /// same way: the delivery can only spend the source's attempts and end
    /// where an operator finds it (`receiver failures`).
    ///
    /// A unique key of the inner service's own tables that already holds
    /// the value its statement writes (MySQL 1062, PostgreSQL 23505) is
    /// such a conflict: class `conflict`, not retryable, the whole
    /// transaction rolled back (the inbox row with it). The row that holds
    /// the key is committed, so every redelivery meets it again; waiting
    /// cannot help, someone has to look at the business table. (The inbox's
    /// own duplicate key is never an error: it is the duplicate path.) A
    /// service whose insert may race a concurrent one for the same key
    /// handles the key itself (`ON DUPLICATE KEY UPDATE`, `ON CONFLICT`).
    ///
    /// Everything else is retryable: a deadlock or lock wait that outlasted
    /// the transaction's budget, the database unreachable, a COMMIT without
    /// an answer, an inner service's own error.
    pub fn is_retryable(&self) -> bool {
        !self.failure_class().is_permanent()
    }

    /// Whether the database could not be reached at all (see
    /// [`DbError::is_unavailable`]): a matter of the database, not of this
    /// delivery. The consumer stops taking deliveries on such errors.
    pub fn is_unavailable(&self) -> bool {
        match self {
            InboxError::Database(e) => e.is_unavailable(),
            InboxError::Classified(e) => e.failure().unavailable,
            _ => false,
        }
    }

    /// A stable one-word class for logs and metrics: `rejected`, `conflict`
    /// (a [`Conflict`], or a duplicate key of the inner service's own
    /// tables: see [`is_retryable`](Self::is_retryable)), `refused`,
    /// `unconfirmed`, `timeout` or `error` (or the class a [`Classified`]
    /// states).
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
            InboxError::Classified(e) => e.failure().class,
            InboxError::Timeout => FailureClass::Timeout,
            InboxError::Database(e) if e.is_duplicate_key() => FailureClass::Conflict,
            InboxError::Database(_) | InboxError::Handler(_) => FailureClass::Error,
        }
    }

    /// Recovers an `InboxError` from an inner service's boxed error. The
    /// first link of its `source()` chain that knows its class decides,
    /// however the service's own error types wrap it: an `InboxError` (the
    /// task view reports conflicts so), a `sqlx::Error` or [`DbError`] (a
    /// redacted database error, retried and opening the breaker as the
    /// inbox's own would; the service's error stays its unredacted
    /// `source()`), a [`Refusal`] or a [`Classified`]. Anything else is
    /// [`InboxError::Handler`].
    pub(crate) fn from_inner(e: BoxError) -> Self {
        let e = match e.downcast::<InboxError>() {
            Ok(e) => return *e,
            Err(e) => e,
        };
        let found = failure::chain(&*e).find_map(|link| {
            if let Some(inbox) = link.downcast_ref::<InboxError>() {
                return inbox.same_class();
            }
            if let Some(sqlx) = link.downcast_ref::<sqlx::Error>() {
                return Some(Found::Database(DbError::from(sqlx)));
            }
            if let Some(db) = link.downcast_ref::<DbError>() {
                return Some(Found::Database(db.clone()));
            }
            if let Some(refusal) = link.downcast_ref::<Refusal>() {
                return Some(Found::Error(InboxError::Refused(refusal.clone())));
            }
            // A bad or second effect fails the same way on every
            // redelivery; the database's errors are found further down.
            if let Some(outbox) = link.downcast_ref::<crate::outbox::OutboxError>() {
                if !matches!(outbox, crate::outbox::OutboxError::Database(_)) {
                    let refusal = Refusal::new(outbox.to_string());
                    return Some(Found::Error(InboxError::Refused(refusal)));
                }
            }
            // A TimeoutLayer around the inner service: its limit, before
            // COMMIT, rolled back like the inbox's own.
            if link.is::<tower::timeout::error::Elapsed>() {
                return Some(Found::Error(InboxError::Timeout));
            }
            link.downcast_ref::<Classified>()
                .map(|c| Found::Classified(c.failure()))
        });
        match found {
            Some(Found::Error(found)) => found,
            Some(Found::Database(db)) => InboxError::Database(db.caused_by(e)),
            Some(Found::Classified(failure)) => match e.downcast::<Classified>() {
                Ok(classified) => InboxError::Classified(*classified),
                Err(e) => InboxError::Classified(Classified::with_failure(failure, e)),
            },
            None => InboxError::Handler(e),
        }
    }

    /// The same error, for one found inside another error: what an inner
    /// service's error carries along its chain. `None` for a handler's
    /// error, which says no class of its own.
    fn same_class(&self) -> Option<Found> {
        Some(Found::Error(match self {
            InboxError::Rejected(e) => InboxError::Rejected(e.clone()),
            InboxError::Conflict(c) => InboxError::Conflict(c.clone()),
            InboxError::CommitUnconfirmed => InboxError::CommitUnconfirmed,
            InboxError::Database(e) => return Some(Found::Database(e.clone())),
            InboxError::Timeout => InboxError::Timeout,
            InboxError::Refused(r) => InboxError::Refused(r.clone()),
            InboxError::Classified(c) => return Some(Found::Classified(c.failure())),
            InboxError::Handler(_) => return None,
        }))
    }
}

/// What an inner service's error chain says of its class.
enum Found {
    /// An error the inbox answers as it is.
    Error(InboxError),
    /// A database failure: answered redacted, the service's error kept as
    /// its source.
    Database(DbError),
    /// A [`Classified`]: the service's error keeps its stated class.
    Classified(Failure),
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

    /// An embedder's own error type, wrapping what its statements and
    /// calls return, as `thiserror` users write one.
    #[derive(Debug, thiserror::Error)]
    enum OrderError {
        #[error("orders: {0}")]
        Db(#[from] sqlx::Error),
        #[error("orders: {0}")]
        Inbox(#[from] InboxError),
        #[error("orders: {0}")]
        Stored(#[from] DbError),
        #[error("the order is closed")]
        Closed,
    }

    impl Classify for OrderError {
        fn failure(&self) -> Failure {
            Failure::new(FailureClass::Refused)
        }
    }

    fn refused_with_text(text: &str) -> sqlx::Error {
        sqlx::Error::Io(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            text.to_owned(),
        ))
    }

    #[test]
    fn a_sqlx_error_inside_the_caller_s_own_error_is_a_database_error_of_its_kind() {
        let e = InboxError::from_inner(Box::new(OrderError::Db(refused_with_text("x"))));
        assert!(matches!(e, InboxError::Database(_)), "{e:?}");
        assert!(e.is_unavailable(), "opens the breaker");
        assert!(e.is_retryable());
        assert!(matches!(&e, InboxError::Database(db) if db.is_rolled_back()));
    }

    #[test]
    fn the_caller_s_database_error_is_redacted_in_text_and_debug_and_kept_as_the_source() {
        let e = InboxError::from_inner(Box::new(OrderError::Db(refused_with_text(
            "row data 4111-1111",
        ))));
        assert!(!e.to_string().contains("4111"), "{e}");
        assert!(!format!("{e:?}").contains("4111"), "{e:?}");
        let chain: Vec<String> = failure::chain(&e).map(|l| l.to_string()).collect();
        assert!(
            chain.iter().any(|l| l.contains("row data 4111-1111")),
            "the caller reaches its own error through source(): {chain:?}"
        );
        assert!(failure::chain(&e).any(|l| l.is::<OrderError>()));
    }

    #[test]
    fn an_inbox_error_inside_the_caller_s_own_error_keeps_its_class() {
        let conflict = InboxError::Conflict(Conflict::VersionTaken {
            task_id: TaskId::parse("0123456789abcdef0123456789abcdef").unwrap(),
            version: 3,
        });
        let e = InboxError::from_inner(Box::new(OrderError::Inbox(conflict)));
        assert_eq!(e.class(), "conflict");
        assert!(!e.is_retryable());
    }

    #[test]
    fn a_redacted_database_error_inside_the_caller_s_own_error_keeps_its_class() {
        let e = InboxError::from_inner(Box::new(OrderError::Stored(refused_connection())));
        assert!(e.is_unavailable(), "{e:?}");
    }

    #[test]
    fn the_first_classified_link_of_the_chain_decides() {
        #[derive(Debug, thiserror::Error)]
        #[error("outer")]
        struct Outer(#[source] Classified);
        // A stated refusal above a database error: the refusal decides.
        let refusal_over_db = Outer(Classified::with_class(
            FailureClass::Refused,
            OrderError::Db(refused_with_text("x")),
        ));
        let e = InboxError::from_inner(Box::new(refusal_over_db));
        assert_eq!(e.class(), "refused");
        assert!(
            !e.is_unavailable(),
            "the database error below it says nothing"
        );
        let plain = InboxError::from_inner(Box::new(OrderError::Closed));
        assert!(matches!(plain, InboxError::Handler(_)), "{plain:?}");
    }

    #[test]
    fn an_error_that_states_its_class_keeps_it_alone_and_wrapped() {
        let alone = InboxError::from_inner(Box::new(Classified::new(OrderError::Closed)));
        assert_eq!(alone.class(), "refused");
        assert!(!alone.is_retryable());
        assert_eq!(
            alone.to_string(),
            "inner service failed: the order is closed"
        );

        #[derive(Debug, thiserror::Error)]
        #[error("checkout failed")]
        struct Checkout(#[source] Classified);
        let wrapped = InboxError::from_inner(Box::new(Checkout(Classified::with_class(
            FailureClass::Conflict,
            "two prices",
        ))));
        assert_eq!(wrapped.class(), "conflict");
        let boxed: BoxError = Box::new(wrapped);
        assert_eq!(classify(&*boxed).class, FailureClass::Conflict);
    }

    #[test]
    fn a_timeout_layer_inside_the_inbox_is_a_timeout_like_the_inbox_s_own_budget() {
        let inner = InboxError::from_inner(Box::new(tower::timeout::error::Elapsed::new()));
        assert!(matches!(inner, InboxError::Timeout), "{inner:?}");
        assert_eq!(inner.class(), "timeout");
        assert!(inner.is_retryable());
        assert_eq!(InboxError::Timeout.failure().class, FailureClass::Timeout);
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
