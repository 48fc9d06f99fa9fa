//! The operator tools as an operator runs them — the built `receiver`
//! binary against a real server: `subscribe`, `verify`, `stats`, `inspect`.
//! The database tools run with an account that may only SELECT.

use crate::common;

use std::process::Output;

use common::orbit::{receiver, OrbitDev};
use common::postgres::PgTestDb;
use common::{random_hex, scope, EventSpec, TestDb};
use result_inbox::db::schema::POSTGRES_RETENTION_SQL;
use result_inbox::db::{Dsn, Engine};
use result_inbox::inbox::{InboxStore, StoreOptions};
use result_inbox::scope::InboxScope;
use sqlx::Postgres;
use tower::ServiceExt;

/// A result no tool may print unless asked to.
const SECRET_RESULT: &str = r#"{"secret":"sentinel-result-4f1c"}"#;

fn out(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

async fn apply<E: Engine>(store: &InboxStore<E>, json: &str) {
    common::receiver(store)
        .oneshot(common::delivery_of(json))
        .await
        .unwrap();
}

/// A database with three tasks: each submitted (v1) then succeeded (v2),
/// and for the first task a late copy of v1 under another id (stale).
struct Filled {
    server: Server,
    scope: InboxScope,
    tasks: Vec<String>,
    /// Per task: (v1 event id, v2 event id).
    events: Vec<(String, String)>,
    reader_dsn: String,
}

/// The server a [`Filled`] database is on.
enum Server {
    MySql(Box<TestDb>),
    Postgres(PgTestDb),
}

impl Filled {
    /// On a database initialized with prune's tally, read by an account
    /// with SELECT on all three tables.
    async fn new() -> Filled {
        Filled::on(
            TestDb::initialized_with_retention().await,
            &[
                "SELECT ON `{db}`.receiver_inbox",
                "SELECT ON `{db}`.receiver_task_views",
                "SELECT ON `{db}`.receiver_pruned",
            ],
        )
        .await
    }

    /// On a database a plain `receiver init` created (no tally), read by
    /// an account with SELECT on its two tables.
    async fn without_tally() -> Filled {
        Filled::on(
            TestDb::initialized().await,
            &[
                "SELECT ON `{db}`.receiver_inbox",
                "SELECT ON `{db}`.receiver_task_views",
            ],
        )
        .await
    }

    async fn on(db: TestDb, grants: &[&str]) -> Filled {
        let scope = scope("task-result-view");
        let store = db.store(scope.clone()).await;
        let (tasks, events) = fill(&store, &scope).await;
        let (user, password) = db.user_with(grants).await;
        let reader_dsn = db.dsn_of(&user, &password);
        Filled {
            server: Server::MySql(Box::new(db)),
            scope,
            tasks,
            events,
            reader_dsn,
        }
    }

    /// The same on PostgreSQL, with prune's tally, read by a role with
    /// SELECT on all three tables.
    async fn on_postgres() -> Filled {
        let db = PgTestDb::initialized().await;
        db.run_script(POSTGRES_RETENTION_SQL).await.unwrap();
        let scope = scope("task-result-view");
        let dsn = Dsn::parse(&db.dsn).unwrap();
        let store = InboxStore::<Postgres>::open(&dsn, scope.clone(), StoreOptions::default())
            .await
            .unwrap();
        let (tasks, events) = fill(&store, &scope).await;
        let reader_dsn = db
            .role_with(
                "GRANT SELECT ON receiver_inbox, receiver_task_views, receiver_pruned TO {role};",
            )
            .await;
        Filled {
            server: Server::Postgres(db),
            scope,
            tasks,
            events,
            reader_dsn,
        }
    }

    fn tool(&self, args: &[&str]) -> Output {
        receiver()
            .args(args)
            .env("ORBIT_RECEIVER_DSN", &self.reader_dsn)
            .output()
            .unwrap()
    }

    /// The administrator's DSN of the database.
    fn admin_dsn(&self) -> String {
        match &self.server {
            Server::MySql(db) => common::dsn_for(&db.name),
            Server::Postgres(db) => db.dsn.clone(),
        }
    }

    /// As an administrator: damage the tables the way no receiver would.
    async fn damage(&self, statement: &str) {
        match &self.server {
            Server::MySql(db) => sqlx::query(statement)
                .execute(&db.pool().await)
                .await
                .map(drop),
            Server::Postgres(db) => sqlx::query(statement).execute(&db.pool).await.map(drop),
        }
        .unwrap();
    }
}

/// The three tasks of a [`Filled`] database, applied through `store`.
async fn fill<E: Engine>(
    store: &InboxStore<E>,
    scope: &InboxScope,
) -> (Vec<String>, Vec<(String, String)>) {
    let mut tasks = Vec::new();
    let mut events = Vec::new();
    for _ in 0..3 {
        let task = random_hex(16);
        let v1 = EventSpec::submitted(scope.queue_id.as_str(), &task);
        let v2 = EventSpec {
            id: random_hex(16),
            version: 2,
            event_type: "task.succeeded",
            state: "SUCCEEDED",
            result: Some(SECRET_RESULT),
            ..v1
        };
        apply(store, &v1.json()).await;
        apply(store, &v2.json()).await;
        events.push((v1.id.clone(), v2.id.clone()));
        tasks.push(task);
    }
    let late = EventSpec::submitted(scope.queue_id.as_str(), &tasks[0]);
    apply(store, &late.json()).await;
    (tasks, events)
}

/// Runs `receiver verify`; returns (exit code, findings, summary line).
fn verify(f: &Filled) -> (Option<i32>, Vec<String>, String) {
    verify_as(&f.reader_dsn)
}

/// Runs `receiver verify` as the account of `dsn`; returns what [`verify`] does.
fn verify_as(dsn: &str) -> (Option<i32>, Vec<String>, String) {
    let o = receiver()
        .arg("verify")
        .env("ORBIT_RECEIVER_DSN", dsn)
        .output()
        .unwrap();
    let (stdout, stderr) = out(&o);
    assert!(!stdout.contains("sentinel-result"));
    // stderr is a pipe here, not a terminal: no progress bar, nothing at all.
    assert_eq!(stderr, "");
    let mut lines: Vec<String> = stdout.lines().map(str::to_owned).collect();
    let summary = lines.pop().unwrap_or_default();
    (o.status.code(), lines, summary)
}

#[tokio::test]
async fn verify_passes_a_sound_database_with_a_select_only_account() {
    verify_passes_a_sound_database_with_a_select_only_account_on(Filled::new().await).await;
}

#[tokio::test]
async fn on_postgres_verify_passes_a_sound_database_with_a_select_only_account() {
    verify_passes_a_sound_database_with_a_select_only_account_on(Filled::on_postgres().await).await;
}

async fn verify_passes_a_sound_database_with_a_select_only_account_on(f: Filled) {
    let (code, findings, summary) = verify(&f);
    assert_eq!(findings, Vec::<String>::new());
    assert_eq!(
        summary,
        "verify inbox_rows=7 task_views=3 pruned_rows=0 problems=0 ok=true"
    );
    assert_eq!(code, Some(0));
}

#[tokio::test]
async fn verify_without_the_tally_passes_a_sound_database_and_counts_no_pruned_row_it_cannot_see() {
    let f = Filled::without_tally().await;
    // The runtime account cannot tell a missing table from one it may not read.
    let (code, findings, summary) = verify(&f);
    assert_eq!(findings, Vec::<String>::new());
    assert_eq!(
        summary,
        "verify inbox_rows=7 task_views=3 pruned_rows=unknown problems=0 ok=true"
    );
    assert_eq!(code, Some(0));
    // An administrator sees it is missing: prune never ran here.
    let (code, findings, summary) = verify_as(&f.admin_dsn());
    assert_eq!(findings, Vec::<String>::new());
    assert_eq!(
        summary,
        "verify inbox_rows=7 task_views=3 pruned_rows=0 problems=0 ok=true"
    );
    assert_eq!(code, Some(0));
}

#[tokio::test]
async fn verify_without_the_tally_reports_a_task_with_fewer_applied_rows_than_its_count() {
    let f = Filled::without_tally().await;
    let (v1, _) = &f.events[1];
    f.damage(&format!(
        "DELETE FROM receiver_inbox WHERE event_id = '{v1}'"
    ))
    .await;
    let task = &f.tasks[1];
    let mismatch = format!(
        "problem=applied_events_mismatch receiver=task-result-view queue={} task={task}: \
         applied_events is 2, the task has 1 applied inbox row(s)",
        f.scope.queue_id.as_str()
    );

    let (code, findings, summary) = verify(&f);
    assert_eq!(code, Some(1));
    assert_eq!(
        findings,
        [format!(
            "{mismatch} (if receiver prune ran here, grant this account SELECT on \
             receiver_pruned, where it counts the rows it deleted; without that table, \
             which `receiver init --keep-existing --retention` adds, no prune ran)"
        )]
    );
    assert!(
        summary.ends_with("pruned_rows=unknown problems=1 ok=false"),
        "{summary}"
    );

    let (code, findings, summary) = verify_as(&f.admin_dsn());
    assert_eq!(code, Some(1));
    assert_eq!(findings, [mismatch]);
    assert!(
        summary.ends_with("pruned_rows=0 problems=1 ok=false"),
        "{summary}"
    );
}

#[tokio::test]
async fn verify_names_a_changed_digest() {
    verify_names_a_changed_digest_on(Filled::new().await).await;
}

#[tokio::test]
async fn on_postgres_verify_names_a_changed_digest() {
    verify_names_a_changed_digest_on(Filled::on_postgres().await).await;
}

async fn verify_names_a_changed_digest_on(f: Filled) {
    let (_, v2) = &f.events[1];
    f.damage(&format!(
        "UPDATE receiver_inbox SET event_digest = REPEAT('0', 64) WHERE event_id = '{v2}'"
    ))
    .await;
    let (code, findings, summary) = verify(&f);
    assert_eq!(code, Some(1));
    assert_eq!(findings.len(), 1, "{findings:?}");
    assert!(
        findings[0].starts_with("problem=digest_mismatch "),
        "{findings:?}"
    );
    assert!(findings[0].contains(&format!("event={v2}")), "{findings:?}");
    assert!(summary.ends_with("problems=1 ok=false"), "{summary}");
}

#[tokio::test]
async fn verify_names_a_changed_canonical_text() {
    verify_names_a_changed_canonical_text_on(Filled::new().await).await;
}

#[tokio::test]
async fn on_postgres_verify_names_a_changed_canonical_text() {
    verify_names_a_changed_canonical_text_on(Filled::on_postgres().await).await;
}

async fn verify_names_a_changed_canonical_text_on(f: Filled) {
    let (v1, _) = &f.events[2];
    f.damage(&format!(
        "UPDATE receiver_inbox SET event_canonical = REPLACE(event_canonical, '{{\"id\"', '{{ \"id\"') \
         WHERE event_id = '{v1}'"
    ))
    .await;
    let (code, findings, _) = verify(&f);
    assert_eq!(code, Some(1));
    let kinds: Vec<&str> = findings
        .iter()
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["problem=digest_mismatch", "problem=not_canonical"],
        "{findings:?}"
    );
    assert!(findings.iter().all(|l| l.contains(&format!("event={v1}"))));
}

