//! The transaction of an inbox connection, as sqlx knows it or not.
//!
//! The store's connections run with `autocommit` off (`session.rs`), so the
//! first statement of a transaction opens it; sqlx's transaction manager
//! learns of one only when it goes through `begin` (which the single-row
//! insert of `inbox.rs` does). These functions end or nest a transaction
//! either way.

use sqlx::mysql::{MySqlConnection, MySqlTransactionManager};
use sqlx::{Executor, TransactionManager};

use super::statement;
use crate::db::trace::traced;

/// How deep sqlx knows the connection's transaction: 0 when it knows none
/// (none is open, or one the server opened by itself), 1 for its own, more
/// for savepoints inside it.
pub(crate) fn depth(conn: &MySqlConnection) -> usize {
    MySqlTransactionManager::get_transaction_depth(conn)
}

/// `BEGIN`, through sqlx, for a transaction whose first statement is not
/// the inbox's.
pub(crate) async fn begin(conn: &mut MySqlConnection) -> Result<(), sqlx::Error> {
    traced(
        statement("BEGIN", None),
        MySqlTransactionManager::begin(conn, None),
    )
    .await
}

/// Makes an open transaction sqlx's own, so that `begin()` on the
/// connection sends `SAVEPOINT` (a `BEGIN` would make MySQL commit what the
/// transaction wrote): nothing is sent when sqlx knows it already; one
/// statement that changes nothing (`DO 0`) tells sqlx otherwise.
pub(crate) async fn adopt(conn: &mut MySqlConnection) -> Result<(), sqlx::Error> {
    if depth(conn) == 0 {
        MySqlTransactionManager::begin(conn, Some("DO 0".into())).await?;
    }
    Ok(())
}

/// Rolls back the savepoints sqlx opened inside the transaction, down to
/// the transaction itself.
pub(crate) async fn close_nested(conn: &mut MySqlConnection) -> Result<(), sqlx::Error> {
    while depth(conn) > 1 {
        MySqlTransactionManager::rollback(conn).await?;
    }
    Ok(())
}

/// The savepoint one delivery of a batch starts at.
pub(crate) async fn savepoint(conn: &mut MySqlConnection) -> Result<(), sqlx::Error> {
    traced(
        statement("SAVEPOINT", None),
        conn.execute("SAVEPOINT delivery"),
    )
    .await?;
    Ok(())
}

/// Undoes everything since [`savepoint`].
pub(crate) async fn rollback_to_savepoint(conn: &mut MySqlConnection) -> Result<(), sqlx::Error> {
    traced(
        statement("ROLLBACK TO SAVEPOINT", None),
        conn.execute("ROLLBACK TO SAVEPOINT delivery"),
    )
    .await?;
    Ok(())
}

/// `COMMIT` (or `ROLLBACK`) of the whole transaction, through sqlx when it
/// knows the transaction (its depth goes back to 0 with it).
pub(crate) async fn end(conn: &mut MySqlConnection, commit: bool) -> Result<(), sqlx::Error> {
    let span = statement(if commit { "COMMIT" } else { "ROLLBACK" }, None);
    let ended = async {
        match (depth(conn), commit) {
            (0, true) => conn.execute("COMMIT").await.map(drop),
            (0, false) => conn.execute("ROLLBACK").await.map(drop),
            (_, true) => MySqlTransactionManager::commit(conn).await,
            (_, false) => MySqlTransactionManager::rollback(conn).await,
        }
    };
    traced(span, ended).await
}
