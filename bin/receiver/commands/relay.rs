//! `receiver relay`: the relay alone, with no consumer: sends what the
//! outbox holds to the notify webhook and/or subject until SIGINT/SIGTERM.
//! Beside `receiver consume --notify-url` (or `--notify-nats-subject`), or
//! after it stopped, any number of them on any number of hosts: each
//! effect is claimed by one at a time.

use std::process::ExitCode;

use clap::Args;
use tokio_util::sync::CancellationToken;
use tracing::info;

use result_inbox::consumer::Health;
use result_inbox::db::{Dsn, Engine};
use result_inbox::retry::{until_answered, Backoff};
use result_inbox::sqlx::MySql;
#[cfg(feature = "postgres")]
use result_inbox::sqlx::Postgres;

use crate::args::{required_dsn, AmqpServerArgs, NatsServerArgs};
use crate::check::Problem;
use crate::exit::{config, failed, Failed, Outcome};
use crate::health::metrics_endpoint;
use crate::notify::{outbox_ready, store_for_check, NotifyArgs, NotifyConfig, WHERE_TO_NOTIFY};
use crate::runtime::until_shutdown;

/// What `relay` is given.
#[derive(Args)]
pub(crate) struct RelayArgs {
    /// The receiver's own database, e.g. mysql://receiver@127.0.0.1:3306/receiver
    /// or postgres://receiver@127.0.0.1:5432/receiver; must name the
    /// database. SELECT, INSERT, UPDATE on receiver_outbox is enough.
    #[arg(long, env = "ORBIT_RECEIVER_DSN", hide_env_values = true)]
    dsn: Option<String>,
    #[command(flatten)]
    notify: NotifyArgs,
    #[command(flatten)]
    nats: NatsServerArgs,
    #[command(flatten)]
    amqp: AmqpServerArgs,
    /// Serve /metrics (Prometheus text), /healthz and /readyz on this
    /// address, e.g. 127.0.0.1:9464. Off unless set.
    #[arg(long, env = "RECEIVER_METRICS_ADDR")]
    metrics_addr: Option<String>,
}

pub(crate) fn run_relay(args: RelayArgs) -> Outcome {
    let dsn = required_dsn(args.dsn).map_err(config)?;
    let notify = args
        .notify
        .resolve(args.nats, args.amqp)
        .map_err(config)?
        .ok_or_else(|| config(format!("set {WHERE_TO_NOTIFY}: where the relay sends")))?;
    until_shutdown(|shutdown| async move {
        let health = Health::new();
        let endpoint = metrics_endpoint(args.metrics_addr, &health).await?;
        let ran = match dsn.engine() {
            #[cfg(feature = "postgres")]
            result_inbox::db::EngineKind::Postgres => {
                relay::<Postgres>(&dsn, &notify, shutdown).await
            }
            _ => relay::<MySql>(&dsn, &notify, shutdown).await,
        };
        if let Some(endpoint) = endpoint {
            endpoint.stop();
        }
        ran?;
        info!("stopped");
        Ok(ExitCode::SUCCESS)
    })
}

/// Checks the outbox and the server's `SKIP LOCKED` (waiting for a
/// database that is not up yet) and the targets (waiting for NATS), then
/// runs the relay until `shutdown`.
async fn relay<E: Engine>(
    dsn: &Dsn,
    notify: &NotifyConfig,
    shutdown: CancellationToken,
) -> Result<(), Failed> {
    let store = store_for_check::<E>(dsn)?;
    let checked = tokio::select! {
        biased;
        _ = shutdown.cancelled() => return Ok(()),
        checked = until_answered(Backoff::default(), "database", Problem::is_transient, || outbox_ready(&store)) => checked,
    };
    checked.map_err(|p| failed(p.is_configuration(), p))?;
    let targets = tokio::select! {
        biased;
        _ = shutdown.cancelled() => return Ok(()),
        targets = notify.targets(Backoff::default()) => targets.map_err(|p| failed(p.is_configuration(), p))?,
    };
    notify
        .relay::<E>(dsn, targets)
        .run(shutdown)
        .await
        .map_err(|e| {
            failed(
                !matches!(e, result_inbox::relay::RelayError::Database(_)),
                e,
            )
        })
}
