//! The inbox and the task view on PostgreSQL (feature `postgres`), against
//! a throwaway server: the outcomes of the MySQL inbox, by PostgreSQL's
//! rules (a failed statement aborts the transaction; a racing copy waits
//! on the winner's key; `lock_timeout` ends a lock wait).

use crate::common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::postgres::PgTestDb;
use common::{delivery_of, random_hex, scope, EventSpec};
use result_inbox::db::Dsn;
use result_inbox::delivery::Delivery;
use result_inbox::inbox::{
    Batching, Conflict, Inbox, InboxError, InboxLayer, InboxStore, Outcome, Receipt, StoreOptions,
};
use result_inbox::scope::InboxScope;
use result_inbox::task_view::{self, TaskView};
use sqlx::{Executor, Postgres};
use tower::{Service, ServiceBuilder, ServiceExt};

struct Fixture {
    db: PgTestDb,
    scope: InboxScope,
    store: InboxStore<Postgres>,
    task: String,
}

impl Fixture {
    async fn new() -> Fixture {
        Self::with(StoreOptions::default()).await
    }

    async fn with(options: StoreOptions) -> Fixture {
        let db = PgTestDb::initialized().await;
        let scope = scope("pg-inbox");
        let dsn = Dsn::parse(&db.dsn).unwrap();
        let store = InboxStore::<Postgres>::open(&dsn, scope.clone(), options)
            .await
            .unwrap();
        Fixture {
            db,
            scope,
            store,
            task: random_hex(16),
        }
    }

    fn event(&self, version: u64, event_type: &'static str, state: &'static str) -> EventSpec<'_> {
        EventSpec {
            id: random_hex(16),
            queue_id: self.scope.queue_id.as_str(),
            task_id: &self.task,
            version,
            event_type,
            state,
            result: None,
        }
    }

    fn receiver(&self) -> Inbox<TaskView, Postgres> {
        ServiceBuilder::new()
            .layer(InboxLayer::new(self.store.clone()))
            .service(TaskView::new())
    }

    async fn apply(&self, json: &str) -> Result<Receipt, InboxError> {
        self.receiver().oneshot(delivery_of(json)).await
    }

    async fn inbox_rows(&self) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM receiver_inbox")
            .fetch_one(&self.db.pool)
            .await
            .unwrap()
    }

    async fn view(&self) -> task_view::TaskViewRow {
        let task = result_inbox::ids::TaskId::parse(&self.task).unwrap();
        task_view::load_committed(&self.store, &task)
            .await
            .unwrap()
            .expect("the task has a view")
    }
}

#[tokio::test]
async fn a_first_delivery_is_applied_and_its_copy_is_a_duplicate_that_changes_nothing() {
    let f = Fixture::new().await;
    let event = f.event(2, "task.succeeded", "SUCCEEDED").json();
    let first = f.apply(&event).await.unwrap();
    assert_eq!(first.outcome, Outcome::Applied);
    let again = f.apply(&event).await.unwrap();
    assert_eq!(again.outcome, Outcome::Duplicate { applied: true });
    assert_eq!(f.inbox_rows().await, 1);
    let view = f.view().await;
    assert_eq!((view.task_version, view.applied_events), (2, 1));
    assert_eq!(view.last_state, "SUCCEEDED");
}

