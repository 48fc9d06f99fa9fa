//! The receiver schema as the server reports it (R1), and `receiver init`.

use crate::common;

use std::process::Command;

use common::{dsn_for, TestDb};
use sqlx::MySqlPool;

async fn columns(pool: &MySqlPool, db: &str) -> Vec<(String, String, String)> {
    sqlx::query_as(
        "SELECT CAST(TABLE_NAME AS CHAR), CAST(COLUMN_NAME AS CHAR), CAST(COLUMN_COMMENT AS CHAR) \
         FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? ORDER BY TABLE_NAME, ORDINAL_POSITION",
    )
    .bind(db)
    .fetch_all(pool)
    .await
    .unwrap()
}

fn is_chinese(c: char) -> bool {
    ('\u{4e00}'..='\u{9fff}').contains(&c)
}

async fn tables(pool: &MySqlPool, db: &str) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT CAST(TABLE_NAME AS CHAR) FROM information_schema.TABLES \
         WHERE TABLE_SCHEMA = ? ORDER BY TABLE_NAME",
    )
    .bind(db)
    .fetch_all(pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn the_model_has_two_tables_and_seventeen_columns_all_commented_in_chinese() {
    let db = TestDb::initialized().await;
    assert_eq!(
        tables(&db.admin, &db.name).await,
        ["receiver_inbox", "receiver_task_views"]
    );
    let all = columns(&db.admin, &db.name).await;
    assert_eq!(all.len(), 17, "{all:?}");
    for (table, column, comment) in &all {
        assert!(
            comment.chars().any(is_chinese),
            "{table}.{column} has no Chinese comment: {comment:?}"
        );
    }
}

#[tokio::test]
async fn the_prune_tally_is_a_third_table_of_seven_columns_all_commented_in_chinese() {
    let db = TestDb::initialized_with_retention().await;
    let all = columns(&db.admin, &db.name).await;
    let (tally, model): (Vec<_>, Vec<_>) = all.iter().partition(|c| c.0 == "receiver_pruned");
    assert_eq!(model.len(), 17, "{model:?}");
    assert_eq!(tally.len(), 7, "{tally:?}");
    for (table, column, comment) in &tally {
        assert!(
            comment.chars().any(is_chinese),
            "{table}.{column} has no Chinese comment: {comment:?}"
        );
    }
}

#[tokio::test]
async fn the_schema_and_the_tally_have_no_foreign_keys_and_use_innodb_and_utf8mb4() {
    let db = TestDb::initialized_with_retention().await;
    let fks: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM information_schema.REFERENTIAL_CONSTRAINTS WHERE CONSTRAINT_SCHEMA = ?",
    )
    .bind(&db.name)
    .fetch_one(&db.admin)
    .await
    .unwrap();
    assert_eq!(fks, 0);
    let tables: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT CAST(TABLE_NAME AS CHAR), CAST(ENGINE AS CHAR), CAST(TABLE_COLLATION AS CHAR) \
         FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? ORDER BY TABLE_NAME",
    )
    .bind(&db.name)
    .fetch_all(&db.admin)
    .await
    .unwrap();
    assert_eq!(tables.len(), 3);
    for (table, engine, collation) in tables {
        assert_eq!(engine, "InnoDB", "{table}");
        assert!(collation.starts_with("utf8mb4"), "{table}: {collation}");
    }
}

#[tokio::test]
async fn each_table_is_unique_on_its_scope_and_identity() {
    let db = TestDb::initialized_with_retention().await;
    let keys: Vec<(String, String)> = sqlx::query_as(
        "SELECT CAST(TABLE_NAME AS CHAR), \
         CAST(GROUP_CONCAT(COLUMN_NAME ORDER BY SEQ_IN_INDEX) AS CHAR) \
         FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = ? AND NON_UNIQUE = 0 \
         GROUP BY TABLE_NAME, INDEX_NAME ORDER BY TABLE_NAME",
    )
    .bind(&db.name)
    .fetch_all(&db.admin)
    .await
    .unwrap();
    assert_eq!(
        keys,
        [
            (
                "receiver_inbox".into(),
                "consumer_name,queue_id,event_id".into()
            ),
            (
                "receiver_pruned".into(),
                "consumer_name,queue_id,task_id".into()
            ),
            (
                "receiver_task_views".into(),
                "consumer_name,queue_id,task_id".into()
            ),
        ]
    );
}

