//! How an inbox connection to PostgreSQL is set up, and what the server
//! says it is.

use std::time::Duration;

use sqlx::postgres::{PgConnection, PgPoolOptions};
use sqlx::Executor;

/// The pool of an inbox store: as on MySQL, each connection runs `READ
/// COMMITTED`, and a row-lock wait ends (`lock_timeout`, SQLSTATE 55P03)
/// after half the transaction's time budget, at least a second.
pub(crate) fn pool_options(max_connections: u32, transaction_timeout: Duration) -> PgPoolOptions {
    let lock_wait = (transaction_timeout.as_millis() / 2).max(1000);
    PgPoolOptions::new()
        .max_connections(max_connections)
        // No ping before each use, as on MySQL: a dropped connection fails
        // its first statement, and that delivery is retried, never ACKed.
        .test_before_acquire(false)
        .acquire_timeout(transaction_timeout)
        .after_connect(move |conn, _meta| {
            Box::pin(async move {
                let settings = format!(
                    "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ COMMITTED; \
                     SET lock_timeout = {lock_wait}"
                );
                conn.execute(sqlx::raw_sql(&settings)).await?;
                Ok(())
            })
        })
}

/// `SELECT 1`: whether the server answers on this connection.
pub(crate) async fn ping(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query_scalar::<_, i32>("SELECT 1")
        .fetch_one(conn)
        .await
        .map(drop)
}

/// The connection's isolation level (`read committed`), row-lock wait,
/// and whether a statement outside `BEGIN` commits on its own (always, on
/// PostgreSQL).
pub(crate) async fn settings(
    conn: &mut PgConnection,
) -> Result<(String, Duration, bool), sqlx::Error> {
    let (isolation, lock_wait_ms): (String, f64) = sqlx::query_as(
        "SELECT current_setting('transaction_isolation'), \
         extract(epoch FROM current_setting('lock_timeout')::interval)::float8 * 1000",
    )
    .fetch_one(conn)
    .await?;
    Ok((isolation, Duration::from_millis(lock_wait_ms as u64), true))
}

/// Runs a statement that touches no row (a privilege probe).
pub(crate) async fn probe(conn: &mut PgConnection, statement: &str) -> Result<(), sqlx::Error> {
    conn.execute(statement).await.map(drop)
}
