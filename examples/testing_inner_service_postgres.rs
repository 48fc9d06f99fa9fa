//! `examples/testing_inner_service.rs` on PostgreSQL (features `testing`
//! and `postgres`): the same service under test, with `sqlx::Postgres` as
//! the engine. The test database is `TestDatabase::<Postgres>::create_on`,
//! its store an `InboxStore<Postgres>`, and the service answers
//! `Verdict<Postgres>`; `testing::event` and `testing::apply` take either.
//!
//! Needs a server where it may create and drop a database:
//!
//! ```sh
//! RESULT_INBOX_TEST_PG_ADMIN_DSN=postgres://postgres@127.0.0.1:5432/postgres \
//!   cargo run --example testing_inner_service_postgres --features testing,postgres
//! ```

use result_inbox::delivery::Delivery;
use result_inbox::event::{EventType, TaskState};
use result_inbox::inbox::{Applying, InboxError, Outcome, Refusal, Verdict};
use result_inbox::sqlx::{self, Postgres};
use result_inbox::task_view::{self, Advance};
use result_inbox::testing::{self, TestDatabase};
use result_inbox::BoxError;
use tower::service_fn;

/// The service under test: the task view's version check, then its own
/// row; a task waiting for a human's review is never booked.
async fn record_order(
    mut delivery: Delivery<Applying<Postgres>>,
) -> Result<Verdict<Postgres>, BoxError> {
    let (conn, scope, event) = delivery.body_mut().split();
    if event.task().state == TaskState::NeedsReview {
        return Err(Refusal::new("a task that needs review is never booked").into());
    }
    let advance = task_view::advance_on::<Postgres>(&mut *conn, scope, event).await?;
    if advance == Advance::Applied {
        sqlx::query(
            "INSERT INTO orders (task_id, version) VALUES ($1, $2) \
             ON CONFLICT (task_id) DO UPDATE SET version = EXCLUDED.version",
        )
        .bind(event.task().id.as_str())
        .bind(i64::try_from(event.task().version)?)
        .execute(&mut *conn)
        .await?;
    }
    let applying = delivery.into_body();
    Ok(match advance {
        Advance::Applied => applying.applied(),
        Advance::Stale => applying.stale(),
    })
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let admin = std::env::var("RESULT_INBOX_TEST_PG_ADMIN_DSN")?.parse()?;
    let db = TestDatabase::<Postgres>::create_on(&admin).await?;
    let store = db.store().await?;
    let mut session = store.session().await?;
    sqlx::query("CREATE TABLE orders (task_id text PRIMARY KEY, version bigint NOT NULL)")
        .execute(session.connection())
        .await?;
    session.commit().await?;
    let service = service_fn(record_order);

    let second = testing::event(&store, EventType::Succeeded, 2);
    let first = testing::event_for(&store, &second.task_id, EventType::Submitted, 1);
    let applied = testing::apply(&store, service, &second.json).await?;
    assert_eq!(applied.outcome, Outcome::Applied);
    println!("version 2: {}", applied.outcome.class());

    let copy = testing::apply(&store, service, &second.json).await?;
    assert!(copy.is_duplicate());
    println!("its copy: {}", copy.outcome.class());

    let older = testing::apply(&store, service, &first.json).await?;
    assert_eq!(older.outcome, Outcome::Stale);
    println!("version 1 after it: {}", older.outcome.class());

    let review = testing::event(&store, EventType::NeedsReview, 1);
    let refused = testing::apply(&store, service, &review.json).await;
    assert!(matches!(refused, Err(InboxError::Refused(_))));
    println!("a task that needs review: {}", refused.unwrap_err().class());

    let mut session = store.session().await?;
    let orders: i64 = sqlx::query_scalar("SELECT count(*) FROM orders")
        .fetch_one(session.connection())
        .await?;
    session.rollback().await?;
    println!("orders={orders}");
    db.remove().await?;
    Ok(())
}