#[tokio::test]
async fn a_copy_with_other_content_is_a_conflict_and_writes_nothing() {
    let f = Fixture::new().await;
    let spec = f.event(2, "task.succeeded", "SUCCEEDED");
    f.apply(&spec.json()).await.unwrap();
    let other = EventSpec {
        result: Some(r#"{"changed":true}"#),
        ..spec
    };
    let e = f.apply(&other.json()).await.unwrap_err();
    assert!(
        matches!(e, InboxError::Conflict(Conflict::ContentMismatch { .. })),
        "{e:?}"
    );
    assert_eq!(f.inbox_rows().await, 1);
    assert_eq!(f.view().await.applied_events, 1);
}

#[tokio::test]
async fn an_older_version_is_stale_and_another_event_of_the_same_version_a_conflict() {
    let f = Fixture::new().await;
    f.apply(&f.event(3, "task.succeeded", "SUCCEEDED").json())
        .await
        .unwrap();
    let older = f
        .apply(&f.event(2, "task.submitted", "PENDING").json())
        .await
        .unwrap();
    assert_eq!(older.outcome, Outcome::Stale);
    let applied: i16 =
        sqlx::query_scalar("SELECT applied FROM receiver_inbox ORDER BY received_at DESC LIMIT 1")
            .fetch_one(&f.db.pool)
            .await
            .unwrap();
    assert_eq!(applied, 0, "a stale receipt is recorded as not applied");
    let e = f
        .apply(&f.event(3, "task.failed", "FAILED").json())
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            InboxError::Conflict(Conflict::VersionTaken { version: 3, .. })
        ),
        "{e:?}"
    );
    // The conflict rolled back its inbox row: two receipts, one view.
    assert_eq!(f.inbox_rows().await, 2);
    let view = f.view().await;
    assert_eq!((view.task_version, view.applied_events), (3, 1));
    assert_eq!(view.last_state, "SUCCEEDED");
}

#[tokio::test]
async fn a_version_up_to_the_largest_u64_advances_the_view() {
    let f = Fixture::new().await;
    f.apply(&f.event(u64::MAX - 1, "task.submitted", "PENDING").json())
        .await
        .unwrap();
    let last = f
        .apply(&f.event(u64::MAX, "task.succeeded", "SUCCEEDED").json())
        .await
        .unwrap();
    assert_eq!(last.outcome, Outcome::Applied);
    let view = f.view().await;
    assert_eq!((view.task_version, view.applied_events), (u64::MAX, 2));
}

/// Holds the inbox row of `event` in a transaction of its own, uncommitted.
async fn hold_inbox_row(f: &Fixture, event: &str) -> sqlx::Transaction<'static, Postgres> {
    let parsed = result_inbox::event::Event::from_json(event.as_bytes()).unwrap();
    let mut tx = f.db.pool.begin().await.unwrap();
    sqlx::query("INSERT INTO receiver_inbox VALUES ($1, $2, $3, $4, $5, 1, now())")
        .bind(f.scope.receiver.as_str())
        .bind(f.scope.queue_id.as_str())
        .bind(parsed.id().as_str())
        .bind(parsed.canonical().digest().to_hex())
        .bind(parsed.canonical().as_str())
        .execute(&mut *tx)
        .await
        .unwrap();
    tx
}

#[tokio::test]
async fn a_racing_copy_waits_for_the_winner_and_applies_when_the_winner_rolls_back() {
    let f = Fixture::new().await;
    let event = f.event(2, "task.succeeded", "SUCCEEDED").json();
    let winner = hold_inbox_row(&f, &event).await;
    let mut copy = tokio::spawn({
        let receiver = f.receiver();
        let event = event.clone();
        async move { receiver.oneshot(delivery_of(&event)).await }
    });
    // The copy waits on the winner's key: it neither succeeds nor fails.
    assert!(tokio::time::timeout(Duration::from_millis(500), &mut copy)
        .await
        .is_err());
    winner.rollback().await.unwrap();
    let receipt = copy.await.unwrap().unwrap();
    assert_eq!(receipt.outcome, Outcome::Applied);
    assert_eq!(f.view().await.applied_events, 1);
}

#[tokio::test]
async fn a_racing_copy_waits_for_the_winner_and_is_a_duplicate_once_the_winner_commits() {
    let f = Fixture::new().await;
    let event = f.event(2, "task.succeeded", "SUCCEEDED").json();
    let winner = hold_inbox_row(&f, &event).await;
    let mut copy = tokio::spawn({
        let receiver = f.receiver();
        let event = event.clone();
        async move { receiver.oneshot(delivery_of(&event)).await }
    });
    assert!(tokio::time::timeout(Duration::from_millis(500), &mut copy)
        .await
        .is_err());
    winner.commit().await.unwrap();
    let receipt = copy.await.unwrap().unwrap();
    assert_eq!(receipt.outcome, Outcome::Duplicate { applied: true });
    assert_eq!(f.inbox_rows().await, 1);
}

