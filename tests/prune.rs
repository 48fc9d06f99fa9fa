//! `receiver prune` as an operator runs it, against a real server: what it
//! deletes and keeps, its floor, its account, its archive, its stop, two
//! of it at once, and what `verify` and `stats` say afterwards.

use crate::common;

use std::collections::BTreeMap;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::orbit::receiver;
use common::postgres::PgTestDb;
use common::{random_hex, scope, EventSpec, TestDb};
use result_inbox::db::schema::POSTGRES_RETENTION_SQL;
use result_inbox::db::{Dsn, Engine};
use result_inbox::inbox::{InboxStore, Outcome, StoreOptions};
use result_inbox::scope::InboxScope;
use sqlx::Postgres;
use tower::ServiceExt;

/// A result that must reach the archive unchanged: escapes, non-ASCII and
/// a big integer the server's JSON type would turn into a double.
const RESULT: &str =
    r#"{"note":"line\nbreak \"quoted\" é ✓","big":123456789012345678901234567890}"#;

const PRUNE_GRANTS: [&str; 3] = [
    "SELECT, DELETE ON `{db}`.receiver_inbox",
    "SELECT ON `{db}`.receiver_task_views",
    "SELECT, INSERT, UPDATE ON `{db}`.receiver_pruned",
];

/// The runtime account where retention is set up, as docs/operations.md
/// and docs/postgres.md grant it: the two tables, and `SELECT` on the tally
/// for `verify`.
const RUNTIME_GRANTS: [&str; 3] = [
    "SELECT, INSERT, UPDATE ON `{db}`.receiver_inbox",
    "SELECT, INSERT, UPDATE ON `{db}`.receiver_task_views",
    "SELECT ON `{db}`.receiver_pruned",
];

/// The same grants on PostgreSQL, `{role}` standing for the role.
const PG_PRUNE_GRANTS: &str = "GRANT SELECT, DELETE ON receiver_inbox TO {role}; \
     GRANT SELECT ON receiver_task_views TO {role}; \
     GRANT SELECT, INSERT, UPDATE ON receiver_pruned TO {role};";

const PG_RUNTIME_GRANTS: &str =
    "GRANT SELECT, INSERT, UPDATE ON receiver_inbox, receiver_task_views TO {role}; \
     GRANT SELECT ON receiver_pruned TO {role};";

/// The runtime role's grants on the two tables alone, as docs/postgres.md
/// gave them.
const PG_RUNTIME_TABLE_GRANTS: &str =
    "GRANT SELECT, INSERT, UPDATE ON receiver_inbox, receiver_task_views TO {role};";

/// A receiver's tables with `tasks` tasks of three versions each, all
/// received 30 days ago, one task received just now, and an old task of
/// another queue under the same name.
struct Aged {
    server: Server,
    scope: InboxScope,
    other: InboxScope,
    /// Per old task, its three event ids, oldest first.
    events: Vec<[String; 3]>,
    prune_dsn: String,
}

/// The server an [`Aged`] database is on.
enum Server {
    MySql(Box<TestDb>),
    Postgres(PgTestDb),
}

impl Aged {
    /// On a database initialized with prune's tally, and a prune account
    /// with every grant prune needs.
    async fn new(tasks: usize) -> Aged {
        Aged::on(
            TestDb::initialized_with_retention().await,
            tasks,
            &PRUNE_GRANTS,
        )
        .await
    }

    /// On `db`, and a prune account with `grants`.
    async fn on(db: TestDb, tasks: usize, grants: &[&str]) -> Aged {
        let scope = scope("task-result-view");
        let other = InboxScope::new(scope.receiver.clone(), common::scope("x").queue_id);
        let (store, other_store) = (db.store(scope.clone()).await, db.store(other.clone()).await);
        let events = old_tasks(tasks, (&store, &scope), (&other_store, &other)).await;
        sqlx::query("UPDATE receiver_inbox SET received_at = received_at - INTERVAL 30 DAY")
            .execute(&db.pool().await)
            .await
            .unwrap();
        three_versions(&store, &scope).await;
        let (user, password) = db.user_with(grants).await;
        let prune_dsn = db.dsn_of(&user, &password);
        Aged {
            server: Server::MySql(Box::new(db)),
            scope,
            other,
            events,
            prune_dsn,
        }
    }

    /// The same on PostgreSQL, with prune's tally and a prune role.
    async fn on_postgres(tasks: usize) -> Aged {
        let db = PgTestDb::initialized().await;
        db.run_script(POSTGRES_RETENTION_SQL).await.unwrap();
        let scope = scope("task-result-view");
        let other = InboxScope::new(scope.receiver.clone(), common::scope("x").queue_id);
        let (store, other_store) = (pg_store(&db, &scope).await, pg_store(&db, &other).await);
        let events = old_tasks(tasks, (&store, &scope), (&other_store, &other)).await;
        sqlx::query("UPDATE receiver_inbox SET received_at = received_at - interval '30 days'")
            .execute(&db.pool)
            .await
            .unwrap();
        three_versions(&store, &scope).await;
        let prune_dsn = db.role_with(PG_PRUNE_GRANTS).await;
        Aged {
            server: Server::Postgres(db),
            scope,
            other,
            events,
            prune_dsn,
        }
    }

    /// The MySQL database, for a test that runs only there.
    fn db(&self) -> &TestDb {
        match &self.server {
            Server::MySql(db) => db,
            Server::Postgres(_) => panic!("this test runs on MySQL"),
        }
    }

    /// The administrator's DSN.
    fn admin_dsn(&self) -> String {
        match &self.server {
            Server::MySql(db) => common::dsn_for(&db.name),
            Server::Postgres(db) => db.dsn.clone(),
        }
    }

