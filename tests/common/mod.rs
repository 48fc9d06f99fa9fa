//! Shared set-up for the tests that need a real MySQL-compatible server.
//!
//! The server is the throwaway one `scripts/with-mysql.sh` starts (`make test`,
//! `make integration`). Each test gets its own fresh database on it, so tests
//! run in parallel without seeing each other's rows and schema assertions
//! read exactly one schema.
#![allow(dead_code)]

pub mod commit_proxy;
pub mod consume;
pub mod deploy;
pub mod fill;
pub mod galera;
pub mod http_proxy;
pub mod metrics;
pub mod mysqld;
#[cfg(feature = "nats")]
pub mod nats;
pub mod orbit;
#[cfg(feature = "otel")]
pub mod otlp;
pub mod postgres;
#[cfg(feature = "rabbitmq")]
pub mod rabbitmq;
pub mod tls;
pub mod webhook;

/// Runs each named test, a `fn name<E>()` generic over the engine, once
/// on MySQL and once on PostgreSQL (`mod on_mysql`, `mod on_postgres`);
/// `multi_thread:` first gives each a runtime of two worker threads, for
/// the tests that run real processes beside a relay or a consumer.
#[allow(unused_macros)]
macro_rules! on_both {
    (multi_thread: $($name:ident),* $(,)?) => {
        mod on_mysql {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $name() { super::$name::<sqlx::MySql>().await })*
        }
        mod on_postgres {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $name() { super::$name::<sqlx::Postgres>().await })*
        }
    };
    ($($name:ident),* $(,)?) => {
        mod on_mysql {
            $(#[tokio::test] async fn $name() { super::$name::<sqlx::MySql>().await })*
        }
        mod on_postgres {
            $(#[tokio::test] async fn $name() { super::$name::<sqlx::Postgres>().await })*
        }
    };
}
#[allow(unused_imports)]
pub(crate) use on_both;

use std::sync::atomic::{AtomicU32, Ordering};

use result_inbox::db::Dsn;
use result_inbox::ids::QueueId;
use result_inbox::inbox::{InboxStore, StoreOptions};
use result_inbox::scope::{InboxScope, ReceiverName};
use sqlx::mysql::MySqlPool;
use sqlx::Executor;

/// The admin DSN of the throwaway server. Tests never run against any other
/// server: without it they stop and say how to run them.
pub fn admin_dsn() -> String {
    std::env::var("RESULT_INBOX_TEST_ADMIN_DSN").unwrap_or_else(|_| {
        panic!(
            "RESULT_INBOX_TEST_ADMIN_DSN is not set: run the integration tests with \
             `make test` or `scripts/with-mysql.sh cargo test`, which start a throwaway server"
        )
    })
}

/// A URL of the throwaway server naming `database`.
pub fn dsn_for(database: &str) -> String {
    let admin = admin_dsn();
    let base = admin.rsplit_once('/').map(|(b, _)| b).unwrap_or(&admin);
    format!("{base}/{database}")
}

/// A fresh, empty database of its own.
pub struct TestDb {
    pub name: String,
    pub dsn: Dsn,
    pub admin: MySqlPool,
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

impl TestDb {
    /// Creates an empty database `orbit_receiver_test_<unique>`.
    pub async fn empty() -> TestDb {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = format!(
            "orbit_receiver_test_{}_{}_{}",
            std::process::id(),
            n,
            random_hex(4)
        );
        let admin = MySqlPool::connect(&admin_dsn())
            .await
            .expect("connect to the throwaway server");
        admin
            .execute(format!("CREATE DATABASE `{name}` CHARACTER SET utf8mb4").as_str())
            .await
            .expect("create test database");
        let dsn = Dsn::parse(&dsn_for(&name)).unwrap();
        TestDb { name, dsn, admin }
    }

    /// A fresh database with the receiver schema.
    pub async fn initialized() -> TestDb {
        let db = TestDb::empty().await;
        result_inbox::db::schema::init(&db.dsn)
            .await
            .expect("schema init");
        db
    }

    /// A fresh database with the receiver schema and `receiver prune`'s
    /// tally, as `receiver init --retention` creates them.
    pub async fn initialized_with_retention() -> TestDb {
        let db = TestDb::empty().await;
        let options = result_inbox::db::schema::InitOptions {
            retention: true,
            ..Default::default()
        };
        result_inbox::db::schema::init_with(&db.dsn, options)
            .await
            .expect("schema init with the retention tally");
        db
    }

    /// A store for a fresh random scope in this database.
    pub async fn store(&self, scope: InboxScope) -> InboxStore {
        InboxStore::connect(&self.dsn, scope, StoreOptions::default())
            .await
            .expect("connect store")
    }

    /// Inserts the inbox row of `event` for the default receiver name in a
    /// transaction left open: a consumer's INSERT of the same event waits
    /// on its key until the returned transaction ends (roll it back).
    pub async fn hold_inbox_key(
        &self,
        queue_id: &str,
        event_id: &str,
    ) -> sqlx::Transaction<'static, sqlx::MySql> {
        let mut blocker = self.pool().await.begin().await.unwrap();
        sqlx::query(
            "INSERT INTO receiver_inbox (consumer_name, queue_id, event_id, event_digest, \
             event_canonical, applied, received_at) VALUES (?, ?, ?, ?, '{}', 1, UTC_TIMESTAMP(6))",
        )
        .bind(ReceiverName::DEFAULT)
        .bind(queue_id)
        .bind(event_id)
        .bind("0".repeat(64))
        .execute(&mut *blocker)
        .await
        .unwrap();
        blocker
    }

    /// A foreign key from the task views to the inbox, which `schema.sql`
    /// never creates: for proving that the count is measured.
    pub async fn add_foreign_key(&self) {
        sqlx::query(
            "ALTER TABLE receiver_task_views ADD CONSTRAINT added_by_hand FOREIGN KEY \
             (consumer_name, queue_id, last_event_id) \
             REFERENCES receiver_inbox (consumer_name, queue_id, event_id)",
        )
        .execute(&self.pool().await)
        .await
        .unwrap();
    }

    /// A new account with a password and exactly `grants` (`{db}` stands
    /// for this database's name); returns (user, password).
    pub async fn user_with(&self, grants: &[&str]) -> (String, String) {
        let user = format!("ri_{}", random_hex(4));
        let password = format!("pw-{}", random_hex(8));
        sqlx::query(&format!(
            "CREATE USER '{user}'@'%' IDENTIFIED BY '{password}'"
        ))
        .execute(&self.admin)
        .await
        .unwrap();
        for grant in grants {
            let grant = grant.replace("{db}", &self.name);
            sqlx::query(&format!("GRANT {grant} TO '{user}'@'%'"))
                .execute(&self.admin)
                .await
                .unwrap();
        }
        (user, password)
    }

    /// This database's URL for `user`.
    pub fn dsn_of(&self, user: &str, password: &str) -> String {
        dsn_for(&self.name).replacen("root@", &format!("{user}:{password}@"), 1)
    }

    /// Every row of both tables, in key order, as far as a test compares
    /// them: each inbox row's event and `applied`, each view's task,
    /// version, advances and last event. What must not change is compared
    /// whole.
    pub async fn rows(&self) -> Rows {
        let pool = self.pool().await;
        let inbox =
            sqlx::query_as("SELECT event_id, applied FROM receiver_inbox ORDER BY event_id")
                .fetch_all(&pool)
                .await
                .unwrap();
        let views = sqlx::query_as(
            "SELECT task_id, task_version, applied_events, last_event_id \
             FROM receiver_task_views ORDER BY task_id",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        Rows { inbox, views }
    }

    /// `LOCK TABLES receiver_inbox WRITE` on a connection of its own: a
    /// fault an operator can fix, which every apply waits on (and the
    /// receiver's start-up checks too) until [`TableLock::release`].
    pub async fn lock_inbox(&self) -> TableLock {
        use sqlx::Connection;
        let mut conn = sqlx::MySqlConnection::connect_with(
            &self.dsn.mysql_options().expect("a MySQL address"),
        )
        .await
        .unwrap();
        sqlx::query("LOCK TABLES receiver_inbox WRITE")
            .execute(&mut conn)
            .await
            .unwrap();
        TableLock(conn)
    }

    /// The DSN of a new account that may only `SELECT` in this database.
    pub async fn reader_dsn(&self) -> String {
        let (user, password) = self.user_with(&["SELECT ON `{db}`.*"]).await;
        self.dsn_of(&user, &password)
    }

    /// A plain pool on this database, for reading what was committed.
    pub async fn pool(&self) -> MySqlPool {
        MySqlPool::connect_with(self.dsn.mysql_options().expect("a MySQL address"))
            .await
            .expect("connect pool")
    }
}

/// A table lock held by [`TestDb::lock_inbox`].
pub struct TableLock(sqlx::MySqlConnection);

impl TableLock {
    pub async fn release(mut self) {
        sqlx::query("UNLOCK TABLES")
            .execute(&mut self.0)
            .await
            .unwrap();
    }
}

/// What [`TestDb::rows`] reads.
#[derive(Debug, PartialEq, Eq)]
pub struct Rows {
    /// Event id, applied.
    pub inbox: Vec<(Vec<u8>, bool)>,
    /// Task id, version, applied events, last event id.
    pub views: Vec<(Vec<u8>, u64, u64, Vec<u8>)>,
}

/// Inserts an inbox row for `event` of `receiver` and `queue` on `conn`
/// (a rival's transaction, left open to hold the row's key): a digest of
/// zeros, no body, not applied.
pub async fn insert_inbox_row(
    conn: &mut sqlx::MySqlConnection,
    receiver: &str,
    queue: &str,
    event: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO receiver_inbox VALUES (?, ?, ?, REPEAT('0', 64), '{}', 0, UTC_TIMESTAMP(6))",
    )
    .bind(receiver)
    .bind(queue)
    .bind(event)
    .execute(conn)
    .await
    .map(drop)
}

/// `receiver init --outbox`'s tables (the receiver's and the outbox) in
/// the database `dsn` names, on either engine.
pub async fn init_outbox(dsn: &Dsn) {
    let options = result_inbox::db::schema::InitOptions {
        outbox: true,
        ..Default::default()
    };
    result_inbox::db::schema::init_with(dsn, options)
        .await
        .expect("init --outbox");
}

/// What the throwaway MySQL server's general log holds so far: every
/// test's statements, bound bytes that are not UTF-8 among them (an
/// effect's body), replaced.
pub fn general_log() -> String {
    let dir =
        std::env::var("RESULT_INBOX_TEST_MYSQL_DIR").expect("run through scripts/with-mysql.sh");
    let log = std::fs::read(std::path::Path::new(&dir).join("general.log")).unwrap();
    String::from_utf8_lossy(&log).into_owned()
}

/// A scope with a new random queue and the given receiver name.
/// One delivery of `json` through `InboxLayer` over `TaskView` on `store`,
/// as the consumer would run it.
pub async fn apply_once(
    store: &InboxStore,
    json: &str,
) -> Result<result_inbox::inbox::Receipt, result_inbox::inbox::InboxError> {
    use tower::ServiceExt;
    receiver(store).oneshot(delivery_of(json)).await
}

/// A first delivery of `json`, with a new delivery id.
pub fn delivery_of(json: &str) -> result_inbox::delivery::Delivery<bytes::Bytes> {
    result_inbox::delivery::Delivery::new(
        result_inbox::delivery::DeliveryId::new(random_hex(16)),
        bytes::Bytes::from(json.to_owned()),
    )
    .with_attempt(1)
}

/// The inbox layer as the receiver runs it: one transaction per delivery,
/// or batching mode when `RECEIVER_BATCH_MAX` is set, as for `receiver
/// consume` (`make test` runs the crash-window and cluster tests in both).
pub fn inbox_layer<E: result_inbox::db::Engine>(
    store: &InboxStore<E>,
) -> result_inbox::inbox::InboxLayer<E> {
    let batch = std::env::var("RECEIVER_BATCH_MAX")
        .ok()
        .map(|n| n.parse().expect("RECEIVER_BATCH_MAX is a number"));
    sized_layer(store, batch, 4).0
}

/// The inbox layer in `transactions` at once, batching `batch` deliveries
/// per transaction over the task view's set path if given, and how many
/// callers fill it: one per transaction, or a full batch for each.
pub fn sized_layer<E: result_inbox::db::Engine>(
    store: &InboxStore<E>,
    batch: Option<usize>,
    transactions: usize,
) -> (result_inbox::inbox::InboxLayer<E>, usize) {
    let layer = result_inbox::inbox::InboxLayer::new(store.clone());
    match batch {
        None => (layer, transactions),
        Some(n) => {
            let batching = result_inbox::inbox::Batching::<E>::up_to(n)
                .transactions(transactions)
                .set_path(result_inbox::task_view::TaskView::new());
            (layer.batching(batching), transactions * n)
        }
    }
}

/// The receiver's service on `store`: [`inbox_layer`] over the task view.
pub fn receiver<E: result_inbox::db::Engine>(
    store: &InboxStore<E>,
) -> result_inbox::inbox::Inbox<result_inbox::task_view::TaskView, E> {
    tower::ServiceBuilder::new()
        .layer(inbox_layer(store))
        .service(result_inbox::task_view::TaskView::new())
}

pub fn scope(name: &str) -> InboxScope {
    InboxScope::new(
        ReceiverName::parse(name).unwrap(),
        QueueId::parse(&random_hex(16)).unwrap(),
    )
}

/// `bytes` random bytes as lowercase hex.
pub fn random_hex(bytes: usize) -> String {
    let mut out = String::with_capacity(bytes * 2);
    let mut state = seed();
    for _ in 0..bytes {
        // xorshift64*: enough to keep test names and ids apart.
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        let b = (state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8;
        out.push_str(&format!("{b:02x}"));
    }
    out
}

fn seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.finish() | 1
}

/// An Orbit event envelope as JSON text.
pub struct EventSpec<'a> {
    pub id: String,
    pub queue_id: &'a str,
    pub task_id: &'a str,
    pub version: u64,
    pub event_type: &'a str,
    pub state: &'a str,
    pub result: Option<&'a str>,
}

