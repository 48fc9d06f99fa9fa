//! A database failure, redacted, and its broad kind.

use std::fmt;
use std::sync::Arc;

use sqlx::error::DatabaseError;

/// A unique key that already holds a value, on either engine.
pub(crate) const DUPLICATE_KEY_DETAIL: &str = "duplicate key: a unique key already holds the value";

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
    /// The address names a server of another engine than the one asked
    /// for (a `postgres://` DSN for a MySQL store, say).
    WrongEngine,
}

/// What a server's error said that the predicates of [`DbError`] ask about,
/// whichever engine's code said it: each engine's mapping of its codes
/// (`db/<engine>/error.rs`) sets it, so that nothing here reads a code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Condition {
    /// The database the address names does not exist.
    UnknownDatabase,
    /// The account lacks a privilege on a table the statement names, or
    /// on its columns (not a refused login).
    LacksTablePrivilege,
    /// A unique key already held the value the statement wrote.
    DuplicateKey,
}

/// A database failure, redacted: it keeps the MySQL error number and SQLSTATE
/// but never the server's message, which can quote key values or row data.
///
/// # The error of your own statement
///
/// When the failure came from an inner service's own statement (its error,
/// or an error on its `source()` chain, was a `sqlx::Error`), the
/// inner service's error is kept, unredacted, as this error's
/// [`source()`](std::error::Error::source): the server's full message for
/// whoever debugs that statement. Neither `Display` nor `Debug` shows it,
/// and the inbox never logs it; a caller that prints the `source()` chain
/// takes the server's text (which may quote row data) where it prints.
#[derive(Clone)]
pub struct DbError {
    pub(super) kind: DbErrorKind,
    pub(super) number: Option<u16>,
    pub(super) sqlstate: Option<String>,
    /// What an operator can act on, where the kind alone says too little
    /// (`connection refused`, `wrong user or password`, …).
    pub(super) detail: Option<&'static str>,
    /// What the server's code said that [`is_refusal`](Self::is_refusal),
    /// [`lacks_table_privilege`](Self::lacks_table_privilege) and
    /// [`is_duplicate_key`](Self::is_duplicate_key) ask; the engine's
    /// mapping sets it from its number or SQLSTATE.
    pub(super) condition: Option<Condition>,
    /// The receiver table that does not exist, for error 1146 (42P01) on
    /// one of them.
    pub(super) missing_table: Option<&'static str>,
    /// The inner service's own error behind it, unredacted (see above).
    pub(super) cause: Option<Arc<dyn std::error::Error + Send + Sync + 'static>>,
}

impl PartialEq for DbError {
    /// The same failure, whoever's statement it was.
    fn eq(&self, other: &Self) -> bool {
        (
            self.kind,
            self.number,
            &self.sqlstate,
            self.detail,
            self.missing_table,
        ) == (
            other.kind,
            other.number,
            &other.sqlstate,
            other.detail,
            other.missing_table,
        )
    }
}

impl Eq for DbError {}