    /// An account with the runtime's grants: its DSN, and its password
    /// where it has one.
    async fn runtime_account(&self) -> (String, Option<String>) {
        match &self.server {
            Server::MySql(db) => {
                let (user, password) = db.user_with(&RUNTIME_GRANTS).await;
                (db.dsn_of(&user, &password), Some(password))
            }
            Server::Postgres(db) => (db.role_with(PG_RUNTIME_GRANTS).await, None),
        }
    }

    fn prune(&self, args: &[&str]) -> Output {
        self.prune_command(args).output().unwrap()
    }

    fn prune_command(&self, args: &[&str]) -> Command {
        let mut command = receiver();
        command
            .arg("prune")
            .args(args)
            .env("RECEIVER_PRUNE_DSN", &self.prune_dsn)
            .env("ORBIT_QUEUE_ID", self.scope.queue_id.as_str())
            .env_remove("RECEIVER_PRUNE_MIN_RETENTION");
        command
    }

    async fn rows_of(&self, scope: &InboxScope) -> i64 {
        let (receiver, queue) = (scope.receiver.as_str(), scope.queue_id.as_str());
        match &self.server {
            Server::MySql(db) => sqlx::query_scalar(
                "SELECT COUNT(*) FROM receiver_inbox WHERE consumer_name = ? AND queue_id = ?",
            )
            .bind(receiver)
            .bind(queue)
            .fetch_one(&db.pool().await)
            .await
            .unwrap(),
            Server::Postgres(db) => sqlx::query_scalar(
                "SELECT count(*) FROM receiver_inbox WHERE consumer_name = $1 AND queue_id = $2",
            )
            .bind(receiver)
            .bind(queue)
            .fetch_one(&db.pool)
            .await
            .unwrap(),
        }
    }

    async fn event_ids(&self) -> Vec<String> {
        self.all_rows().await.into_keys().collect()
    }

    /// Every row of the scope, every column, as text, by event id.
    async fn all_rows(&self) -> BTreeMap<String, serde_json::Value> {
        let (receiver, queue) = (self.scope.receiver.as_str(), self.scope.queue_id.as_str());
        let rows: Vec<(String, String, String, String, String, i16, String)> = match &self.server {
            Server::MySql(db) => sqlx::query_as(
                "SELECT CAST(consumer_name AS CHAR), CAST(queue_id AS CHAR), \
                 CAST(event_id AS CHAR), CAST(event_digest AS CHAR), \
                 CAST(event_canonical AS CHAR), applied, CAST(received_at AS CHAR) \
                 FROM receiver_inbox WHERE consumer_name = ? AND queue_id = ?",
            )
            .bind(receiver)
            .bind(queue)
            .fetch_all(&db.pool().await)
            .await
            .unwrap(),
            Server::Postgres(db) => sqlx::query_as(
                "SELECT consumer_name, queue_id, event_id, event_digest, event_canonical, \
                 applied, to_char(received_at, 'YYYY-MM-DD HH24:MI:SS.US') \
                 FROM receiver_inbox WHERE consumer_name = $1 AND queue_id = $2",
            )
            .bind(receiver)
            .bind(queue)
            .fetch_all(&db.pool)
            .await
            .unwrap(),
        };
        rows.into_iter()
            .map(|(c, q, e, d, t, a, r)| {
                let row = serde_json::json!({
                    "consumer_name": c, "queue_id": q, "event_id": e, "event_digest": d,
                    "event_canonical": t, "applied": a, "received_at": r,
                });
                (e, row)
            })
            .collect()
    }

    async fn tally(&self) -> (u64, u64) {
        let (events, applied): (i64, i64) = match &self.server {
            Server::MySql(db) => sqlx::query_as(
                "SELECT CAST(COALESCE(SUM(pruned_events), 0) AS SIGNED), \
                 CAST(COALESCE(SUM(pruned_applied), 0) AS SIGNED) FROM receiver_pruned",
            )
            .fetch_one(&db.pool().await)
            .await
            .unwrap(),
            Server::Postgres(db) => sqlx::query_as(
                "SELECT coalesce(sum(pruned_events), 0)::bigint, \
                 coalesce(sum(pruned_applied), 0)::bigint FROM receiver_pruned",
            )
            .fetch_one(&db.pool)
            .await
            .unwrap(),
        };
        (events as u64, applied as u64)
    }

    fn verify(&self) -> (Option<i32>, String) {
        verify_as(&self.admin_dsn())
    }

    /// Delivers `json` once more, as a source would after the prune.
    async fn deliver(&self, json: &str) -> Outcome {
        match &self.server {
            Server::MySql(db) => apply(&db.store(self.scope.clone()).await, json).await,
            Server::Postgres(db) => apply(&pg_store(db, &self.scope).await, json).await,
        }
    }
}

/// `receiver verify` as the account of `dsn`: its exit code and stdout.
fn verify_as(dsn: &str) -> (Option<i32>, String) {
    let o = receiver()
        .arg("verify")
        .env("ORBIT_RECEIVER_DSN", dsn)
        .output()
        .unwrap();
    (o.status.code(), stdout(&o))
}

async fn pg_store(db: &PgTestDb, scope: &InboxScope) -> InboxStore<Postgres> {
    let dsn = Dsn::parse(&db.dsn).unwrap();
    InboxStore::open(&dsn, scope.clone(), StoreOptions::default())
        .await
        .unwrap()
}