impl<'a> EventSpec<'a> {
    /// The first event of a task: `task.submitted`, version 1, `PENDING`,
    /// with a new event id.
    pub fn submitted(queue_id: &'a str, task_id: &'a str) -> Self {
        EventSpec {
            id: random_hex(16),
            queue_id,
            task_id,
            version: 1,
            event_type: "task.submitted",
            state: "PENDING",
            result: None,
        }
    }

    pub fn json(&self) -> String {
        let result = self
            .result
            .map(|r| format!(r#","result":{r}"#))
            .unwrap_or_default();
        format!(
            r#"{{"id":"{}","type":"{}","queue_id":"{}","occurred_at":"2026-11-30T16:02:44.5+08:00","task":{{"id":"{}","version":{},"state":"{}"{}}}}}"#,
            self.id, self.event_type, self.queue_id, self.task_id, self.version, self.state, result
        )
    }
}

/// A small `task.succeeded` event of a new task on `queue`, with a result
/// of mixed scripts and a long number: what the benchmarks deliver.
pub fn small_event(queue: &str) -> String {
    EventSpec {
        id: random_hex(16),
        queue_id: queue,
        task_id: &random_hex(16),
        version: 2,
        event_type: "task.succeeded",
        state: "SUCCEEDED",
        result: Some(r#"{"rows":1234,"total":123456789012345678901234567890,"message":"Verarbeitung abgeschlossen – 处理完成","ratio":1.10}"#),
    }
    .json()
}

/// Sends SIGTERM, as a service manager would.
/// Bodies that are not events, each unreadable in its own way: a delivery
/// carrying one must be refused on its own, its neighbours applied. `event`
/// is a valid event, which one of them spoils with trailing garbage.
pub fn unreadable_bodies(event: &str) -> Vec<(&'static str, String)> {
    vec![
        ("not json", "garbage{".to_owned()),
        ("empty", String::new()),
        (
            "a truncated object",
            r#"{"id":"0123456789abcdef","type":"task.su"#.to_owned(),
        ),
        ("600 KiB of non-JSON", "x{".repeat(300 * 1024)),
        (
            "a delivery id and braces in odd places",
            r#"},"delivery_id":"ffffffffffffffffffffffffffffffff","lease_proof":"lp_spoof"} {"#
                .to_owned(),
        ),
        (
            "a valid event and trailing garbage",
            format!("{event}garbage"),
        ),
    ]
}

pub fn sigterm(pid: u32) {
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    // A failure means the process is already gone, which the caller notices
    // when it waits for it.
    unsafe {
        libc::kill(pid as libc::pid_t, libc::SIGTERM);
    }
}

/// CPU seconds (user + system) a process has used so far, from /proc.
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // After the command name (in parentheses) utime and stime are the 12th
    // and 13th fields, in clock ticks (100 per second on Linux).
    let after = stat.rsplit_once(')').map(|(_, a)| a).unwrap_or("");
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

/// Seconds the threads of a process have spent runnable but waiting for a
/// CPU so far (the second field of each thread's /proc schedstat).
pub fn run_queue_seconds(pid: u32) -> f64 {
    let Ok(threads) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0.0;
    };
    let nanos: u64 = threads
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum();
    nanos as f64 / 1e9
}

/// Reads all of `child`'s stdout (it must be piped), then reaps it with
/// `wait4`: what it printed, its wait status, and what it used (CPU time,
/// peak memory), which `std::process` does not report.
pub fn reap_with_usage(mut child: std::process::Child) -> (String, i32, libc::rusage) {
    let mut text = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut text).unwrap();
    let mut status = 0;
    // SAFETY: wait4 fills the two out-parameters we pass and nothing else;
    // the child is ours and not yet reaped.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage);
        usage
    };
    (text, status, usage)
}

