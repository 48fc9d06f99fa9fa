//! A COMMIT whose answer never arrives, on PostgreSQL: the inbox reports it
//! as `CommitUnconfirmed`, the consumer does not ACK it, and the redelivery
//! finds out what really happened. The faults come from a proxy that reads
//! PostgreSQL's protocol between the inbox and the throwaway server.

use crate::commit_loss::a_batch_of_three_meets;
use crate::common;

use std::time::Duration;

use bytes::Bytes;
use common::commit_proxy::{CommitProxy, Fault};
use common::orbit::OrbitDev;
use common::postgres::PgTestDb;
use common::{random_hex, EventSpec};
use result_inbox::consumer::{Consumer, ConsumerOptions};
use result_inbox::db::schema::POSTGRES_SCHEMA_SQL;
use result_inbox::db::Dsn;
use result_inbox::delivery::{Delivery, DeliveryId};
use result_inbox::ids::TaskId;
use result_inbox::inbox::{InboxError, InboxStore, Outcome, Receipt, StoreOptions};
use result_inbox::orbit::OrbitSource;
use result_inbox::scope::{InboxScope, ReceiverName};
use result_inbox::task_view::{self, TaskViewRow};
use sqlx::{Connection, Executor, PgConnection, Postgres};
use tokio::time::Instant;
use tower::ServiceExt;

/// One test's database, proxy, scope and event.
struct Fixture {
    db: PgTestDb,
    proxy: CommitProxy,
    scope: InboxScope,
    task: String,
    event_id: String,
}

impl Fixture {
    async fn new(scope: InboxScope) -> Fixture {
        let db = PgTestDb::new().await;
        db.run_script(POSTGRES_SCHEMA_SQL).await.unwrap();
        Fixture {
            db,
            proxy: CommitProxy::postgres().await,
            scope,
            task: random_hex(16),
            event_id: random_hex(16),
        }
    }

