//! `receiver stats`: what capacity planning for the inbox needs — how big
//! both tables are, how fast the inbox grows, what one event costs, and
//! what lies past a retention window. `docs/operations.md` says how to read it.
//!
//! Reads only (`SELECT` on the two tables and `information_schema`); the
//! inbox is scanned twice (totals, then the last 30 days), and once more
//! for the rows past a window when one is asked for, so on a large table
//! it takes as long as two or three full scans.

use std::time::Duration;

use serde::Serialize;
use sqlx::mysql::MySqlConnection;
use sqlx::{Connection, Executor};

use crate::db::row::get;
use crate::db::schema::TABLES;
use crate::db::sql::rfc3339;
use crate::db::{DbError, Dsn};
use crate::scope::InboxScope;

/// The other receiver names with inbox rows on `scope`'s queue, when
/// `scope`'s own name has none there: a mistyped `RECEIVER_NAME` would
/// start an inbox of its own beside the real one (every redelivery a first
/// receipt there) and a prune that finds nothing, for ever. Empty when the
/// name has rows on the queue, or when no name has (a first start). Reads
/// the names through the primary key, one probe each, not the rows.
pub async fn names_beside(dsn: &Dsn, scope: &InboxScope) -> Result<Vec<String>, DbError> {
    let mut conn = dsn.connect().await?;
    let names = names_beside_on(&mut conn, scope).await;
    conn.close().await.ok();
    names
}

async fn names_beside_on(
    conn: &mut MySqlConnection,
    scope: &InboxScope,
) -> Result<Vec<String>, DbError> {
    let names: Vec<String> =
        sqlx::query_scalar("SELECT DISTINCT CAST(consumer_name AS CHAR) FROM receiver_inbox")
            .fetch_all(&mut *conn)
            .await?;
    let mut on_queue = Vec::new();
    for name in names {
        let found: Option<i32> = sqlx::query_scalar(
            "SELECT 1 FROM receiver_inbox WHERE consumer_name = ? AND queue_id = ? LIMIT 1",
        )
        .bind(&name)
        .bind(scope.queue_id.as_str())
        .fetch_optional(&mut *conn)
        .await?;
        if found.is_some() {
            on_queue.push(name);
        }
    }
    if on_queue.iter().any(|n| n == scope.receiver.as_str()) {
        on_queue.clear();
    }
    Ok(on_queue)
}

/// Days of daily counts reported, today (UTC) included.
pub const DAYS: u32 = 30;

/// The statistics of both tables.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stats {
    /// Size of each table.
    pub tables: Vec<TableSize>,
    /// The oldest `received_at` in the inbox, RFC 3339 in UTC, if any row.
    pub oldest_received_at: Option<String>,
    /// How long ago that was by the server's clock, in whole seconds
    /// (`oldest_age_s` in JSON, as in the text report).
    #[serde(rename = "oldest_age_s")]
    pub oldest_age_seconds: Option<u64>,
    /// The inbox rows received before a window, when one was asked for:
    /// what `receiver prune --older-than` of that window would look at.
    pub past_window: Option<PastWindow>,
    /// The newest `received_at` in the inbox, RFC 3339 in UTC, if any row.
    pub newest_received_at: Option<String>,
    /// Inbox rows that advanced a view.
    pub applied: u64,
    /// Inbox rows of older versions, recorded without advancing a view.
    pub stale: u64,
    /// Average length of a stored canonical event, in whole bytes.
    pub average_event_bytes: u64,
    /// Longest stored canonical event, in bytes.
    pub largest_event_bytes: u64,
    /// Events received per UTC day over the last [`DAYS`] days, oldest
    /// first, days without events included.
    pub events_per_day: Vec<DayCount>,
    /// Inbox bytes (data and indexes) per row, in whole bytes.
    pub inbox_bytes_per_event: u64,
    /// Average events per day over the last [`DAYS`] days, to one decimal.
    pub average_events_per_day: f64,
    /// Expected growth of the inbox per day at that rate, in whole bytes
    /// (bytes per row × events per day, before rounding).
    pub growth_bytes_per_day: u64,
}

/// How big one table is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TableSize {
    /// The table.
    pub table: &'static str,
    /// Rows, counted exactly.
    pub rows: u64,
    /// Data bytes as the server reports them (InnoDB: an estimate, pages
    /// allocated, refreshed by the server's statistics).
    pub data_bytes: u64,
    /// Index bytes as the server reports them (InnoDB: the secondary
    /// indexes; the receiver's tables have none, the primary key is the
    /// data).
    pub index_bytes: u64,
}

/// The inbox rows received before a window, in every scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PastWindow {
    /// The window, in seconds (`older_than_s` in JSON, as in the text
    /// report).
    #[serde(rename = "older_than_s")]
    pub older_than_seconds: u64,
    /// Rows received before it.
    pub rows: u64,
    /// Their canonical text, in bytes.
    pub bytes: u64,
}

/// Events received on one UTC day.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DayCount {
    /// `YYYY-MM-DD`.
    pub day: String,
    /// Inbox rows received that day.
    pub events: u64,
}

