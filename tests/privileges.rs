//! Least privilege: the runtime account needs only SELECT, INSERT and UPDATE
//! on the two receiver tables, and nothing at run time issues DELETE or DDL.

use crate::common;

use std::time::Duration;

use common::consume::Consume;
use common::orbit::{receiver, OrbitDev};
use common::TestDb;
use result_inbox::event::EventType;

/// The statements the server's general log recorded for `user`'s connections.
fn statements_of(user: &str) -> Vec<String> {
    let log = common::general_log();
    let mut threads = std::collections::HashSet::new();
    let mut statements = Vec::new();
    for line in log.lines() {
        // Entries look like "<time>\t<id> <Command>\t<argument>"; a statement
        // spanning several lines continues without that prefix.
        let Some((id, command, argument)) = line.split('\t').find_map(|field| {
            let (id, command) = field.trim().split_once(' ')?;
            let id: u64 = id.parse().ok()?;
            let argument = line.split_once(&format!("{command}\t")).map(|(_, a)| a)?;
            Some((id, command.to_owned(), argument.to_owned()))
        }) else {
            continue;
        };
        if command == "Connect" && argument.starts_with(&format!("{user}@")) {
            threads.insert(id);
        } else if threads.contains(&id)
            && matches!(command.as_str(), "Query" | "Prepare" | "Execute")
        {
            statements.push(argument);
        }
    }
    statements
}

#[tokio::test]
async fn consume_and_the_demo_run_with_only_select_insert_update_on_the_two_tables() {
    let db = TestDb::initialized().await;
    let (user, password) = db
        .user_with(&[
            "SELECT, INSERT, UPDATE ON `{db}`.receiver_inbox",
            "SELECT, INSERT, UPDATE ON `{db}`.receiver_task_views",
        ])
        .await;
    let dsn = db.dsn_of(&user, &password);
    let orbit = OrbitDev::start(30_000, 5);
    let creds = orbit.bootstrap("inbox-least-privilege", None).await;

    // The demo's apply path.
    let demo = receiver()
        .arg("demo")
        .env("ORBIT_CREDENTIALS_FILE", &creds.file)
        .env("ORBIT_RECEIVER_DSN", &dsn)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&demo.stderr);
    assert!(demo.status.success(), "{stderr}");
    assert!(!stderr.contains(&password));

    // A consumer of every event kind.
    let client = orbit.client(&creds);
    let sub = client.create_subscription(&EventType::ALL).await.unwrap();
    let task = client.submit_task().await.unwrap();
    client.cancel_task(&task.id).await.unwrap();
    let mut consume = Consume::start(&orbit, &creds, &dsn, &sub.id, "task-result-view", &[]);
    orbit
        .wait_for_counts(&creds, &sub.id, Duration::from_secs(20), |c| {
            c["acked"] == 2
        })
        .await;
    assert!(consume.terminate().success());
    assert!(!consume.output().contains(&password));

    // Nothing at run time deleted a row or changed the schema.
    let statements = statements_of(&user);
    assert!(
        statements
            .iter()
            .any(|s| s.contains("INSERT INTO receiver_inbox")),
        "the log recorded the receiver's statements"
    );
    for statement in &statements {
        let verb = statement
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_uppercase();
        assert!(
            !matches!(
                verb.as_str(),
                "DELETE"
                    | "TRUNCATE"
                    | "DROP"
                    | "ALTER"
                    | "CREATE"
                    | "RENAME"
                    | "GRANT"
                    | "REVOKE"
                    | "REPLACE"
            ),
            "runtime statement {statement:?}"
        );
    }
}

#[tokio::test]
async fn init_without_the_create_privilege_fails_with_a_clear_message_and_creates_nothing() {
    let db = TestDb::empty().await;
    let (user, password) = db.user_with(&["SELECT, INSERT, UPDATE ON `{db}`.*"]).await;
    let out = receiver()
        .arg("init")
        .env("ORBIT_RECEIVER_DSN", db.dsn_of(&user, &password))
        .output()
        .unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    // A grant to add: the configuration's to fix, like every refusal.
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("permission denied"), "{stderr}");
    assert!(stderr.contains("needs the CREATE privilege"), "{stderr}");
    assert!(!stderr.contains(&password));
    let tables: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ?")
            .bind(&db.name)
            .fetch_one(&db.admin)
            .await
            .unwrap();
    assert_eq!(tables, 0);
}

/// The statement an error message tells an operator to run: from its
/// `GRANT` to the `;` that ends it.
pub(crate) fn advised_grant(message: &str) -> String {
    let from = message
        .find("GRANT ")
        .unwrap_or_else(|| panic!("no GRANT to run in: {message}"));
    let to = message[from..]
        .find(';')
        .unwrap_or_else(|| panic!("the GRANT does not end in: {message}"));
    message[from..=from + to].to_owned()
}

#[tokio::test]
async fn init_refused_create_names_the_grant_on_the_database_and_running_it_lets_init_succeed() {
    let db = TestDb::empty().await;
    let (user, password) = db.user_with(&["SELECT, INSERT, UPDATE ON `{db}`.*"]).await;
    let init = || {
        receiver()
            .arg("init")
            .env("ORBIT_RECEIVER_DSN", db.dsn_of(&user, &password))
            .output()
            .unwrap()
    };
    let refused = init();
    let stderr = String::from_utf8(refused.stderr).unwrap();
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("the CREATE privilege on database {}", db.name)),
        "{stderr}"
    );
    let grant = advised_grant(&stderr);
    assert_eq!(
        grant,
        format!("GRANT CREATE ON `{}`.* TO '{user}'@'%';", db.name)
    );
    // Run as the message says, by an administrator.
    sqlx::query(grant.trim_end_matches(';'))
        .execute(&db.admin)
        .await
        .unwrap();
    let out = init();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "receiver_schema_initialized=true foreign_keys=0\n"
    );
}

#[tokio::test]
async fn init_with_a_wrong_password_says_so_and_exits_2() {
    let db = TestDb::empty().await;
    let (user, _) = db.user_with(&["ALL ON `{db}`.*"]).await;
    let out = receiver()
        .arg("init")
        .env("ORBIT_RECEIVER_DSN", db.dsn_of(&user, "not-the-password"))
        .output()
        .unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("wrong user or password (MySQL error 1045"),
        "{stderr}"
    );
    assert!(!stderr.contains("not-the-password"));
}
