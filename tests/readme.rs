//! The documented paths from nothing to consumed results, run exactly as
//! they are written: the README's (Orbit), `docs/postgres.md`'s,
//! `docs/nats.md`'s (NATS JetStream, fed by `orbit-dev bridge`),
//! `docs/rabbitmq.md`'s (a RabbitMQ quorum queue, fed the same way) and
//! `docs/outbox.md`'s (to a signed webhook received and verified). The
//! same commands, with only the ports, the database and the working
//! directory made the test's own. What they print is held to the output
//! the document shows.

use crate::common;

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::orbit::{bin_dir, http};
use common::{dsn_for, random_hex, TestDb};
use result_inbox::ids::{EventId, QueueId, TaskId};
use result_inbox::orbit::{OrbitClient, OrbitUrl, Token};
use result_inbox::outbox::{EffectId, EffectKey, Target};
use result_inbox::scope::{InboxScope, ReceiverName};

/// The fenced block that follows `marker` in `document`.
fn block_after(document: &str, marker: &str) -> String {
    let after = document
        .split_once(marker)
        .unwrap_or_else(|| panic!("the document has no {marker}"))
        .1;
    let start = after.find("```").unwrap();
    let body = &after[start..];
    let body = &body[body.find('\n').unwrap() + 1..];
    body[..body.find("```").unwrap()].to_owned()
}

