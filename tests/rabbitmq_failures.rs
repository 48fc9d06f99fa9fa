//! `receiver failures` and `receiver replay --source rabbitmq` over a real
//! RabbitMQ node and a real `receiver consume`, on MySQL and on
//! PostgreSQL: a fault the operator can fix (the inbox table locked) makes
//! deliveries spend the queue's delivery limit; once it is fixed, the
//! listing reads the dead-letter queue without taking anything from it, a
//! replay brings back what would apply, once, and refuses what would only
//! fail again. A message of no bytes is listed like any other.
#![cfg(feature = "rabbitmq")]

use crate::common::{self, on_both};

use std::process::Output;
use std::time::Duration;

use amqprs::BasicProperties;
use common::consume::Consume;
use common::orbit::receiver;
use common::postgres::PgTestDb;
use common::rabbitmq::{Publisher, RabbitNode, RabbitQueue};
use common::{dsn_for, random_hex, EventSpec, TestDb};
use sqlx::{Connection, Executor, MySql, PgConnection, Postgres};

/// An engine's receiver database, an account on it that may only read,
/// and the fault: its inbox table locked by another session.
trait Faulty {
    type Db: Send + Sync;
    type Lock: Send;
    /// The database, its address and the reader's.
    async fn database() -> (Self::Db, String, String);
    async fn lock(db: &Self::Db) -> Self::Lock;
    async fn release(lock: Self::Lock);
    /// Each task view's (version, applied events), by task.
    async fn views(dsn: &str) -> Vec<(i64, i64)>;
}

impl Faulty for MySql {
    type Db = TestDb;
    type Lock = common::TableLock;

    async fn database() -> (TestDb, String, String) {
        let db = TestDb::initialized().await;
        let (dsn, reader) = (dsn_for(&db.name), db.reader_dsn().await);
        (db, dsn, reader)
    }

    async fn lock(db: &TestDb) -> common::TableLock {
        db.lock_inbox().await
    }

    async fn release(lock: common::TableLock) {
        lock.release().await;
    }

    async fn views(dsn: &str) -> Vec<(i64, i64)> {
        let mut conn = sqlx::MySqlConnection::connect(dsn).await.unwrap();
        sqlx::query_as(
            "SELECT CAST(task_version AS SIGNED), CAST(applied_events AS SIGNED) \
             FROM receiver_task_views ORDER BY task_id",
        )
        .fetch_all(&mut conn)
        .await
        .unwrap()
    }
}

impl Faulty for Postgres {
    type Db = PgTestDb;
    type Lock = PgConnection;

    async fn database() -> (PgTestDb, String, String) {
        let db = PgTestDb::initialized().await;
        let reader = db
            .role_with("GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role};")
            .await;
        let dsn = db.dsn.clone();
        (db, dsn, reader)
    }

    async fn lock(db: &PgTestDb) -> PgConnection {
        let mut conn = PgConnection::connect(&db.dsn).await.unwrap();
        conn.execute("BEGIN; LOCK TABLE receiver_inbox IN EXCLUSIVE MODE")
            .await
            .unwrap();
        conn
    }

    async fn release(mut lock: PgConnection) {
        lock.execute("ROLLBACK").await.unwrap();
    }

    async fn views(dsn: &str) -> Vec<(i64, i64)> {
        let mut conn = PgConnection::connect(dsn).await.unwrap();
        sqlx::query_as(
            "SELECT task_version::int8, applied_events::int8 \
             FROM receiver_task_views ORDER BY task_id",
        )
        .fetch_all(&mut conn)
        .await
        .unwrap()
    }
}

struct Failing<E: Faulty> {
    queue: RabbitQueue,
    db: E::Db,
    dsn: String,
    reader: String,
    dir: std::path::PathBuf,
}

