//! Every operator tool reads every event the inbox accepts, on both
//! engines: events whose JSON holds `\u0000` (which PostgreSQL cannot turn
//! into text) and other escapes, in keys and values, nested, and a field
//! before `task` that holds an object named `task` of its own. The inbox
//! stores and applies them; `verify`, `inspect`, `stats`, `prune` and the
//! diagnosis of `failures` must read them without failing and without
//! taking the wrong object for the task.

use crate::common;

use std::process::Output;

use common::orbit::receiver;
use common::postgres::PgTestDb;
use common::{random_hex, scope, TestDb};
use result_inbox::db::schema::POSTGRES_RETENTION_SQL;
use result_inbox::db::{Dsn, Engine};
use result_inbox::diagnosis::{Diagnoser, Diagnosis};
use result_inbox::inbox::{InboxStore, Outcome, StoreOptions};
use result_inbox::scope::InboxScope;
use sqlx::Postgres;
use tower::ServiceExt;

/// A result with `\u0000` in keys and values at two depths, beside other
/// escapes (a control character, an escaped backslash before `u0000`).
const RESULT: &str =
    r#"{"a\u0000":"v\u0000w","nested":{"k\u0000":["\u0000",{"\u0000":"\\u0000 \u001f"}]}}"#;

/// One event of `task`: an `attributes` field (sorted before `task`)
/// holding a decoy task of another id, and `\u0000` in the task's own keys.
fn event(queue: &str, task: &str, version: u64) -> (String, String) {
    let id = random_hex(16);
    let (kind, state, result) = match version {
        1 => ("task.submitted", "PENDING", String::new()),
        2 => (
            "task.needs_review",
            "NEEDS_REVIEW",
            format!(r#","result":{RESULT}"#),
        ),
        _ => (
            "task.succeeded",
            "SUCCEEDED",
            format!(r#","result":{RESULT}"#),
        ),
    };
    let decoy = random_hex(16);
    let json = format!(
        r#"{{"id":"{id}","type":"{kind}","queue_id":"{queue}","occurred_at":"2026-11-30T16:02:44.5+08:00","attributes":{{"task":{{"id":"{decoy}","version":99,"state":"FAILED"}},"x\u0000":"\u0000"}},"task":{{"id":"{task}","version":{version},"state":"{state}","note\u0000":"a\u0000b"{result}}}}}"#
    );
    (id, json)
}

/// The server the database is on.
enum Server {
    MySql(Box<TestDb>),
    Postgres(PgTestDb),
}

/// A receiver's tables with prune's tally and three tasks of three
/// escaped versions each, all received 30 days ago.
struct Escaped {
    server: Server,
    scope: InboxScope,
    /// Per task: its id and its three event ids, oldest first.
    tasks: Vec<(String, [String; 3])>,
    /// The events' JSON, by event id.
    json: Vec<(String, String)>,
    /// An account with `SELECT` on the three tables.
    reader_dsn: String,
    /// An account with prune's grants.
    prune_dsn: String,
}

impl Escaped {
    async fn on_mysql() -> Escaped {
        let db = TestDb::initialized_with_retention().await;
        let scope = scope("task-result-view");
        let (tasks, json) = fill(&db.store(scope.clone()).await, &scope).await;
        sqlx::query("UPDATE receiver_inbox SET received_at = received_at - INTERVAL 30 DAY")
            .execute(&db.pool().await)
            .await
            .unwrap();
        let (user, password) = db
            .user_with(&[
                "SELECT ON `{db}`.receiver_inbox",
                "SELECT ON `{db}`.receiver_task_views",
                "SELECT ON `{db}`.receiver_pruned",
            ])
            .await;
        let reader_dsn = db.dsn_of(&user, &password);
        let (user, password) = db
            .user_with(&[
                "SELECT, DELETE ON `{db}`.receiver_inbox",
                "SELECT ON `{db}`.receiver_task_views",
                "SELECT, INSERT, UPDATE ON `{db}`.receiver_pruned",
            ])
            .await;
        let prune_dsn = db.dsn_of(&user, &password);
        Escaped {
            server: Server::MySql(Box::new(db)),
            scope,
            tasks,
            json,
            reader_dsn,
            prune_dsn,
        }
    }

    async fn on_postgres() -> Escaped {
        let db = PgTestDb::initialized().await;
        db.run_script(POSTGRES_RETENTION_SQL).await.unwrap();
        let scope = scope("task-result-view");
        let dsn = Dsn::parse(&db.dsn).unwrap();
        let store = InboxStore::<Postgres>::open(&dsn, scope.clone(), StoreOptions::default())
            .await
            .unwrap();
        let (tasks, json) = fill(&store, &scope).await;
        sqlx::query("UPDATE receiver_inbox SET received_at = received_at - interval '30 days'")
            .execute(&db.pool)
            .await
            .unwrap();
        let reader_dsn = db
            .role_with(
                "GRANT SELECT ON receiver_inbox, receiver_task_views, receiver_pruned TO {role};",
            )
            .await;
        let prune_dsn = db
            .role_with(
                "GRANT SELECT, DELETE ON receiver_inbox TO {role}; \
             GRANT SELECT ON receiver_task_views TO {role}; \
             GRANT SELECT, INSERT, UPDATE ON receiver_pruned TO {role};",
            )
            .await;
        Escaped {
            server: Server::Postgres(db),
            scope,
            tasks,
            json,
            reader_dsn,
            prune_dsn,
        }
    }

    fn tool(&self, args: &[&str]) -> Output {
        receiver()
            .args(args)
            .env("ORBIT_RECEIVER_DSN", &self.reader_dsn)
            .env("ORBIT_QUEUE_ID", self.scope.queue_id.as_str())
            .output()
            .unwrap()
    }

    fn prune(&self) -> Output {
        receiver()
            .args(["prune", "--older-than", "7d"])
            .env("RECEIVER_PRUNE_DSN", &self.prune_dsn)
            .env("ORBIT_QUEUE_ID", self.scope.queue_id.as_str())
            .env_remove("RECEIVER_PRUNE_MIN_RETENTION")
            .output()
            .unwrap()
    }

    /// The event ids left in the inbox.
    async fn event_ids(&self) -> Vec<String> {
        match &self.server {
            Server::MySql(db) => {
                sqlx::query_scalar("SELECT CAST(event_id AS CHAR) FROM receiver_inbox")
                    .fetch_all(&db.pool().await)
                    .await
            }
            Server::Postgres(db) => {
                sqlx::query_scalar("SELECT event_id::text FROM receiver_inbox")
                    .fetch_all(&db.pool)
                    .await
            }
        }
        .unwrap()
    }

    fn admin_dsn(&self) -> String {
        match &self.server {
            Server::MySql(db) => common::dsn_for(&db.name),
            Server::Postgres(db) => db.dsn.clone(),
        }
    }
}

/// Three tasks of versions 1, 2 and 3, applied in order.
async fn fill<E: Engine>(
    store: &InboxStore<E>,
    scope: &InboxScope,
) -> (Vec<(String, [String; 3])>, Vec<(String, String)>) {
    let queue = scope.queue_id.as_str();
    let (mut tasks, mut json) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        let task = random_hex(16);
        let mut ids: [String; 3] = Default::default();
        for version in 1..=3 {
            let (id, body) = event(queue, &task, version);
            let outcome = common::receiver(store)
                .oneshot(common::delivery_of(&body))
                .await
                .unwrap()
                .outcome;
            assert_eq!(outcome, Outcome::Applied, "version {version}");
            ids[version as usize - 1] = id.clone();
            json.push((id, body));
        }
        tasks.push((task, ids));
    }
    (tasks, json)
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// The value of `key=` in a `key=value` line.
fn field<'a>(line: &'a str, key: &str) -> &'a str {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
}

