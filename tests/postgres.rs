//! The receiver's schema on PostgreSQL (`schema.postgres.sql`,
//! `retention.postgres.sql`) as a real server reports it: the tables,
//! columns, keys and comments of the MySQL DDL, no foreign keys, and
//! types that hold every value the MySQL columns hold.

use crate::common;

use common::postgres::PgTestDb;
use result_inbox::db::schema::{
    self, OUTBOX_SQL, POSTGRES_RETENTION_SQL, POSTGRES_SCHEMA_SQL, RETENTION_SQL, SCHEMA_SQL,
};
use sqlx::PgPool;

/// `(table, column, comment)` of every column, in order, as a MySQL DDL
/// writes them (`… COMMENT '…'`), and `(table, "", comment)` for each
/// table's own comment.
fn mysql_comments(ddl: &str) -> Vec<(String, String, String)> {
    let quoted = |s: &str| s.split('\'').nth(1).unwrap_or_default().to_owned();
    let mut out = Vec::new();
    let mut table = String::new();
    for line in ddl.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("CREATE TABLE ") {
            table = rest.split_whitespace().next().unwrap().to_owned();
        } else if line.starts_with(')') {
            out.push((
                table.clone(),
                String::new(),
                quoted(line.split("COMMENT=").nth(1).unwrap()),
            ));
        } else if line.starts_with(|c: char| c.is_ascii_lowercase()) {
            let column = line.split_whitespace().next().unwrap().to_owned();
            out.push((
                table.clone(),
                column,
                quoted(line.split(" COMMENT ").nth(1).unwrap()),
            ));
        }
    }
    out
}

/// The same, as the server reports it: `information_schema` for the
/// columns in order, `obj_description`/`col_description` for the comments.
async fn server_comments(pool: &PgPool) -> Vec<(String, String, String)> {
    let mut out: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT c.table_name::text, c.column_name::text, \
                coalesce(col_description(c.table_name::regclass, c.ordinal_position::int), '') \
         FROM information_schema.columns c \
         WHERE c.table_schema = current_schema() \
         ORDER BY c.table_name, c.ordinal_position",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    let tables: Vec<(String, String)> = sqlx::query_as(
        "SELECT t.table_name::text, coalesce(obj_description(t.table_name::regclass, 'pg_class'), '') \
         FROM information_schema.tables t WHERE t.table_schema = current_schema()",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    out.extend(tables.into_iter().map(|(t, c)| (t, String::new(), c)));
    out.sort();
    out
}

fn sorted(mut v: Vec<(String, String, String)>) -> Vec<(String, String, String)> {
    v.sort();
    v
}