/// `tasks` tasks of three versions in `scope`, and one in `other`.
async fn old_tasks<E: Engine>(
    tasks: usize,
    (store, scope): (&InboxStore<E>, &InboxScope),
    (other_store, other): (&InboxStore<E>, &InboxScope),
) -> Vec<[String; 3]> {
    let mut events = Vec::new();
    for _ in 0..tasks {
        events.push(three_versions(store, scope).await);
    }
    three_versions(other_store, other).await;
    events
}

async fn apply<E: Engine>(store: &InboxStore<E>, json: &str) -> Outcome {
    common::receiver(store)
        .oneshot(common::delivery_of(json))
        .await
        .unwrap()
        .outcome
}

/// Applies versions 1, 2 and 3 of a new task; returns their event ids.
async fn three_versions<E: Engine>(store: &InboxStore<E>, scope: &InboxScope) -> [String; 3] {
    let task = random_hex(16);
    let queue = scope.queue_id.as_str();
    let v1 = EventSpec::submitted(queue, &task);
    let v2 = EventSpec {
        id: random_hex(16),
        version: 2,
        event_type: "task.needs_review",
        state: "NEEDS_REVIEW",
        result: Some(RESULT),
        ..EventSpec::submitted(queue, &task)
    };
    let v3 = EventSpec {
        id: random_hex(16),
        version: 3,
        event_type: "task.succeeded",
        state: "SUCCEEDED",
        result: Some(RESULT),
        ..EventSpec::submitted(queue, &task)
    };
    for event in [&v1, &v2, &v3] {
        assert_eq!(apply(store, &event.json()).await, Outcome::Applied);
    }
    [v1.id, v2.id, v3.id]
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The value of `key=` in a `key=value` line.
fn field<'a>(line: &'a str, key: &str) -> &'a str {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
}

#[tokio::test]
async fn prune_deletes_the_rows_past_the_window_of_its_scope_and_keeps_each_views_last_event() {
    prune_deletes_the_rows_past_the_window_of_its_scope_and_keeps_each_views_last_event_on(
        Aged::new(5).await,
    )
    .await;
}

#[tokio::test]
async fn on_postgres_prune_deletes_the_rows_past_the_window_of_its_scope_and_keeps_each_views_last_event(
) {
    prune_deletes_the_rows_past_the_window_of_its_scope_and_keeps_each_views_last_event_on(
        Aged::on_postgres(5).await,
    )
    .await;
}