#[tokio::test]
async fn verify_names_a_missing_applied_row() {
    verify_names_a_missing_applied_row_on(Filled::new().await).await;
}

#[tokio::test]
async fn on_postgres_verify_names_a_missing_applied_row() {
    verify_names_a_missing_applied_row_on(Filled::on_postgres().await).await;
}

async fn verify_names_a_missing_applied_row_on(f: Filled) {
    let (_, v2) = &f.events[0];
    f.damage(&format!(
        "DELETE FROM receiver_inbox WHERE event_id = '{v2}'"
    ))
    .await;
    let (code, findings, _) = verify(&f);
    assert_eq!(code, Some(1));
    let task = &f.tasks[0];
    assert!(
        findings
            .iter()
            .any(|l| l.starts_with("problem=last_event_missing ")
                && l.contains(&format!("task={task} event={v2}"))),
        "{findings:?}"
    );
    assert!(
        findings
            .iter()
            .any(|l| l.starts_with("problem=applied_events_mismatch ")
                && l.contains(&format!("task={task}"))
                && l.ends_with("applied_events is 2, the task has 1 applied inbox row(s)")),
        "{findings:?}"
    );
}

#[tokio::test]
async fn verify_names_a_wrong_applied_events_count() {
    verify_names_a_wrong_applied_events_count_on(Filled::new().await).await;
}