    fn event_json(&self) -> String {
        EventSpec {
            id: self.event_id.clone(),
            queue_id: self.scope.queue_id.as_str(),
            task_id: &self.task,
            version: 2,
            event_type: "task.succeeded",
            state: "SUCCEEDED",
            result: Some(r#"{"ok":true}"#),
        }
        .json()
    }

    /// A store whose connections all go through the proxy.
    async fn proxied_store(&self) -> InboxStore<Postgres> {
        let dsn = self.proxy.dsn_for(&self.db.name);
        InboxStore::open(&dsn, self.scope.clone(), StoreOptions::default())
            .await
            .expect("connect through the proxy")
    }

    /// A new store straight to the server, as a restarted receiver would have.
    async fn direct_store(&self) -> InboxStore<Postgres> {
        let dsn = Dsn::parse(&self.db.dsn).unwrap();
        InboxStore::open(&dsn, self.scope.clone(), StoreOptions::default())
            .await
            .unwrap()
    }

    /// Attempt `attempt` of the event's delivery (same delivery id each time).
    fn delivery(&self, attempt: u32) -> Delivery<Bytes> {
        Delivery::new(
            DeliveryId::new(format!("d{}", self.event_id)),
            Bytes::from(self.event_json()),
        )
        .with_attempt(attempt)
    }

    async fn view(&self) -> Option<TaskViewRow> {
        let task = TaskId::parse(&self.task).unwrap();
        task_view::load(&self.db.pool, &self.scope, &task)
            .await
            .unwrap()
    }

    async fn inbox_applied(&self) -> Option<bool> {
        sqlx::query_scalar("SELECT applied = 1 FROM receiver_inbox WHERE event_id = $1")
            .bind(&self.event_id)
            .fetch_optional(&self.db.pool)
            .await
            .unwrap()
    }

    /// The event's inbox rows as a locking read counts them: it waits, for
    /// at most 2 s, for a transaction still open on the server, so it
    /// answers only once an abandoned transaction has really ended. A plain
    /// read would not wait for an uncommitted row, and the insert of an
    /// open transaction holds the key, not a row a read could lock: a
    /// second insert of the same key is what waits for it.
    async fn settled_inbox_rows(&self) -> i64 {
        let mut conn = PgConnection::connect(&self.db.dsn).await.unwrap();
        conn.execute("SET lock_timeout = '2s'").await.unwrap();
        let mut tx = conn.begin().await.unwrap();
        let inserted = sqlx::query(
            "INSERT INTO receiver_inbox (consumer_name, queue_id, event_id, event_digest, \
             event_canonical, applied, received_at) \
             VALUES ($1, $2, $3, repeat('0', 64), '{}', 0, now()) ON CONFLICT DO NOTHING",
        )
        .bind(self.scope.receiver.as_str())
        .bind(self.scope.queue_id.as_str())
        .bind(&self.event_id)
        .execute(&mut *tx)
        .await
        .expect("the abandoned transaction ends within 2 s");
        tx.rollback().await.unwrap();
        1 - inserted.rows_affected() as i64
    }
}

async fn apply(
    store: &InboxStore<Postgres>,
    delivery: Delivery<Bytes>,
) -> Result<Receipt, InboxError> {
    common::receiver(store).oneshot(delivery).await
}

#[tokio::test]
async fn on_postgres_a_lost_commit_answer_is_reported_unconfirmed_and_the_data_is_committed() {
    let f = Fixture::new(common::scope("task-result-view")).await;
    let store = f.proxied_store().await;
    f.proxy.arm(Fault::DropCommitOk);

    let err = apply(&store, f.delivery(1)).await.unwrap_err();
    assert!(matches!(err, InboxError::CommitUnconfirmed), "{err:?}");
    assert!(err.is_retryable());
    assert_eq!(f.proxy.fired(), 1, "the server's answer to COMMIT was lost");

    assert_eq!(f.inbox_applied().await, Some(true));
    assert_eq!(f.view().await.expect("view committed").applied_events, 1);

    let receipt = apply(&f.direct_store().await, f.delivery(2)).await.unwrap();
    assert_eq!(receipt.outcome, Outcome::Duplicate { applied: true });
    let view = f.view().await.unwrap();
    assert_eq!((view.task_version, view.applied_events), (2, 1));
}

#[tokio::test]
async fn on_postgres_a_commit_dropped_before_the_server_saw_it_is_unconfirmed_and_nothing_is_committed(
) {
    let f = Fixture::new(common::scope("task-result-view")).await;
    let store = f.proxied_store().await;
    f.proxy.arm(Fault::DropCommitBeforeServer);

    let err = apply(&store, f.delivery(1)).await.unwrap_err();
    assert!(matches!(err, InboxError::CommitUnconfirmed), "{err:?}");
    assert!(err.is_retryable());
    assert_eq!(f.proxy.fired(), 1, "the COMMIT never reached the server");

    // The server rolled the transaction back when the connection closed.
    assert_eq!(f.settled_inbox_rows().await, 0);
    assert_eq!(f.inbox_applied().await, None);
    assert_eq!(f.view().await, None);

    let receipt = apply(&f.direct_store().await, f.delivery(2)).await.unwrap();
    assert_eq!(receipt.outcome, Outcome::Applied);
    assert_eq!(f.inbox_applied().await, Some(true));
    assert_eq!(f.view().await.unwrap().applied_events, 1);
}

#[tokio::test]
async fn on_postgres_the_consumer_does_not_ack_an_unconfirmed_commit_and_the_redelivery_dedups() {
    let (orbit, creds, sub) = OrbitDev::subscribed(1_500, 5, "pg-commit-loss").await;
    let name = ReceiverName::parse("task-result-view").unwrap();
    let f = Fixture::new(InboxScope::new(name, creds.queue())).await;
    let delivery = orbit.inject(&sub, &f.event_json()).await;

    let store = f.proxied_store().await;
    f.proxy.arm(Fault::DropCommitOk);
    let source = OrbitSource::connect(orbit.client(&creds), sub.clone(), &creds.queue())
        .await
        .unwrap();
    let consumer = Consumer::new(source, ConsumerOptions::default());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(consumer.run(common::receiver(&store), async {
        let _ = stopped.await;
    }));

    let deadline = Instant::now() + Duration::from_secs(10);
    while f.proxy.fired() == 0 {
        assert!(
            Instant::now() < deadline,
            "the first attempt never committed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(f.view().await.expect("view committed").applied_events, 1);

    let path = format!("/v1/deliveries/{delivery}");
    let last = loop {
        let d = orbit.get(&creds, &path).await;
        if d["attempts"] == 1 {
            assert_ne!(
                d["state"], "ACKED",
                "the unconfirmed attempt was ACKed: {d}"
            );
        } else if d["state"] == "ACKED" {
            break d;
        }
        assert!(Instant::now() < deadline, "never ACKed: {d}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(last["attempts"], 2, "{last}");
    assert_eq!(f.view().await.unwrap().applied_events, 1);

    stop.send(()).unwrap();
    let report = running.await.unwrap().unwrap();
    assert_eq!(
        (
            report.received,
            report.succeeded,
            report.failed,
            report.acked
        ),
        (2, 1, 1, 1)
    );
}

#[tokio::test]
async fn on_postgres_a_batch_whose_commit_answer_is_lost_is_unconfirmed_for_every_delivery_and_committed(
) {
    let f = Fixture::new(common::scope("task-result-view")).await;
    let store = f.proxied_store().await;
    let (answers, jsons) = a_batch_of_three_meets(
        store,
        &f.proxy,
        Fault::DropCommitOk,
        f.scope.queue_id.as_str(),
    )
    .await;
    for answer in &answers {
        assert!(
            matches!(answer, Err(InboxError::CommitUnconfirmed)),
            "{answer:?}"
        );
    }
    assert_eq!(
        f.proxy.fired(),
        1,
        "one COMMIT for the three, its answer lost"
    );

    let direct = f.direct_store().await;
    for json in &jsons {
        let receipt = apply(&direct, common::delivery_of(json)).await.unwrap();
        assert_eq!(receipt.outcome, Outcome::Duplicate { applied: true });
    }
}

#[tokio::test]
async fn on_postgres_a_batch_whose_commit_never_reached_the_server_is_unconfirmed_and_applied_on_redelivery(
) {
    let f = Fixture::new(common::scope("task-result-view")).await;
    let store = f.proxied_store().await;
    let (answers, jsons) = a_batch_of_three_meets(
        store,
        &f.proxy,
        Fault::DropCommitBeforeServer,
        f.scope.queue_id.as_str(),
    )
    .await;
    for answer in &answers {
        assert!(
            matches!(answer, Err(InboxError::CommitUnconfirmed)),
            "{answer:?}"
        );
    }
    assert_eq!(f.proxy.fired(), 1);

    let direct = f.direct_store().await;
    for json in &jsons {
        let receipt = apply(&direct, common::delivery_of(json)).await.unwrap();
        assert_eq!(receipt.outcome, Outcome::Applied);
    }
}