#[tokio::test]
async fn event_and_result_are_stored_as_text_not_as_json() {
    let db = TestDb::initialized().await;
    let types: Vec<(String, String)> = sqlx::query_as(
        "SELECT CAST(COLUMN_NAME AS CHAR), CAST(DATA_TYPE AS CHAR) FROM information_schema.COLUMNS \
         WHERE TABLE_SCHEMA = ? AND COLUMN_NAME IN ('event_canonical', 'last_result') ORDER BY COLUMN_NAME",
    )
    .bind(&db.name)
    .fetch_all(&db.admin)
    .await
    .unwrap();
    assert_eq!(
        types,
        [
            ("event_canonical".into(), "mediumtext".into()),
            ("last_result".into(), "mediumtext".into())
        ]
    );
}

fn receiver() -> Command {
    common::orbit::receiver()
}

async fn show_create(pool: &MySqlPool, db: &str) -> Vec<String> {
    let mut out = Vec::new();
    for table in ["receiver_inbox", "receiver_task_views"] {
        let (_, ddl): (String, String) =
            sqlx::query_as(&format!("SHOW CREATE TABLE `{db}`.`{table}`"))
                .fetch_one(pool)
                .await
                .unwrap();
        out.push(ddl);
    }
    out
}

#[tokio::test]
async fn receiver_init_prints_the_schema_line_with_foreign_keys_read_back() {
    let db = TestDb::empty().await;
    let out = receiver()
        .arg("init")
        .env("ORBIT_RECEIVER_DSN", dsn_for(&db.name))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "receiver_schema_initialized=true foreign_keys=0\n"
    );
    assert_eq!(show_create(&db.admin, &db.name).await.len(), 2);
}

#[tokio::test]
async fn a_second_init_fails_clearly_and_leaves_both_tables_exactly_as_they_were() {
    let db = TestDb::initialized().await;
    let pool = db.pool().await;
    sqlx::query(
        "INSERT INTO receiver_inbox VALUES ('r', 'q', 'e', REPEAT('0', 64), '{}', 0, UTC_TIMESTAMP(6))",
    )
    .execute(&pool)
    .await
    .unwrap();
    let before = show_create(&db.admin, &db.name).await;

    let out = receiver()
        .arg("init")
        .env("ORBIT_RECEIVER_DSN", dsn_for(&db.name))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("already exist"), "{stderr}");
    assert!(stderr.contains("receiver init --keep-existing"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");

    assert_eq!(show_create(&db.admin, &db.name).await, before);
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM receiver_inbox")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(rows, 1);
}

#[tokio::test]
async fn init_refuses_when_only_one_table_exists_and_creates_nothing() {
    let db = TestDb::empty().await;
    let pool = db.pool().await;
    sqlx::query("CREATE TABLE receiver_task_views (x INT)")
        .execute(&pool)
        .await
        .unwrap();
    let err = result_inbox::db::schema::init(&db.dsn).await.unwrap_err();
    assert!(err.to_string().contains("receiver_task_views"), "{err}");
    let inbox_exists: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = 'receiver_inbox'",
    )
    .bind(&db.name)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(inbox_exists, 0);
}

#[tokio::test]
async fn the_received_at_comment_is_the_one_the_data_model_document_gives() {
    let db = TestDb::initialized().await;
    let cols = columns(&db.admin, &db.name).await;
    let (_, _, comment) = cols
        .iter()
        .find(|(t, c, _)| t == "receiver_inbox" && c == "received_at")
        .unwrap();
    let model =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/model.zh.md")).unwrap();
    let row = model
        .lines()
        .find(|l| l.starts_with("| `received_at`"))
        .unwrap();
    assert!(row.contains(comment.as_str()), "{comment:?} vs {row}");
    // What the code stores: the time of the INSERT (tests/inbox.rs proves it).
    assert!(comment.contains("INSERT"), "{comment}");
}

fn init_keeping_existing(db: &TestDb) -> std::process::Output {
    receiver()
        .args(["init", "--keep-existing"])
        .env("ORBIT_RECEIVER_DSN", dsn_for(&db.name))
        .output()
        .unwrap()
}

#[tokio::test]
async fn init_keeping_existing_tables_changes_nothing_and_counts_their_foreign_keys() {
    let db = TestDb::initialized().await;
    let out = init_keeping_existing(&db);
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "receiver_schema_initialized=true foreign_keys=0\n"
    );

    // The count is read from the server, not assumed: a foreign key someone
    // added shows.
    db.add_foreign_key().await;
    let before = show_create(&db.admin, &db.name).await;
    let out = init_keeping_existing(&db);
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "receiver_schema_initialized=true foreign_keys=1\n"
    );
    assert_eq!(show_create(&db.admin, &db.name).await, before);
}

