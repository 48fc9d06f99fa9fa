//! Apply throughput on a three-node Galera cluster: consumers on one node
//! against consumers on all three, side by side in one run.
//!
//! Needs the cluster of `scripts/with-galera.sh` (`make bench`). Each case
//! applies fresh deliveries (a new task each) through `InboxLayer` over
//! `TaskView` with 4 workers per node used, for `CLUSTER_BENCH_SECS` in all
//! (default 12), taking turns in rounds so that a change in the machine's
//! load weighs on both. Then the same in batching mode (16 deliveries per
//! transaction, 4 transactions per node), every case in every round, the
//! order turning. Prints:
//!
//! ```text
//! cluster one_node_per_s=… three_nodes_per_s=… ratio=… certification_retries=…
//! cluster batch_max=16 one_node_per_s=… three_nodes_per_s=… ratio=… certification_retries=…
//! cluster batched_vs_unbatched one_node=… three_nodes=…
//! ```

#[path = "../tests/common/mod.rs"]
#[allow(unused_imports)]
mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::galera::ClusterDb;
use common::{random_hex, scope, EventSpec};
use result_inbox::delivery::{Delivery, DeliveryId};
use result_inbox::inbox::{InboxStore, Outcome};
use result_inbox::task_view::TaskView;
use tower::{ServiceBuilder, ServiceExt};

const WORKERS_PER_NODE: usize = 4;
const ROUNDS: u32 = 3;
/// Deliveries per transaction in batching mode.
const BATCH_MAX: usize = 16;

/// Applies fresh events with `WORKERS_PER_NODE` workers on each store for
/// `time`; returns how many were applied.
async fn run(stores: &[InboxStore], queue: &str, time: Duration, batch: Option<usize>) -> u64 {
    let applied = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + time;
    let mut workers = Vec::new();
    for store in stores {
        // One receiver per node; in batching mode its 4 transactions get
        // room for a full batch each.
        let (layer, callers) = common::sized_layer(store, batch, WORKERS_PER_NODE);
        let service = ServiceBuilder::new().layer(layer).service(TaskView::new());
        for _ in 0..callers {
            let (service, applied, queue) = (service.clone(), applied.clone(), queue.to_owned());
            workers.push(tokio::spawn(async move {
                while Instant::now() < until {
                    let json = EventSpec::submitted(&queue, &random_hex(16)).json();
                    let delivery = Delivery::new(DeliveryId::new(random_hex(8)), Bytes::from(json))
                        .with_attempt(1);
                    let receipt = service.clone().oneshot(delivery).await.unwrap();
                    assert_eq!(receipt.outcome, Outcome::Applied);
                    applied.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
    }
    for w in workers {
        w.await.unwrap();
    }
    applied.load(Ordering::Relaxed)
}

#[tokio::main]
async fn main() {
    if std::env::var("RESULT_INBOX_GALERA_DSNS").is_err() {
        eprintln!("cluster bench: needs the Galera cluster; run it with `make bench`");
        return;
    }
    let secs: u64 = std::env::var("CLUSTER_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12);
    let slice = Duration::from_secs(secs) / ROUNDS;
    let db = ClusterDb::initialized().await;
    let scope = scope("bench");
    let mut stores = Vec::new();
    for node in 0..3 {
        stores.push(db.store(node, scope.clone()).await);
    }
    let queue = scope.queue_id.as_str().to_owned();
    // Applied per case: one node, three nodes, each unbatched and batched.
    let mut applied = [0u64; 4];
    let cases = [
        (1, None),
        (3, None),
        (1, Some(BATCH_MAX)),
        (3, Some(BATCH_MAX)),
    ];
    let mut retries = [0u64; 2];
    for round in 0..ROUNDS as usize {
        for turn in 0..cases.len() {
            let case = (turn + round) % cases.len();
            let (nodes, batch) = cases[case];
            let before: u64 = stores.iter().map(|s| s.stats().deadlock_retries).sum();
            applied[case] += run(&stores[..nodes], &queue, slice, batch).await;
            let after: u64 = stores.iter().map(|s| s.stats().deadlock_retries).sum();
            retries[usize::from(batch.is_some())] += after - before;
        }
    }
    let seconds = (slice * ROUNDS).as_secs_f64();
    let [one, three, one_batched, three_batched] = applied.map(|n| n as f64 / seconds);
    println!(
        "cluster one_node_per_s={one:.0} three_nodes_per_s={three:.0} ratio={:.2} certification_retries={}",
        three / one,
        retries[0]
    );
    println!(
        "cluster batch_max={BATCH_MAX} one_node_per_s={one_batched:.0} three_nodes_per_s={three_batched:.0} ratio={:.2} certification_retries={}",
        three_batched / one_batched,
        retries[1]
    );
    println!(
        "cluster batched_vs_unbatched one_node={:.2} three_nodes={:.2}",
        one_batched / one,
        three_batched / three
    );
}
