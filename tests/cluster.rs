//! The inbox on a real three-node MariaDB Galera cluster, with stores on
//! different nodes writing at once (`scripts/with-galera.sh`).
//!
//! Two copies of an event inserted on two nodes do not wait on each other's
//! row lock: both succeed locally and the loser's COMMIT (or an earlier
//! statement) fails certification with 1213. The inbox runs the transaction
//! again, meets the winner's row as 1062 and compares digests.

use crate::common;

use common::galera::ClusterDb;
use common::{random_hex, scope, EventSpec};
use result_inbox::ids::TaskId;
use result_inbox::inbox::{Conflict, InboxError, InboxStore, Outcome, Receipt};
use result_inbox::scope::InboxScope;
use result_inbox::task_view;
use tower::ServiceExt;

const NODES: usize = 3;
/// Rounds of eight racing copies.
const ROUNDS: usize = 10;

use common::apply_once as apply;

/// A receiver database on the cluster and a store of one scope on each node.
struct Cluster {
    db: ClusterDb,
    scope: InboxScope,
    stores: Vec<InboxStore>,
}

impl Cluster {
    async fn new() -> Cluster {
        let db = ClusterDb::initialized().await;
        let scope = scope("task-result-view");
        let mut stores = Vec::new();
        for node in 0..NODES {
            stores.push(db.store(node, scope.clone()).await);
        }
        Cluster { db, scope, stores }
    }

    /// An event of `task` at version 2, and another with its id but other
    /// content.
    fn same_id_other_content<'a>(&'a self, task: &'a str) -> (EventSpec<'a>, EventSpec<'a>) {
        let first = self.event(task, 2);
        let other = EventSpec {
            id: first.id.clone(),
            state: "CANCELLED",
            event_type: "task.cancelled",
            ..self.event(task, 2)
        };
        (first, other)
    }

    fn event<'a>(&'a self, task: &'a str, version: u64) -> EventSpec<'a> {
        EventSpec {
            version,
            event_type: if version == 1 {
                "task.submitted"
            } else {
                "task.needs_review"
            },
            state: if version == 1 {
                "PENDING"
            } else {
                "NEEDS_REVIEW"
            },
            ..EventSpec::submitted(self.scope.queue_id.as_str(), task)
        }
    }

    /// Applies each `(node, event)` at the same time, each on its node.
    async fn race(&self, copies: Vec<(usize, String)>) -> Vec<Result<Receipt, InboxError>> {
        // One receiver per node, as a consumer there runs it.
        let receivers: Vec<_> = self.stores.iter().map(common::receiver).collect();
        let handles: Vec<_> = copies
            .into_iter()
            .map(|(node, json)| {
                let receiver = receivers[node].clone();
                tokio::spawn(async move { receiver.oneshot(common::delivery_of(&json)).await })
            })
            .collect();
        let mut answers = Vec::new();
        for h in handles {
            answers.push(h.await.unwrap());
        }
        answers
    }

    async fn view(&self, node: usize, task: &str) -> task_view::TaskViewRow {
        task_view::load(
            &self.db.pool(node).await,
            &self.scope,
            &TaskId::parse(task).unwrap(),
        )
        .await
        .unwrap()
        .expect("a view")
    }

    /// Retries of the stores on all nodes (deadlocks include certification
    /// failures).
    fn certification_retries(&self) -> u64 {
        self.stores.iter().map(|s| s.stats().deadlock_retries).sum()
    }
}

#[tokio::test]
async fn eight_copies_of_one_event_over_three_nodes_apply_once_and_the_rest_are_duplicates() {
    let c = Cluster::new().await;
    let mut rounds_with_certification = 0;
    // Several rounds, so that copies really meet on different nodes before
    // either commits at least once.
    for _ in 0..ROUNDS {
        let task = random_hex(16);
        let json = c.event(&task, 2).json();
        let before = c.certification_retries();
        let answers = c
            .race((0..8).map(|i| (i % NODES, json.clone())).collect())
            .await;
        let outcomes: Vec<Outcome> = answers
            .into_iter()
            .map(|a| a.expect("every copy is acknowledged").outcome)
            .collect();
        let applied = outcomes.iter().filter(|o| **o == Outcome::Applied).count();
        let duplicates = outcomes
            .iter()
            .filter(|o| **o == Outcome::Duplicate { applied: true })
            .count();
        assert_eq!((applied, duplicates), (1, 7), "{outcomes:?}");
        for node in 0..NODES {
            let view = c.view(node, &task).await;
            assert_eq!((view.task_version, view.applied_events), (2, 1));
        }
        if c.certification_retries() > before {
            rounds_with_certification += 1;
        }
    }
    assert!(
        rounds_with_certification > 0,
        "no copy ever lost certification: the race did not happen across nodes"
    );
    let agreed = c.db.assert_nodes_agree().await;
    assert_eq!(agreed, vec![ROUNDS as i64; 3]);
    c.db.assert_verified_on_every_node().await;
}

#[tokio::test]
async fn racing_versions_of_one_task_on_different_nodes_leave_the_highest_and_count_right() {
    let c = Cluster::new().await;
    for _ in 0..4 {
        let task = random_hex(16);
        let copies = (1..=6u64)
            .map(|version| (version as usize % NODES, c.event(&task, version).json()))
            .collect();
        let answers = c.race(copies).await;
        let applied = answers
            .iter()
            .map(|a| a.as_ref().expect("every version is acknowledged").outcome)
            .filter(|o| *o == Outcome::Applied)
            .count() as u64;
        for node in 0..NODES {
            let view = c.view(node, &task).await;
            assert_eq!(view.task_version, 6, "the highest version wins");
            assert_eq!(
                view.applied_events, applied,
                "applied_events counts the advances"
            );
        }
    }
    let agreed = c.db.assert_nodes_agree().await;
    assert_eq!(agreed[0], 24);
    assert_eq!(agreed[1], agreed[2], "applied rows == the views' advances");
    c.db.assert_verified_on_every_node().await;
}

#[tokio::test]
async fn a_content_conflict_across_nodes_is_still_a_conflict_whichever_commits_first() {
    let c = Cluster::new().await;
    // One after the other: the second node meets the first's row.
    let task = random_hex(16);
    let (first, other) = c.same_id_other_content(&task);
    assert_eq!(
        apply(&c.stores[0], &first.json()).await.unwrap().outcome,
        Outcome::Applied
    );
    let err = apply(&c.stores[1], &other.json()).await.unwrap_err();
    assert!(
        matches!(err, InboxError::Conflict(Conflict::ContentMismatch { .. })),
        "{err}"
    );

    // At once on two nodes: one wins, the other is a conflict, never a
    // duplicate.
    for _ in 0..5 {
        let task = random_hex(16);
        let (a, b) = c.same_id_other_content(&task);
        let answers = c.race(vec![(0, a.json()), (2, b.json())]).await;
        let applied = answers
            .iter()
            .filter(|a| matches!(a, Ok(r) if r.outcome == Outcome::Applied))
            .count();
        let conflicts = answers
            .iter()
            .filter(|a| {
                matches!(
                    a,
                    Err(InboxError::Conflict(Conflict::ContentMismatch { .. }))
                )
            })
            .count();
        assert_eq!((applied, conflicts), (1, 1), "{answers:?}");
    }
    c.db.assert_nodes_agree().await;
    c.db.assert_verified_on_every_node().await;
}
