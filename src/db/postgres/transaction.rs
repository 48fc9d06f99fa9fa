//! The transaction of an inbox connection on PostgreSQL, as sqlx knows it
//! or not. PostgreSQL has no session without autocommit: every
//! transaction begins with `BEGIN`, which the inbox's first `INSERT` sends
//! in the same round trip (`inbox.rs`).

use sqlx::postgres::{PgConnection, PgTransactionManager};
use sqlx::{Executor, TransactionManager};

use super::statement;
use crate::db::trace::traced;

/// How deep sqlx knows the connection's transaction.
pub(crate) fn depth(conn: &PgConnection) -> usize {
    PgTransactionManager::get_transaction_depth(conn)
}

/// `BEGIN`, through sqlx.
pub(crate) async fn begin(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    traced(
        statement("BEGIN", None),
        PgTransactionManager::begin(conn, None),
    )
    .await
}

/// Makes an open transaction sqlx's own, so that `begin()` on the
/// connection sends `SAVEPOINT`: nothing is sent when sqlx knows it
/// already, as it does after every `BEGIN` the inbox sends.
pub(crate) async fn adopt(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    if depth(conn) == 0 {
        PgTransactionManager::begin(conn, Some("SELECT 1".into())).await?;
    }
    Ok(())
}

/// Rolls back the savepoints sqlx opened inside the transaction.
pub(crate) async fn close_nested(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    while depth(conn) > 1 {
        PgTransactionManager::rollback(conn).await?;
    }
    Ok(())
}

/// The savepoint one delivery of a batch starts at.
pub(crate) async fn savepoint(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    traced(
        statement("SAVEPOINT", None),
        conn.execute("SAVEPOINT delivery"),
    )
    .await?;
    Ok(())
}

/// Undoes everything since [`savepoint`].
pub(crate) async fn rollback_to_savepoint(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    traced(
        statement("ROLLBACK TO SAVEPOINT", None),
        conn.execute("ROLLBACK TO SAVEPOINT delivery"),
    )
    .await?;
    Ok(())
}

/// `COMMIT` (or `ROLLBACK`) of the whole transaction.
pub(crate) async fn end(conn: &mut PgConnection, commit: bool) -> Result<(), sqlx::Error> {
    let span = statement(if commit { "COMMIT" } else { "ROLLBACK" }, None);
    let ended = async {
        match (depth(conn), commit) {
            (0, true) => conn.execute("COMMIT").await.map(drop),
            (0, false) => conn.execute("ROLLBACK").await.map(drop),
            (_, true) => PgTransactionManager::commit(conn).await,
            (_, false) => PgTransactionManager::rollback(conn).await,
        }
    };
    traced(span, ended).await
}