#[tokio::test]
async fn init_keeping_existing_tables_still_refuses_a_schema_it_did_not_create() {
    let db = TestDb::initialized().await;
    sqlx::query("ALTER TABLE receiver_inbox DROP COLUMN received_at")
        .execute(&db.pool().await)
        .await
        .unwrap();
    let out = init_keeping_existing(&db);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("not those of schema.sql (table receiver_inbox lacks received_at)"),
        "{stderr}"
    );
}

fn init_with_args(db: &TestDb, args: &[&str]) -> std::process::Output {
    receiver()
        .arg("init")
        .args(args)
        .env("ORBIT_RECEIVER_DSN", dsn_for(&db.name))
        .output()
        .unwrap()
}

const INITIALIZED: &str = "receiver_schema_initialized=true foreign_keys=0\n";

#[tokio::test]
async fn a_plain_receiver_init_creates_only_the_two_tables_of_the_model_with_seventeen_commented_columns(
) {
    let db = TestDb::empty().await;
    let out = init_with_args(&db, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8(out.stdout).unwrap(), INITIALIZED);
    assert_eq!(
        tables(&db.admin, &db.name).await,
        ["receiver_inbox", "receiver_task_views"]
    );
    let all = columns(&db.admin, &db.name).await;
    assert_eq!(all.len(), 17, "{all:?}");
    assert!(all
        .iter()
        .all(|(_, _, comment)| comment.chars().any(is_chinese)));
}

#[tokio::test]
async fn receiver_init_with_retention_creates_the_two_tables_and_the_prune_tally() {
    let db = TestDb::empty().await;
    let out = init_with_args(&db, &["--retention"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8(out.stdout).unwrap(), INITIALIZED);
    assert_eq!(
        tables(&db.admin, &db.name).await,
        ["receiver_inbox", "receiver_pruned", "receiver_task_views"]
    );
}

#[tokio::test]
async fn init_keeping_existing_without_retention_does_not_create_the_tally() {
    let db = TestDb::initialized().await;
    let out = init_keeping_existing(&db);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), INITIALIZED);
    assert_eq!(
        tables(&db.admin, &db.name).await,
        ["receiver_inbox", "receiver_task_views"]
    );
}

#[tokio::test]
async fn init_keeping_existing_with_retention_adds_only_the_tally_and_leaves_the_two_tables_as_they_were(
) {
    let db = TestDb::initialized().await;
    let pool = db.pool().await;
    sqlx::query(
        "INSERT INTO receiver_inbox VALUES ('r', 'q', 'e', REPEAT('0', 64), '{}', 0, UTC_TIMESTAMP(6))",
    )
    .execute(&pool)
    .await
    .unwrap();
    let before = show_create(&db.admin, &db.name).await;

    let out = init_with_args(&db, &["--keep-existing", "--retention"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), INITIALIZED);
    assert_eq!(
        tables(&db.admin, &db.name).await,
        ["receiver_inbox", "receiver_pruned", "receiver_task_views"]
    );
    assert_eq!(show_create(&db.admin, &db.name).await, before);
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM receiver_inbox")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(rows, 1);
    let tally = columns(&db.admin, &db.name)
        .await
        .into_iter()
        .filter(|(table, _, _)| table == "receiver_pruned")
        .count();
    assert_eq!(tally, 7);

    // Run again, the tally is found in place and left as it is.
    let out = init_with_args(&db, &["--keep-existing", "--retention"]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), INITIALIZED);
    assert_eq!(tables(&db.admin, &db.name).await.len(), 3);
}