#[tokio::test]
async fn a_lock_held_past_the_lock_timeout_is_retried_within_the_budget() {
    // A 2 s budget: each lock wait ends after 1 s (55P03), and is retried.
    let f = Fixture::with(StoreOptions {
        transaction_timeout: Duration::from_secs(4),
        ..StoreOptions::default()
    })
    .await;
    let event = f.event(2, "task.succeeded", "SUCCEEDED").json();
    let winner = hold_inbox_row(&f, &event).await;
    let copy = tokio::spawn({
        let receiver = f.receiver();
        let event = event.clone();
        async move { receiver.oneshot(delivery_of(&event)).await }
    });
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    winner.rollback().await.unwrap();
    let receipt = copy.await.unwrap().unwrap();
    assert_eq!(receipt.outcome, Outcome::Applied);
    assert!(
        f.store.stats().lock_wait_retries >= 1,
        "{:?}",
        f.store.stats()
    );
}

#[tokio::test]
async fn an_inner_service_gets_the_transaction_s_pg_connection_and_its_nested_begin_is_a_savepoint()
{
    let f = Fixture::new().await;
    f.db.pool
        .execute("CREATE TABLE orders (id text PRIMARY KEY, version bigint NOT NULL)")
        .await
        .unwrap();
    // Writes its own row, then a nested transaction it drops: the drop
    // undoes only the nested part, and the inbox's COMMIT keeps the rest.
    let service = tower::service_fn(
        |delivery: Delivery<result_inbox::inbox::Applying<Postgres>>| async move {
            let mut applying = delivery.into_body();
            let id = applying.event().id().as_str().to_owned();
            sqlx::query("INSERT INTO orders VALUES ($1, 1)")
                .bind(&id)
                .execute(applying.connection())
                .await?;
            {
                use sqlx::Connection;
                let mut nested = applying.connection().begin().await?;
                sqlx::query("INSERT INTO orders VALUES ('nested', 1)")
                    .execute(&mut *nested)
                    .await?;
            }
            Ok::<_, sqlx::Error>(applying.applied())
        },
    );
    let mut inbox = ServiceBuilder::new()
        .layer(InboxLayer::new(f.store.clone()))
        .service(service);
    let event = f.event(2, "task.succeeded", "SUCCEEDED").json();
    let receipt = inbox
        .ready()
        .await
        .unwrap()
        .call(delivery_of(&event))
        .await
        .unwrap();
    assert_eq!(receipt.outcome, Outcome::Applied);
    let orders: Vec<String> = sqlx::query_scalar("SELECT id FROM orders")
        .fetch_all(&f.db.pool)
        .await
        .unwrap();
    assert_eq!(orders.len(), 1, "{orders:?}");
    assert_ne!(orders[0], "nested");
    assert_eq!(f.inbox_rows().await, 1);
}

#[tokio::test]
async fn a_failing_inner_service_leaves_neither_its_rows_nor_the_inbox_row() {
    let f = Fixture::new().await;
    f.db.pool
        .execute("CREATE TABLE orders (id text PRIMARY KEY)")
        .await
        .unwrap();
    let service = tower::service_fn(
        |delivery: Delivery<result_inbox::inbox::Applying<Postgres>>| async move {
            let mut applying = delivery.into_body();
            sqlx::query("INSERT INTO orders VALUES ('written')")
                .execute(applying.connection())
                .await?;
            Err::<result_inbox::inbox::Verdict<Postgres>, _>(sqlx::Error::RowNotFound)
        },
    );
    let inbox = ServiceBuilder::new()
        .layer(InboxLayer::new(f.store.clone()))
        .service(service);
    let event = f.event(2, "task.succeeded", "SUCCEEDED").json();
    assert!(inbox.oneshot(delivery_of(&event)).await.is_err());
    let orders: i64 = sqlx::query_scalar("SELECT count(*) FROM orders")
        .fetch_one(&f.db.pool)
        .await
        .unwrap();
    assert_eq!((orders, f.inbox_rows().await), (0, 0));
}

