//! The PostgreSQL SQLSTATEs the receiver acts on, and what each says: the
//! kind of failure, the operator's hint, the condition the neutral
//! predicates ask. Classification is by SQLSTATE, never by message text.

use crate::db::error::{Condition, DbErrorKind, DUPLICATE_KEY_DETAIL};

/// PostgreSQL's `invalid_catalog_name`: unknown database.
pub(crate) const INVALID_CATALOG_NAME: &str = "3D000";
/// PostgreSQL's SQLSTATE `insufficient_privilege`: the role lacks a
/// privilege on a table (or other object) the statement names.
pub(crate) const INSUFFICIENT_PRIVILEGE: &str = "42501";
/// PostgreSQL's `unique_violation`: a unique key already holds the value.
pub(crate) const UNIQUE_VIOLATION: &str = "23505";

/// The SQLSTATE of a server error.
pub(crate) fn sqlstate(e: &sqlx::Error) -> Option<String> {
    let db = e.as_database_error()?;
    db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>()?;
    db.code().map(|c| c.into_owned())
}

/// PostgreSQL's `undefined_table`.
pub(crate) const UNDEFINED_TABLE: &str = "42P01";

/// The kind of a PostgreSQL error, by its SQLSTATE alone: a deadlock or a
/// serialization failure rolled the transaction back; a lock was not
/// granted within `lock_timeout`; the connection, the server or a standby
/// that took writes (after a failover) cannot serve; the account may not.
pub(crate) fn kind_of_sqlstate(code: &str) -> DbErrorKind {
    match code {
        "40P01" | "40001" => DbErrorKind::Deadlock,
        "55P03" => DbErrorKind::LockWaitTimeout,
        "57P01" | "57P02" | "57P03" | "25006" => DbErrorKind::Connection,
        c if c.starts_with("08") => DbErrorKind::Connection,
        "28000" | "28P01" | INSUFFICIENT_PRIVILEGE => DbErrorKind::PermissionDenied,
        _ => DbErrorKind::Server,
    }
}

/// What an operator can act on for a PostgreSQL error, by its SQLSTATE.
pub(crate) fn detail_of_sqlstate(code: &str) -> Option<&'static str> {
    match code {
        "28P01" | "28000" => Some("wrong user or password, or no access"),
        INVALID_CATALOG_NAME => Some("unknown database"),
        INSUFFICIENT_PRIVILEGE => Some("the account lacks a privilege"),
        "57P01" | "57P02" => Some("the server is shutting down"),
        "57P03" => Some("the server is starting up or not accepting connections"),
        "25006" => Some("the server is a read-only standby (a failover moved the primary)"),
        "40001" => Some("serialization failure, transaction rolled back"),
        UNIQUE_VIOLATION => Some(DUPLICATE_KEY_DETAIL),
        _ => None,
    }
}

/// What the neutral predicates of [`DbError`](crate::db::DbError) ask of
/// a PostgreSQL error, by its SQLSTATE alone: an unknown database, a
/// privilege lacking on what the statement names, a duplicate key.
pub(crate) fn condition_of_sqlstate(code: &str) -> Option<Condition> {
    match code {
        INVALID_CATALOG_NAME => Some(Condition::UnknownDatabase),
        INSUFFICIENT_PRIVILEGE => Some(Condition::LacksTablePrivilege),
        UNIQUE_VIOLATION => Some(Condition::DuplicateKey),
        _ => None,
    }
}

/// `unique_violation` (23505): a unique key already holds the value.
pub(crate) fn is_unique_violation(e: &sqlx::Error) -> bool {
    sqlstate(e).as_deref() == Some(UNIQUE_VIOLATION)
}
