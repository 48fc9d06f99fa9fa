//! What `receiver init` asks a MySQL server: which of the receiver's
//! tables exist, with which columns, and the DDL that creates them.

use sqlx::mysql::MySqlConnection;
use sqlx::Executor;

use crate::db::schema::ALL_TABLES;

/// The receiver's tables in the connection's database.
pub(crate) async fn existing_tables(
    conn: &mut MySqlConnection,
) -> Result<Vec<String>, sqlx::Error> {
    let query = sqlx::query_scalar(
        "SELECT CAST(TABLE_NAME AS CHAR) FROM information_schema.TABLES \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN (?, ?, ?) ORDER BY TABLE_NAME",
    );
    let query = ALL_TABLES.iter().fold(query, |q, t| q.bind(*t));
    query.fetch_all(conn).await
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