#[tokio::test]
async fn verify_passes_events_with_nul_escapes_and_a_decoy_task() {
    verify_passes_on(Escaped::on_mysql().await).await;
}

#[tokio::test]
async fn on_postgres_verify_passes_events_with_nul_escapes_and_a_decoy_task() {
    verify_passes_on(Escaped::on_postgres().await).await;
}

async fn verify_passes_on(e: Escaped) {
    let o = e.tool(&["verify"]);
    let (stdout, stderr) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{stdout}{stderr}");
    let summary = stdout.lines().last().unwrap();
    assert_eq!(field(summary, "inbox_rows"), "9", "{summary}");
    assert_eq!(field(summary, "task_views"), "3", "{summary}");
    assert_eq!(field(summary, "problems"), "0", "{stdout}");
}

#[tokio::test]
async fn verify_still_finds_a_wrong_count_among_events_with_nul_escapes() {
    verify_finds_a_wrong_count_on(Escaped::on_mysql().await).await;
}

#[tokio::test]
async fn on_postgres_verify_still_finds_a_wrong_count_among_events_with_nul_escapes() {
    verify_finds_a_wrong_count_on(Escaped::on_postgres().await).await;
}

/// The totals are not skipped: a count made wrong is found, for its task.
async fn verify_finds_a_wrong_count_on(e: Escaped) {
    let task = &e.tasks[1].0;
    let damage = "UPDATE receiver_task_views SET applied_events = 7 WHERE task_id = ";
    match &e.server {
        Server::MySql(db) => sqlx::query(&format!("{damage}?"))
            .bind(task)
            .execute(&db.pool().await)
            .await
            .map(drop),
        Server::Postgres(db) => sqlx::query(&format!("{damage}$1"))
            .bind(task)
            .execute(&db.pool)
            .await
            .map(drop),
    }
    .unwrap();
    let o = e.tool(&["verify"]);
    let (stdout, _) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{stdout}");
    let findings: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("problem="))
        .collect();
    assert_eq!(findings.len(), 1, "{stdout}");
    assert!(
        findings[0].starts_with("problem=applied_events_mismatch")
            && findings[0].contains(&format!("task={task}")),
        "{stdout}"
    );
}

