//! Before anything is leased, `receiver consume` and `receiver demo` check
//! their database (tables, columns, grants) and Orbit (token, scopes,
//! subscription); `receiver check` runs the same checks and reports each.
//! A refusal stops the command with exit 2 and the deliveries untouched; a
//! server that is not up yet is waited for.

use crate::common;

use std::net::TcpListener;
use std::process::Output;
use std::time::Duration;

use common::consume::Consume;
use common::http_proxy::HttpProxy;
use common::orbit::{receiver, OrbitDev, QueueCredentials};
use common::{dsn_for, random_hex, TestDb};
use result_inbox::ids::SubscriptionId;

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// orbit-dev with a queue, a subscription to every event type and one
/// pending delivery on it.
async fn one_pending_delivery(namespace: &str) -> (OrbitDev, QueueCredentials, SubscriptionId) {
    let (orbit, creds, sub) = OrbitDev::subscribed(30_000, 5, namespace).await;
    orbit.inject_new_task(&creds, &sub).await;
    (orbit, creds, sub)
}

/// Runs `receiver consume` to its end (it must end by itself).
fn consume_once(creds: &QueueCredentials, dsn: &str, sub: &SubscriptionId) -> Output {
    receiver()
        .arg("consume")
        .env("ORBIT_CREDENTIALS_FILE", &creds.file)
        .env("ORBIT_SUBSCRIPTION_ID", sub.as_str())
        .env("ORBIT_RECEIVER_DSN", dsn)
        .output()
        .unwrap()
}

/// Every delivery of the subscription is still pending and was never leased.
async fn assert_nothing_leased(orbit: &OrbitDev, creds: &QueueCredentials, sub: &SubscriptionId) {
    let deliveries = orbit.deliveries(creds, sub).await;
    assert!(!deliveries.is_empty());
    for d in deliveries {
        assert_eq!(d["state"], "PENDING", "{d}");
        assert_eq!(d["attempts"], 0, "{d}");
    }
}

/// A DSN of `db` for a new account with exactly `grants`.
async fn user_with(db: &TestDb, grants: &[&str]) -> String {
    let (user, password) = db.user_with(grants).await;
    db.dsn_of(&user, &password)
}

/// Asserts exit 2, one line on stderr containing `expected`, nothing leased.
async fn assert_refused(
    out: &Output,
    expected: &str,
    orbit: &OrbitDev,
    creds: &QueueCredentials,
    sub: &SubscriptionId,
) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(expected), "expected {expected:?} in: {err}");
    assert_eq!(
        err.lines().filter(|l| l.starts_with("receiver: ")).count(),
        1,
        "{err}"
    );
    assert_nothing_leased(orbit, creds, sub).await;
}

#[tokio::test]
async fn consume_refuses_an_empty_database_naming_the_missing_table() {
    let (orbit, creds, sub) = one_pending_delivery("check-empty").await;
    let db = TestDb::empty().await;
    let out = consume_once(&creds, &dsn_for(&db.name), &sub);
    assert_refused(
        &out,
        "table receiver_inbox is missing",
        &orbit,
        &creds,
        &sub,
    )
    .await;
}

#[tokio::test]
async fn consume_refuses_a_table_without_one_of_its_columns() {
    let (orbit, creds, sub) = one_pending_delivery("check-column").await;
    let db = TestDb::initialized().await;
    sqlx::query("ALTER TABLE receiver_task_views DROP COLUMN applied_events")
        .execute(&db.pool().await)
        .await
        .unwrap();
    let out = consume_once(&creds, &dsn_for(&db.name), &sub);
    assert_refused(
        &out,
        "table receiver_task_views lacks the column(s) applied_events of schema.sql",
        &orbit,
        &creds,
        &sub,
    )
    .await;
}

#[tokio::test]
async fn on_postgres_consume_refuses_a_table_without_one_of_its_columns_naming_its_schema_file() {
    let (orbit, creds, sub) = one_pending_delivery("check-pg-column").await;
    let db = common::postgres::PgTestDb::initialized().await;
    db.run_script("ALTER TABLE receiver_task_views DROP COLUMN applied_events")
        .await
        .unwrap();
    let out = consume_once(&creds, &db.dsn, &sub);
    assert_refused(
        &out,
        "table receiver_task_views lacks the column(s) applied_events of schema.postgres.sql",
        &orbit,
        &creds,
        &sub,
    )
    .await;
}

