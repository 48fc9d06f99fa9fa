//! A database of its own on the throwaway PostgreSQL server of
//! `scripts/with-postgres.sh` (`make test` starts one).
#![allow(dead_code)]

use sqlx::postgres::PgPoolOptions;
use sqlx::{Executor, PgPool};

use super::random_hex;

/// The server's administrative DSN (database `postgres`).
pub fn admin_dsn() -> String {
    std::env::var("RESULT_INBOX_TEST_PG_ADMIN_DSN").unwrap_or_else(|_| {
        panic!(
            "RESULT_INBOX_TEST_PG_ADMIN_DSN is not set: run the PostgreSQL tests with `make test`, \
             or under scripts/with-postgres.sh, which start a throwaway PostgreSQL server"
        )
    })
}

/// A fresh, empty database, dropped with the server at the end of the run.
pub struct PgTestDb {
    pub name: String,
    pub dsn: String,
    pub pool: PgPool,
}

impl PgTestDb {
    pub async fn new() -> Self {
        let admin_dsn = admin_dsn();
        let name = format!("receiver_{}", random_hex(6));
        let admin = PgPoolOptions::new()
            .max_connections(1)
            .connect(&admin_dsn)
            .await
            .expect("the throwaway PostgreSQL server answers");
        admin
            .execute(format!("CREATE DATABASE {name} ENCODING 'UTF8'").as_str())
            .await
            .unwrap();
        admin.close().await;
        let dsn = match admin_dsn.rsplit_once('/') {
            Some((server, _)) => format!("{server}/{name}"),
            None => panic!("the admin DSN names no database"),
        };
        let pool = PgPoolOptions::new()
            .max_connections(4)
            .connect(&dsn)
            .await
            .unwrap();
        Self { name, dsn, pool }
    }

    /// A fresh database with the receiver's schema.
    pub async fn initialized() -> Self {
        let db = Self::new().await;
        let dsn = result_inbox::db::Dsn::parse(&db.dsn).unwrap();
        result_inbox::db::schema::init(&dsn)
            .await
            .expect("schema init");
        db
    }

    /// A login role of its own with `grants` (statements in which `{role}`
    /// stands for it); its DSN on this database.
    pub async fn role_with(&self, grants: &str) -> String {
        let role = format!("r_{}", super::random_hex(4));
        self.run_script(&format!(
            "CREATE ROLE {role} LOGIN; {}",
            grants.replace("{role}", &role)
        ))
        .await
        .unwrap();
        self.dsn.replacen("://postgres@", &format!("://{role}@"), 1)
    }

    /// Runs a script of statements (a DDL file), in one transaction.
    pub async fn run_script(&self, script: &str) -> Result<(), sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        tx.execute(script).await?;
        tx.commit().await
    }
}

/// A PostgreSQL server of a test's own, in a temporary directory on a free
/// loopback port, that the test may stop (as a crash: `immediate`) and
/// start again on the same port; removed when dropped.
pub struct PgPrivateServer {
    dir: std::path::PathBuf,
    port: u16,
    bin: std::path::PathBuf,
    running: bool,
}