impl<E: Faulty> Failing<E> {
    async fn new() -> Self {
        let queue = RabbitQueue::create(&RabbitNode::shared(), 2).await;
        let (db, dsn, reader) = E::database().await;
        let dir = std::env::temp_dir().join(format!("result-inbox-dead-letters-{}", random_hex(6)));
        std::fs::create_dir_all(&dir).unwrap();
        Failing {
            queue,
            db,
            dsn,
            reader,
            dir,
        }
    }

    fn env(&self, dsn: &str) -> Vec<(String, String)> {
        let mut env = self.queue.env();
        env.push(("ORBIT_RECEIVER_DSN".into(), dsn.to_owned()));
        env
    }

    fn consume(&self) -> Consume {
        Consume::with_env(&self.dir, &self.env(&self.dsn))
    }

    /// `receiver failures`' lines, which exit 1: there is a failure.
    fn listed(&self) -> String {
        let listed = self.run(&["failures"]);
        let out = text(&listed.stdout);
        assert_eq!(
            listed.status.code(),
            Some(1),
            "{out}{}",
            text(&listed.stderr)
        );
        out
    }

    /// `receiver <args>` as the operator runs it: the read-only account.
    fn run(&self, args: &[&str]) -> Output {
        receiver()
            .args(args)
            .envs(self.env(&self.reader))
            .output()
            .unwrap()
    }

    fn event(&self, task: &str) -> String {
        EventSpec::submitted(&self.queue.queue_id, task).json()
    }

    /// Publishes `body` with `message_id`, if any.
    async fn publish(&self, message_id: Option<&str>, body: &str) {
        let mut properties = BasicProperties::default();
        if let Some(id) = message_id {
            properties.with_message_id(id);
        }
        let mut publisher = Publisher::open(&self.queue.url).await;
        publisher
            .publish_as(&self.queue.queue, properties, body)
            .await;
        publisher.close().await;
    }

    async fn dead(&self) -> u32 {
        self.queue.ready(&self.queue.failed()).await
    }

