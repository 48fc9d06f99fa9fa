//! Storage regressions of the inbox against a real server (R3, R10).

use crate::common;

use bytes::Bytes;
use common::{random_hex, scope, EventSpec, TestDb};
use result_inbox::delivery::{Delivery, DeliveryId};
use result_inbox::inbox::{
    Applying, Conflict, Inbox, InboxError, InboxLayer, InboxStore, Outcome, Verdict,
};
use result_inbox::scope::InboxScope;
use result_inbox::task_view::{self, TaskView};
use result_inbox::BoxError;
use sqlx::MySqlPool;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use tower::{Service, ServiceBuilder, ServiceExt};

fn delivery(json: &str) -> Delivery<Bytes> {
    Delivery::new(
        DeliveryId::new(random_hex(16)),
        Bytes::from(json.to_owned()),
    )
    .with_attempt(1)
}

fn receiver(store: &InboxStore) -> Inbox<TaskView> {
    ServiceBuilder::new()
        .layer(InboxLayer::new(store.clone()))
        .service(TaskView::new())
}

async fn apply(store: &InboxStore, json: &str) -> Result<result_inbox::inbox::Receipt, InboxError> {
    receiver(store).oneshot(delivery(json)).await
}

struct Fixture {
    db: TestDb,
    scope: InboxScope,
    store: InboxStore,
    pool: MySqlPool,
    task: String,
}

