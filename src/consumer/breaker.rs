//! The breaker: no deliveries taken while the database cannot be reached.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::{timeout, Instant};
use tracing::{info, warn};

use super::{ConsumerOptions, Health};
use crate::probe::Probe;
use crate::retry::Backoff;
use crate::telemetry;
use crate::BoxError;

/// Stops taking deliveries while the database cannot be reached: opened by
/// a delivery that failed for that reason, by the probe's dependency saying
/// so, or by a failed probe, closed by a probe that answers. Without a probe it never opens.
pub(super) struct Breaker {
    probe: Option<Arc<dyn Probe>>,
    open: bool,
    running: Option<JoinHandle<Result<(), BoxError>>>,
    pub(super) next_at: Instant,
    interval: Duration,
    probe_timeout: Duration,
    backoff: Backoff,
    health: Health,
}

impl Breaker {
    pub(super) fn new(
        probe: Option<Arc<dyn Probe>>,
        options: &ConsumerOptions,
        health: Health,
    ) -> Self {
        telemetry::flag(telemetry::BREAKER_OPEN, false);
        if probe.is_some() {
            health.set_database_reachable(true);
        }
        Self {
            probe,
            open: false,
            running: None,
            next_at: Instant::now(),
            interval: options.probe_interval,
            probe_timeout: options.probe_timeout,
            backoff: options.backoff(),
            health,
        }
    }

    /// Whether no delivery is to start now. A dependency whose own work
    /// found it unreachable ([`Probe::is_unavailable`]) opens it here, before
    /// any delivery fails for it.
    pub(super) fn is_open(&mut self) -> bool {
        if self.probe.as_ref().is_some_and(|p| p.is_unavailable()) {
            self.trip();
        }
        self.open
    }

    pub(super) fn is_probing(&self) -> bool {
        self.running.is_some()
    }

    pub(super) fn is_due(&self) -> bool {
        self.probe.is_some() && self.running.is_none()
    }

    /// A delivery failed because the database cannot be reached.
    pub(super) fn trip(&mut self) {
        if self.probe.is_none() || self.open {
            return;
        }
        self.set_open(true);
        // Probe soon, not only at the next regular interval.
        self.next_at = Instant::now() + self.backoff.next();
    }

    /// Opens or closes it, and tells the health whether the database answers.
    fn set_open(&mut self, open: bool) {
        self.health.set_database_reachable(!open);
        if open == self.open {
            return;
        }
        self.open = open;
        telemetry::flag(telemetry::BREAKER_OPEN, open);
        if open {
            warn!("database unreachable: taking no new deliveries until it answers (no retry budget is spent meanwhile)");
        } else {
            info!("database answers again: taking deliveries");
        }
    }

    pub(super) fn start(&mut self) {
        let Some(probe) = self.probe.clone() else {
            return;
        };
        let limit = self.probe_timeout;
        self.running = Some(tokio::spawn(async move {
            match timeout(limit, probe.probe()).await {
                Ok(answer) => answer,
                Err(_) => Err("the database did not answer its probe in time".into()),
            }
        }));
    }

    pub(super) async fn finished(&mut self) -> Result<(), BoxError> {
        match self.running.as_mut() {
            Some(running) => running
                .await
                .unwrap_or_else(|_| Err("the probe task failed".into())),
            None => std::future::pending().await,
        }
    }

    pub(super) fn record(&mut self, answer: Result<(), BoxError>) {
        self.running = None;
        match answer {
            Ok(()) => {
                self.set_open(false);
                self.backoff.reset();
                self.next_at = Instant::now() + self.interval;
            }
            Err(e) => {
                if !self.open {
                    warn!(error = %e, "database probe failed");
                }
                self.set_open(true);
                self.next_at = Instant::now() + self.backoff.next();
            }
        }
    }

    pub(super) fn stop(&mut self) {
        if let Some(running) = self.running.take() {
            running.abort();
        }
    }
}