    /// Once the dead-letter queue holds `n`, or a panic with what
    /// `consume` logged after `within`.
    async fn wait_dead(&self, n: u32, within: Duration, consume: &Consume) {
        let deadline = tokio::time::Instant::now() + within;
        while self.dead().await < n {
            assert!(
                tokio::time::Instant::now() < deadline,
                "RabbitMQ gave up on fewer than {n}: {}",
                consume.output()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn views(&self) -> Vec<(i64, i64)> {
        E::views(&self.dsn).await
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

async fn what_the_delivery_limit_gave_up_on_is_listed_without_being_taken_and_replayed_once<
    E: Faulty,
>() {
    let f = Failing::<E>::new().await;
    let first = f.event(&random_hex(16));
    f.publish(Some("first"), &first).await;
    let mut consume = f.consume();
    consume
        .wait_for_output(Duration::from_secs(20), |log| {
            log.contains(" acknowledged ")
        })
        .await;

    let lock = E::lock(&f.db).await;
    let (a, b) = (random_hex(16), random_hex(16));
    f.publish(Some(&a), &f.event(&random_hex(16))).await;
    f.publish(Some(&b), &f.event(&random_hex(16))).await;
    let copy = first.replace("16:02:44.5", "16:02:45.5");
    assert_ne!(copy, first);
    f.publish(Some("conflicting"), &copy).await;
    f.publish(None, "garbage{").await;
    f.wait_dead(4, Duration::from_secs(90), &consume).await;
    assert!(consume.terminate().success(), "{}", consume.output());
    E::release(lock).await;

    let out = f.listed();
    let line = |key: &str| {
        out.lines()
            .find(|l| l.starts_with(&format!("failure message={key} ")))
            .unwrap_or_else(|| panic!("no line of {key}: {out}"))
            .to_owned()
    };
    for (key, diagnosis) in [
        (a.as_str(), "apply"),
        (b.as_str(), "apply"),
        ("conflicting", "conflict"),
    ] {
        let line = line(key);
        assert!(line.contains(&format!(" diagnosis={diagnosis}")), "{line}");
        assert!(
            line.contains(" attempts=3 "),
            "the limit of 2 returns: {line}"
        );
    }
    let garbage = out
        .lines()
        .find(|l| l.contains(" diagnosis=rejected"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(garbage.starts_with("failure message=sha256-"), "{garbage}");
    assert!(
        out.lines()
            .filter(|l| l.starts_with("failure "))
            .all(|l| l.contains(" failed_at=20") && l.contains("Z diagnosis=")),
        "{out}"
    );
    assert!(
        common::without_database(&out)
            .ends_with("failures total=4 apply=2 duplicate=0 stale=0 conflict=1 rejected=1\n"),
        "{out}"
    );
    assert_eq!(f.dead().await, 4, "listing takes nothing away");
    for _ in 0..3 {
        assert_eq!(
            f.listed(),
            out,
            "a listing right after another finds them all"
        );
    }

    let not_a_key = f.run(&["replay", "--delivery", "two words"]);
    assert_eq!(not_a_key.status.code(), Some(2));
    assert!(
        text(&not_a_key.stderr).contains("message id"),
        "{}",
        text(&not_a_key.stderr)
    );

    let replay = f.run(&["replay", "--diagnosis", "apply"]);
    let out = text(&replay.stdout);
    assert_eq!(
        replay.status.code(),
        Some(0),
        "{out}{}",
        text(&replay.stderr)
    );
    for key in [&a, &b] {
        assert!(
            out.contains(&format!(
                "replay message={key} diagnosis=apply result=replayed copies=1 queue={}",
                f.queue.queue
            )),
            "{out}"
        );
    }
    assert_eq!(
        f.dead().await,
        2,
        "each replayed message leaves the dead-letter queue"
    );
    let mut consume = f.consume();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while f.views().await.len() < 3 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{}",
            consume.output()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(consume.terminate().success(), "{}", consume.output());
    let views = f.views().await;
    assert_eq!(views.len(), 3, "{views:?}");
    assert!(views.iter().all(|view| *view == (1, 1)), "{views:?}");
    assert_eq!(f.queue.ready(&f.queue.queue).await, 0);

    let all = f.run(&["replay", "--all"]);
    let out = text(&all.stdout);
    assert_eq!(all.status.code(), Some(2), "{out}");
    assert!(
        common::without_database(&out)
            .ends_with("replay total=2 replayed=0 skipped=0 refused=2 failed=0\n"),
        "{out}"
    );
    let again = f.run(&["replay", "--delivery", &a]);
    assert!(
        text(&again.stdout).contains(&format!("replay message={a} diagnosis=- result=skipped")),
        "{}",
        text(&again.stdout)
    );
    assert_eq!(f.dead().await, 2);
    assert_eq!(f.views().await, views);
}

on_both!(what_the_delivery_limit_gave_up_on_is_listed_without_being_taken_and_replayed_once);

/// A message of no bytes is no event: refused at once, dead-lettered, and
/// listed with the rest, keyed by its body's digest (it has no id).
#[tokio::test(flavor = "multi_thread")]
async fn an_empty_message_given_up_on_is_listed_as_rejected() {
    use sha2::Digest;
    let f = Failing::<MySql>::new().await;
    f.publish(None, "").await;
    let mut consume = f.consume();
    f.wait_dead(1, Duration::from_secs(30), &consume).await;
    assert!(consume.terminate().success(), "{}", consume.output());

    let out = f.listed();
    let empty = format!("sha256-{}", &hex::encode(sha2::Sha256::digest(b""))[..16]);
    assert!(
        out.lines()
            .any(|l| l.starts_with(&format!("failure message={empty} "))
                && l.contains(" diagnosis=rejected")),
        "{out}"
    );
    assert_eq!(f.dead().await, 1, "listing takes nothing away");
}
