//! The database checks: reachable, both tables with their columns, and the
//! runtime account's grants, asked with statements that touch no row.

use result_inbox::db::{DbError, Engine, EngineKind};
use result_inbox::inbox::{InboxStore, Unready};

use super::{Finding, Problem};

/// The database checks, in order: `database`, `schema`, `privileges`.
pub const DATABASE_CHECKS: [&str; 3] = ["database", "schema", "privileges"];

/// Checks that the store's database is ready for the receiver: reachable,
/// both tables with their columns, and SELECT, INSERT, UPDATE on each.
/// Writes no row. Stops at the first problem.
pub async fn database<E: Engine>(store: &InboxStore<E>) -> Result<(), Problem> {
    store
        .check_ready()
        .await
        .map_err(|unready| unready_problem(unready, store.engine()))
}

/// What a store's readiness check (`check_ready`, `check_outbox_ready`)
/// found missing, as the check it fails; a table without its columns names
/// the file of `engine` that creates it.
pub fn unready_problem(unready: Unready, engine: EngineKind) -> Problem {
    match unready {
        Unready::MissingTable { table } => Problem::MissingTable { table },
        Unready::MissingColumns { table, columns } => Problem::MissingColumns {
            table,
            columns,
            schema_file: result_inbox::db::schema::file_of(table, engine),
        },
        Unready::MissingPrivilege { privilege, table } => {
            Problem::MissingPrivilege { privilege, table }
        }
        Unready::Database(e) => database_problem(e),
    }
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

/// `check=replication`, only where the server has standbys: `ok` when a
/// COMMIT it confirms waits for a synchronous standby, `WARN` when a
/// failover could lose commits the receiver acknowledged (never a failure:
/// the cluster chose availability, and the receiver can only say so).
pub async fn replication<E: Engine>(store: &InboxStore<E>) -> Option<Finding> {
    match store.replication().await {
        Ok(Some(r)) if r.is_replicated() => {
            Some(Finding::advisory("replication", r.is_synchronous(), r))
        }
        Ok(_) => None,
        Err(e) => Some(Finding::advisory(
            "replication",
            false,
            format_args!("the server's standbys could not be read: {e}"),
        )),
    }
}
