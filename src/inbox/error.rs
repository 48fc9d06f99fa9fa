//! What can go wrong around one delivery, as the caller needs to act on it.

use std::fmt;

use crate::consumer::FailureClass;
use crate::digest::Digest;
use crate::event::{EventError, EventId, TaskId};
use crate::BoxError;

/// MySQL error numbers the inbox acts on. Classification is by number, never
/// by message text (`DatabaseError::code()` is the SQLSTATE, not the number).
pub mod mysql_errno {
    /// `ER_DUP_ENTRY`: a unique key already holds this value.
    pub const DUPLICATE_KEY: u16 = 1062;
    /// `ER_LOCK_WAIT_TIMEOUT`: a row lock was not granted in time.
    pub const LOCK_WAIT_TIMEOUT: u16 = 1205;
    /// `ER_LOCK_DEADLOCK`: the server rolled this transaction back to break a deadlock.
    pub const DEADLOCK: u16 = 1213;
    /// `ER_TABLE_EXISTS_ERROR`.
    pub const TABLE_EXISTS: u16 = 1050;
    /// `ER_TABLEACCESS_DENIED_ERROR`: the account lacks a privilege on a table.
    pub const TABLE_ACCESS_DENIED: u16 = 1142;
    /// `ER_DBACCESS_DENIED_ERROR`.
    pub const DB_ACCESS_DENIED: u16 = 1044;
    /// `ER_ACCESS_DENIED_ERROR`: wrong user or password.
    pub const ACCESS_DENIED: u16 = 1045;
    /// `ER_BAD_DB_ERROR`: unknown database.
    pub const BAD_DB: u16 = 1049;
    /// `ER_NO_SUCH_TABLE`.
    pub const NO_SUCH_TABLE: u16 = 1146;
    /// `ER_COLUMNACCESS_DENIED_ERROR`.
    pub const COLUMN_ACCESS_DENIED: u16 = 1143;
    /// `ER_SPECIFIC_ACCESS_DENIED_ERROR`.
    pub const SPECIFIC_ACCESS_DENIED: u16 = 1227;
    /// `ER_SERVER_SHUTDOWN`: the server is shutting down.
    pub const SERVER_SHUTDOWN: u16 = 1053;
    /// `ER_CONNECTION_KILLED` (MariaDB): the server ended the connection.
    pub const CONNECTION_KILLED: u16 = 1927;
    /// `ER_CLIENT_INTERACTION_TIMEOUT` (MySQL 8): the server closed an idle
    /// connection.
    pub const CLIENT_INTERACTION_TIMEOUT: u16 = 4031;
    /// `ER_ERROR_DURING_COMMIT`: the commit failed and was rolled back
    /// (MySQL Group Replication's certification failure among others).
    pub const ERROR_DURING_COMMIT: u16 = 1180;
    /// `ER_TRANSACTION_ROLLBACK_DURING_COMMIT` (MySQL 8): a plugin, such as
    /// Group Replication, rolled the transaction back at COMMIT.
    pub const TRANSACTION_ROLLBACK_DURING_COMMIT: u16 = 3101;
    /// `ER_UNKNOWN_COM_ERROR`, which a Galera node answers with "WSREP has
    /// not yet prepared node for application use" while it is not part of
    /// the cluster's primary component (joining, desynced, partitioned).
    pub const WSREP_NOT_READY: u16 = 1047;
}

/// The broad kind of a database failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DbErrorKind {
    /// The server rolled the transaction back to break a deadlock (1213),
    /// or a multi-primary cluster rolled it back because another node's
    /// transaction won certification (MariaDB Galera: 1213; MySQL Group
    /// Replication: 1180, 3101), at COMMIT or before.
    Deadlock,
    /// A row lock was not granted in time (1205).
    LockWaitTimeout,
    /// The account lacks a privilege, or cannot log in (1044, 1045, 1142,
    /// 1143, 1227). Not transient: someone has to grant it.
    PermissionDenied,
    /// The server answered with another error.
    Server,
    /// The connection could not be made or broke, or the server is
    /// shutting down (1053), ended the connection (1927, 4031), or is a
    /// cluster node not ready for application use (1047).
    Connection,
    /// The TLS handshake with the database failed (certificate not trusted,
    /// wrong host name, no common protocol).
    Tls,
    /// No connection became free in time.
    PoolTimeout,
    /// The stored data contradicts the schema or an invariant (a value that
    /// does not decode, a duplicate key whose row cannot be read back).
    Inconsistent,
}

/// A database failure, redacted: it keeps the MySQL error number and SQLSTATE
/// but never the server's message, which can quote key values or row data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DbError {
    kind: DbErrorKind,
    number: Option<u16>,
    sqlstate: Option<String>,
    /// What an operator can act on, where the kind alone says too little
    /// (`connection refused`, `wrong user or password`, …).
    detail: Option<&'static str>,
}

impl DbError {
    /// The kind of failure.
    pub fn kind(&self) -> DbErrorKind {
        self.kind
    }

