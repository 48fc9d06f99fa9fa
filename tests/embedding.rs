//! The library as a team embeds it: its own inner service and tower stack
//! under the crate's consumer, against a real orbit-dev and database.

use crate::common;

use std::time::Duration;

use common::orbit::{OrbitDev, QueueCredentials};
use common::TestDb;
use metrics_exporter_prometheus::PrometheusBuilder;
use result_inbox::consumer::{Consumer, ConsumerOptions, ConsumerReport};
use result_inbox::delivery::Delivery;
use result_inbox::ids::SubscriptionId;
use result_inbox::inbox::{Applying, InboxLayer, Refusal, Verdict};
use result_inbox::orbit::OrbitSource;
use result_inbox::scope::{InboxScope, ReceiverName};
use result_inbox::task_view;
use tokio_util::sync::CancellationToken;
use tower::{service_fn, ServiceBuilder};

async fn inbox_rows(db: &TestDb) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM receiver_inbox")
        .fetch_one(&db.pool().await)
        .await
        .unwrap()
}

/// Runs the crate's consumer with `service` until the subscription's one
/// delivery has expired; returns its report and Orbit's counts.
async fn consume_until_expired<S>(
    orbit: &OrbitDev,
    creds: &QueueCredentials,
    sub: &SubscriptionId,
    service: S,
) -> (ConsumerReport, serde_json::Value)
where
    S: tower::Service<Delivery<bytes::Bytes>> + Clone + Send + 'static,
    S::Error: Into<result_inbox::BoxError>,
    S::Future: Send,
    S::Response: Send,
{
    let source = OrbitSource::connect(orbit.client(creds), sub.clone(), &creds.queue())
        .await
        .unwrap();
    let consumer = Consumer::new(source, ConsumerOptions::default());
    let stop = CancellationToken::new();
    let running = tokio::spawn(consumer.run(service, stop.clone().cancelled_owned()));
    let counts = orbit
        .wait_for_counts(creds, sub, Duration::from_secs(20), |c| c["expired"] == 1)
        .await;
    stop.cancel();
    (running.await.unwrap().unwrap(), counts)
}

#[tokio::test]
async fn a_refused_delivery_is_never_acked_and_is_counted_as_refused() {
    // The test's own recorder, as an embedding program would install one;
    // this test runs on one thread, where a local recorder sees everything.
    let recorder = PrometheusBuilder::new().build_recorder();
    let metrics = recorder.handle();
    let _recording = metrics::set_default_local_recorder(&recorder);

    let (orbit, creds, sub) = OrbitDev::subscribed(1_000, 1, "embed-refused").await;
    let db = TestDb::initialized().await;
    orbit.inject_new_task(&creds, &sub).await;
    let store = db
        .store(InboxScope::new(ReceiverName::default(), creds.queue()))
        .await;
    let service = ServiceBuilder::new()
        .layer(InboxLayer::new(store))
        .service(service_fn(|_: Delivery<Applying>| async {
            Err::<Verdict, _>(Refusal::new("the customer account is closed"))
        }));
    let (report, _) = consume_until_expired(&orbit, &creds, &sub, service).await;

    assert_eq!((report.acked, report.failed), (0, 1));
    assert_eq!(inbox_rows(&db).await, 0, "a refusal rolls back");
    let text = metrics.render();
    assert!(
        text.contains(r#"receiver_deliveries_total{class="refused"} 1"#),
        "{text}"
    );
}

#[tokio::test]
async fn an_outer_timeout_never_leads_to_an_ack_of_an_uncommitted_delivery() {
    let (orbit, creds, sub) = OrbitDev::subscribed(1_000, 1, "embed-outer-timeout").await;
    let db = TestDb::initialized().await;
    orbit.inject_new_task(&creds, &sub).await;
    let store = db
        .store(InboxScope::new(ReceiverName::default(), creds.queue()))
        .await;
    // The outer limit fires while the inner service is still working in
    // the open transaction: nothing is committed, and nothing is ACKed.
    let service = ServiceBuilder::new()
        .timeout(Duration::from_millis(300))
        .layer(InboxLayer::new(store))
        .service(service_fn(|mut delivery: Delivery<Applying>| async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let (conn, scope, event) = delivery.body_mut().split();
            task_view::advance(conn, scope, event).await?;
            Ok::<_, result_inbox::inbox::InboxError>(delivery.into_body().applied())
        }));
    let (report, counts) = consume_until_expired(&orbit, &creds, &sub, service).await;
    assert_eq!(counts["acked"], 0, "{counts}");
    assert_eq!((report.acked, report.failed), (0, 1));
    assert_eq!(
        inbox_rows(&db).await,
        0,
        "the abandoned transaction rolled back"
    );
}

