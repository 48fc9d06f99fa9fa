//! A full tower stack around the inbox, in the recommended order:
//!
//! ```text
//! ConcurrencyLimitLayer   outside the inbox: bounds the transactions at once
//! InboxLayer              dedup, one transaction, COMMIT; its own 5 s budget
//! TimeoutLayer            inside: a slow business step becomes an error of the
//!                         inner service, which the inbox rolls back for certain
//! TaskView                the business: version check and view update
//! ```
//!
//! A `TimeoutLayer` *outside* the inbox could fire during COMMIT, where
//! nobody can tell whether the transaction committed (it is still never
//! ACKed, but the outcome is unknown); inside, it can only fire before.
//!
//! Eight copies of one event go through the stack at once: one is applied,
//! seven find the committed row. Needs a database with the receiver's tables:
//!
//! ```sh
//! ORBIT_RECEIVER_DSN=mysql://receiver:…@127.0.0.1:3306/receiver cargo run --example tower_stack
//! ```

use std::time::Duration;

use bytes::Bytes;
use result_inbox::db::Dsn;
use result_inbox::delivery::{Delivery, DeliveryId};
use result_inbox::ids::QueueId;
use result_inbox::inbox::{InboxLayer, InboxStore, Outcome, StoreOptions};
use result_inbox::scope::{InboxScope, ReceiverName};
use result_inbox::task_view::TaskView;
use result_inbox::BoxError;
use tower::{ServiceBuilder, ServiceExt};

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let dsn: Dsn = std::env::var("ORBIT_RECEIVER_DSN")?.parse()?;
    let queue = QueueId::parse("0123456789abcdef0123456789abcdef").expect("32 hex");
    let scope = InboxScope::new(ReceiverName::default(), queue.clone());
    let store = InboxStore::connect(&dsn, scope, StoreOptions::default()).await?;

    let stack = ServiceBuilder::new()
        .concurrency_limit(4)
        .layer(InboxLayer::new(store))
        .timeout(Duration::from_secs(2))
        .service(TaskView::new());

    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_nanos();
    let (event_id, task_id) = (format!("{nanos:032x}"), format!("{:032x}", nanos + 1));
    let event = format!(
        r#"{{"id":"{event_id}","type":"task.cancelled","queue_id":"{queue}","occurred_at":"2026-12-01T10:00:00Z","task":{{"id":"{task_id}","version":3,"state":"CANCELLED"}}}}"#
    );
    let mut copies = tokio::task::JoinSet::new();
    for n in 0..8 {
        let delivery = Delivery::new(
            DeliveryId::new(format!("copy-{n}")),
            Bytes::from(event.clone()),
        );
        copies.spawn(stack.clone().oneshot(delivery));
    }
    let mut applied = 0;
    let mut duplicates = 0;
    while let Some(receipt) = copies.join_next().await {
        match receipt??.outcome {
            Outcome::Applied => applied += 1,
            Outcome::Duplicate { .. } => duplicates += 1,
            Outcome::Stale => {}
        }
    }
    println!("copies=8 applied={applied} duplicates={duplicates}");
    assert_eq!((applied, duplicates), (1, 7));
    Ok(())
}
