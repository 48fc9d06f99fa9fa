//! What a readiness endpoint reads of a running consumer.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

use crate::telemetry;

/// What a readiness endpoint needs to know: is the stream open, does the
/// database answer. Cheap to clone; every clone sees the same state.
#[derive(Debug, Clone)]
pub struct Health {
    state: Arc<HealthState>,
}

#[derive(Debug)]
struct HealthState {
    stream_open: AtomicBool,
    database_reachable: AtomicBool,
    /// Wakes whoever waits for the stream to open.
    opened: Notify,
}

impl Default for Health {
    fn default() -> Self {
        Self::new()
    }
}

impl Health {
    /// A health that has seen no stream yet (not ready). Give it to
    /// [`Consumer::with_health`](super::Consumer::with_health) to serve readiness before the consumer
    /// exists, e.g. while it waits for its database at start.
    pub fn new() -> Self {
        Self {
            state: Arc::new(HealthState {
                stream_open: AtomicBool::new(false),
                database_reachable: AtomicBool::new(true),
                opened: Notify::new(),
            }),
        }
    }

    /// Whether the delivery stream is open.
    pub fn stream_open(&self) -> bool {
        self.state.stream_open.load(Ordering::Relaxed)
    }

    /// Whether the database answered its last probe (always true for a
    /// consumer without a [`Probe`](crate::probe::Probe)).
    pub fn database_reachable(&self) -> bool {
        self.state.database_reachable.load(Ordering::Relaxed)
    }

    /// Ready to do its job: the stream is open and the database answers.
    pub fn is_ready(&self) -> bool {
        self.stream_open() && self.database_reachable()
    }

    /// Waits until the delivery stream is open (at once if it is): the
    /// moment a service manager is told the consumer is ready.
    pub async fn stream_opened(&self) {
        loop {
            // Registered before the flag is read, so that an opening in
            // between is not missed.
            let opened = self.state.opened.notified();
            tokio::pin!(opened);
            opened.as_mut().enable();
            if self.stream_open() {
                return;
            }
            opened.await;
        }
    }

    /// Sets the gauges to what this health holds now
    /// (`receiver_stream_open`, `receiver_database_reachable`), which
    /// otherwise change only with the state: a recorder installed after
    /// the health was made shows a consumer still starting as not open,
    /// rather than nothing.
    pub fn report(&self) {
        telemetry::flag(telemetry::STREAM_OPEN, self.stream_open());
        telemetry::flag(telemetry::DATABASE_REACHABLE, self.database_reachable());
    }

    pub(super) fn set_stream_open(&self, open: bool) {
        self.state.stream_open.store(open, Ordering::Relaxed);
        telemetry::flag(telemetry::STREAM_OPEN, open);
        if open {
            self.state.opened.notify_waiters();
        }
    }

    pub(super) fn set_database_reachable(&self, reachable: bool) {
        self.state
            .database_reachable
            .store(reachable, Ordering::Relaxed);
        telemetry::flag(telemetry::DATABASE_REACHABLE, reachable);
    }
}
