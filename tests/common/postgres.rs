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
        let dir = std::env::temp_dir().join(format!("result-inbox-pg-{}", random_hex(6)));
        std::fs::create_dir_all(&dir).unwrap();
        if is_root() {
            let status = std::process::Command::new("chown")
                .args(["postgres", dir.to_str().unwrap()])
                .status()
                .unwrap();
            assert!(status.success());
        }
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
