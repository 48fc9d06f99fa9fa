//! The operator tools on the outbox, run as an operator runs them against
//! a real server, on MySQL and on PostgreSQL: `receiver prune` deletes the
//! sent effects past its window, never a pending or dead one, and keeps
//! their events' inbox rows; `receiver verify` finds no orphan effect
//! after a prune and names a real one; `receiver stats` gives the outbox's
//! size and growth; `receiver check` checks the outbox without notify
//! settings where it is there.

use crate::common::{self, on_both};

use std::future::Future;
use std::process::Output;

use common::orbit::{receiver, OrbitDev};
use common::postgres::PgTestDb;
use common::{random_hex, scope, EventSpec, TestDb};
use result_inbox::db::schema::{self, InitOptions};
use result_inbox::db::{Dsn, Engine};
use result_inbox::ids::EventId;
use result_inbox::inbox::{InboxLayer, InboxStore, Outcome, StoreOptions};
use result_inbox::outbox::{EffectId, EffectKey, Target};
use result_inbox::scope::InboxScope;
use result_inbox::task_view::Notify;
use sqlx::{Connection, MySql, MySqlConnection, PgConnection, Postgres};
use tower::{ServiceBuilder, ServiceExt};

/// What these tests need of an engine: a database of their own with the
/// receiver's tables, prune's tally and the outbox; statements run as its
/// administrator; and the accounts the docs give.
trait Server: Engine {
    type Db: Send + Sync;
    /// The database, and its administrator's URL.
    fn database() -> impl Future<Output = (Self::Db, String)> + Send;
    /// Runs `sql` as the administrator.
    fn exec(url: &str, sql: &str) -> impl Future<Output = ()> + Send;
    /// A count, as the administrator reads it.
    fn count(url: &str, sql: &str) -> impl Future<Output = i64> + Send;
    /// The prune account as the docs grant it, `outbox` (e.g. `SELECT,
    /// DELETE`) on `receiver_outbox`, or nothing there when empty.
    fn prune_account(db: &Self::Db, outbox: &str) -> impl Future<Output = String> + Send;
    /// The runtime account as the docs grant it where the outbox and the
    /// tally are there, with `outbox` on `receiver_outbox`.
    fn runtime_account(db: &Self::Db, outbox: &str) -> impl Future<Output = String> + Send;
    /// A database a plain `receiver init` made, and its administrator's
    /// URL.
    fn without_outbox() -> impl Future<Output = (Self::Db, String)> + Send;
}

fn options() -> InitOptions {
    InitOptions {
        outbox: true,
        retention: true,
        ..InitOptions::default()
    }
}

impl Server for MySql {
    type Db = TestDb;
    async fn database() -> (TestDb, String) {
        let db = TestDb::empty().await;
        schema::init_with(&db.dsn, options()).await.unwrap();
        let url = common::dsn_for(&db.name);
        (db, url)
    }
    async fn exec(url: &str, sql: &str) {
        let mut conn = MySqlConnection::connect(url).await.unwrap();
        sqlx::query(sql).execute(&mut conn).await.unwrap();
    }
    async fn count(url: &str, sql: &str) -> i64 {
        let mut conn = MySqlConnection::connect(url).await.unwrap();
        sqlx::query_scalar(sql).fetch_one(&mut conn).await.unwrap()
    }
    async fn prune_account(db: &TestDb, outbox: &str) -> String {
        let mut grants = vec![
            "SELECT, DELETE ON `{db}`.receiver_inbox".to_owned(),
            "SELECT ON `{db}`.receiver_task_views".to_owned(),
            "SELECT, INSERT, UPDATE ON `{db}`.receiver_pruned".to_owned(),
        ];
        if !outbox.is_empty() {
            grants.push(format!("{outbox} ON `{{db}}`.receiver_outbox"));
        }
        let grants: Vec<&str> = grants.iter().map(String::as_str).collect();
        let (user, password) = db.user_with(&grants).await;
        db.dsn_of(&user, &password)
    }
    async fn runtime_account(db: &TestDb, outbox: &str) -> String {
        let outbox = format!("{outbox} ON `{{db}}`.receiver_outbox");
        let (user, password) = db
            .user_with(&[
                "SELECT, INSERT, UPDATE ON `{db}`.receiver_inbox",
                "SELECT, INSERT, UPDATE ON `{db}`.receiver_task_views",
                "SELECT ON `{db}`.receiver_pruned",
                &outbox,
            ])
            .await;
        db.dsn_of(&user, &password)
    }
    async fn without_outbox() -> (TestDb, String) {
        let db = TestDb::initialized().await;
        let url = common::dsn_for(&db.name);
        (db, url)
    }
}

