//! `receiver consume`: check everything, then consume one subscription into
//! the task view until shutdown.
//!
//! Before anything is leased the command checks its database (tables,
//! columns, grants: [`check::database`]) and Orbit (token and the scopes
//! `consume` needs: [`check::orbit_access`]; the subscription's queue:
//! [`Consumer::connect`]). A server that cannot be reached yet — connection
//! refused or reset, a time-out, a 5xx answer — is waited for with backoff
//! and one warning per attempt; a permanent answer stops at once. A shutdown
//! during any of this ends it at once too: nothing was leased.
//!
//! Then the consumer runs the inbox over the task view, with the store as
//! the probe of its breaker, until the shutdown token is cancelled.

use std::future::Future;

use tokio_util::sync::CancellationToken;
use tower::ServiceBuilder;
use tracing::{info, warn};

use crate::check::{self, Problem};
use crate::config::OrbitSettings;
use crate::consumer::{Backoff, Consumer, ConsumerError, ConsumerOptions, ConsumerReport, Health};
use crate::dsn::Dsn;
use crate::ids::SubscriptionId;
use crate::inbox::{InboxLayer, InboxStore, StoreOptions};
use crate::orbit::{OrbitError, Scope};
use crate::scope::{InboxScope, ReceiverName};
use crate::task_view::TaskView;

/// Everything `receiver consume` runs with.
#[derive(Debug, Clone)]
pub struct ConsumeConfig {
    /// Where Orbit is and the token and queue to use there.
    pub orbit: OrbitSettings,
    /// The receiver's own database.
    pub dsn: Dsn,
    /// The receiver's fixed name.
    pub name: ReceiverName,
    /// The subscription to consume.
    pub subscription: SubscriptionId,
    /// How the consumer behaves.
    pub consumer: ConsumerOptions,
    /// Timeout of every single call to Orbit.
    pub orbit_call_timeout: std::time::Duration,
}

/// Why `receiver consume` did not start or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConsumeError {
    /// The Orbit client could not be built from the settings.
    #[error("ORBIT_URL: {0}")]
    Client(OrbitError),
    /// A start-up check failed for good.
    #[error("{0}")]
    Check(Problem),
    /// The consumer was refused or had to stop.
    #[error("{0}")]
    Consumer(ConsumerError),
}

impl ConsumeError {
    /// Whether the configuration has to change (exit code 2) rather than an
    /// operation having failed (exit code 1).
    pub fn is_configuration(&self) -> bool {
        match self {
            ConsumeError::Client(_) => true,
            ConsumeError::Check(p) => p.is_configuration(),
            ConsumeError::Consumer(e) => e.is_configuration(),
        }
    }
}

/// Runs `receiver consume` until `shutdown` is cancelled. `Ok(None)` means
/// the shutdown came during start-up, before anything was leased.
pub async fn run(
    config: ConsumeConfig,
    health: Health,
    shutdown: CancellationToken,
) -> Result<Option<ConsumerReport>, ConsumeError> {
    let started = tokio::select! {
        biased;
        _ = shutdown.cancelled() => return Ok(None),
        started = start(&config, health) => started?,
    };
    let (consumer, store) = started;
    let service = ServiceBuilder::new()
        .layer(InboxLayer::new(store))
        .service(TaskView::new());
    info!(receiver = %config.name, queue = %config.orbit.queue_id, "consuming");
    let report = consumer
        .run(service, shutdown.cancelled_owned())
        .await
        .map_err(ConsumeError::Consumer)?;
    Ok(Some(report))
}

/// Everything before the first credit: checks, waiting for servers that
/// are not up yet, the subscription's queue.
async fn start(
    config: &ConsumeConfig,
    health: Health,
) -> Result<(Consumer, InboxStore), ConsumeError> {
    let client = config
        .orbit
        .client(config.orbit_call_timeout)
        .map_err(ConsumeError::Client)?;
    let scope = InboxScope::new(config.name.clone(), config.orbit.queue_id.clone());
    // No connection yet: the check below makes the first, and waits for a
    // database that is not up yet.
    let store = InboxStore::connect_lazy(&config.dsn, scope, StoreOptions::default());

    patiently(&config.consumer, "database", || check::database(&store))
        .await
        .map_err(ConsumeError::Check)?;
    patiently(&config.consumer, "Orbit", || {
        check::orbit_access(&client, &Scope::CONSUME)
    })
    .await
    .map_err(ConsumeError::Check)?;
    let consumer = Consumer::connect(
        client,
        config.subscription.clone(),
        &config.orbit.queue_id,
        config.consumer.clone(),
    )
    .await
    .map_err(ConsumeError::Consumer)?
    .with_probe(store.clone())
    .with_health(health);
    Ok((consumer, store))
}

/// Runs `check` until it passes or fails for good; a transient failure is
/// logged once per attempt and retried with backoff.
async fn patiently<F, Fut>(
    options: &ConsumerOptions,
    what: &'static str,
    mut check: F,
) -> Result<(), Problem>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), Problem>>,
{
    let mut backoff = Backoff::new(options.retry_min, options.retry_max);
    loop {
        match check().await {
            Err(problem) if problem.is_transient() => {
                let wait = backoff.next();
                warn!(
                    check = problem.check(),
                    error = %problem,
                    retry_in_ms = wait.as_millis() as u64,
                    "{what} not reachable yet; nothing is leased until it answers"
                );
                tokio::time::sleep(wait).await;
            }
            other => return other,
        }
    }
}
