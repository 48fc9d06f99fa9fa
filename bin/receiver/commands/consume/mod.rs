//! `receiver consume`: check everything, then consume one source into the
//! task view until shutdown.
//!
//! Before anything is leased the command checks its database (tables,
//! columns, grants: `check::database`) and its source. For Orbit: the
//! token and the scopes `consume` needs (`check::orbit_access`) and the
//! subscription's queue (`OrbitSource::connect`); for NATS JetStream: the
//! stream, the durable pull consumer and its filter subject
//! (`JetStreamSource::connect`). A server that cannot be reached yet —
//! connection refused or reset, a time-out, a 5xx answer — is waited for
//! with backoff and one warning per attempt; a permanent answer stops at
//! once. A shutdown during any of this ends it at once too: nothing was
//! leased.
//!
//! Then the consumer runs the inbox over the task view, with the store as
//! the probe of its breaker, until the shutdown token is cancelled.
//!
//! With notify targets the start-up check also asks for the outbox, the
//! server's `SKIP LOCKED` and, for a subject, NATS and its stream; then the
//! view records a notification per target for each delivery it advanced
//! (`task_view::Notify`), sent by a relay beside the consumer, woken by it.

mod source;

use std::process::ExitCode;

use clap::Args;
use tokio_util::sync::CancellationToken;
use tower::ServiceBuilder;
use tracing::info;

use result_inbox::consumer::{Consumer, ConsumerError, ConsumerOptions, ConsumerReport, Health};
use result_inbox::db::{Dsn, Engine};
use result_inbox::inbox::{Batching, InboxLayer, InboxStore, StoreOptions};
use result_inbox::relay::{RelayError, Targets};
use result_inbox::retry::until_answered;
use result_inbox::scope::InboxScope;
use result_inbox::source::Source;
use result_inbox::sqlx::MySql;
#[cfg(feature = "postgres")]
use result_inbox::sqlx::Postgres;
use result_inbox::task_view::TaskView;
use result_inbox::BoxError;

#[cfg(feature = "nats")]
use self::source::nats;
use self::source::{orbit, SourceConfig};
use super::{orbit_client, CONSUME_GRACE};
use crate::args::{required_subscription, NatsArgs, RabbitArgs, Receiver, SourceKind};
use crate::check::{self, Problem};
use crate::exit::{config, failed, Outcome};
use crate::health::consumer_metrics_endpoint;
use crate::notify::{outbox_ready, NotifyArgs, NotifyConfig};
use crate::runtime::until_shutdown;

/// What `consume` is given.
#[derive(Args)]
pub(crate) struct ConsumeArgs {
    #[command(flatten)]
    pub(crate) receiver: Receiver,
    /// Where the deliveries come from: `orbit` (a subscription's stream),
    /// `nats` (a JetStream durable pull consumer, see the NATS_* settings)
    /// or `rabbitmq` (a quorum queue, see the AMQP_* settings).
    #[arg(long, env = "RECEIVER_SOURCE", value_enum, ignore_case = true, default_value_t = SourceKind::Orbit)]
    pub(crate) source: SourceKind,
    /// The subscription to consume (32 lowercase hex characters), created
    /// with the same credentials. Only for --source orbit.
    #[arg(long, env = "ORBIT_SUBSCRIPTION_ID")]
    pub(crate) subscription_id: Option<String>,
    #[command(flatten)]
    pub(crate) nats: NatsArgs,
    #[command(flatten)]
    pub(crate) rabbitmq: RabbitArgs,
    /// Serve /metrics (Prometheus text), /healthz and /readyz on this
    /// address, e.g. 127.0.0.1:9464. Off unless set.
    #[arg(long, env = "RECEIVER_METRICS_ADDR")]
    pub(crate) metrics_addr: Option<String>,
    /// Deliveries leased ahead of the 4 handler slots, so that a slot
    /// freed by a commit finds its next delivery waiting (0 to 64). Each
    /// spends a lease while it waits, and one attempt if an outage
    /// outlasts its lease: 0 leases only for free slots. [default: 4 with
    /// --source orbit, 16 with --source nats (pull requests of 8) and
    /// --source rabbitmq]
    #[arg(long, env = "RECEIVER_PREFETCH", value_parser = clap::value_parser!(u32).range(0..=64))]
    pub(crate) prefetch: Option<u32>,
    /// Batching mode: deliveries that are waiting share one transaction,
    /// up to this many (1 to 64), in up to 4 transactions at once, each
    /// delivery still answered, logged and ACKed on its own after its
    /// batch's COMMIT. Off unless set: one transaction per delivery.
    #[arg(long, env = "RECEIVER_BATCH_MAX", value_parser = clap::value_parser!(u32).range(1..=64))]
    pub(crate) batch_max: Option<u32>,
    #[command(flatten)]
    pub(crate) notify: NotifyArgs,
}