impl Server for Postgres {
    type Db = PgTestDb;
    async fn database() -> (PgTestDb, String) {
        let db = PgTestDb::new().await;
        schema::init_with(&Dsn::parse(&db.dsn).unwrap(), options())
            .await
            .unwrap();
        let url = db.dsn.clone();
        (db, url)
    }
    async fn exec(url: &str, sql: &str) {
        let mut conn = PgConnection::connect(url).await.unwrap();
        sqlx::query(sql).execute(&mut conn).await.unwrap();
    }
    async fn count(url: &str, sql: &str) -> i64 {
        let mut conn = PgConnection::connect(url).await.unwrap();
        sqlx::query_scalar(sql).fetch_one(&mut conn).await.unwrap()
    }
    async fn prune_account(db: &PgTestDb, outbox: &str) -> String {
        let mut grants = "GRANT SELECT, DELETE ON receiver_inbox TO {role}; \
             GRANT SELECT ON receiver_task_views TO {role}; \
             GRANT SELECT, INSERT, UPDATE ON receiver_pruned TO {role};"
            .to_owned();
        if !outbox.is_empty() {
            grants.push_str(&format!(" GRANT {outbox} ON receiver_outbox TO {{role}};"));
        }
        db.role_with(&grants).await
    }
    async fn runtime_account(db: &PgTestDb, outbox: &str) -> String {
        db.role_with(&format!(
            "GRANT SELECT, INSERT, UPDATE ON receiver_inbox, receiver_task_views TO {{role}}; \
             GRANT SELECT ON receiver_pruned TO {{role}}; \
             GRANT {outbox} ON receiver_outbox TO {{role}};"
        ))
        .await
    }
    async fn without_outbox() -> (PgTestDb, String) {
        let db = PgTestDb::initialized().await;
        let url = db.dsn.clone();
        (db, url)
    }
}

/// The documented grant of the runtime account on the outbox.
const RUNTIME_OUTBOX: &str = "SELECT, INSERT, UPDATE";

/// Three tasks of two versions each applied by `receiver consume
/// --notify-url`'s inner service (one notification per event that
/// advanced the view), recorded 30 days ago, their notifications left as
/// a relay leaves them:
///
/// | task | v1 (older)        | v2 (the view's last event) |
/// |------|-------------------|----------------------------|
/// | `a`  | sent              | sent                       |
/// | `b`  | dead              | sent                       |
/// | `c`  | pending           | pending (behind v1)        |
///
/// and a fourth task applied now, its notification sent.
struct Notified<E: Server> {
    db: E::Db,
    admin: String,
    scope: InboxScope,
    /// Per old task, its two event ids.
    a: [String; 2],
    b: [String; 2],
    c: [String; 2],
    /// Task `c`'s id.
    task_c: String,
    /// The event applied now.
    fresh: String,
}

