//! The prune account's grants, asked of the server with statements that
//! touch no row.

use sqlx::mysql::MySqlConnection;

use crate::db::any::{on_engine, AnyConnection};
use crate::db::schema::{self, INBOX_TABLE, PRUNED_TABLE, TASK_VIEW_TABLE};
use crate::db::{DbError, Dsn, Engine};

use super::PruneError;

/// What prune needs on each table, in the order they are checked.
pub const PRIVILEGES: [(&str, &[&str]); 3] = [
    (INBOX_TABLE, &["SELECT", "DELETE"]),
    (TASK_VIEW_TABLE, &["SELECT"]),
    (PRUNED_TABLE, &["SELECT", "INSERT", "UPDATE"]),
];

/// Connects as `receiver prune` would and checks every grant of
/// [`PRIVILEGES`], changing nothing: what `receiver check --prune` runs.
/// On the engine the address names.
pub async fn check(dsn: &Dsn) -> Result<(), PruneError> {
    let mut conn = AnyConnection::open(dsn).await?;
    let outcome = on_engine!(&mut conn, c => check_privileges_on::<E>(c).await);
    conn.close().await;
    outcome
}

/// Checks every grant of [`PRIVILEGES`] on `conn`, inside a transaction it
/// rolls back; the first one missing is the error. Grants through roles,
/// wildcards or column lists are judged exactly as prune's own statements
/// will be.
pub async fn check_privileges(conn: &mut MySqlConnection) -> Result<(), PruneError> {
    check_privileges_on::<sqlx::MySql>(conn).await
}

/// [`check_privileges`] on a connection of engine `E`.
pub(crate) async fn check_privileges_on<E: Engine>(
    conn: &mut E::Connection,
) -> Result<(), PruneError> {
    E::begin(&mut *conn).await?;
    let outcome = probe_all::<E>(&mut *conn).await;
    E::end(conn, false).await?;
    outcome
}

async fn probe_all<E: Engine>(conn: &mut E::Connection) -> Result<(), PruneError> {
    for (table, privileges) in PRIVILEGES {
        for &privilege in privileges {
            let statement = schema::privilege_probe(table, privilege);
            if let Err(e) = E::probe(&mut *conn, &statement).await {
                let e = DbError::from(e);
                return Err(if e.lacks_table_privilege() {
                    PruneError::MissingPrivilege { privilege, table }
                } else {
                    PruneError::Database(e)
                });
            }
        }
    }
    Ok(())
}