impl fmt::Debug for DbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DbError")
            .field("kind", &self.kind)
            .field("number", &self.number)
            .field("sqlstate", &self.sqlstate)
            .field("detail", &self.detail)
            .field("missing_table", &self.missing_table)
            .field("cause", &self.cause.as_ref().map(|_| "<see source()>"))
            .finish()
    }
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

    /// The SQLSTATE, when the server answered with one.
    pub fn sqlstate(&self) -> Option<&str> {
        self.sqlstate.as_deref()
    }

    /// The receiver table (`receiver_inbox`, `receiver_task_views` or
    /// `receiver_pruned`) that the statement found missing (error 1146), so that a command can say
    /// what to run instead of quoting an error number.
    pub fn missing_table(&self) -> Option<&'static str> {
        self.missing_table
    }

    pub(crate) fn inconsistent() -> Self {
        Self::of(DbErrorKind::Inconsistent)
    }

    /// An address of `found`, for a store of another engine: says what
    /// opens a store of the address's engine.
    pub(crate) fn wrong_engine(found: super::EngineKind) -> Self {
        Self {
            detail: Some(match found {
                super::EngineKind::MySql => {
                    "the DSN names a MySQL server, not one of this store's engine: open it with InboxStore::connect (or InboxStore::<sqlx::MySql>::open)"
                }
                _ => "the DSN names a PostgreSQL server, not one of this store's engine: open it with InboxStore::<sqlx::Postgres>::open (feature postgres)",
            }),
            ..Self::of(DbErrorKind::WrongEngine)
        }
    }

    /// An address of `found`, for a test database of another engine.
    #[cfg(feature = "testing")]
    pub(crate) fn wrong_test_engine(found: super::EngineKind) -> Self {
        Self {
            detail: Some(match found {
                super::EngineKind::MySql => {
                    "the DSN names a MySQL server, not one of this test database's engine: create it with TestDatabase::create"
                }
                _ => "the DSN names a PostgreSQL server, not one of this test database's engine: create it with TestDatabase::<sqlx::Postgres>::create_on (feature postgres)",
            }),
            ..Self::of(DbErrorKind::WrongEngine)
        }
    }

    /// This failure, met connecting to a server of `engine`: a failed TLS
    /// handshake names that engine's options (sqlx's TLS errors do not say
    /// which driver met them).
    pub(crate) fn connecting_to(self, engine: super::EngineKind) -> Self {
        let detail = match (self.kind, engine) {
            (DbErrorKind::Tls, super::EngineKind::Postgres) => Some(
                "TLS handshake with the database failed (check sslmode and sslrootcert in the DSN)",
            ),
            _ => self.detail,
        };
        Self { detail, ..self }
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

    pub(crate) fn of(kind: DbErrorKind) -> Self {
        Self {
            kind,
            number: None,
            sqlstate: None,
            detail: None,
            condition: None,
            missing_table: None,
            cause: None,
        }
    }

    /// This failure, keeping `cause` (an inner service's own error) as its
    /// unredacted `source()`.
    pub(crate) fn caused_by(self, cause: crate::BoxError) -> Self {
        Self {
            cause: Some(Arc::from(cause)),
            ..self
        }
    }

    /// Whether the server refused this account or database for good —
    /// wrong user or password, no access, an unknown database — so that the
    /// configuration has to change (the commands' exit code 2).
    pub fn is_refusal(&self) -> bool {
        matches!(
            self.kind,
            DbErrorKind::PermissionDenied | DbErrorKind::WrongEngine
        ) || self.condition == Some(Condition::UnknownDatabase)
    }

    /// Whether the statement was refused because the account lacks a
    /// privilege on a table it names (or on its columns): MySQL's 1142 or
    /// 1143, PostgreSQL's 42501. Not a refused login.
    pub(crate) fn lacks_table_privilege(&self) -> bool {
        self.condition == Some(Condition::LacksTablePrivilege)
    }

    /// Whether a unique key already held the value the statement wrote:
    /// MySQL's 1062, PostgreSQL's 23505. The inbox's own row never
    /// surfaces as one (its key is the deduplication); one of an inner
    /// service's own statements is class `conflict` (see
    /// [`InboxError::is_retryable`](crate::inbox::InboxError::is_retryable)).
    pub fn is_duplicate_key(&self) -> bool {
        self.condition == Some(Condition::DuplicateKey)
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

    /// Whether the failure left nothing behind that could have committed,
    /// so the whole transaction may run again: the server chose it as
    /// deadlock victim (on a cluster also: it lost certification, at
    /// COMMIT or before), timed out its lock wait, or its connection broke
    /// before COMMIT (a pooled connection the server had dropped; the
    /// server rolls back whatever a lost connection had open), or the
    /// cluster node was not ready. A COMMIT whose answer was lost is never
    /// such an error: the inbox reports it as unconfirmed.
    pub fn is_rolled_back(&self) -> bool {
        matches!(
            self.kind,
            DbErrorKind::Deadlock | DbErrorKind::LockWaitTimeout | DbErrorKind::Connection
        )
    }
}

/// What an I/O error says about the connection, in words an operator acts on.
fn io_detail(e: &std::io::Error) -> &'static str {
    use std::io::ErrorKind;
    // The standard library's answer when getaddrinfo fails has no kind of
    // its own to match; its text is all there is.
    if e.to_string()
        .starts_with("failed to lookup address information")
    {
        return "could not resolve host (the DSN's host name is not known: check its spelling and the resolver)";
    }
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

impl DbError {
    /// The failure `e` is. A server's own error is the engine's to read:
    /// `server` is its mapping (`db::any` picks it by the error's driver).
    pub(super) fn classify(
        e: &sqlx::Error,
        server: impl FnOnce(&dyn DatabaseError) -> Self,
    ) -> Self {
        match e {
            sqlx::Error::Database(db) => server(db.as_ref()),
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
            // Decoding and row-shape errors: the data is not what the
            // statement's types promise.
            _ => DbError::inconsistent(),
        }
    }
}

impl fmt::Display for DbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Kinds whose text says all there is end here; the others are
        // followed by the server's error number.
        let text = match (self.detail, self.kind) {
            (Some(detail), DbErrorKind::Connection) if self.number.is_none() => {
                return write!(f, "database connection failed: {detail}")
            }
            (Some(detail), _) => detail,
            (None, DbErrorKind::Deadlock) => "deadlock, transaction rolled back",
            (None, DbErrorKind::LockWaitTimeout) => "lock wait timeout",
            (None, DbErrorKind::PermissionDenied) => "permission denied",
            (None, DbErrorKind::Server) => "server error",
            (None, DbErrorKind::Connection) => return f.write_str("database connection failed"),
            (None, DbErrorKind::Tls) => {
                return f.write_str(
                    "TLS handshake with the database failed (check ssl-mode and ssl-ca in the DSN)",
                )
            }
            (None, DbErrorKind::PoolTimeout) => {
                return f.write_str("no database connection available")
            }
            (None, DbErrorKind::WrongEngine) => {
                return f.write_str("the DSN names a server of another engine")
            }
            (None, DbErrorKind::Inconsistent) => {
                return f.write_str(
                    "stored data does not match what the statement expects (a column's type or a row's shape)",
                )
            }
        };
        f.write_str(text)?;
        match (&self.number, &self.sqlstate) {
            (Some(n), Some(s)) => write!(f, " (MySQL error {n}, SQLSTATE {s})"),
            (Some(n), None) => write!(f, " (MySQL error {n})"),
            (None, Some(s)) => write!(f, " (SQLSTATE {s})"),
            _ => Ok(()),
        }
    }
}