/// An inner service that keeps its own `orders` table beside the inbox's
/// and opens its own (nested) transaction on the lent connection, as sqlx
/// users do by habit, then refuses the event after a later check.
async fn nested_then_refused(
    mut delivery: Delivery<Applying>,
    commit_nested: bool,
) -> Result<Verdict, result_inbox::BoxError> {
    use sqlx::Connection;
    let applying = delivery.body_mut();
    let task = applying.event().task().id.to_string();
    let mut nested = applying.connection().begin().await?;
    sqlx::query("INSERT INTO orders (task_id) VALUES (?)")
        .bind(task)
        .execute(&mut *nested)
        .await?;
    if commit_nested {
        nested.commit().await?;
    }
    Err(Refusal::new("the order failed a later check").into())
}

async fn orders_table(db: &TestDb) {
    sqlx::query("CREATE TABLE orders (task_id VARCHAR(64) NOT NULL)")
        .execute(&db.pool().await)
        .await
        .unwrap();
}

async fn count(db: &TestDb, table: &str) -> i64 {
    sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {table}"))
        .fetch_one(&db.pool().await)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_nested_transaction_of_the_inner_service_cannot_commit_the_inbox_row() {
    use tower::ServiceExt;
    for batch in [None, Some(4)] {
        for commit_nested in [false, true] {
            let db = TestDb::initialized().await;
            orders_table(&db).await;
            let scope = common::scope(ReceiverName::DEFAULT);
            let store = db.store(scope.clone()).await;
            let queue = scope.queue_id.to_string();
            let event = common::EventSpec::submitted(&queue, &common::random_hex(16)).json();
            let mode = format!("batch {batch:?}, nested commit {commit_nested}");

            let refusing = ServiceBuilder::new()
                .layer(common::sized_layer(&store, batch, 1).0)
                .service(service_fn(move |d| nested_then_refused(d, commit_nested)));
            let refused = refusing.oneshot(common::delivery_of(&event)).await;
            let error = refused.expect_err(&mode);
            assert_eq!(error.class(), "refused", "{mode}: {error}");
            assert_eq!(count(&db, "receiver_inbox").await, 0, "{mode}");
            assert_eq!(count(&db, "orders").await, 0, "{mode}");

            // The redelivery is a first receipt, not a duplicate of a row
            // that a nested BEGIN would have committed.
            let receiving = ServiceBuilder::new()
                .layer(common::sized_layer(&store, batch, 1).0)
                .service(task_view::TaskView::new());
            let receipt = receiving
                .oneshot(common::delivery_of(&event))
                .await
                .expect(&mode);
            assert_eq!(receipt.outcome.class(), "applied", "{mode}");
            assert_eq!(count(&db, "receiver_inbox").await, 1, "{mode}");
        }
    }
}

#[tokio::test]
async fn a_session_s_nested_transaction_is_a_savepoint_of_the_session() {
    use sqlx::Connection;
    let db = TestDb::initialized().await;
    orders_table(&db).await;
    let store = db.store(common::scope(ReceiverName::DEFAULT)).await;
    let mut session = store.session().await.unwrap();
    let mut nested = session.connection().begin().await.unwrap();
    sqlx::query("INSERT INTO orders (task_id) VALUES ('t')")
        .execute(&mut *nested)
        .await
        .unwrap();
    nested.commit().await.unwrap();
    assert_eq!(count(&db, "orders").await, 0, "not committed yet");
    session.rollback().await.unwrap();
    assert_eq!(
        count(&db, "orders").await,
        0,
        "the session's rollback undid it"
    );
}

/// An embedder's own error type around its own statements.
#[derive(Debug, thiserror::Error)]
enum OrderError {
    #[error("orders: {0}")]
    Db(#[from] sqlx::Error),
}

#[tokio::test]
async fn the_inner_service_s_own_statement_fails_redacted_with_its_server_message_in_the_source() {
    use tower::ServiceExt;
    let db = TestDb::initialized().await;
    let scope = common::scope(ReceiverName::DEFAULT);
    let store = db.store(scope.clone()).await;
    let queue = scope.queue_id.to_string();
    let event = common::EventSpec::submitted(&queue, &common::random_hex(16)).json();
    let service = ServiceBuilder::new()
        .layer(InboxLayer::new(store))
        .service(service_fn(|mut delivery: Delivery<Applying>| async move {
            sqlx::query("UPDATE receiver_task_views SET no_such_column = 1")
                .execute(delivery.body_mut().connection())
                .await
                .map_err(OrderError::Db)?;
            Ok::<_, OrderError>(delivery.into_body().applied())
        }));
    let error = service
        .oneshot(common::delivery_of(&event))
        .await
        .expect_err("the statement fails");
    let text = error.to_string();
    assert!(text.contains("MySQL error 1054"), "{text}");
    assert!(!text.contains("no_such_column"), "redacted: {text}");
    assert!(!format!("{error:?}").contains("no_such_column"));
    let chain: Vec<String> = result_inbox::failure::chain(&error)
        .map(|link| link.to_string())
        .collect();
    assert!(
        chain.iter().any(|link| link.contains("no_such_column")),
        "the embedder reads its own statement's error through source(): {chain:?}"
    );
    assert_eq!(count(&db, "receiver_inbox").await, 0);
}

#[tokio::test]
async fn a_consumer_whose_inbox_applies_another_queue_refuses_to_start_and_leases_nothing() {
    let (orbit, creds, sub) = OrbitDev::subscribed(1_000, 1, "embed-other-queue").await;
    let db = TestDb::initialized().await;
    orbit.inject_new_task(&creds, &sub).await;
    let source = OrbitSource::connect(orbit.client(&creds), sub.clone(), &creds.queue())
        .await
        .unwrap();
    assert_eq!(source.queue(), Some(&creds.queue()));
    // The inbox was given another queue than the source.
    let other = common::scope(ReceiverName::DEFAULT);
    let store = db.store(other.clone()).await;
    let service = ServiceBuilder::new()
        .layer(InboxLayer::new(store.clone()))
        .service(task_view::TaskView::new());
    let consumer = Consumer::new(source, ConsumerOptions::default()).with_probe(store);
    let refused = tokio::time::timeout(
        Duration::from_secs(5),
        consumer.run(service, std::future::pending()),
    )
    .await
    .expect("refused at once, before any stream opens")
    .expect_err("the queues differ");
    assert!(refused.is_configuration(), "{refused}");
    let text = refused.to_string();
    assert!(
        text.contains(&creds.queue_id) && text.contains(other.queue_id.as_str()),
        "{text}"
    );
    let counts = orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(1), |_| true)
        .await;
    assert_eq!(counts["leased"], 0, "{counts}");
    assert_eq!(inbox_rows(&db).await, 0);
}

#[tokio::test]
async fn a_mysql_store_given_a_postgres_address_names_what_opens_a_postgres_store() {
    let dsn: result_inbox::db::Dsn = "postgres://receiver@127.0.0.1:1/inbox".parse().unwrap();
    let scope = common::scope("task-result-view");
    let e = result_inbox::inbox::InboxStore::connect(&dsn, scope, Default::default())
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("open it with InboxStore::<sqlx::Postgres>::open"),
        "{e}"
    );
}

#[cfg(feature = "testing")]
#[tokio::test]
async fn a_mysql_test_database_given_a_postgres_address_names_what_creates_a_postgres_one() {
    let dsn: result_inbox::db::Dsn = "postgres://postgres@127.0.0.1:1/postgres".parse().unwrap();
    let e = result_inbox::testing::TestDatabase::create(&dsn)
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("TestDatabase::<sqlx::Postgres>::create_on"),
        "{e}"
    );
}