async fn primary_keys(pool: &PgPool) -> Vec<(String, String)> {
    sqlx::query_as(
        "SELECT k.table_name::text, string_agg(k.column_name::text, ', ' ORDER BY k.ordinal_position) \
         FROM information_schema.table_constraints c \
         JOIN information_schema.key_column_usage k \
           ON k.constraint_name = c.constraint_name AND k.table_schema = c.table_schema \
         WHERE c.table_schema = current_schema() AND c.constraint_type = 'PRIMARY KEY' \
         GROUP BY k.table_name ORDER BY k.table_name",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

async fn foreign_keys(pool: &PgPool) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace \
         WHERE n.nspname = current_schema() AND c.contype = 'f'",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn the_model_has_the_mysql_tables_columns_and_chinese_comments_and_no_foreign_key() {
    let db = PgTestDb::new().await;
    db.run_script(POSTGRES_SCHEMA_SQL).await.unwrap();
    let found = server_comments(&db.pool).await;
    assert_eq!(found, sorted(mysql_comments(SCHEMA_SQL)));
    let columns = found.iter().filter(|(_, column, _)| !column.is_empty());
    assert_eq!(columns.count(), 17);
    assert!(found.iter().all(|(_, _, comment)| comment
        .chars()
        .any(|c| ('\u{4e00}'..='\u{9fff}').contains(&c))));
    assert_eq!(foreign_keys(&db.pool).await, 0);
    // Each column in the order the MySQL DDL gives it, as the self-check
    // reads the model.
    for table in schema::TABLES {
        let order: Vec<String> = sqlx::query_scalar(
            "SELECT column_name::text FROM information_schema.columns \
             WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position",
        )
        .bind(table)
        .fetch_all(&db.pool)
        .await
        .unwrap();
        assert_eq!(order, schema::columns(table), "{table}");
    }
}

#[tokio::test]
async fn the_keys_are_those_of_the_mysql_tables() {
    let db = PgTestDb::new().await;
    db.run_script(POSTGRES_SCHEMA_SQL).await.unwrap();
    db.run_script(POSTGRES_RETENTION_SQL).await.unwrap();
    let keys = primary_keys(&db.pool).await;
    let expected: Vec<(String, String)> = [
        schema::INBOX_TABLE,
        schema::TASK_VIEW_TABLE,
        schema::PRUNED_TABLE,
    ]
    .iter()
    .map(|table| (table.to_string(), schema::key_columns(table).join(", ")))
    .collect();
    assert_eq!(keys, sorted_pairs(expected));
}

fn sorted_pairs(mut v: Vec<(String, String)>) -> Vec<(String, String)> {
    v.sort();
    v
}

#[tokio::test]
async fn the_prune_tally_has_the_mysql_columns_and_comments() {
    let db = PgTestDb::new().await;
    db.run_script(POSTGRES_RETENTION_SQL).await.unwrap();
    assert_eq!(
        server_comments(&db.pool).await,
        sorted(mysql_comments(RETENTION_SQL))
    );
    assert_eq!(foreign_keys(&db.pool).await, 0);
}

#[tokio::test]
async fn a_task_version_reaches_the_largest_unsigned_64_bit_value_and_no_further() {
    let db = PgTestDb::new().await;
    db.run_script(POSTGRES_SCHEMA_SQL).await.unwrap();
    let insert = |version: &'static str| {
        format!(
            "INSERT INTO receiver_task_views VALUES ('r', repeat('a', 32), repeat('b', 32), {version}, \
             repeat('c', 32), 'SUCCEEDED', NULL, 1, now(), now())"
        )
    };
    sqlx::query(&insert("18446744073709551615"))
        .execute(&db.pool)
        .await
        .unwrap();
    let stored: String = sqlx::query_scalar("SELECT task_version::text FROM receiver_task_views")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(stored, u64::MAX.to_string());
    for refused in ["18446744073709551616", "-1"] {
        let e = sqlx::query(&insert(refused).replace("repeat('b', 32)", "repeat('d', 32)"))
            .execute(&db.pool)
            .await
            .unwrap_err();
        // 23514: check_violation; 22003: numeric_value_out_of_range.
        let code = e.as_database_error().and_then(|e| e.code()).unwrap();
        assert!(
            ["23514", "22003"].contains(&code.as_ref()),
            "{refused}: {e}"
        );
    }
}

#[tokio::test]
async fn applied_holds_zero_or_one_only() {
    let db = PgTestDb::new().await;
    db.run_script(POSTGRES_SCHEMA_SQL).await.unwrap();
    let insert = |applied: i16| {
        sqlx::query(
            "INSERT INTO receiver_inbox VALUES ('r', repeat('a', 32), $1, repeat('0', 64), '{}', $2, now())",
        )
        .bind(format!("{applied:032}"))
        .bind(applied)
    };
    for applied in [0, 1] {
        insert(applied).execute(&db.pool).await.unwrap();
    }
    let e = insert(2).execute(&db.pool).await.unwrap_err();
    let code = e.as_database_error().and_then(|e| e.code()).unwrap();
    assert_eq!(code, "23514", "{e}");
}