pub(crate) fn run_consume(args: ConsumeArgs) -> Outcome {
    let metrics_addr = args.metrics_addr.clone();
    let settings = consume_config(args).map_err(config)?;
    // Once, before anything else: where the traces go (the collector may
    // be away; the export warns while it fails, and never stops consume).
    if let Some(endpoint) = crate::otel::exporting() {
        info!(endpoint = %endpoint.shown(), "exporting traces");
        if let Some(warning) = endpoint.warning() {
            tracing::warn!("{warning}");
        }
    }
    until_shutdown(|shutdown| async move {
        let health = Health::new();
        let endpoint = consumer_metrics_endpoint(metrics_addr, &health, &settings.scope).await?;
        crate::systemd::ready_when_consuming(health.clone(), shutdown.clone());
        let outcome = run(settings, health, shutdown).await;
        if let Some(endpoint) = endpoint {
            endpoint.stop();
        }
        match outcome.map_err(|e| failed(e.is_configuration(), e))? {
            Some(report) => tracing::info!(
                received = report.received,
                acked = report.acked,
                failed = report.failed,
                terminated = report.terminated,
                ack_refused = report.ack_refused,
                abandoned = report.abandoned,
                released = report.released,
                "stopped"
            ),
            None => tracing::info!("stopped during start-up; nothing was leased"),
        }
        Ok(ExitCode::SUCCESS)
    })
}

fn consume_config(args: ConsumeArgs) -> Result<ConsumeConfig, String> {
    let defaults = ConsumerOptions::default();
    let consumer = ConsumerOptions {
        // In batching mode the concurrency counts transactions; the
        // consumer keeps enough deliveries in flight to fill them.
        concurrency: args
            .batch_max
            .map_or(defaults.concurrency, |n| defaults.concurrency * n),
        shutdown_grace: CONSUME_GRACE,
        prefetch: args
            .prefetch
            .unwrap_or_else(|| source::default_prefetch(args.source)),
        ..defaults
    };
    let notify = args
        .notify
        .resolve(args.nats.server.clone(), args.rabbitmq.server.clone())?;
    let (source, dsn, scope) = match args.source {
        SourceKind::Orbit => {
            let subscription = required_subscription(args.subscription_id)?;
            let resolved = args.receiver.resolve()?;
            let source = SourceConfig::Orbit {
                client: Box::new(orbit_client(&resolved.orbit)?),
                subscription,
            };
            (source, resolved.dsn, resolved.scope)
        }
        #[cfg(feature = "nats")]
        SourceKind::Nats => {
            let (dsn, scope, settings) = args.receiver.resolve_for_nats(args.nats)?;
            (SourceConfig::Nats { settings }, dsn, scope)
        }
        #[cfg(not(feature = "nats"))]
        SourceKind::Nats => return Err(crate::args::built_without("--source nats", "NATS")),
        #[cfg(feature = "rabbitmq")]
        SourceKind::Rabbitmq => {
            let (dsn, scope, settings) = args.receiver.resolve_for_rabbitmq(args.rabbitmq)?;
            let settings = crate::rabbitmq::with_window(settings, &consumer);
            (SourceConfig::Rabbitmq { settings }, dsn, scope)
        }
        #[cfg(not(feature = "rabbitmq"))]
        SourceKind::Rabbitmq => {
            return Err(crate::args::built_without("--source rabbitmq", "RabbitMQ"))
        }
    };
    if let Some(notify) = &notify {
        source.refuse_notifying_itself(notify)?;
    }
    Ok(ConsumeConfig {
        notify,
        source,
        dsn,
        scope,
        consumer,
        batch_max: args.batch_max,
    })
}

