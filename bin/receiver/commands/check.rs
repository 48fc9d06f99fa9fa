//! `receiver check`: every check once, waiting for nothing, one line each:
//! the database checks, then Orbit's (the scopes of `consume` or of `demo`,
//! and the subscription when one is given) or, with `--source nats`, NATS
//! and the durable consumer, as `consume` checks them before it leases;
//! last, when traces are exported, whether the collector takes an export
//! (`check=traces`) and where it is. After the database's, where
//! `receiver_outbox` is there (as far as the account may see) or a notify
//! target is set: the outbox table, its grants and the server's `FOR
//! UPDATE SKIP LOCKED` (`check=outbox`); and with a notify webhook or
//! subject, after the source's: whether the webhook's host answers, and
//! NATS answers with a stream that captures the subject (`check=notify`);
//! with a subject, that stream's duplicate window (`check=notify_stream`,
//! a warning only).

use std::future::Future;

use clap::Args;

use result_inbox::db::{Dsn, Engine};
use result_inbox::inbox::{InboxStore, StoreOptions};
#[cfg(feature = "nats")]
use result_inbox::nats::JetStreamSource;
use result_inbox::orbit::Scope;
use result_inbox::prune::{self, PruneError};
use result_inbox::scope::InboxScope;
use result_inbox::sqlx::MySql;
#[cfg(feature = "postgres")]
use result_inbox::sqlx::Postgres;

use super::orbit_client;
use crate::args::{required_subscription, NatsArgs, RabbitArgs, Receiver, SourceKind};
use crate::check::{self, findings, Finding, Problem, DATABASE_CHECKS, ORBIT_CHECKS};
use crate::exit::{config, passed, Failed, Outcome};
use crate::notify::{outbox_ready, NotifyArgs, NotifyConfig};
use crate::runtime::runtime;

/// What `check` is given.
#[derive(Args)]
pub(crate) struct CheckArgs {
    #[command(flatten)]
    receiver: Receiver,
    /// What `consume` would consume: `orbit`, `nats` or `rabbitmq`.
    #[arg(long, env = "RECEIVER_SOURCE", value_enum, ignore_case = true, default_value_t = SourceKind::Orbit)]
    source: SourceKind,
    #[command(flatten)]
    nats: NatsArgs,
    #[command(flatten)]
    rabbitmq: RabbitArgs,
    /// The subscription `consume` would consume (required without --demo,
    /// checked when given with it).
    #[arg(long, env = "ORBIT_SUBSCRIPTION_ID")]
    subscription_id: Option<String>,
    /// Check the scopes `demo` needs (all five) instead of those of
    /// `consume`; no subscription needed.
    #[arg(long)]
    demo: bool,
    /// Check the prune account instead (RECEIVER_PRUNE_DSN): reachable,
    /// the three tables, and the grants `prune` needs (on receiver_outbox
    /// too where it is there); nothing of Orbit or NATS.
    #[arg(long)]
    prune: bool,
    /// The prune account's URL (only with --prune),
    /// mysql://user:password@host:port/database or
    /// postgres://user:password@host:port/database.
    #[arg(long, env = "RECEIVER_PRUNE_DSN", hide_env_values = true)]
    prune_dsn: Option<String>,
    #[command(flatten)]
    notify: NotifyArgs,
}

pub(crate) fn run_check(args: CheckArgs) -> Outcome {
    let notify = match args.prune {
        true => None,
        false => args
            .notify
            .resolve(args.nats.server.clone(), args.rabbitmq.server.clone())
            .map_err(config)?,
    };
    let notify = notify.as_ref();
    let mut findings = if args.prune {
        check_prune(args.prune_dsn)?
    } else {
        match args.source {
            SourceKind::Orbit => {
                check_orbit(args.receiver, args.subscription_id, args.demo, notify)?
            }
            #[cfg(feature = "nats")]
            SourceKind::Nats => check_nats(args.receiver, args.nats, notify)?,
            #[cfg(not(feature = "nats"))]
            SourceKind::Nats => {
                return Err(config(crate::args::built_without("--source nats", "NATS")))
            }
            #[cfg(feature = "rabbitmq")]
            SourceKind::Rabbitmq => check_rabbitmq(args.receiver, args.rabbitmq, notify)?,
            #[cfg(not(feature = "rabbitmq"))]
            SourceKind::Rabbitmq => {
                return Err(config(crate::args::built_without(
                    "--source rabbitmq",
                    "RabbitMQ",
                )))
            }
        }
    };
    // Whether consume's traces would reach their collector, and where it
    // is, so that a missing or wrong endpoint is seen before the first
    // delivery rather than as spans dropped.
    let endpoint = match args.prune {
        true => None,
        false => crate::otel::endpoint().map_err(config)?,
    };
    if let Some(endpoint) = &endpoint {
        if let Some(warning) = endpoint.warning() {
            crate::logging::report_warning(&warning);
        }
        let answered = runtime().block_on(crate::otel::collector_answers(endpoint));
        findings.push(Finding::of("traces", answered));
    }
    let outcome = print_findings(&findings);
    if let Some(endpoint) = endpoint {
        println!("traces=otlp endpoint={}", endpoint.shown());
    }
    outcome
}

