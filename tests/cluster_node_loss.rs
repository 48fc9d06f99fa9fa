//! A Galera node is killed under a running stream: `receiver consume`
//! processes on every node of the cluster of `scripts/with-galera.sh`, fed by
//! one orbit-dev subscription. Its own test binary, because it takes a node
//! away from everything else running beside it.

use crate::common;

use std::time::Duration;

use common::galera::{
    applied_once_everywhere, consuming_on_every_node, kill_node, restart_node, ClusterDb,
};
use common::orbit::OrbitDev;

const TASKS: u64 = 200;

#[tokio::test]
async fn a_node_killed_mid_stream_loses_nothing_and_every_node_ends_with_the_same_tables() {
    let db = ClusterDb::initialized().await;
    let (orbit, creds, sub) = OrbitDev::subscribed(2_000, 30, "inbox-cluster").await;
    // Each task's first event and a second version of it.
    let mut consumers = consuming_on_every_node(&db, &orbit, &creds, &sub, TASKS).await;
    let total = 2 * TASKS;

    // Node 3 goes away; the consumers of nodes 1 and 2 carry on.
    let before_kill = consumers[2].output().len();
    kill_node(2);
    let at_kill = orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(1), |_| true)
        .await["acked"]
        .as_u64()
        .unwrap();
    assert!(
        at_kill + 40 <= total,
        "killed mid-stream: {at_kill} of {total} acknowledged"
    );
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(60), |c| {
            c["acked"].as_u64().unwrap_or(0) >= (at_kill + 40).min(total)
        })
        .await;
    consumers[2]
        .wait_for_output(Duration::from_secs(30), |out| {
            out.contains("database unreachable: taking no new deliveries")
        })
        .await;
    assert!(consumers[2].running(), "{}", consumers[2].output());
    // Only the deliveries in flight when the node died spend an attempt:
    // the first connection error opens the breaker, and no delivery starts
    // after it (the consumer's concurrency is 4; in batching mode 4
    // transactions of up to RECEIVER_BATCH_MAX deliveries each).
    let in_flight =
        4 * std::env::var("RECEIVER_BATCH_MAX").map_or(1, |n| n.parse::<usize>().unwrap());
    let down = consumers[2].output()[before_kill..].to_owned();
    let failed = down
        .lines()
        .filter(|l| l.contains(" WARN ") && l.contains("result_inbox::inbox: delivery"))
        .count();
    eprintln!("node 3 down: {failed} deliveries failed on it (at most {in_flight} in flight)");
    assert!(
        failed <= in_flight,
        "{failed} deliveries failed on the dead node:\n{down}"
    );

    // It comes back, rejoins by a state transfer, and everything ends
    // applied once.
    restart_node(2).await;
    let agreed = applied_once_everywhere(&db, &orbit, &creds, &sub, &mut consumers, total).await;
    assert_eq!(agreed[1], agreed[2], "applied rows == the views' advances");
    assert!(
        agreed[1] >= TASKS as i64,
        "every task advanced at least once"
    );
    for node in 0..3 {
        let versions: Vec<u64> = sqlx::query_scalar("SELECT task_version FROM receiver_task_views")
            .fetch_all(&db.pool(node).await)
            .await
            .unwrap();
        assert_eq!(versions.len() as u64, TASKS);
        assert!(versions.iter().all(|v| *v == 2), "node {}", node + 1);
    }
}