#[tokio::test]
async fn consume_refuses_an_account_that_may_not_update_the_view() {
    let (orbit, creds, sub) = one_pending_delivery("check-grant").await;
    let db = TestDb::initialized().await;
    let dsn = user_with(
        &db,
        &[
            "SELECT, INSERT, UPDATE ON `{db}`.receiver_inbox",
            "SELECT, INSERT ON `{db}`.receiver_task_views",
        ],
    )
    .await;
    let out = consume_once(&creds, &dsn, &sub);
    assert_refused(
        &out,
        "the account may not UPDATE receiver_task_views",
        &orbit,
        &creds,
        &sub,
    )
    .await;
    // The check wrote nothing.
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM receiver_inbox")
        .fetch_one(&db.pool().await)
        .await
        .unwrap();
    assert_eq!(rows, 0);
}

#[tokio::test]
async fn consume_refuses_a_token_without_events_consume_naming_the_scope() {
    let (orbit, creds, sub) = one_pending_delivery("check-scope").await;
    let reader = orbit.bootstrap("check-scope", Some(&["events:read"])).await;
    let db = TestDb::initialized().await;
    let out = consume_once(&reader, &dsn_for(&db.name), &sub);
    assert_refused(
        &out,
        "the token lacks the scope(s) events:consume",
        &orbit,
        &creds,
        &sub,
    )
    .await;
}

#[tokio::test]
async fn consume_refuses_a_subscription_orbit_says_is_of_another_queue() {
    let (orbit, creds, sub) = one_pending_delivery("check-queue-a").await;
    // A token of another queue: Orbit itself refuses with 403 wrong_queue.
    let other = orbit.bootstrap("check-queue-b", None).await;
    let db = TestDb::initialized().await;
    let out = consume_once(&other, &dsn_for(&db.name), &sub);
    assert_refused(
        &out,
        "belongs to another queue than the token's (Orbit answered 403 wrong_queue)",
        &orbit,
        &creds,
        &sub,
    )
    .await;
}

#[tokio::test]
async fn receiver_check_reports_every_check_ok_on_a_ready_setup() {
    let (orbit, creds, sub) = one_pending_delivery("check-all-ok").await;
    let db = TestDb::initialized().await;
    let out = receiver()
        .arg("check")
        .env("ORBIT_CREDENTIALS_FILE", &creds.file)
        .env("ORBIT_SUBSCRIPTION_ID", sub.as_str())
        .env("ORBIT_RECEIVER_DSN", dsn_for(&db.name))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert_eq!(
        stdout(&out),
        "check=database ok\ncheck=schema ok\ncheck=privileges ok\n\
         check=orbit ok\ncheck=token ok\ncheck=scopes ok\ncheck=subscription ok\n"
    );
    assert_nothing_leased(&orbit, &creds, &sub).await;
}

#[tokio::test]
async fn receiver_check_without_a_subscription_runs_every_other_check_and_names_the_variable() {
    let (orbit, creds, sub) = one_pending_delivery("check-no-subscription").await;
    let db = TestDb::initialized().await;
    let out = receiver()
        .arg("check")
        .env("ORBIT_CREDENTIALS_FILE", &creds.file)
        .env_remove("ORBIT_SUBSCRIPTION_ID")
        .env("ORBIT_RECEIVER_DSN", dsn_for(&db.name))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let printed = stdout(&out);
    assert!(
        printed.starts_with(
            "check=database ok\ncheck=schema ok\ncheck=privileges ok\n\
             check=orbit ok\ncheck=token ok\ncheck=scopes ok\n\
             check=subscription FAIL ORBIT_SUBSCRIPTION_ID is not set (or pass --subscription-id)"
        ),
        "{printed}"
    );
    assert_eq!(printed.lines().count(), 7, "{printed}");
    assert_nothing_leased(&orbit, &creds, &sub).await;
}

