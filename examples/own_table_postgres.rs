//! Your own table, written in the inbox's transaction, on PostgreSQL
//! (feature `postgres`): `examples/own_table.rs` with `sqlx::Postgres` as
//! the engine. The inner service gets the transaction's `PgConnection`;
//! `task_view::advance_on::<Postgres>` decides whether the event is newer;
//! the business writes its own row; the inbox commits all of it, or none.
//!
//! Needs a database with the receiver's tables (`receiver init` on the
//! same address creates them from `schema.postgres.sql`):
//!
//! ```sh
//! ORBIT_RECEIVER_DSN=postgres://receiver:…@127.0.0.1:5432/receiver \
//!   cargo run --example own_table_postgres --features postgres
//! ```

use bytes::Bytes;
use result_inbox::db::Dsn;
use result_inbox::delivery::{Delivery, DeliveryId};
use result_inbox::ids::QueueId;
use result_inbox::inbox::{Applying, InboxError, InboxLayer, InboxStore, Outcome, StoreOptions};
use result_inbox::scope::{InboxScope, ReceiverName};
use result_inbox::sqlx::{self, Postgres};
use result_inbox::task_view::{self, Advance};
use result_inbox::BoxError;
use tower::{service_fn, ServiceBuilder, ServiceExt};

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

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let dsn: Dsn = std::env::var("ORBIT_RECEIVER_DSN")?.parse()?;
    let queue = QueueId::parse("0123456789abcdef0123456789abcdef").expect("32 hex");
    let scope = InboxScope::new(ReceiverName::default(), queue.clone());
    let store = InboxStore::<Postgres>::open(&dsn, scope, StoreOptions::default()).await?;

    // The business's own table, normally made by its own migrations.
    let mut session = store.session().await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS example_orders \
         (task_id char(32) PRIMARY KEY, status varchar(16) NOT NULL)",
    )
    .execute(session.connection())
    .await?;
    session.commit().await?;

    let service = ServiceBuilder::new()
        .layer(InboxLayer::new(store.clone()))
        .service(service_fn(
            |mut delivery: Delivery<Applying<Postgres>>| async move {
                let (conn, scope, event) = delivery.body_mut().split();
                let advance = task_view::advance_on::<Postgres>(conn, scope, event).await?;
                if advance == Advance::Applied {
                    // In the inbox's transaction: committed with the inbox
                    // row and the view, or not at all.
                    sqlx::query(
                        "INSERT INTO example_orders (task_id, status) VALUES ($1, $2) \
                         ON CONFLICT (task_id) DO UPDATE SET status = EXCLUDED.status",
                    )
                    .bind(event.task().id.as_str())
                    .bind(event.task().state.as_str())
                    .execute(&mut *conn)
                    .await?;
                }
                let applying = delivery.into_body();
                Ok::<_, InboxError>(match advance {
                    Advance::Applied => applying.applied(),
                    Advance::Stale => applying.stale(),
                })
            },
        ));

    let task = fresh_id(1);
    let event = format!(
        r#"{{"id":"{}","type":"task.succeeded","queue_id":"{queue}","occurred_at":"2026-12-01T10:00:00Z","task":{{"id":"{task}","version":2,"state":"SUCCEEDED","result":{{"total":42}}}}}}"#,
        fresh_id(2)
    );
    let mut outcomes = Vec::new();
    for attempt in 1..=2 {
        let delivery =
            Delivery::new(DeliveryId::new("d-1"), Bytes::from(event.clone())).with_attempt(attempt);
        let receipt = service.clone().oneshot(delivery).await?;
        println!("attempt {attempt}: {}", receipt.outcome.class());
        outcomes.push(receipt.outcome);
    }
    assert_eq!(
        outcomes,
        [Outcome::Applied, Outcome::Duplicate { applied: true }]
    );

    let mut session = store.session().await?;
    let status: String = sqlx::query_scalar("SELECT status FROM example_orders WHERE task_id = $1")
        .bind(&task)
        .fetch_one(session.connection())
        .await?;
    session.rollback().await?;
    println!("order task={task} status={status}");
    Ok(())
}