/// The process id of the throwaway server of `scripts/with-mysql.sh`.
pub fn mysqld_pid() -> u32 {
    let dir = std::env::var("RESULT_INBOX_TEST_MYSQL_DIR").unwrap_or_default();
    std::fs::read_to_string(std::path::Path::new(&dir).join("mysqld.pid"))
        .ok()
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or(0)
}

/// Writes a new file that only its owner may read (mode 0600), as secrets
/// (tokens, private keys) must be.
pub fn write_private(path: &std::path::Path, bytes: &[u8]) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .unwrap();
    f.write_all(bytes).unwrap();
}

/// The keys of a `key=value` report, one or more lines; a bare word (a
/// group's name, as `past_window`) counts as a key too.
pub fn text_keys(report: &str) -> std::collections::BTreeSet<String> {
    report
        .split_whitespace()
        .map(|word| word.split_once('=').map_or(word, |(key, _)| key).to_owned())
        .collect()
}

/// Every key of a JSON document, at any depth, with the names of the
/// arrays that group the text report's repeated lines (`tables` for the
/// `table=` lines) left out.
pub fn json_keys(value: &serde_json::Value, groups: &[&str]) -> std::collections::BTreeSet<String> {
    let mut keys = std::collections::BTreeSet::new();
    let mut stack = vec![value];
    while let Some(value) = stack.pop() {
        match value {
            serde_json::Value::Object(map) => {
                for (key, value) in map {
                    if !groups.contains(&key.as_str()) {
                        keys.insert(key.clone());
                    }
                    stack.push(value);
                }
            }
            serde_json::Value::Array(items) => stack.extend(items),
            _ => {}
        }
    }
    keys
}