#[tokio::test]
async fn in_batching_mode_with_the_set_path_every_delivery_is_answered_as_one_by_one() {
    let f = Fixture::new().await;
    let layer = InboxLayer::new(f.store.clone())
        .batching(Batching::<Postgres>::up_to(16).set_path(TaskView::new()));
    let inbox = ServiceBuilder::new().layer(layer).service(TaskView::new());
    // Two tasks, several versions each, one copy of an event, all at once.
    let other_task = random_hex(16);
    let mut events = Vec::new();
    for version in 1..=6u64 {
        events.push(f.event(version, "task.submitted", "PENDING").json());
        events.push(
            EventSpec {
                task_id: &other_task,
                ..f.event(version, "task.submitted", "PENDING")
            }
            .json(),
        );
    }
    events.push(events[3].clone());
    let answers = futures::future::join_all(
        events
            .iter()
            .map(|json| inbox.clone().oneshot(delivery_of(json))),
    )
    .await;
    let mut duplicates = 0;
    for answer in &answers {
        match answer.as_ref().unwrap().outcome {
            Outcome::Duplicate { .. } => duplicates += 1,
            Outcome::Applied | Outcome::Stale => {}
        }
    }
    assert_eq!(duplicates, 1, "{answers:?}");
    assert_eq!(f.inbox_rows().await, 12);
    let view = f.view().await;
    assert_eq!(view.task_version, 6);
    let applied: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM receiver_inbox WHERE applied = 1 AND event_id IN \
         (SELECT event_id FROM receiver_inbox)",
    )
    .fetch_one(&f.db.pool)
    .await
    .unwrap();
    let advanced: i64 =
        sqlx::query_scalar("SELECT sum(applied_events)::bigint FROM receiver_task_views")
            .fetch_one(&f.db.pool)
            .await
            .unwrap();
    assert_eq!(
        applied, advanced,
        "every applied receipt advanced a view once"
    );
}

#[tokio::test]
async fn a_missing_table_is_named_and_a_postgres_address_is_refused_by_a_mysql_store() {
    let db = PgTestDb::new().await;
    let dsn = Dsn::parse(&db.dsn).unwrap();
    let scope = scope("pg-empty");
    let store = InboxStore::<Postgres>::open(&dsn, scope.clone(), StoreOptions::default())
        .await
        .unwrap();
    let e = ServiceBuilder::new()
        .layer(InboxLayer::new(store))
        .service(TaskView::new())
        .oneshot(delivery_of(&common::small_event(scope.queue_id.as_str())))
        .await
        .unwrap_err();
    match &e {
        InboxError::Database(db) => assert_eq!(db.missing_table(), Some("receiver_inbox"), "{e}"),
        other => panic!("{other:?}"),
    }
    let wrong = InboxStore::connect(&dsn, scope, StoreOptions::default())
        .await
        .unwrap_err();
    assert!(wrong.is_refusal(), "{wrong}");
    assert!(wrong.to_string().contains("PostgreSQL"), "{wrong}");
}

#[tokio::test]
async fn a_role_with_select_insert_and_update_on_the_two_tables_runs_every_path() {
    let f = Fixture::new().await;
    let role = format!("inbox_runtime_{}", random_hex(4));
    for statement in [
        format!("CREATE ROLE {role} LOGIN"),
        format!("GRANT SELECT, INSERT, UPDATE ON receiver_inbox, receiver_task_views TO {role}"),
    ] {
        f.db.pool.execute(statement.as_str()).await.unwrap();
    }
    let (server, _) = f.db.dsn.split_once('@').unwrap();
    let (scheme, _) = server.split_once("://").unwrap();
    let (_, rest) = f.db.dsn.split_once('@').unwrap();
    let dsn = Dsn::parse(&format!("{scheme}://{role}@{rest}")).unwrap();
    let store = InboxStore::<Postgres>::open(&dsn, f.scope.clone(), StoreOptions::default())
        .await
        .unwrap();
    let one = ServiceBuilder::new()
        .layer(InboxLayer::new(store.clone()))
        .service(TaskView::new());
    let event = f.event(2, "task.succeeded", "SUCCEEDED").json();
    let outcomes = [
        one.clone()
            .oneshot(delivery_of(&event))
            .await
            .unwrap()
            .outcome,
        one.clone()
            .oneshot(delivery_of(&event))
            .await
            .unwrap()
            .outcome,
        one.clone()
            .oneshot(delivery_of(&f.event(1, "task.submitted", "PENDING").json()))
            .await
            .unwrap()
            .outcome,
    ];
    assert_eq!(
        outcomes,
        [
            Outcome::Applied,
            Outcome::Duplicate { applied: true },
            Outcome::Stale
        ]
    );
    // The set path's statements (the rows' lock among them) as well.
    let batched = ServiceBuilder::new()
        .layer(
            InboxLayer::new(store)
                .batching(Batching::<Postgres>::up_to(8).set_path(TaskView::new())),
        )
        .service(TaskView::new());
    let answers = futures::future::join_all((3..=6u64).map(|version| {
        batched.clone().oneshot(delivery_of(
            &f.event(version, "task.succeeded", "SUCCEEDED").json(),
        ))
    }))
    .await;
    assert!(answers.iter().all(Result::is_ok), "{answers:?}");
    assert_eq!(f.view().await.task_version, 6);
}