impl std::error::Error for DbError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.cause
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io(kind: std::io::ErrorKind) -> DbError {
        DbError::from(sqlx::Error::Io(std::io::Error::from(kind)))
    }

    #[test]
    fn a_failed_tls_handshake_names_the_options_of_the_engine_it_met() {
        let tls = || DbError::from(sqlx::Error::Tls("server does not support TLS".into()));
        let mysql = tls()
            .connecting_to(crate::db::EngineKind::MySql)
            .to_string();
        assert!(mysql.contains("check ssl-mode and ssl-ca"), "{mysql}");
        let postgres = tls().connecting_to(crate::db::EngineKind::Postgres);
        assert_eq!(postgres.kind(), DbErrorKind::Tls);
        let postgres = postgres.to_string();
        assert!(
            postgres.contains("check sslmode and sslrootcert"),
            "{postgres}"
        );
        assert!(!postgres.contains("ssl-mode"), "{postgres}");
        let refused = io(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(
            refused
                .clone()
                .connecting_to(crate::db::EngineKind::Postgres),
            refused
        );
    }

    #[test]
    fn only_a_database_that_cannot_be_reached_is_unavailable() {
        assert!(io(std::io::ErrorKind::ConnectionRefused).is_unavailable());
        assert!(DbError::pool_timeout().is_unavailable());
        for about_one_transaction in [
            DbError::of(DbErrorKind::Deadlock),
            DbError::of(DbErrorKind::LockWaitTimeout),
            DbError::inconsistent(),
        ] {
            assert!(
                !about_one_transaction.is_unavailable(),
                "{about_one_transaction}"
            );
        }
    }

    #[test]
    fn a_decode_error_blames_the_statement_s_types_not_the_receiver_schema() {
        let e = DbError::from(sqlx::Error::ColumnNotFound("total".into()));
        assert_eq!(e.kind(), DbErrorKind::Inconsistent);
        let text = e.to_string();
        assert!(!text.contains("receiver schema"), "{text}");
        assert!(text.contains("what the statement expects"), "{text}");
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
