//! What a demo run reports, and why it failed.

use result_inbox::ids::{SubscriptionId, TaskId};
use result_inbox::inbox::InboxError;
use result_inbox::orbit::OrbitError;

use crate::check::Problem;

/// What the demo saw, for its two output lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DemoReport {
    /// The task it submitted and cancelled.
    pub task_id: TaskId,
    /// The view's state after the run.
    pub state: String,
    /// Whether the second apply of the event found the committed inbox row.
    pub inbox_duplicate: bool,
    /// How many events advanced the view.
    pub applied_events: u64,
    /// Deliveries of the subscription Orbit counts as acknowledged.
    pub ack_confirmed: u64,
    /// Deliveries of the subscription not yet acknowledged (pending or leased).
    pub pending: u64,
    /// Whether the subscription is still enabled after the demo paused it.
    pub subscription_enabled: bool,
}

impl DemoReport {
    /// The two lines the demo prints.
    pub fn lines(&self) -> [String; 2] {
        [
            format!(
                "task={} state={} inbox_duplicate={} applied_events={}",
                self.task_id, self.state, self.inbox_duplicate, self.applied_events
            ),
            format!(
                "ack_confirmed={} pending={} subscription_enabled={}",
                self.ack_confirmed, self.pending, self.subscription_enabled
            ),
        ]
    }
}

/// Why the demo failed. Everything it created is kept.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// A check before the demo created anything failed: the database
    /// (tables, columns, grants) or the token's scopes.
    #[error("{0}")]
    Check(Problem),
    /// Orbit refused or failed a call.
    #[error("Orbit: {0}")]
    Orbit(#[from] OrbitError),
    /// The consumer could not run.
    #[error("consumer: {0}")]
    Consumer(#[from] result_inbox::consumer::ConsumerError),
    /// The inbox failed.
    #[error("inbox: {0}")]
    Inbox(#[from] InboxError),
    /// The database failed while reading the view back.
    #[error("database: {0}")]
    Database(#[from] result_inbox::db::DbError),
    /// The demo ran out of time in the named step.
    #[error("demo did not finish within its time limit (while {0})")]
    Timeout(&'static str),
    /// The demo ran out of time waiting for its task's event while the
    /// subscription brought only events of other tasks, which it refused.
    #[error("demo did not finish within its time limit: it refused {refused} delivery(ies) of other tasks on this queue while waiting for its own task's event; run the demo on a dedicated queue")]
    OtherTasksOnly {
        /// Deliveries of other tasks that were refused.
        refused: u64,
    },
    /// A result was not what the inbox guarantees.
    #[error("unexpected result: {0}")]
    Unexpected(String),
}

/// A failed demo: why, and what it had created (kept for inspection).
#[derive(Debug)]
pub struct DemoFailure {
    /// Why it failed.
    pub error: DemoError,
    /// What it created before it failed; nothing of it is removed.
    pub kept: Kept,
}

/// What a failed demo created and left in place.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Kept {
    /// The subscription it created, if it got that far.
    pub subscription: Option<SubscriptionId>,
    /// The task it submitted, if it got that far.
    pub task: Option<TaskId>,
}

impl std::fmt::Display for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.subscription, &self.task) {
            (None, None) => f.write_str("nothing was created"),
            (Some(s), None) => write!(f, "subscription {s} is kept for inspection"),
            (None, Some(t)) => write!(f, "task {t} is kept for inspection"),
            (Some(s), Some(t)) => write!(
                f,
                "subscription {s}, task {t}, their deliveries and rows are kept for inspection"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_was_created_is_said_to_be_kept() {
        assert_eq!(Kept::default().to_string(), "nothing was created");
        let sub = SubscriptionId::parse("0123456789abcdef0123456789abcdef").unwrap();
        let kept = Kept {
            subscription: Some(sub),
            task: None,
        };
        assert!(kept.to_string().ends_with("is kept for inspection"));
    }
}
