//! The MySQL and MariaDB error numbers the receiver acts on, and what each
//! says. Classification is by number, never by message text
//! (`DatabaseError::code()` is the SQLSTATE, not the number); the numbers
//! of multi-primary clusters (MariaDB Galera, MySQL Group Replication) are
//! among them.

use crate::db::error::{Condition, DbErrorKind, DUPLICATE_KEY_DETAIL};

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

/// The kind of a server error, by its number alone.
pub(crate) fn kind_of(number: Option<u16>) -> DbErrorKind {
    match number {
        Some(
            SERVER_SHUTDOWN | CONNECTION_KILLED | CLIENT_INTERACTION_TIMEOUT | WSREP_NOT_READY,
        ) => DbErrorKind::Connection,
        Some(DEADLOCK | ERROR_DURING_COMMIT | TRANSACTION_ROLLBACK_DURING_COMMIT) => {
            DbErrorKind::Deadlock
        }
        Some(LOCK_WAIT_TIMEOUT) => DbErrorKind::LockWaitTimeout,
        Some(
            DB_ACCESS_DENIED
            | ACCESS_DENIED
            | TABLE_ACCESS_DENIED
            | COLUMN_ACCESS_DENIED
            | SPECIFIC_ACCESS_DENIED,
        ) => DbErrorKind::PermissionDenied,
        _ => DbErrorKind::Server,
    }
}

/// What an operator can act on for a server error, by its number alone.
pub(crate) fn detail_of(number: Option<u16>) -> Option<&'static str> {
    match number {
        Some(ACCESS_DENIED) => Some("wrong user or password"),
        Some(BAD_DB) => Some("unknown database"),
        Some(DB_ACCESS_DENIED) => Some("the account may not use this database"),
        Some(SERVER_SHUTDOWN) => Some("the server is shutting down"),
        Some(WSREP_NOT_READY) => {
            Some("the cluster node is not ready for application use (not in the primary component)")
        }
        Some(ERROR_DURING_COMMIT | TRANSACTION_ROLLBACK_DURING_COMMIT) => {
            Some("transaction rolled back at commit (certification failed)")
        }
        Some(DUPLICATE_KEY) => Some(DUPLICATE_KEY_DETAIL),
        _ => None,
    }
}

/// What the neutral predicates of [`DbError`](crate::db::DbError) ask of
/// a server error, by its number alone: an unknown database, a privilege
/// lacking on a table or its columns, a duplicate key.
pub(crate) fn condition_of(number: Option<u16>) -> Option<Condition> {
    match number {
        Some(BAD_DB) => Some(Condition::UnknownDatabase),
        Some(TABLE_ACCESS_DENIED | COLUMN_ACCESS_DENIED) => Some(Condition::LacksTablePrivilege),
        Some(DUPLICATE_KEY) => Some(Condition::DuplicateKey),
        _ => None,
    }
}

/// The server's error number, when `e` is an error the server sent.
pub(crate) fn number_of(e: &sqlx::Error) -> Option<u16> {
    e.as_database_error()?
        .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
        .map(|m| m.number())
}

/// Whether `e` is the server's duplicate-key error, the only error that leads
/// to the inbox's duplicate path.
pub(crate) fn is_duplicate_key(e: &sqlx::Error) -> bool {
    number_of(e) == Some(DUPLICATE_KEY)
}
