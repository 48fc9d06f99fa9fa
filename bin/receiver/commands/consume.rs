//! `receiver consume`: the arguments, and the exit code of a run (the
//! flow itself is [`crate::consume`]).

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use result_inbox::consumer::{ConsumerOptions, Health};

use super::{CONSUME_GRACE, NATS_CALL_TIMEOUT, ORBIT_CALL_TIMEOUT};
use crate::args::{required_subscription, NatsArgs, Receiver, SourceKind};
use crate::consume::{self, ConsumeConfig, SourceConfig};
use crate::exit::{fail, EXIT_CONFIG, EXIT_FAILED};
use crate::health::metrics_endpoint;
use crate::runtime::{runtime, shutdown_on_signal};

/// What `consume` is given.
#[derive(Args)]
pub(crate) struct ConsumeArgs {
    #[command(flatten)]
    pub(crate) receiver: Receiver,
    /// Where the deliveries come from: `orbit` (a subscription's stream)
    /// or `nats` (a JetStream durable pull consumer, see the NATS_*
    /// settings).
    #[arg(long, env = "RECEIVER_SOURCE", value_enum, default_value_t = SourceKind::Orbit)]
    pub(crate) source: SourceKind,
    /// The subscription to consume (32 lowercase hex characters), created
    /// with the same credentials. Only for --source orbit.
    #[arg(long, env = "ORBIT_SUBSCRIPTION_ID")]
    pub(crate) subscription_id: Option<String>,
    #[command(flatten)]
    pub(crate) nats: NatsArgs,
    /// Serve /metrics (Prometheus text), /healthz and /readyz on this
    /// address, e.g. 127.0.0.1:9464. Off unless set.
    #[arg(long, env = "RECEIVER_METRICS_ADDR")]
    pub(crate) metrics_addr: Option<String>,
    /// Deliveries leased ahead of the 4 handler slots, so that a slot
    /// freed by a commit finds its next delivery waiting (0 to 64). Each
    /// spends a lease while it waits, and one attempt if an outage
    /// outlasts its lease: 0 leases only for free slots. [default: 4 with
    /// --source orbit, 16 with --source nats (pull requests of 8)]
    #[arg(long, env = "RECEIVER_PREFETCH", value_parser = clap::value_parser!(u32).range(0..=64))]
    pub(crate) prefetch: Option<u32>,
}

pub(crate) fn run_consume(args: ConsumeArgs) -> ExitCode {
    let metrics_addr = args.metrics_addr.clone();
    let config = match consume_config(args) {
        Ok(config) => config,
        Err(e) => return fail(EXIT_CONFIG, e),
    };
    let runtime = runtime();
    let shutdown = shutdown_on_signal(&runtime);
    let code = runtime.block_on(async {
        let health = Health::new();
        let endpoint = match metrics_endpoint(metrics_addr, &health).await {
            Ok(endpoint) => endpoint,
            Err((code, e)) => return fail(code, e),
        };
        let outcome = consume::run(config, health, shutdown).await;
        if let Some(endpoint) = endpoint {
            endpoint.stop();
        }
        match outcome {
            Ok(Some(report)) => {
                tracing::info!(
                    received = report.received,
                    acked = report.acked,
                    failed = report.failed,
                    terminated = report.terminated,
                    ack_refused = report.ack_refused,
                    abandoned = report.abandoned,
                    released = report.released,
                    "stopped"
                );
                ExitCode::SUCCESS
            }
            Ok(None) => {
                tracing::info!("stopped during start-up; nothing was leased");
                ExitCode::SUCCESS
            }
            Err(e) if e.is_configuration() => fail(EXIT_CONFIG, e),
            Err(e) => fail(EXIT_FAILED, e),
        }
    });
    runtime.shutdown_timeout(Duration::from_secs(1));
    code
}

pub(crate) fn consume_config(args: ConsumeArgs) -> Result<ConsumeConfig, String> {
    let ConsumeArgs {
        receiver,
        source,
        subscription_id,
        nats,
        prefetch,
        ..
    } = args;
    let consumer = ConsumerOptions {
        shutdown_grace: CONSUME_GRACE,
        prefetch: prefetch.unwrap_or(match source {
            SourceKind::Orbit => ConsumerOptions::default().prefetch,
            SourceKind::Nats => result_inbox::nats::DEFAULT_PREFETCH,
        }),
        ..ConsumerOptions::default()
    };
    let (source, dsn, name) = match source {
        SourceKind::Orbit => {
            let subscription = required_subscription(subscription_id)?;
            let resolved = receiver.resolve()?;
            let source = SourceConfig::Orbit {
                settings: resolved.orbit,
                subscription,
                call_timeout: ORBIT_CALL_TIMEOUT,
            };
            (source, resolved.dsn, resolved.name)
        }
        SourceKind::Nats => {
            let (dsn, name, settings) = receiver.resolve_for_nats(nats)?;
            let source = SourceConfig::Nats {
                settings,
                call_timeout: NATS_CALL_TIMEOUT,
            };
            (source, dsn, name)
        }
    };
    Ok(ConsumeConfig {
        source,
        dsn,
        name,
        consumer,
    })
}