/// The `n`th event of the apply benchmarks: a `task.succeeded` event of its
/// own task on `queue`, with the small mixed-script result every bench
/// applies.
pub fn numbered_event(n: u64, queue: &str) -> String {
    format!(
        r#"{{"id":"{n:032x}","type":"task.succeeded","queue_id":"{queue}","occurred_at":"2026-11-30T16:02:44.123456Z","task":{{"id":"{:032x}","version":2,"state":"SUCCEEDED","result":{{"rows":1234,"total":123456789012345678901234567890,"message":"Verarbeitung abgeschlossen – 处理完成","ratio":1.10}}}}}}"#,
        u128::from(n) + (1u128 << 100)
    )
}

/// The delivery of [`numbered_event`] `n`, its id `n`.
pub fn numbered_delivery(n: u64, queue: &str) -> result_inbox::delivery::Delivery<bytes::Bytes> {
    result_inbox::delivery::Delivery::new(
        result_inbox::delivery::DeliveryId::new(format!("{n:032x}")),
        bytes::Bytes::from(numbered_event(n, queue)),
    )
    .with_attempt(1)
}

/// A tool's output without the ` database=<host>:<port>` its summary line
/// (the last) ends with, once it is checked to be there: the server the
/// tool read from.
pub fn without_database(out: &str) -> String {
    let trimmed = out.strip_suffix('\n').unwrap_or(out);
    let (head, server) = trimmed
        .rsplit_once(" database=")
        .unwrap_or_else(|| panic!("no database= in the summary: {out}"));
    assert!(!server.contains('\n'), "database= is not last: {out}");
    let (host, port) = server.rsplit_once(':').unwrap_or(("", ""));
    assert!(
        !host.is_empty() && port.parse::<u16>().is_ok(),
        "database={server} is not host:port"
    );
    let newline = if out.ends_with('\n') { "\n" } else { "" };
    format!("{head}{newline}")
}
