//! `receiver failures`: every delivery the source gave up on, one line
//! each with what it would become if it came again, and a summary; exit 1
//! when there is one, so a cron job or an alert can use it.

use clap::Args;

use result_inbox::db::Dsn;
use result_inbox::scope::InboxScope;

use super::orbit_client;
use crate::args::{required_subscription, NatsArgs, RabbitArgs, Receiver, SourceKind};
use crate::exit::{config, database_failure, failed, passed, read_only, Failed, Outcome};
use crate::failed::{counts, list, FailedDelivery, Listing, Origin};
use crate::runtime::runtime;

/// Where the failed deliveries are, and who the receiver is: what
/// `failures` and `replay` are both given.
#[derive(Args)]
pub(crate) struct FailedArgs {
    #[command(flatten)]
    receiver: Receiver,
    /// Where `consume` takes its deliveries from: `orbit`, `nats` or
    /// `rabbitmq`.
    #[arg(long, env = "RECEIVER_SOURCE", value_enum, ignore_case = true, default_value_t = SourceKind::Orbit)]
    source: SourceKind,
    #[command(flatten)]
    nats: NatsArgs,
    #[command(flatten)]
    rabbitmq: RabbitArgs,
    /// The subscription `consume` consumes (Orbit only).
    #[arg(long, env = "ORBIT_SUBSCRIPTION_ID")]
    subscription_id: Option<String>,
}

impl FailedArgs {
    /// The source's failed deliveries, the database and the scope.
    pub(crate) fn resolve(self) -> Result<(Origin, Dsn, InboxScope), Failed> {
        match self.source {
            SourceKind::Orbit => {
                let resolved = self.receiver.resolve().map_err(config)?;
                let subscription = required_subscription(self.subscription_id).map_err(config)?;
                let client = Box::new(orbit_client(&resolved.orbit).map_err(config)?);
                let origin = Origin::Orbit {
                    client,
                    subscription,
                };
                Ok((origin, resolved.dsn, resolved.scope))
            }
            #[cfg(feature = "nats")]
            SourceKind::Nats => {
                let (dsn, scope, settings) =
                    self.receiver.resolve_for_nats(self.nats).map_err(config)?;
                Ok((Origin::Nats(settings), dsn, scope))
            }
            #[cfg(not(feature = "nats"))]
            SourceKind::Nats => Err(config(crate::args::built_without("--source nats", "NATS"))),
            #[cfg(feature = "rabbitmq")]
            SourceKind::Rabbitmq => {
                let (dsn, scope, settings) = self
                    .receiver
                    .resolve_for_rabbitmq(self.rabbitmq)
                    .map_err(config)?;
                Ok((Origin::Rabbitmq(settings), dsn, scope))
            }
            #[cfg(not(feature = "rabbitmq"))]
            SourceKind::Rabbitmq => Err(config(crate::args::built_without(
                "--source rabbitmq",
                "RabbitMQ",
            ))),
        }
    }
}

/// What `failures` is given.
#[derive(Args)]
pub(crate) struct FailuresArgs {
    #[command(flatten)]
    failed: FailedArgs,
    /// One JSON document: `{"failures": [...], "summary": {...}}`.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run_failures(args: FailuresArgs) -> Outcome {
    let (origin, dsn, scope) = args.failed.resolve()?;
    let listed = runtime()
        .block_on(list(&origin, &dsn, &scope))
        .map_err(|e| listing_failure("failures", e))?;
    let failed = listed.failed;
    let key = origin.key();
    if args.json {
        let mut summary: serde_json::Map<String, serde_json::Value> = summary_pairs(&failed)
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.into()))
            .collect();
        summary.insert("database".to_owned(), listed.server.into());
        let document = serde_json::json!({
            "failures": failed.iter().map(|f| f.json(key)).collect::<Vec<_>>(),
            "summary": summary,
        });
        println!("{document}");
    } else {
        for f in &failed {
            println!("{}", f.line(key));
        }
        let pairs: Vec<String> = summary_pairs(&failed)
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        println!("failures {} database={}", pairs.join(" "), listed.server);
    }
    passed(failed.is_empty())
}

/// `total` and the count of each diagnosis.
fn summary_pairs(failed: &[FailedDelivery]) -> Vec<(&'static str, usize)> {
    let mut pairs = vec![("total", failed.len())];
    pairs.extend(counts(failed));
    pairs
}

/// A listing that could not be made: the configuration's to fix (a refused
/// token or login, a missing failures stream) or a failure.
pub(crate) fn listing_failure(command: &str, e: Listing) -> Failed {
    match e {
        Listing::Database(e) => database_failure(command, e, read_only),
        // Orbit's errors name Orbit themselves.
        Listing::Orbit(e) => failed(e.is_refusal(), format!("{command}: {e}")),
        #[cfg(feature = "nats")]
        Listing::Nats(e) => failed(e.is_configuration(), format!("{command}: NATS: {e}")),
        #[cfg(feature = "rabbitmq")]
        Listing::Rabbitmq(e) => failed(e.is_configuration(), format!("{command}: {e}")),
    }
}
