//! Why a check failed, and whether waiting can mend it.

use result_inbox::db::DbError;
#[cfg(feature = "nats")]
use result_inbox::nats::NatsError;
use result_inbox::orbit::{OrbitError, Scope};
#[cfg(feature = "nats")]
use result_inbox::relay::JetStreamError;

/// Why a check failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
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
    #[error(
        "table {table} is missing ({})",
        missing_table_hint(table, RUNTIME_GRANTS)
    )]
    MissingTable {
        /// The table.
        table: &'static str,
    },
    /// A receiver table lacks columns of `schema.sql`.
    #[error("table {table} lacks the column(s) {} of {schema_file}", .columns.join(", "))]
    MissingColumns {
        /// The table.
        table: &'static str,
        /// The missing columns.
        columns: Vec<&'static str>,
        /// The schema file of the store's engine (`schema.sql`,
        /// `schema.postgres.sql`).
        schema_file: &'static str,
    },
    /// The prune account lacks a grant `receiver prune` needs (the whole
    /// sentence, naming it).
    #[error("{0}")]
    PruneGrant(String),
    /// The runtime account lacks a privilege the receiver needs.
    #[error("the account may not {privilege} {table} (the runtime account needs SELECT, INSERT, UPDATE on every receiver table it uses)")]
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
    #[error("{0}")]
    Nats(NatsError),
    /// RabbitMQ cannot be reached or refused the login, or the queue
    /// cannot be consumed.
    #[cfg(feature = "rabbitmq")]
    #[error("{0}")]
    Rabbit(result_inbox::rabbitmq::RabbitError),
    /// The database server lacks `FOR UPDATE SKIP LOCKED`, which the
    /// outbox's relay claims with (the whole sentence, naming the version
    /// needed).
    #[error("{0}")]
    SkipLocked(String),
    /// No stream takes what the notify subject is sent, or JetStream did
    /// not say which one does.
    #[cfg(feature = "nats")]
    #[error("{0}")]
    NotifyStream(JetStreamError),
    /// RabbitMQ cannot be reached or refused the login, or the notify
    /// queue is not there.
    #[cfg(feature = "rabbitmq")]
    #[error("{}", notify_queue_problem(.0))]
    NotifyQueue(result_inbox::rabbitmq::RabbitError),
}

impl Problem {
    /// The problem as its check's line gives it, after `check=<name> FAIL`:
    /// without the check's name said again.
    pub fn reason(&self) -> String {
        let database = |e: &DbError| {
            let text = e.to_string();
            text.strip_prefix("database ").unwrap_or(&text).to_owned()
        };
        match self {
            Problem::DatabaseUnreachable(e) => format!("unreachable: {}", database(e)),
            Problem::DatabaseRefused(e) | Problem::Database(e) => database(e),
            other => other.to_string(),
        }
    }

    /// Whether waiting may mend it: a server that cannot be reached yet.
    pub fn is_transient(&self) -> bool {
        match self {
            Problem::DatabaseUnreachable(_) | Problem::OrbitUnreachable(_) => true,
            #[cfg(feature = "nats")]
            Problem::Nats(e) => !e.is_configuration(),
            #[cfg(feature = "rabbitmq")]
            Problem::Rabbit(e) => !e.is_configuration(),
            #[cfg(feature = "nats")]
            Problem::NotifyStream(e) => matches!(e, JetStreamError::Unanswered { .. }),
            #[cfg(feature = "rabbitmq")]
            Problem::NotifyQueue(e) => !e.is_configuration(),
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
            Problem::MissingPrivilege { .. } | Problem::PruneGrant(_) => "privileges",
            Problem::OrbitUnreachable(_) | Problem::Orbit(_) => "orbit",
            Problem::Token(_) => "token",
            Problem::MissingScopes(_) => "scopes",
            Problem::Subscription(_) => "subscription",
            #[cfg(feature = "nats")]
            Problem::Nats(
                NatsError::Unreachable { .. }
                | NatsError::Refused { .. }
                | NatsError::CredsFile { .. },
            ) => "nats",
            #[cfg(feature = "nats")]
            Problem::Nats(_) => "consumer",
            #[cfg(feature = "rabbitmq")]
            Problem::Rabbit(
                result_inbox::rabbitmq::RabbitError::Unreachable { .. }
                | result_inbox::rabbitmq::RabbitError::Refused { .. }
                | result_inbox::rabbitmq::RabbitError::Address { .. },
            ) => "rabbitmq",
            #[cfg(feature = "rabbitmq")]
            Problem::Rabbit(_) => "queue",
            Problem::SkipLocked(_) => "outbox",
            #[cfg(feature = "nats")]
            Problem::NotifyStream(_) => "notify",
            #[cfg(feature = "rabbitmq")]
            Problem::NotifyQueue(_) => "notify",
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
            #[cfg(feature = "rabbitmq")]
            Problem::Rabbit(e) => e.is_configuration(),
            #[cfg(feature = "nats")]
            Problem::NotifyStream(e) => !matches!(e, JetStreamError::Unanswered { .. }),
            #[cfg(feature = "rabbitmq")]
            Problem::NotifyQueue(e) => e.is_configuration(),
            _ => true,
        }
    }
}

/// What is wrong with the notify queue, and what mends it: the operator
/// declares that queue (the receiver declares only its own).
#[cfg(feature = "rabbitmq")]
fn notify_queue_problem(e: &result_inbox::rabbitmq::RabbitError) -> String {
    match e {
        result_inbox::rabbitmq::RabbitError::UnknownQueue { queue, vhost } => format!(
            "queue {queue} does not exist in vhost {vhost}; declare it (durable, e.g. `rabbitmqadmin declare queue name={queue} durable=true`), or check RECEIVER_NOTIFY_AMQP_QUEUE"
        ),
        other => other.to_string(),
    }
}

/// What to run, or grant, for a missing table.
/// What the runtime account may do on each receiver table.
const RUNTIME_GRANTS: &str = "SELECT, INSERT, UPDATE";

/// What to do about a missing receiver table, for an account that needs
/// `grants` on it.
pub fn missing_table_hint(table: &str, grants: &str) -> String {
    if table == result_inbox::db::schema::PRUNED_TABLE {
        "run `receiver init --keep-existing --retention` with an administrator account: it adds this table and changes nothing else".to_owned()
    } else if table == result_inbox::db::schema::OUTBOX_TABLE {
        "run `receiver init --keep-existing --outbox` with an administrator account: it adds this table and changes nothing else".to_owned()
    } else {
        format!("run `receiver init` with an administrator account, or grant this account {grants} on it")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
