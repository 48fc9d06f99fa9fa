//! A webhook after COMMIT: the inner service records an effect in the
//! inbox's transaction, and a relay sends it, signed by Standard Webhooks,
//! once the transaction has committed.
//!
//! Needs a database with the receiver's tables and the outbox (`receiver
//! init --outbox`), an endpoint, and its `whsec_` secret in a file:
//!
//! ```sh
//! ORBIT_RECEIVER_DSN=mysql://receiver:…@127.0.0.1:3306/receiver \
//! WEBHOOK_URL=https://example.com/hooks/orders \
//! WEBHOOK_SECRET_FILE=/run/secrets/webhook \
//!   cargo run --example outbox_webhook
//! ```
//!
//! It prints `sent effect=<id>` once the endpoint took the effect (the
//! same id is the request's `webhook-id` and `Idempotency-Key`), or `dead
//! effect=<id> last=<answer>` when the endpoint refused it.

use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use result_inbox::db::Dsn;
use result_inbox::delivery::{Delivery, DeliveryId};
use result_inbox::ids::EventId;
use result_inbox::ids::QueueId;
use result_inbox::inbox::{Applying, InboxLayer, InboxStore, StoreOptions};
use result_inbox::outbox::{self, EffectId, EffectKey, EffectState, Target};
use result_inbox::relay::{Relay, RelayOptions, Targets, Webhook, WebhookSecret};
use result_inbox::scope::{InboxScope, ReceiverName};
use result_inbox::sqlx::{Connection, MySql, MySqlConnection};
use result_inbox::task_view::TaskView;
use result_inbox::BoxError;
use tokio_util::sync::CancellationToken;
use tower::{service_fn, Service, ServiceBuilder, ServiceExt};

/// A new 32-hex id for each run, so that the example can run again.
fn fresh_id(salt: u64) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    format!(
        "{:016x}{:016x}",
        nanos,
        salt ^ u64::from(std::process::id())
    )
}

/// The effect `id` among those in `state`, if it is there.
async fn find(
    conn: &mut MySqlConnection,
    state: EffectState,
    id: &EffectId,
) -> Result<Option<outbox::Listed>, BoxError> {
    let listed = outbox::list::<MySql>(conn, state, 0, 1000).await?;
    Ok(listed.into_iter().find(|l| l.id == id.as_str()))
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let dsn: Dsn = std::env::var("ORBIT_RECEIVER_DSN")?.parse()?;
    let url = std::env::var("WEBHOOK_URL")?;
    let secret = WebhookSecret::from_file(&PathBuf::from(std::env::var("WEBHOOK_SECRET_FILE")?))?;
    let queue = QueueId::parse("0123456789abcdef0123456789abcdef").expect("32 hex");
    let scope = InboxScope::new(ReceiverName::default(), queue.clone());
    let store = InboxStore::connect(&dsn, scope, StoreOptions::default()).await?;

    // The inner service: tells the order service that the task finished,
    // in the same transaction as the task view's update.
    let service = ServiceBuilder::new()
        .layer(InboxLayer::new(store))
        .service(service_fn(|mut delivery: Delivery<Applying>| async move {
            let task = delivery.body().event().task().id.as_str().to_owned();
            let body = format!(r#"{{"task":"{task}","state":"finished"}}"#);
            delivery
                .body_mut()
                .outbox()
                .record("orders-hook", &format!("{task}/finished"), body)
                .await?;
            Ok::<_, BoxError>(TaskView::new().call(delivery).await?)
        }));
    let (event_id, task_id) = (fresh_id(2), fresh_id(1));
    let event = format!(
        r#"{{"id":"{event_id}","type":"task.succeeded","queue_id":"{queue}","occurred_at":"2026-12-01T10:00:00Z","task":{{"id":"{task_id}","version":1,"state":"SUCCEEDED","result":{{"total":42}}}}}}"#
    );
    let delivery = Delivery::new(DeliveryId::new("d-1"), Bytes::from(event)).with_attempt(1);
    let receipt = service.oneshot(delivery).await?;
    println!("delivery: {}", receipt.outcome.class());
    // Its id, derived from where it came from: the same on every attempt.
    let effect = EffectId::derive(
        &InboxScope::new(ReceiverName::default(), queue),
        &EventId::parse(&event_id)?,
        &Target::parse("orders-hook")?,
        &EffectKey::parse(&format!("{task_id}/finished"))?,
    );

    // The relay, here in the same process; `waker().wake()` after a COMMIT
    // sends at once, and it polls every second meanwhile.
    let webhook = Webhook::new(&url, secret)?.with_timeout(Duration::from_secs(10));
    let targets = Targets::new().with("orders-hook", webhook)?;
    let relay = Relay::<MySql>::new(dsn, targets, RelayOptions::default());
    relay.waker().wake();
    let stop = CancellationToken::new();
    let running = tokio::spawn(relay.run(stop.clone()));

    let mut conn = MySqlConnection::connect(&std::env::var("ORBIT_RECEIVER_DSN")?).await?;
    let line = loop {
        if let Some(dead) = find(&mut conn, EffectState::Dead, &effect).await? {
            let last = dead.last_result.unwrap_or_default();
            break format!("dead effect={effect} last={last}");
        }
        if find(&mut conn, EffectState::Pending, &effect)
            .await?
            .is_none()
        {
            break format!("sent effect={effect}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    stop.cancel();
    running.await??;
    println!("{line}");
    Ok(())
}
