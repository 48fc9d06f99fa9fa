//! What a prune deletes and how fast: the scope, the window and its floor,
//! the batch size and the pause between batches.

use std::time::Duration;

use crate::scope::InboxScope;

use super::PruneError;

/// The shortest window prune accepts unless told otherwise: seven days,
/// which covers Orbit's leases and budgets, a week-end's added budgets and
/// a daily backup's restore.
pub const DEFAULT_MINIMUM_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

/// Rows per batch (one transaction each).
pub const DEFAULT_BATCH_ROWS: u32 = 1_000;

/// Most canonical text a batch deletes, whatever its row count: a batch of
/// large events stays a small write set (on a Galera cluster far below
/// `wsrep_max_ws_size`).
pub const DEFAULT_BATCH_BYTES: u64 = 8 * 1024 * 1024;

/// The shortest pause after each batch, which leaves the server to live
/// traffic.
pub const DEFAULT_PAUSE: Duration = Duration::from_millis(50);

/// How much longer than a batch took the pause after it is at least: a
/// prune works at most a fifth of the time, and yields more when the
/// server is busy and its batches take longer.
pub const DEFAULT_PAUSE_FACTOR: u32 = 4;

/// One prune of one scope.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The receiver name and queue whose rows are pruned; no other scope's
    /// row is read or deleted.
    pub scope: InboxScope,
    /// Rows received longer ago than this (by the server's clock) go.
    pub older_than: Duration,
    /// The floor: a shorter `older_than` is refused.
    pub minimum_retention: Duration,
    /// Most rows per batch.
    pub batch_rows: u32,
    /// Most canonical text per batch, in bytes (a batch has at least one
    /// row).
    pub batch_bytes: u64,
    /// The shortest pause after each batch.
    pub pause: Duration,
    /// The pause after a batch is at least this many times the batch's own
    /// time (0: only `pause`).
    pub pause_factor: u32,
}

impl Plan {
    /// A plan with the default floor, batch size and pause.
    pub fn new(scope: InboxScope, older_than: Duration) -> Self {
        Self {
            scope,
            older_than,
            minimum_retention: DEFAULT_MINIMUM_RETENTION,
            batch_rows: DEFAULT_BATCH_ROWS,
            batch_bytes: DEFAULT_BATCH_BYTES,
            pause: DEFAULT_PAUSE,
            pause_factor: DEFAULT_PAUSE_FACTOR,
        }
    }

    /// The pause after a batch that took `batch`.
    pub fn pause_after(&self, batch: Duration) -> Duration {
        self.pause.max(batch * self.pause_factor)
    }

    /// Whether the window is one prune may use: not below the floor, and a
    /// batch of at least one row.
    pub fn check(&self) -> Result<(), PruneError> {
        if self.older_than < self.minimum_retention {
            return Err(PruneError::WindowTooShort {
                older_than: self.older_than,
                minimum: self.minimum_retention,
            });
        }
        if self.batch_rows == 0 {
            return Err(PruneError::EmptyBatch);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::QueueId;
    use crate::scope::ReceiverName;

    fn plan(older_than: Duration) -> Plan {
        let scope = InboxScope::new(
            ReceiverName::parse(ReceiverName::DEFAULT).unwrap(),
            QueueId::parse("0123456789abcdef0123456789abcdef").unwrap(),
        );
        Plan::new(scope, older_than)
    }

    #[test]
    fn a_window_below_the_floor_is_refused_and_one_at_it_is_taken() {
        let day = Duration::from_secs(24 * 3600);
        assert!(matches!(
            plan(6 * day).check(),
            Err(PruneError::WindowTooShort { .. })
        ));
        assert!(plan(7 * day).check().is_ok());
        let mut lowered = plan(Duration::from_secs(3600));
        lowered.minimum_retention = Duration::from_secs(3600);
        assert!(lowered.check().is_ok());
    }

    #[test]
    fn the_pause_after_a_batch_grows_with_the_batchs_time() {
        let p = plan(DEFAULT_MINIMUM_RETENTION);
        assert_eq!(p.pause_after(Duration::from_millis(5)), DEFAULT_PAUSE);
        assert_eq!(
            p.pause_after(Duration::from_millis(100)),
            Duration::from_millis(400)
        );
        let mut fixed = plan(DEFAULT_MINIMUM_RETENTION);
        fixed.pause_factor = 0;
        assert_eq!(fixed.pause_after(Duration::from_secs(1)), DEFAULT_PAUSE);
    }

    #[test]
    fn a_batch_of_no_rows_is_refused() {
        let mut p = plan(DEFAULT_MINIMUM_RETENTION);
        p.batch_rows = 0;
        assert!(matches!(p.check(), Err(PruneError::EmptyBatch)));
    }
}
