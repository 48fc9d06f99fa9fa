//! What `receiver init` asks a PostgreSQL server: which of the receiver's
//! tables exist in the connection's schema, with which columns, and the
//! DDL that creates them, comments included, in one transaction.

use sqlx::postgres::PgConnection;
use sqlx::Executor;

use crate::db::schema::{CreateGrant, ALL_TABLES};

/// The receiver's tables in the connection's current schema.
pub(crate) async fn existing_tables(conn: &mut PgConnection) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables \
         WHERE table_schema = current_schema() AND table_name = ANY($1) ORDER BY table_name",
    )
    .bind(ALL_TABLES.to_vec())
    .fetch_all(conn)
    .await
}

/// The columns of `table` in the connection's current schema.
pub(crate) async fn table_columns(
    conn: &mut PgConnection,
    table: &str,
) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT column_name::text FROM information_schema.columns \
         WHERE table_schema = current_schema() AND table_name = $1",
    )
    .bind(table)
    .fetch_all(conn)
    .await
}

/// What a role refused `CREATE TABLE` lacks: `CREATE` on the schema the
/// tables go in (its current schema), which PostgreSQL asks of the schema,
/// not of the database; and the `GRANT` that gives it, which the schema's
/// owner runs connected to this database (schema grants belong to one
/// database). Names quoted by the server.
pub(crate) async fn create_grant(conn: &mut PgConnection) -> Result<CreateGrant, sqlx::Error> {
    let (schema, role, database, owner): (Option<String>, String, String, Option<String>) =
        sqlx::query_as(
            "SELECT quote_ident(current_schema()), quote_ident(current_user), \
             current_database()::text, \
             (SELECT pg_get_userbyid(nspowner)::text FROM pg_namespace \
              WHERE nspname = current_schema())",
        )
        .fetch_one(conn)
        .await?;
    let schema = schema.unwrap_or_else(|| "public".to_owned());
    // PostgreSQL 15 gives `public` to pg_database_owner: whoever owns the
    // database.
    let owner = match owner.as_deref() {
        Some("pg_database_owner") | None => {
            format!("the owner of database {database} (who owns schema {schema})")
        }
        Some(owner) => format!("{owner} (the owner of schema {schema})"),
    };
    Ok(CreateGrant {
        needs: format!(
            "the CREATE privilege on schema {schema} (PostgreSQL asks for it on the schema the tables go in, not on the database)"
        ),
        by: format!("{owner} or a superuser, connected to database {database}"),
        statement: format!("GRANT CREATE ON SCHEMA {schema} TO {role};"),
    })
}

/// Runs a DDL file: its tables and their `COMMENT ON` statements, all or
/// nothing (PostgreSQL's DDL is transactional; a multi-statement request is
/// one transaction).
pub(crate) async fn create(conn: &mut PgConnection, ddl: &'static str) -> Result<(), sqlx::Error> {
    conn.execute(sqlx::raw_sql(ddl)).await?;
    Ok(())
}

/// Foreign keys declared on, or pointing at, the receiver's tables.
pub(crate) async fn count_foreign_keys(conn: &mut PgConnection) -> Result<u64, sqlx::Error> {
    let n: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_constraint c \
         WHERE c.contype = 'f' AND (c.conrelid::regclass::text = ANY($1) \
            OR c.confrelid::regclass::text = ANY($1))",
    )
    .bind(ALL_TABLES.to_vec())
    .fetch_one(conn)
    .await?;
    Ok(n as u64)
}
