//! Whether a store's database is ready for the runtime: reachable, both
//! tables with every column of the schema, and `SELECT`, `INSERT`,
//! `UPDATE` on each, asked with statements that touch no row.

use super::InboxStore;
use crate::db::schema::{self, TABLES};
use crate::db::{DbError, Engine};

/// The privileges the runtime needs on each table; never `DELETE`.
const RUNTIME_PRIVILEGES: [&str; 3] = ["SELECT", "INSERT", "UPDATE"];

/// What the runtime needs of its database and does not have.
#[derive(Debug, thiserror::Error)]
pub enum Unready {
    /// The database cannot be used: unreachable, a refused login, or
    /// another error (see the [`DbError`]).
    #[error("{0}")]
    Database(DbError),
    /// A receiver table does not exist (or the account may not see it).
    #[error("table {table} is missing")]
    MissingTable {
        /// The table.
        table: &'static str,
    },
    /// A receiver table lacks columns of the schema.
    #[error("table {table} lacks the column(s) {}", .columns.join(", "))]
    MissingColumns {
        /// The table.
        table: &'static str,
        /// The missing columns.
        columns: Vec<&'static str>,
    },
    /// The account lacks a privilege the runtime needs.
    #[error("the account may not {privilege} {table}")]
    MissingPrivilege {
        /// `SELECT`, `INSERT` or `UPDATE`.
        privilege: &'static str,
        /// The table.
        table: &'static str,
    },
}

impl From<DbError> for Unready {
    fn from(e: DbError) -> Self {
        Unready::Database(e)
    }
}

impl<E: Engine> InboxStore<E> {
    /// Checks, writing no row, that the database is ready for the runtime:
    /// on an address of several hosts, the one that takes writes (the
    /// store keeps using it); a connection made outside the pool (so that a refused login says
    /// why), both tables with their columns, and each privilege. Stops at
    /// the first thing missing.
    pub async fn check_ready(&self) -> Result<(), Unready> {
        self.check_tables(&TABLES).await
    }

    /// The same for `receiver_outbox`, which an inner service that
    /// records effects needs besides the two tables: there, with its
    /// columns, and `SELECT`, `INSERT`, `UPDATE` on it.
    pub async fn check_outbox_ready(&self) -> Result<(), Unready> {
        self.check_tables(&[schema::OUTBOX_TABLE]).await
    }

    async fn check_tables(&self, tables: &[&'static str]) -> Result<(), Unready> {
        // Opened lazily, the pool points at an address's first host, which
        // after a failover is a standby: asked here, as the breaker's probe
        // asks, every start finds the host that takes writes.
        self.follow_writer().await;
        self.try_connect().await?;
        let mut session = self.session().await?;
        let conn = session.connection();
        // A statement proves the login and database are usable: the pool
        // may hand out a connection made before a grant was revoked.
        E::ping(conn).await.map_err(DbError::from)?;
        for &table in tables {
            let present = E::table_columns(conn, table).await.map_err(DbError::from)?;
            if present.is_empty() {
                return Err(Unready::MissingTable { table });
            }
            let missing: Vec<&'static str> = schema::columns(table)
                .into_iter()
                .filter(|c| !present.iter().any(|p| p.eq_ignore_ascii_case(c)))
                .collect();
            if !missing.is_empty() {
                return Err(Unready::MissingColumns {
                    table,
                    columns: missing,
                });
            }
        }
        for &table in tables {
            for privilege in RUNTIME_PRIVILEGES {
                let statement = schema::privilege_probe(table, privilege);
                if let Err(e) = E::probe(conn, &statement).await {
                    let e = DbError::from(e);
                    return Err(if e.lacks_table_privilege() {
                        Unready::MissingPrivilege { privilege, table }
                    } else {
                        Unready::Database(e)
                    });
                }
            }
        }
        session.rollback().await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runtime_check_asks_for_select_insert_update_and_never_delete() {
        for table in TABLES {
            let asked: Vec<(&str, String)> = RUNTIME_PRIVILEGES
                .iter()
                .map(|p| {
                    let probe = schema::privilege_probe(table, p);
                    (*p, probe.split(' ').next().unwrap_or("").to_owned())
                })
                .collect();
            assert_eq!(
                asked,
                [
                    ("SELECT", "SELECT".to_owned()),
                    ("INSERT", "INSERT".to_owned()),
                    ("UPDATE", "UPDATE".to_owned())
                ]
            );
        }
    }
}
