//! The operator's commands on PostgreSQL, as real processes against a real
//! server: `failures` and `replay` diagnose and bring back what a fault made
//! expire, read with an account that may only `SELECT`.

use crate::common;

use std::process::Output;
use std::time::Duration;

use common::consume::Consume;
use common::orbit::{receiver, OrbitDev, QueueCredentials};
use common::postgres::PgTestDb;
use common::{random_hex, EventSpec};
use result_inbox::ids::SubscriptionId;
use sqlx::{Connection, Executor, PgConnection};

const NAME: &str = "task-result-view";

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A receiver database on PostgreSQL, and the DSN of a role of its own
/// that may only read the two tables.
async fn database_and_reader() -> (PgTestDb, String) {
    let db = PgTestDb::initialized().await;
    let role = format!("reader_{}", random_hex(4));
    db.run_script(&format!(
        "CREATE ROLE {role} LOGIN; \
         GRANT SELECT ON receiver_inbox, receiver_task_views TO {role};"
    ))
    .await
    .unwrap();
    let reader = db.dsn.replacen("://postgres@", &format!("://{role}@"), 1);
    assert_ne!(reader, db.dsn, "the admin DSN names the postgres role");
    (db, reader)
}

fn run(
    orbit: &OrbitDev,
    creds: &QueueCredentials,
    sub: &SubscriptionId,
    dsn: &str,
    args: &[&str],
    admin: bool,
) -> Output {
    let mut command = receiver();
    command
        .args(args)
        .env("ORBIT_CREDENTIALS_FILE", &creds.file)
        .env("ORBIT_SUBSCRIPTION_ID", sub.as_str())
        .env("ORBIT_RECEIVER_DSN", dsn)
        .env("RECEIVER_NAME", NAME)
        .env_remove("ORBIT_ADMIN_TOKEN");
    if admin {
        command.env("ORBIT_ADMIN_TOKEN", orbit.admin_token());
    }
    command.output().unwrap()
}

async fn state(orbit: &OrbitDev, creds: &QueueCredentials, id: &str) -> String {
    orbit.get(creds, &format!("/v1/deliveries/{id}")).await["state"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn wait_for(orbit: &OrbitDev, creds: &QueueCredentials, ids: &[&str], wanted: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
    for id in ids {
        loop {
            let now = state(orbit, creds, id).await;
            if now == wanted {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{id} is {now}, not {wanted}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

#[tokio::test]
async fn on_postgres_failures_diagnoses_what_expired_and_replay_brings_back_what_applies_once() {
    let (orbit, creds, sub) = OrbitDev::subscribed(1_000, 2, "pg-failures").await;
    let (db, reader) = database_and_reader().await;
    let first = EventSpec::submitted(&creds.queue_id, Box::leak(random_hex(16).into_boxed_str()));
    let applied_first = orbit.inject(&sub, &first.json()).await;
    let mut consume = Consume::start(&orbit, &creds, &db.dsn, &sub, NAME, &[]);
    wait_for(&orbit, &creds, &[&applied_first], "ACKED").await;

    // The fault: the inbox table locked past the inbox's 5 s budget.
    let mut holder = PgConnection::connect(&db.dsn).await.unwrap();
    holder
        .execute("BEGIN; LOCK TABLE receiver_inbox IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let task = random_hex(16);
    let fresh = orbit
        .inject(&sub, &EventSpec::submitted(&creds.queue_id, &task).json())
        .await;
    let copy = first.json().replace("16:02:44.5", "16:02:45.5");
    let conflicting = orbit.inject(&sub, &copy).await;
    let garbage = orbit.inject(&sub, "garbage{").await;
    wait_for(&orbit, &creds, &[&fresh, &conflicting, &garbage], "EXPIRED").await;
    assert!(consume.terminate().success(), "{}", consume.output());
    holder.execute("ROLLBACK").await.unwrap();

    let listed = run(&orbit, &creds, &sub, &reader, &["failures"], false);
    let out = text(&listed.stdout);
    assert_eq!(
        listed.status.code(),
        Some(1),
        "{out}{}",
        text(&listed.stderr)
    );
    let line = |id: &str| {
        out.lines()
            .find(|l| l.starts_with(&format!("failure delivery={id} ")))
            .unwrap_or_else(|| panic!("{id} not listed: {out}"))
            .to_owned()
    };
    assert!(
        line(&fresh).contains(&format!(
            "task={task} attempts=2 failed_at=- diagnosis=apply"
        )),
        "{out}"
    );
    assert!(
        line(&conflicting).contains("diagnosis=conflict stored=sha256="),
        "{out}"
    );
    assert!(
        line(&garbage).contains("diagnosis=rejected reason="),
        "{out}"
    );
    assert!(
        common::without_database(&out)
            .ends_with("failures total=3 apply=1 duplicate=0 stale=0 conflict=1 rejected=1\n"),
        "{out}"
    );

    let replay = run(
        &orbit,
        &creds,
        &sub,
        &reader,
        &["replay", "--diagnosis", "apply"],
        true,
    );
    let out = text(&replay.stdout);
    assert_eq!(
        replay.status.code(),
        Some(0),
        "{out}{}",
        text(&replay.stderr)
    );
    assert!(
        common::without_database(&out)
            .ends_with("replay total=1 replayed=1 skipped=0 refused=0 failed=0\n"),
        "{out}"
    );
    let mut consume = Consume::start(&orbit, &creds, &db.dsn, &sub, NAME, &[]);
    wait_for(&orbit, &creds, &[&fresh], "ACKED").await;
    assert!(consume.terminate().success(), "{}", consume.output());
    let views: Vec<(String, i64)> =
        sqlx::query_as("SELECT task_id, applied_events FROM receiver_task_views ORDER BY task_id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    let mut expected = vec![(first.task_id.to_owned(), 1), (task, 1)];
    expected.sort();
    assert_eq!(views, expected);

    let refused = run(&orbit, &creds, &sub, &reader, &["replay", "--all"], true);
    let out = text(&refused.stdout);
    assert_eq!(refused.status.code(), Some(2), "{out}");
    assert!(
        common::without_database(&out)
            .ends_with("replay total=2 replayed=0 skipped=0 refused=2 failed=0\n"),
        "{out}"
    );
}
