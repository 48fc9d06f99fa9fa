//! The prune account's grants, asked of the server with statements that
//! touch no row.

use sqlx::mysql::MySqlConnection;
use sqlx::Connection;

use crate::db::schema::{self, INBOX_TABLE, PRUNED_TABLE, TASK_VIEW_TABLE};
use crate::db::{errno, DbError, Dsn};

use super::PruneError;

/// What prune needs on each table, in the order they are checked.
pub const PRIVILEGES: [(&str, &[&str]); 3] = [
    (INBOX_TABLE, &["SELECT", "DELETE"]),
    (TASK_VIEW_TABLE, &["SELECT"]),
    (PRUNED_TABLE, &["SELECT", "INSERT", "UPDATE"]),
];

/// Connects as `receiver prune` would and checks every grant of
/// [`PRIVILEGES`], changing nothing: what `receiver check --prune` runs.
pub async fn check(dsn: &Dsn) -> Result<(), PruneError> {
    let mut conn = dsn.connect().await?;
    let outcome = check_privileges(&mut conn).await;
    let _ = conn.close().await;
    outcome
}

/// Checks every grant of [`PRIVILEGES`] on `conn`, inside a transaction it
/// rolls back; the first one missing is the error. Grants through roles,
/// wildcards or column lists are judged exactly as prune's own statements
/// will be.
pub async fn check_privileges(conn: &mut MySqlConnection) -> Result<(), PruneError> {
    sqlx::query("START TRANSACTION").execute(&mut *conn).await?;
    let outcome = probe_all(conn).await;
    sqlx::query("ROLLBACK").execute(&mut *conn).await?;
    outcome
}

async fn probe_all(conn: &mut MySqlConnection) -> Result<(), PruneError> {
    for (table, privileges) in PRIVILEGES {
        for &privilege in privileges {
            let statement = schema::privilege_probe(table, privilege);
            if let Err(e) = sqlx::query(&statement).execute(&mut *conn).await {
                let e = DbError::from(e);
                return Err(match e.number() {
                    Some(errno::TABLE_ACCESS_DENIED | errno::COLUMN_ACCESS_DENIED) => {
                        PruneError::MissingPrivilege { privilege, table }
                    }
                    _ => PruneError::Database(e),
                });
            }
        }
    }
    Ok(())
}