/// Whether `line` holds the pieces of `expected` (split at `…`) in order.
fn matches(line: &str, expected: &str) -> bool {
    let mut rest = line;
    for piece in expected.split('…').filter(|p| !p.is_empty()) {
        match rest.find(piece) {
            Some(at) => rest = &rest[at + piece.len()..],
            None => return false,
        }
    }
    true
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A document's commands running in a directory of their own, in a process
/// group of their own.
struct Path {
    run: Child,
    dir: PathBuf,
}

impl Path {
    /// Runs the commands after `<!-- {name}:commands -->` in `document`
    /// with each `(from, to)` of `replace` applied (every one must occur),
    /// and waits until every line after `<!-- {name}:output -->` has been
    /// printed, in order (stdout first, then stderr, as the test reads
    /// them).
    async fn run(document: &str, name: &str, replace: &[(&str, String)]) -> Path {
        let text = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(document),
        )
        .unwrap();
        let commands = block_after(&text, &format!("<!-- {name}:commands -->"));
        let mut expected = block_after(&text, &format!("<!-- {name}:output -->"));
        let mut script = commands.clone();
        for (from, to) in replace {
            assert!(script.contains(from), "{document} no longer says {from}");
            script = script.replace(from, to);
            expected = expected.replace(from, to);
        }
        let dir = std::env::temp_dir().join(format!("{name}-{}", random_hex(4)));
        std::fs::create_dir_all(&dir).unwrap();
        // The throwaway PostgreSQL's own client first, where there is one.
        let pg_bin = std::env::var("RESULT_INBOX_TEST_PG_BIN")
            .map(|dir| format!("{dir}:"))
            .unwrap_or_default();
        let path = format!(
            "{}:{pg_bin}{}",
            bin_dir().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let run = Command::new("bash")
            .args(["-c", &format!("set -e\n{script}")])
            .current_dir(&dir)
            .env("PATH", path)
            .env_remove("RECEIVER_LOG")
            .env_remove("RUST_LOG")
            .env_remove("RECEIVER_SOURCE")
            .env_remove("ORBIT_SUBSCRIPTION_ID")
            .env_remove("ORBIT_QUEUE_ID")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(dir.join("stdout")).unwrap())
            .stderr(std::fs::File::create(dir.join("stderr")).unwrap())
            // Its own process group, so that the test can stop all it started.
            .process_group(0)
            .spawn()
            .unwrap();
        let mut path = Path { run, dir };

        let deadline = Instant::now() + Duration::from_secs(60);
        let last = expected.lines().last().unwrap().to_owned();
        while !path.output().lines().any(|l| matches(l, &last)) {
            if path.run.try_wait().unwrap().is_some() || Instant::now() > deadline {
                path.stop();
                panic!(
                    "{document}'s commands did not reach {last:?}:\n{}",
                    path.output()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let printed = path.output();
        let mut lines = printed.lines();
        for want in expected.lines() {
            assert!(
                lines.any(|l| matches(l, want)),
                "{want:?} missing (or out of order) in:\n{printed}"
            );
        }
        path
    }

    fn output(&self) -> String {
        std::fs::read_to_string(self.dir.join("stdout")).unwrap()
            + &std::fs::read_to_string(self.dir.join("stderr")).unwrap()
    }

    fn file(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(name)).unwrap()
    }

    fn stop(&mut self) {
        // SAFETY: kill(2) with a negative pid signals the process group.
        unsafe {
            libc::kill(-(self.run.id() as i32), libc::SIGTERM);
        }
        let _ = self.run.wait();
    }
}

impl Drop for Path {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test]
async fn the_readme_path_from_nothing_to_consume_works_as_written() {
    let db = TestDb::empty().await;
    let port = free_port();
    let server = dsn_for(&db.name);
    let server = server
        .split_once('@')
        .and_then(|(_, rest)| rest.split_once('/'))
        .unwrap()
        .0;
    let database_port = server.rsplit_once(':').unwrap().1;
    // Accounts belong to the whole server: the runtime account gets a name
    // no other test uses.
    let runtime_account = format!("inbox_runtime_{}", random_hex(4));
    let mut path = Path::run(
        "README.md",
        "consume-path",
        &[
            ("127.0.0.1:8080", format!("127.0.0.1:{port}")),
            ("127.0.0.1:3306", server.to_owned()),
            ("--port=3306", format!("--port={database_port}")),
            ("receiver_example", db.name.clone()),
            ("inbox_runtime", runtime_account.clone()),
        ],
    )
    .await;
    assert!(
        path.file(".local/subscription")
            .starts_with("subscription="),
        "{}",
        path.output()
    );

    // And it consumes: a task submitted and cancelled on the queue ends in
    // the view, both events acknowledged.
    let (task, queue, token) = a_task_consumed_by(&path, port).await;
    path.stop();
    let scope = InboxScope::new(ReceiverName::default(), queue);
    let view = result_inbox::task_view::load(&db.pool().await, &scope, &task)
        .await
        .unwrap()
        .expect("the task's view");
    assert_eq!(view.last_state, "CANCELLED");
    assert!(!path.output().contains(&token), "the token was printed");
    // It consumed as the runtime account, which may not delete or change
    // the schema.
    let grants: Vec<String> =
        sqlx::query_scalar(&format!("SHOW GRANTS FOR '{runtime_account}'@'127.0.0.1'"))
            .fetch_all(&db.admin)
            .await
            .unwrap();
    let grants = grants.join("\n");
    assert!(
        grants.contains("GRANT SELECT, INSERT, UPDATE ON"),
        "{grants}"
    );
    for power in ["DELETE", "ALL PRIVILEGES", "CREATE", "DROP", "ALTER"] {
        assert!(!grants.contains(power), "{grants}");
    }
}

/// A task submitted and cancelled on the queue of the path's credentials,
/// once the path's consumer has ACKed both its events: the task, the
/// queue, and the token (which nothing may print).
async fn a_task_consumed_by(path: &Path, orbit_port: u16) -> (TaskId, QueueId, String) {
    let credentials: serde_json::Value =
        serde_json::from_str(&path.file(".local/inbox.credentials.json")).unwrap();
    let token = credentials["token"].as_str().unwrap().to_owned();
    let url = format!("http://127.0.0.1:{orbit_port}");
    let client = OrbitClient::new(
        OrbitUrl::parse(&url).unwrap(),
        Token::new(&token),
        Duration::from_secs(10),
    )
    .unwrap();
    let task = client.submit_task().await.unwrap();
    client.cancel_task(&task.id).await.unwrap();
    let subscription = path.file(".local/subscription");
    let subscription = subscription.trim().trim_start_matches("subscription=");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, body) = http(
            "GET",
            &format!("{url}/v1/subscriptions/{subscription}"),
            &token,
            String::new(),
        )
        .await;
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        if v["counts"]["acked"] == 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not consumed: {body}\n{}",
            path.output()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let queue = QueueId::parse(credentials["queue_id"].as_str().unwrap()).unwrap();
    (task.id, queue, token)
}

#[tokio::test]
async fn the_postgres_guide_s_path_from_nothing_to_consume_works_as_written() {
    let admin = common::postgres::admin_dsn();
    let server = admin
        .split_once('@')
        .and_then(|(_, rest)| rest.split_once('/'))
        .unwrap()
        .0
        .to_owned();
    let orbit_port = free_port();
    // Roles and databases belong to the whole server: each gets a name no
    // other test uses.
    let suffix = random_hex(4);
    let (database, owner, runtime, prune) = (
        format!("receiver_example_{suffix}"),
        format!("inbox_owner_{suffix}"),
        format!("inbox_runtime_{suffix}"),
        format!("inbox_prune_{suffix}"),
    );
    let mut path = Path::run(
        "docs/postgres.md",
        "pg-consume-path",
        &[
            ("127.0.0.1:8080", format!("127.0.0.1:{orbit_port}")),
            ("127.0.0.1:5432", server.clone()),
            ("receiver_example", database.clone()),
            ("inbox_owner", owner.clone()),
            ("inbox_runtime", runtime.clone()),
            ("inbox_prune", prune.clone()),
        ],
    )
    .await;
    let (task, queue, token) = a_task_consumed_by(&path, orbit_port).await;
    path.stop();
    assert!(!path.output().contains(&token), "the token was printed");

    let dsn_of = |role: &str| format!("postgres://{role}@{server}/{database}");
    let (admin_server, _) = admin.rsplit_once('/').unwrap();
    let db = sqlx::PgPool::connect(&format!("{admin_server}/{database}"))
        .await
        .unwrap();
    let (state, owned_by): (String, String) = sqlx::query_as(
        "SELECT v.last_state, (SELECT tableowner::text FROM pg_tables \
         WHERE tablename = 'receiver_task_views') \
         FROM receiver_task_views v WHERE v.queue_id = $1 AND v.task_id = $2",
    )
    .bind(queue.as_str())
    .bind(task.as_str())
    .fetch_one(&db)
    .await
    .unwrap();
    assert_eq!(state, "CANCELLED");
    assert_eq!(owned_by, owner, "init ran as the database's owner");
    // It consumed as the runtime role, which may not delete or change the
    // schema.
    let powers: (bool, bool, bool) = sqlx::query_as(
        "SELECT has_table_privilege($1, 'receiver_inbox', 'DELETE'), \
         has_schema_privilege($1, 'public', 'CREATE'), \
         has_table_privilege($1, 'receiver_pruned', 'SELECT')",
    )
    .bind(&runtime)
    .fetch_one(&db)
    .await
    .unwrap();
    assert_eq!(powers, (false, false, true));

    // The roles it made are the ones retention needs: the older event,
    // received long enough ago, pruned as the prune role, and verify as the
    // runtime role counts it and finds nothing wrong.
    sqlx::query("UPDATE receiver_inbox SET received_at = received_at - interval '30 days'")
        .execute(&db)
        .await
        .unwrap();
    let pruned = common::orbit::receiver()
        .args(["prune", "--older-than", "7d"])
        .env("RECEIVER_PRUNE_DSN", dsn_of(&prune))
        .env("ORBIT_QUEUE_ID", queue.as_str())
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&pruned.stdout);
    assert!(
        pruned.status.success() && printed.contains("deleted=1 "),
        "{printed}{}",
        String::from_utf8_lossy(&pruned.stderr)
    );
    let verified = common::orbit::receiver()
        .arg("verify")
        .env("ORBIT_RECEIVER_DSN", dsn_of(&runtime))
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&verified.stdout);
    assert_eq!(verified.status.code(), Some(0), "{printed}");
    assert!(
        printed.contains("pruned_rows=1 problems=0 ok=true"),
        "{printed}"
    );
    db.close().await;
}

