//! How a consumer behaves.

use std::time::Duration;

use crate::retry::Backoff;

/// How a consumer behaves.
#[derive(Debug, Clone)]
pub struct ConsumerOptions {
    /// Most deliveries handled at once. Default 4.
    pub concurrency: u32,
    /// Deliveries leased ahead of a free handler slot, so that a slot freed
    /// by a commit finds its next delivery already here instead of waiting
    /// for the source's round trip. Held deliveries are not started while
    /// the breaker is open, and are dropped unstarted at shutdown (their
    /// leases run out and they come again). `0` leases only for free
    /// slots. Default 4 (a source that grants credit in pull requests,
    /// such as NATS JetStream's, does better with more: `receiver consume
    /// --source nats` uses 16).
    pub prefetch: u32,
    /// First wait before reopening a broken stream, re-reporting an ACK or
    /// probing an unreachable database again; doubles up to `retry_max`.
    /// Default 200 ms.
    pub retry_min: Duration,
    /// Longest wait between retries. Default 5 s.
    pub retry_max: Duration,
    /// After shutdown is requested, how long pending ACKs may still take
    /// before the consumer returns anyway, counted from the moment the
    /// shutdown future resolved. Default 8 s, so that a process that exits
    /// right after stays within 10 s of its signal.
    pub shutdown_grace: Duration,
    /// A stream that delivers nothing, not even a ping, for this long is
    /// taken for dead and reopened (Orbit pings every 15 s). Default 60 s.
    pub stream_idle_timeout: Duration,
    /// How often the [`Probe`](crate::probe::Probe) runs while the database answers. Default 5 s.
    pub probe_interval: Duration,
    /// A probe that has not answered after this long counts as failed.
    /// Default 2 s.
    pub probe_timeout: Duration,
}

impl Default for ConsumerOptions {
    fn default() -> Self {
        Self {
            concurrency: 4,
            prefetch: 4,
            retry_min: Duration::from_millis(200),
            retry_max: Duration::from_secs(5),
            shutdown_grace: Duration::from_secs(8),
            stream_idle_timeout: Duration::from_secs(60),
            probe_interval: Duration::from_secs(5),
            probe_timeout: Duration::from_secs(2),
        }
    }
}

impl ConsumerOptions {
    /// A fresh backoff between `retry_min` and `retry_max`.
    pub fn backoff(&self) -> Backoff {
        Backoff::new(self.retry_min, self.retry_max)
    }
}
