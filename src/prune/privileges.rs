//! The prune account's grants, asked of the server with statements that
//! touch no row.

use sqlx::mysql::MySqlConnection;

use crate::db::any::{on_engine, AnyConnection};
use crate::db::schema::{self, INBOX_TABLE, OUTBOX_TABLE, PRUNED_TABLE, TASK_VIEW_TABLE};
use crate::db::{DbError, Dsn, Engine};

use super::PruneError;

/// What prune needs on each table, in the order they are checked.
pub const PRIVILEGES: [(&str, &[&str]); 3] = [
    (INBOX_TABLE, &["SELECT", "DELETE"]),
    (TASK_VIEW_TABLE, &["SELECT"]),
    (PRUNED_TABLE, &["SELECT", "INSERT", "UPDATE"]),
];

/// What prune needs on `receiver_outbox`, where it is there: it deletes
/// the sent effects past its window, and keeps an inbox row while its
/// event has effects left.
pub const OUTBOX_PRIVILEGES: [&str; 2] = ["SELECT", "DELETE"];

/// Connects as `receiver prune` would and checks every grant of
/// [`PRIVILEGES`], and of [`OUTBOX_PRIVILEGES`] where `receiver_outbox` is
/// there, changing nothing: what `receiver check --prune` runs. On the
/// engine the address names.
pub async fn check(dsn: &Dsn) -> Result<(), PruneError> {
    let mut conn = AnyConnection::open(dsn).await?;
    let outcome = on_engine!(&mut conn, c => check_privileges_on::<E>(c).await);
    conn.close().await;
    outcome.map(drop)
}

/// Checks every grant of [`PRIVILEGES`] (and of [`OUTBOX_PRIVILEGES`]
/// where `receiver_outbox` is there) on `conn`, inside transactions it
/// rolls back; the first one missing is the error. Grants through roles,
/// wildcards or column lists are judged exactly as prune's own statements
/// will be.
pub async fn check_privileges(conn: &mut MySqlConnection) -> Result<(), PruneError> {
    check_privileges_on::<sqlx::MySql>(conn).await.map(drop)
}

/// [`check_privileges`] on a connection of engine `E`: whether
/// `receiver_outbox` is there for prune.
pub(crate) async fn check_privileges_on<E: Engine>(
    conn: &mut E::Connection,
) -> Result<bool, PruneError> {
    E::begin(&mut *conn).await?;
    let outcome = probe_all::<E>(&mut *conn).await;
    E::end(&mut *conn, false).await?;
    outcome?;
    outbox_on::<E>(conn, &OUTBOX_PRIVILEGES).await
}

/// Whether `receiver_outbox` is there for prune: `true` when it is and the
/// account holds each of `privileges` on it, `false` when it is not there,
/// and the grant that lacks when it is there without it. Each probe in a
/// transaction of its own, rolled back (on PostgreSQL a failed statement
/// ends the transaction it is in).
///
/// "There" is as far as the account may see: MySQL refuses a table the
/// account holds no grant on the same way whether it exists or not, and
/// shows it only to an account that holds some grant on it. There, a
/// prune account given no grant on the outbox prunes as if it were absent
/// (inbox rows of effects not yet sent included): the docs give it
/// `SELECT, DELETE` on the table wherever the table is created.
pub(crate) async fn outbox_on<E: Engine>(
    conn: &mut E::Connection,
    privileges: &[&'static str],
) -> Result<bool, PruneError> {
    for &privilege in privileges {
        let statement = schema::privilege_probe(OUTBOX_TABLE, privilege);
        E::begin(&mut *conn).await?;
        let probed = E::probe(&mut *conn, &statement)
            .await
            .map_err(DbError::from);
        E::end(&mut *conn, false).await?;
        match probed {
            Ok(()) => {}
            Err(e) if e.missing_table() == Some(OUTBOX_TABLE) => return Ok(false),
            Err(e) if e.lacks_table_privilege() => {
                return match E::outbox_exists(conn).await? {
                    true => Err(PruneError::MissingPrivilege {
                        privilege,
                        table: OUTBOX_TABLE,
                    }),
                    false => Ok(false),
                };
            }
            Err(e) => return Err(PruneError::Database(e)),
        }
    }
    Ok(true)
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
