//! The examples in `examples/` run, against the test server (and a real
//! orbit-dev for the consumer), and do what their docs say.

use crate::common;

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use common::orbit::{bin_dir, OrbitDev};
use common::{dsn_for, TestDb};

fn example(name: &str) -> Command {
    let path: PathBuf = bin_dir().join("examples").join(name);
    assert!(
        path.exists(),
        "{} is missing: `cargo test` builds the examples",
        path.display()
    );
    Command::new(path)
}

fn stdout(out: &Output) -> String {
    // (Only for the examples that end by themselves.)
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn own_table_writes_its_row_in_the_inbox_transaction_once() {
    let db = TestDb::initialized().await;
    let out = example("own_table")
        .env("ORBIT_RECEIVER_DSN", dsn_for(&db.name))
        .output()
        .unwrap();
    let text = stdout(&out);
    assert!(
        text.contains("attempt 1: applied\nattempt 2: duplicate\n"),
        "{text}"
    );
    assert!(text.contains(" status=SUCCEEDED"), "{text}");
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM example_orders")
        .fetch_one(&db.pool().await)
        .await
        .unwrap();
    assert_eq!(rows, 1);
}

#[tokio::test]
async fn own_table_postgres_writes_its_row_in_the_inbox_transaction_once() {
    let db = common::postgres::PgTestDb::initialized().await;
    let out = example("own_table_postgres")
        .env("ORBIT_RECEIVER_DSN", &db.dsn)
        .output()
        .unwrap();
    let text = stdout(&out);
    assert!(
        text.contains("attempt 1: applied\nattempt 2: duplicate\n"),
        "{text}"
    );
    assert!(text.contains(" status=SUCCEEDED"), "{text}");
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM example_orders")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(rows, 1);
}

#[tokio::test]
async fn tower_stack_applies_eight_copies_once() {
    let db = TestDb::initialized().await;
    let out = example("tower_stack")
        .env("ORBIT_RECEIVER_DSN", dsn_for(&db.name))
        .output()
        .unwrap();
    assert_eq!(stdout(&out), "copies=8 applied=1 duplicates=7\n");
}

#[tokio::test]
async fn custom_consumer_consumes_and_acks_what_it_committed() {
    let (orbit, creds, sub) = OrbitDev::subscribed(30_000, 5, "example-consumer").await;
    let db = TestDb::initialized().await;
    orbit.inject_new_task(&creds, &sub).await;
    orbit.inject_new_task(&creds, &sub).await;
    let log = std::env::temp_dir().join(format!("example-consumer-{}", common::random_hex(4)));
    let mut run = example("custom_consumer")
        .env("ORBIT_CREDENTIALS_FILE", &creds.file)
        .env("ORBIT_SUBSCRIPTION_ID", sub.as_str())
        .env("ORBIT_RECEIVER_DSN", dsn_for(&db.name))
        .env_remove("ORBIT_URL")
        .env_remove("ORBIT_TOKEN")
        .env_remove("ORBIT_QUEUE_ID")
        .stdout(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let counts = orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(20), |c| c["acked"] == 2)
        .await;
    // Ctrl-C, as its docs say.
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    unsafe {
        libc::kill(run.id() as libc::pid_t, libc::SIGINT);
    }
    assert!(run.wait().unwrap().success());
    let text = std::fs::read_to_string(&log).unwrap();
    let _ = std::fs::remove_file(&log);
    assert_eq!(text.matches("advanced=true").count(), 2, "{text}");
    assert!(text.ends_with("received=2 acked=2 failed=0\n"), "{text}");
    assert_eq!(counts["pending"], 0, "{counts}");
}

#[cfg(feature = "testing")]
#[tokio::test]
async fn testing_inner_service_checks_each_outcome_on_a_database_of_its_own() {
    let out = example("testing_inner_service")
        .env("RESULT_INBOX_TEST_ADMIN_DSN", common::admin_dsn())
        .output()
        .unwrap();
    let text = stdout(&out);
    assert_eq!(
        text,
        "version 2: applied\nits copy: duplicate\nversion 1 after it: stale\n\
         a task that needs review: refused\norders=1\n"
    );
}

#[cfg(feature = "testing")]
#[tokio::test]
async fn testing_inner_service_postgres_checks_each_outcome_on_a_database_of_its_own() {
    let out = example("testing_inner_service_postgres")
        .env(
            "RESULT_INBOX_TEST_PG_ADMIN_DSN",
            common::postgres::admin_dsn(),
        )
        .output()
        .unwrap();
    let text = stdout(&out);
    assert_eq!(
        text,
        "version 2: applied\nits copy: duplicate\nversion 1 after it: stale\n\
         a task that needs review: refused\norders=1\n"
    );
}

#[tokio::test]
async fn outbox_webhook_sends_its_effect_signed_after_the_commit() {
    let db = TestDb::empty().await;
    common::init_outbox(&db.dsn).await;
    let endpoint = common::webhook::Endpoint::start();
    let secret_file =
        std::env::temp_dir().join(format!("example-secret-{}", common::random_hex(8)));
    std::fs::write(&secret_file, &endpoint.secret).unwrap();
    let out = example("outbox_webhook")
        .env("ORBIT_RECEIVER_DSN", dsn_for(&db.name))
        .env("WEBHOOK_URL", endpoint.url("/orders"))
        .env("WEBHOOK_SECRET_FILE", &secret_file)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&secret_file);
    let text = stdout(&out);
    assert!(text.contains("delivery: applied\n"), "{text}");
    let id = text
        .lines()
        .find_map(|l| l.strip_prefix("sent effect="))
        .unwrap_or_else(|| panic!("{text}"));
    let requests = endpoint.seen().await.requests;
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert_eq!(requests[0].id, id);
    assert!(requests[0].verified, "{}", requests[0].verify_error);
}