    /// The MySQL error number, when the server answered with one.
    pub fn number(&self) -> Option<u16> {
        self.number
    }

    pub(crate) fn inconsistent() -> Self {
        Self::of(DbErrorKind::Inconsistent)
    }

    /// No connection could be had within the time budget.
    pub(crate) fn pool_timeout() -> Self {
        Self::of(DbErrorKind::PoolTimeout)
    }

    /// A connection attempt that got no answer in time.
    pub(crate) fn connect_timeout() -> Self {
        Self {
            detail: Some("connection timed out"),
            ..Self::of(DbErrorKind::Connection)
        }
    }

    fn of(kind: DbErrorKind) -> Self {
        Self {
            kind,
            number: None,
            sqlstate: None,
            detail: None,
        }
    }

    /// Whether the server refused this account or database for good —
    /// wrong user or password, no access, an unknown database — so that the
    /// configuration has to change (the commands' exit code 2).
    pub fn is_refusal(&self) -> bool {
        self.kind == DbErrorKind::PermissionDenied || self.number == Some(mysql_errno::BAD_DB)
    }

    /// Whether the database cannot be reached at all right now (rather than
    /// refusing this one statement): the connection failed or broke, or no
    /// connection came in time.
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self.kind,
            DbErrorKind::Connection | DbErrorKind::PoolTimeout
        )
    }
}

/// What an I/O error says about the connection, in words an operator acts on.
fn io_detail(e: &std::io::Error) -> &'static str {
    use std::io::ErrorKind;
    match e.kind() {
        ErrorKind::ConnectionRefused => {
            "connection refused (is the server running, and on this host and port?)"
        }
        ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted | ErrorKind::BrokenPipe => {
            "connection reset by the server"
        }
        ErrorKind::UnexpectedEof => "connection closed by the server",
        ErrorKind::TimedOut => "connection timed out",
        ErrorKind::NotFound | ErrorKind::AddrNotAvailable => "host not found",
        _ => "connection failed",
    }
}

impl From<sqlx::Error> for DbError {
    fn from(e: sqlx::Error) -> Self {
        match &e {
            sqlx::Error::Database(db) => {
                let number = db
                    .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
                    .map(|m| m.number());
                let (kind, detail) = (kind_of(number), detail_of(number));
                DbError {
                    kind,
                    number,
                    sqlstate: db.code().map(|c| c.into_owned()),
                    detail,
                }
            }
            sqlx::Error::PoolTimedOut => DbError::of(DbErrorKind::PoolTimeout),
            sqlx::Error::Tls(_) => DbError::of(DbErrorKind::Tls),
            // sqlx hands rustls' handshake failures over as I/O errors.
            sqlx::Error::Io(io)
                if io
                    .get_ref()
                    .is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some()) =>
            {
                DbError::of(DbErrorKind::Tls)
            }
            sqlx::Error::Io(io) => DbError {
                detail: Some(io_detail(io)),
                ..DbError::of(DbErrorKind::Connection)
            },
            sqlx::Error::Protocol(_)
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed
            | sqlx::Error::Configuration(_) => DbError::of(DbErrorKind::Connection),
            // Decoding and row-shape errors: the data is not what the schema
            // promises.
            _ => DbError::inconsistent(),
        }
    }
}

/// The kind of a server error, by its number alone.
fn kind_of(number: Option<u16>) -> DbErrorKind {
    match number {
        Some(
            mysql_errno::SERVER_SHUTDOWN
            | mysql_errno::CONNECTION_KILLED
            | mysql_errno::CLIENT_INTERACTION_TIMEOUT
            | mysql_errno::WSREP_NOT_READY,
        ) => DbErrorKind::Connection,
        Some(
            mysql_errno::DEADLOCK
            | mysql_errno::ERROR_DURING_COMMIT
            | mysql_errno::TRANSACTION_ROLLBACK_DURING_COMMIT,
        ) => DbErrorKind::Deadlock,
        Some(mysql_errno::LOCK_WAIT_TIMEOUT) => DbErrorKind::LockWaitTimeout,
        Some(
            mysql_errno::DB_ACCESS_DENIED
            | mysql_errno::ACCESS_DENIED
            | mysql_errno::TABLE_ACCESS_DENIED
            | mysql_errno::COLUMN_ACCESS_DENIED
            | mysql_errno::SPECIFIC_ACCESS_DENIED,
        ) => DbErrorKind::PermissionDenied,
        _ => DbErrorKind::Server,
    }
}

/// What an operator can act on for a server error, by its number alone.
fn detail_of(number: Option<u16>) -> Option<&'static str> {
    match number {
        Some(mysql_errno::ACCESS_DENIED) => Some("wrong user or password"),
        Some(mysql_errno::BAD_DB) => Some("unknown database"),
        Some(mysql_errno::DB_ACCESS_DENIED) => Some("the account may not use this database"),
        Some(mysql_errno::SERVER_SHUTDOWN) => Some("the server is shutting down"),
        Some(mysql_errno::WSREP_NOT_READY) => {
            Some("the cluster node is not ready for application use (not in the primary component)")
        }
        Some(
            mysql_errno::ERROR_DURING_COMMIT | mysql_errno::TRANSACTION_ROLLBACK_DURING_COMMIT,
        ) => Some("transaction rolled back at commit (certification failed)"),
        _ => None,
    }
}

