//! The database checks: reachable, both tables with their columns, and the
//! runtime account's grants, asked with statements that touch no row.

use result_inbox::db::schema::{self, TABLES};
use result_inbox::db::{errno, DbError};
use result_inbox::inbox::InboxStore;

use super::Problem;

/// The database checks, in order: `database`, `schema`, `privileges`.
pub const DATABASE_CHECKS: [&str; 3] = ["database", "schema", "privileges"];

/// Checks that the store's database is ready for the receiver: reachable,
/// both tables with their columns, and SELECT, INSERT, UPDATE on each.
/// Writes no row. Stops at the first problem.
pub async fn database(store: &InboxStore) -> Result<(), Problem> {
    store.try_connect().await.map_err(database_problem)?;
    let mut session = store.session().await.map_err(database_problem)?;
    let conn = session.connection();
    // A statement proves the login and database are usable: the pool may
    // hand out a connection made before a grant was revoked.
    sqlx::query("SELECT 1")
        .execute(&mut *conn)
        .await
        .map_err(|e| database_problem(e.into()))?;
    let found: Vec<(String, String)> = sqlx::query_as(
        "SELECT CAST(TABLE_NAME AS CHAR), CAST(COLUMN_NAME AS CHAR) \
         FROM information_schema.COLUMNS \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN (?, ?)",
    )
    .bind(TABLES[0])
    .bind(TABLES[1])
    .fetch_all(&mut *conn)
    .await
    .map_err(|e| database_problem(e.into()))?;
    for table in TABLES {
        let present: Vec<&str> = found
            .iter()
            .filter(|(t, _)| t == table)
            .map(|(_, c)| c.as_str())
            .collect();
        if present.is_empty() {
            return Err(Problem::MissingTable { table });
        }
        let missing: Vec<&'static str> = schema::columns(table)
            .into_iter()
            .filter(|c| !present.iter().any(|p| p.eq_ignore_ascii_case(c)))
            .collect();
        if !missing.is_empty() {
            return Err(Problem::MissingColumns {
                table,
                columns: missing,
            });
        }
    }
    for table in TABLES {
        for (privilege, statement) in privilege_probes(table) {
            if let Err(e) = sqlx::query(&statement).execute(&mut *conn).await {
                let e = DbError::from(e);
                return Err(match e.number() {
                    Some(errno::TABLE_ACCESS_DENIED | errno::COLUMN_ACCESS_DENIED) => {
                        Problem::MissingPrivilege { privilege, table }
                    }
                    _ => database_problem(e),
                });
            }
        }
    }
    session.rollback().await.map_err(database_problem)?;
    Ok(())
}

/// Statements that need `SELECT`, `INSERT` and `UPDATE` on `table`, on the
/// columns the runtime uses, and touch no row.
fn privilege_probes(table: &'static str) -> [(&'static str, String); 3] {
    ["SELECT", "INSERT", "UPDATE"].map(|p| (p, schema::privilege_probe(table, p)))
}

/// A database failure as the check it fails: reachable, refused, or other.
pub fn database_problem(e: DbError) -> Problem {
    if e.is_unavailable() {
        Problem::DatabaseUnreachable(e)
    } else if e.is_refusal() {
        Problem::DatabaseRefused(e)
    } else {
        Problem::Database(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runtime_check_asks_for_select_insert_update_and_never_delete() {
        for table in TABLES {
            let probes = privilege_probes(table);
            let asked: Vec<(&str, &str)> = probes
                .iter()
                .map(|(p, statement)| (*p, statement.split(' ').next().unwrap_or("")))
                .collect();
            assert_eq!(
                asked,
                [
                    ("SELECT", "SELECT"),
                    ("INSERT", "INSERT"),
                    ("UPDATE", "UPDATE")
                ]
            );
        }
    }
}
