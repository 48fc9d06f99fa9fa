//! How an inbox connection to PostgreSQL is set up, and what the server
//! says it is.

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgConnection, PgPoolOptions};
use sqlx::Executor;

use crate::db::Replication;

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
/// A standby answers too, but takes no write: it answers as one that is
/// read-only (25006), which the breaker takes for unreachable, so that a
/// consumer does not take deliveries from a primary a failover demoted.
pub(crate) async fn ping(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    conn.execute(
        "DO $$ BEGIN IF pg_is_in_recovery() THEN \
           RAISE EXCEPTION USING ERRCODE = '25006', MESSAGE = 'the server is a standby'; \
         END IF; END $$",
    )
    .await
    .map(drop)
}

/// For an address of several hosts: the first that takes writes (not a
/// standby), each asked within 2 s, and the connection that asked it.
/// `None` for one host, which is used as it is.
pub(crate) async fn writable(
    hosts: &[PgConnectOptions],
) -> Option<(PgConnectOptions, PgConnection)> {
    use sqlx::Connection;
    if hosts.len() < 2 {
        return None;
    }
    for options in hosts {
        let connected =
            tokio::time::timeout(Duration::from_secs(2), PgConnection::connect_with(options)).await;
        let Ok(Ok(mut conn)) = connected else {
            continue;
        };
        let standby: Result<bool, _> = sqlx::query_scalar("SELECT pg_is_in_recovery()")
            .fetch_one(&mut conn)
            .await;
        if matches!(standby, Ok(false)) {
            return Some((options.clone(), conn));
        }
        let _ = conn.close().await;
    }
    None
}

/// What the server says of its standbys. `pg_stat_replication` shows a
/// standby's `sync_state` only to an account with `pg_read_all_stats`;
/// the runtime role sees each standby's row with that column empty.
pub(crate) async fn replication(conn: &mut PgConnection) -> Result<Replication, sqlx::Error> {
    let (names, commit, standbys, synchronous, hidden, slots): (
        String,
        String,
        i64,
        i64,
        i64,
        i64,
    ) = sqlx::query_as(
        "SELECT current_setting('synchronous_standby_names'), \
             current_setting('synchronous_commit'), \
             (SELECT count(*) FROM pg_stat_replication), \
             (SELECT count(*) FROM pg_stat_replication WHERE sync_state IN ('sync', 'quorum')), \
             (SELECT count(*) FROM pg_stat_replication WHERE sync_state IS NULL), \
             (SELECT count(*) FROM pg_replication_slots WHERE slot_type = 'physical')",
    )
    .fetch_one(conn)
    .await?;
    Ok(Replication {
        standbys: standbys.unsigned_abs(),
        synchronous: (hidden == 0).then_some(synchronous.unsigned_abs()),
        slots: slots.unsigned_abs(),
        commit_waits: !names.trim().is_empty() && !matches!(commit.as_str(), "off" | "local"),
    })
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
