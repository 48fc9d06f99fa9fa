//! The database checks: reachable, both tables with their columns, and the
//! runtime account's grants, asked with statements that touch no row.

use result_inbox::db::{DbError, Engine, EngineKind};
use result_inbox::inbox::{InboxStore, Unready};
use result_inbox::outbox::{self, OutboxError};

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

/// Whether the server has `FOR UPDATE SKIP LOCKED`, which every relay
/// claims effects with (MySQL 8.0.1, MariaDB 10.6, PostgreSQL 9.5 and
/// later): asked with the outbox's check, so that a server without it is
/// refused before anything is leased, naming the version needed, not by
/// the relay once deliveries are being applied.
pub async fn skip_locked<E: Engine>(store: &InboxStore<E>) -> Result<(), Problem> {
    let mut session = store.session().await.map_err(database_problem)?;
    let checked = outbox::check_skip_locked::<E>(session.connection()).await;
    let _ = session.rollback().await;
    checked.map_err(skip_locked_problem)
}

/// What [`skip_locked`] found, as the outbox check's problem.
fn skip_locked_problem(e: OutboxError) -> Problem {
    match e {
        OutboxError::Database(e) => database_problem(e),
        e => Problem::SkipLocked(e.to_string()),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_without_skip_locked_fails_the_outbox_check_for_good_naming_the_version_needed() {
        for (engine, version, needs) in [
            (EngineKind::MySql, "5.7.44-log", "MySQL 8.0.1 or later"),
            (
                EngineKind::MySql,
                "10.5.23-MariaDB",
                "MariaDB 10.6 or later",
            ),
            (EngineKind::Postgres, "9.4.26", "PostgreSQL 9.5 or later"),
        ] {
            let refused = outbox::skip_locked_support(engine, version).unwrap_err();
            let problem = skip_locked_problem(refused);
            assert_eq!(problem.check(), "outbox");
            assert!(problem.is_configuration() && !problem.is_transient());
            let reason = problem.reason();
            assert!(
                reason.contains("lacks FOR UPDATE SKIP LOCKED") && reason.contains(needs),
                "{reason}"
            );
            assert!(reason.contains(version), "{reason}");
        }
    }
}
