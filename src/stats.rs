//! `receiver stats`: what capacity planning for the inbox needs — how big
//! both tables are, how fast the inbox grows, what one event costs, and
//! what lies past a retention window; where `receiver_outbox` is there,
//! the same of the outbox: its size, its effects by state and how fast it
//! grows. `docs/operations.md` says how to read it.
//!
//! Reads only (`SELECT` on the tables, and on MySQL `information_schema`;
//! on PostgreSQL the sizes are the server's relation sizes, the primary
//! key's index counted with the indexes), on the engine the address names.
//! The inbox is scanned twice (totals, then the last 30 days), and once
//! more for the rows past a window when one is asked for, so on a large
//! table it takes as long as two or three full scans; the outbox is
//! scanned twice too.

use std::time::Duration;

use serde::Serialize;

use crate::db::any::{on_engine, AnyConnection};
use crate::db::schema::{OUTBOX_TABLE, TABLES};
use crate::db::{DbError, Dsn, Engine};
use crate::scope::InboxScope;

/// The other receiver names with inbox rows on `scope`'s queue, when
/// `scope`'s own name has none there: a mistyped `RECEIVER_NAME` would
/// start an inbox of its own beside the real one (every redelivery a first
/// receipt there) and a prune that finds nothing, for ever. Empty when the
/// name has rows on the queue, or when no name has (a first start). Reads
/// the names through the primary key, one probe each, not the rows.
pub async fn names_beside(dsn: &Dsn, scope: &InboxScope) -> Result<Vec<String>, DbError> {
    let mut conn = AnyConnection::open(dsn).await?;
    let names = on_engine!(&mut conn, c => names_beside_on::<E>(c, scope).await);
    conn.close().await;
    names
}

