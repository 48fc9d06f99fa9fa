//! TLS to MySQL and to Orbit, with certificates made at run time.
//!
//! * MySQL: a private MariaDB offering TLS with a throwaway CA's server
//!   certificate; the DSN's `ssl-mode` and `ssl-ca` decide what is checked.
//! * Orbit: a TLS-terminating proxy (same kind of CA) in front of a real
//!   orbit-dev; `ORBIT_URL=https://…` and `ORBIT_CA_FILE` take the API calls
//!   and the delivery stream (`wss://`) through it.
//!
//! Nothing here sends a packet anywhere but loopback: the non-loopback URLs
//! below are only resolved as configuration, and the command stops (on its
//! loopback database) before it would call Orbit.

use crate::common;

use std::process::Output;
use std::time::Duration;

use common::mysqld::PrivateServer;
use common::orbit::{receiver, OrbitDev};
use common::tls::{TestPki, TlsProxy};
use common::{dsn_for, TestDb};
use result_inbox::db::DbErrorKind;
use result_inbox::db::Dsn;
use result_inbox::inbox::{InboxStore, StoreOptions};
use result_inbox::orbit::{OrbitClient, OrbitError, OrbitTls, OrbitUrl, Token};
use sqlx::mysql::{MySqlConnection, MySqlDatabaseError};
use sqlx::{Connection, Executor};

const PASSWORD: &str = "sentinel-pw-7f3a";

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `mysql://tls_only:…@HOST:PORT/receiver_tls?QUERY`.
fn tls_dsn(host: &str, server: &PrivateServer, query: &str) -> String {
    format!(
        "mysql://tls_only:{PASSWORD}@{host}:{}/receiver_tls?{query}",
        server.port()
    )
}