impl<E: Server> Notified<E> {
    async fn new() -> Self {
        let (db, admin) = E::database().await;
        let scope = scope("task-result-view");
        let dsn = Dsn::parse(&admin).unwrap();
        let store = InboxStore::<E>::open(&dsn, scope.clone(), StoreOptions::default())
            .await
            .unwrap();
        let queue = scope.queue_id.as_str().to_owned();
        let mut tasks = Vec::new();
        let task_c = random_hex(16);
        for task in [random_hex(16), random_hex(16), task_c.clone()] {
            tasks.push(two_versions(&store, &queue, &task).await);
        }
        for (table, column) in [
            ("receiver_inbox", "received_at"),
            ("receiver_outbox", "created_at"),
        ] {
            let aged = format!("UPDATE {table} SET {column} = {column} - INTERVAL '30' DAY");
            E::exec(&admin, &aged).await;
        }
        let fresh_task = random_hex(16);
        let fresh = EventSpec::submitted(&queue, &fresh_task);
        assert_eq!(apply(&store, &fresh.json()).await, Outcome::Applied);
        let [a, b, c]: [[String; 2]; 3] = tasks.try_into().unwrap();
        let f = Notified {
            db,
            admin,
            scope,
            a,
            b,
            c,
            task_c,
            fresh: fresh.id,
        };
        for event in [&f.a[0], &f.a[1], &f.b[1], &f.fresh] {
            f.settle(event, "sent").await;
        }
        f.settle(&f.b[0], "dead").await;
        f
    }

    /// Leaves `event`'s notification in `state` with one attempt, as the
    /// relay records it.
    async fn settle(&self, event: &str, state: &str) {
        let sent_at = if state == "sent" {
            "created_at"
        } else {
            "NULL"
        };
        let settled = format!(
            "UPDATE receiver_outbox SET state = '{state}', attempts = 1, last_result = '204', \
             sent_at = {sent_at} WHERE effect_id = '{}'",
            self.effect(event)
        );
        E::exec(&self.admin, &settled).await;
    }

    /// The id of `event`'s notification.
    fn effect(&self, event: &str) -> EffectId {
        EffectId::derive(
            &self.scope,
            &EventId::parse(event).unwrap(),
            &Target::parse("notify").unwrap(),
            &EffectKey::parse(event).unwrap(),
        )
    }

    /// The effects left, by their event: id and state, in event order.
    async fn effects_left(&self) -> Vec<(String, String)> {
        let mut left = Vec::new();
        for event in self.events() {
            for state in ["pending", "sent", "dead"] {
                let sql = format!(
                    "SELECT count(*) FROM receiver_outbox WHERE event_id = '{event}' \
                     AND state = '{state}'"
                );
                if E::count(&self.admin, &sql).await > 0 {
                    left.push((event.clone(), state.to_owned()));
                }
            }
        }
        left
    }

    /// The inbox rows left, in event order.
    async fn rows_left(&self) -> Vec<String> {
        let mut left = Vec::new();
        for event in self.events() {
            let sql = format!("SELECT count(*) FROM receiver_inbox WHERE event_id = '{event}'");
            if E::count(&self.admin, &sql).await > 0 {
                left.push(event.clone());
            }
        }
        left
    }

    fn events(&self) -> Vec<&String> {
        [&self.a, &self.b, &self.c]
            .into_iter()
            .flatten()
            .chain([&self.fresh])
            .collect()
    }

    fn prune_as(&self, account: &str, args: &[&str]) -> Output {
        receiver()
            .args(["prune", "--older-than", "7d"])
            .args(args)
            .env("RECEIVER_PRUNE_DSN", account)
            .env("RECEIVER_NAME", self.scope.receiver.as_str())
            .env("ORBIT_QUEUE_ID", self.scope.queue_id.as_str())
            .env_remove("RECEIVER_PRUNE_MIN_RETENTION")
            .output()
            .unwrap()
    }

    async fn prune(&self, args: &[&str]) -> Output {
        let account = E::prune_account(&self.db, "SELECT, DELETE").await;
        self.prune_as(&account, args)
    }
}

