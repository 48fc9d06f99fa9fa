//! Apply throughput on a three-node Galera cluster: consumers on one node
//! against consumers on all three, side by side in one run.
//!
//! Needs the cluster of `scripts/with-galera.sh` (`make bench`). Each case
//! applies fresh deliveries (a new task each) through `InboxLayer` over
//! `TaskView` with 4 workers per node used, for `CLUSTER_BENCH_SECS` in all
//! (default 12), taking turns in rounds so that a change in the machine's
//! load weighs on both. Prints:
//!
//! ```text
//! cluster one_node_per_s=… three_nodes_per_s=… ratio=… certification_retries=…
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
use result_inbox::inbox::{InboxLayer, InboxStore, Outcome};
use result_inbox::task_view::TaskView;
use tower::{ServiceBuilder, ServiceExt};

const WORKERS_PER_NODE: usize = 4;
const ROUNDS: u32 = 3;

/// Applies fresh events with `WORKERS_PER_NODE` workers on each store for
/// `time`; returns how many were applied.
async fn run(stores: &[InboxStore], queue: &str, time: Duration) -> u64 {
    let applied = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + time;
    let mut workers = Vec::new();
    for store in stores {
        for _ in 0..WORKERS_PER_NODE {
            let (store, applied, queue) = (store.clone(), applied.clone(), queue.to_owned());
            workers.push(tokio::spawn(async move {
                let service = ServiceBuilder::new()
                    .layer(InboxLayer::new(store))
                    .service(TaskView::new());
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
    let (mut one, mut three) = (0, 0);
    for _ in 0..ROUNDS {
        one += run(&stores[..1], &queue, slice).await;
        three += run(&stores, &queue, slice).await;
    }
    let seconds = (slice * ROUNDS).as_secs_f64();
    let (one, three) = (one as f64 / seconds, three as f64 / seconds);
    let retries: u64 = stores.iter().map(|s| s.stats().deadlock_retries).sum();
    println!(
        "cluster one_node_per_s={one:.0} three_nodes_per_s={three:.0} ratio={:.2} certification_retries={retries}",
        three / one
    );
}
