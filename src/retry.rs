//! Waiting with backoff: for a server that is not up yet, an answer that
//! was lost, a stream to reopen.

use std::future::Future;
use std::time::Duration;

use tracing::warn;

/// Exponential backoff with jitter, so that many consumers do not retry in
/// lockstep: each wait doubles up to a maximum, plus up to 50 %.
#[derive(Debug, Clone)]
pub struct Backoff {
    min: Duration,
    max: Duration,
    current: Duration,
}

impl Default for Backoff {
    /// From 200 ms up to 5 s, as a consumer's default options.
    fn default() -> Self {
        Self::new(Duration::from_millis(200), Duration::from_secs(5))
    }
}

impl Backoff {
    /// Waits from `min`, doubling up to `max`.
    pub fn new(min: Duration, max: Duration) -> Self {
        Self {
            min,
            max,
            current: min,
        }
    }

    /// Starts again from the shortest wait.
    pub fn reset(&mut self) {
        self.current = self.min;
    }

    /// The next wait.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Duration {
        let base = self.current;
        self.current = (self.current * 2).min(self.max);
        // Up to +50 %: a cheap random factor from the std hasher's seed.
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(base.as_nanos() as u64);
        let jitter = (h.finish() % 500) as u32;
        base + base * jitter / 1000
    }
}

/// Runs `attempt` until it succeeds or fails for good; a failure that
/// `transient` says may pass (a server not reachable yet) is logged once
/// per attempt and retried after the next wait of `backoff`. For start-up
/// checks: nothing is leased while it waits. Drop the future to stop
/// waiting.
pub async fn until_answered<T, E, F, Fut>(
    mut backoff: Backoff,
    what: &'static str,
    transient: fn(&E) -> bool,
    mut attempt: F,
) -> Result<T, E>
where
    E: std::fmt::Display,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    loop {
        match attempt().await {
            Err(e) if transient(&e) => {
                let wait = backoff.next();
                warn!(
                    error = %e,
                    retry_in_ms = wait.as_millis() as u64,
                    "{what} not reachable yet; nothing is leased until it answers"
                );
                tokio::time::sleep(wait).await;
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_maximum_and_resets() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(400));
        let waits: Vec<_> = (0..4).map(|_| b.next()).collect();
        for (wait, base) in waits.iter().zip([100u64, 200, 400, 400]) {
            assert!(
                *wait >= Duration::from_millis(base)
                    && *wait < Duration::from_millis(base * 3 / 2 + 1)
            );
        }
        b.reset();
        assert!(b.next() < Duration::from_millis(151));
    }
}
