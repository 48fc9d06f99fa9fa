//! What `receiver init` asks a MySQL server: which of the receiver's
//! tables exist, with which columns, and the DDL that creates them.

use sqlx::mysql::MySqlConnection;
use sqlx::Executor;

use crate::db::schema::{CreateGrant, ALL_TABLES};

/// The receiver's tables in the connection's database.
pub(crate) async fn existing_tables(
    conn: &mut MySqlConnection,
) -> Result<Vec<String>, sqlx::Error> {
    let sql = format!(
        "SELECT CAST(TABLE_NAME AS CHAR) FROM information_schema.TABLES \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN ({}) ORDER BY TABLE_NAME",
        crate::db::sql::list("?", ALL_TABLES.len())
    );
    let query = sqlx::query_scalar(&sql);
    let query = ALL_TABLES.iter().fold(query, |q, t| q.bind(*t));
    query.fetch_all(conn).await
}

/// What an account refused `CREATE TABLE` lacks: `CREATE` on the
/// receiver's database; and the `GRANT` that gives it to the account as the
/// server matched it (`CURRENT_USER()`, host included).
pub(crate) async fn create_grant(conn: &mut MySqlConnection) -> Result<CreateGrant, sqlx::Error> {
    let (database, account): (String, String) =
        sqlx::query_as("SELECT CAST(DATABASE() AS CHAR), CAST(CURRENT_USER() AS CHAR)")
            .fetch_one(conn)
            .await?;
    let (user, host) = account.rsplit_once('@').unwrap_or((&account, "%"));
    let name = format!("`{}`", database.replace('`', "``"));
    let text = |s: &str| format!("'{}'", s.replace('\\', "\\\\").replace('\'', "''"));
    Ok(CreateGrant {
        needs: format!("the CREATE privilege on database {database}"),
        by: "an administrator".to_owned(),
        statement: format!("GRANT CREATE ON {name}.* TO {}@{};", text(user), text(host)),
    })
}

/// The columns of `table` in the connection's database.
pub(crate) async fn table_columns(
    conn: &mut MySqlConnection,
    table: &str,
) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT CAST(COLUMN_NAME AS CHAR) FROM information_schema.COLUMNS \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?",
    )
    .bind(table)
    .fetch_all(conn)
    .await
}

/// The `CREATE TABLE` statements of `ddl`, in one request (MySQL commits
/// each DDL statement by itself).
pub(crate) async fn create(
    conn: &mut MySqlConnection,
    ddl: &'static str,
) -> Result<(), sqlx::Error> {
    let statements = crate::db::schema::create_statements(ddl).join(";\n");
    conn.execute(sqlx::raw_sql(&statements)).await?;
    Ok(())
}

/// Foreign keys declared on, or pointing at, the receiver's tables.
pub(crate) async fn count_foreign_keys(conn: &mut MySqlConnection) -> Result<u64, sqlx::Error> {
    let names = crate::db::sql::list("?", ALL_TABLES.len());
    let sql = format!(
        "SELECT COUNT(*) FROM information_schema.REFERENTIAL_CONSTRAINTS \
         WHERE CONSTRAINT_SCHEMA = DATABASE() \
         AND (TABLE_NAME IN ({names}) OR REFERENCED_TABLE_NAME IN ({names}))"
    );
    let query = sqlx::query_scalar(&sql);
    let twice = ALL_TABLES.iter().chain(&ALL_TABLES);
    let n: i64 = twice.fold(query, |q, t| q.bind(*t)).fetch_one(conn).await?;
    Ok(n as u64)
}