/// The session's TLS cipher: empty on a plain connection.
async fn session_cipher(conn: &mut MySqlConnection) -> String {
    let (_, cipher): (String, String) = sqlx::query_as("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    cipher
}

async fn connect(dsn: &str) -> Result<MySqlConnection, sqlx::Error> {
    MySqlConnection::connect_with(
        &Dsn::parse(dsn)
            .unwrap()
            .mysql_options()
            .expect("a MySQL address"),
    )
    .await
}

#[tokio::test]
async fn mysql_over_tls_checks_the_server_certificate_and_receiver_init_works_through_it() {
    let pki = TestPki::loopback();
    let other = TestPki::loopback();
    let server = PrivateServer::start_with_tls(&pki.server_files());
    let mut admin = MySqlConnection::connect(&server.admin_dsn()).await.unwrap();
    for statement in [
        "CREATE DATABASE receiver_tls CHARACTER SET utf8mb4".to_owned(),
        format!("CREATE USER 'tls_only'@'%' IDENTIFIED BY '{PASSWORD}' REQUIRE SSL"),
        "GRANT ALL PRIVILEGES ON receiver_tls.* TO 'tls_only'@'%'".to_owned(),
    ] {
        admin.execute(statement.as_str()).await.unwrap();
    }
    let ca = pki.ca.display().to_string();

    // The CA that signed the server's certificate: both verifying modes
    // connect, by IP and by name, and the session is really encrypted.
    for (host, mode) in [
        ("127.0.0.1", "VERIFY_CA"),
        ("127.0.0.1", "VERIFY_IDENTITY"),
        ("localhost", "VERIFY_IDENTITY"),
    ] {
        let dsn = tls_dsn(host, &server, &format!("ssl-mode={mode}&ssl-ca={ca}"));
        let mut conn = connect(&dsn)
            .await
            .unwrap_or_else(|e| panic!("{host} {mode}: {e}"));
        let cipher = session_cipher(&mut conn).await;
        assert!(!cipher.is_empty(), "{host} {mode}: not encrypted");
        conn.close().await.unwrap();
    }

    // Another CA: the handshake fails on the certificate, in sqlx…
    let wrong = tls_dsn(
        "127.0.0.1",
        &server,
        &format!("ssl-mode=VERIFY_IDENTITY&ssl-ca={}", other.ca.display()),
    );
    let err = connect(&wrong).await.unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("invalid peer certificate: UnknownIssuer"),
        "{message}"
    );
    assert!(!message.contains(PASSWORD));
    // …and through the inbox, which keeps its errors redacted.
    let err = InboxStore::connect(
        &Dsn::parse(&wrong).unwrap(),
        common::scope("tls-test"),
        StoreOptions::default(),
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), DbErrorKind::Tls, "{err}");
    assert!(err.to_string().contains("TLS handshake"), "{err}");
    assert!(!err.to_string().contains(PASSWORD));
    // Without ssl-ca only Mozilla's roots are trusted: refused too.
    let err = connect(&tls_dsn("127.0.0.1", &server, "ssl-mode=VERIFY_CA"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("UnknownIssuer"), "{err}");

    // The account requires TLS: without it the server refuses the login.
    let err = connect(&tls_dsn("127.0.0.1", &server, "ssl-mode=DISABLED"))
        .await
        .unwrap_err();
    let number = err
        .as_database_error()
        .and_then(|db| db.try_downcast_ref::<MySqlDatabaseError>())
        .map(|db| db.number());
    assert_eq!(number, Some(1045), "{err}");
    // REQUIRED encrypts without checking the certificate: the login works.
    let mut conn = connect(&tls_dsn("127.0.0.1", &server, "ssl-mode=REQUIRED"))
        .await
        .unwrap();
    assert!(!session_cipher(&mut conn).await.is_empty());
    conn.close().await.unwrap();

    // `receiver init` with the wrong CA fails (exit 1) without the password…
    let out = receiver()
        .arg("init")
        .env("ORBIT_RECEIVER_DSN", &wrong)
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stdout.is_empty());
    assert!(
        stderr.contains("?ssl-mode=VERIFY_IDENTITY")
            && stderr.contains("TLS handshake with the database failed"),
        "{stderr}"
    );
    assert!(!stderr.contains(PASSWORD), "{stderr}");
    // …and with the right one creates the schema over TLS.
    let good = tls_dsn(
        "127.0.0.1",
        &server,
        &format!("ssl-mode=VERIFY_IDENTITY&ssl-ca={ca}"),
    );
    let out = receiver()
        .arg("init")
        .env("ORBIT_RECEIVER_DSN", &good)
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout, "receiver_schema_initialized=true foreign_keys=0\n");
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT CAST(table_name AS CHAR) FROM information_schema.tables \
         WHERE table_schema = 'receiver_tls' ORDER BY table_name",
    )
    .fetch_all(&mut admin)
    .await
    .unwrap();
    // The model's two tables; prune's tally only with --retention.
    assert_eq!(tables, ["receiver_inbox", "receiver_task_views"]);

    // Everything encrypted at once: the demo against Orbit over https/wss
    // and this database over TLS, as the account that cannot log in
    // without it.
    let orbit = OrbitDev::start(30_000, 5);
    let creds = orbit.bootstrap("inbox-demo", None).await;
    let orbit_pki = TestPki::loopback();
    let proxy = TlsProxy::start(&orbit.url, &orbit_pki);
    let out = receiver()
        .arg("demo")
        .env("ORBIT_CREDENTIALS_FILE", &creds.file)
        .env("ORBIT_URL", proxy.url())
        .env("ORBIT_CA_FILE", &orbit_pki.ca)
        .env("ORBIT_RECEIVER_DSN", &good)
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout.lines().count(), 2, "{stdout}");
    assert!(proxy.websocket_upgrades() >= 1);
    let applied: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM receiver_tls.receiver_inbox")
        .fetch_one(&mut admin)
        .await
        .unwrap();
    assert_eq!(applied, 1);
}

#[test]
fn dsn_tls_options_are_checked_before_connecting() {
    // Port 1 on loopback: a connection attempt would fail differently.
    for (query, expected) in [
        (
            "ssl-mode=VERIFY",
            "ssl-mode in the database DSN must be DISABLED, PREFERRED",
        ),
        (
            "ssl-mode=REQUIRED&ssl-ca=/etc/hostname",
            "ssl-ca in the database DSN is used only with ssl-mode=VERIFY_CA or VERIFY_IDENTITY",
        ),
        (
            "ssl-mode=VERIFY_IDENTITY&ssl-ca=/nonexistent/ca.pem",
            "ssl-ca file /nonexistent/ca.pem of the database DSN cannot be read",
        ),
    ] {
        let out = receiver()
            .arg("init")
            .env(
                "ORBIT_RECEIVER_DSN",
                format!("mysql://app:{PASSWORD}@127.0.0.1:1/receiver?{query}"),
            )
            .output()
            .unwrap();
        let (_, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(2), "{query}: {stderr}");
        assert!(stderr.contains(expected), "{query}: {stderr}");
        assert!(!stderr.contains(PASSWORD), "{stderr}");
    }
}

