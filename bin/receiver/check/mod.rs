//! `receiver check`, and the self-check that `consume` and `demo` run before
//! they lease anything.
//!
//! The database side: the server answers the runtime account, both tables
//! exist with the columns of `schema.sql`, and the account may `SELECT`,
//! `INSERT` and `UPDATE` them. Privileges are asked of the server itself,
//! with statements that touch no row (`WHERE 1 = 0`) inside a transaction
//! that is rolled back, so grants through roles, wildcards or column lists
//! are judged exactly as the runtime statements will be.
//!
//! The Orbit side: the server answers, the token is valid and has the scopes
//! the command needs (asked without changing anything, see
//! `OrbitClient::has_scope`), and the subscription is bound to the
//! configured queue.
//!
//! Every problem says whether waiting can mend it (`Problem::is_transient`):
//! a server that cannot be reached yet is waited for, a refusal is not.

mod database;
mod orbit;
mod problem;

use std::fmt;

pub use self::database::{
    database, database_problem, replication, skip_locked, unready_problem, DATABASE_CHECKS,
};
pub use self::orbit::{orbit_access, subscription, ORBIT_CHECKS};
pub use self::problem::{missing_table_hint, Problem};

/// The warning for a receiver name with no rows on its queue beside names
/// that have some (`stats::names_beside`): never a refusal, a first start
/// under a new name is legitimate. `None` too when the names cannot be read:
/// the checks that matter report that.
pub async fn name_warning(
    dsn: &result_inbox::db::Dsn,
    scope: &result_inbox::scope::InboxScope,
) -> Option<String> {
    let beside = result_inbox::stats::names_beside(dsn, scope).await.ok()?;
    (!beside.is_empty()).then(|| {
        let names: Vec<String> = beside.iter().map(|n| format!("{n:?}")).collect();
        format!(
            "receiver name {:?} has no rows on queue {}, where {} {}: check RECEIVER_NAME (a first start under a new name is fine)",
            scope.receiver.as_str(),
            scope.queue_id,
            names.join(", "),
            if names.len() == 1 { "has" } else { "have" }
        )
    })
}

/// The warning for an account that may not read `receiver_pruned` where
/// it is there: `consume` needs nothing of it, but `verify` run as this
/// account after a prune would report every pruned task. `None` when it
/// can read it, when the table is not there (or the server will not say,
/// as MySQL does not to an account without a grant on it), or when the
/// question cannot be asked: the checks that matter report that.
pub async fn tally_warning(dsn: &result_inbox::db::Dsn) -> Option<String> {
    let unreadable = result_inbox::verify::tally_unreadable(dsn).await.ok()?;
    unreadable.then(|| {
        "the account may not SELECT receiver_pruned, which is there: after a prune, `receiver verify` run as this account reports each pruned task as applied_events_mismatch; grant it SELECT on receiver_pruned".to_owned()
    })
}

/// The NATS checks of `receiver check --source nats`, in order: `nats`
/// (reachable, login, TLS), `consumer` (the stream and its durable pull
/// consumer exist, explicit acks, filter subject = the queue's subject).
#[cfg(feature = "nats")]
pub const NATS_CHECKS: [&str; 2] = ["nats", "consumer"];

/// What `check --source rabbitmq` checks beyond the database.
#[cfg(feature = "rabbitmq")]
pub const RABBITMQ_CHECKS: [&str; 2] = ["rabbitmq", "queue"];

/// One named check and what it found: printed as `check=<name> ok`,
/// `check=<name> FAIL <reason>` or `check=<name> not run (check <name>
/// failed)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// Whether the check passed.
    pub ok: bool,
    /// The line printed for it.
    line: String,
}

impl Finding {
    /// The finding of one check that stands alone: `ok`, or `FAIL` and why.
    pub fn of(check: &'static str, outcome: Result<(), String>) -> Finding {
        let verdict = match &outcome {
            Ok(()) => "ok".to_owned(),
            Err(reason) => format!("FAIL {reason}"),
        };
        Finding {
            ok: outcome.is_ok(),
            line: format!("check={check} {verdict}"),
        }
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.line)
    }
}

impl Finding {
    /// A check that was not run because `failed` failed before it.
    pub fn not_run(check: &'static str, failed: &str) -> Finding {
        Finding {
            ok: false,
            line: format!("check={check} not run (check {failed} failed)"),
        }
    }

    /// A finding that never fails the command: `check=<name> ok <detail>`,
    /// or `check=<name> WARN <detail>` for what an operator should know.
    pub fn advisory(check: &str, ok: bool, detail: impl fmt::Display) -> Finding {
        let verdict = if ok { "ok" } else { "WARN" };
        Finding {
            ok: true,
            line: format!("check={check} {verdict} {detail}"),
        }
    }
}

/// The findings of a sequence of checks that stopped at `outcome`: those
/// before the failed one passed, the failed one names its problem, those
/// after it were not run.
pub fn findings(checks: &[&'static str], outcome: &Result<(), Problem>) -> Vec<Finding> {
    let failed_at = match outcome {
        Ok(()) => checks.len(),
        Err(p) => checks
            .iter()
            .position(|c| *c == p.check())
            .unwrap_or(checks.len()),
    };
    checks
        .iter()
        .enumerate()
        .map(|(i, check)| {
            let verdict = match outcome {
                Err(p) if i == failed_at => format!("FAIL {}", p.reason()),
                Err(_) if i > failed_at => format!("not run (check {} failed)", checks[failed_at]),
                _ => "ok".to_owned(),
            };
            Finding {
                ok: i < failed_at,
                line: format!("check={check} {verdict}"),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_after_a_failed_one_are_reported_as_not_run() {
        let outcome = Err(Problem::MissingTable {
            table: "receiver_inbox",
        });
        let lines: Vec<String> = findings(&DATABASE_CHECKS, &outcome)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(lines[0], "check=database ok");
        assert!(lines[1].starts_with("check=schema FAIL table receiver_inbox is missing"));
        assert_eq!(lines[2], "check=privileges not run (check schema failed)");
    }
}