impl fmt::Display for DbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(detail) = self.detail {
            if self.kind == DbErrorKind::Connection && self.number.is_none() {
                return write!(f, "database connection failed: {detail}");
            }
            f.write_str(detail)?;
            return match (&self.number, &self.sqlstate) {
                (Some(n), Some(s)) => write!(f, " (MySQL error {n}, SQLSTATE {s})"),
                (Some(n), None) => write!(f, " (MySQL error {n})"),
                _ => Ok(()),
            };
        }
        match self.kind {
            DbErrorKind::Deadlock => f.write_str("deadlock, transaction rolled back")?,
            DbErrorKind::LockWaitTimeout => f.write_str("lock wait timeout")?,
            DbErrorKind::PermissionDenied => f.write_str("permission denied")?,
            DbErrorKind::Server => f.write_str("server error")?,
            DbErrorKind::Connection => return f.write_str("database connection failed"),
            DbErrorKind::Tls => {
                return f.write_str(
                    "TLS handshake with the database failed (check ssl-mode and ssl-ca in the DSN)",
                )
            }
            DbErrorKind::PoolTimeout => return f.write_str("no database connection available"),
            DbErrorKind::Inconsistent => {
                return f.write_str("stored data does not match the receiver schema")
            }
        }
        match (&self.number, &self.sqlstate) {
            (Some(n), Some(s)) => write!(f, " (MySQL error {n}, SQLSTATE {s})"),
            (Some(n), None) => write!(f, " (MySQL error {n})"),
            _ => Ok(()),
        }
    }
}

impl std::error::Error for DbError {}

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

    /// The class as the consumer names failures (see
    /// [`consumer::classify`](crate::consumer::classify)).
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

impl From<sqlx::Error> for InboxError {
    fn from(e: sqlx::Error) -> Self {
        InboxError::Database(DbError::from(e))
    }
}

/// Whether `e` is the server's duplicate-key error, the only error that leads
/// to the duplicate path.
pub(crate) fn is_duplicate_key(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(db) => db
            .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
            .is_some_and(|m| m.number() == mysql_errno::DUPLICATE_KEY),
        _ => false,
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

    fn io(kind: std::io::ErrorKind) -> DbError {
        DbError::from(sqlx::Error::Io(std::io::Error::from(kind)))
    }

    #[test]
    fn only_a_database_that_cannot_be_reached_is_unavailable() {
        let refused = io(std::io::ErrorKind::ConnectionRefused);
        assert!(refused.is_unavailable());
        assert!(DbError::pool_timeout().is_unavailable());
        assert!(InboxError::Database(refused).is_unavailable());
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
    fn certification_failures_of_galera_and_group_replication_are_deadlocks_and_retried() {
        for number in [
            mysql_errno::DEADLOCK,
            mysql_errno::ERROR_DURING_COMMIT,
            mysql_errno::TRANSACTION_ROLLBACK_DURING_COMMIT,
        ] {
            assert_eq!(kind_of(Some(number)), DbErrorKind::Deadlock, "{number}");
            assert!(super::super::is_rolled_back(&DbError {
                number: Some(number),
                ..DbError::of(kind_of(Some(number)))
            }));
        }
    }

    #[test]
    fn a_cluster_node_that_is_not_ready_is_unavailable_and_retried() {
        let e = DbError {
            number: Some(mysql_errno::WSREP_NOT_READY),
            sqlstate: Some("08S01".into()),
            detail: detail_of(Some(mysql_errno::WSREP_NOT_READY)),
            ..DbError::of(kind_of(Some(mysql_errno::WSREP_NOT_READY)))
        };
        assert!(e.is_unavailable());
        assert!(super::super::is_rolled_back(&e));
        assert!(e.to_string().contains("not ready"), "{e}");
        assert!(e.to_string().contains("1047"), "{e}");
    }

    #[test]
    fn a_duplicate_key_or_another_server_error_is_never_retried() {
        for number in [mysql_errno::DUPLICATE_KEY, mysql_errno::NO_SUCH_TABLE, 1364] {
            let e = DbError {
                number: Some(number),
                ..DbError::of(kind_of(Some(number)))
            };
            assert!(!super::super::is_rolled_back(&e), "{number}");
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
    fn connection_failures_say_what_happened_without_the_server_text() {
        assert_eq!(
            io(std::io::ErrorKind::ConnectionRefused).to_string(),
            "database connection failed: connection refused (is the server running, and on this host and port?)"
        );
        assert_eq!(
            io(std::io::ErrorKind::ConnectionReset).to_string(),
            "database connection failed: connection reset by the server"
        );
        assert_eq!(
            DbError::connect_timeout().to_string(),
            "database connection failed: connection timed out"
        );
    }
}
