//! How an inbox connection is set up, and what the server says it is.

use std::time::Duration;

use sqlx::mysql::{MySqlConnection, MySqlPoolOptions};
use sqlx::Executor;

/// The pool of an inbox store: at most `max_connections`, waiting at most
/// `transaction_timeout` for one. Each connection runs `READ COMMITTED`
/// with autocommit off, so that the inbox `INSERT` opens each transaction
/// itself (see `transaction.rs`), and a row-lock wait ends after half the
/// transaction's time budget (`innodb_lock_wait_timeout` takes whole
/// seconds, at least 1).
pub(crate) fn pool_options(
    max_connections: u32,
    transaction_timeout: Duration,
) -> MySqlPoolOptions {
    let lock_wait = (transaction_timeout.as_secs() / 2).max(1);
    MySqlPoolOptions::new()
        .max_connections(max_connections)
        // No PING before each use: it is one more round trip on every
        // apply. A connection the server dropped (restart, failover) fails
        // its first statement instead; that apply is a retryable error,
        // never ACKed, and Orbit delivers the event again. Idle connections
        // are closed by the pool (10 min) long before MySQL's own
        // wait_timeout.
        .test_before_acquire(false)
        .acquire_timeout(transaction_timeout)
        .after_connect(move |conn, _meta| {
            Box::pin(async move {
                let settings = format!(
                    "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED; \
                     SET SESSION innodb_lock_wait_timeout = {lock_wait}; \
                     SET SESSION autocommit = 0"
                );
                conn.execute(sqlx::raw_sql(&settings)).await?;
                Ok(())
            })
        })
}

/// `SELECT 1` and `ROLLBACK`: whether the server answers on this
/// connection and takes transactions.
pub(crate) async fn ping(conn: &mut MySqlConnection) -> Result<(), sqlx::Error> {
    sqlx::query_scalar::<_, i32>("SELECT 1")
        .fetch_one(&mut *conn)
        .await?;
    // A Galera node outside the primary component answers a SELECT that
    // reads no table, but refuses this (1047, not ready): without it the
    // probe would close the breaker on a node that takes no transaction.
    // With autocommit off, the SELECT opened none, so it ends nothing.
    conn.execute("ROLLBACK").await.map(drop)
}

/// The connection's isolation level (`READ-COMMITTED`), row-lock wait and
/// autocommit, as the server reports them.
pub(crate) async fn settings(
    conn: &mut MySqlConnection,
) -> Result<(String, Duration, bool), sqlx::Error> {
    // MySQL 8 names the variable transaction_isolation; MariaDB 10 only
    // knows tx_isolation.
    let isolation: String =
        match sqlx::query_scalar("SELECT CAST(@@SESSION.transaction_isolation AS CHAR)")
            .fetch_one(&mut *conn)
            .await
        {
            Ok(v) => v,
            Err(_) => {
                sqlx::query_scalar("SELECT CAST(@@SESSION.tx_isolation AS CHAR)")
                    .fetch_one(&mut *conn)
                    .await?
            }
        };
    let (lock_wait, autocommit): (u64, i64) =
        sqlx::query_as("SELECT @@SESSION.innodb_lock_wait_timeout, @@SESSION.autocommit")
            .fetch_one(&mut *conn)
            .await?;
    Ok((isolation, Duration::from_secs(lock_wait), autocommit != 0))
}

/// Runs a statement that touches no row (a privilege probe).
pub(crate) async fn probe(conn: &mut MySqlConnection, statement: &str) -> Result<(), sqlx::Error> {
    conn.execute(statement).await.map(drop)
}
