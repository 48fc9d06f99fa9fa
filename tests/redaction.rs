//! Nothing secret ever leaves the process: every subcommand is driven through
//! its error paths with sentinel secrets, with logging at its most verbose,
//! and no sentinel may appear in stdout or stderr.

use crate::common;

use std::process::Output;
use std::time::Duration;

use common::consume::Consume;
use common::orbit::{receiver, OrbitDev};
use common::{dsn_for, random_hex, EventSpec, TestDb};
use result_inbox::event::EventType;

const PASSWORD: &str = "sentinel-password-4f1d";
const TOKEN: &str = "sentinel-token-93ac";
const RESULT: &str = "sentinel-result-body-7e20";

/// Everything a process printed.
fn printed(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

/// Asserts that no sentinel (nor any lease proof of orbit-dev, which all
/// start with `lp_`) is in `text`.
fn assert_clean(what: &str, text: &str) {
    for secret in [PASSWORD, TOKEN, RESULT, "lp_"] {
        assert!(!text.contains(secret), "{what} printed {secret:?}:\n{text}");
    }
}

/// A DSN for `db` on the throwaway server with the sentinel password.
fn dsn_with_password(db: &str) -> String {
    dsn_for(db).replacen("root@", &format!("root:{PASSWORD}@"), 1)
}

#[tokio::test]
async fn init_never_prints_the_password() {
    let db = TestDb::empty().await;
    let cases = [
        ("wrong password", dsn_with_password(&db.name)),
        (
            "refused connection",
            format!("mysql://root:{PASSWORD}@127.0.0.1:1/{}", db.name),
        ),
        (
            "no database",
            format!("mysql://root:{PASSWORD}@127.0.0.1:1"),
        ),
        ("not a URL", format!("root:{PASSWORD}@nowhere")),
    ];
    for (what, dsn) in cases {
        let out = receiver()
            .arg("init")
            .env("ORBIT_RECEIVER_DSN", &dsn)
            .env("RECEIVER_LOG", "trace")
            .output()
            .unwrap();
        assert!(!out.status.success(), "{what}");
        assert_clean(what, &printed(&out));
    }
}

#[tokio::test]
async fn digest_never_echoes_the_document() {
    for doc in [
        format!(r#"{{"result":"{RESULT}","result":"{RESULT}"}}"#),
        format!(r#"{{"result":"{RESULT}"#),
        format!("\"{RESULT}\u{1}\""),
    ] {
        let dir = std::env::temp_dir().join(format!("redaction-{}", random_hex(4)));
        std::fs::write(&dir, doc).unwrap();
        let out = receiver()
            .args(["digest", dir.to_str().unwrap()])
            .env("RECEIVER_LOG", "trace")
            .output()
            .unwrap();
        std::fs::remove_file(&dir).ok();
        assert_eq!(out.status.code(), Some(3));
        assert_clean("digest", &printed(&out));
    }
}

#[tokio::test]
async fn demo_and_consume_never_print_a_token_password_proof_or_result() {
    let orbit = OrbitDev::start(1_000, 2);
    let creds = orbit.bootstrap("inbox-redaction-paths", None).await;
    let db = TestDb::initialized().await;
    let client = orbit.client(&creds);
    let sub = client.create_subscription(&EventType::ALL).await.unwrap();

    // Orbit refuses a wrong token; the database refuses a wrong password.
    for (what, env) in [
        (
            "demo with a wrong token",
            vec![
                ("ORBIT_TOKEN", TOKEN.to_owned()),
                ("ORBIT_RECEIVER_DSN", dsn_for(&db.name)),
            ],
        ),
        (
            "demo with a wrong password",
            vec![("ORBIT_RECEIVER_DSN", dsn_with_password(&db.name))],
        ),
    ] {
        let out = receiver()
            .arg("demo")
            .env("ORBIT_CREDENTIALS_FILE", &creds.file)
            .env("RECEIVER_LOG", "trace")
            .envs(env)
            .output()
            .unwrap();
        // A refused token or login is the configuration's to fix: exit 2.
        assert_eq!(out.status.code(), Some(2), "{what}");
        assert_clean(what, &printed(&out));
    }
    let out = receiver()
        .arg("consume")
        .env("ORBIT_CREDENTIALS_FILE", &creds.file)
        .env("ORBIT_TOKEN", TOKEN)
        .env("ORBIT_SUBSCRIPTION_ID", sub.id.as_str())
        .env("ORBIT_RECEIVER_DSN", dsn_for(&db.name))
        .env("RECEIVER_LOG", "trace")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_clean("consume with a wrong token", &printed(&out));

    // Deliveries that fail every way the inbox can fail, each carrying the
    // sentinel result: a rejected event, a content conflict, a version
    // conflict, and an applied event whose ACK is fine.
    let task = random_hex(16);
    let spec = |id: &str, version, event_type, state, result| EventSpec {
        id: id.to_owned(),
        queue_id: &creds.queue_id,
        task_id: &task,
        version,
        event_type,
        state,
        result,
    };
    let body = format!(r#"{{"secret":"{RESULT}"}}"#);
    let first_id = random_hex(16);
    let events = [
        spec(&first_id, 2, "task.succeeded", "SUCCEEDED", Some(&body)).json(),
        spec(
            &random_hex(16),
            3,
            "task.cancelled",
            "CANCELLED",
            Some(&body),
        )
        .json(),
        spec(
            &first_id,
            2,
            "task.succeeded",
            "SUCCEEDED",
            Some(r#"{"other":1}"#),
        )
        .json(),
        spec(&random_hex(16), 2, "task.failed", "FAILED", Some(&body)).json(),
    ];
    orbit.inject(&sub.id, &events[0]).await;
    let mut consume = Consume::start(
        &orbit,
        &creds,
        &dsn_for(&db.name),
        &sub.id,
        "task-result-view",
        &[("RECEIVER_LOG", "trace")],
    );
    orbit
        .wait_for_counts(&creds, &sub.id, Duration::from_secs(20), |c| {
            c["acked"] == 1
        })
        .await;
    for e in &events[1..] {
        orbit.inject(&sub.id, e).await;
    }
    // The three failing deliveries spend their budget of 2 attempts.
    orbit
        .wait_for_counts(&creds, &sub.id, Duration::from_secs(20), |c| {
            c["expired"] == 3
        })
        .await;
    assert!(consume.terminate().success());
    let out = consume.output();
    for class in ["rejected", "conflict"] {
        assert!(out.contains(&format!("class=\"{class}\"")), "{out}");
    }
    assert!(out.len() > 10_000, "trace logging was on");
    assert_clean("consume at trace level", &out);
}
