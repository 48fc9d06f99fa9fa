//! The README's path from nothing to `receiver consume`, run exactly as it
//! is written there: the same commands, with only the port, the database
//! and the working directory made the test's own. What they print is held
//! to the output the README shows.

mod common;

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::orbit::{bin_dir, http};
use common::{dsn_for, random_hex, TestDb};
use result_inbox::orbit::{OrbitClient, OrbitUrl, Token};
use result_inbox::scope::{InboxScope, ReceiverName};

/// The fenced block that follows `marker` in the README.
fn block_after(readme: &str, marker: &str) -> String {
    let after = readme
        .split_once(marker)
        .unwrap_or_else(|| panic!("README has no {marker}"))
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

#[tokio::test]
async fn the_readme_path_from_nothing_to_consume_works_as_written() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let commands = block_after(&readme, "<!-- consume-path:commands -->");
    let expected = block_after(&readme, "<!-- consume-path:output -->");

    let db = TestDb::empty().await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let script = commands
        .replace("127.0.0.1:8080", &format!("127.0.0.1:{port}"))
        .replace(
            "'mysql://root@127.0.0.1:3306/receiver_example'",
            &format!("'{}'", dsn_for(&db.name)),
        );
    assert_ne!(script, commands, "the README's port or DSN changed");
    let expected = expected.replace("127.0.0.1:8080", &format!("127.0.0.1:{port}"));
    let dir = std::env::temp_dir().join(format!("readme-path-{}", random_hex(4)));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("output");
    let path = format!(
        "{}:{}",
        bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut run = Command::new("bash")
        .args(["-c", &format!("set -e\n{script}")])
        .current_dir(&dir)
        .env("PATH", path)
        .env_remove("RECEIVER_LOG")
        .env_remove("RUST_LOG")
        .env_remove("ORBIT_SUBSCRIPTION_ID")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::fs::File::create(dir.join("stderr")).unwrap())
        // Its own process group, so that the test can stop all it started.
        .process_group(0)
        .spawn()
        .unwrap();
    let group = run.id() as i32;
    let stop_all = || {
        // SAFETY: kill(2) with a negative pid signals the process group.
        unsafe {
            libc::kill(-group, libc::SIGTERM);
        }
    };
    let output = || {
        std::fs::read_to_string(&log).unwrap()
            + &std::fs::read_to_string(dir.join("stderr")).unwrap()
    };

    // Wait for the last line the README promises.
    let deadline = Instant::now() + Duration::from_secs(60);
    let last = expected.lines().last().unwrap().to_owned();
    while !output().lines().any(|l| matches(l, &last)) {
        if run.try_wait().unwrap().is_some() || Instant::now() > deadline {
            stop_all();
            panic!(
                "the README's commands did not reach {last:?}:\n{}",
                output()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Every promised line, in order.
    let printed = output();
    let mut lines = printed.lines();
    for want in expected.lines() {
        assert!(
            lines.any(|l| matches(l, want)),
            "{want:?} missing (or out of order) in:\n{printed}"
        );
    }

    // And it consumes: a task submitted and cancelled on the queue ends in
    // the view, both events acknowledged.
    let credentials: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join(".local/inbox.credentials.json")).unwrap(),
    )
    .unwrap();
    let token = credentials["token"].as_str().unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let client = OrbitClient::new(
        OrbitUrl::parse(&url).unwrap(),
        Token::new(token),
        Duration::from_secs(10),
    )
    .unwrap();
    let task = client.submit_task().await.unwrap();
    client.cancel_task(&task.id).await.unwrap();
    let subscription = std::fs::read_to_string(dir.join(".local/subscription")).unwrap();
    let subscription = subscription.trim().trim_start_matches("subscription=");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, body) = http(
            "GET",
            &format!("{url}/v1/subscriptions/{subscription}"),
            token,
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
            output()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop_all();
    run.wait().unwrap();
    let queue =
        result_inbox::ids::QueueId::parse(credentials["queue_id"].as_str().unwrap()).unwrap();
    let scope = InboxScope::new(ReceiverName::default(), queue);
    let view = result_inbox::task_view::load(&db.pool().await, &scope, &task.id)
        .await
        .unwrap()
        .expect("the task's view");
    assert_eq!(view.last_state, "CANCELLED");
    assert!(!output().contains(token), "the token was printed");
    let _ = std::fs::remove_dir_all(&dir);
}
