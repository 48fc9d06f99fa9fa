//! `receiver prune` on PostgreSQL, as an operator runs it against a real
//! server: what it deletes and keeps, its archive, its account, two of it
//! at once, and what `verify` and a redelivery say afterwards.

use crate::common;

use std::collections::BTreeMap;
use std::process::{Command, Output, Stdio};

use common::orbit::receiver;
use common::postgres::PgTestDb;
use common::{random_hex, scope, EventSpec};
use result_inbox::db::schema::{POSTGRES_RETENTION_SQL, POSTGRES_SCHEMA_SQL};
use result_inbox::db::Dsn;
use result_inbox::inbox::{InboxStore, Outcome, StoreOptions};
use result_inbox::scope::InboxScope;
use sqlx::Postgres;
use tower::ServiceExt;

/// A result that must reach the archive unchanged.
const RESULT: &str =
    r#"{"note":"line\nbreak \"quoted\" é ✓","big":123456789012345678901234567890}"#;

const PRUNE_GRANTS: &str = "GRANT SELECT, DELETE ON receiver_inbox TO {role}; \
     GRANT SELECT ON receiver_task_views TO {role}; \
     GRANT SELECT, INSERT, UPDATE ON receiver_pruned TO {role};";

const RUNTIME_GRANTS: &str =
    "GRANT SELECT, INSERT, UPDATE ON receiver_inbox, receiver_task_views TO {role};";