impl Fixture {
    async fn new() -> Fixture {
        let db = TestDb::initialized().await;
        let scope = scope("task-result-view");
        let store = db.store(scope.clone()).await;
        let pool = db.pool().await;
        Fixture {
            db,
            scope,
            store,
            pool,
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

    /// A store of this fixture's scope with a single connection, so that
    /// whatever one delivery leaves on it, the next one meets.
    async fn one_connection_store(&self) -> InboxStore {
        let options = result_inbox::inbox::StoreOptions {
            max_connections: 1,
            ..Default::default()
        };
        InboxStore::connect(&self.db.dsn, self.scope.clone(), options)
            .await
            .unwrap()
    }

    async fn view(&self) -> Option<task_view::TaskViewRow> {
        let task = result_inbox::ids::TaskId::parse(&self.task).unwrap();
        task_view::load(&self.pool, &self.scope, &task)
            .await
            .unwrap()
    }

    async fn count(&self, table: &str) -> i64 {
        sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {table}"))
            .fetch_one(&self.pool)
            .await
            .unwrap()
    }

    async fn inbox_applied(&self, event_id: &str) -> Option<bool> {
        sqlx::query_scalar("SELECT applied FROM receiver_inbox WHERE event_id = ?")
            .bind(event_id)
            .fetch_optional(&self.pool)
            .await
            .unwrap()
    }
}

#[tokio::test]
async fn eight_concurrent_identical_deliveries_advance_the_view_exactly_once() {
    let f = Fixture::new().await;
    let json = f.event(2, "task.cancelled", "CANCELLED").json();
    let mut handles = Vec::new();
    for _ in 0..8 {
        let store = f.store.clone();
        let json = json.clone();
        handles.push(tokio::spawn(async move { apply(&store, &json).await }));
    }
    let mut outcomes = Vec::new();
    for h in handles {
        outcomes.push(h.await.unwrap().expect("every copy succeeds").outcome);
    }
    let applied = outcomes.iter().filter(|o| **o == Outcome::Applied).count();
    let duplicates = outcomes
        .iter()
        .filter(|o| **o == Outcome::Duplicate { applied: true })
        .count();
    assert_eq!((applied, duplicates), (1, 7), "{outcomes:?}");
    let view = f.view().await.unwrap();
    assert_eq!(view.applied_events, 1);
    assert_eq!(view.task_version, 2);
    assert_eq!(f.count("receiver_inbox").await, 1);
}

#[tokio::test]
async fn a_redelivery_reports_duplicate_with_the_original_applied_flag() {
    let f = Fixture::new().await;
    let newer = f.event(3, "task.cancelled", "CANCELLED").json();
    let older = f.event(2, "task.needs_review", "NEEDS_REVIEW").json();
    assert_eq!(
        apply(&f.store, &newer).await.unwrap().outcome,
        Outcome::Applied
    );
    assert_eq!(
        apply(&f.store, &older).await.unwrap().outcome,
        Outcome::Stale
    );
    assert_eq!(
        apply(&f.store, &newer).await.unwrap().outcome,
        Outcome::Duplicate { applied: true }
    );
    assert_eq!(
        apply(&f.store, &older).await.unwrap().outcome,
        Outcome::Duplicate { applied: false }
    );
    assert_eq!(f.view().await.unwrap().applied_events, 1);
}

#[tokio::test]
async fn the_same_event_id_with_other_content_is_a_conflict_and_changes_nothing() {
    let f = Fixture::new().await;
    let first = f.event(2, "task.succeeded", "SUCCEEDED");
    let original = EventSpec {
        result: Some("1"),
        ..first
    };
    apply(&f.store, &original.json()).await.unwrap();
    let view_before = f.view().await;

    let altered = EventSpec {
        result: Some("2"),
        ..original
    };
    let err = apply(&f.store, &altered.json()).await.unwrap_err();
    assert!(
        matches!(err, InboxError::Conflict(Conflict::ContentMismatch { .. })),
        "{err:?}"
    );
    assert!(!err.is_retryable());
    assert_eq!(f.view().await, view_before);
    assert_eq!(f.count("receiver_inbox").await, 1);
}

#[tokio::test]
async fn an_older_version_is_recorded_with_applied_false_and_leaves_the_view() {
    let f = Fixture::new().await;
    let newer = f.event(3, "task.cancelled", "CANCELLED");
    apply(&f.store, &newer.json()).await.unwrap();
    let view_before = f.view().await.unwrap();

    let older = f.event(2, "task.needs_review", "NEEDS_REVIEW");
    let receipt = apply(&f.store, &older.json()).await.unwrap();
    assert_eq!(receipt.outcome, Outcome::Stale);
    assert_eq!(f.view().await.unwrap(), view_before);
    assert_eq!(f.inbox_applied(&older.id).await, Some(false));
    assert_eq!(f.inbox_applied(&newer.id).await, Some(true));
}

#[tokio::test]
async fn a_newer_version_advances_the_view_and_counts_the_advance() {
    let f = Fixture::new().await;
    let review = f.event(2, "task.needs_review", "NEEDS_REVIEW");
    let review = EventSpec {
        result: Some(r#"{"score":0.4}"#),
        ..review
    };
    apply(&f.store, &review.json()).await.unwrap();
    let view = f.view().await.unwrap();
    assert_eq!(view.last_state, "NEEDS_REVIEW");

    let done = f.event(3, "task.succeeded", "SUCCEEDED");
    let done = EventSpec {
        result: Some(r#"{"ok":true}"#),
        ..done
    };
    assert_eq!(
        apply(&f.store, &done.json()).await.unwrap().outcome,
        Outcome::Applied
    );
    let view = f.view().await.unwrap();
    assert_eq!(
        (
            view.task_version,
            view.last_state.as_str(),
            view.last_event_id.as_str(),
            view.applied_events
        ),
        (3, "SUCCEEDED", done.id.as_str(), 2)
    );
    assert_eq!(view.last_result.as_deref(), Some(r#"{"ok":true}"#));
}

#[tokio::test]
async fn the_same_task_and_version_under_another_event_id_rolls_back_both_tables() {
    let f = Fixture::new().await;
    let first = f.event(2, "task.cancelled", "CANCELLED");
    apply(&f.store, &first.json()).await.unwrap();
    let view_before = f.view().await;

    let rival = f.event(2, "task.cancelled", "CANCELLED");
    let err = apply(&f.store, &rival.json()).await.unwrap_err();
    assert!(
        matches!(
            err,
            InboxError::Conflict(Conflict::VersionTaken { version: 2, .. })
        ),
        "{err:?}"
    );
    assert_eq!(f.view().await, view_before);
    assert_eq!(
        f.inbox_applied(&rival.id).await,
        None,
        "the rival's inbox row rolled back"
    );
    assert_eq!(f.count("receiver_inbox").await, 1);
}

#[tokio::test]
async fn another_receiver_name_or_queue_is_isolated() {
    let f = Fixture::new().await;
    let event = f.event(2, "task.cancelled", "CANCELLED").json();
    apply(&f.store, &event).await.unwrap();

    // Same queue, other receiver name: its own first receipt.
    let other_name = InboxScope::new("billing-view".parse().unwrap(), f.scope.queue_id.clone());
    let other_store = f.db.store(other_name.clone()).await;
    assert_eq!(
        apply(&other_store, &event).await.unwrap().outcome,
        Outcome::Applied
    );

    // Same name, other queue: the event is not meant for it at all.
    let other_queue = scope("task-result-view");
    let queue_store = f.db.store(other_queue).await;
    let err = apply(&queue_store, &event).await.unwrap_err();
    assert!(matches!(err, InboxError::Rejected(_)), "{err:?}");

    // Each scope's view advanced once, independently.
    let task = result_inbox::ids::TaskId::parse(&f.task).unwrap();
    for s in [&f.scope, &other_name] {
        let view = task_view::load(&f.pool, s, &task).await.unwrap().unwrap();
        assert_eq!(view.applied_events, 1);
    }
    assert_eq!(f.count("receiver_inbox").await, 2);
}

#[tokio::test]
async fn a_failing_inner_service_leaves_both_tables_untouched() {
    let f = Fixture::new().await;
    let failing = tower::service_fn(|mut d: Delivery<Applying>| async move {
        // The business writes first, then fails: all of it must roll back.
        let (conn, scope, event) = d.body_mut().split();
        task_view::advance(conn, scope, event).await?;
        Err::<Verdict, BoxError>("business rule refused the result".into())
    });
    let mut svc = ServiceBuilder::new()
        .layer(InboxLayer::new(f.store.clone()))
        .service(failing);
    let json = f.event(2, "task.cancelled", "CANCELLED").json();
    let err = svc
        .ready()
        .await
        .unwrap()
        .call(delivery(&json))
        .await
        .unwrap_err();
    assert!(matches!(err, InboxError::Handler(_)), "{err:?}");
    assert!(err.is_retryable());
    assert_eq!(f.count("receiver_inbox").await, 0);
    assert_eq!(f.count("receiver_task_views").await, 0);

    // The event can still be applied later.
    assert_eq!(
        apply(&f.store, &json).await.unwrap().outcome,
        Outcome::Applied
    );
}

#[tokio::test]
async fn a_result_with_a_30_digit_integer_and_a_decimal_round_trips_byte_exact() {
    let f = Fixture::new().await;
    let spec = f.event(2, "task.succeeded", "SUCCEEDED");
    let spec = EventSpec {
        result: Some(r#"{"total":123456789012345678901234567890,"ratio":1.10,"tiny":-0.0e-7}"#),
        ..spec
    };
    apply(&f.store, &spec.json()).await.unwrap();
    let stored: String =
        sqlx::query_scalar("SELECT CAST(last_result AS CHAR) FROM receiver_task_views")
            .fetch_one(&f.pool)
            .await
            .unwrap();
    assert_eq!(
        stored,
        r#"{"ratio":1.10,"tiny":-0.0e-7,"total":123456789012345678901234567890}"#
    );
    let event: String =
        sqlx::query_scalar("SELECT CAST(event_canonical AS CHAR) FROM receiver_inbox")
            .fetch_one(&f.pool)
            .await
            .unwrap();
    assert!(event.contains(r#""total":123456789012345678901234567890"#));
    assert!(event.contains(r#""ratio":1.10"#));
}

#[tokio::test]
async fn an_absent_result_is_stored_as_sql_null() {
    let f = Fixture::new().await;
    apply(&f.store, &f.event(2, "task.cancelled", "CANCELLED").json())
        .await
        .unwrap();
    let is_null: bool = sqlx::query_scalar("SELECT last_result IS NULL FROM receiver_task_views")
        .fetch_one(&f.pool)
        .await
        .unwrap();
    assert!(is_null);
}

#[tokio::test]
async fn a_rejected_event_writes_nothing() {
    let f = Fixture::new().await;
    let wrong_state = f.event(2, "task.cancelled", "SUCCEEDED").json();
    let duplicate_keys = r#"{"id":"a","id":"b"}"#;
    for bad in [wrong_state.as_str(), duplicate_keys, "{", "[1,2]"] {
        let err = apply(&f.store, bad).await.unwrap_err();
        assert!(matches!(err, InboxError::Rejected(_)), "{err:?}");
        assert!(!err.is_retryable());
    }
    assert_eq!(f.count("receiver_inbox").await, 0);
    assert_eq!(f.count("receiver_task_views").await, 0);
}

#[tokio::test]
async fn the_stored_event_is_the_canonical_form_with_its_digest() {
    let f = Fixture::new().await;
    let spec = f.event(2, "task.cancelled", "CANCELLED");
    let receipt = apply(&f.store, &spec.json()).await.unwrap();
    let (digest, canonical, received_utc): (String, String, bool) = sqlx::query_as(
        "SELECT CAST(event_digest AS CHAR), CAST(event_canonical AS CHAR), \
         received_at BETWEEN UTC_TIMESTAMP(6) - INTERVAL 1 MINUTE AND UTC_TIMESTAMP(6) \
         FROM receiver_inbox",
    )
    .fetch_one(&f.pool)
    .await
    .unwrap();
    let expected = result_inbox::digest::canonicalize(spec.json().as_bytes()).unwrap();
    assert_eq!(canonical, expected.as_str());
    assert_eq!(digest, expected.digest().to_hex());
    assert_eq!(digest, receipt.digest.to_hex());
    assert!(canonical.contains(r#""occurred_at":"2026-11-30T08:02:44.5Z""#));
    assert!(received_utc);
}

#[tokio::test]
async fn the_layer_composes_with_tower_timeout_inside_a_service_builder() {
    let f = Fixture::new().await;
    let svc = ServiceBuilder::new()
        .timeout(std::time::Duration::from_secs(10))
        .layer(InboxLayer::new(f.store.clone()))
        .timeout(std::time::Duration::from_secs(5))
        .service(TaskView::new());
    let json = f.event(2, "task.cancelled", "CANCELLED").json();
    let receipt = svc.oneshot(delivery(&json)).await.unwrap();
    assert_eq!(receipt.outcome, Outcome::Applied);
}

#[tokio::test]
async fn an_inner_service_that_runs_out_of_time_rolls_everything_back() {
    let f = Fixture::new().await;
    let slow = tower::service_fn(|d: Delivery<Applying>| async move {
        tokio::time::sleep(std::time::Duration::from_secs(30)).await;
        Ok::<_, BoxError>(d.into_body().applied())
    });
    let svc = ServiceBuilder::new()
        .layer(InboxLayer::new(f.store.clone()))
        .timeout(std::time::Duration::from_millis(200))
        .service(slow);
    let json = f.event(2, "task.cancelled", "CANCELLED").json();
    let err = svc.oneshot(delivery(&json)).await.unwrap_err();
    assert!(matches!(err, InboxError::Timeout), "{err:?}");
    assert_eq!(err.class(), "timeout");
    assert_eq!(f.count("receiver_inbox").await, 0);
}

#[tokio::test]
async fn a_transaction_over_its_time_budget_is_abandoned_before_commit() {
    let f = Fixture::new().await;
    let options = result_inbox::inbox::StoreOptions {
        transaction_timeout: std::time::Duration::from_millis(300),
        ..Default::default()
    };
    let store = InboxStore::connect(&f.db.dsn, f.scope.clone(), options)
        .await
        .unwrap();
    let slow = tower::service_fn(|d: Delivery<Applying>| async move {
        tokio::time::sleep(std::time::Duration::from_secs(30)).await;
        Ok::<_, BoxError>(d.into_body().applied())
    });
    let svc = ServiceBuilder::new()
        .layer(InboxLayer::new(store))
        .service(slow);
    let json = f.event(2, "task.cancelled", "CANCELLED").json();
    let started = std::time::Instant::now();
    let err = svc.oneshot(delivery(&json)).await.unwrap_err();
    assert!(matches!(err, InboxError::Timeout), "{err:?}");
    assert!(err.is_retryable());
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    assert_eq!(f.count("receiver_inbox").await, 0);
}

#[tokio::test]
async fn only_a_duplicate_key_takes_the_duplicate_path() {
    // A database without the schema: the insert fails with 1146, which must
    // surface as a database error, never as "already received".
    let db = TestDb::empty().await;
    let scope = scope("task-result-view");
    let store = db.store(scope.clone()).await;
    let task = random_hex(16);
    let spec = EventSpec::submitted(scope.queue_id.as_str(), &task);
    let err = apply(&store, &spec.json()).await.unwrap_err();
    match &err {
        InboxError::Database(e) => {
            assert_eq!(e.number(), Some(result_inbox::db::errno::NO_SUCH_TABLE))
        }
        other => panic!("{other:?}"),
    }
    assert!(err.is_retryable());
}

#[tokio::test]
async fn store_connections_run_read_committed_without_autocommit_and_lock_waits_bounded_by_the_budget(
) {
    let f = Fixture::new().await;
    let settings = f.store.session_settings().await.unwrap();
    assert_eq!(settings.isolation, "READ-COMMITTED");
    // Half the 5 s budget: a lock-wait victim can be retried inside it.
    assert_eq!(
        settings.lock_wait_timeout,
        std::time::Duration::from_secs(2)
    );
    // The inbox INSERT opens each transaction; no BEGIN is sent.
    assert!(!settings.autocommit);
}

#[tokio::test]
async fn a_racing_copy_waits_for_the_first_and_never_takes_an_uncommitted_row_as_success() {
    use std::sync::{Arc, Mutex};
    use tokio::sync::oneshot;

    let f = Fixture::new().await;
    let json = f.event(2, "task.cancelled", "CANCELLED").json();

    // The first copy inserts its inbox row, then holds its transaction open
    // until told to fail.
    let (entered_tx, entered) = oneshot::channel::<()>();
    let (release, released) = oneshot::channel::<()>();
    let hooks = Arc::new(Mutex::new(Some((entered_tx, released))));
    let holding = tower::service_fn(move |d: Delivery<Applying>| {
        let hooks = hooks.lock().unwrap().take();
        async move {
            // Holding the delivery holds its open transaction.
            let _open = d;
            let (entered_tx, released) = hooks.expect("called once");
            entered_tx.send(()).unwrap();
            released.await.ok();
            Err::<Verdict, BoxError>("first copy gives up".into())
        }
    });
    let first = ServiceBuilder::new()
        .layer(InboxLayer::new(f.store.clone()))
        .service(holding)
        .oneshot(delivery(&json));
    let first = tokio::spawn(first);
    entered.await.unwrap();

    let store = f.store.clone();
    let json2 = json.clone();
    let second = tokio::spawn(async move { apply(&store, &json2).await });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    if second.is_finished() {
        panic!(
            "the second copy must wait on the first's row lock, it ended with {:?}",
            second.await
        );
    }

    release.send(()).unwrap();
    assert!(matches!(first.await.unwrap(), Err(InboxError::Handler(_))));
    let receipt = second.await.unwrap().unwrap();
    assert_eq!(
        receipt.outcome,
        Outcome::Applied,
        "the rolled-back row was not taken as a duplicate"
    );
    assert_eq!(f.view().await.unwrap().applied_events, 1);
}

#[tokio::test]
async fn a_lock_wait_timeout_victim_is_retried_inside_the_budget_and_counted() {
    let f = Fixture::new().await;
    apply(&f.store, &f.event(1, "task.submitted", "PENDING").json())
        .await
        .unwrap();
    // Another transaction holds the task's view row for longer than one lock
    // wait (2 s) but less than the budget (5 s).
    let mut holder = f.pool.begin().await.unwrap();
    sqlx::query("SELECT task_version FROM receiver_task_views WHERE task_id = ? FOR UPDATE")
        .bind(&f.task)
        .fetch_one(&mut *holder)
        .await
        .unwrap();
    let store = f.store.clone();
    let json = f.event(2, "task.cancelled", "CANCELLED").json();
    let applying = tokio::spawn(async move { apply(&store, &json).await });
    tokio::time::sleep(std::time::Duration::from_millis(2600)).await;
    holder.commit().await.unwrap();

    let receipt = applying.await.unwrap().unwrap();
    assert_eq!(receipt.outcome, Outcome::Applied);
    assert_eq!(f.store.stats().lock_wait_retries, 1);
    assert_eq!(f.view().await.unwrap().applied_events, 2);
}

#[tokio::test]
async fn a_deadlock_victim_is_retried_inside_the_budget_and_counted() {
    let f = Fixture::new().await;
    apply(&f.store, &f.event(1, "task.submitted", "PENDING").json())
        .await
        .unwrap();
    sqlx::query("CREATE TABLE ballast (n INT PRIMARY KEY)")
        .execute(&f.pool)
        .await
        .unwrap();
    let next = f.event(2, "task.cancelled", "CANCELLED");

    // A heavier transaction (InnoDB rolls back the lighter one) takes the
    // view row, then waits for the inbox row the apply inserts first.
    let mut rival = f.pool.begin().await.unwrap();
    for n in 0..50 {
        sqlx::query("INSERT INTO ballast VALUES (?)")
            .bind(n)
            .execute(&mut *rival)
            .await
            .unwrap();
    }
    sqlx::query("SELECT task_version FROM receiver_task_views WHERE task_id = ? FOR UPDATE")
        .bind(&f.task)
        .fetch_one(&mut *rival)
        .await
        .unwrap();
    let store = f.store.clone();
    let json = next.json();
    let applying = tokio::spawn(async move { apply(&store, &json).await });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    common::insert_inbox_row(
        &mut rival,
        f.scope.receiver.as_str(),
        f.scope.queue_id.as_str(),
        &next.id,
    )
    .await
    .expect("the rival survives the deadlock");
    rival.rollback().await.unwrap();

    let receipt = applying.await.unwrap().unwrap();
    assert_eq!(receipt.outcome, Outcome::Applied);
    assert_eq!(f.store.stats().deadlock_retries, 1);
    assert_eq!(f.view().await.unwrap().applied_events, 2);
    assert_eq!(f.inbox_applied(&next.id).await, Some(true));
}

/// An inner service whose own statement meets a deadlock each time (the
/// server's own 1213 answer to `SIGNAL`), counting its calls.
fn always_deadlocked(
    calls: Arc<AtomicU32>,
) -> impl Service<Delivery<Applying>, Response = Verdict, Error = OrderError, Future: Send>
       + Clone
       + Send
       + 'static {
    tower::service_fn(move |mut d: Delivery<Applying>| {
        let calls = calls.clone();
        async move {
            calls.fetch_add(1, Ordering::SeqCst);
            sqlx::query("SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213")
                .execute(d.body_mut().connection())
                .await?;
            Ok::<_, OrderError>(d.into_body().applied())
        }
    })
}

/// An embedder's own error around its statements.
#[derive(Debug, thiserror::Error)]
enum OrderError {
    #[error("orders: {0}")]
    Db(#[from] sqlx::Error),
}

/// The inbox's answer kept the deadlock, with the inner service's own
/// error behind it.
fn assert_failed_of_the_deadlock(err: &InboxError) {
    match err {
        InboxError::Database(e) => {
            assert_eq!(e.kind(), result_inbox::db::DbErrorKind::Deadlock, "{err}");
            assert_eq!(e.number(), Some(1213), "{err}");
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

#[tokio::test]
async fn a_deadlock_that_never_clears_is_retried_with_growing_pauses_and_fails_of_the_deadlock() {
    let f = Fixture::new().await;
    let options = result_inbox::inbox::StoreOptions {
        transaction_timeout: std::time::Duration::from_secs(3),
        ..Default::default()
    };
    let store = InboxStore::connect(&f.db.dsn, f.scope.clone(), options)
        .await
        .unwrap();
    let calls = Arc::new(AtomicU32::new(0));
    let svc = ServiceBuilder::new()
        .layer(InboxLayer::new(store.clone()))
        .service(always_deadlocked(calls.clone()));
    let json = f.event(2, "task.cancelled", "CANCELLED").json();
    let err = svc.oneshot(delivery(&json)).await.unwrap_err();
    let calls = calls.load(Ordering::SeqCst);
    // At a fixed 20 ms pause, 3 s held about a hundred runs.
    assert!((3..=15).contains(&calls), "{calls} runs in 3 s");
    // Each run's deadlock is counted, the last one too unless the budget
    // ended during the run itself.
    let counted = store.stats().deadlock_retries;
    assert!(
        (u64::from(calls - 1)..=u64::from(calls)).contains(&counted),
        "{counted} retries counted for {calls} runs"
    );
    assert_failed_of_the_deadlock(&err);
    assert_eq!(f.count("receiver_inbox").await, 0);
}

#[tokio::test]
async fn a_retry_the_budget_cuts_short_fails_of_the_deadlock_that_made_it_not_of_the_time() {
    let f = Fixture::new().await;
    let options = result_inbox::inbox::StoreOptions {
        transaction_timeout: std::time::Duration::from_millis(800),
        ..Default::default()
    };
    let store = InboxStore::connect(&f.db.dsn, f.scope.clone(), options)
        .await
        .unwrap();
    let calls = Arc::new(AtomicU32::new(0));
    // A deadlock, then a run that is still waiting when the budget ends.
    let svc = ServiceBuilder::new()
        .layer(InboxLayer::new(store))
        .service(tower::service_fn({
            let calls = calls.clone();
            move |mut d: Delivery<Applying>| {
                let first = calls.fetch_add(1, Ordering::SeqCst) == 0;
                async move {
                    let statement = if first {
                        "SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213"
                    } else {
                        "SELECT SLEEP(5)"
                    };
                    sqlx::query(statement)
                        .execute(d.body_mut().connection())
                        .await?;
                    Ok::<_, OrderError>(d.into_body().applied())
                }
            }
        }));
    let json = f.event(2, "task.cancelled", "CANCELLED").json();
    let err = svc.oneshot(delivery(&json)).await.unwrap_err();
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_failed_of_the_deadlock(&err);
    assert_eq!(f.count("receiver_inbox").await, 0);
}

#[tokio::test]
async fn a_duplicate_key_of_the_inner_service_s_own_table_is_a_conflict_never_retried() {
    let f = Fixture::new().await;
    for statement in [
        "CREATE TABLE orders (id INT PRIMARY KEY)",
        "INSERT INTO orders VALUES (1)",
    ] {
        sqlx::query(statement).execute(&f.pool).await.unwrap();
    }
    // 1062 as the inbox's own duplicate key is, but on another table.
    let svc = ServiceBuilder::new()
        .layer(InboxLayer::new(f.store.clone()))
        .service(tower::service_fn(|mut d: Delivery<Applying>| async move {
            sqlx::query("INSERT INTO orders VALUES (1)")
                .execute(d.body_mut().connection())
                .await?;
            Ok::<_, OrderError>(d.into_body().applied())
        }));
    let json = f.event(2, "task.cancelled", "CANCELLED").json();
    let err = svc.oneshot(delivery(&json)).await.unwrap_err();
    assert!(
        matches!(&err, InboxError::Database(e) if e.number() == Some(1062)),
        "{err:?}"
    );
    // The key's row is committed: every redelivery meets it again.
    assert_eq!(err.class(), "conflict");
    assert!(!err.is_retryable());
    assert!(err.to_string().contains("duplicate key"), "{err}");
    assert_eq!(f.store.stats().deadlock_retries, 0);
    assert_eq!(f.count("receiver_inbox").await, 0, "rolled back");
}

#[tokio::test]
async fn an_abandoned_transaction_never_reaches_the_next_delivery_on_its_connection() {
    // One connection only: if an abandoned transaction went back to the
    // pool still open, the next delivery would carry it along and commit it.
    let f = Fixture::new().await;
    let store = f.one_connection_store().await;
    let failing = tower::service_fn(|mut d: Delivery<Applying>| async move {
        let (conn, scope, event) = d.body_mut().split();
        task_view::advance(conn, scope, event).await?;
        Err::<Verdict, BoxError>("business rule refused the result".into())
    });
    let abandoned = f.event(2, "task.cancelled", "CANCELLED");
    let err = ServiceBuilder::new()
        .layer(InboxLayer::new(store.clone()))
        .service(failing)
        .oneshot(delivery(&abandoned.json()))
        .await
        .unwrap_err();
    assert!(matches!(err, InboxError::Handler(_)), "{err:?}");

    let other_task = random_hex(16);
    let next = EventSpec::submitted(f.scope.queue_id.as_str(), &other_task);
    assert_eq!(
        apply(&store, &next.json()).await.unwrap().outcome,
        Outcome::Applied
    );
    assert_eq!(f.inbox_applied(&abandoned.id).await, None);
    assert_eq!(f.inbox_applied(&next.id).await, Some(true));
    assert_eq!(f.count("receiver_task_views").await, 1);
}

#[tokio::test]
async fn duplicates_and_view_reads_leave_no_transaction_open_on_the_store_connection() {
    // The store's sessions run with autocommit off. A read or a duplicate
    // that left its transaction open would keep the tables' metadata locks,
    // and the LOCK TABLES below would time out.
    let f = Fixture::new().await;
    let store = f.one_connection_store().await;
    let json = f.event(2, "task.cancelled", "CANCELLED").json();
    assert_eq!(
        apply(&store, &json).await.unwrap().outcome,
        Outcome::Applied
    );
    assert_eq!(
        apply(&store, &json).await.unwrap().outcome,
        Outcome::Duplicate { applied: true }
    );
    let task = result_inbox::ids::TaskId::parse(&f.task).unwrap();
    let view = task_view::load_committed(&store, &task)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(view.applied_events, 1);

    let mut other = f.pool.acquire().await.unwrap();
    sqlx::query("SET SESSION lock_wait_timeout = 1")
        .execute(&mut *other)
        .await
        .unwrap();
    sqlx::query("LOCK TABLES receiver_inbox WRITE, receiver_task_views WRITE")
        .execute(&mut *other)
        .await
        .expect("no session holds the inbox tables");
    sqlx::query("UNLOCK TABLES")
        .execute(&mut *other)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_duplicate_whose_stored_digest_is_damaged_is_an_inconsistency_not_a_verdict() {
    let f = Fixture::new().await;
    let json = f.event(2, "task.cancelled", "CANCELLED").json();
    assert_eq!(
        apply(&f.store, &json).await.unwrap().outcome,
        Outcome::Applied
    );
    sqlx::query("UPDATE receiver_inbox SET event_digest = 'not a digest'")
        .execute(&f.pool)
        .await
        .unwrap();
    match apply(&f.store, &json).await {
        Err(InboxError::Database(e)) => {
            assert_eq!(e.kind(), result_inbox::db::DbErrorKind::Inconsistent)
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(f.view().await.unwrap().applied_events, 1);
}

#[tokio::test]
async fn received_at_is_the_time_of_the_insert_not_of_the_commit() {
    let f = Fixture::new().await;
    let spec = f.event(1, "task.submitted", "PENDING");
    // An inner service that takes 1.5 s between the inbox INSERT and COMMIT.
    let slow = ServiceBuilder::new()
        .layer(InboxLayer::new(f.store.clone()))
        .service(tower::service_fn(|mut d: Delivery<Applying>| async move {
            tokio::time::sleep(std::time::Duration::from_millis(1_500)).await;
            let (conn, scope, event) = d.body_mut().split();
            task_view::advance(conn, scope, event).await?;
            Ok::<_, InboxError>(d.into_body().applied())
        }));
    slow.oneshot(delivery(&spec.json())).await.unwrap();
    let seconds_before_now: f64 = sqlx::query_scalar(
        "SELECT CAST(TIMESTAMPDIFF(MICROSECOND, received_at, UTC_TIMESTAMP(6)) AS DOUBLE) / 1e6 \
         FROM receiver_inbox",
    )
    .fetch_one(&f.pool)
    .await
    .unwrap();
    assert!(
        (1.4..60.0).contains(&seconds_before_now),
        "received_at is {seconds_before_now} s old, not the time of the INSERT"
    );
}

#[tokio::test]
async fn a_content_conflict_names_the_stored_and_the_incoming_digest() {
    let f = Fixture::new().await;
    let first = f.event(1, "task.submitted", "PENDING");
    let other = EventSpec {
        id: first.id.clone(),
        version: 2,
        ..f.event(2, "task.submitted", "PENDING")
    };
    let stored = apply(&f.store, &first.json()).await.unwrap().digest;
    let err = apply(&f.store, &other.json()).await.unwrap_err();
    let incoming = result_inbox::digest::digest(other.json().as_bytes()).unwrap();
    let InboxError::Conflict(Conflict::ContentMismatch {
        stored: s,
        incoming: i,
        ..
    }) = &err
    else {
        panic!("not a content conflict: {err:?}")
    };
    assert_eq!((*s, *i), (stored, incoming));
    let text = err.to_string();
    assert!(text.contains(&format!("stored sha256={stored}")), "{text}");
    assert!(
        text.contains(&format!("incoming sha256={incoming}")),
        "{text}"
    );
}

#[tokio::test]
async fn a_session_read_between_two_deliveries_holds_no_lock_and_sees_the_latest_commit() {
    let f = Fixture::new().await;
    // One connection: the sessions and the deliveries take turns on it.
    let store = f.one_connection_store().await;
    let task = result_inbox::ids::TaskId::parse(&f.task).unwrap();
    let version = |view: Option<task_view::TaskViewRow>| view.map(|v| v.task_version);

    apply(&store, &f.event(1, "task.submitted", "PENDING").json())
        .await
        .unwrap();
    let mut session = store.session().await.unwrap();
    let seen = task_view::load(session.connection(), &f.scope, &task)
        .await
        .unwrap();
    assert_eq!(version(seen), Some(1));
    session.rollback().await.unwrap();

    // A session that locks the view row and is dropped without an end:
    // its connection is closed, so the lock goes with it.
    let mut session = store.session().await.unwrap();
    sqlx::query("SELECT task_version FROM receiver_task_views WHERE task_id = ? FOR UPDATE")
        .bind(&f.task)
        .execute(session.connection())
        .await
        .unwrap();
    drop(session);
    // Another connection can take the row's lock at once (after the
    // server has seen the closed connection go).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let mut probe = f.pool.begin().await.unwrap();
        let locked = sqlx::query(
            "SELECT task_version FROM receiver_task_views WHERE task_id = ? FOR UPDATE NOWAIT",
        )
        .bind(&f.task)
        .execute(&mut *probe)
        .await;
        probe.rollback().await.unwrap();
        if locked.is_ok() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the dropped session's lock was never released"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }

    let started = std::time::Instant::now();
    apply(&store, &f.event(2, "task.succeeded", "SUCCEEDED").json())
        .await
        .unwrap();
    assert!(
        started.elapsed() < std::time::Duration::from_secs(1),
        "the delivery waited for a lock: {:?}",
        started.elapsed()
    );
    let seen = task_view::load_committed(&store, &task).await.unwrap();
    assert_eq!(version(seen), Some(2), "a stale read");
}

#[test]
fn nothing_in_the_inbox_layer_knows_the_task_view() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/inbox");
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            !text.contains("task_view"),
            "{} refers to the task view",
            path.display()
        );
    }
}

/// The server's own count of admin commands (`COM_PING` among them) on the
/// connection of `session`, and that connection's id.
async fn pings_and_id(session: &mut result_inbox::inbox::Session) -> (u64, u64) {
    let (_, pings): (String, String) =
        sqlx::query_as("SHOW SESSION STATUS LIKE 'Com_admin_commands'")
            .fetch_one(session.connection())
            .await
            .unwrap();
    let id: u64 = sqlx::query_scalar("SELECT CONNECTION_ID()")
        .fetch_one(session.connection())
        .await
        .unwrap();
    (pings.parse().unwrap(), id)
}

#[tokio::test]
async fn a_connection_goes_from_one_delivery_to_the_next_without_a_ping() {
    let f = Fixture::new().await;
    let store = f.one_connection_store().await;
    let mut session = store.session().await.unwrap();
    let (pings_before, id_before) = pings_and_id(&mut session).await;
    session.rollback().await.unwrap();

    for version in 1..=20 {
        let json = f.event(version, "task.submitted", "PENDING").json();
        assert_eq!(
            apply(&store, &json).await.unwrap().outcome,
            Outcome::Applied
        );
    }

    let mut session = store.session().await.unwrap();
    let (pings_after, id_after) = pings_and_id(&mut session).await;
    session.rollback().await.unwrap();
    assert_eq!(
        id_after, id_before,
        "the same connection served every apply"
    );
    assert_eq!(
        pings_after, pings_before,
        "a connection whose COMMIT was answered needs no ping before the next apply"
    );
}

#[tokio::test]
async fn transactions_waiting_for_the_only_connection_get_it_in_turn() {
    let f = Fixture::new().await;
    let store = f.one_connection_store().await;
    // Four at once on one connection: three wait for the pool while the
    // first one's connection goes back on the shelf, not into the pool.
    let applies = (0..4).map(|_| {
        let task = random_hex(16);
        let json = EventSpec {
            task_id: &task,
            ..f.event(1, "task.submitted", "PENDING")
        }
        .json();
        let store = store.clone();
        async move { apply(&store, &json).await }
    });
    let started = std::time::Instant::now();
    for answer in futures::future::join_all(applies).await {
        assert_eq!(answer.unwrap().outcome, Outcome::Applied);
    }
    assert!(
        started.elapsed() < store.transaction_timeout(),
        "a waiting transaction sat out the time budget"
    );
}

#[tokio::test]
async fn a_kept_connection_that_the_server_closed_is_replaced_before_the_insert_counts() {
    let f = Fixture::new().await;
    let store = f.one_connection_store().await;
    let json = f.event(1, "task.submitted", "PENDING").json();
    apply(&store, &json).await.unwrap();
    let mut session = store.session().await.unwrap();
    let (_, id) = pings_and_id(&mut session).await;
    session.rollback().await.unwrap();

    sqlx::query(&format!("KILL CONNECTION {id}"))
        .execute(&f.pool)
        .await
        .unwrap();
    let json = f.event(2, "task.succeeded", "SUCCEEDED").json();
    assert_eq!(
        apply(&store, &json).await.unwrap().outcome,
        Outcome::Applied
    );
    assert_eq!(store.stats().connection_retries, 1);
    assert_eq!(f.view().await.unwrap().task_version, 2);
}

#[tokio::test]
async fn a_connection_that_rested_goes_back_through_the_pool_and_its_ping() {
    let f = Fixture::new().await;
    let store = f.one_connection_store().await;
    apply(&store, &f.event(1, "task.submitted", "PENDING").json())
        .await
        .unwrap();
    let mut session = store.session().await.unwrap();
    let (pings_before, id) = pings_and_id(&mut session).await;
    session.rollback().await.unwrap();

    // Longer than a connection rests between transactions (2 s).
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    let mut session = store.session().await.unwrap();
    let (pings_after, id_after) = pings_and_id(&mut session).await;
    session.rollback().await.unwrap();
    assert_eq!(id_after, id, "the pool kept the connection it pinged");
    assert_eq!(pings_after, pings_before + 1);
}