#[tokio::test]
async fn on_postgres_verify_names_a_wrong_applied_events_count() {
    verify_names_a_wrong_applied_events_count_on(Filled::on_postgres().await).await;
}

async fn verify_names_a_wrong_applied_events_count_on(f: Filled) {
    let task = &f.tasks[1];
    f.damage(&format!(
        "UPDATE receiver_task_views SET applied_events = 5 WHERE task_id = '{task}'"
    ))
    .await;
    let (code, findings, _) = verify(&f);
    assert_eq!(code, Some(1));
    assert_eq!(findings.len(), 1, "{findings:?}");
    assert!(
        findings[0].starts_with("problem=applied_events_mismatch ")
            && findings[0].contains(&format!("task={task}"))
            && findings[0].ends_with("applied_events is 5, the task has 2 applied inbox row(s)"),
        "{findings:?}"
    );
}

#[tokio::test]
async fn verify_names_a_view_ahead_of_its_events() {
    verify_names_a_view_ahead_of_its_events_on(Filled::new().await).await;
}

#[tokio::test]
async fn on_postgres_verify_names_a_view_ahead_of_its_events() {
    verify_names_a_view_ahead_of_its_events_on(Filled::on_postgres().await).await;
}

async fn verify_names_a_view_ahead_of_its_events_on(f: Filled) {
    let task = &f.tasks[2];
    f.damage(&format!(
        "UPDATE receiver_task_views SET task_version = 9 WHERE task_id = '{task}'"
    ))
    .await;
    let (code, findings, _) = verify(&f);
    assert_eq!(code, Some(1));
    assert_eq!(findings.len(), 1, "{findings:?}");
    assert!(
        findings[0].starts_with("problem=last_event_mismatch ")
            && findings[0].contains(&format!("task={task}"))
            && findings[0].contains(
                "the view has version 9 state SUCCEEDED, its last event version 2 state SUCCEEDED"
            ),
        "{findings:?}"
    );
}