async fn names_beside_on<E: Engine>(
    conn: &mut E::Connection,
    scope: &InboxScope,
) -> Result<Vec<String>, DbError> {
    let mut on_queue = Vec::new();
    for name in E::receiver_names(&mut *conn).await? {
        if E::has_rows_on(&mut *conn, &name, scope.queue_id.as_str()).await? {
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

/// The statistics of both tables, and of the outbox where it is there.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stats {
    /// Size of each table: the inbox, the views, and `receiver_outbox`
    /// where it is there.
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
    /// The outbox, where `receiver_outbox` is there and the account may
    /// read it (left out of the JSON otherwise, as of the text).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outbox: Option<OutboxStats>,
}

/// The outbox's effects by state and its growth, as the inbox's is
/// given.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OutboxStats {
    /// Effects waiting to be sent.
    pub pending: u64,
    /// Effects sent (until `receiver prune` deletes them).
    pub sent: u64,
    /// Effects given up, waiting for `receiver outbox replay`.
    pub dead: u64,
    /// How long ago the oldest pending effect was recorded, by the
    /// server's clock, in whole seconds (`oldest_pending_age_s` in JSON).
    #[serde(rename = "oldest_pending_age_s")]
    pub oldest_pending_age_seconds: Option<u64>,
    /// Outbox bytes (data and indexes) per effect, in whole bytes.
    pub bytes_per_effect: u64,
    /// Average effects recorded per day over the last [`DAYS`] days, to
    /// one decimal (each day's count is in [`DayCount::effects`]).
    pub average_effects_per_day: f64,
    /// Expected growth of the outbox per day at that rate, in whole bytes,
    /// before `receiver prune` deletes the sent ones.
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
    /// Effects recorded in the outbox that day, where it is there (left
    /// out of the JSON otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub effects: Option<u64>,
}

/// Reads the statistics of the receiver's tables in the DSN's database.
pub async fn run(dsn: &Dsn) -> Result<Stats, DbError> {
    run_with(dsn, None).await
}

/// [`run`], and the rows past `window` (a third scan of the inbox).
pub async fn run_with(dsn: &Dsn, window: Option<Duration>) -> Result<Stats, DbError> {
    let mut conn = AnyConnection::open(dsn).await?;
    let stats = on_engine!(&mut conn, c => run_on::<E>(c, window).await);
    conn.close().await;
    stats
}

async fn run_on<E: Engine>(
    conn: &mut E::Connection,
    window: Option<Duration>,
) -> Result<Stats, DbError> {
    let mut tables = Vec::new();
    for table in TABLES {
        let (rows, data_bytes, index_bytes) = E::table_size(&mut *conn, table).await?;
        tables.push(TableSize {
            table,
            rows,
            data_bytes,
            index_bytes,
        });
    }
    let totals = E::inbox_totals(&mut *conn).await?;
    let past_window = match window {
        None => None,
        Some(window) => {
            let older_than_seconds = window.as_secs();
            let (rows, bytes) = E::past_window(&mut *conn, older_than_seconds).await?;
            Some(PastWindow {
                older_than_seconds,
                rows,
                bytes,
            })
        }
    };
    let mut events_per_day: Vec<DayCount> = E::events_per_day(&mut *conn, DAYS)
        .await?
        .into_iter()
        .map(|(day, events)| DayCount {
            day,
            events,
            effects: None,
        })
        .collect();
    let outbox = outbox::<E>(conn, &mut tables, &mut events_per_day).await?;

    let inbox = &tables[0];
    let inbox_bytes_per_event = if inbox.rows == 0 {
        0.0
    } else {
        (inbox.data_bytes + inbox.index_bytes) as f64 / inbox.rows as f64
    };
    let average_events_per_day =
        events_per_day.iter().map(|d| d.events).sum::<u64>() as f64 / f64::from(DAYS);
    Ok(Stats {
        oldest_received_at: totals.oldest,
        newest_received_at: totals.newest,
        oldest_age_seconds: totals.oldest_age_seconds.map(|s| s.max(0) as u64),
        past_window,
        applied: totals.applied,
        stale: totals.stale,
        average_event_bytes: totals.average_bytes.round() as u64,
        largest_event_bytes: totals.largest_bytes,
        events_per_day,
        inbox_bytes_per_event: inbox_bytes_per_event.round() as u64,
        average_events_per_day: (average_events_per_day * 10.0).round() / 10.0,
        growth_bytes_per_day: (inbox_bytes_per_event * average_events_per_day).round() as u64,
        tables,
        outbox,
    })
}

/// The outbox's statistics, its size added to `tables` and its effects
/// per day to `days`; `None` when the table is not there or the account
/// may not read it (MySQL answers both alike).
async fn outbox<E: Engine>(
    conn: &mut E::Connection,
    tables: &mut Vec<TableSize>,
    days: &mut [DayCount],
) -> Result<Option<OutboxStats>, DbError> {
    let totals = match E::effect_totals(&mut *conn).await {
        Ok(totals) => totals,
        Err(e) if e.missing_table() == Some(OUTBOX_TABLE) || e.lacks_table_privilege() => {
            return Ok(None)
        }
        Err(e) => return Err(e),
    };
    let (rows, data_bytes, index_bytes) = E::table_size(&mut *conn, OUTBOX_TABLE).await?;
    tables.push(TableSize {
        table: OUTBOX_TABLE,
        rows,
        data_bytes,
        index_bytes,
    });
    let per_day = E::effects_per_day(conn, DAYS).await?;
    // By the day's name: the two counts may fall on either side of a
    // midnight.
    for day in days.iter_mut() {
        let effects = per_day.iter().find(|(d, _)| *d == day.day);
        day.effects = Some(effects.map_or(0, |(_, n)| *n));
    }
    let bytes_per_effect = match rows {
        0 => 0.0,
        rows => (data_bytes + index_bytes) as f64 / rows as f64,
    };
    let average = per_day.iter().map(|(_, n)| n).sum::<u64>() as f64 / f64::from(DAYS);
    Ok(Some(OutboxStats {
        pending: totals.pending,
        sent: totals.sent,
        dead: totals.dead,
        oldest_pending_age_seconds: totals.oldest_pending_age_seconds.map(|s| s.max(0) as u64),
        bytes_per_effect: bytes_per_effect.round() as u64,
        average_effects_per_day: (average * 10.0).round() / 10.0,
        growth_bytes_per_day: (bytes_per_effect * average).round() as u64,
    }))
}
