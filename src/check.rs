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
//! [`OrbitClient::has_scope`]), and the subscription is bound to the
//! configured queue.
//!
//! Every problem says whether waiting can mend it ([`Problem::is_transient`]):
//! a server that cannot be reached yet is waited for, a refusal is not.

use std::fmt;

use crate::config::OrbitSettings;
use crate::consumer::{self, ConsumerError};
use crate::dsn::Dsn;
use crate::ids::{QueueId, SubscriptionId};
use crate::inbox::{mysql_errno, DbError, InboxStore, StoreOptions};
use crate::orbit::{OrbitClient, OrbitError, Scope};
use crate::schema::{self, TABLES};
use crate::scope::{InboxScope, ReceiverName};

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
#[cfg(feature = "nats")]
pub const NATS_CHECKS: [&str; 2] = ["nats", "consumer"];

/// Runs the database checks and the NATS checks once, waiting for nothing,
/// as `receiver consume --source nats` runs them before fetching anything.
#[cfg(feature = "nats")]
#[cfg_attr(docsrs, doc(cfg(feature = "nats")))]
pub async fn run_nats(
    dsn: &Dsn,
    name: ReceiverName,
    settings: &crate::nats::NatsSettings,
    timeout: std::time::Duration,
) -> Vec<Finding> {
    let scope = InboxScope::new(name, settings.queue_id.clone());
    let store = InboxStore::connect_lazy(dsn, scope, StoreOptions::default());
    let mut all = findings(&DATABASE_CHECKS, &database(&store).await);
    let outcome = crate::nats::JetStreamSource::connect(settings, timeout)
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

/// Why a check failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Problem {
    /// The database cannot be reached now; it may answer later.
    #[error("database unreachable: {0}")]
    DatabaseUnreachable(DbError),
    /// The database refused the account: wrong user or password, unknown
    /// database, no access to it.
    #[error("database: {0}")]
    DatabaseRefused(DbError),
    /// The database failed otherwise (a failed TLS check, a server error).
    #[error("database: {0}")]
    Database(DbError),
    /// A receiver table does not exist (or the account may not see it).
    #[error("table {table} is missing (run `receiver init` with an administrator account, or grant the runtime account SELECT, INSERT, UPDATE on it)")]
    MissingTable {
        /// The table.
        table: &'static str,
    },
    /// A receiver table lacks columns of `schema.sql`.
    #[error("table {table} lacks the column(s) {} of schema.sql", .columns.join(", "))]
    MissingColumns {
        /// The table.
        table: &'static str,
        /// The missing columns.
        columns: Vec<&'static str>,
    },
    /// The runtime account lacks a privilege the receiver needs.
    #[error("the account may not {privilege} {table} (the runtime account needs SELECT, INSERT, UPDATE on both receiver tables)")]
    MissingPrivilege {
        /// `SELECT`, `INSERT` or `UPDATE`.
        privilege: &'static str,
        /// The table.
        table: &'static str,
    },
    /// Orbit cannot be reached now; it may answer later.
    #[error("{0}")]
    OrbitUnreachable(OrbitError),
    /// Orbit refused the token (`401`).
    #[error("Orbit refused the token: {0}")]
    Token(OrbitError),
    /// The token lacks scopes the command needs.
    #[error("the token lacks the scope(s) {}", .0.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", "))]
    MissingScopes(Vec<Scope>),
    /// The subscription cannot be consumed by this receiver.
    #[error("{0}")]
    Subscription(String),
    /// Orbit answered something else than the protocol describes.
    #[error("{0}")]
    Orbit(OrbitError),
    /// NATS cannot be reached or refused the login, or the stream or its
    /// durable consumer cannot be consumed for the queue.
    #[cfg(feature = "nats")]
    #[cfg_attr(docsrs, doc(cfg(feature = "nats")))]
    #[error("{0}")]
    Nats(crate::nats::NatsError),
}

impl Problem {
    /// Whether waiting may mend it: a server that cannot be reached yet.
    pub fn is_transient(&self) -> bool {
        match self {
            Problem::DatabaseUnreachable(_) | Problem::OrbitUnreachable(_) => true,
            #[cfg(feature = "nats")]
            Problem::Nats(e) => !e.is_configuration(),
            _ => false,
        }
    }