#[tokio::test]
async fn inspect_shows_events_and_tasks_with_nul_escapes() {
    inspect_on(Escaped::on_mysql().await).await;
}

#[tokio::test]
async fn on_postgres_inspect_shows_events_and_tasks_with_nul_escapes() {
    inspect_on(Escaped::on_postgres().await).await;
}

async fn inspect_on(e: Escaped) {
    let (task, [_, _, v3]) = &e.tasks[0];
    let o = e.tool(&["inspect", "event", v3]);
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "{stderr}");
    assert!(
        stdout.contains(&format!("task={task} version=3 state=SUCCEEDED")),
        "{stdout}"
    );
    let o = e.tool(&["inspect", "task", task]);
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "{stderr}");
    assert_eq!(stdout.lines().count(), 4, "{stdout}");
    assert!(
        stdout.starts_with("view ") && stdout.contains(&format!("last_event={v3}")),
        "{stdout}"
    );
}

#[tokio::test]
async fn stats_counts_events_with_nul_escapes() {
    stats_on(Escaped::on_mysql().await).await;
}

#[tokio::test]
async fn on_postgres_stats_counts_events_with_nul_escapes() {
    stats_on(Escaped::on_postgres().await).await;
}

async fn stats_on(e: Escaped) {
    let o = e.tool(&["stats", "--json"]);
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["tables"][0]["rows"], 9, "{stdout}");
    assert_eq!(v["applied"], 9, "{stdout}");
}

#[tokio::test]
async fn prune_keeps_the_last_event_of_each_task_of_events_with_a_decoy_task() {
    prune_on(Escaped::on_mysql().await).await;
}

#[tokio::test]
async fn on_postgres_prune_keeps_the_last_event_of_each_task_of_events_with_a_decoy_task() {
    prune_on(Escaped::on_postgres().await).await;
}

/// The decoy stands before the task in the canonical text: a prune that
/// took it for the task would find no view for it and delete the real
/// view's last event.
async fn prune_on(e: Escaped) {
    let o = e.prune();
    let (stdout, stderr) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    assert_eq!(field(&stdout, "deleted"), "6", "{stdout}");
    assert_eq!(field(&stdout, "kept_latest"), "3", "{stdout}");
    let left = e.event_ids().await;
    for (_, [v1, v2, v3]) in &e.tasks {
        assert!(left.contains(v3), "a view's last event was deleted");
        assert!(
            !left.contains(v1) && !left.contains(v2),
            "an old version survived"
        );
    }
    let o = receiver()
        .arg("verify")
        .env("ORBIT_RECEIVER_DSN", e.admin_dsn())
        .output()
        .unwrap();
    let (stdout, _) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{stdout}");
    assert_eq!(field(stdout.lines().last().unwrap(), "pruned_rows"), "6");
}

#[tokio::test]
async fn the_diagnosis_of_a_failed_copy_reads_events_with_nul_escapes() {
    diagnosis_on(Escaped::on_mysql().await).await;
}

#[tokio::test]
async fn on_postgres_the_diagnosis_of_a_failed_copy_reads_events_with_nul_escapes() {
    diagnosis_on(Escaped::on_postgres().await).await;
}

async fn diagnosis_on(e: Escaped) {
    let dsn = Dsn::parse(&e.reader_dsn).unwrap();
    let mut diagnoser = Diagnoser::connect(&dsn, e.scope.clone()).await.unwrap();
    for (id, json) in &e.json {
        let diagnosed = diagnoser.diagnose(json.as_bytes()).await.unwrap();
        assert_eq!(diagnosed.diagnosis, Diagnosis::Duplicate, "{id}");
    }
    let (task, _) = &e.tasks[2];
    let (_, next) = event(e.scope.queue_id.as_str(), task, 4);
    let diagnosed = diagnoser.diagnose(next.as_bytes()).await.unwrap();
    assert_eq!(diagnosed.diagnosis, Diagnosis::Apply);
    assert_eq!(diagnosed.task_id.unwrap().as_str(), task);
    diagnoser.close().await;
}