#[tokio::test]
async fn receiver_check_names_each_failing_check_and_exits_1() {
    let (orbit, creds, sub) = one_pending_delivery("check-fails").await;
    let reader = orbit
        .bootstrap("check-fails", Some(&["events:read", "events:consume"]))
        .await;
    let db = TestDb::empty().await;
    let out = receiver()
        .args(["check", "--demo"])
        .env("ORBIT_CREDENTIALS_FILE", &reader.file)
        .env("ORBIT_RECEIVER_DSN", dsn_for(&db.name))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let lines: Vec<String> = stdout(&out).lines().map(str::to_owned).collect();
    assert_eq!(lines.len(), 6, "{lines:?}");
    assert_eq!(lines[0], "check=database ok");
    assert!(
        lines[1].starts_with("check=schema FAIL table receiver_inbox is missing"),
        "{lines:?}"
    );
    assert_eq!(lines[2], "check=privileges not run (check schema failed)");
    assert_eq!(lines[3], "check=orbit ok");
    assert_eq!(lines[4], "check=token ok");
    assert_eq!(
        lines[5],
        "check=scopes FAIL the token lacks the scope(s) events:manage, tasks:submit, tasks:cancel"
    );
    // The scope checks changed nothing on Orbit: no task was submitted.
    assert_nothing_leased(&orbit, &creds, &sub).await;
    assert_eq!(orbit.deliveries(&creds, &sub).await.len(), 1);
}

#[tokio::test]
async fn receiver_check_says_when_the_database_refuses_the_login_or_does_not_exist() {
    let (_orbit, creds, sub) = one_pending_delivery("check-login").await;
    let db = TestDb::initialized().await;
    let wrong_password =
        user_with(&db, &["SELECT ON `{db}`.*"])
            .await
            .replacen(":pw-", ":not-the-pw-", 1);
    let no_such_database = dsn_for(&format!("no_such_db_{}", random_hex(4)));
    let closed_port = {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        format!("mysql://root@127.0.0.1:{port}/receiver")
    };
    for (dsn, expected) in [
        (wrong_password, "wrong user or password (MySQL error 1045"),
        (no_such_database, "unknown database (MySQL error 1049"),
        (
            closed_port,
            "unreachable: connection failed: connection refused",
        ),
    ] {
        let out = receiver()
            .arg("check")
            .env("ORBIT_CREDENTIALS_FILE", &creds.file)
            .env("ORBIT_SUBSCRIPTION_ID", sub.as_str())
            .env("ORBIT_RECEIVER_DSN", &dsn)
            .output()
            .unwrap();
        let first = stdout(&out).lines().next().unwrap_or("").to_owned();
        assert_eq!(out.status.code(), Some(1), "{dsn}");
        assert!(
            first.starts_with("check=database FAIL ") && first.contains(expected),
            "{dsn}: {first}"
        );
        assert!(
            !stdout(&out).contains("not-the-pw"),
            "a password was printed"
        );
        let printed = stdout(&out);
        let lines: Vec<&str> = printed.lines().collect();
        assert_eq!(
            lines[1..3],
            [
                "check=schema not run (check database failed)",
                "check=privileges not run (check database failed)",
            ],
            "{dsn}"
        );
        assert_eq!(lines[3], "check=orbit ok", "the Orbit checks still run");
    }
}

#[tokio::test]
async fn the_demo_checks_before_it_creates_anything_and_says_nothing_was_created() {
    let orbit = OrbitDev::start(30_000, 5);
    let creds = orbit.bootstrap("check-demo", None).await;
    let db = TestDb::empty().await;
    let out = receiver()
        .arg("demo")
        .env("ORBIT_CREDENTIALS_FILE", &creds.file)
        .env("ORBIT_RECEIVER_DSN", dsn_for(&db.name))
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("table receiver_inbox is missing"), "{err}");
    assert!(err.contains("nothing was created"), "{err}");
    assert!(!err.contains("kept for inspection"), "{err}");
    let subs = orbit.get(&creds, "/v1/subscriptions").await;
    assert_eq!(subs["subscriptions"].as_array().unwrap().len(), 0);
}