/// Applies versions 1 and 2 of a new task through the notifying view;
/// their event ids.
async fn two_versions<E: Engine>(store: &InboxStore<E>, queue: &str, task: &str) -> [String; 2] {
    let v1 = EventSpec::submitted(queue, task);
    let v2 = EventSpec {
        id: random_hex(16),
        version: 2,
        event_type: "task.succeeded",
        state: "SUCCEEDED",
        result: Some(r#"{"ok":true}"#),
        ..EventSpec::submitted(queue, task)
    };
    for event in [&v1, &v2] {
        assert_eq!(apply(store, &event.json()).await, Outcome::Applied);
    }
    [v1.id, v2.id]
}

async fn apply<E: Engine>(store: &InboxStore<E>, json: &str) -> Outcome {
    ServiceBuilder::new()
        .layer(InboxLayer::new(store.clone()))
        .service(Notify::new("notify").unwrap())
        .oneshot(common::delivery_of(json))
        .await
        .unwrap()
        .outcome
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `receiver verify` as the account of `url`: exit code, finding lines,
/// summary line.
fn verify_as(url: &str) -> (Option<i32>, Vec<String>, String) {
    let o = receiver()
        .arg("verify")
        .env("ORBIT_RECEIVER_DSN", url)
        .output()
        .unwrap();
    let mut lines: Vec<String> = stdout(&o).lines().map(str::to_owned).collect();
    let summary = lines.pop().unwrap_or_default();
    (o.status.code(), lines, summary)
}

async fn prune_deletes_the_sent_effects_past_its_window_and_keeps_pending_and_dead_ones_with_their_events<
    E: Server,
>() {
    let f = Notified::<E>::new().await;
    let o = f.prune(&[]).await;
    assert!(o.status.success(), "{}", text(&o));
    // a's two sent effects and b's sent one go; a's older row, its effect
    // gone, goes too; b's and c's older rows stay for their dead and
    // pending effects; each view's last event stays.
    assert!(
        stdout(&o).starts_with("prune deleted=1 ")
            && stdout(&o)
                .contains(" kept_latest=3 kept_unreadable=0 kept_effects=2 effects_deleted=3 "),
        "{}",
        text(&o)
    );
    let state = |event: &String, state: &str| (event.clone(), state.to_owned());
    assert_eq!(
        f.effects_left().await,
        [
            state(&f.b[0], "dead"),
            state(&f.c[0], "pending"),
            state(&f.c[1], "pending"),
            state(&f.fresh, "sent"),
        ],
        "never a pending or dead effect, nor a sent one within the window"
    );
    assert_eq!(
        f.rows_left().await,
        [&f.a[1], &f.b[0], &f.b[1], &f.c[0], &f.c[1], &f.fresh].map(String::clone)
    );

    // A second run finds nothing more to do.
    let o = f.prune(&["--json"]).await;
    let summary: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (
            &summary["deleted"],
            &summary["effects_deleted"],
            &summary["kept_effects"]
        ),
        (&0.into(), &0.into(), &2.into()),
        "{summary}"
    );
}

async fn a_dry_run_counts_the_effects_prune_would_delete_and_the_rows_they_keep<E: Server>() {
    let f = Notified::<E>::new().await;
    let o = f.prune(&["--dry-run"]).await;
    assert!(o.status.success(), "{}", text(&o));
    let line = stdout(&o);
    assert!(
        line.starts_with("prune dry_run=true past_window=6 "),
        "{line}"
    );
    assert!(
        line.trim_end()
            .ends_with(" kept_latest=3 kept_effects=2 would_delete=1 would_delete_effects=3"),
        "{line}"
    );
    assert_eq!(f.effects_left().await.len(), 7, "a dry run deletes nothing");
    assert_eq!(f.rows_left().await.len(), 7);
}

/// The value of `key=` in a `key=value` line.
fn field<'a>(line: &'a str, key: &str) -> &'a str {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
}