#[tokio::test]
async fn the_outbox_guide_s_path_from_nothing_to_a_signed_webhook_received_and_verified_works_as_written(
) {
    let db = TestDb::empty().await;
    let (orbit_port, hook_port) = (free_port(), free_port());
    let server = dsn_for(&db.name);
    let server = server
        .split_once('@')
        .and_then(|(_, rest)| rest.split_once('/'))
        .unwrap()
        .0
        .to_owned();
    let database_port = server.rsplit_once(':').unwrap().1.to_owned();
    let runtime_account = format!("inbox_runtime_{}", random_hex(4));
    let mut path = Path::run(
        "docs/outbox.md",
        "outbox-path",
        &[
            ("127.0.0.1:8080", format!("127.0.0.1:{orbit_port}")),
            ("127.0.0.1:8090", format!("127.0.0.1:{hook_port}")),
            (
                "(\"127.0.0.1\", 8090)",
                format!("(\"127.0.0.1\", {hook_port})"),
            ),
            ("127.0.0.1:3306", server),
            ("--port=3306", format!("--port={database_port}")),
            ("receiver_example", db.name.clone()),
            ("inbox_runtime", runtime_account),
        ],
    )
    .await;

    // The task orbit-dev submitted went Orbit → inbox → outbox → relay →
    // the endpoint, which verified its signature with standardwebhooks,
    // under the id derived from its event.
    let printed = path.output();
    let task = printed
        .lines()
        .find_map(|l| l.strip_prefix("task="))
        .expect("a submitted task");
    let verified: Vec<&str> = printed
        .lines()
        .filter_map(|l| l.strip_prefix("verified "))
        .collect();
    assert_eq!(verified.len(), 1, "{printed}");
    let (webhook_id, body) = verified[0].split_once(' ').unwrap();
    let body: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(body["task_id"], task);
    let credentials: serde_json::Value =
        serde_json::from_str(&path.file(".local/inbox.credentials.json")).unwrap();
    let queue = QueueId::parse(credentials["queue_id"].as_str().unwrap()).unwrap();
    let event = body["event_id"].as_str().unwrap();
    let effect = EffectId::derive(
        &InboxScope::new(ReceiverName::default(), queue),
        &EventId::parse(event).unwrap(),
        &Target::parse("notify").unwrap(),
        &EffectKey::parse(event).unwrap(),
    );
    assert_eq!(webhook_id, effect.as_str());

    // The relay records it sent once the endpoint's 2xx came.
    let pool = db.pool().await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let state: Option<String> = sqlx::query_scalar(
            "SELECT CAST(state AS CHAR) FROM receiver_outbox WHERE effect_id = ?",
        )
        .bind(effect.as_str())
        .fetch_optional(&pool)
        .await
        .unwrap();
        if state.as_deref() == Some("sent") {
            break;
        }
        assert!(Instant::now() < deadline, "{state:?}\n{}", path.output());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let secret = path.file(".local/notify.secret");
    path.stop();
    assert!(
        !path.output().contains(secret.trim()),
        "the secret was printed"
    );
}

