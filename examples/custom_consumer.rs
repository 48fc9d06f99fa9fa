//! The crate's consumer over a service of one's own: Orbit's deliveries go
//! through `InboxLayer` into a business service, and each `Ok` is ACKed —
//! only after the inbox committed.
//!
//! The business here just advances the task view and says what it saw; a
//! real one writes its own tables in the same transaction (see
//! `examples/own_table.rs`). The store is also the consumer's probe: while
//! the database is unreachable, nothing is leased.
//!
//! ```sh
//! ORBIT_CREDENTIALS_FILE=.local/inbox.credentials.json \
//!   ORBIT_SUBSCRIPTION_ID=… ORBIT_RECEIVER_DSN=mysql://… cargo run --example custom_consumer
//! ```
//!
//! The credentials file written by bootstrap names Orbit's URL, the token
//! and the queue; `ORBIT_URL` overrides its URL.
//!
//! It runs until Ctrl-C (SIGINT), then stops taking deliveries, lets
//! pending ACKs finish and prints what it did.

use std::time::Duration;

use result_inbox::consumer::{Consumer, ConsumerOptions};
use result_inbox::db::Dsn;
use result_inbox::delivery::Delivery;
use result_inbox::ids::SubscriptionId;
use result_inbox::inbox::{Applying, InboxError, InboxLayer, InboxStore, StoreOptions};
use result_inbox::orbit::{Credentials, OrbitClient, OrbitSource, OrbitUrl};
use result_inbox::scope::{InboxScope, ReceiverName};
use result_inbox::task_view::{self, Advance};
use result_inbox::BoxError;
use tokio_util::sync::CancellationToken;
use tower::{service_fn, ServiceBuilder};

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let orbit = Credentials::load(std::path::Path::new(&std::env::var(
        "ORBIT_CREDENTIALS_FILE",
    )?))?;
    let url = std::env::var("ORBIT_URL")
        .ok()
        .or(orbit.orbit_url)
        .ok_or("ORBIT_URL is not set and the credentials file names no URL")?;
    let subscription = SubscriptionId::parse(&std::env::var("ORBIT_SUBSCRIPTION_ID")?)
        .map_err(|_| "ORBIT_SUBSCRIPTION_ID must be 32 hex")?;
    let dsn: Dsn = std::env::var("ORBIT_RECEIVER_DSN")?.parse()?;

    let scope = InboxScope::new(ReceiverName::default(), orbit.queue_id.clone());
    let store = InboxStore::connect(&dsn, scope, StoreOptions::default()).await?;
    let client = OrbitClient::new(OrbitUrl::parse(&url)?, orbit.token, Duration::from_secs(10))?;
    let source = OrbitSource::connect(client, subscription, &orbit.queue_id).await?;
    let consumer = Consumer::new(source, ConsumerOptions::default()).with_probe(store.clone());

    // The business: advance the view and say what it saw. It runs in the
    // inbox's transaction; printing here says "seen", not "committed".
    let business = service_fn(|mut delivery: Delivery<Applying>| async move {
        let (conn, scope, event) = delivery.body_mut().split();
        let advance = task_view::advance(conn, scope, event).await?;
        println!(
            "task={} version={} state={} advanced={}",
            event.task().id,
            event.task().version,
            event.task().state.as_str(),
            advance == Advance::Applied
        );
        let applying = delivery.into_body();
        Ok::<_, InboxError>(match advance {
            Advance::Applied => applying.applied(),
            Advance::Stale => applying.stale(),
        })
    });
    let service = ServiceBuilder::new()
        .layer(InboxLayer::new(store))
        .service(business);

    let stop = CancellationToken::new();
    let ctrl_c = stop.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        ctrl_c.cancel();
    });
    let report = consumer.run(service, stop.cancelled_owned()).await?;
    println!(
        "received={} acked={} failed={}",
        report.received, report.acked, report.failed
    );
    Ok(())
}