/// Everything `receiver consume` runs with.
#[derive(Debug, Clone)]
struct ConsumeConfig {
    /// Where the deliveries come from.
    source: SourceConfig,
    /// The receiver's own database.
    dsn: Dsn,
    /// The receiver's fixed name and the queue whose events the source
    /// carries.
    scope: InboxScope,
    /// How the consumer behaves.
    consumer: ConsumerOptions,
    /// Deliveries per transaction in batching mode; `None`: one each.
    batch_max: Option<u32>,
    /// The webhook and/or subject told of each delivery that advanced it.
    notify: Option<NotifyConfig>,
}

/// Why `receiver consume` did not start or stopped.
#[derive(Debug, thiserror::Error)]
enum ConsumeError {
    /// A start-up check failed for good.
    #[error("{0}")]
    Check(Problem),
    /// The consumer was refused or had to stop.
    #[error("{0}")]
    Consumer(ConsumerError),
    /// The relay beside it could not start.
    #[error("{0}")]
    Relay(RelayError),
}

impl ConsumeError {
    /// Whether the configuration has to change (exit code 2) rather than an
    /// operation having failed (exit code 1).
    fn is_configuration(&self) -> bool {
        match self {
            ConsumeError::Check(p) => p.is_configuration(),
            ConsumeError::Consumer(e) => e.is_configuration(),
            ConsumeError::Relay(e) => !matches!(e, RelayError::Database(_)),
        }
    }
}

/// Runs `receiver consume` until `shutdown` is cancelled. `Ok(None)` means
/// the shutdown came during start-up, before anything was leased.
async fn run(
    config: ConsumeConfig,
    health: Health,
    shutdown: CancellationToken,
) -> Result<Option<ConsumerReport>, ConsumeError> {
    match config.dsn.engine() {
        #[cfg(feature = "postgres")]
        result_inbox::db::EngineKind::Postgres => {
            run_on::<Postgres>(config, health, shutdown).await
        }
        _ => run_on::<MySql>(config, health, shutdown).await,
    }
}

/// [`run`] on the engine the address names.
async fn run_on<E: Engine>(
    config: ConsumeConfig,
    health: Health,
    shutdown: CancellationToken,
) -> Result<Option<ConsumerReport>, ConsumeError> {
    // No connection yet: the check below makes the first, and waits for a
    // database that is not up yet.
    let store =
        InboxStore::<E>::open_lazy(&config.dsn, config.scope.clone(), StoreOptions::default())
            .map_err(|e| ConsumeError::Check(check::database_problem(e)))?;
    let checked = tokio::select! {
        biased;
        _ = shutdown.cancelled() => return Ok(None),
        checked = until_answered(config.consumer.backoff(), "database", Problem::is_transient, || async {
            check::database(&store).await?;
            match &config.notify {
                Some(_) => outbox_ready(&store).await,
                None => Ok(()),
            }
        }) => checked,
    };
    checked.map_err(ConsumeError::Check)?;
    let targets = match &config.notify {
        None => None,
        Some(notify) => tokio::select! {
            biased;
            _ = shutdown.cancelled() => return Ok(None),
            targets = notify.targets(config.consumer.backoff()) => Some(targets.map_err(ConsumeError::Check)?),
        },
    };
    if let Some(warning) = check::name_warning(&config.dsn, &config.scope).await {
        tracing::warn!("{warning}");
    }
    if let Some(warning) = check::tally_warning(&config.dsn).await {
        tracing::warn!("{warning}");
    }
    match &config.source {
        SourceConfig::Orbit {
            client,
            subscription,
        } => {
            let started = tokio::select! {
                biased;
                _ = shutdown.cancelled() => return Ok(None),
                started = orbit((**client).clone(), &config.scope.queue_id, subscription, &config.consumer) => started?,
            };
            serve(started, store, targets, health, &config, shutdown).await
        }
        #[cfg(feature = "nats")]
        SourceConfig::Nats { settings } => {
            let source = tokio::select! {
                biased;
                _ = shutdown.cancelled() => return Ok(None),
                source = nats(settings, &config.consumer) => source?,
            };
            serve(source, store, targets, health, &config, shutdown).await
        }
        #[cfg(feature = "rabbitmq")]
        SourceConfig::Rabbitmq { settings } => {
            let connect = crate::rabbitmq::source(
                settings,
                config.consumer.backoff(),
                super::BROKER_CALL_TIMEOUT,
            );
            let source = tokio::select! {
                biased;
                _ = shutdown.cancelled() => return Ok(None),
                source = connect => source.map_err(ConsumeError::Consumer)?,
            };
            serve(source, store, targets, health, &config, shutdown).await
        }
    }
}