async fn verify_after_a_prune_finds_no_orphan_effect_and_names_one_whose_event_is_gone<
    E: Server,
>() {
    let f = Notified::<E>::new().await;
    assert!(f.prune(&[]).await.status.success());
    let runtime = E::runtime_account(&f.db, RUNTIME_OUTBOX).await;
    let (code, findings, summary) = verify_as(&runtime);
    assert_eq!(code, Some(0), "{findings:?} {summary}");
    assert_eq!(
        summary,
        "verify inbox_rows=6 task_views=4 pruned_rows=1 effects=4 problems=0 ok=true"
    );

    // An inbox row deleted, and counted in the tally, by a prune that
    // looked at no outbox: its pending effect is an orphan.
    let gone = &f.c[0];
    E::exec(
        &f.admin,
        &format!("DELETE FROM receiver_inbox WHERE event_id = '{gone}'"),
    )
    .await;
    E::exec(
        &f.admin,
        &format!(
            "INSERT INTO receiver_pruned (consumer_name, queue_id, task_id, pruned_events, \
             pruned_applied, pruned_bytes, last_pruned_at) \
             VALUES ('{}', '{}', '{}', 1, 1, 0, CURRENT_TIMESTAMP)",
            f.scope.receiver, f.scope.queue_id, f.task_c
        ),
    )
    .await;
    let (code, findings, summary) = verify_as(&runtime);
    assert_eq!(code, Some(1), "{findings:?} {summary}");
    assert_eq!(
        findings,
        [format!(
            "problem=orphan_effect receiver=task-result-view queue={} event={gone}: effect {} \
             (target notify, pending) belongs to an event the inbox does not hold",
            f.scope.queue_id,
            f.effect(gone)
        )]
    );
    assert!(
        summary.ends_with(" effects=4 problems=1 ok=false"),
        "{summary}"
    );
}

async fn a_prune_account_that_may_not_delete_effects_is_refused_and_check_prune_names_the_grant<
    E: Server,
>() {
    let f = Notified::<E>::new().await;
    let select_only = E::prune_account(&f.db, "SELECT").await;
    let o = f.prune_as(&select_only, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("the account may not DELETE receiver_outbox"),
        "{}",
        text(&o)
    );
    assert_eq!(f.rows_left().await.len(), 7, "nothing was deleted");

    let check = |account: &str| {
        receiver()
            .args(["check", "--prune"])
            .env("RECEIVER_PRUNE_DSN", account)
            .output()
            .unwrap()
    };
    let o = check(&select_only);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        stdout(&o).contains("check=privileges FAIL the account may not DELETE receiver_outbox"),
        "{}",
        text(&o)
    );
    let documented = E::prune_account(&f.db, "SELECT, DELETE").await;
    let o = check(&documented);
    assert!(o.status.success(), "{}", text(&o));
}

async fn stats_gives_the_outbox_s_effects_by_state_its_size_and_growth_in_text_and_json<
    E: Server,