#[cfg(feature = "nats")]
#[tokio::test]
async fn the_nats_guide_s_path_from_nothing_to_applied_results_works_as_written() {
    let db = TestDb::empty().await;
    let nats = free_port();
    let mut path = Path::run(
        "docs/nats.md",
        "nats-path",
        &[
            ("127.0.0.1:8080", format!("127.0.0.1:{}", free_port())),
            ("127.0.0.1:4222", format!("127.0.0.1:{nats}")),
            ("--port 4222", format!("--port {nats}")),
            (
                "'mysql://root@127.0.0.1:3306/receiver_nats_example'",
                format!("'{}'", dsn_for(&db.name)),
            ),
        ],
    )
    .await;
    path.stop();

    // The task it submitted went Orbit → bridge → JetStream → inbox.
    the_submitted_task_was_applied_once(&path, &db).await;
}

#[cfg(feature = "rabbitmq")]
#[tokio::test]
async fn the_rabbitmq_guide_s_path_from_nothing_to_applied_results_works_as_written() {
    let db = TestDb::empty().await;
    let node = common::rabbitmq::RabbitNode::shared();
    let mut path = Path::run(
        "docs/rabbitmq.md",
        "rabbitmq-path",
        &[
            ("127.0.0.1:8080", format!("127.0.0.1:{}", free_port())),
            ("127.0.0.1:5672", format!("127.0.0.1:{}", node.port)),
            (
                "'mysql://root@127.0.0.1:3306/receiver_rabbitmq_example'",
                format!("'{}'", dsn_for(&db.name)),
            ),
        ],
    )
    .await;
    path.stop();

    // The task it submitted went Orbit → bridge → RabbitMQ → inbox.
    the_submitted_task_was_applied_once(&path, &db).await;
}

/// The task a guide's path submitted went from Orbit through the bridge
/// and the broker into the inbox and the task view, once, and the queue's
/// token was never printed.
#[cfg(any(feature = "nats", feature = "rabbitmq"))]
async fn the_submitted_task_was_applied_once(path: &Path, db: &TestDb) {
    let printed = path.output();
    let task = printed
        .lines()
        .find_map(|l| l.strip_prefix("task="))
        .expect("a submitted task");
    let credentials: serde_json::Value =
        serde_json::from_str(&path.file(".local/inbox.credentials.json")).unwrap();
    let queue = QueueId::parse(credentials["queue_id"].as_str().unwrap()).unwrap();
    let scope = InboxScope::new(ReceiverName::default(), queue);
    let task = TaskId::parse(task).expect("a task id");
    let view = result_inbox::task_view::load(&db.pool().await, &scope, &task)
        .await
        .unwrap()
        .expect("the task's view");
    assert_eq!(view.last_state, "PENDING");
    assert_eq!(view.applied_events, 1);
    let token = credentials["token"].as_str().unwrap();
    assert!(!printed.contains(token), "the token was printed");
}