#[tokio::test]
async fn text_compares_byte_by_byte_as_the_binary_collation_does_on_mysql() {
    let db = PgTestDb::new().await;
    db.run_script(POSTGRES_SCHEMA_SQL).await.unwrap();
    // Two receiver names that a case-insensitive or accent-folding
    // collation would take for one are two scopes.
    for name in ["Receiver", "receiver"] {
        sqlx::query(
            "INSERT INTO receiver_inbox VALUES ($1, repeat('a', 32), repeat('b', 32), repeat('0', 64), '{}', 1, now())",
        )
        .bind(name)
        .execute(&db.pool)
        .await
        .unwrap();
    }
    let collations: Vec<String> = sqlx::query_scalar(
        "SELECT DISTINCT collation_name::text FROM information_schema.columns \
         WHERE table_schema = current_schema() AND collation_name IS NOT NULL",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(collations, ["C"]);
}

#[tokio::test]
async fn the_ddl_creates_only_and_a_second_run_changes_nothing() {
    let db = PgTestDb::new().await;
    db.run_script(POSTGRES_SCHEMA_SQL).await.unwrap();
    let before = server_comments(&db.pool).await;
    let e = db.run_script(POSTGRES_SCHEMA_SQL).await.unwrap_err();
    let code = e.as_database_error().and_then(|e| e.code()).unwrap();
    assert_eq!(code, "42P07", "duplicate_table: {e}");
    assert_eq!(server_comments(&db.pool).await, before);
    let upper = format!("{POSTGRES_SCHEMA_SQL}{POSTGRES_RETENTION_SQL}")
        .lines()
        .filter(|line| !line.starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n")
        .to_uppercase();
    for word in [
        "DROP ",
        "ALTER ",
        "FOREIGN KEY",
        "REFERENCES",
        "CASCADE",
        "IF NOT EXISTS",
        " JSON",
        "JSONB",
    ] {
        assert!(!upper.contains(word), "the DDL contains {word}");
    }
}

fn init(db: &PgTestDb, flags: &[&str]) -> std::process::Output {
    common::orbit::receiver()
        .arg("init")
        .args(flags)
        .env("ORBIT_RECEIVER_DSN", &db.dsn)
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test]
async fn receiver_init_on_postgres_creates_the_two_tables_as_the_mysql_ddl_and_no_foreign_key() {
    let db = PgTestDb::new().await;
    let out = init(&db, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).trim(),
        "receiver_schema_initialized=true foreign_keys=0"
    );
    assert_eq!(
        server_comments(&db.pool).await,
        sorted(mysql_comments(SCHEMA_SQL))
    );
}

#[tokio::test]
async fn a_second_receiver_init_on_postgres_changes_nothing_and_says_so() {
    let db = PgTestDb::new().await;
    assert!(init(&db, &[]).status.success());
    let before = server_comments(&db.pool).await;
    let out = init(&db, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("already exist"), "{err}");
    assert!(err.contains("receiver_inbox, receiver_task_views"), "{err}");
    assert_eq!(server_comments(&db.pool).await, before);
    // Tables that have every column are accepted, and the tally added.
    let out = init(&db, &["--keep-existing", "--retention"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables \
         WHERE table_schema = current_schema() ORDER BY 1",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        tables,
        ["receiver_inbox", "receiver_pruned", "receiver_task_views"]
    );
}

#[tokio::test]
async fn receiver_init_retention_on_postgres_creates_the_tally_with_the_model() {
    let db = PgTestDb::new().await;
    let out = init(&db, &["--retention"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut expected = mysql_comments(SCHEMA_SQL);
    expected.extend(mysql_comments(RETENTION_SQL));
    assert_eq!(server_comments(&db.pool).await, sorted(expected));
}

#[tokio::test]
async fn receiver_init_on_postgres_by_a_role_that_may_not_create_is_a_configuration_error() {
    let db = PgTestDb::new().await;
    let role = format!("no_create_{}", common::random_hex(4));
    sqlx::query(&format!("CREATE ROLE {role} LOGIN"))
        .execute(&db.pool)
        .await
        .unwrap();
    let (scheme, rest) = db.dsn.split_once("://").unwrap();
    let (_, server) = rest.split_once('@').unwrap();
    let out = common::orbit::receiver()
        .arg("init")
        .env("ORBIT_RECEIVER_DSN", format!("{scheme}://{role}@{server}"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("CREATE privilege"), "{err}");
    assert!(err.contains("SQLSTATE 42501"), "{err}");
    let tables: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema()",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(tables, 0);
}

#[tokio::test]
async fn receiver_init_on_postgres_names_create_on_the_schema_and_running_its_grant_lets_init_succeed(
) {
    let db = PgTestDb::new().await;
    let role = format!("no_create_{}", common::random_hex(4));
    sqlx::query(&format!("CREATE ROLE {role} LOGIN"))
        .execute(&db.pool)
        .await
        .unwrap();
    let (scheme, rest) = db.dsn.split_once("://").unwrap();
    let (_, server) = rest.split_once('@').unwrap();
    let init = || {
        common::orbit::receiver()
            .arg("init")
            .env("ORBIT_RECEIVER_DSN", format!("{scheme}://{role}@{server}"))
            .output()
            .unwrap()
    };
    // CREATE on the database, which the advice used to name, is not it.
    sqlx::query(&format!("GRANT CREATE ON DATABASE {} TO {role}", db.name))
        .execute(&db.pool)
        .await
        .unwrap();
    let refused = init();
    let err = text(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{err}");
    assert!(
        err.contains("the CREATE privilege on schema public"),
        "{err}"
    );
    assert!(
        err.contains(&format!("connected to database {}", db.name)),
        "{err}"
    );
    let grant = crate::privileges::advised_grant(&err);
    assert_eq!(grant, format!("GRANT CREATE ON SCHEMA public TO {role};"));
    // Run as the message says: by the database's owner or a superuser, in
    // the receiver's database.
    sqlx::query(grant.trim_end_matches(';'))
        .execute(&db.pool)
        .await
        .unwrap();
    let out = init();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "receiver_schema_initialized=true foreign_keys=0\n"
    );
}

#[tokio::test]
async fn receiver_init_on_postgres_over_existing_tables_names_schema_postgres_sql() {
    let db = PgTestDb::new().await;
    assert!(init(&db, &[]).status.success());
    let again = init(&db, &[]);
    let err = text(&again.stderr);
    assert_eq!(again.status.code(), Some(1), "{err}");
    assert!(err.contains("every column of schema.postgres.sql"), "{err}");
    assert!(!err.contains("schema.sql"), "{err}");

    sqlx::query("ALTER TABLE receiver_task_views DROP COLUMN last_state")
        .execute(&db.pool)
        .await
        .unwrap();
    let partial = init(&db, &["--keep-existing"]);
    let err = text(&partial.stderr);
    assert_eq!(partial.status.code(), Some(1), "{err}");
    assert!(
        err.contains("are not those of schema.postgres.sql"),
        "{err}"
    );
    assert!(!err.contains("schema.sql"), "{err}");
}

#[tokio::test]
async fn receiver_init_outbox_on_postgres_creates_the_outbox_with_the_comments_of_outbox_sql() {
    let db = PgTestDb::new().await;
    let out = init(&db, &["--outbox"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut expected = mysql_comments(SCHEMA_SQL);
    expected.extend(mysql_comments(OUTBOX_SQL));
    assert_eq!(server_comments(&db.pool).await, sorted(expected));
    let indexes: Vec<String> = sqlx::query_scalar(
        "SELECT indexdef FROM pg_indexes WHERE tablename = 'receiver_outbox' ORDER BY indexname",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(indexes.len(), 5, "{indexes:?}");
    for columns in [
        "(effect_id)",
        "(seq)",
        "(state, next_attempt_at, seq)",
        "(target, ordering_key, state, seq)",
        "(consumer_name, queue_id, event_id)",
    ] {
        assert!(
            indexes.iter().any(|i| i.ends_with(columns)),
            "{columns}: {indexes:?}"
        );
    }
}

#[tokio::test]
async fn receiver_init_on_postgres_adds_the_outbox_beside_existing_tables_only_when_asked() {
    let db = PgTestDb::new().await;
    assert!(init(&db, &[]).status.success());
    let tables = || async {
        sqlx::query_scalar::<_, String>(
            "SELECT table_name::text FROM information_schema.tables \
             WHERE table_schema = current_schema() ORDER BY 1",
        )
        .fetch_all(&db.pool)
        .await
        .unwrap()
    };
    assert_eq!(tables().await, ["receiver_inbox", "receiver_task_views"]);
    let before = server_comments(&db.pool).await;
    let out = init(&db, &["--keep-existing", "--outbox"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        tables().await,
        ["receiver_inbox", "receiver_outbox", "receiver_task_views"]
    );
    let after = server_comments(&db.pool).await;
    assert!(before.iter().all(|row| after.contains(row)));
    assert!(init(&db, &["--keep-existing", "--outbox"]).status.success());
}