fn check_orbit(
    receiver: Receiver,
    subscription_id: Option<String>,
    demo: bool,
    notify: Option<&NotifyConfig>,
) -> Result<Vec<Finding>, Failed> {
    let resolved = receiver.resolve().map_err(config)?;
    // `consume` needs a subscription; `demo` creates its own, and checks
    // one only when it is given. A missing one is the subscription check's
    // failure, after every other check has run.
    let subscription = match (demo, subscription_id) {
        (true, None) => None,
        (false, None) => Some(required_subscription(None)),
        (_, id) => Some(Ok(required_subscription(id).map_err(config)?)),
    };
    let client = orbit_client(&resolved.orbit).map_err(config)?;
    let scopes: &[Scope] = if demo { &Scope::DEMO } else { &Scope::CONSUME };
    let checks: &[&'static str] = match subscription {
        Some(_) => &ORBIT_CHECKS,
        None => &ORBIT_CHECKS[..3],
    };
    let queue = &resolved.orbit.queue_id;
    let orbit = async {
        check::orbit_access(&client, scopes).await?;
        match subscription {
            Some(Ok(id)) => check::subscription(&client, &id, queue).await,
            Some(Err(missing)) => Err(Problem::Subscription(missing)),
            None => Ok(()),
        }
    };
    Ok(database_and(
        &resolved.dsn,
        resolved.scope,
        checks,
        orbit,
        notify,
    ))
}

#[cfg(feature = "nats")]
fn check_nats(
    receiver: Receiver,
    nats: NatsArgs,
    notify: Option<&NotifyConfig>,
) -> Result<Vec<Finding>, Failed> {
    let (dsn, scope, settings) = receiver.resolve_for_nats(nats).map_err(config)?;
    let nats = async {
        JetStreamSource::connect(&settings, crate::commands::BROKER_CALL_TIMEOUT)
            .await
            .map(drop)
            .map_err(Problem::Nats)
    };
    Ok(database_and(&dsn, scope, &check::NATS_CHECKS, nats, notify))
}

#[cfg(feature = "rabbitmq")]
fn check_rabbitmq(
    receiver: Receiver,
    rabbit: RabbitArgs,
    notify: Option<&NotifyConfig>,
) -> Result<Vec<Finding>, Failed> {
    use result_inbox::rabbitmq::RabbitSource;
    let (dsn, scope, settings) = receiver.resolve_for_rabbitmq(rabbit).map_err(config)?;
    let queue = async {
        RabbitSource::connect(&settings, crate::commands::BROKER_CALL_TIMEOUT)
            .await
            .map(drop)
            .map_err(Problem::Rabbit)
    };
    Ok(database_and(
        &dsn,
        scope,
        &check::RABBITMQ_CHECKS,
        queue,
        notify,
    ))
}

/// The database checks on the engine the address names, and once they
/// passed, what the server says of its standbys and the outbox check:
/// with `notify` always, without it where the table is there (`None`
/// otherwise).
async fn database_on<E: Engine>(
    dsn: &Dsn,
    scope: &InboxScope,
    notify: bool,
) -> (Result<(), Problem>, Option<Finding>, Option<Finding>) {
    let store = match InboxStore::<E>::open_lazy(dsn, scope.clone(), StoreOptions::default()) {
        Ok(store) => store,
        Err(e) => return (Err(check::database_problem(e)), None, None),
    };
    let checked = check::database(&store).await;
    let (replication, outbox) = match checked {
        Ok(()) => (
            check::replication(&store).await,
            match outbox_ready(&store).await {
                // Without notify settings nothing needs an outbox that
                // is not there.
                Err(Problem::MissingTable { .. }) if !notify => None,
                outcome => Some(Finding::of("outbox", outcome.map_err(|p| p.reason()))),
            },
        ),
        Err(_) => (None, notify.then(|| Finding::not_run("outbox", "database"))),
    };
    (checked, replication, outbox)
}

/// The database checks, then the `checks` that `source` runs.
fn database_and(
    dsn: &Dsn,
    scope: InboxScope,
    checks: &[&'static str],
    source: impl Future<Output = Result<(), Problem>>,
    notify: Option<&NotifyConfig>,
) -> Vec<Finding> {
    runtime().block_on(async {
        let notified = notify.is_some();
        let (database, replication, outbox) = match dsn.engine() {
            #[cfg(feature = "postgres")]
            result_inbox::db::EngineKind::Postgres => {
                database_on::<Postgres>(dsn, &scope, notified).await
            }
            _ => database_on::<MySql>(dsn, &scope, notified).await,
        };
        if database.is_ok() {
            if let Some(warning) = check::name_warning(dsn, &scope).await {
                crate::logging::report_warning(&warning);
            }
            if let Some(warning) = check::tally_warning(dsn).await {
                crate::logging::report_warning(&warning);
            }
        }
        let mut all = findings(&DATABASE_CHECKS, &database);
        all.extend(replication);
        all.extend(outbox);
        all.extend(findings(checks, &source.await));
        if let Some(notify) = notify {
            all.extend(notify.findings().await);
        }
        all
    })
}

/// `receiver check --prune`: the prune account reaches the database, the
/// three tables are there, and it has every grant `prune` needs.
fn check_prune(dsn: Option<String>) -> Result<Vec<Finding>, Failed> {
    let dsn = dsn.ok_or_else(|| {
        config("RECEIVER_PRUNE_DSN is not set (or pass --prune-dsn): the prune account's URL")
    })?;
    let dsn = Dsn::parse(&dsn).map_err(|e| config(format!("RECEIVER_PRUNE_DSN: {e}")))?;
    let outcome = runtime().block_on(prune::check(&dsn)).map_err(|e| match e {
        PruneError::Database(e) => match e.missing_table() {
            Some(table) => Problem::MissingTable { table },
            None => check::database_problem(e),
        },
        e => Problem::PruneGrant(e.to_string()),
    });
    Ok(findings(&DATABASE_CHECKS, &outcome))
}

/// One line per check; exit 0 only if all passed.
fn print_findings(findings: &[Finding]) -> Outcome {
    for finding in findings {
        println!("{finding}");
    }
    passed(findings.iter().all(|f| f.ok))
}