/// `tasks` tasks of three versions each received 30 days ago, one task
/// received now, an old task of another queue under the same name, and a
/// prune role with every grant prune needs.
struct Aged {
    db: PgTestDb,
    scope: InboxScope,
    other: InboxScope,
    store: InboxStore<Postgres>,
    /// Per old task, its three events' JSON, oldest first.
    events: Vec<[EventSpec<'static>; 3]>,
    prune_dsn: String,
}

impl Aged {
    async fn new(tasks: usize) -> Aged {
        let db = PgTestDb::new().await;
        db.run_script(POSTGRES_SCHEMA_SQL).await.unwrap();
        db.run_script(POSTGRES_RETENTION_SQL).await.unwrap();
        let scope = scope("task-result-view");
        let other = InboxScope::new(scope.receiver.clone(), common::scope("x").queue_id);
        let store = open(&db, &scope).await;
        let mut events = Vec::new();
        for _ in 0..tasks {
            events.push(three_versions(&store, &scope).await);
        }
        three_versions(&open(&db, &other).await, &other).await;
        sqlx::query("UPDATE receiver_inbox SET received_at = received_at - interval '30 days'")
            .execute(&db.pool)
            .await
            .unwrap();
        three_versions(&store, &scope).await;
        let prune_dsn = role(&db, PRUNE_GRANTS).await;
        Aged {
            db,
            scope,
            other,
            store,
            events,
            prune_dsn,
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
        sqlx::query_scalar(
            "SELECT count(*) FROM receiver_inbox WHERE consumer_name = $1 AND queue_id = $2",
        )
        .bind(scope.receiver.as_str())
        .bind(scope.queue_id.as_str())
        .fetch_one(&self.db.pool)
        .await
        .unwrap()
    }

    /// Every row of the scope, every column, as the archive writes it.
    async fn all_rows(&self) -> BTreeMap<String, serde_json::Value> {
        let rows: Vec<(String, String, String, String, String, i16, String)> = sqlx::query_as(
            "SELECT consumer_name, queue_id, event_id, event_digest, event_canonical, applied, \
             to_char(received_at, 'YYYY-MM-DD HH24:MI:SS.US') FROM receiver_inbox \
             WHERE consumer_name = $1 AND queue_id = $2",
        )
        .bind(self.scope.receiver.as_str())
        .bind(self.scope.queue_id.as_str())
        .fetch_all(&self.db.pool)
        .await
        .unwrap();
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

    async fn tally(&self) -> (i64, i64) {
        sqlx::query_as(
            "SELECT coalesce(sum(pruned_events), 0)::bigint, \
             coalesce(sum(pruned_applied), 0)::bigint FROM receiver_pruned",
        )
        .fetch_one(&self.db.pool)
        .await
        .unwrap()
    }

    fn verify(&self) -> (Option<i32>, String) {
        let o = receiver()
            .arg("verify")
            .env("ORBIT_RECEIVER_DSN", &self.db.dsn)
            .output()
            .unwrap();
        (o.status.code(), stdout(&o))
    }
}

async fn open(db: &PgTestDb, scope: &InboxScope) -> InboxStore<Postgres> {
    let dsn = Dsn::parse(&db.dsn).unwrap();
    InboxStore::open(&dsn, scope.clone(), StoreOptions::default())
        .await
        .unwrap()
}

/// A role of its own with `grants` (`{role}` stands for it); its DSN.
async fn role(db: &PgTestDb, grants: &str) -> String {
    let role = format!("r_{}", random_hex(4));
    db.run_script(&format!(
        "CREATE ROLE {role} LOGIN; {}",
        grants.replace("{role}", &role)
    ))
    .await
    .unwrap();
    db.dsn.replacen("://postgres@", &format!("://{role}@"), 1)
}

/// Applies versions 1, 2 and 3 of a new task.
async fn three_versions(
    store: &InboxStore<Postgres>,
    scope: &InboxScope,
) -> [EventSpec<'static>; 3] {
    let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
    let queue = leak(scope.queue_id.as_str().to_owned());
    let task = leak(random_hex(16));
    let v1 = EventSpec::submitted(queue, task);
    let v2 = EventSpec {
        id: random_hex(16),
        version: 2,
        event_type: "task.needs_review",
        state: "NEEDS_REVIEW",
        result: Some(RESULT),
        ..EventSpec::submitted(queue, task)
    };
    let v3 = EventSpec {
        id: random_hex(16),
        version: 3,
        event_type: "task.succeeded",
        state: "SUCCEEDED",
        result: Some(RESULT),
        ..EventSpec::submitted(queue, task)
    };
    for event in [&v1, &v2, &v3] {
        apply(store, &event.json()).await;
    }
    [v1, v2, v3]
}

async fn apply(store: &InboxStore<Postgres>, json: &str) -> Outcome {
    common::receiver(store)
        .oneshot(common::delivery_of(json))
        .await
        .unwrap()
        .outcome
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn field<'a>(line: &'a str, key: &str) -> &'a str {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
}

#[tokio::test]
async fn on_postgres_prune_deletes_the_rows_past_the_window_keeps_each_views_last_event_and_verify_counts_them(
) {
    let aged = Aged::new(5).await;
    let o = aged.prune(&["--older-than", "7d"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let line = stdout(&o);
    assert_eq!(stderr(&o), "");
    assert_eq!(field(&line, "deleted"), "10", "{line}");
    assert_eq!(field(&line, "kept_latest"), "5", "{line}");

    let left: Vec<String> = aged.all_rows().await.into_keys().collect();
    for [v1, v2, v3] in &aged.events {
        assert!(!left.contains(&v1.id) && !left.contains(&v2.id));
        assert!(left.contains(&v3.id), "a view's last event was deleted");
    }
    assert_eq!(left.len(), 5 + 3);
    assert_eq!(aged.rows_of(&aged.other).await, 3, "another queue's rows");
    assert_eq!(aged.tally().await, (10, 10));

    let (code, out) = aged.verify();
    assert_eq!(code, Some(0), "{out}");
    let summary = out.lines().last().unwrap();
    assert_eq!(field(summary, "pruned_rows"), "10");
    assert_eq!(field(summary, "problems"), "0");

    // What comes back of a pruned event is stale, never applied again; the
    // kept last event is a duplicate.
    let [v1, _, v3] = &aged.events[0];
    assert_eq!(apply(&aged.store, &v1.json()).await, Outcome::Stale);
    assert_eq!(
        apply(&aged.store, &v3.json()).await,
        Outcome::Duplicate { applied: true }
    );
}

#[tokio::test]
async fn on_postgres_the_archive_holds_every_deleted_row_byte_for_byte() {
    let aged = Aged::new(4).await;
    let before = aged.all_rows().await;
    let dir = std::env::temp_dir().join(format!("pg-prune-archive-{}", random_hex(6)));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("pruned.jsonl");
    let o = aged.prune(&["--older-than", "7d", "--archive", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let after = aged.all_rows().await;
    let deleted: BTreeMap<_, _> = before
        .into_iter()
        .filter(|(id, _)| !after.contains_key(id))
        .collect();
    assert_eq!(deleted.len(), 8);
    let archived: BTreeMap<String, serde_json::Value> = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(|line| {
            let row: serde_json::Value = serde_json::from_str(line).unwrap();
            (row["event_id"].as_str().unwrap().to_owned(), row)
        })
        .collect();
    assert_eq!(archived, deleted);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn on_postgres_the_runtime_role_may_not_prune_and_check_prune_names_the_grant() {
    let aged = Aged::new(1).await;
    let check = |dsn: &str| {
        receiver()
            .args(["check", "--prune"])
            .env("RECEIVER_PRUNE_DSN", dsn)
            .output()
            .unwrap()
    };
    let o = check(&aged.prune_dsn);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert_eq!(
        stdout(&o),
        "check=database ok\ncheck=schema ok\ncheck=privileges ok\n"
    );

    let runtime = role(&aged.db, RUNTIME_GRANTS).await;
    let o = check(&runtime);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stdout(&o).contains("check=privileges FAIL the account may not DELETE receiver_inbox"),
        "{}",
        stdout(&o)
    );
    let o = aged
        .prune_command(&["--older-than", "7d"])
        .env("RECEIVER_PRUNE_DSN", &runtime)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("may not DELETE receiver_inbox"),
        "{}",
        stderr(&o)
    );
    assert_eq!(aged.all_rows().await.len(), 3 + 3);
}

#[tokio::test]
async fn on_postgres_two_prunes_at_once_delete_each_row_once_and_count_it_once() {
    let aged = Aged::new(150).await;
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
