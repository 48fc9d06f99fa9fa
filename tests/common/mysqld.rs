//! A private MySQL-compatible server for one test, which the test may stop and
//! restart without disturbing the shared server of `scripts/with-mysql.sh`.
#![allow(dead_code)]

use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::random_hex;

/// A `mariadbd` (or `mysqld`) on its own data directory and loopback port;
/// killed and its directory removed when dropped.
pub struct PrivateServer {
    child: Option<Child>,
    dir: PathBuf,
    port: u16,
    /// Extra server options, e.g. the TLS certificate files.
    extra_args: Vec<String>,
}

/// The PEM files a server offers TLS with.
#[derive(Debug, Clone)]
pub struct ServerTls {
    /// The CA that signed the certificate.
    pub ca: PathBuf,
    /// The server's certificate.
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
}

/// The first of `names` in the usual binary directories or on `PATH`.
fn find(names: &[&str]) -> PathBuf {
    let path = std::env::var("PATH").unwrap_or_default();
    let dirs = ["/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"];
    let dirs = dirs.into_iter().chain(path.split(':'));
    let found = names.iter().find_map(|n| {
        dirs.clone()
            .map(|d| Path::new(d).join(n))
            .find(|p| p.is_file())
    });
    found.unwrap_or_else(|| panic!("none of {names:?} found: install 'mariadb-server'"))
}

/// `--user=root` when running as root, which mariadbd otherwise refuses.
fn user_args() -> &'static [&'static str] {
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
    if root {
        &["--user=root"]
    } else {
        &[]
    }
}

fn quietly(cmd: &mut Command) -> bool {
    let status = cmd.stdout(Stdio::null()).stderr(Stdio::null()).status();
    status.is_ok_and(|s| s.success())
}

impl PrivateServer {
    /// Initializes a fresh data directory and starts the server on a free port.
    pub fn start() -> PrivateServer {
        Self::start_with(Vec::new())
    }

    /// Like [`PrivateServer::start`], offering TLS with these files
    /// (`--ssl-ca --ssl-cert --ssl-key`); plain connections stay allowed
    /// unless an account is created `REQUIRE SSL`.
    pub fn start_with_tls(tls: &ServerTls) -> PrivateServer {
        Self::start_with(vec![
            format!("--ssl-ca={}", tls.ca.display()),
            format!("--ssl-cert={}", tls.cert.display()),
            format!("--ssl-key={}", tls.key.display()),
        ])
    }

    fn start_with(extra_args: Vec<String>) -> PrivateServer {
        let name = format!("result-inbox-private-mysql-{}", random_hex(6));
        let mut server = PrivateServer {
            child: None,
            dir: std::env::temp_dir().join(name),
            port: 0,
            extra_args,
        };
        std::fs::create_dir_all(&server.dir).unwrap();
        // A tmpdir of its own: a server deletes every "#sql*" file in its
        // tmpdir when it starts, which would break another one starting
        // beside it (or initializing its data directory).
        std::fs::create_dir_all(server.dir.join("tmp")).unwrap();
        let data = format!("--datadir={}", server.path("data"));
        let tmpdir = format!("--tmpdir={}", server.path("tmp"));
        let install = Command::new(find(&["mariadb-install-db", "mysql_install_db"]))
            .args([
                "--no-defaults",
                &data,
                &tmpdir,
                "--auth-root-authentication-method=normal",
            ])
            .arg("--skip-test-db")
            .args(user_args())
            .output()
            .expect("run mariadb-install-db");
        let why = String::from_utf8_lossy(&install.stderr);
        assert!(install.status.success(), "mariadb-install-db failed: {why}");
        for _ in 0..10 {
            // Below the kernel's ephemeral range (32768-60999), so that no
            // outgoing connection takes the port while the server is stopped.
            let port = 20_000 + u16::from_str_radix(&random_hex(2), 16).unwrap() % 12_000;
            if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_err() {
                continue;
            }
            server.port = port;
            if server.launch() {
                return server;
            }
        }
        panic!(
            "the private server did not start; its log:\n{}",
            server.log()
        );
    }

    /// `mysql://root@127.0.0.1:PORT/mysql`: may create databases and users.
    pub fn admin_dsn(&self) -> String {
        format!("mysql://root@127.0.0.1:{}/mysql", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Creates the database `name` (utf8mb4) and returns its root address,
    /// `mysql://root@127.0.0.1:PORT/NAME`.
    pub async fn create_database(&self, name: &str) -> String {
        use sqlx::{Connection, Executor};
        let mut admin = sqlx::MySqlConnection::connect(&self.admin_dsn())
            .await
            .unwrap();
        admin
            .execute(format!("CREATE DATABASE {name} CHARACTER SET utf8mb4").as_str())
            .await
            .unwrap();
        format!("mysql://root@127.0.0.1:{}/{name}", self.port)
    }

    /// SIGTERM (a clean shutdown); returns once the process has exited and
    /// the port is closed.
    pub fn stop(&mut self) {
        let child = self.child.as_mut().expect("the private server is running");
        super::sigterm(child.id());
        child.wait().unwrap();
        self.child = None;
        assert!(
            !self.accepts(),
            "port {} still open after the server exited",
            self.port
        );
    }

    /// Starts the server again on the same data directory and port.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "the private server is still running");
        assert!(
            self.launch(),
            "the server did not restart; its log:\n{}",
            self.log()
        );
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    /// Spawns the server; true once it answers `SELECT 1` and accepts TCP.
    fn launch(&mut self) -> bool {
        let mut child = Command::new(find(&["mariadbd", "mysqld"]))
            .arg("--no-defaults")
            .arg(format!("--datadir={}", self.path("data")))
            .arg(format!("--tmpdir={}", self.path("tmp")))
            .arg(format!("--socket={}", self.path("mysql.sock")))
            .arg(format!("--pid-file={}", self.path("mysqld.pid")))
            .arg(format!("--log-error={}", self.path("error.log")))
            .arg(format!("--port={}", self.port))
            .args(["--bind-address=127.0.0.1", "--skip-name-resolve"])
            .args(["--innodb-buffer-pool-size=32M", "--max-connections=100"])
            .args(&self.extra_args)
            .args(user_args())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the server");
        let client = find(&["mariadb", "mysql"]);
        let socket = format!("--socket={}", self.path("mysql.sock"));
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline && child.try_wait().unwrap().is_none() {
            let ping = ["--no-defaults", "-uroot", &socket, "-e", "SELECT 1"];
            if quietly(Command::new(&client).args(ping)) && self.accepts() {
                self.child = Some(child);
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        false
    }

    fn accepts(&self) -> bool {
        let addr = (Ipv4Addr::LOCALHOST, self.port).into();
        TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("error.log")).unwrap_or_default()
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