>() {
    let f = Notified::<E>::new().await;
    let runtime = E::runtime_account(&f.db, RUNTIME_OUTBOX).await;
    let stats = |args: &[&str]| {
        receiver()
            .arg("stats")
            .args(args)
            .env("ORBIT_RECEIVER_DSN", &runtime)
            .output()
            .unwrap()
    };
    let o = stats(&["--older-than", "1d"]);
    assert!(o.status.success(), "{}", text(&o));
    let printed = stdout(&o);
    assert!(
        printed.contains("\ntable=receiver_outbox rows=7 data_bytes="),
        "{printed}"
    );
    // One effect recorded today (the others 30 days ago, out of range).
    let today = printed.lines().rfind(|l| l.starts_with("day=")).unwrap();
    assert!(today.ends_with(" events=1 effects=1"), "{today}");
    let outbox = printed.lines().last().unwrap();
    assert!(
        outbox.starts_with("outbox pending=2 sent=4 dead=1 oldest_pending_age_s="),
        "{printed}"
    );
    assert!(
        field(outbox, "oldest_pending_age_s")
            .parse::<u64>()
            .unwrap()
            >= 30 * 86_400
    );
    assert!(field(outbox, "bytes_per_effect").parse::<u64>().unwrap() > 0);
    assert_eq!(field(outbox, "average_effects_per_day"), "0");

    let o = stats(&["--older-than", "1d", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(json["outbox"]["pending"], 2);
    assert_eq!(json["outbox"]["sent"], 4);
    assert_eq!(json["outbox"]["dead"], 1);
    assert_eq!(json["tables"][2]["table"], "receiver_outbox");
    assert_eq!(json["events_per_day"][29]["effects"], 1);
    assert_eq!(
        common::text_keys(&printed),
        common::json_keys(&json, &["tables", "events_per_day"]),
        "the same keys in text and JSON"
    );
}

async fn check_checks_the_outbox_and_skip_locked_without_notify_settings_where_it_is_there<
    E: Server,
>() {
    let f = Notified::<E>::new().await;
    let (_orbit, creds, sub) = OrbitDev::subscribed(30_000, 5, "outbox-check").await;
    let check = |account: &str| {
        receiver()
            .arg("check")
            .env("ORBIT_CREDENTIALS_FILE", &creds.file)
            .env("ORBIT_SUBSCRIPTION_ID", sub.as_str())
            .env("ORBIT_RECEIVER_DSN", account)
            .output()
            .unwrap()
    };
    let outbox_line = |o: &Output| {
        stdout(o)
            .lines()
            .find(|l| l.starts_with("check=outbox "))
            .map(str::to_owned)
    };
    let documented = E::runtime_account(&f.db, RUNTIME_OUTBOX).await;
    let o = check(&documented);
    assert!(o.status.success(), "{}", text(&o));
    // The table, its grants and the server's SKIP LOCKED.
    assert_eq!(
        outbox_line(&o).as_deref(),
        Some("check=outbox ok"),
        "{}",
        text(&o)
    );

    let read_only = E::runtime_account(&f.db, "SELECT").await;
    let o = check(&read_only);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert_eq!(
        outbox_line(&o).as_deref(),
        Some(
            "check=outbox FAIL the account may not INSERT receiver_outbox (the runtime account \
             needs SELECT, INSERT, UPDATE on every receiver table it uses)"
        ),
        "{}",
        text(&o)
    );

    // Where it is not there, nothing needs it.
    let (_other, without) = E::without_outbox().await;
    let o = check(&without);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(outbox_line(&o), None, "{}", text(&o));
}

#[tokio::test]
async fn on_postgres_verify_by_a_role_that_may_not_read_the_outbox_says_effects_unknown() {
    let f = Notified::<Postgres>::new().await;
    let role =
        f.db.role_with(
            "GRANT SELECT ON receiver_inbox, receiver_task_views, receiver_pruned TO {role};",
        )
        .await;
    let (code, _, summary) = verify_as(&role);
    assert_eq!(code, Some(0), "{summary}");
    assert_eq!(
        summary,
        "verify inbox_rows=7 task_views=4 pruned_rows=0 effects=unknown problems=0 ok=true"
    );
}

on_both!(
    prune_deletes_the_sent_effects_past_its_window_and_keeps_pending_and_dead_ones_with_their_events,
    a_dry_run_counts_the_effects_prune_would_delete_and_the_rows_they_keep,
    verify_after_a_prune_finds_no_orphan_effect_and_names_one_whose_event_is_gone,
    a_prune_account_that_may_not_delete_effects_is_refused_and_check_prune_names_the_grant,
    stats_gives_the_outbox_s_effects_by_state_its_size_and_growth_in_text_and_json,
    check_checks_the_outbox_and_skip_locked_without_notify_settings_where_it_is_there,
);