impl PgPrivateServer {
    pub fn start() -> PgPrivateServer {
        let bin = std::path::PathBuf::from(std::env::var("RESULT_INBOX_TEST_PG_BIN").unwrap_or_else(
            |_| panic!("RESULT_INBOX_TEST_PG_BIN is not set: run under scripts/with-postgres.sh (make test)"),
        ));
        let dir = server_dir("result-inbox-pg");
        let out = as_server(&bin.join("initdb"))
            .args([
                "-D",
                dir.join("data").to_str().unwrap(),
                "-U",
                "postgres",
                "--auth=trust",
            ])
            .args(["-E", "UTF8", "--locale=C.UTF-8"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let port = free_port();
        let mut server = PgPrivateServer {
            dir,
            port,
            bin,
            running: false,
        };
        server.restart();
        server
    }

    /// The administrator's DSN of database `name`.
    pub fn dsn(&self, name: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{name}", self.port)
    }

    /// Stops the server as a crash would: no checkpoint, connections cut.
    pub fn stop(&mut self) {
        let _ = self.pg_ctl(&["stop", "-m", "immediate", "-w", "-t", "20"]);
        self.running = false;
    }

    /// Starts the server (again) on its port.
    pub fn restart(&mut self) {
        let options = format!(
            "-c listen_addresses=127.0.0.1 -p {} -k {}",
            self.port,
            self.dir.display()
        );
        let log = self.dir.join("server.log");
        let out = self.pg_ctl(&[
            "start",
            "-w",
            "-t",
            "30",
            "-l",
            log.to_str().unwrap(),
            "-o",
            &options,
        ]);
        assert!(
            out.status.success(),
            "{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        self.running = true;
    }

    fn pg_ctl(&self, args: &[&str]) -> std::process::Output {
        as_server(&self.bin.join("pg_ctl"))
            .args(["-D", self.dir.join("data").to_str().unwrap()])
            .args(args)
            .output()
            .unwrap()
    }
}

impl Drop for PgPrivateServer {
    fn drop(&mut self) {
        if self.running {
            self.stop();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn is_root() -> bool {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() == 0 }
}

/// A new directory under the system's temporary one, named `prefix` and a
/// random suffix, that the server may write: owned by the `postgres`
/// account when this is root.
fn server_dir(prefix: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("{prefix}-{}", random_hex(6)));
    std::fs::create_dir_all(&dir).unwrap();
    if is_root() {
        let status = std::process::Command::new("chown")
            .args(["postgres", dir.to_str().unwrap()])
            .status()
            .unwrap();
        assert!(status.success());
    }
    dir
}

/// `program`, run as the `postgres` account when this is root (PostgreSQL
/// refuses to run as root).
fn as_server(program: &std::path::Path) -> std::process::Command {
    if is_root() {
        let mut command = std::process::Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(program);
        command
    } else {
        std::process::Command::new(program)
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A pg_auto_failover formation of a test's own: a monitor and two or
/// three data nodes on free loopback ports in a temporary directory, one
/// primary and synchronous secondaries, with the database `database` on
/// them. Its processes are stopped and its directory removed when it is
/// dropped.
pub struct Formation {
    dir: std::path::PathBuf,
    bin: std::path::PathBuf,
    autoctl: std::path::PathBuf,
    monitor_port: u16,
    /// Each data node's name and port, in the order they joined.
    nodes: Vec<(String, u16)>,
    /// Each `pg_autoctl` process by the name of its data directory; each
    /// leads a process group of its own, its PostgreSQL server included.
    children: Vec<(String, std::process::Child)>,
}

impl Formation {
    /// A monitor, a primary and one synchronous secondary: the shape
    /// that trades durability for availability while the secondary is
    /// unhealthy.
    pub async fn start(database: &str) -> Formation {
        Formation::start_with(database, 2).await
    }

    /// A monitor and three data nodes, with `number_sync_standbys = 1`:
    /// every COMMIT waits for a standby, even while one is unhealthy.
    pub async fn start_three(database: &str) -> Formation {
        let formation = Formation::start_with(database, 3).await;
        let mut monitor = formation.monitor_as_superuser().await;
        sqlx::query("SELECT pgautofailover.set_formation_number_sync_standbys('default', 1)")
            .execute(&mut monitor)
            .await
            .unwrap();
        // The primary applies the new setting (apply_settings) first.
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        formation
            .wait_for(&["primary", "secondary", "secondary"], 60)
            .await;
        formation
    }

    /// The monitor's own database, as its superuser.
    async fn monitor_as_superuser(&self) -> sqlx::PgConnection {
        use sqlx::Connection;
        let dsn = format!(
            "postgres://postgres@127.0.0.1:{}/pg_auto_failover?sslmode=disable",
            self.monitor_port
        );
        sqlx::PgConnection::connect(&dsn).await.unwrap()
    }

    async fn start_with(database: &str, nodes: usize) -> Formation {
        let env = |k: &str| {
            std::env::var(k)
                .unwrap_or_else(|_| panic!("{k} is not set: run under scripts/with-postgres.sh"))
        };
        let dir = server_dir("result-inbox-paf");
        let mut formation = Formation {
            dir,
            bin: env("RESULT_INBOX_TEST_PG_BIN").into(),
            autoctl: env("RESULT_INBOX_TEST_PG_AUTOCTL").into(),
            monitor_port: free_port(),
            nodes: Vec::new(),
            children: Vec::new(),
        };
        let port = formation.monitor_port.to_string();
        formation.run("monitor", &["create", "monitor", "--pgport", &port]);
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
        while formation.states().await.is_err() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{}",
                formation.logs()
            );
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        let monitor = formation.monitor_dsn();
        for n in 1..=nodes {
            let node = format!("node{n}");
            let port = free_port();
            formation.nodes.push((node.clone(), port));
            let port = port.to_string();
            formation.run(
                &node,
                &[
                    "create",
                    "postgres",
                    "--pgport",
                    &port,
                    "--dbname",
                    database,
                    "--monitor",
                    &monitor,
                ],
            );
            // The first node is a primary alone before the second joins.
            if n == 1 {
                formation.wait_for(&["single"], 60).await;
            } else {
                // A standby's base backup waits for a spread checkpoint
                // of the primary (minutes); asking for one hurries it.
                let hurry = checkpoints(formation.nodes[0].1);
                let mut states = vec!["primary"];
                states.extend(std::iter::repeat_n("secondary", n - 1));
                formation.wait_for(&states, 120).await;
                hurry.abort();
            }
        }
        formation
    }

    /// The monitor notices a node that stopped answering within seconds
    /// rather than its default of half a minute, so that a test's crash
    /// is followed by a failover soon.
    pub async fn notice_failures_quickly(&self) {
        use sqlx::{Connection, Executor};
        let mut monitor = self.monitor_as_superuser().await;
        for setting in [
            "pgautofailover.health_check_period = 1000",
            "pgautofailover.health_check_timeout = 1000",
            "pgautofailover.health_check_max_retries = 1",
            "pgautofailover.health_check_retry_delay = 500",
            "pgautofailover.node_considered_unhealthy_timeout = 3000",
            "pgautofailover.primary_demote_timeout = 3000",
        ] {
            monitor
                .execute(format!("ALTER SYSTEM SET {setting}").as_str())
                .await
                .unwrap();
        }
        monitor.execute("SELECT pg_reload_conf()").await.unwrap();
        let _ = monitor.close().await;
    }

    /// Crashes the data node listening on `port`: its `pg_autoctl` and its
    /// PostgreSQL server are killed at once (SIGKILL), as a lost machine
    /// would leave them.
    pub fn crash(&mut self, port: u16) {
        let name = self
            .nodes
            .iter()
            .find(|(_, p)| *p == port)
            .map(|(name, _)| name.clone())
            .unwrap_or_else(|| panic!("no node on port {port}"));
        let (_, child) = self.children.iter_mut().find(|(n, _)| *n == name).unwrap();
        let group = i32::try_from(child.id()).unwrap();
        // SAFETY: kill has no memory preconditions; the group is the
        // node's own (`process_group(0)` at spawn).
        unsafe { libc::kill(-group, libc::SIGKILL) };
        let _ = child.wait();
        // A server that left the group on its own is killed by its pid.
        let pid_file = self.dir.join(&name).join("postmaster.pid");
        if let Some(pid) = std::fs::read_to_string(pid_file)
            .ok()
            .and_then(|t| t.lines().next().and_then(|l| l.trim().parse::<i32>().ok()))
        {
            // SAFETY: as above.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }

    /// Starts `pg_autoctl <args> --run` for the data directory `name`, in a
    /// process group of its own.
    fn run(&mut self, name: &str, args: &[&str]) {
        use std::os::unix::process::CommandExt;
        let pgdata = self.dir.join(name);
        let log = std::fs::File::create(self.dir.join(format!("{name}.log"))).unwrap();
        let child = as_server(&self.autoctl)
            .args(args)
            .args(["--pgdata", pgdata.to_str().unwrap()])
            .args(["--pgctl", self.bin.join("pg_ctl").to_str().unwrap()])
            .args(["--hostname", "127.0.0.1", "--listen", "127.0.0.1"])
            .args(["--auth", "trust", "--no-ssl", "--run"])
            .current_dir(&self.dir)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .process_group(0)
            .spawn()
            .unwrap();
        self.children.push((name.to_owned(), child));
    }

    /// The monitor's DSN, as the nodes reach it.
    pub fn monitor_dsn(&self) -> String {
        format!(
            "postgres://autoctl_node@127.0.0.1:{}/pg_auto_failover?sslmode=disable",
            self.monitor_port
        )
    }

    /// Each node's reported state, as the monitor has it.
    pub async fn states(&self) -> Result<Vec<String>, sqlx::Error> {
        use sqlx::Connection;
        let mut monitor = sqlx::PgConnection::connect(&self.monitor_dsn()).await?;
        let states = sqlx::query_scalar(
            "SELECT reportedstate::text FROM pgautofailover.node \
             WHERE reportedstate = goalstate ORDER BY nodeid",
        )
        .fetch_all(&mut monitor)
        .await;
        let _ = monitor.close().await;
        states
    }

    /// Waits until the nodes report `states` (sorted), at most `secs`.
    pub async fn wait_for(&self, states: &[&str], secs: u64) {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(secs);
        loop {
            let mut now = self.states().await.unwrap_or_default();
            now.sort();
            if now == states {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the formation never reached {states:?} (now {now:?}):\n{}",
                self.logs()
            );
            tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        }
    }

    /// The current primary's port, as the monitor has it.
    pub async fn primary_port(&self) -> Option<u16> {
        use sqlx::Connection;
        let mut monitor = sqlx::PgConnection::connect(&self.monitor_dsn())
            .await
            .ok()?;
        let port: Option<i32> =
            sqlx::query_scalar("SELECT primary_port FROM pgautofailover.get_primary('default', 0)")
                .fetch_optional(&mut monitor)
                .await
                .ok()
                .flatten();
        let _ = monitor.close().await;
        port.and_then(|p| u16::try_from(p).ok())
    }

    /// The formation's address as the monitor gives it (`pg_autoctl show
    /// uri`): every node, `target_session_attrs=read-write`; with the
    /// `postgres` role, which the URI leaves to the client.
    pub fn uri(&self) -> String {
        let out = self.ask_monitor(&["show", "uri"]);
        let uri = String::from_utf8(out).unwrap().trim().to_owned();
        uri.replacen("postgres://", "postgres://postgres@", 1)
    }

    /// Asks the monitor for a failover and waits until it is done (it
    /// blocks the thread meanwhile).
    pub fn failover(&self) {
        self.ask_monitor(&["perform", "failover"]);
    }

    /// `pg_autoctl <args>` of the formation, through the monitor: what it
    /// printed, once it succeeded.
    fn ask_monitor(&self, args: &[&str]) -> Vec<u8> {
        let out = as_server(&self.autoctl)
            .args(args)
            .args(["--formation", "default", "--pgdata"])
            .arg(self.dir.join("monitor"))
            .current_dir(&self.dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "pg_autoctl {args:?}: {}{}",
            String::from_utf8_lossy(&out.stderr),
            self.logs()
        );
        out.stdout
    }

    /// The tail of each process's log, for a failure message.
    fn logs(&self) -> String {
        self.children
            .iter()
            .map(|(name, _)| name)
            .map(|name| {
                let text = std::fs::read_to_string(self.dir.join(format!("{name}.log")))
                    .unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(15).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                format!("--- {name}\n{}", tail.join("\n"))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// `CHECKPOINT` on the server of `port` every second, until aborted.
fn checkpoints(port: u16) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        use sqlx::{Connection, Executor};
        let dsn = format!("postgres://postgres@127.0.0.1:{port}/postgres?sslmode=disable");
        loop {
            if let Ok(mut conn) = sqlx::PgConnection::connect(&dsn).await {
                let _ = conn.execute("CHECKPOINT").await;
                let _ = conn.close().await;
            }
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        }
    })
}

impl Drop for Formation {
    fn drop(&mut self) {
        let names: Vec<String> = self.children.iter().rev().map(|(n, _)| n.clone()).collect();
        for name in &names {
            let _ = as_server(&self.autoctl)
                .args(["stop", "--immediate", "--pgdata"])
                .arg(self.dir.join(name))
                .current_dir(&self.dir)
                .output();
        }
        for (_, child) in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        for name in &names {
            let _ = as_server(&self.bin.join("pg_ctl"))
                .args(["-D"])
                .arg(self.dir.join(name))
                .args(["-m", "immediate", "stop"])
                .output();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
