//! What the inbox and the task view say to a PostgreSQL server: every
//! statement they send, in PostgreSQL's dialect, and what its answer
//! means. The callers decide; nothing here knows a delivery or an outcome.

pub(crate) mod address;
pub(crate) mod error;
pub(crate) mod inbox;
mod outbox;
mod prune;
pub(crate) mod schema;
pub(crate) mod session;
pub(crate) mod sqlstate;
pub(crate) mod task_view;
mod tools;
pub(crate) mod transaction;
mod verify;

use std::future::Future;
use std::time::Duration;

use sqlx::pool::PoolOptions;
use sqlx::postgres::{PgConnectOptions, PgConnection, Postgres};

use super::engine::{Met, Statements, ViewRow};
use super::{DbError, Dsn};
use crate::digest::Digest;
use crate::event::Event;
use crate::ids::{EventId, TaskId};
use crate::scope::InboxScope;

/// `($1, $2, …), ($k, …)`: `n` rows of one bound value per entry of
/// `casts` (each followed by its cast, `""` for none), then `tail`'s
/// expressions.
pub(super) fn placeholders(n: usize, casts: &[&str], tail: &[&str]) -> String {
    (0..n)
        .map(|row| {
            let bound = casts
                .iter()
                .enumerate()
                .map(|(i, cast)| format!("${}{cast}", row * casts.len() + i + 1));
            let all: Vec<String> = bound.chain(tail.iter().map(|t| t.to_string())).collect();
            format!("({})", all.join(", "))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

impl Statements for Postgres {
    fn connect_options(dsn: &Dsn) -> Option<PgConnectOptions> {
        dsn.postgres_options()
    }

    const SCHEMA_SQL: &'static str = crate::db::schema::POSTGRES_SCHEMA_SQL;
    const RETENTION_SQL: &'static str = crate::db::schema::POSTGRES_RETENTION_SQL;
    const OUTBOX_SQL: &'static str = crate::db::schema::POSTGRES_OUTBOX_SQL;

    async fn writable_options(dsn: &Dsn) -> Option<PgConnectOptions> {
        use sqlx::Connection;
        let (options, conn) = session::writable(dsn.postgres_hosts()).await?;
        let _ = conn.close().await;
        Some(options)
    }

    /// The address the server took the connection on (`inet_server_addr`
    /// is empty for a Unix socket).
    async fn server_address(conn: &mut PgConnection) -> Result<String, sqlx::Error> {
        sqlx::query_scalar(
            "SELECT coalesce(host(inet_server_addr()), 'socket') || ':' || current_setting('port')",
        )
        .fetch_one(conn)
        .await
    }

    const REPORTS_REPLICATION: bool = true;

    async fn replication(
        conn: &mut PgConnection,
    ) -> Result<Option<crate::db::Replication>, sqlx::Error> {
        session::replication(conn).await.map(Some)
    }

    async fn connect_one(dsn: &Dsn) -> Result<PgConnection, sqlx::Error> {
        use sqlx::Connection;
        if let Some((_, conn)) = session::writable(dsn.postgres_hosts()).await {
            return Ok(conn);
        }
        match dsn.postgres_options() {
            Some(options) => PgConnection::connect_with(&options).await,
            None => Err(sqlx::Error::Configuration(
                "the DSN names a MySQL server".into(),
            )),
        }
    }

    async fn create_database(conn: &mut PgConnection, name: &str) -> Result<(), sqlx::Error> {
        use sqlx::Executor;
        let ddl = format!("CREATE DATABASE \"{name}\" ENCODING 'UTF8' TEMPLATE template0");
        conn.execute(sqlx::raw_sql(&ddl)).await.map(drop)
    }

    /// `WITH (FORCE)`: a store's pool may still hold connections to it.
    async fn drop_database(conn: &mut PgConnection, name: &str) -> Result<(), sqlx::Error> {
        use sqlx::Executor;
        let ddl = format!("DROP DATABASE \"{name}\" WITH (FORCE)");
        conn.execute(sqlx::raw_sql(&ddl)).await.map(drop)
    }

    fn existing_tables(
        conn: &mut PgConnection,
    ) -> impl Future<Output = Result<Vec<String>, sqlx::Error>> + Send {
        schema::existing_tables(conn)
    }

    fn table_columns<'c>(
        conn: &'c mut PgConnection,
        table: &'c str,
    ) -> impl Future<Output = Result<Vec<String>, sqlx::Error>> + Send + 'c {
        schema::table_columns(conn, table)
    }

    fn create(
        conn: &mut PgConnection,
        ddl: &'static str,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send {
        schema::create(conn, ddl)
    }

    fn create_grant(
        conn: &mut PgConnection,
    ) -> impl Future<Output = Result<crate::db::schema::CreateGrant, sqlx::Error>> + Send {
        schema::create_grant(conn)
    }

    fn probe<'c>(
        conn: &'c mut PgConnection,
        statement: &'c str,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 'c {
        session::probe(conn, statement)
    }

    fn count_foreign_keys(
        conn: &mut PgConnection,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send {
        schema::count_foreign_keys(conn)
    }

    fn pool_options(max_connections: u32, transaction_timeout: Duration) -> PoolOptions<Postgres> {
        session::pool_options(max_connections, transaction_timeout)
    }

    fn ping(conn: &mut PgConnection) -> impl Future<Output = Result<(), sqlx::Error>> + Send {
        session::ping(conn)
    }

    fn settings(
        conn: &mut PgConnection,
    ) -> impl Future<Output = Result<(String, Duration, bool), sqlx::Error>> + Send {
        session::settings(conn)
    }

    fn depth(conn: &PgConnection) -> usize {
        transaction::depth(conn)
    }

    fn begin(conn: &mut PgConnection) -> impl Future<Output = Result<(), sqlx::Error>> + Send {
        transaction::begin(conn)
    }

    fn adopt(conn: &mut PgConnection) -> impl Future<Output = Result<(), sqlx::Error>> + Send {
        transaction::adopt(conn)
    }

    fn close_nested(
        conn: &mut PgConnection,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send {
        transaction::close_nested(conn)
    }

    fn savepoint(conn: &mut PgConnection) -> impl Future<Output = Result<(), sqlx::Error>> + Send {
        transaction::savepoint(conn)
    }

    fn rollback_to_savepoint(
        conn: &mut PgConnection,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send {
        transaction::rollback_to_savepoint(conn)
    }

    fn end(
        conn: &mut PgConnection,
        commit: bool,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send {
        transaction::end(conn, commit)
    }

    fn committed_row<'c>(
        conn: &'c mut PgConnection,
        scope: &'c InboxScope,
        event: &'c EventId,
    ) -> impl Future<Output = Result<Option<(Digest, bool)>, DbError>> + Send + 'c {
        inbox::committed_row(conn, scope, event)
    }

    fn insert_all<'c>(
        conn: &'c mut PgConnection,
        scope: &'c InboxScope,
        events: &'c [&'c Event],
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + 'c {
        inbox::insert_all(conn, scope, events)
    }

    fn insert_one<'c>(
        conn: &'c mut PgConnection,
        scope: &'c InboxScope,
        event: &'c Event,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + 'c {
        inbox::insert_one(conn, scope, event)
    }

    fn mark_stale<'c>(
        conn: &'c mut PgConnection,
        scope: &'c InboxScope,
        events: &'c [&'c Event],
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 'c {
        inbox::mark_stale(conn, scope, events)
    }

    fn advance<'c>(
        conn: &'c mut PgConnection,
        scope: &'c InboxScope,
        event: &'c Event,
    ) -> impl Future<Output = Result<Option<Met>, sqlx::Error>> + Send + 'c {
        task_view::advance(conn, scope, event)
    }

    fn select_view<'e, X>(
        executor: X,
        scope: &'e InboxScope,
        task_id: &'e TaskId,
    ) -> impl Future<Output = Result<Option<ViewRow>, DbError>> + Send + 'e
    where
        X: sqlx::Executor<'e, Database = Postgres> + 'e,
    {
        task_view::select(executor, scope, task_id)
    }

    fn select_view_on<'c>(
        conn: &'c mut PgConnection,
        scope: &'c InboxScope,
        task_id: &'c TaskId,
    ) -> impl Future<Output = Result<Option<ViewRow>, DbError>> + Send + 'c {
        task_view::select(conn, scope, task_id)
    }

    fn lock_views<'c>(
        conn: &'c mut PgConnection,
        scope: &'c InboxScope,
        events: &'c [&'c Event],
    ) -> impl Future<Output = Result<Vec<(String, u64, String)>, DbError>> + Send + 'c {
        task_view::lock_rows(conn, scope, events)
    }

    fn insert_views<'c>(
        conn: &'c mut PgConnection,
        scope: &'c InboxScope,
        rows: &'c [(&'c Event, u64)],
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + 'c {
        task_view::insert_rows(conn, scope, rows)
    }

    fn update_views<'c>(
        conn: &'c mut PgConnection,
        scope: &'c InboxScope,
        rows: &'c [(&'c Event, u64)],
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + 'c {
        task_view::update_rows(conn, scope, rows)
    }
}

/// The span of one statement to a PostgreSQL server (see [`crate::db::trace`]).
fn statement(operation: &'static str, table: Option<&'static str>) -> tracing::Span {
    crate::db::trace::statement("postgresql", operation, table)
}

#[cfg(test)]
mod tests {
    #[test]
    fn placeholders_number_every_row_s_values_and_keep_the_casts() {
        assert_eq!(
            super::placeholders(2, &["", "::numeric"], &["now()"]),
            "($1, $2::numeric, now()), ($3, $4::numeric, now())"
        );
    }
}
