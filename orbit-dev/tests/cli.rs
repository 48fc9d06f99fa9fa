//! The `orbit-dev` binary: `serve`, `bootstrap`, `submit` and `cancel`.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::Server;
use serde_json::Value;

const BINARY: &str = env!("CARGO_BIN_EXE_orbit-dev");

/// A fresh directory under the target's test scratch space.
fn scratch_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("orbit-dev-cli-{}", orbit_dev::ids::Id::random()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn the_serve_command_prints_its_listening_address_and_exits_0_on_sigterm() {
    let dir = scratch_dir();
    let token_file = dir.join("admin-token");
    let mut child = Command::new(BINARY)
        .args(["serve", "--listen", "127.0.0.1:0", "--admin-token-file"])
        .arg(&token_file)
        .env_remove("ORBIT_DEV_ADMIN_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let address = line
        .trim_end()
        .strip_prefix("orbit-dev listening on http://")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_string();
    assert!(!address.ends_with(":0"), "the real port is printed");

    let admin_token = std::fs::read_to_string(&token_file).unwrap();
    assert!(admin_token.len() >= 32);
    assert_eq!(mode(&token_file), 0o600);

    let mut connection = TcpStream::connect(&address).unwrap();
    write!(
        connection,
        "GET /healthz HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    connection.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");

    let pid = i32::try_from(child.id()).unwrap();
    // SAFETY: kill(2) with a pid we spawned and a valid signal number.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "serve did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0));

    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(
        rest.is_empty(),
        "only the listening line goes to stdout: {rest:?}"
    );
    assert!(!stderr.contains(admin_token.trim()));
    std::fs::remove_dir_all(dir).unwrap();
}

async fn run_bootstrap(
    server: &Server,
    token_file: &Path,
    output: &Path,
    extra: &[&str],
) -> Output {
    let mut command = Command::new(BINARY);
    command
        .args(["bootstrap", "--url", &server.url])
        .arg("--admin-token-file")
        .arg(token_file)
        .args([
            "--application",
            "inbox-example",
            "--namespace",
            "default",
            "--environment",
            "development",
            "--queue",
            "inbox-demo",
            "--event-access",
        ])
        .arg("--output")
        .arg(output)
        .args(extra)
        .env_remove("ORBIT_DEV_ADMIN_TOKEN")
        .env_remove("ORBIT_URL")
        .env_remove("ORBIT_CREDENTIALS_FILE")
        .stdin(Stdio::null());
    tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bootstrap_command_writes_a_0600_credentials_file_and_never_prints_the_token() {
    let server = Server::start().await;
    let dir = scratch_dir();
    let token_file = dir.join("admin-token");
    std::fs::write(&token_file, format!("{}\n", server.admin_token)).unwrap();
    let output = dir.join("new-dir").join("inbox.credentials.json");

    let run = run_bootstrap(&server, &token_file, &output, &[]).await;
    let stdout = String::from_utf8(run.stdout).unwrap();
    let stderr = String::from_utf8(run.stderr).unwrap();
    assert!(run.status.success(), "{stderr}");
    assert_eq!(mode(&output), 0o600);
    let credentials: Value = serde_json::from_slice(&std::fs::read(&output).unwrap()).unwrap();
    let token = credentials["token"].as_str().unwrap();
    assert_eq!(credentials["orbit_url"], server.url.as_str());
    assert!(common::is_id(credentials["queue_id"].as_str().unwrap()));
    assert_eq!(credentials["namespace"], "default");
    assert_eq!(credentials["application"], "inbox-example");
    assert_eq!(credentials["environment"], "development");
    assert_eq!(credentials["queue"], "inbox-demo");
    assert_eq!(
        credentials["scopes"],
        serde_json::json!([
            "tasks:submit",
            "tasks:cancel",
            "events:read",
            "events:consume",
            "events:manage"
        ])
    );
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    assert!(stdout.contains(credentials["queue_id"].as_str().unwrap()));
    assert!(!stdout.contains(token) && !stderr.contains(token));
    assert!(!stdout.contains(&server.admin_token) && !stderr.contains(&server.admin_token));

    let listed = server.get("/v1/subscriptions", token).await;
    assert_eq!(listed.status, 200, "the written token works");
    server.stop().await;
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bootstrap_command_refuses_to_overwrite_a_credentials_file_unless_forced() {
    let server = Server::start().await;
    let dir = scratch_dir();
    let token_file = dir.join("admin-token");
    std::fs::write(&token_file, &server.admin_token).unwrap();
    let output = dir.join("inbox.credentials.json");
    std::fs::write(&output, "keep me").unwrap();

    let refused = run_bootstrap(&server, &token_file, &output, &[]).await;
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--force"));
    assert_eq!(std::fs::read_to_string(&output).unwrap(), "keep me");

    let forced = run_bootstrap(&server, &token_file, &output, &["--force"]).await;
    assert!(forced.status.success());
    assert_eq!(mode(&output), 0o600);
    let credentials: Value = serde_json::from_slice(&std::fs::read(&output).unwrap()).unwrap();
    assert!(credentials["token"].is_string());
    server.stop().await;
    std::fs::remove_dir_all(dir).unwrap();
}

#[cfg(feature = "nats")]
#[test]
fn the_bridge_never_prints_the_nats_password_in_its_help_its_start_line_or_its_error() {
    let dir = scratch_dir();
    let credentials = dir.join("credentials.json");
    std::fs::write(
        &credentials,
        r#"{"orbit_url":"http://127.0.0.1:1","token":"t","queue_id":"0123456789abcdef0123456789abcdef","namespace":"n","application":"a","environment":"e","queue":"q","scopes":[]}"#,
    )
    .unwrap();
    // Port 1 on loopback: nothing listens, so the bridge fails to connect.
    let url = "nats://bridge:sentinel-nats-password@127.0.0.1:1";
    let help = Command::new(BINARY)
        .args(["bridge", "--help"])
        .env("NATS_URL", url)
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    assert!(help.contains("NATS_URL"), "{help}");
    assert!(!help.contains("sentinel-nats-password"), "{help}");

    let run = Command::new(BINARY)
        .args([
            "bridge",
            "--subscription",
            "fedcba9876543210fedcba9876543210",
        ])
        .env("NATS_URL", url)
        .env("ORBIT_CREDENTIALS_FILE", &credentials)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&run.stdout).into_owned();
    let err = String::from_utf8_lossy(&run.stderr).into_owned();
    assert!(!run.status.success(), "{out}{err}");
    assert!(out.contains("nats://<redacted>@127.0.0.1:1"), "{out}");
    assert!(err.contains("<redacted>@127.0.0.1:1"), "{err}");
    for text in [out, err] {
        assert!(!text.contains("sentinel-nats-password"), "{text}");
    }
}

#[cfg(feature = "rabbitmq")]
#[test]
fn the_bridge_to_rabbitmq_never_prints_the_amqp_password_and_takes_one_broker_only() {
    let dir = scratch_dir();
    let credentials = dir.join("credentials.json");
    std::fs::write(
        &credentials,
        r#"{"orbit_url":"http://127.0.0.1:1","token":"t","queue_id":"0123456789abcdef0123456789abcdef","namespace":"n","application":"a","environment":"e","queue":"q","scopes":[]}"#,
    )
    .unwrap();
    let bridge = |vars: &[(&str, &str)]| {
        let run = Command::new(BINARY)
            .args([
                "bridge",
                "--subscription",
                "fedcba9876543210fedcba9876543210",
            ])
            .env_remove("NATS_URL")
            .env_remove("AMQP_URL")
            .envs(vars.iter().copied())
            .env("ORBIT_CREDENTIALS_FILE", &credentials)
            .output()
            .unwrap();
        let printed = String::from_utf8_lossy(&run.stdout).into_owned()
            + &String::from_utf8_lossy(&run.stderr);
        (run.status.success(), printed)
    };
    // Port 1 on loopback: nothing listens, so the bridge fails to connect.
    let url = "amqp://bridge:sentinel-amqp-password@127.0.0.1:1/";
    let (ok, printed) = bridge(&[("AMQP_URL", url)]);
    assert!(!ok, "{printed}");
    assert!(
        printed.contains("cannot reach RabbitMQ at amqp://bridge@127.0.0.1:1/"),
        "{printed}"
    );
    assert!(!printed.contains("sentinel-amqp-password"), "{printed}");

    let (ok, printed) = bridge(&[("AMQP_URL", url), ("NATS_URL", "nats://127.0.0.1:1")]);
    assert!(!ok && printed.contains("cannot be used with"), "{printed}");
    assert!(!printed.contains("sentinel-amqp-password"), "{printed}");
    let (ok, printed) = bridge(&[]);
    assert!(!ok && printed.contains("--nats-url"), "{printed}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_finds_the_server_by_url_then_orbit_url_then_the_credentials_file() {
    let server = Server::start().await;
    let token = server.token("default", "inbox-url").await;
    let task = server.submit(&token).await;
    let dir = scratch_dir();
    let credentials = dir.join("credentials.json");
    std::fs::write(
        &credentials,
        serde_json::json!({
            "orbit_url": server.url, "token": token.token, "queue_id": token.queue_id,
            "namespace": "default", "application": "a", "environment": "e",
            "queue": "inbox-url", "scopes": [],
        })
        .to_string(),
    )
    .unwrap();
    // Nothing listens on port 1: a command that went there would say so.
    let finish = |env: Vec<(&'static str, String)>| {
        let mut command = Command::new(BINARY);
        command
            .args(["finish", "--task-id", &task, "--outcome", "succeeded"])
            .env("ORBIT_DEV_ADMIN_TOKEN", &server.admin_token)
            .env_remove("ORBIT_URL")
            .env_remove("ORBIT_CREDENTIALS_FILE")
            .envs(env);
        command.output().unwrap()
    };
    let out = tokio::task::block_in_place(|| {
        finish(vec![(
            "ORBIT_CREDENTIALS_FILE",
            credentials.display().to_string(),
        )])
    });
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let wrong = tokio::task::block_in_place(|| {
        finish(vec![
            ("ORBIT_CREDENTIALS_FILE", credentials.display().to_string()),
            ("ORBIT_URL", "http://127.0.0.1:1".to_owned()),
        ])
    });
    let err = String::from_utf8_lossy(&wrong.stderr);
    assert!(
        !wrong.status.success() && err.contains("127.0.0.1:1"),
        "ORBIT_URL wins: {err}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_and_cancel_take_the_token_from_the_credentials_file_and_never_print_it() {
    let server = Server::start().await;
    let token = server.token("default", "inbox-cancel").await;
    let dir = scratch_dir();
    let credentials = dir.join("credentials.json");
    std::fs::write(
        &credentials,
        serde_json::json!({
            "orbit_url": server.url, "token": token.token, "queue_id": token.queue_id,
            "namespace": "default", "application": "a", "environment": "e",
            "queue": "inbox-cancel", "scopes": [],
        })
        .to_string(),
    )
    .unwrap();
    std::fs::set_permissions(&credentials, std::fs::Permissions::from_mode(0o600)).unwrap();
    let run = |args: &[&str]| {
        let output = Command::new(BINARY)
            .args(args)
            .env("ORBIT_CREDENTIALS_FILE", &credentials)
            .env_remove("ORBIT_URL")
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&output.stdout).into_owned()
            + &String::from_utf8_lossy(&output.stderr);
        assert!(!said.contains(&token.token), "{said}");
        (output.status.success(), said)
    };
    let (submitted, said) = tokio::task::block_in_place(|| run(&["submit"]));
    assert!(submitted, "{said}");
    let task = said.trim().strip_prefix("task=").unwrap().to_owned();
    let (cancelled, said) = tokio::task::block_in_place(|| run(&["cancel", "--task-id", &task]));
    assert!(cancelled, "{said}");
    assert_eq!(said, format!("task={task} version=2 state=CANCELLED\n"));
    let stored = server.get(&format!("/v1/tasks/{task}"), &token.token).await;
    assert_eq!(stored.json::<Value>().unwrap()["state"], "CANCELLED");
    // A task that can no longer be cancelled: Orbit's answer, exit 1.
    let (again, said) = tokio::task::block_in_place(|| run(&["cancel", "--task-id", &task]));
    assert!(!again, "{said}");
    assert!(said.contains("409 invalid_transition"), "{said}");
    server.stop().await;
    std::fs::remove_dir_all(dir).unwrap();
}
