//! The delivery stream and its credit.

use std::time::Duration;

use tokio::time::{timeout, Instant};
use tracing::warn;

use super::{ConsumerOptions, Health};
use crate::retry::Backoff;
use crate::source::LeaseStream;
use crate::telemetry;

/// Longest a credit grant may take to send; a stream that cannot take a few
/// bytes in that time is treated as broken.
const GRANT_TIMEOUT: Duration = Duration::from_secs(2);

/// The delivery stream and its credit: how much of it was granted and not
/// yet spent, and when to reopen it after it broke.
pub(super) struct Link<T> {
    pub(super) stream: Option<T>,
    /// Credit granted on `stream` and not yet spent by a delivery.
    pub(super) outstanding: u32,
    pub(super) reconnect_at: Instant,
    pub(super) last_heard: Instant,
    backoff: Backoff,
    health: Health,
}

impl<T: LeaseStream> Link<T>
where
    T::Error: std::fmt::Display,
{
    pub(super) fn new(options: &ConsumerOptions, health: Health) -> Self {
        Self {
            stream: None,
            outstanding: 0,
            reconnect_at: Instant::now(),
            last_heard: Instant::now(),
            backoff: options.backoff(),
            health,
        }
    }

    pub(super) fn opened(&mut self, stream: T) {
        // A new stream starts without credit (the protocol's rule).
        self.stream = Some(stream);
        self.outstanding = 0;
        self.last_heard = Instant::now();
        self.backoff.reset();
        self.health.set_stream_open(true);
    }

    pub(super) fn retry_later(&mut self) {
        self.reconnect_at = Instant::now() + self.backoff.next();
    }

    /// The stream broke, closed or fell silent: reopen it after a backoff.
    pub(super) fn lost(&mut self, why: &str) {
        warn!("{why}");
        self.stream = None;
        self.outstanding = 0;
        self.health.set_stream_open(false);
        metrics::counter!(telemetry::STREAM_RECONNECTS).increment(1);
        self.retry_later();
    }

    /// Closes the stream to give up its unspent credit, to be reopened once
    /// deliveries may start again (a new stream starts without credit).
    /// Credit cannot be taken back otherwise: the source would spend it on
    /// every delivery whose lease runs out meanwhile, each time spending
    /// one of its attempts.
    pub(super) async fn give_up_credit(&mut self, close_within: Duration) {
        let Some(stream) = self.stream.take() else {
            return;
        };
        let _ = timeout(close_within, stream.close()).await;
        self.outstanding = 0;
        self.health.set_stream_open(false);
        self.reconnect_at = Instant::now();
    }

    /// Grants credit until `wanted` deliveries are granted but not yet
    /// received, on top of those in the consumer's hands, once at least
    /// `step` are missing.
    pub(super) async fn top_up(&mut self, wanted: u32, step: u32) {
        let Some(stream) = self.stream.as_mut() else {
            return;
        };
        let more = wanted.saturating_sub(self.outstanding);
        if more == 0 || more < step {
            return;
        }
        match timeout(GRANT_TIMEOUT, stream.grant(more)).await {
            Ok(Ok(())) => self.outstanding += more,
            Ok(Err(e)) => self.lost(&format!("delivery stream broke: {e}")),
            Err(_) => self.lost("delivery stream took no credit in time"),
        }
    }
}
