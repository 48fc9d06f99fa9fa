//! The operator tools' reads on MySQL: the binary text columns read as
//! bytes, times through `DATE_FORMAT`, sizes from `information_schema`.

use sqlx::mysql::{MySql, MySqlConnection, MySqlRow};
use sqlx::Executor;

use super::row::get;
use crate::db::engine::Tools;
use crate::db::record::{EffectTotals, InboxRecord, InboxTotals, ViewRecord};
use crate::db::sql::rfc3339;
use crate::db::DbError;
use crate::ids::{EventId, TaskId};

fn text(row: &MySqlRow, i: usize) -> Result<String, DbError> {
    let bytes: Vec<u8> = get(row, i)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The inbox rows `WHERE {filter}` picks, `value` bound to its one
/// placeholder.
async fn inbox_records(
    conn: &mut MySqlConnection,
    filter: &str,
    value: &str,
) -> Result<Vec<InboxRecord>, DbError> {
    let sql = format!(
        "SELECT consumer_name, queue_id, event_id, event_digest, applied, {}, event_canonical \
         FROM receiver_inbox WHERE {filter}",
        rfc3339("received_at")
    );
    let rows = sqlx::query(&sql).bind(value).fetch_all(conn).await?;
    rows.iter()
        .map(|row| {
            Ok(InboxRecord {
                consumer: text(row, 0)?,
                queue: text(row, 1)?,
                event: text(row, 2)?,
                digest: text(row, 3)?,
                applied: get(row, 4)?,
                received_at: get(row, 5)?,
                canonical: text(row, 6)?,
            })
        })
        .collect()
}

impl Tools for MySql {
    async fn event_records(
        conn: &mut MySqlConnection,
        event: &EventId,
    ) -> Result<Vec<InboxRecord>, DbError> {
        let filter = "event_id = ? ORDER BY consumer_name, queue_id";
        inbox_records(conn, filter, event.as_str()).await
    }

    async fn records_like(
        conn: &mut MySqlConnection,
        pattern: &str,
    ) -> Result<Vec<InboxRecord>, DbError> {
        inbox_records(conn, "event_canonical LIKE ?", pattern).await
    }

    async fn view_records(
        conn: &mut MySqlConnection,
        task: &TaskId,
    ) -> Result<Vec<ViewRecord>, DbError> {
        let sql = format!(
            "SELECT consumer_name, queue_id, task_id, task_version, last_event_id, last_state, \
             LENGTH(last_result), applied_events, {}, {} \
             FROM receiver_task_views WHERE task_id = ? ORDER BY consumer_name, queue_id",
            rfc3339("created_at"),
            rfc3339("updated_at")
        );
        let rows = sqlx::query(&sql)
            .bind(task.as_str())
            .fetch_all(conn)
            .await?;
        rows.iter()
            .map(|row| {
                Ok(ViewRecord {
                    consumer: text(row, 0)?,
                    queue: text(row, 1)?,
                    task: text(row, 2)?,
                    version: get(row, 3)?,
                    last_event: text(row, 4)?,
                    state: text(row, 5)?,
                    result_bytes: get::<Option<i64>>(row, 6)?.map(|n| n.unsigned_abs()),
                    applied_events: get(row, 7)?,
                    created_at: get(row, 8)?,
                    updated_at: get(row, 9)?,
                })
            })
            .collect()
    }

    async fn receiver_names(conn: &mut MySqlConnection) -> Result<Vec<String>, DbError> {
        Ok(
            sqlx::query_scalar("SELECT DISTINCT CAST(consumer_name AS CHAR) FROM receiver_inbox")
                .fetch_all(conn)
                .await?,
        )
    }

    async fn has_rows_on(
        conn: &mut MySqlConnection,
        name: &str,
        queue: &str,
    ) -> Result<bool, DbError> {
        let found: Option<i32> = sqlx::query_scalar(
            "SELECT 1 FROM receiver_inbox WHERE consumer_name = ? AND queue_id = ? LIMIT 1",
        )
        .bind(name)
        .bind(queue)
        .fetch_optional(conn)
        .await?;
        Ok(found.is_some())
    }

    async fn table_size(
        conn: &mut MySqlConnection,
        table: &'static str,
    ) -> Result<(u64, u64, u64), DbError> {
        // MySQL 8 caches table sizes for a day by default; ask for current
        // ones. MariaDB has no such variable (and no such cache).
        let _ = conn
            .execute("SET SESSION information_schema_stats_expiry = 0")
            .await;
        let rows: i64 = sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {table}"))
            .fetch_one(&mut *conn)
            .await?;
        let (data, index): (u64, u64) = sqlx::query_as(
            "SELECT CAST(COALESCE(DATA_LENGTH, 0) AS UNSIGNED), \
             CAST(COALESCE(INDEX_LENGTH, 0) AS UNSIGNED) \
             FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?",
        )
        .bind(table)
        .fetch_optional(conn)
        .await?
        .unwrap_or((0, 0));
        Ok((rows as u64, data, index))
    }

    async fn inbox_totals(conn: &mut MySqlConnection) -> Result<InboxTotals, DbError> {
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
        let row = sqlx::query(&sql).fetch_one(conn).await?;
        Ok(InboxTotals {
            applied: get(&row, 0)?,
            stale: get(&row, 1)?,
            oldest: get(&row, 2)?,
            newest: get(&row, 3)?,
            average_bytes: get(&row, 4)?,
            largest_bytes: get(&row, 5)?,
            oldest_age_seconds: get(&row, 6)?,
        })
    }

    async fn past_window(conn: &mut MySqlConnection, seconds: u64) -> Result<(u64, u64), DbError> {
        let (rows, bytes): (i64, u64) = sqlx::query_as(
            "SELECT COUNT(*), CAST(COALESCE(SUM(LENGTH(event_canonical)), 0) AS UNSIGNED) \
             FROM receiver_inbox WHERE received_at < UTC_TIMESTAMP(6) - INTERVAL ? SECOND",
        )
        .bind(seconds)
        .fetch_one(conn)
        .await?;
        Ok((rows as u64, bytes))
    }

    async fn events_per_day(
        conn: &mut MySqlConnection,
        days: u32,
    ) -> Result<Vec<(String, u64)>, DbError> {
        per_day(conn, "receiver_inbox", "received_at", days).await
    }

    async fn effect_totals(conn: &mut MySqlConnection) -> Result<EffectTotals, DbError> {
        let row = sqlx::query(
            "SELECT CAST(COALESCE(SUM(state = 'pending'), 0) AS UNSIGNED), \
             CAST(COALESCE(SUM(state = 'sent'), 0) AS UNSIGNED), \
             CAST(COALESCE(SUM(state = 'dead'), 0) AS UNSIGNED), \
             CAST(TIMESTAMPDIFF(SECOND, MIN(CASE WHEN state = 'pending' THEN created_at END), \
               UTC_TIMESTAMP(6)) AS SIGNED) \
             FROM receiver_outbox",
        )
        .fetch_one(conn)
        .await?;
        Ok(EffectTotals {
            pending: get(&row, 0)?,
            sent: get(&row, 1)?,
            dead: get(&row, 2)?,
            oldest_pending_age_seconds: get(&row, 3)?,
        })
    }

    async fn effects_per_day(
        conn: &mut MySqlConnection,
        days: u32,
    ) -> Result<Vec<(String, u64)>, DbError> {
        per_day(conn, "receiver_outbox", "created_at", days).await
    }
}

/// Rows of `table` per UTC day of `column`, today and the `days - 1` days
/// before it, oldest first, days without rows included.
async fn per_day(
    conn: &mut MySqlConnection,
    table: &str,
    column: &str,
    days: u32,
) -> Result<Vec<(String, u64)>, DbError> {
    Ok(sqlx::query_as::<_, (String, u64)>(&format!(
        "WITH RECURSIVE days (n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM days WHERE n < ?) \
         SELECT CAST(UTC_DATE() - INTERVAL days.n DAY AS CHAR), \
                CAST(COALESCE(counted.rows_of_day, 0) AS UNSIGNED) \
         FROM days LEFT JOIN ( \
           SELECT DATE({column}) AS day, COUNT(*) AS rows_of_day FROM {table} \
           WHERE {column} >= UTC_DATE() - INTERVAL ? DAY GROUP BY DATE({column}) \
         ) AS counted ON counted.day = UTC_DATE() - INTERVAL days.n DAY \
         ORDER BY days.n DESC"
    ))
    .bind(days - 1)
    .bind(days - 1)
    .fetch_all(conn)
    .await?)
}
