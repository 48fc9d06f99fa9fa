//! The engine a store runs on: the one seam between the inbox, the task
//! view and a database's dialect.
//!
//! An [`Engine`] is sqlx's database type (`sqlx::MySql`) with every
//! statement the inbox and the task view send, written in its dialect, and
//! what each answer means (a row inserted or a duplicate key, the case the
//! view's statement met). The inbox and the task view decide; an engine
//! only speaks. Only this crate implements it.

use std::future::Future;
use std::time::Duration;

use sqlx::pool::PoolOptions;

use super::{DbError, Dsn};
use crate::digest::Digest;
use crate::event::Event;
use crate::ids::{EventId, TaskId};
use crate::scope::InboxScope;

/// A database the inbox runs on: `sqlx::MySql` (MySQL, MariaDB) and, with
/// the `postgres` feature, `sqlx::Postgres`. Only this crate implements
/// it; its statements are not part of the API.
pub trait Engine:
    sqlx::Database
    + Sync
    + sealed::Statements
    + sealed::Tools
    + sealed::Verify
    + sealed::Prune
    + sealed::Outbox
{
}

impl Engine for sqlx::MySql {}

#[cfg(feature = "postgres")]
impl Engine for sqlx::Postgres {}

pub(crate) use sealed::{Met, Outbox, Prune, Statements, Tools, Verify, ViewRow};

mod sealed {
    use super::*;
    use crate::db::record::{
        ClaimedRow, EffectRecord, EffectTotals, InboxPageRow, InboxRecord, InboxTotals,
        LastEventRow, LockedRow, NewEffectRow, OrphanEffect, PageKey, TaskTotal, ViewPageRow,
        ViewRecord,
    };

    /// The statements of the inbox and the task view, in an engine's dialect.
    pub trait Statements: sqlx::Database + Sync {
        /// The options of one connection to the server `dsn` names, or `None`
        /// when it names a server of another engine.
        fn connect_options(dsn: &Dsn) -> Option<<Self::Connection as sqlx::Connection>::Options>;

        /// The receiver's DDL in this engine's dialect: the model's two tables
        /// and `receiver prune`'s tally.
        const SCHEMA_SQL: &'static str;
        /// See [`SCHEMA_SQL`](Self::SCHEMA_SQL).
        const RETENTION_SQL: &'static str;
        /// The outbox's table (`outbox.sql`), created only when asked.
        const OUTBOX_SQL: &'static str;

        /// For an address that names several hosts: the options of the one
        /// that takes writes now (not a standby), asked of each in turn;
        /// `None` for an address of one host, or when none answers as one.
        fn writable_options(
            dsn: &Dsn,
        ) -> impl Future<Output = Option<<Self::Connection as sqlx::Connection>::Options>> + Send;

        /// One connection of its own to the server `dsn` names.
        fn connect_one(
            dsn: &Dsn,
        ) -> impl Future<Output = Result<Self::Connection, sqlx::Error>> + Send;

        /// Creates the database `name` (a name of letters, digits and `_`)
        /// on the server of `conn`, for a test of its own.
        fn create_database<'c>(
            conn: &'c mut Self::Connection,
            name: &'c str,
        ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 'c;

        /// Drops the database `name`, which connections may still hold.
        fn drop_database<'c>(
            conn: &'c mut Self::Connection,
            name: &'c str,
        ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 'c;

        /// The receiver's tables (of [`schema::ALL_TABLES`](super::schema)) in
        /// the connection's database, by name.
        fn existing_tables(
            conn: &mut Self::Connection,
        ) -> impl Future<Output = Result<Vec<String>, sqlx::Error>> + Send;

        /// The columns of `table` in the connection's database.
        fn table_columns<'c>(
            conn: &'c mut Self::Connection,
            table: &'c str,
        ) -> impl Future<Output = Result<Vec<String>, sqlx::Error>> + Send + 'c;