#[tokio::test]
async fn the_demo_runs_over_https_and_wss_with_a_private_ca_and_fails_clearly_without_it() {
    let orbit = OrbitDev::start(30_000, 5);
    let creds = orbit.bootstrap("inbox-demo", None).await;
    let pki = TestPki::loopback();
    let proxy = TlsProxy::start(&orbit.url, &pki);
    let db = TestDb::initialized().await;
    let demo = |ca: Option<&std::path::Path>| {
        let mut cmd = receiver();
        cmd.arg("demo")
            .env_remove("ORBIT_CA_FILE")
            // The file's orbit_url is orbit-dev's plain one: ORBIT_URL wins.
            .env("ORBIT_CREDENTIALS_FILE", &creds.file)
            .env("ORBIT_URL", proxy.url())
            .env("ORBIT_RECEIVER_DSN", dsn_for(&db.name));
        if let Some(ca) = ca {
            cmd.env("ORBIT_CA_FILE", ca);
        }
        cmd.output().unwrap()
    };

    // Without the private CA: a certificate error, exit 1, nothing done.
    let out = demo(None);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(
        stderr.contains("TLS handshake failed: invalid peer certificate: UnknownIssuer"),
        "{stderr}"
    );
    assert!(stderr.contains("ORBIT_CA_FILE"), "{stderr}");
    assert!(!stdout.contains(&creds.token) && !stderr.contains(&creds.token));
    // The proxy notes the refused handshake on its own runtime; give it a moment.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while proxy.failed_handshakes() == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(proxy.failed_handshakes() >= 1);
    assert_eq!(proxy.handshakes(), 0);
    let subs = orbit.get(&creds, "/v1/subscriptions").await;
    assert_eq!(subs["subscriptions"].as_array().map(Vec::len), Some(0));

    // With it: the two lines of the demo, API calls and stream through TLS.
    let out = demo(Some(&pki.ca));
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    assert!(
        lines[0].starts_with("task=")
            && lines[0].ends_with(" state=CANCELLED inbox_duplicate=true applied_events=1"),
        "{stdout}"
    );
    assert_eq!(
        lines[1],
        "ack_confirmed=1 pending=0 subscription_enabled=false"
    );
    assert!(!stdout.contains(&creds.token) && !stderr.contains(&creds.token));
    assert!(proxy.handshakes() >= 2, "{}", proxy.handshakes());
    assert!(
        proxy.websocket_upgrades() >= 1,
        "the stream did not use wss://"
    );
}

#[tokio::test]
async fn an_orbit_certificate_for_another_host_is_refused_even_from_the_trusted_ca() {
    let orbit = OrbitDev::start(30_000, 5);
    let creds = orbit.bootstrap("inbox-tls", None).await;
    let pki = TestPki::for_names(&["orbit.example"]);
    let proxy = TlsProxy::start(&orbit.url, &pki);
    let client = OrbitClient::with_tls(
        OrbitUrl::parse(&proxy.url()).unwrap(),
        Token::new(creds.token.clone()),
        Duration::from_secs(10),
        OrbitTls::with_ca_file(&pki.ca).unwrap(),
    )
    .unwrap();
    let err = client.submit_task().await.unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, OrbitError::Transport(_)), "{err:?}");
    assert!(
        message.contains("TLS handshake failed") && message.contains("does not name the host"),
        "{message}"
    );
    assert!(!message.contains(&creds.token));
    assert_eq!(proxy.handshakes(), 0);
}

#[test]
fn an_unusable_orbit_ca_file_is_a_configuration_error() {
    let pki = TestPki::loopback();
    let not_a_certificate = pki.file("key-only.pem", b"not a certificate\n");
    for (ca, expected) in [
        (
            std::path::PathBuf::from("/nonexistent/orbit-ca.pem"),
            "cannot read CA file /nonexistent/orbit-ca.pem",
        ),
        (not_a_certificate, "holds no PEM certificate"),
    ] {
        let out = receiver()
            .arg("demo")
            .env("ORBIT_URL", "https://127.0.0.1:1")
            .env("ORBIT_TOKEN", "sentinel-token-7f3a")
            .env("ORBIT_QUEUE_ID", "0123456789abcdef0123456789abcdef")
            .env("ORBIT_CA_FILE", &ca)
            .env("ORBIT_RECEIVER_DSN", "mysql://app@127.0.0.1:1/receiver")
            .output()
            .unwrap();
        let (_, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains("ORBIT_CA_FILE") && stderr.contains(expected),
            "{stderr}"
        );
        assert!(!stderr.contains("sentinel-token-7f3a"));
    }
    // The flag works as the variable does.
    let out = receiver()
        .args(["demo", "--orbit-ca-file", "/nonexistent/flag-ca.pem"])
        .env_remove("ORBIT_CA_FILE")
        .env("ORBIT_URL", "https://127.0.0.1:1")
        .env("ORBIT_TOKEN", "sentinel-token-7f3a")
        .env("ORBIT_QUEUE_ID", "0123456789abcdef0123456789abcdef")
        .env("ORBIT_RECEIVER_DSN", "mysql://app@127.0.0.1:1/receiver")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).1.contains("/nonexistent/flag-ca.pem"));
}