#[tokio::test]
async fn consume_waits_for_an_orbit_that_is_not_listening_yet_then_applies_everything() {
    let (orbit, creds, sub) = OrbitDev::subscribed(30_000, 5, "check-late-orbit").await;
    for _ in 0..3 {
        orbit.inject_new_task(&creds, &sub).await;
    }
    let db = TestDb::initialized().await;
    // A port nothing listens on yet: connections are refused.
    let listen = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let late_url = format!("http://{listen}");
    let mut consume = Consume::start(
        &orbit,
        &creds,
        &dsn_for(&db.name),
        &sub,
        "task-result-view",
        &[("ORBIT_URL", &late_url)],
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(consume.running(), "{}", consume.output());
    assert!(
        consume.output().contains("Orbit not reachable yet"),
        "{}",
        consume.output()
    );
    assert_nothing_leased(&orbit, &creds, &sub).await;

    // Orbit appears on that address: no restart needed.
    let _proxy = HttpProxy::start_on(&orbit.url, listen).await;
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(20), |c| c["acked"] == 3)
        .await;
    assert!(consume.terminate().success(), "{}", consume.output());
}

#[tokio::test]
async fn receiver_check_of_the_demo_scopes_submits_and_changes_nothing() {
    let (orbit, creds, sub) = one_pending_delivery("check-demo-scopes").await;
    let db = TestDb::initialized().await;
    let out = receiver()
        .args(["check", "--demo"])
        .env("ORBIT_CREDENTIALS_FILE", &creds.file)
        .env("ORBIT_RECEIVER_DSN", dsn_for(&db.name))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(
        stdout(&out).ends_with("check=scopes ok\n"),
        "{}",
        stdout(&out)
    );
    // A submitted task would have brought a task.submitted delivery, a
    // paused subscription or a cancelled task would show: none did.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(orbit.deliveries(&creds, &sub).await.len(), 1);
    let subs = orbit.get(&creds, "/v1/subscriptions").await;
    assert_eq!(subs["subscriptions"][0]["enabled"], true);
    assert_nothing_leased(&orbit, &creds, &sub).await;
}

#[tokio::test]
async fn a_missing_scope_answer_names_the_scope_the_call_needs() {
    let orbit = OrbitDev::start(30_000, 5);
    let reader = orbit
        .bootstrap("check-missing-scope", Some(&["events:read"]))
        .await;
    let err = orbit
        .client(&reader)
        .create_subscription(&result_inbox::event::EventType::ALL)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("missing_scope"));
    assert_eq!(
        err.to_string(),
        "the token lacks the scope events:manage (Orbit answered 403 missing_scope)"
    );
}

#[tokio::test]
async fn consume_refuses_a_subscription_orbit_does_not_know_naming_the_variable() {
    let orbit = OrbitDev::start(30_000, 5);
    let creds = orbit.bootstrap("check-unknown-sub", None).await;
    let db = TestDb::initialized().await;
    let unknown = SubscriptionId::parse(&random_hex(16)).unwrap();
    let out = consume_once(&creds, &dsn_for(&db.name), &unknown);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "subscription {unknown} does not exist (Orbit answered 404 subscription_not_found); check ORBIT_SUBSCRIPTION_ID"
        )),
        "{err}"
    );
}

#[tokio::test]
async fn receiver_check_of_the_demo_scopes_also_checks_a_subscription_when_given() {
    let (orbit, creds, sub) = one_pending_delivery("check-demo-and-sub").await;
    let db = TestDb::initialized().await;
    let out = receiver()
        .args(["check", "--demo"])
        .env("ORBIT_CREDENTIALS_FILE", &creds.file)
        .env("ORBIT_SUBSCRIPTION_ID", sub.as_str())
        .env("ORBIT_RECEIVER_DSN", dsn_for(&db.name))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(
        stdout(&out).ends_with("check=scopes ok\ncheck=subscription ok\n"),
        "{}",
        stdout(&out)
    );
    assert_nothing_leased(&orbit, &creds, &sub).await;
}