/// The inbox over the task view, fed by `source` until shutdown; with
/// notify `targets`, over the view that notifies, a relay beside it.
async fn serve<Src: Source, E: Engine>(
    source: Src,
    store: InboxStore<E>,
    targets: Option<Targets>,
    health: Health,
    config: &ConsumeConfig,
    shutdown: CancellationToken,
) -> Result<Option<ConsumerReport>, ConsumeError> {
    let mut inbox = InboxLayer::new(store.clone());
    let batching = config.batch_max.map(|n| {
        Batching::<E>::up_to(n as usize)
            // The seed's four handlers, as transactions.
            .transactions(ConsumerOptions::default().concurrency as usize)
    });
    let (Some(notify), Some(targets)) = (&config.notify, targets) else {
        if let Some(batching) = batching {
            inbox = inbox.batching(batching.set_path(TaskView::new()));
        }
        let service = ServiceBuilder::new().layer(inbox).service(TaskView::new());
        return consume(source, store, service, health, config, shutdown).await;
    };
    // No set path: it must have exactly the inner service's effects, and
    // the task view's records no notification.
    if let Some(batching) = batching {
        inbox = inbox.batching(batching);
    }
    let relay = notify.relay::<E>(&config.dsn, targets);
    let service = ServiceBuilder::new()
        .map_response(crate::notify::waking(relay.waker()))
        .layer(inbox)
        .service(notify.service());
    crate::notify::with_relay(relay, &shutdown, |stop| {
        consume(source, store, service, health, config, stop)
    })
    .await
    .map_err(ConsumeError::Relay)?
}

/// The consumer over `service` until `shutdown`.
async fn consume<Src, S, E>(
    source: Src,
    store: InboxStore<E>,
    service: S,
    health: Health,
    config: &ConsumeConfig,
    shutdown: CancellationToken,
) -> Result<Option<ConsumerReport>, ConsumeError>
where
    Src: Source,
    S: tower::Service<result_inbox::delivery::Delivery<bytes::Bytes>> + Clone + Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send,
    S::Response: Send,
    E: Engine,
{
    let watching = shutdown.child_token();
    tokio::spawn(crate::replication::watch(store.clone(), watching.clone()));
    let _stop_watching = watching.drop_guard();
    info!(receiver = %config.scope.receiver, queue = %config.scope.queue_id, batch_max = config.batch_max.unwrap_or(1), "consuming");
    let mut consumer = Consumer::new(source, config.consumer.clone())
        .with_probe(store)
        .with_health(health);
    if let Some(parent) = crate::otel::trace_parent() {
        consumer = consumer.with_trace_parent(parent);
    }
    let report = consumer
        .run(service, shutdown.cancelled_owned())
        .await
        .map_err(ConsumeError::Consumer)?;
    Ok(Some(report))
}
