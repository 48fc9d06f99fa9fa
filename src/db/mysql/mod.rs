//! What the inbox and the task view say to a MySQL or MariaDB server:
//! every statement they send, in MySQL's dialect, and what its answer
//! means (a duplicate key, a statement's affected rows). The callers
//! decide what to do with it; nothing here knows a delivery or an outcome.

pub(crate) mod address;
pub mod errno;
pub(crate) mod error;
pub(crate) mod inbox;
mod outbox;
mod prune;
pub mod row;
pub(crate) mod schema;
pub(crate) mod session;
pub(crate) mod task_view;
mod tools;
pub(crate) mod transaction;
mod verify;

use std::future::Future;
use std::time::Duration;

use sqlx::mysql::{MySql, MySqlConnection};
use sqlx::pool::PoolOptions;

use super::engine::{Met, Statements, ViewRow};
use super::{DbError, Dsn};
use crate::digest::Digest;
use crate::event::Event;
use crate::ids::{EventId, TaskId};
use crate::scope::InboxScope;

impl Statements for MySql {
    fn connect_options(dsn: &Dsn) -> Option<sqlx::mysql::MySqlConnectOptions> {
        dsn.mysql_options()
    }

    const SCHEMA_SQL: &'static str = crate::db::schema::SCHEMA_SQL;
    const RETENTION_SQL: &'static str = crate::db::schema::RETENTION_SQL;
    const OUTBOX_SQL: &'static str = crate::db::schema::OUTBOX_SQL;

    /// A MySQL address names one host.
    fn writable_options(
        _dsn: &Dsn,
    ) -> impl Future<Output = Option<sqlx::mysql::MySqlConnectOptions>> + Send {
        std::future::ready(None)
    }

    async fn server_address(conn: &mut MySqlConnection) -> Result<String, sqlx::Error> {
        sqlx::query_scalar("SELECT CAST(CONCAT(@@hostname, ':', @@port) AS CHAR)")
            .fetch_one(conn)
            .await
    }

    /// A MySQL primary's replicas are not asked: nothing is said.
    const REPORTS_REPLICATION: bool = false;

    fn replication(
        _conn: &mut MySqlConnection,
    ) -> impl Future<Output = Result<Option<crate::db::Replication>, sqlx::Error>> + Send {
        std::future::ready(Ok(None))
    }

    fn connect_one(dsn: &Dsn) -> impl Future<Output = Result<MySqlConnection, sqlx::Error>> + Send {
        dsn.connect()
    }

    async fn create_database(conn: &mut MySqlConnection, name: &str) -> Result<(), sqlx::Error> {
        use sqlx::Executor;
        let ddl = format!("CREATE DATABASE `{name}` CHARACTER SET utf8mb4");
        conn.execute(sqlx::raw_sql(&ddl)).await.map(drop)
    }

    async fn drop_database(conn: &mut MySqlConnection, name: &str) -> Result<(), sqlx::Error> {
        use sqlx::Executor;
        let ddl = format!("DROP DATABASE `{name}`");
        conn.execute(sqlx::raw_sql(&ddl)).await.map(drop)
    }

    fn existing_tables(
        conn: &mut MySqlConnection,
    ) -> impl Future<Output = Result<Vec<String>, sqlx::Error>> + Send {
        schema::existing_tables(conn)
    }

