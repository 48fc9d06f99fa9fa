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

pub use self::database::{database, database_problem, DATABASE_CHECKS};
pub use self::orbit::{orbit_access, subscription, ORBIT_CHECKS};
pub use self::problem::Problem;

/// The NATS checks of `receiver check --source nats`, in order: `nats`
/// (reachable, login, TLS), `consumer` (the stream and its durable pull
/// consumer exist, explicit acks, filter subject = the queue's subject).
pub const NATS_CHECKS: [&str; 2] = ["nats", "consumer"];

/// One named check and what it found: printed as `check=<name> ok`,
/// `check=<name> FAIL <reason>` or `check=<name> not run (check <name>
/// failed)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The check: `database`, `schema`, `privileges`, `orbit`, `token`,
    /// `scopes` or `subscription`.
    pub check: &'static str,
    /// What it found.
    pub verdict: Verdict,
}

/// What one check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// It passed.
    Passed,
    /// It failed, for this reason.
    Failed(String),
    /// It was not run because the named check before it failed.
    NotRun(&'static str),
}

impl Finding {
    /// Whether the check passed.
    pub fn ok(&self) -> bool {
        self.verdict == Verdict::Passed
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.verdict {
            Verdict::Passed => write!(f, "check={} ok", self.check),
            Verdict::Failed(why) => write!(f, "check={} FAIL {why}", self.check),
            Verdict::NotRun(failed) => {
                write!(f, "check={} not run (check {failed} failed)", self.check)
            }
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
        .map(|(i, &check)| Finding {
            check,
            verdict: match (i.cmp(&failed_at), outcome) {
                (std::cmp::Ordering::Less, _) | (_, Ok(())) => Verdict::Passed,
                (std::cmp::Ordering::Equal, Err(p)) => Verdict::Failed(p.to_string()),
                (std::cmp::Ordering::Greater, Err(_)) => Verdict::NotRun(checks[failed_at]),
            },
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
