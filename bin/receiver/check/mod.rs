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

use result_inbox::db::Dsn;
use result_inbox::ids::SubscriptionId;
use result_inbox::inbox::{InboxStore, StoreOptions};
use result_inbox::orbit::{OrbitError, Scope};
use result_inbox::scope::{InboxScope, ReceiverName};

pub use self::database::{database, DATABASE_CHECKS};
pub use self::orbit::{orbit_access, subscription, ORBIT_CHECKS};
pub use self::problem::Problem;
use crate::config::OrbitSettings;

/// What `receiver check` checks.
#[derive(Debug, Clone)]
pub struct CheckConfig {
    /// Where Orbit is and the token and queue to use there.
    pub orbit: OrbitSettings,
    /// The receiver's own database, with the runtime account.
    pub dsn: Dsn,
    /// The receiver's fixed name.
    pub name: ReceiverName,
    /// The subscription `consume` would consume, checked when given.
    pub subscription: Option<SubscriptionId>,
    /// Check the scopes `demo` needs (all five) instead of those of
    /// `consume`.
    pub demo: bool,
    /// Timeout of every single call to Orbit.
    pub orbit_call_timeout: std::time::Duration,
}

/// Runs every check once, waiting for nothing: the database checks, then
/// the Orbit checks (the scopes of `consume` or of `demo`, and the
/// subscription when one is given). Fails only when the Orbit client cannot
/// be built from the settings.
pub async fn run(config: CheckConfig) -> Result<Vec<Finding>, OrbitError> {
    let client = config.orbit.client(config.orbit_call_timeout)?;
    let scope = InboxScope::new(config.name.clone(), config.orbit.queue_id.clone());
    let store = InboxStore::connect_lazy(&config.dsn, scope, StoreOptions::default());
    let mut all = findings(&DATABASE_CHECKS, &database(&store).await);

    let scopes: &[Scope] = if config.demo {
        &Scope::DEMO
    } else {
        &Scope::CONSUME
    };
    let checks: &[&'static str] = match config.subscription {
        Some(_) => &ORBIT_CHECKS,
        None => &ORBIT_CHECKS[..3],
    };
    let mut outcome = orbit_access(&client, scopes).await;
    if let (Ok(()), Some(id)) = (&outcome, &config.subscription) {
        outcome = subscription(&client, id, &config.orbit.queue_id).await;
    }
    all.extend(findings(checks, &outcome));
    Ok(all)
}

/// The NATS checks of `receiver check --source nats`, in order: `nats`
/// (reachable, login, TLS), `consumer` (the stream and its durable pull
/// consumer exist, explicit acks, filter subject = the queue's subject).
pub const NATS_CHECKS: [&str; 2] = ["nats", "consumer"];

/// Runs the database checks and the NATS checks once, waiting for nothing,
/// as `receiver consume --source nats` runs them before fetching anything.
pub async fn run_nats(
    dsn: &Dsn,
    name: ReceiverName,
    settings: &result_inbox::nats::NatsSettings,
    timeout: std::time::Duration,
) -> Vec<Finding> {
    let scope = InboxScope::new(name, settings.queue_id.clone());
    let store = InboxStore::connect_lazy(dsn, scope, StoreOptions::default());
    let mut all = findings(&DATABASE_CHECKS, &database(&store).await);
    let outcome = result_inbox::nats::JetStreamSource::connect(settings, timeout)
        .await
        .map(drop)
        .map_err(Problem::Nats);
    all.extend(findings(&NATS_CHECKS, &outcome));
    all
}

/// One named check and what it found: printed as `check=<name> ok` or
/// `check=<name> FAIL <reason>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The check: `database`, `schema`, `privileges`, `orbit`, `token`,
    /// `scopes` or `subscription`.
    pub check: &'static str,
    /// Why it failed; `None` when it passed.
    pub problem: Option<String>,
}

impl Finding {
    /// Whether the check passed.
    pub fn ok(&self) -> bool {
        self.problem.is_none()
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.problem {
            None => write!(f, "check={} ok", self.check),
            Some(why) => write!(f, "check={} FAIL {why}", self.check),
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
            problem: match (i.cmp(&failed_at), outcome) {
                (std::cmp::Ordering::Less, _) | (_, Ok(())) => None,
                (std::cmp::Ordering::Equal, Err(p)) => Some(p.to_string()),
                (std::cmp::Ordering::Greater, Err(_)) => {
                    Some(format!("not run (check {} failed)", checks[failed_at]))
                }
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
        assert_eq!(
            lines[2],
            "check=privileges FAIL not run (check schema failed)"
        );
    }
}