/// A loopback "database" that hangs up on every connection at once: sqlx
/// gives up on it immediately (a refused port it would retry for seconds).
struct HangUp {
    port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl HangUp {
    fn start() -> HangUp {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let thread = std::thread::spawn({
            let stop = stop.clone();
            move || {
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    match listener.accept() {
                        Ok((conn, _)) => drop(conn),
                        Err(_) => std::thread::sleep(Duration::from_millis(5)),
                    }
                }
            }
        });
        HangUp {
            port,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for HangUp {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[test]
fn plain_http_to_a_non_loopback_host_is_warned_about_before_anything_is_sent() {
    // `consume` resolves its configuration (and warns), then checks the
    // database — a loopback port that hangs up at once, which it waits for
    // as a server not up yet — before the Orbit client makes any call; the
    // test stops it there with SIGTERM. 192.0.2.1 is TEST-NET-1: no packet
    // is ever sent to it.
    let database = HangUp::start();
    let run = |url: &str| {
        let log = std::env::temp_dir().join(format!("tls-plain-http-{}", common::random_hex(4)));
        let mut child = receiver()
            .arg("consume")
            .env_remove("ORBIT_CA_FILE")
            .env("ORBIT_URL", url)
            .env("ORBIT_TOKEN", "sentinel-token-7f3a")
            .env("ORBIT_QUEUE_ID", "0123456789abcdef0123456789abcdef")
            .env("ORBIT_SUBSCRIPTION_ID", "fedcba9876543210fedcba9876543210")
            .env(
                "ORBIT_RECEIVER_DSN",
                format!(
                    "mysql://app:{PASSWORD}@127.0.0.1:{}/receiver",
                    database.port
                ),
            )
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !std::fs::read_to_string(&log)
            .unwrap()
            .contains("database not reachable yet")
        {
            assert!(
                std::time::Instant::now() < deadline,
                "{url}: never waited for the database"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        common::sigterm(child.id());
        let status = child.wait().unwrap();
        let stderr = std::fs::read_to_string(&log).unwrap();
        let _ = std::fs::remove_file(&log);
        assert!(status.success(), "{url}: {status}: {stderr}");
        assert!(!stderr.contains("Orbit not reachable"), "{url}: {stderr}");
        assert!(!stderr.contains("sentinel-token-7f3a") && !stderr.contains(PASSWORD));
        stderr
    };
    let warning = "plain http:// to a non-loopback host";
    let stderr = run("http://192.0.2.1:9");
    assert!(stderr.contains(warning), "{stderr}");
    assert!(stderr.contains("WARN"), "{stderr}");
    for quiet in ["https://192.0.2.1:9", "http://127.0.0.1:9"] {
        let stderr = run(quiet);
        assert!(!stderr.contains(warning), "{quiet}: {stderr}");
    }
}

#[tokio::test]
async fn on_postgres_a_tls_failure_names_sslmode_and_sslrootcert_not_mysql_s_options() {
    // The throwaway server offers no TLS: `require` cannot be met.
    let db = common::postgres::PgTestDb::new().await;
    let dsn = format!("{}?sslmode=require", db.dsn);
    for args in [&["init"][..], &["verify"][..], &["check"][..]] {
        let out = receiver()
            .args(args)
            .env("ORBIT_RECEIVER_DSN", &dsn)
            .env("ORBIT_URL", "http://127.0.0.1:1")
            .env("ORBIT_TOKEN", "t")
            .env("ORBIT_QUEUE_ID", "0123456789abcdef0123456789abcdef")
            .env("ORBIT_SUBSCRIPTION_ID", "fedcba9876543210fedcba9876543210")
            .env_remove("ORBIT_CREDENTIALS_FILE")
            .output()
            .unwrap();
        let (stdout, stderr) = text(&out);
        let said = format!("{stdout}{stderr}");
        assert_eq!(out.status.code(), Some(1), "{args:?}: {said}");
        assert!(
            said.contains(
                "TLS handshake with the database failed (check sslmode and sslrootcert in the DSN)"
            ),
            "{args:?}: {said}"
        );
        assert!(
            !said.contains("ssl-mode") && !said.contains("ssl-ca"),
            "{args:?}: {said}"
        );
    }
}