    /// The check it belongs to.
    pub fn check(&self) -> &'static str {
        match self {
            Problem::DatabaseUnreachable(_)
            | Problem::DatabaseRefused(_)
            | Problem::Database(_) => "database",
            Problem::MissingTable { .. } | Problem::MissingColumns { .. } => "schema",
            Problem::MissingPrivilege { .. } => "privileges",
            Problem::OrbitUnreachable(_) | Problem::Orbit(_) => "orbit",
            Problem::Token(_) => "token",
            Problem::MissingScopes(_) => "scopes",
            Problem::Subscription(_) => "subscription",
            #[cfg(feature = "nats")]
            Problem::Nats(e) => match e {
                crate::nats::NatsError::Unreachable { .. }
                | crate::nats::NatsError::Refused { .. }
                | crate::nats::NatsError::CredsFile { .. } => "nats",
                _ => "consumer",
            },
        }
    }

    /// Whether it is about the configuration (exit code 2) rather than a
    /// failed operation (exit code 1): a refused login or unknown database,
    /// a missing table, column, privilege or scope, a refused token, a
    /// subscription of another queue.
    pub fn is_configuration(&self) -> bool {
        match self {
            Problem::DatabaseUnreachable(_)
            | Problem::Database(_)
            | Problem::OrbitUnreachable(_)
            | Problem::Orbit(_) => false,
            #[cfg(feature = "nats")]
            Problem::Nats(e) => e.is_configuration(),
            _ => true,
        }
    }
}

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
                    Some(mysql_errno::TABLE_ACCESS_DENIED | mysql_errno::COLUMN_ACCESS_DENIED) => {
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
    let columns = schema::columns(table);
    let keys = schema::key_columns(table);
    let list = columns.join(", ");
    let updates = columns
        .iter()
        .filter(|c| !keys.contains(c))
        .map(|c| format!("{c} = {c}"))
        .collect::<Vec<_>>()
        .join(", ");
    [
        ("SELECT", format!("SELECT {list} FROM {table} WHERE 1 = 0")),
        (
            "INSERT",
            format!("INSERT INTO {table} ({list}) SELECT {list} FROM {table} WHERE 1 = 0"),
        ),
        (
            "UPDATE",
            format!("UPDATE {table} SET {updates} WHERE 1 = 0"),
        ),
    ]
}

fn database_problem(e: DbError) -> Problem {
    if e.is_unavailable() {
        Problem::DatabaseUnreachable(e)
    } else if e.is_refusal() {
        Problem::DatabaseRefused(e)
    } else {
        Problem::Database(e)
    }
}

/// The Orbit checks, in order: `orbit`, `token`, `scopes`, `subscription`.
pub const ORBIT_CHECKS: [&str; 4] = ["orbit", "token", "scopes", "subscription"];

/// Checks that Orbit answers and the token is valid and has `scopes`.
pub async fn orbit_access(client: &OrbitClient, scopes: &[Scope]) -> Result<(), Problem> {
    client.health().await.map_err(orbit_problem)?;
    let mut missing = Vec::new();
    for &scope in scopes {
        match client.has_scope(scope).await {
            Ok(true) => {}
            Ok(false) => missing.push(scope),
            Err(e) => return Err(orbit_problem(e)),
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Problem::MissingScopes(missing))
    }
}

/// Checks that the subscription exists and is bound to `queue`.
pub async fn subscription(
    client: &OrbitClient,
    id: &SubscriptionId,
    queue: &QueueId,
) -> Result<(), Problem> {
    match consumer::check_subscription(client, id, queue).await {
        Ok(()) => Ok(()),
        Err(ConsumerError::Orbit(e)) => Err(orbit_problem(e)),
        Err(refused) => Err(Problem::Subscription(refused.to_string())),
    }
}

fn orbit_problem(e: OrbitError) -> Problem {
    if e.is_retryable() {
        Problem::OrbitUnreachable(e)
    } else if matches!(e, OrbitError::Status { status: 401, .. }) {
        Problem::Token(e)
    } else if let OrbitError::MissingScope { scope } = e {
        Problem::MissingScopes(vec![scope])
    } else {
        Problem::Orbit(e)
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
    fn the_privilege_probes_touch_no_row_and_never_update_a_key() {
        for table in TABLES {
            for (_, statement) in privilege_probes(table) {
                assert!(statement.ends_with("WHERE 1 = 0"), "{statement}");
            }
            let (_, update) = &privilege_probes(table)[2];
            for key in schema::key_columns(table) {
                assert!(!update.contains(&format!("{key} = ")), "{update}");
            }
        }
    }

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

    #[test]
    fn only_unreachable_servers_are_worth_waiting_for() {
        let unreachable = Problem::OrbitUnreachable(OrbitError::Timeout);
        assert!(unreachable.is_transient() && !unreachable.is_configuration());
        let scopes = Problem::MissingScopes(vec![Scope::EventsConsume]);
        assert!(!scopes.is_transient() && scopes.is_configuration());
        assert_eq!(
            scopes.to_string(),
            "the token lacks the scope(s) events:consume"
        );
    }
}
