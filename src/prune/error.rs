//! Why a prune stopped.

use std::time::Duration;

use crate::db::schema::PRUNED_TABLE;
use crate::db::DbError;

/// Why a prune stopped. Every batch committed before it stays deleted (and
/// archived); the batch it was in is rolled back.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PruneError {
    /// The window is shorter than the minimum retention.
    #[error(
        "a window of {} is below the minimum retention of {}: the window must cover every \
         redelivery the source can still make (Orbit: lease × budget, and budgets added by an \
         operator; NATS: AckWait × MaxDeliver and the stream's max age) and the age of the \
         oldest backup that may be restored; lower the minimum only on purpose",
        human(*.older_than),
        human(*.minimum)
    )]
    WindowTooShort {
        /// The window asked for.
        older_than: Duration,
        /// The floor.
        minimum: Duration,
    },
    /// A batch size of zero rows.
    #[error("a batch must have at least one row")]
    EmptyBatch,
    /// The account lacks a grant prune needs. The server answers the same
    /// for a table that does not exist and the account has no grant on, as
    /// `receiver_pruned` after a plain `receiver init`: for that table the
    /// message also says what creates it.
    #[error(
        "the account may not {privilege} {table} (prune needs SELECT, DELETE on receiver_inbox, \
         SELECT on receiver_task_views, SELECT, INSERT, UPDATE on receiver_pruned and, where \
         receiver_outbox is there, SELECT, DELETE on it; the runtime account never gets DELETE: \
         give prune an account of its own{})",
        tally_hint(table)
    )]
    MissingPrivilege {
        /// `SELECT`, `INSERT`, `UPDATE` or `DELETE`.
        privilege: &'static str,
        /// The table.
        table: &'static str,
    },
    /// The archive could not make a batch durable; that batch was rolled
    /// back.
    #[error("archive: {0}")]
    Archive(std::io::Error),
    /// The database failed (redacted).
    #[error("database: {0}")]
    Database(#[from] DbError),
}

/// What creates the tally, for a missing grant on it: it cannot be granted
/// before it exists, and a plain `receiver init` does not create it.
fn tally_hint(table: &str) -> &'static str {
    if table == PRUNED_TABLE {
        "; a plain `receiver init` does not create receiver_pruned: \
         `receiver init --keep-existing --retention` adds it"
    } else {
        ""
    }
}

impl PruneError {
    /// Whether the command or the account has to change (exit code 2): the
    /// window, the batch size, a grant, a refused login, a missing table.
    pub fn is_configuration(&self) -> bool {
        match self {
            PruneError::WindowTooShort { .. }
            | PruneError::EmptyBatch
            | PruneError::MissingPrivilege { .. } => true,
            PruneError::Database(e) => e.is_refusal() || e.missing_table().is_some(),
            PruneError::Archive(_) => false,
        }
    }
}

impl From<sqlx::Error> for PruneError {
    fn from(e: sqlx::Error) -> Self {
        PruneError::Database(e.into())
    }
}

/// A duration in the largest whole unit that spells it (`7d`, `36h`,
/// `90m`, `45s`), as the command line takes it.
pub(crate) fn human(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0 => format!("{}ms", d.as_millis()),
        s if s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s % 3_600 == 0 => format!("{}h", s / 3_600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_spelled_in_their_largest_whole_unit() {
        assert_eq!(human(Duration::from_secs(7 * 86_400)), "7d");
        assert_eq!(human(Duration::from_secs(36 * 3_600)), "36h");
        assert_eq!(human(Duration::from_secs(90 * 60)), "90m");
        assert_eq!(human(Duration::from_secs(45)), "45s");
    }
}