#[tokio::test]
async fn init_keeping_existing_with_retention_refuses_a_damaged_schema_and_adds_no_tally() {
    let db = TestDb::initialized().await;
    sqlx::query("ALTER TABLE receiver_inbox DROP COLUMN received_at")
        .execute(&db.pool().await)
        .await
        .unwrap();
    let out = init_with_args(&db, &["--keep-existing", "--retention"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("not those of schema.sql (table receiver_inbox lacks received_at)"),
        "{stderr}"
    );
    assert_eq!(
        tables(&db.admin, &db.name).await,
        ["receiver_inbox", "receiver_task_views"]
    );
}

#[tokio::test]
async fn init_with_retention_where_the_two_tables_exist_refuses_and_names_keep_existing() {
    let db = TestDb::initialized().await;
    let out = init_with_args(&db, &["--retention"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("already exist"), "{stderr}");
    assert!(
        stderr.contains("`receiver init --keep-existing --retention` adds receiver_pruned"),
        "{stderr}"
    );
    assert_eq!(
        tables(&db.admin, &db.name).await,
        ["receiver_inbox", "receiver_task_views"]
    );
}

#[tokio::test]
async fn init_refuses_when_only_the_tally_exists_and_creates_nothing() {
    let db = TestDb::empty().await;
    sqlx::query("CREATE TABLE receiver_pruned (x INT)")
        .execute(&db.pool().await)
        .await
        .unwrap();
    let err = result_inbox::db::schema::init(&db.dsn).await.unwrap_err();
    assert!(err.to_string().contains("receiver_pruned"), "{err}");
    assert_eq!(tables(&db.admin, &db.name).await, ["receiver_pruned"]);
}

#[tokio::test]
async fn init_keeping_existing_counts_a_foreign_key_on_the_tally_too() {
    let db = TestDb::initialized_with_retention().await;
    sqlx::query(
        "ALTER TABLE receiver_pruned ADD CONSTRAINT added_by_hand FOREIGN KEY \
         (consumer_name, queue_id, task_id) \
         REFERENCES receiver_task_views (consumer_name, queue_id, task_id)",
    )
    .execute(&db.pool().await)
    .await
    .unwrap();
    let out = init_keeping_existing(&db);
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "receiver_schema_initialized=true foreign_keys=1\n"
    );
}

#[tokio::test]
async fn receiver_init_with_outbox_creates_the_two_tables_and_the_outbox_and_without_it_none() {
    let db = TestDb::empty().await;
    let out = init_with_args(&db, &["--outbox"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8(out.stdout).unwrap(), INITIALIZED);
    assert_eq!(
        tables(&db.admin, &db.name).await,
        ["receiver_inbox", "receiver_outbox", "receiver_task_views"]
    );
    let plain = TestDb::empty().await;
    assert!(init_with_args(&plain, &[]).status.success());
    assert_eq!(
        tables(&plain.admin, &plain.name).await,
        ["receiver_inbox", "receiver_task_views"]
    );
}

#[tokio::test]
async fn init_keeping_existing_with_outbox_adds_only_the_outbox_and_leaves_the_two_tables_as_they_were(
) {
    let db = TestDb::initialized().await;
    let before = show_create(&db.admin, &db.name).await;
    let out = init_with_args(&db, &["--keep-existing", "--outbox"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), INITIALIZED);
    assert_eq!(
        tables(&db.admin, &db.name).await,
        ["receiver_inbox", "receiver_outbox", "receiver_task_views"]
    );
    assert_eq!(show_create(&db.admin, &db.name).await, before);
    // Once there, it is checked like the others and left alone.
    let out = init_with_args(&db, &["--keep-existing", "--outbox"]);
    assert!(out.status.success());
    let out = init_with_args(&db, &["--outbox"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("`receiver init --keep-existing --outbox` adds receiver_outbox"));
}

#[tokio::test]
async fn the_outbox_s_columns_carry_chinese_comments_and_its_keys_are_those_the_relay_asks_by() {
    let db = TestDb::empty().await;
    assert!(init_with_args(&db, &["--outbox"]).status.success());
    let comments: Vec<(Vec<u8>, Vec<u8>)> = sqlx::query_as(
        "SELECT CAST(COLUMN_NAME AS BINARY), CAST(COLUMN_COMMENT AS BINARY) \
         FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = 'receiver_outbox'",
    )
    .bind(&db.name)
    .fetch_all(&db.admin)
    .await
    .unwrap();
    assert_eq!(comments.len(), 19);
    assert!(comments
        .iter()
        .all(|(_, c)| String::from_utf8_lossy(c).chars().any(is_chinese)));
    let indexes: Vec<(Vec<u8>, Vec<u8>)> = sqlx::query_as(
        "SELECT CAST(INDEX_NAME AS BINARY), CAST(GROUP_CONCAT(COLUMN_NAME ORDER BY SEQ_IN_INDEX) AS BINARY) \
         FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = 'receiver_outbox' \
         GROUP BY INDEX_NAME ORDER BY INDEX_NAME",
    )
    .bind(&db.name)
    .fetch_all(&db.admin)
    .await
    .unwrap();
    let indexes: Vec<(String, String)> = indexes
        .into_iter()
        .map(|(n, c)| (String::from_utf8(n).unwrap(), String::from_utf8(c).unwrap()))
        .collect();
    assert_eq!(
        indexes,
        [
            ("PRIMARY".to_owned(), "seq".to_owned()),
            (
                "receiver_outbox_due".to_owned(),
                "state,next_attempt_at,seq".to_owned()
            ),
            ("receiver_outbox_effect".to_owned(), "effect_id".to_owned()),
            (
                "receiver_outbox_event".to_owned(),
                "consumer_name,queue_id,event_id".to_owned()
            ),
            (
                "receiver_outbox_ordering".to_owned(),
                "target,ordering_key,state,seq".to_owned()
            ),
        ]
    );
}