/// Reads the statistics of the receiver's tables in the DSN's database.
pub async fn run(dsn: &Dsn) -> Result<Stats, DbError> {
    run_with(dsn, None).await
}

/// [`run`], and the rows past `window` (a third scan of the inbox).
pub async fn run_with(dsn: &Dsn, window: Option<Duration>) -> Result<Stats, DbError> {
    let mut conn = dsn.connect().await?;
    // MySQL 8 caches table sizes for a day by default; ask for current
    // ones. MariaDB has no such variable (and no such cache).
    let _ = conn
        .execute("SET SESSION information_schema_stats_expiry = 0")
        .await;
    let mut tables = Vec::new();
    for table in TABLES {
        tables.push(table_size(&mut conn, table).await?);
    }

    let sql = format!(
        "SELECT CAST(COALESCE(SUM(applied), 0) AS UNSIGNED), \
         CAST(COUNT(*) - COALESCE(SUM(applied), 0) AS UNSIGNED), \
         {}, {}, \
         CAST(COALESCE(AVG(LENGTH(event_canonical)), 0) AS DOUBLE), \
         CAST(COALESCE(MAX(LENGTH(event_canonical)), 0) AS UNSIGNED), \
         CAST(TIMESTAMPDIFF(SECOND, MIN(received_at), UTC_TIMESTAMP(6)) AS SIGNED) \
         FROM receiver_inbox",
        rfc3339("MIN(received_at)"),
        rfc3339("MAX(received_at)")
    );
    let totals = sqlx::query(&sql).fetch_one(&mut conn).await?;
    let past_window = match window {
        None => None,
        Some(window) => {
            let older_than_seconds = window.as_secs();
            let (rows, bytes): (i64, u64) = sqlx::query_as(
                "SELECT COUNT(*), CAST(COALESCE(SUM(LENGTH(event_canonical)), 0) AS UNSIGNED) \
                 FROM receiver_inbox WHERE received_at < UTC_TIMESTAMP(6) - INTERVAL ? SECOND",
            )
            .bind(older_than_seconds)
            .fetch_one(&mut conn)
            .await?;
            Some(PastWindow {
                older_than_seconds,
                rows: rows as u64,
                bytes,
            })
        }
    };
    let events_per_day: Vec<DayCount> = sqlx::query_as::<_, (String, u64)>(
        "WITH RECURSIVE days (n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM days WHERE n < ?) \
         SELECT CAST(UTC_DATE() - INTERVAL days.n DAY AS CHAR), \
                CAST(COALESCE(counted.events, 0) AS UNSIGNED) \
         FROM days LEFT JOIN ( \
           SELECT DATE(received_at) AS day, COUNT(*) AS events FROM receiver_inbox \
           WHERE received_at >= UTC_DATE() - INTERVAL ? DAY GROUP BY DATE(received_at) \
         ) AS counted ON counted.day = UTC_DATE() - INTERVAL days.n DAY \
         ORDER BY days.n DESC",
    )
    .bind(DAYS - 1)
    .bind(DAYS - 1)
    .fetch_all(&mut conn)
    .await?
    .into_iter()
    .map(|(day, events)| DayCount { day, events })
    .collect();
    let _ = conn.close().await;

    let inbox = &tables[0];
    let inbox_bytes_per_event = if inbox.rows == 0 {
        0.0
    } else {
        (inbox.data_bytes + inbox.index_bytes) as f64 / inbox.rows as f64
    };
    let average_events_per_day =
        events_per_day.iter().map(|d| d.events).sum::<u64>() as f64 / f64::from(DAYS);
    let average_event_bytes: f64 = get(&totals, 4)?;
    Ok(Stats {
        oldest_received_at: get(&totals, 2)?,
        newest_received_at: get(&totals, 3)?,
        oldest_age_seconds: get::<Option<i64>>(&totals, 6)?.map(|s| s.max(0) as u64),
        past_window,
        applied: get(&totals, 0)?,
        stale: get(&totals, 1)?,
        average_event_bytes: average_event_bytes.round() as u64,
        largest_event_bytes: get(&totals, 5)?,
        events_per_day,
        inbox_bytes_per_event: inbox_bytes_per_event.round() as u64,
        average_events_per_day: (average_events_per_day * 10.0).round() / 10.0,
        growth_bytes_per_day: (inbox_bytes_per_event * average_events_per_day).round() as u64,
        tables,
    })
}

async fn table_size(conn: &mut MySqlConnection, table: &'static str) -> Result<TableSize, DbError> {
    let rows: i64 = sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {table}"))
        .fetch_one(&mut *conn)
        .await?;
    let (data_bytes, index_bytes): (u64, u64) = sqlx::query_as(
        "SELECT CAST(COALESCE(DATA_LENGTH, 0) AS UNSIGNED), CAST(COALESCE(INDEX_LENGTH, 0) AS UNSIGNED) \
         FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?",
    )
    .bind(table)
    .fetch_optional(&mut *conn)
    .await?
    .unwrap_or((0, 0));
    Ok(TableSize {
        table,
        rows: rows as u64,
        data_bytes,
        index_bytes,
    })
}