    fn table_columns<'c>(
        conn: &'c mut MySqlConnection,
        table: &'c str,
    ) -> impl Future<Output = Result<Vec<String>, sqlx::Error>> + Send + 'c {
        schema::table_columns(conn, table)
    }

    fn create(
        conn: &mut MySqlConnection,
        ddl: &'static str,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send {
        schema::create(conn, ddl)
    }

    fn create_grant(
        conn: &mut MySqlConnection,
    ) -> impl Future<Output = Result<crate::db::schema::CreateGrant, sqlx::Error>> + Send {
        schema::create_grant(conn)
    }

    fn probe<'c>(
        conn: &'c mut MySqlConnection,
        statement: &'c str,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 'c {
        session::probe(conn, statement)
    }

    fn count_foreign_keys(
        conn: &mut MySqlConnection,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send {
        schema::count_foreign_keys(conn)
    }

    fn pool_options(max_connections: u32, transaction_timeout: Duration) -> PoolOptions<MySql> {
        session::pool_options(max_connections, transaction_timeout)
    }

    fn ping(conn: &mut MySqlConnection) -> impl Future<Output = Result<(), sqlx::Error>> + Send {
        session::ping(conn)
    }

    fn settings(
        conn: &mut MySqlConnection,
    ) -> impl Future<Output = Result<(String, Duration, bool), sqlx::Error>> + Send {
        session::settings(conn)
    }

    fn depth(conn: &MySqlConnection) -> usize {
        transaction::depth(conn)
    }

    fn begin(conn: &mut MySqlConnection) -> impl Future<Output = Result<(), sqlx::Error>> + Send {
        transaction::begin(conn)
    }

    fn adopt(conn: &mut MySqlConnection) -> impl Future<Output = Result<(), sqlx::Error>> + Send {
        transaction::adopt(conn)
    }

    fn close_nested(
        conn: &mut MySqlConnection,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send {
        transaction::close_nested(conn)
    }

    fn savepoint(
        conn: &mut MySqlConnection,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send {
        transaction::savepoint(conn)
    }

    fn rollback_to_savepoint(
        conn: &mut MySqlConnection,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send {
        transaction::rollback_to_savepoint(conn)
    }

    fn end(
        conn: &mut MySqlConnection,
        commit: bool,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send {
        transaction::end(conn, commit)
    }

    fn committed_row<'c>(
        conn: &'c mut MySqlConnection,
        scope: &'c InboxScope,
        event: &'c EventId,
    ) -> impl Future<Output = Result<Option<(Digest, bool)>, DbError>> + Send + 'c {
        inbox::committed_row(conn, scope, event)
    }

    fn insert_all<'c>(
        conn: &'c mut MySqlConnection,
        scope: &'c InboxScope,
        events: &'c [&'c Event],
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + 'c {
        inbox::insert_all(conn, scope, events)
    }

    fn insert_one<'c>(
        conn: &'c mut MySqlConnection,
        scope: &'c InboxScope,
        event: &'c Event,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + 'c {
        inbox::insert_one(conn, scope, event)
    }

    fn mark_stale<'c>(
        conn: &'c mut MySqlConnection,
        scope: &'c InboxScope,
        events: &'c [&'c Event],
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 'c {
        inbox::mark_stale(conn, scope, events)
    }

    fn advance<'c>(
        conn: &'c mut MySqlConnection,
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
        X: sqlx::Executor<'e, Database = MySql> + 'e,
    {
        task_view::select(executor, scope, task_id)
    }

    fn select_view_on<'c>(
        conn: &'c mut MySqlConnection,
        scope: &'c InboxScope,
        task_id: &'c TaskId,
    ) -> impl Future<Output = Result<Option<ViewRow>, DbError>> + Send + 'c {
        task_view::select(conn, scope, task_id)
    }

    fn lock_views<'c>(
        conn: &'c mut MySqlConnection,
        scope: &'c InboxScope,
        events: &'c [&'c Event],
    ) -> impl Future<Output = Result<Vec<(String, u64, String)>, DbError>> + Send + 'c {
        task_view::lock_rows(conn, scope, events)
    }

    fn insert_views<'c>(
        conn: &'c mut MySqlConnection,
        scope: &'c InboxScope,
        rows: &'c [(&'c Event, u64)],
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + 'c {
        task_view::insert_rows(conn, scope, rows)
    }

    fn update_views<'c>(
        conn: &'c mut MySqlConnection,
        scope: &'c InboxScope,
        rows: &'c [(&'c Event, u64)],
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + 'c {
        task_view::update_rows(conn, scope, rows)
    }
}

/// The span of one statement to a MySQL server (see [`crate::db::trace`]).
fn statement(operation: &'static str, table: Option<&'static str>) -> tracing::Span {
    crate::db::trace::statement("mysql", operation, table)
}
