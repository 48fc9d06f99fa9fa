//! What a readiness endpoint reads of a running consumer.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

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

    pub(super) fn set_stream_open(&self, open: bool) {
        self.state.stream_open.store(open, Ordering::Relaxed);
        telemetry::flag(telemetry::STREAM_OPEN, open);
    }

    pub(super) fn set_database_reachable(&self, reachable: bool) {
        self.state
            .database_reachable
            .store(reachable, Ordering::Relaxed);
        telemetry::flag(telemetry::DATABASE_REACHABLE, reachable);
    }
}