#[tokio::test]
async fn verify_names_an_applied_event_ahead_of_its_view() {
    verify_names_an_applied_event_ahead_of_its_view_on(Filled::new().await).await;
}

#[tokio::test]
async fn on_postgres_verify_names_an_applied_event_ahead_of_its_view() {
    verify_names_an_applied_event_ahead_of_its_view_on(Filled::on_postgres().await).await;
}

async fn verify_names_an_applied_event_ahead_of_its_view_on(f: Filled) {
    let task = &f.tasks[1];
    f.damage(&format!(
        "UPDATE receiver_task_views SET task_version = 1 WHERE task_id = '{task}'"
    ))
    .await;
    let (_, findings, _) = verify(&f);
    assert!(
        findings
            .iter()
            .any(|l| l.starts_with("problem=view_behind_event ")
                && l.contains(&format!("task={task}"))
                && l.ends_with("the view has version 1, an applied inbox row has version 2")),
        "{findings:?}"
    );
}

#[tokio::test]
async fn stats_counts_rows_receipts_and_growth_in_text_and_json() {
    stats_counts_rows_receipts_and_growth_in_text_and_json_on(Filled::new().await).await;
}

#[tokio::test]
async fn on_postgres_stats_counts_rows_receipts_and_growth_in_text_and_json() {
    stats_counts_rows_receipts_and_growth_in_text_and_json_on(Filled::on_postgres().await).await;
}