async fn prune_deletes_the_rows_past_the_window_of_its_scope_and_keeps_each_views_last_event_on(
    aged: Aged,
) {
    let o = aged.prune(&["--older-than", "7d"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let line = stdout(&o);
    assert!(line.starts_with("prune "), "{line}");
    assert_eq!(stderr(&o), "", "stderr is a pipe: no progress bar, nothing");
    assert_eq!(field(&line, "deleted"), "10");
    assert_eq!(field(&line, "kept_latest"), "5");
    assert_eq!(field(&line, "stopped"), "false");
    assert!(field(&line, "deleted_bytes").parse::<u64>().unwrap() > 10 * 100);

    let left = aged.event_ids().await;
    for [v1, v2, v3] in &aged.events {
        assert!(
            !left.contains(v1) && !left.contains(v2),
            "an old version survived"
        );
        assert!(left.contains(v3), "a view's last event was deleted");
    }
    // 5 last events, and the task received just now (all three versions).
    assert_eq!(left.len(), 5 + 3);
    assert_eq!(
        aged.rows_of(&aged.other).await,
        3,
        "another queue's rows were touched"
    );
    assert_eq!(aged.tally().await, (10, 10));
}

#[tokio::test]
async fn verify_still_passes_after_a_prune_and_counts_the_pruned_rows() {
    verify_still_passes_after_a_prune_and_counts_the_pruned_rows_on(Aged::new(4).await).await;
}

#[tokio::test]
async fn on_postgres_verify_still_passes_after_a_prune_and_counts_the_pruned_rows() {
    verify_still_passes_after_a_prune_and_counts_the_pruned_rows_on(Aged::on_postgres(4).await)
        .await;
}

async fn verify_still_passes_after_a_prune_and_counts_the_pruned_rows_on(aged: Aged) {
    assert!(aged.prune(&["--older-than", "7d"]).status.success());
    let (code, out) = aged.verify();
    assert_eq!(code, Some(0), "{out}");
    let summary = out.lines().last().unwrap();
    assert_eq!(field(summary, "pruned_rows"), "8");
    assert_eq!(field(summary, "problems"), "0");
}

#[tokio::test]
async fn verify_as_the_runtime_account_passes_after_a_prune() {
    verify_as_the_runtime_account_passes_after_a_prune_on(Aged::new(3).await).await;
}

#[tokio::test]
async fn on_postgres_verify_as_the_runtime_role_passes_after_a_prune() {
    verify_as_the_runtime_account_passes_after_a_prune_on(Aged::on_postgres(3).await).await;
}

async fn verify_as_the_runtime_account_passes_after_a_prune_on(aged: Aged) {
    assert!(aged.prune(&["--older-than", "7d"]).status.success());
    let (runtime, _) = aged.runtime_account().await;
    let (code, out) = verify_as(&runtime);
    assert_eq!(code, Some(0), "{out}");
    let summary = out.lines().last().unwrap();
    assert_eq!(field(summary, "pruned_rows"), "6");
    assert_eq!(field(summary, "problems"), "0");
}

/// `receiver check` as the account of `dsn`, against a real Orbit.
async fn check_as(dsn: &str) -> Output {
    let (_orbit, creds, sub) = common::orbit::OrbitDev::subscribed(30_000, 5, "tally").await;
    receiver()
        .arg("check")
        .env("ORBIT_CREDENTIALS_FILE", &creds.file)
        .env("ORBIT_SUBSCRIPTION_ID", sub.as_str())
        .env("ORBIT_RECEIVER_DSN", dsn)
        .output()
        .unwrap()
}

#[tokio::test]
async fn on_postgres_check_warns_a_runtime_role_that_may_not_read_the_tally_naming_the_grant() {
    let aged = Aged::on_postgres(1).await;
    let Server::Postgres(db) = &aged.server else {
        unreachable!()
    };
    let without = db.role_with(PG_RUNTIME_TABLE_GRANTS).await;
    let o = check_as(&without).await;
    // A warning: consume needs nothing of the tally.
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("warning: the account may not SELECT receiver_pruned")
            && err.contains("grant it SELECT on receiver_pruned"),
        "{err}"
    );

    let (with, _) = aged.runtime_account().await;
    let o = check_as(&with).await;
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert!(!stderr(&o).contains("receiver_pruned"), "{}", stderr(&o));
}

#[tokio::test]
async fn on_postgres_consume_warns_at_start_a_runtime_role_that_may_not_read_the_tally() {
    let aged = Aged::on_postgres(1).await;
    let Server::Postgres(db) = &aged.server else {
        unreachable!()
    };
    let without = db.role_with(PG_RUNTIME_TABLE_GRANTS).await;
    let (orbit, creds, sub) = common::orbit::OrbitDev::subscribed(30_000, 5, "tally-c").await;
    let mut consume =
        common::consume::Consume::start(&orbit, &creds, &without, &sub, "task-result-view", &[]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let out = loop {
        let out = consume.output();
        if out.contains("delivery stream open") || std::time::Instant::now() > deadline {
            break out;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert!(consume.terminate().success(), "{out}");
    assert!(
        out.contains("the account may not SELECT receiver_pruned")
            && out.contains("grant it SELECT on receiver_pruned"),
        "{out}"
    );
}

#[tokio::test]
async fn check_warns_a_mysql_account_that_sees_the_tally_but_may_not_read_it() {
    let aged = Aged::new(1).await;
    // MySQL shows the table only to an account with a grant on it.
    let (user, password) = aged
        .db()
        .user_with(&[
            RUNTIME_GRANTS[0],
            RUNTIME_GRANTS[1],
            "INSERT ON `{db}`.receiver_pruned",
        ])
        .await;
    let o = check_as(&aged.db().dsn_of(&user, &password)).await;
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stderr(&o).contains("grant it SELECT on receiver_pruned"),
        "{}",
        stderr(&o)
    );
}

#[tokio::test]
async fn check_says_nothing_of_the_tally_to_the_documented_runtime_account_or_where_it_is_absent() {
    let aged = Aged::new(1).await;
    let (runtime, _) = aged.runtime_account().await;
    let o = check_as(&runtime).await;
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert!(!stderr(&o).contains("receiver_pruned"), "{}", stderr(&o));

    // A PostgreSQL database initialized without retention: nothing to read.
    let db = PgTestDb::initialized().await;
    let role = db.role_with(PG_RUNTIME_TABLE_GRANTS).await;
    let o = check_as(&role).await;
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert!(!stderr(&o).contains("receiver_pruned"), "{}", stderr(&o));
}

#[tokio::test]
async fn a_pruned_events_copy_is_stale_and_a_kept_last_events_copy_a_duplicate() {
    pruned_copies_on(Aged::new(2).await).await;
}

#[tokio::test]
async fn on_postgres_a_pruned_events_copy_is_stale_and_a_kept_last_events_copy_a_duplicate() {
    pruned_copies_on(Aged::on_postgres(2).await).await;
}

async fn pruned_copies_on(aged: Aged) {
    let before = aged.all_rows().await;
    assert!(aged.prune(&["--older-than", "7d"]).status.success());
    let [v1, v2, v3] = &aged.events[0];
    let copy = |id: &str| before[id]["event_canonical"].as_str().unwrap().to_owned();
    for pruned in [v1, v2] {
        assert_eq!(aged.deliver(&copy(pruned)).await, Outcome::Stale);
    }
    assert_eq!(
        aged.deliver(&copy(v3)).await,
        Outcome::Duplicate { applied: true }
    );
    assert_eq!(aged.verify().0, Some(0));
}

#[tokio::test]
async fn verify_without_the_tally_grant_reports_pruned_tasks_and_names_the_grant() {
    let aged = Aged::new(2).await;
    assert!(aged.prune(&["--older-than", "7d"]).status.success());
    let (user, password) = aged
        .db()
        .user_with(&[
            "SELECT ON `{db}`.receiver_inbox",
            "SELECT ON `{db}`.receiver_task_views",
        ])
        .await;
    let o = receiver()
        .arg("verify")
        .env("ORBIT_RECEIVER_DSN", aged.db().dsn_of(&user, &password))
        .output()
        .unwrap();
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    let findings: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("problem=applied_events_mismatch"))
        .collect();
    assert_eq!(findings.len(), 2, "{out}");
    assert!(findings[0].contains("grant this account SELECT on receiver_pruned"));
    assert!(out.lines().last().unwrap().contains("pruned_rows=unknown"));
}

#[tokio::test]
async fn a_dry_run_counts_what_prune_would_delete_and_deletes_nothing() {
    a_dry_run_counts_what_prune_would_delete_and_deletes_nothing_on(Aged::new(3).await).await;
}

#[tokio::test]
async fn on_postgres_a_dry_run_counts_what_prune_would_delete_and_deletes_nothing() {
    a_dry_run_counts_what_prune_would_delete_and_deletes_nothing_on(Aged::on_postgres(3).await)
        .await;
}

async fn a_dry_run_counts_what_prune_would_delete_and_deletes_nothing_on(aged: Aged) {
    let before = aged.event_ids().await.len();
    let o = aged.prune(&["--older-than", "7d", "--dry-run"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let line = stdout(&o);
    assert_eq!(field(&line, "past_window"), "9");
    assert_eq!(field(&line, "kept_latest"), "3");
    assert_eq!(field(&line, "would_delete"), "6");

    let o = aged.prune(&["--older-than", "7d", "--dry-run", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["would_delete"], 6);
    assert_eq!(aged.event_ids().await.len(), before);
    assert_eq!(aged.tally().await, (0, 0));
}

#[tokio::test]
async fn the_json_summary_is_one_object_with_what_was_deleted() {
    let aged = Aged::new(2).await;
    let o = aged.prune(&["--older-than", "7d", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["deleted"], 4);
    assert_eq!(v["kept_latest"], 2);
    assert_eq!(v["stopped"], false);
    assert!(v["elapsed_s"].as_f64().unwrap() > 0.0);
}

#[tokio::test]
async fn prune_says_the_same_in_text_and_json_under_the_same_keys() {
    for dry_run in [true, false] {
        let aged = Aged::new(2).await;
        let mut args = vec!["--older-than", "7d"];
        if dry_run {
            args.push("--dry-run");
        }
        let text = stdout(&aged.prune(&args));
        let aged = Aged::new(2).await;
        args.push("--json");
        let json: serde_json::Value = serde_json::from_slice(&aged.prune(&args).stdout).unwrap();
        let mut text_keys = common::text_keys(&text);
        // The line's first word names the command.
        assert!(text_keys.remove("prune"), "{text}");
        assert_eq!(text_keys, common::json_keys(&json, &[]), "{text}\n{json}");
    }
}

#[tokio::test]
async fn a_window_below_the_minimum_retention_is_refused_and_one_lowered_explicitly_is_taken() {
    let aged = Aged::new(2).await;
    let o = aged.prune(&["--older-than", "1d"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("below the minimum retention of 7d"), "{err}");
    assert!(
        err.contains("lease × budget") && err.contains("backup"),
        "{err}"
    );
    assert_eq!(aged.event_ids().await.len(), 2 * 3 + 3);

    let o = aged
        .prune_command(&["--older-than", "1d"])
        .env("RECEIVER_PRUNE_MIN_RETENTION", "1d")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(field(&stdout(&o), "deleted"), "4");
}

#[tokio::test]
async fn the_runtime_account_asked_to_prune_fails_with_exit_2_naming_the_missing_grant() {
    the_runtime_account_asked_to_prune_fails_with_exit_2_naming_the_missing_grant_on(
        Aged::new(2).await,
    )
    .await;
}

#[tokio::test]
async fn on_postgres_the_runtime_account_asked_to_prune_fails_with_exit_2_naming_the_missing_grant()
{
    the_runtime_account_asked_to_prune_fails_with_exit_2_naming_the_missing_grant_on(
        Aged::on_postgres(2).await,
    )
    .await;
}

async fn the_runtime_account_asked_to_prune_fails_with_exit_2_naming_the_missing_grant_on(
    aged: Aged,
) {
    let (runtime, password) = aged.runtime_account().await;
    let o = aged
        .prune_command(&["--older-than", "7d"])
        .env("RECEIVER_PRUNE_DSN", runtime)
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("may not DELETE receiver_inbox"), "{err}");
    assert!(password.is_none_or(|p| !err.contains(&p)), "{err}");
    assert_eq!(aged.event_ids().await.len(), 2 * 3 + 3);
}

#[tokio::test]
async fn check_prune_passes_the_prune_account_and_fails_the_runtime_account_on_its_grant() {
    check_prune_passes_the_prune_account_and_fails_the_runtime_account_on_its_grant_on(
        Aged::new(1).await,
    )
    .await;
}

#[tokio::test]
async fn on_postgres_check_prune_passes_the_prune_account_and_fails_the_runtime_account_on_its_grant(
) {
    check_prune_passes_the_prune_account_and_fails_the_runtime_account_on_its_grant_on(
        Aged::on_postgres(1).await,
    )
    .await;
}

async fn check_prune_passes_the_prune_account_and_fails_the_runtime_account_on_its_grant_on(
    aged: Aged,
) {
    let check = |dsn: &str| {
        receiver()
            .args(["check", "--prune"])
            .env("RECEIVER_PRUNE_DSN", dsn)
            .output()
            .unwrap()
    };
    let o = check(&aged.prune_dsn);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert_eq!(
        stdout(&o),
        "check=database ok\ncheck=schema ok\ncheck=privileges ok\n"
    );

    let (runtime, _) = aged.runtime_account().await;
    let o = check(&runtime);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    assert!(
        out.contains("check=privileges FAIL the account may not DELETE receiver_inbox"),
        "{out}"
    );
}

/// Prunes with `--archive` into a file named `name`; the rows it read
/// back with `read` must be exactly the deleted ones, column for column.
async fn archive_holds_every_deleted_row(
    aged: Aged,
    name: &str,
    read: fn(&std::path::Path) -> String,
) {
    let before = aged.all_rows().await;
    let dir = std::env::temp_dir().join(format!("prune-archive-{}", random_hex(6)));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    let o = aged.prune(&["--older-than", "7d", "--archive", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));

    let after = aged.all_rows().await;
    let deleted: BTreeMap<_, _> = before
        .into_iter()
        .filter(|(id, _)| !after.contains_key(id))
        .collect();
    assert_eq!(deleted.len(), 8);
    let archived: BTreeMap<String, serde_json::Value> = read(&path)
        .lines()
        .map(|line| {
            let row: serde_json::Value = serde_json::from_str(line).unwrap();
            (row["event_id"].as_str().unwrap().to_owned(), row)
        })
        .collect();
    assert_eq!(archived, deleted);
    assert!(archived
        .values()
        .any(|r| r["event_canonical"].as_str().unwrap().contains("é ✓")));
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the archive holds results");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn the_archive_holds_every_deleted_row_byte_for_byte() {
    let read = |p: &std::path::Path| std::fs::read_to_string(p).unwrap();
    archive_holds_every_deleted_row(Aged::new(4).await, "pruned.jsonl", read).await;
}

#[tokio::test]
async fn on_postgres_the_archive_holds_every_deleted_row_byte_for_byte() {
    let read = |p: &std::path::Path| std::fs::read_to_string(p).unwrap();
    archive_holds_every_deleted_row(Aged::on_postgres(4).await, "pruned.jsonl", read).await;
}

#[tokio::test]
async fn a_gz_archive_is_gzip_that_zcat_reads_back_to_every_deleted_row() {
    archive_holds_every_deleted_row(Aged::new(4).await, "pruned.jsonl.gz", |p| {
        let o = Command::new("gzip").arg("-dc").arg(p).output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        String::from_utf8(o.stdout).unwrap()
    })
    .await;
}

#[tokio::test]
async fn a_prune_that_deletes_nothing_or_is_refused_leaves_no_archive_that_a_tool_cannot_read() {
    let aged = Aged::new(1).await;
    let dir = std::env::temp_dir().join(format!("prune-archive-{}", random_hex(6)));
    std::fs::create_dir_all(&dir).unwrap();

    // A quiet day: nothing is past a 60-day window.
    let quiet = dir.join("quiet.jsonl.gz");
    let o = aged.prune(&["--older-than", "60d", "--archive", quiet.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(field(&stdout(&o), "deleted"), "0");
    assert!(
        !quiet.exists(),
        "a prune that deletes nothing creates no archive"
    );

    // Refused before it starts: the runtime account, and a wrong password.
    let (user, password) = aged.db().user_with(&RUNTIME_GRANTS).await;
    for (name, dsn) in [
        ("runtime.jsonl.gz", aged.db().dsn_of(&user, &password)),
        (
            "password.jsonl.gz",
            aged.db().dsn_of(&user, "not-the-password"),
        ),
    ] {
        let refused = dir.join(name);
        let o = aged
            .prune_command(&["--older-than", "7d", "--archive", refused.to_str().unwrap()])
            .env("RECEIVER_PRUNE_DSN", dsn)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{name}: {}", stderr(&o));
        assert!(
            !refused.exists(),
            "{name}: a refused prune creates no archive"
        );
    }

    // An archive that cannot be created is refused before anything is
    // deleted.
    let nowhere = dir.join("missing-directory").join("pruned.jsonl");
    let o = aged.prune(&["--older-than", "7d", "--archive", nowhere.to_str().unwrap()]);
    assert_ne!(o.status.code(), Some(0));
    assert!(stderr(&o).contains("missing-directory"), "{}", stderr(&o));
    assert_eq!(
        aged.rows_of(&aged.scope).await,
        2 * 3,
        "nothing was deleted"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test]
async fn a_mistyped_receiver_name_is_warned_about_naming_the_names_with_rows_and_a_bad_one_is_quoted(
) {
    let aged = Aged::new(1).await;
    let typo = aged
        .prune_command(&["--older-than", "7d", "--dry-run"])
        .env("RECEIVER_NAME", "task-result-veiw")
        .output()
        .unwrap();
    let err = stderr(&typo);
    assert_eq!(
        typo.status.code(),
        Some(0),
        "a warning, not a refusal: {err}"
    );
    assert!(
        err.contains(r#"receiver name "task-result-veiw" has no rows on queue"#)
            && err.contains(r#""task-result-view" has"#),
        "{err}"
    );
    let right = aged
        .prune_command(&["--older-than", "7d", "--dry-run"])
        .env("RECEIVER_NAME", "task-result-view")
        .output()
        .unwrap();
    assert!(!stderr(&right).contains("warning"), "{}", stderr(&right));

    let spaced = aged
        .prune_command(&["--older-than", "7d", "--dry-run"])
        .env("RECEIVER_NAME", "task-result-view ")
        .output()
        .unwrap();
    assert_eq!(spaced.status.code(), Some(2));
    assert!(
        stderr(&spaced).contains(r#""task-result-view ""#),
        "{}",
        stderr(&spaced)
    );
}

#[tokio::test]
async fn a_prune_stopped_by_sigterm_exits_0_after_its_batch_and_a_second_run_finishes() {
    let aged = Aged::new(60).await;
    let child = aged
        .prune_command(&[
            "--older-than",
            "7d",
            "--batch-rows",
            "10",
            "--pause",
            "300ms",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    // Several batches, so that the next run begins with rows this one left.
    while aged.tally().await.0 < 40 {
        assert!(tokio::time::Instant::now() < deadline, "no batch committed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    common::sigterm(child.id());
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let line = stdout(&o);
    assert_eq!(field(&line, "stopped"), "true");
    let first: u64 = field(&line, "deleted").parse().unwrap();
    assert!((40..120).contains(&first), "{line}");
    assert_eq!(aged.tally().await.0, first, "a batch was cut in the middle");

    let o = aged.prune(&["--older-than", "7d", "--batch-rows", "10"]);
    let line = stdout(&o);
    assert_eq!(field(&line, "stopped"), "false");
    assert_eq!(first + field(&line, "deleted").parse::<u64>().unwrap(), 120);
    // The run looked at every old row again, the latest events the first
    // one had already passed too.
    assert_eq!(field(&line, "kept_latest"), "60");
    assert_eq!(aged.verify().0, Some(0));
}

#[tokio::test]
async fn two_prunes_at_once_delete_each_row_once_and_count_it_once() {
    two_prunes_at_once_delete_each_row_once_and_count_it_once_on(Aged::new(150).await).await;
}

#[tokio::test]
async fn on_postgres_two_prunes_at_once_delete_each_row_once_and_count_it_once() {
    two_prunes_at_once_delete_each_row_once_and_count_it_once_on(Aged::on_postgres(150).await)
        .await;
}

async fn two_prunes_at_once_delete_each_row_once_and_count_it_once_on(aged: Aged) {
    let start = || {
        aged.prune_command(&[
            "--older-than",
            "7d",
            "--batch-rows",
            "25",
            "--pause",
            "0s",
            "--pause-factor",
            "0",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
    };
    let (a, b) = (start(), start());
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    assert_eq!(a.status.code(), Some(0), "{}", stderr(&a));
    assert_eq!(b.status.code(), Some(0), "{}", stderr(&b));
    let deleted = |o: &Output| field(&stdout(o), "deleted").parse::<u64>().unwrap();
    assert_eq!(deleted(&a) + deleted(&b), 300);
    assert_eq!(aged.tally().await, (300, 300));
    assert_eq!(aged.verify().0, Some(0));
}

#[tokio::test]
async fn stats_shows_the_oldest_rows_age_and_what_is_past_a_window() {
    stats_shows_the_oldest_rows_age_and_what_is_past_a_window_on(Aged::new(2).await).await;
}

#[tokio::test]
async fn on_postgres_stats_shows_the_oldest_rows_age_and_what_is_past_a_window() {
    stats_shows_the_oldest_rows_age_and_what_is_past_a_window_on(Aged::on_postgres(2).await).await;
}

async fn stats_shows_the_oldest_rows_age_and_what_is_past_a_window_on(aged: Aged) {
    let o = receiver()
        .args(["stats", "--older-than", "7d"])
        .env("ORBIT_RECEIVER_DSN", aged.admin_dsn())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    let received = out
        .lines()
        .find(|l| l.starts_with("oldest_received_at="))
        .unwrap();
    let age: u64 = field(received, "oldest_age_s").parse().unwrap();
    assert!((30 * 86_400..31 * 86_400).contains(&age), "{received}");
    let past = out.lines().find(|l| l.starts_with("past_window ")).unwrap();
    // Both queues' old tasks: stats covers the whole database.
    assert_eq!(field(past, "rows"), "9");
    assert_eq!(field(past, "older_than_s"), "604800");
    assert!(field(past, "bytes").parse::<u64>().unwrap() > 9 * 100);
}

#[tokio::test]
async fn a_database_initialized_without_the_tally_prunes_once_init_keep_existing_retention_added_it(
) {
    // A plain `receiver init`: the model's two tables, rows in them, and a
    // prune account with the grants it can have there.
    let mut aged = Aged::on(TestDb::initialized().await, 2, &PRUNE_GRANTS[..2]).await;
    let before = aged.all_rows().await;
    let o = receiver()
        .args(["init", "--keep-existing", "--retention"])
        .env("ORBIT_RECEIVER_DSN", aged.admin_dsn())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "receiver_schema_initialized=true foreign_keys=0\n"
    );
    assert_eq!(aged.all_rows().await, before, "init changed a row");
    assert_eq!(aged.tally().await, (0, 0));

    let (user, password) = aged.db().user_with(&PRUNE_GRANTS).await;
    aged.prune_dsn = aged.db().dsn_of(&user, &password);
    let o = aged.prune(&["--older-than", "7d"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(field(&stdout(&o), "deleted"), "4");
    assert_eq!(aged.tally().await, (4, 4));
    let (code, out) = aged.verify();
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(field(out.lines().last().unwrap(), "pruned_rows"), "4");
}

#[tokio::test]
async fn on_a_database_without_the_tally_prune_and_its_check_name_the_grant_and_what_creates_the_table(
) {
    // A plain `receiver init`: the prune account can be granted only the
    // two tables there are, and the server refuses it the third.
    let aged = Aged::on(TestDb::initialized().await, 1, &PRUNE_GRANTS[..2]).await;
    let hint = "a plain `receiver init` does not create receiver_pruned: \
                `receiver init --keep-existing --retention` adds it";
    let o = aged.prune(&["--older-than", "7d"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("the account may not SELECT receiver_pruned"),
        "{err}"
    );
    assert!(err.contains(hint), "{err}");
    assert_eq!(aged.event_ids().await.len(), 3 + 3, "nothing was deleted");

    let o = receiver()
        .args(["check", "--prune"])
        .env("RECEIVER_PRUNE_DSN", &aged.prune_dsn)
        .output()
        .unwrap();
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("check=privileges FAIL the account may not SELECT receiver_pruned"),
        "{out}"
    );
    assert!(out.contains(hint), "{out}");
}

#[tokio::test]
async fn a_prune_killed_at_any_point_has_archived_every_row_it_deleted() {
    let aged = Aged::new(40).await;
    let before = aged.all_rows().await;
    let dir = std::env::temp_dir().join(format!("prune-kill-{}", random_hex(6)));
    std::fs::create_dir_all(&dir).unwrap();
    let archive = dir.join("pruned.jsonl");
    let run = || {
        aged.prune_command(&[
            "--older-than",
            "7d",
            "--batch-rows",
            "7",
            "--pause",
            "0s",
            "--pause-factor",
            "0",
            "--archive",
            archive.to_str().unwrap(),
        ])
    };
    let mut child = run().stdout(Stdio::null()).spawn().unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while aged.tally().await.0 < 20 {
        assert!(tokio::time::Instant::now() < deadline, "no batch committed");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    child.kill().unwrap();
    child.wait().unwrap();

    let archived = |text: String| -> BTreeMap<String, serde_json::Value> {
        text.lines()
            .map(|line| {
                let row: serde_json::Value = serde_json::from_str(line).unwrap();
                (row["event_id"].as_str().unwrap().to_owned(), row)
            })
            .collect()
    };
    let deleted_so_far = |after: &BTreeMap<String, serde_json::Value>| {
        before
            .iter()
            .filter(|(id, _)| !after.contains_key(*id))
            .map(|(id, row)| (id.clone(), row.clone()))
            .collect::<BTreeMap<_, _>>()
    };
    let deleted = deleted_so_far(&aged.all_rows().await);
    assert!(!deleted.is_empty() && deleted.len() < 80);
    let kept = archived(std::fs::read_to_string(&archive).unwrap());
    for (id, row) in &deleted {
        assert_eq!(kept.get(id), Some(row), "deleted but not archived");
    }
    assert_eq!(aged.tally().await.0, deleted.len() as u64);

    // Run again: the rest goes, into the same archive, which still holds
    // every deleted row.
    assert!(run().output().unwrap().status.success());
    let deleted = deleted_so_far(&aged.all_rows().await);
    assert_eq!(deleted.len(), 80);
    let kept = archived(std::fs::read_to_string(&archive).unwrap());
    for (id, row) in &deleted {
        assert_eq!(kept.get(id), Some(row), "deleted but not archived");
    }
    assert_eq!(aged.verify().0, Some(0));
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn redeliveries_of_the_rows_a_prune_is_deleting_never_fail_and_never_apply() {
    let aged = Aged::new(60).await;
    let store = aged.db().store(aged.scope.clone()).await;
    let olds: Vec<String> = sqlx::query_scalar(
        "SELECT CAST(event_canonical AS CHAR) FROM receiver_inbox \
         WHERE consumer_name = ? AND queue_id = ? AND received_at < UTC_TIMESTAMP(6) - INTERVAL 7 DAY",
    )
    .bind(aged.scope.receiver.as_str())
    .bind(aged.scope.queue_id.as_str())
    .fetch_all(&aged.db().pool().await)
    .await
    .unwrap();
    let pruning = aged
        .prune_command(&[
            "--older-than",
            "7d",
            "--batch-rows",
            "5",
            "--pause",
            "0s",
            "--pause-factor",
            "0",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Four workers redeliver every old event, over and over while the prune
    // deletes them and once more after it: each one is a duplicate (the row
    // is there, or locked by a batch and then still there) or, the first
    // time after its row was deleted, stale (inserted again below the
    // view's version).
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut workers = Vec::new();
    for chunk in olds.chunks(olds.len().div_ceil(4)) {
        let (store, chunk, done) = (store.clone(), chunk.to_vec(), done.clone());
        workers.push(tokio::spawn(async move {
            let mut outcomes = Vec::new();
            loop {
                let last_pass = done.load(std::sync::atomic::Ordering::SeqCst);
                for event in &chunk {
                    let receipt = common::apply_once(&store, event).await.unwrap();
                    outcomes.push(receipt.outcome.class());
                }
                if last_pass {
                    return outcomes;
                }
            }
        }));
    }
    let o = tokio::task::spawn_blocking(move || pruning.wait_with_output().unwrap())
        .await
        .unwrap();
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut outcomes = Vec::new();
    for w in workers {
        outcomes.extend(w.await.unwrap());
    }
    assert!(o.status.success());
    assert_eq!(field(&stdout(&o), "deleted"), "120");
    assert!(outcomes.len() >= 2 * 180);
    let count = |class: &str| outcomes.iter().filter(|c| **c == class).count();
    assert_eq!(count("stale"), 120, "once for each deleted row");
    assert_eq!(count("duplicate"), outcomes.len() - 120);
    // Every view is where it was: version 3, three applied events.
    let views: Vec<(u64, u64)> = sqlx::query_as(
        "SELECT task_version, applied_events FROM receiver_task_views WHERE queue_id = ?",
    )
    .bind(aged.scope.queue_id.as_str())
    .fetch_all(&aged.db().pool().await)
    .await
    .unwrap();
    assert!(views.iter().all(|v| *v == (3, 3)), "{views:?}");
    assert_eq!(aged.verify().0, Some(0));
}

#[tokio::test]
async fn without_the_tally_table_prune_and_its_check_say_to_run_init_keep_existing_retention() {
    // The prune account keeps its grants on the dropped table, so the
    // server tells it the table is missing rather than refusing it.
    let aged = Aged::new(1).await;
    sqlx::query("DROP TABLE receiver_pruned")
        .execute(&aged.db().pool().await)
        .await
        .unwrap();
    let o = aged.prune(&["--older-than", "7d"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains(
            "table receiver_pruned is missing (run `receiver init --keep-existing --retention` \
             with an administrator account: it adds this table and changes nothing else)"
        ),
        "{err}"
    );
    assert_eq!(aged.event_ids().await.len(), 3 + 3, "nothing was deleted");

    let o = receiver()
        .args(["check", "--prune"])
        .env("RECEIVER_PRUNE_DSN", &aged.prune_dsn)
        .output()
        .unwrap();
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains(
            "check=schema FAIL table receiver_pruned is missing \
             (run `receiver init --keep-existing --retention` with an administrator account"
        ),
        "{out}"
    );
    assert!(out.contains("check=privileges not run (check schema failed)"));
}