#[tokio::test]
async fn a_deadlock_victim_is_retried_inside_the_budget_and_counted() {
    let f = Fixture::new().await;
    f.apply(&f.event(1, "task.submitted", "PENDING").json())
        .await
        .unwrap();
    let next = f.event(2, "task.cancelled", "CANCELLED");

    // A rival takes the view row, then waits for the inbox row the apply
    // inserts first. Its own deadlock check comes later than the apply's
    // (1 s), so the apply's transaction is the one rolled back (40P01).
    let mut rival = f.db.pool.begin().await.unwrap();
    rival
        .execute("SET LOCAL deadlock_timeout = '10s'")
        .await
        .unwrap();
    sqlx::query("SELECT 1 FROM receiver_task_views WHERE task_id = $1 FOR UPDATE")
        .bind(&f.task)
        .fetch_one(&mut *rival)
        .await
        .unwrap();
    let applying = tokio::spawn({
        let receiver = f.receiver();
        let json = next.json();
        async move { receiver.oneshot(delivery_of(&json)).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    sqlx::query("INSERT INTO receiver_inbox VALUES ($1, $2, $3, repeat('0', 64), '{}', 0, now())")
        .bind(f.scope.receiver.as_str())
        .bind(f.scope.queue_id.as_str())
        .bind(&next.id)
        .execute(&mut *rival)
        .await
        .expect("the rival survives the deadlock");
    rival.rollback().await.unwrap();

    let receipt = applying.await.unwrap().unwrap();
    assert_eq!(receipt.outcome, Outcome::Applied);
    assert_eq!(f.store.stats().deadlock_retries, 1);
    assert_eq!(f.view().await.applied_events, 2);
}

#[tokio::test]
async fn a_duplicate_key_of_the_inner_service_s_own_table_is_an_error_never_the_duplicate_path() {
    let f = Fixture::new().await;
    f.db.pool
        .execute("CREATE TABLE orders (id int PRIMARY KEY); INSERT INTO orders VALUES (1)")
        .await
        .unwrap();
    // 23505 as the inbox's own duplicate key is, but on another table.
    let service = tower::service_fn(
        |delivery: Delivery<result_inbox::inbox::Applying<Postgres>>| async move {
            let mut applying = delivery.into_body();
            sqlx::query("INSERT INTO orders VALUES (1)")
                .execute(applying.connection())
                .await?;
            Ok::<_, sqlx::Error>(applying.applied())
        },
    );
    let inbox = ServiceBuilder::new()
        .layer(InboxLayer::new(f.store.clone()))
        .service(service);
    let event = f.event(2, "task.succeeded", "SUCCEEDED").json();
    // The inner service's error, as it is: not a duplicate, not retried.
    let err = inbox.oneshot(delivery_of(&event)).await.unwrap_err();
    assert!(
        matches!(&err, InboxError::Database(e) if e.sqlstate() == Some("23505")),
        "{err:?}"
    );
    // The key's row is committed: every redelivery meets it again.
    assert_eq!(err.class(), "conflict");
    assert!(!err.is_retryable());
    assert!(err.to_string().contains("duplicate key"), "{err}");
    assert_eq!(f.inbox_rows().await, 0, "the inbox row was rolled back");
}

/// An embedder's own error around its statements.
#[derive(Debug, thiserror::Error)]
enum OrderError {
    #[error("orders: {0}")]
    Db(#[from] sqlx::Error),
}

/// The server's own 40P01 answer, as a deadlock victim gets it.
const DEADLOCK: &str = "DO $$ BEGIN RAISE EXCEPTION USING ERRCODE = '40P01'; END $$";

/// The inbox's answer kept the deadlock, with the inner service's own
/// error behind it.
fn assert_failed_of_the_deadlock(err: &InboxError) {
    match err {
        InboxError::Database(e) => {
            assert_eq!(e.kind(), result_inbox::db::DbErrorKind::Deadlock, "{err}");
            assert_eq!(e.sqlstate(), Some("40P01"), "{err}");
        }
        other => panic!("not the deadlock: {other:?}"),
    }
    assert_eq!(err.class(), "error");
    assert!(err.is_retryable());
    assert!(err.to_string().contains("deadlock"), "{err}");
    assert!(
        result_inbox::failure::chain(err).any(|link| link.is::<OrderError>()),
        "the inner service's error is in the chain"
    );
}

/// An inner service that runs `statement` on each call but the first,
/// which meets a deadlock; counting its calls.
fn deadlocked_then(
    calls: Arc<AtomicU32>,
    statement: &'static str,
) -> impl Service<
    Delivery<result_inbox::inbox::Applying<Postgres>>,
    Response = result_inbox::inbox::Verdict<Postgres>,
    Error = OrderError,
    Future: Send,
> + Clone
       + Send
       + 'static {
    tower::service_fn(
        move |mut d: Delivery<result_inbox::inbox::Applying<Postgres>>| {
            let first = calls.fetch_add(1, Ordering::SeqCst) == 0;
            async move {
                let statement = if first { DEADLOCK } else { statement };
                sqlx::query(statement)
                    .execute(d.body_mut().connection())
                    .await?;
                Ok::<_, OrderError>(d.into_body().applied())
            }
        },
    )
}

#[tokio::test]
async fn a_deadlock_that_never_clears_is_retried_with_growing_pauses_and_fails_of_the_deadlock() {
    let f = Fixture::with(StoreOptions {
        transaction_timeout: Duration::from_secs(3),
        ..Default::default()
    })
    .await;
    let calls = Arc::new(AtomicU32::new(0));
    let err = ServiceBuilder::new()
        .layer(InboxLayer::new(f.store.clone()))
        .service(deadlocked_then(calls.clone(), DEADLOCK))
        .oneshot(delivery_of(
            &f.event(2, "task.succeeded", "SUCCEEDED").json(),
        ))
        .await
        .unwrap_err();
    let calls = calls.load(Ordering::SeqCst);
    // At a fixed 20 ms pause, 3 s held about a hundred runs.
    assert!((3..=15).contains(&calls), "{calls} runs in 3 s");
    let counted = f.store.stats().deadlock_retries;
    assert!(
        (u64::from(calls - 1)..=u64::from(calls)).contains(&counted),
        "{counted} retries counted for {calls} runs"
    );
    assert_failed_of_the_deadlock(&err);
    assert_eq!(f.inbox_rows().await, 0);
}

#[tokio::test]
async fn a_retry_the_budget_cuts_short_fails_of_the_deadlock_that_made_it_not_of_the_time() {
    let f = Fixture::with(StoreOptions {
        transaction_timeout: Duration::from_millis(800),
        ..Default::default()
    })
    .await;
    let calls = Arc::new(AtomicU32::new(0));
    // A deadlock, then a run that is still waiting when the budget ends.
    let err = ServiceBuilder::new()
        .layer(InboxLayer::new(f.store.clone()))
        .service(deadlocked_then(calls.clone(), "SELECT pg_sleep(5)"))
        .oneshot(delivery_of(
            &f.event(2, "task.succeeded", "SUCCEEDED").json(),
        ))
        .await
        .unwrap_err();
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_failed_of_the_deadlock(&err);
    assert_eq!(f.inbox_rows().await, 0);
}