async fn stats_counts_rows_receipts_and_growth_in_text_and_json_on(f: Filled) {
    let o = f.tool(&["stats"]);
    let (stdout, stderr) = out(&o);
    assert!(o.status.success(), "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines[0].starts_with("table=receiver_inbox rows=7 data_bytes="),
        "{stdout}"
    );
    assert!(
        lines[1].starts_with("table=receiver_task_views rows=3 data_bytes="),
        "{stdout}"
    );
    assert!(lines[2].starts_with("oldest_received_at=20"), "{stdout}");
    assert_eq!(lines[3], "applied=6 stale=1");
    assert!(lines[4].starts_with("average_event_bytes="), "{stdout}");
    let days: Vec<&&str> = lines.iter().filter(|l| l.starts_with("day=")).collect();
    assert_eq!(days.len(), 30);
    assert!(days[29].ends_with(" events=7"), "today: {}", days[29]);
    assert!(days[..29].iter().all(|d| d.ends_with(" events=0")));
    assert!(lines.last().unwrap().starts_with("inbox_bytes_per_event="));

    let o = f.tool(&["stats", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["tables"][0]["table"], "receiver_inbox");
    assert_eq!(v["tables"][0]["rows"], 7);
    assert_eq!(v["applied"], 6);
    assert_eq!(v["stale"], 1);
    assert_eq!(v["events_per_day"].as_array().unwrap().len(), 30);
    assert!(v["largest_event_bytes"].as_u64().unwrap() > 100);
    assert!(v["growth_bytes_per_day"].as_u64().unwrap() > 0);
    assert!(!stdout.contains("sentinel-result"));
}

#[tokio::test]
async fn stats_says_the_same_in_text_and_json_under_the_same_keys() {
    stats_says_the_same_in_text_and_json_under_the_same_keys_on(Filled::new().await).await;
}

#[tokio::test]
async fn on_postgres_stats_says_the_same_in_text_and_json_under_the_same_keys() {
    stats_says_the_same_in_text_and_json_under_the_same_keys_on(Filled::on_postgres().await).await;
}

async fn stats_says_the_same_in_text_and_json_under_the_same_keys_on(f: Filled) {
    let text = out(&f.tool(&["stats", "--older-than", "1d"])).0;
    let o = f.tool(&["stats", "--older-than", "1d", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        common::text_keys(&text),
        common::json_keys(&json, &["tables", "events_per_day"]),
        "{text}\n{json}"
    );
    let value = |key: &str| {
        text.split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("{key} missing: {text}"))
            .to_owned()
    };
    for key in [
        "oldest_received_at",
        "newest_received_at",
        "average_event_bytes",
        "largest_event_bytes",
        "inbox_bytes_per_event",
        "growth_bytes_per_day",
    ] {
        let json_value = match &json[key] {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        assert_eq!(value(key), json_value, "{key}");
    }
    // Sizes are whole bytes, and times RFC 3339 in UTC.
    assert!(json["average_event_bytes"].is_u64(), "{json}");
    assert!(
        rfc3339_utc(json["oldest_received_at"].as_str().unwrap()),
        "{json}"
    );
    assert!(
        rfc3339_utc(json["newest_received_at"].as_str().unwrap()),
        "{json}"
    );
}

/// Whether `time` is a date-time as the tools print them: RFC 3339 in UTC
/// (`2026-12-01T10:58:55Z`, with or without a fraction).
fn rfc3339_utc(time: &str) -> bool {
    let shape = |b: &[u8]| {
        b.len() == 20
            && b.iter().enumerate().all(|(i, c)| match i {
                4 | 7 => *c == b'-',
                10 => *c == b'T',
                13 | 16 => *c == b':',
                19 => *c == b'Z',
                _ => c.is_ascii_digit(),
            })
    };
    match time.split_once('.') {
        None => shape(time.as_bytes()),
        Some((seconds, fraction)) => {
            let digits = fraction.trim_end_matches('Z');
            fraction.ends_with('Z')
                && !digits.is_empty()
                && digits.bytes().all(|c| c.is_ascii_digit())
                && shape(format!("{seconds}Z").as_bytes())
        }
    }
}

#[tokio::test]
async fn inspect_event_shows_the_stored_row_and_its_body_only_when_asked() {
    inspect_event_shows_the_stored_row_and_its_body_only_when_asked_on(Filled::new().await).await;
}

#[tokio::test]
async fn on_postgres_inspect_event_shows_the_stored_row_and_its_body_only_when_asked() {
    inspect_event_shows_the_stored_row_and_its_body_only_when_asked_on(Filled::on_postgres().await)
        .await;
}

async fn inspect_event_shows_the_stored_row_and_its_body_only_when_asked_on(f: Filled) {
    let (_, v2) = &f.events[0];
    let o = f.tool(&["inspect", "event", v2]);
    let (stdout, stderr) = out(&o);
    assert!(o.status.success(), "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "{stdout}");
    let line = lines[0];
    for part in [
        format!("inbox receiver=task-result-view queue={}", f.scope.queue_id),
        format!("event={v2} sha256="),
        "applied=true received_at=".to_owned(),
        format!(
            "type=task.succeeded task={} version=2 state=SUCCEEDED",
            f.tasks[0]
        ),
        format!("result_bytes={}", SECRET_RESULT.len()),
    ] {
        assert!(line.contains(&part), "{part:?} not in {line}");
    }
    assert!(!stdout.contains("sentinel-result"));

    let o = f.tool(&["inspect", "event", v2, "--show-canonical"]);
    let (stdout, _) = out(&o);
    assert!(stdout.lines().nth(1).unwrap().starts_with("canonical={"));
    assert!(stdout.contains("sentinel-result"));
}

#[tokio::test]
async fn inspect_task_shows_its_view_and_its_events_in_version_order() {
    inspect_task_shows_its_view_and_its_events_in_version_order_on(Filled::new().await).await;
}

#[tokio::test]
async fn on_postgres_inspect_task_shows_its_view_and_its_events_in_version_order() {
    inspect_task_shows_its_view_and_its_events_in_version_order_on(Filled::on_postgres().await)
        .await;
}

async fn inspect_task_shows_its_view_and_its_events_in_version_order_on(f: Filled) {
    let task = &f.tasks[0];
    let o = f.tool(&["inspect", "task", task]);
    let (stdout, stderr) = out(&o);
    assert!(o.status.success(), "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{stdout}");
    assert!(lines[0].starts_with(&format!(
        "view receiver=task-result-view queue={} task={task} version=2 state=SUCCEEDED last_event={} applied_events=2 result_bytes={}",
        f.scope.queue_id, f.events[0].1, SECRET_RESULT.len()
    )), "{}", lines[0]);
    let versions: Vec<&str> = lines[1..]
        .iter()
        .map(|l| {
            l.split(" version=")
                .nth(1)
                .unwrap()
                .split(' ')
                .next()
                .unwrap()
        })
        .collect();
    assert_eq!(versions, ["1", "1", "2"]);
    let times: Vec<&str> = stdout
        .split_whitespace()
        .filter_map(|w| w.split_once('='))
        .filter(|(key, _)| key.ends_with("_at"))
        .map(|(_, value)| value)
        .collect();
    // The view's created_at and updated_at, each row's received_at and
    // occurred_at: one form, RFC 3339 in UTC.
    assert_eq!(times.len(), 2 + 3 * 2, "{stdout}");
    for time in times {
        assert!(rfc3339_utc(time), "{time} in {stdout}");
    }
    assert_eq!(
        lines[1..]
            .iter()
            .filter(|l| l.contains("applied=false"))
            .count(),
        1
    );
    assert!(!stdout.contains("sentinel-result"));
}

#[tokio::test]
async fn inspect_of_something_not_stored_exits_1_and_a_bad_id_exits_2() {
    inspect_of_something_not_stored_exits_1_and_a_bad_id_exits_2_on(Filled::new().await).await;
}

#[tokio::test]
async fn on_postgres_inspect_of_something_not_stored_exits_1_and_a_bad_id_exits_2() {
    inspect_of_something_not_stored_exits_1_and_a_bad_id_exits_2_on(Filled::on_postgres().await)
        .await;
}

async fn inspect_of_something_not_stored_exits_1_and_a_bad_id_exits_2_on(f: Filled) {
    let o = f.tool(&["inspect", "event", &random_hex(16)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(out(&o).1.contains("no inbox row for event"));
    let o = f.tool(&["inspect", "task", "not-an-id"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(out(&o).1.contains("32 lowercase hexadecimal"));
}

#[tokio::test]
async fn the_database_tools_on_a_database_without_the_tables_say_to_run_init_and_exit_2() {
    let db = TestDb::empty().await;
    tools_without_the_tables(&common::dsn_for(&db.name));
}

#[tokio::test]
async fn on_postgres_the_database_tools_on_a_database_without_the_tables_say_to_run_init_and_exit_2(
) {
    let db = PgTestDb::new().await;
    tools_without_the_tables(&db.dsn);
}

/// The database tools on a database without the receiver's tables, read
/// as `dsn`.
fn tools_without_the_tables(dsn: &str) {
    let task = random_hex(16);
    let event = random_hex(16);
    for args in [
        vec!["verify"],
        vec!["stats"],
        vec!["inspect", "event", &event],
        vec!["inspect", "task", &task],
    ] {
        let o = receiver()
            .args(&args)
            .env("ORBIT_RECEIVER_DSN", dsn)
            .output()
            .unwrap();
        let (_, stderr) = out(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(&format!("receiver: {}: table receiver_", args[0]))
                && stderr.contains("is missing (run `receiver init`"),
            "{args:?}: {stderr}"
        );
        // A read-only tool names the grant it needs, not the runtime's.
        assert!(
            stderr.contains("or grant this account SELECT on it)"),
            "{args:?}: {stderr}"
        );
        assert!(
            !stderr.contains("1146") && !stderr.contains("42P01"),
            "{args:?}: {stderr}"
        );
    }
}

#[tokio::test]
async fn subscribe_creates_a_subscription_on_the_queue_for_the_types_asked() {
    let orbit = OrbitDev::start(30_000, 5);
    let creds = orbit.bootstrap("tools-subscribe", None).await;
    let run = |args: &[&str]| {
        receiver()
            .arg("subscribe")
            .args(args)
            .env("ORBIT_CREDENTIALS_FILE", &creds.file)
            .output()
            .unwrap()
    };
    let o = run(&["--events", "task.cancelled,task.needs_review"]);
    let (stdout, stderr) = out(&o);
    assert!(o.status.success(), "{stderr}");
    let id = stdout
        .trim()
        .strip_prefix("subscription=")
        .unwrap()
        .to_owned();
    assert_eq!(id.len(), 32);
    let sub = orbit.get(&creds, &format!("/v1/subscriptions/{id}")).await;
    assert_eq!(sub["queue_id"], creds.queue_id.as_str());
    assert_eq!(
        sub["event_types"],
        serde_json::json!(["task.cancelled", "task.needs_review"])
    );
    assert_eq!(sub["enabled"], true);

    let o = run(&[]);
    let id = out(&o)
        .0
        .trim()
        .strip_prefix("subscription=")
        .unwrap()
        .to_owned();
    let sub = orbit.get(&creds, &format!("/v1/subscriptions/{id}")).await;
    assert_eq!(sub["event_types"].as_array().unwrap().len(), 5);
    assert!(!out(&o).0.contains(&creds.token) && !out(&o).1.contains(&creds.token));
}

#[tokio::test]
async fn subscribe_refuses_an_unknown_type_a_token_without_events_manage_or_a_wrong_token() {
    let orbit = OrbitDev::start(30_000, 5);
    let creds = orbit.bootstrap("tools-subscribe-refused", None).await;
    let o = receiver()
        .args(["subscribe", "--events", "task.cancelled,task.done"])
        .env("ORBIT_CREDENTIALS_FILE", &creds.file)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        out(&o).1.contains("\"task.done\" is not an event type"),
        "{}",
        out(&o).1
    );

    let reader = orbit
        .bootstrap(
            "tools-subscribe-refused",
            Some(&["events:read", "events:consume"]),
        )
        .await;
    let o = receiver()
        .arg("subscribe")
        .env("ORBIT_CREDENTIALS_FILE", &reader.file)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        out(&o)
            .1
            .contains("the token lacks the scope events:manage"),
        "{}",
        out(&o).1
    );

    let o = receiver()
        .arg("subscribe")
        .env("ORBIT_CREDENTIALS_FILE", &creds.file)
        .env("ORBIT_TOKEN", "not-the-token")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        out(&o)
            .1
            .contains("Orbit refused the token: Orbit answered 401"),
        "named as check and consume name it: {}",
        out(&o).1
    );
    let subs = orbit.get(&creds, "/v1/subscriptions").await;
    assert_eq!(subs["subscriptions"].as_array().unwrap().len(), 0);
}

#[tokio::test]
async fn verify_says_a_view_s_last_event_is_unreadable_instead_of_reading_it_as_version_0() {
    verify_says_a_view_s_last_event_is_unreadable_instead_of_reading_it_as_version_0_on(
        Filled::new().await,
    )
    .await;
}

#[tokio::test]
async fn on_postgres_verify_says_a_view_s_last_event_is_unreadable_instead_of_reading_it_as_version_0(
) {
    verify_says_a_view_s_last_event_is_unreadable_instead_of_reading_it_as_version_0_on(
        Filled::on_postgres().await,
    )
    .await;
}

async fn verify_says_a_view_s_last_event_is_unreadable_instead_of_reading_it_as_version_0_on(
    f: Filled,
) {
    let (_, v2) = &f.events[1];
    f.damage(&format!(
        "UPDATE receiver_inbox SET event_canonical = 'not an event' WHERE event_id = '{v2}'"
    ))
    .await;
    let (code, findings, _) = verify(&f);
    assert_eq!(code, Some(1));
    let mismatch: Vec<&String> = findings
        .iter()
        .filter(|l| l.starts_with("problem=last_event_mismatch "))
        .collect();
    assert_eq!(mismatch.len(), 1, "{findings:?}");
    assert!(
        mismatch[0].ends_with("its last event's stored text cannot be read as an event"),
        "{findings:?}"
    );
    assert!(!mismatch[0].contains("version 0 state"), "{findings:?}");
}

#[tokio::test]
async fn on_postgres_verify_by_a_role_that_may_not_read_the_tally_counts_no_pruned_row_it_cannot_see(
) {
    let f = Filled::on_postgres().await;
    let Server::Postgres(db) = &f.server else {
        unreachable!()
    };
    let role = format!("runtime_{}", random_hex(4));
    db.run_script(&format!(
        "CREATE ROLE {role} LOGIN; GRANT SELECT ON receiver_inbox, receiver_task_views TO {role};"
    ))
    .await
    .unwrap();
    let dsn = db.dsn.replacen("://postgres@", &format!("://{role}@"), 1);
    let (code, findings, summary) = verify_as(&dsn);
    assert_eq!(findings, Vec::<String>::new());
    assert_eq!(
        summary,
        "verify inbox_rows=7 task_views=3 pruned_rows=unknown problems=0 ok=true"
    );
    assert_eq!(code, Some(0));
}