        /// Runs a DDL file of this engine ([`SCHEMA_SQL`](Self::SCHEMA_SQL) or
        /// [`RETENTION_SQL`](Self::RETENTION_SQL)).
        fn create(
            conn: &mut Self::Connection,
            ddl: &'static str,
        ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

        /// What an account refused `CREATE TABLE` lacks on this engine, and
        /// the `GRANT` that gives it, with the names the server says are in
        /// use (`init`'s advice).
        fn create_grant(
            conn: &mut Self::Connection,
        ) -> impl Future<Output = Result<crate::db::grant::CreateGrant, sqlx::Error>> + Send;

        /// Runs a statement that touches no row (a privilege probe).
        fn probe<'c>(
            conn: &'c mut Self::Connection,
            statement: &'c str,
        ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 'c;

        /// Foreign keys declared on, or pointing at, the receiver's tables.
        fn count_foreign_keys(
            conn: &mut Self::Connection,
        ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send;

        /// The pool of an inbox store: at most `max_connections`, waiting at
        /// most `transaction_timeout` for one, each connection set up for the
        /// inbox's transactions (`READ COMMITTED`, a row-lock wait within the
        /// budget).
        fn pool_options(max_connections: u32, transaction_timeout: Duration) -> PoolOptions<Self>;

        /// Whether the server answers on this connection. Reads no table,
        /// so it opens no transaction, even with autocommit off.
        fn ping(
            conn: &mut Self::Connection,
        ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

        /// The server the connection reached, as `host:port` (where it
        /// says: an address of several hosts may reach any of them).
        fn server_address(
            conn: &mut Self::Connection,
        ) -> impl Future<Output = Result<String, sqlx::Error>> + Send;

        /// Whether [`replication`](Self::replication) asks the server
        /// anything.
        const REPORTS_REPLICATION: bool;

        /// What the server says of its standbys (see [`Replication`]);
        /// `None` where the engine reports none.
        ///
        /// [`Replication`]: crate::db::Replication
        fn replication(
            conn: &mut Self::Connection,
        ) -> impl Future<Output = Result<Option<crate::db::Replication>, sqlx::Error>> + Send;

        /// The connection's isolation level, row-lock wait and autocommit, as
        /// the server reports them. Reads no table, as [`ping`](Self::ping).
        fn settings(
            conn: &mut Self::Connection,
        ) -> impl Future<Output = Result<(String, Duration, bool), sqlx::Error>> + Send;

        /// How deep sqlx knows the connection's transaction: 0 for none it
        /// knows, 1 for its own, more for savepoints inside it.
        fn depth(conn: &Self::Connection) -> usize;

        /// Begins a transaction that sqlx knows, for statements other than the
        /// inbox's.
        fn begin(
            conn: &mut Self::Connection,
        ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

        /// Makes the open transaction sqlx's own, so that `begin()` on the
        /// connection nests inside it.
        fn adopt(
            conn: &mut Self::Connection,
        ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

        /// Rolls back the transactions sqlx nested inside the transaction.
        fn close_nested(
            conn: &mut Self::Connection,
        ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

        /// The savepoint one delivery of a batch starts at.
        fn savepoint(
            conn: &mut Self::Connection,
        ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

        /// Undoes everything since [`savepoint`](Self::savepoint).
        fn rollback_to_savepoint(
            conn: &mut Self::Connection,
        ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

        /// `COMMIT` (or `ROLLBACK`) of the whole transaction.
        fn end(
            conn: &mut Self::Connection,
            commit: bool,
        ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

        /// The stored digest and `applied` flag of an event's inbox row.
        fn committed_row<'c>(
            conn: &'c mut Self::Connection,
            scope: &'c InboxScope,
            event: &'c EventId,
        ) -> impl Future<Output = Result<Option<(Digest, bool)>, DbError>> + Send + 'c;

        /// The inbox rows of `events`, written as applied, in one statement:
        /// `false` when one of them exists and nothing was written.
        fn insert_all<'c>(
            conn: &'c mut Self::Connection,
            scope: &'c InboxScope,
            events: &'c [&'c Event],
        ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + 'c;

        /// The inbox row of one event that an inner service may be lent the
        /// transaction for: `false` when it exists. Opens the transaction, one
        /// that sqlx knows, when none is open.
        fn insert_one<'c>(
            conn: &'c mut Self::Connection,
            scope: &'c InboxScope,
            event: &'c Event,
        ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + 'c;

        /// Marks the inbox rows of `events` as recorded without advancing the
        /// view.
        fn mark_stale<'c>(
            conn: &'c mut Self::Connection,
            scope: &'c InboxScope,
            events: &'c [&'c Event],
        ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 'c;

        /// Creates or locks `event`'s task view row and writes the event if its
        /// version is higher; what it met, or `None` for an answer the
        /// statement cannot give.
        fn advance<'c>(
            conn: &'c mut Self::Connection,
            scope: &'c InboxScope,
            event: &'c Event,
        ) -> impl Future<Output = Result<Option<Met>, sqlx::Error>> + Send + 'c;

        /// One task's committed view row.
        fn select_view<'e, X>(
            executor: X,
            scope: &'e InboxScope,
            task_id: &'e TaskId,
        ) -> impl Future<Output = Result<Option<ViewRow>, DbError>> + Send + 'e
        where
            X: sqlx::Executor<'e, Database = Self> + 'e;

        /// One task's committed view row, read on a connection of the store.
        fn select_view_on<'c>(
            conn: &'c mut Self::Connection,
            scope: &'c InboxScope,
            task_id: &'c TaskId,
        ) -> impl Future<Output = Result<Option<ViewRow>, DbError>> + Send + 'c;

        /// Locks the existing view rows of the events' tasks: task id, version,
        /// last event id.
        fn lock_views<'c>(
            conn: &'c mut Self::Connection,
            scope: &'c InboxScope,
            events: &'c [&'c Event],
        ) -> impl Future<Output = Result<Vec<(String, u64, String)>, DbError>> + Send + 'c;

        /// Creates the view rows of tasks that had none, each with its final
        /// event and the count of events that advanced it; `false` if one
        /// exists by now.
        fn insert_views<'c>(
            conn: &'c mut Self::Connection,
            scope: &'c InboxScope,
            rows: &'c [(&'c Event, u64)],
        ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + 'c;

        /// Advances locked view rows to their final event; `false` if the
        /// server did not change exactly those rows.
        fn update_views<'c>(
            conn: &'c mut Self::Connection,
            scope: &'c InboxScope,
            rows: &'c [(&'c Event, u64)],
        ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + 'c;
    }

    /// The reads of the operator tools (`inspect`, `stats`), in an
    /// engine's dialect: rows as text, times as RFC 3339 in UTC.
    pub trait Tools: sqlx::Database {
        /// The inbox rows of one event id, in every scope, by scope.
        fn event_records<'c>(
            conn: &'c mut Self::Connection,
            event: &'c EventId,
        ) -> impl Future<Output = Result<Vec<InboxRecord>, DbError>> + Send + 'c;

        /// The inbox rows whose canonical text is `LIKE` `pattern`.
        fn records_like<'c>(
            conn: &'c mut Self::Connection,
            pattern: &'c str,
        ) -> impl Future<Output = Result<Vec<InboxRecord>, DbError>> + Send + 'c;

        /// The view rows of one task, in every scope, by scope.
        fn view_records<'c>(
            conn: &'c mut Self::Connection,
            task: &'c TaskId,
        ) -> impl Future<Output = Result<Vec<ViewRecord>, DbError>> + Send + 'c;

        /// Every receiver name with inbox rows.
        fn receiver_names(
            conn: &mut Self::Connection,
        ) -> impl Future<Output = Result<Vec<String>, DbError>> + Send;

        /// Whether `name` has an inbox row on `queue` (one probe of the key).
        fn has_rows_on<'c>(
            conn: &'c mut Self::Connection,
            name: &'c str,
            queue: &'c str,
        ) -> impl Future<Output = Result<bool, DbError>> + Send + 'c;

        /// A table's rows, counted, and its data and index bytes as the
        /// server reports them.
        fn table_size(
            conn: &mut Self::Connection,
            table: &'static str,
        ) -> impl Future<Output = Result<(u64, u64, u64), DbError>> + Send;

        /// The inbox's totals.
        fn inbox_totals(
            conn: &mut Self::Connection,
        ) -> impl Future<Output = Result<InboxTotals, DbError>> + Send;

        /// The inbox rows received more than `seconds` ago, and their
        /// canonical text's bytes.
        fn past_window(
            conn: &mut Self::Connection,
            seconds: u64,
        ) -> impl Future<Output = Result<(u64, u64), DbError>> + Send;

        /// Inbox rows received per UTC day, today and the `days - 1` days
        /// before it, oldest first, days without rows included.
        fn events_per_day(
            conn: &mut Self::Connection,
            days: u32,
        ) -> impl Future<Output = Result<Vec<(String, u64)>, DbError>> + Send;

        /// The outbox's effects by state, and the age of the oldest
        /// pending one.
        fn effect_totals(
            conn: &mut Self::Connection,
        ) -> impl Future<Output = Result<EffectTotals, DbError>> + Send;

        /// Effects recorded per UTC day, as
        /// [`events_per_day`](Self::events_per_day) counts inbox rows.
        fn effects_per_day(
            conn: &mut Self::Connection,
            days: u32,
        ) -> impl Future<Output = Result<Vec<(String, u64)>, DbError>> + Send;
    }

    /// The reads of `receiver verify`, in one read-only snapshot.
    pub trait Verify: sqlx::Database {
        /// Begins a read-only transaction that reads one snapshot.
        fn begin_snapshot(
            conn: &mut Self::Connection,
        ) -> impl Future<Output = Result<(), DbError>> + Send;

        /// Ends it.
        fn end_snapshot(
            conn: &mut Self::Connection,
        ) -> impl Future<Output = Result<(), DbError>> + Send;

        /// The rows of the inbox and of the views.
        fn row_counts(
            conn: &mut Self::Connection,
        ) -> impl Future<Output = Result<(u64, u64), DbError>> + Send;

        /// The applied rows `receiver prune` counted as deleted, in all.
        fn pruned_total(
            conn: &mut Self::Connection,
        ) -> impl Future<Output = Result<u64, DbError>> + Send;

        /// Whether `receiver_pruned` is there, as far as the account may see
        /// (PostgreSQL's catalog shows it to everyone; MySQL hides a table
        /// from an account without a grant on it). Outside a transaction.
        fn tally_exists(
            conn: &mut Self::Connection,
        ) -> impl Future<Output = Result<bool, DbError>> + Send;

        /// Up to `limit` inbox rows after `after`, in key order.
        fn inbox_page<'c>(
            conn: &'c mut Self::Connection,
            after: Option<&'c PageKey>,
            limit: u32,
        ) -> impl Future<Output = Result<Vec<InboxPageRow>, DbError>> + Send + 'c;

        /// Up to `limit` view rows after `after`, in key order.
        fn view_page<'c>(
            conn: &'c mut Self::Connection,
            after: Option<&'c PageKey>,
            limit: u32,
        ) -> impl Future<Output = Result<Vec<ViewPageRow>, DbError>> + Send + 'c;

        /// The inbox rows of `events` in one scope, by primary key.
        fn last_events<'c>(
            conn: &'c mut Self::Connection,
            consumer: &'c str,
            queue: &'c str,
            events: &'c [&'c str],
        ) -> impl Future<Output = Result<Vec<LastEventRow>, DbError>> + Send + 'c;

        /// Every task's totals, streamed to `each`: with the tally's
        /// pruned rows when `tally`, leaving out the inbox rows of
        /// `unreadable` (texts the caller could not read as an event).
        fn task_totals<'c>(
            conn: &'c mut Self::Connection,
            tally: bool,
            unreadable: &'c [PageKey],
            each: &'c mut dyn FnMut(TaskTotal),
        ) -> impl Future<Output = Result<(), DbError>> + 'c;

        /// The rows of `receiver_outbox`: an error that says the table is
        /// missing or unreadable leaves the snapshot usable (PostgreSQL
        /// reads it in a savepoint).
        fn effect_count(
            conn: &mut Self::Connection,
        ) -> impl Future<Output = Result<u64, DbError>> + Send;

        /// Whether `receiver_outbox` is there, as far as the account may
        /// see (as [`tally_exists`](Self::tally_exists)).
        fn outbox_exists(
            conn: &mut Self::Connection,
        ) -> impl Future<Output = Result<bool, DbError>> + Send;

        /// Every effect whose event has no inbox row, in record order,
        /// streamed to `each`.
        fn orphan_effects<'c>(
            conn: &'c mut Self::Connection,
            each: &'c mut dyn FnMut(OrphanEffect),
        ) -> impl Future<Output = Result<(), DbError>> + 'c;
    }

    /// The statements of `receiver prune`, on its own connection.
    pub trait Prune: sqlx::Database {
        /// Sets the connection up for prune: `READ COMMITTED`, and a
        /// row-lock wait of `lock_wait_seconds`.
        fn prune_session(
            conn: &mut Self::Connection,
            lock_wait_seconds: u32,
        ) -> impl Future<Output = Result<(), DbError>> + Send;

        /// The server's clock `micros` ago, as text the server reads back
        /// as a time of `received_at`.
        fn cutoff(
            conn: &mut Self::Connection,
            micros: u64,
        ) -> impl Future<Output = Result<String, DbError>> + Send;

        /// The scope's rows received before `cutoff`: rows, their text's
        /// bytes, and how many of them are a view's last event.
        fn count_window<'c>(
            conn: &'c mut Self::Connection,
            scope: &'c InboxScope,
            cutoff: &'c str,
        ) -> impl Future<Output = Result<(u64, u64, u64), DbError>> + Send + 'c;

        /// Up to `limit` of the scope's rows received before `cutoff`,
        /// after event id `after`, in key order, without locks: event id,
        /// text bytes, and whether the view of the task its text names
        /// has it as its last event.
        fn candidates<'c>(
            conn: &'c mut Self::Connection,
            scope: &'c InboxScope,
            cutoff: &'c str,
            after: &'c str,
            limit: u32,
        ) -> impl Future<Output = Result<Vec<(String, u64, bool)>, DbError>> + Send + 'c;

        /// Begins a batch's transaction.
        fn begin_batch(
            conn: &mut Self::Connection,
        ) -> impl Future<Output = Result<(), DbError>> + Send;

        /// Commits (or rolls back) a batch's transaction.
        fn end_batch(
            conn: &mut Self::Connection,
            commit: bool,
        ) -> impl Future<Output = Result<(), DbError>> + Send;

        /// The scope's rows of `keys` still received before `cutoff`, in
        /// key order: event id, digest, text, applied, received at
        /// (`YYYY-MM-DD HH:MM:SS.ffffff`). Locked where the engine locks
        /// before it deletes (MySQL); PostgreSQL's `DELETE` locks and
        /// checks each row again itself.
        fn batch_rows<'c>(
            conn: &'c mut Self::Connection,
            scope: &'c InboxScope,
            cutoff: &'c str,
            keys: &'c [String],
        ) -> impl Future<Output = Result<Vec<LockedRow>, DbError>> + Send + 'c;

        /// The last event of each of `tasks` that has a view: task, event.
        fn last_events_of<'c>(
            conn: &'c mut Self::Connection,
            scope: &'c InboxScope,
            tasks: &'c [&'c str],
        ) -> impl Future<Output = Result<Vec<(String, String)>, DbError>> + Send + 'c;

        /// Adds (task, events, applied, bytes) to each task's tally, in
        /// the order given.
        fn add_to_tally<'c>(
            conn: &'c mut Self::Connection,
            scope: &'c InboxScope,
            per_task: &'c [(&'c str, u64, u64, u64)],
        ) -> impl Future<Output = Result<(), DbError>> + Send + 'c;

        /// Deletes the scope's rows of `keys` still received before
        /// `cutoff`: the ids of the rows that went.
        fn delete_rows<'c>(
            conn: &'c mut Self::Connection,
            scope: &'c InboxScope,
            cutoff: &'c str,
            keys: &'c [&'c str],
        ) -> impl Future<Output = Result<Vec<String>, DbError>> + Send + 'c;

        /// The scope's sent effects recorded before `cutoff`, and the rows
        /// past the window that effects still hold (of an event with an
        /// effect that is pending, dead, or sent after `cutoff`, and not a
        /// view's last event): what a prune would delete and keep.
        fn count_effects<'c>(
            conn: &'c mut Self::Connection,
            scope: &'c InboxScope,
            cutoff: &'c str,
        ) -> impl Future<Output = Result<(u64, u64), DbError>> + Send + 'c;

        /// Up to `limit` of the scope's sent effects recorded before
        /// `cutoff`, after effect id `after`, in id order, without locks:
        /// effect id, and the bytes of its body and headers.
        fn sent_effects<'c>(
            conn: &'c mut Self::Connection,
            scope: &'c InboxScope,
            cutoff: &'c str,
            after: &'c str,
            limit: u32,
        ) -> impl Future<Output = Result<Vec<(String, u64)>, DbError>> + Send + 'c;

        /// Deletes the scope's effects of `ids` that are still sent and
        /// recorded before `cutoff`: how many went.
        fn delete_effects<'c>(
            conn: &'c mut Self::Connection,
            scope: &'c InboxScope,
            cutoff: &'c str,
            ids: &'c [String],
        ) -> impl Future<Output = Result<u64, DbError>> + Send + 'c;

        /// Those of the scope's `events` that have an effect in the outbox,
        /// in any state.
        fn events_with_effects<'c>(
            conn: &'c mut Self::Connection,
            scope: &'c InboxScope,
            events: &'c [&'c str],
        ) -> impl Future<Output = Result<Vec<String>, DbError>> + Send + 'c;
    }

    /// The outbox's statements: the row an inner service records in the
    /// inbox's transaction, and the relay's, each in a short transaction
    /// of its own.
    pub trait Outbox: sqlx::Database {
        /// Writes the rows of one or more effects in one statement on the
        /// inbox's lent connection, inside its transaction, all of them or
        /// none: `Some(i)` when the effect id of `rows[i]` is there
        /// already, and nothing was written (on PostgreSQL without
        /// aborting the transaction). `rows` is never empty.
        fn record_effects<'c>(
            conn: &'c mut Self::Connection,
            rows: &'c [NewEffectRow<'c>],
        ) -> impl Future<Output = Result<Option<usize>, sqlx::Error>> + Send + 'c;

        /// The engine and the server's version string (`SELECT VERSION()`,
        /// `SHOW server_version`).
        fn server_version(
            conn: &mut Self::Connection,
        ) -> impl Future<Output = Result<(super::super::EngineKind, String), DbError>> + Send;

        /// In one short transaction: up to `limit` due pending effects
        /// whose lease is free or has run out, each the head of its
        /// target's ordering key (no pending effect of the key before it),
        /// locked with `FOR UPDATE SKIP LOCKED` and leased to `owner` for
        /// `lease`; in the order they fell due, then in record order.
        fn claim<'c>(
            conn: &'c mut Self::Connection,
            owner: &'c str,
            lease: Duration,
            limit: u32,
        ) -> impl Future<Output = Result<Vec<ClaimedRow>, DbError>> + Send + 'c;

        /// Records a pending effect leased to `owner` as sent, with the
        /// last answer: `false` when it is not (another relay holds it, or
        /// it is no longer pending).
        fn mark_sent<'c>(
            conn: &'c mut Self::Connection,
            effect_id: &'c str,
            owner: &'c str,
            result: &'c str,
        ) -> impl Future<Output = Result<bool, DbError>> + Send + 'c;

        /// Records a failed attempt of a pending effect leased to `owner`:
        /// one more attempt, tried again `retry_in` from now, its lease let
        /// go; `false` when the lease is not `owner`'s.
        fn mark_failed<'c>(
            conn: &'c mut Self::Connection,
            effect_id: &'c str,
            owner: &'c str,
            retry_in: Duration,
            result: &'c str,
        ) -> impl Future<Output = Result<bool, DbError>> + Send + 'c;

        /// Records a pending effect leased to `owner` as dead after one more
        /// attempt; `false` when the lease is not `owner`'s.
        fn mark_dead<'c>(
            conn: &'c mut Self::Connection,
            effect_id: &'c str,
            owner: &'c str,
            result: &'c str,
        ) -> impl Future<Output = Result<bool, DbError>> + Send + 'c;

        /// Up to `limit` effects in `state` (`pending` or `dead`), in
        /// record order, after `after_seq`.
        fn list_effects<'c>(
            conn: &'c mut Self::Connection,
            state: &'static str,
            after_seq: u64,
            limit: u32,
        ) -> impl Future<Output = Result<Vec<EffectRecord>, DbError>> + Send + 'c;

        /// How many effects are pending, and the age in seconds (by the
        /// server's clock) of the oldest, `None` when there is none.
        fn pending_summary(
            conn: &mut Self::Connection,
        ) -> impl Future<Output = Result<(u64, Option<f64>), DbError>> + Send;

        /// Brings dead effects back to pending under the same id, due now,
        /// with no attempt counted: the one of `effect_id`, or every one.
        /// How many came back.
        fn replay_dead<'c>(
            conn: &'c mut Self::Connection,
            effect_id: Option<&'c str>,
        ) -> impl Future<Output = Result<u64, DbError>> + Send + 'c;
    }

    /// What the task view's statement met under the row's lock.
    #[doc(hidden)]
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Met {
        /// No row: one was created with the event.
        NoRow,
        /// A lower version: the row now holds the event.
        Lower,
        /// A higher version: nothing changed.
        Higher,
        /// The same version from this very event: nothing changed.
        SameEvent,
        /// The same version from another event: nothing changed.
        OtherEvent,
    }

    /// A task's committed view row: version, last event, state, result and
    /// applied events.
    #[doc(hidden)]
    pub(crate) type ViewRow = (u64, String, String, Option<String>, u64);
}
