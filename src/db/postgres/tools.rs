//! The operator tools' reads on PostgreSQL: times through `to_char`,
//! versions as text (`numeric(20)`), sizes from the server's relation
//! sizes (a table's heap and TOAST, and its indexes, the primary key's
//! included: PostgreSQL keeps rows beside the key, not in it).

use sqlx::postgres::{PgConnection, PgRow, Postgres};
use sqlx::Row;

use super::inbox::NOW;
use crate::db::engine::Tools;
use crate::db::record::{EffectTotals, InboxRecord, InboxTotals, ViewRecord};
use crate::db::DbError;
use crate::ids::{EventId, TaskId};

/// A `timestamp` column that holds UTC, read as RFC 3339 text, as on MySQL.
fn rfc3339(column: &str) -> String {
    format!("to_char({column}, 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')")
}

fn inbox_columns() -> String {
    format!(
        "consumer_name, queue_id, event_id, event_digest, applied = 1, {}, event_canonical",
        rfc3339("received_at")
    )
}

fn inbox_record(row: &PgRow) -> Result<InboxRecord, DbError> {
    Ok(InboxRecord {
        consumer: row.try_get(0)?,
        queue: row.try_get(1)?,
        event: row.try_get(2)?,
        digest: row.try_get(3)?,
        applied: row.try_get(4)?,
        received_at: row.try_get(5)?,
        canonical: row.try_get(6)?,
    })
}

fn number(text: String) -> Result<u64, DbError> {
    text.parse().map_err(|_| DbError::inconsistent())
}

impl Tools for Postgres {
    async fn event_records(
        conn: &mut PgConnection,
        event: &EventId,
    ) -> Result<Vec<InboxRecord>, DbError> {
        let sql = format!(
            "SELECT {} FROM receiver_inbox WHERE event_id = $1::bpchar ORDER BY consumer_name, queue_id",
            inbox_columns()
        );
        let rows = sqlx::query(&sql)
            .bind(event.as_str())
            .fetch_all(conn)
            .await?;
        rows.iter().map(inbox_record).collect()
    }

    async fn records_like(
        conn: &mut PgConnection,
        pattern: &str,
    ) -> Result<Vec<InboxRecord>, DbError> {
        let sql = format!(
            "SELECT {} FROM receiver_inbox WHERE event_canonical LIKE $1",
            inbox_columns()
        );
        let rows = sqlx::query(&sql).bind(pattern).fetch_all(conn).await?;
        rows.iter().map(inbox_record).collect()
    }

    async fn view_records(
        conn: &mut PgConnection,
        task: &TaskId,
    ) -> Result<Vec<ViewRecord>, DbError> {
        let sql = format!(
            "SELECT consumer_name, queue_id, task_id, task_version::text, last_event_id, \
             last_state, octet_length(last_result)::bigint, applied_events, {}, {} \
             FROM receiver_task_views WHERE task_id = $1::bpchar ORDER BY consumer_name, queue_id",
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
                    consumer: row.try_get(0)?,
                    queue: row.try_get(1)?,
                    task: row.try_get(2)?,
                    version: number(row.try_get(3)?)?,
                    last_event: row.try_get(4)?,
                    state: row.try_get(5)?,
                    result_bytes: row.try_get::<Option<i64>, _>(6)?.map(i64::unsigned_abs),
                    applied_events: row.try_get::<i64, _>(7)?.unsigned_abs(),
                    created_at: row.try_get(8)?,
                    updated_at: row.try_get(9)?,
                })
            })
            .collect()
    }

    async fn receiver_names(conn: &mut PgConnection) -> Result<Vec<String>, DbError> {
        Ok(
            sqlx::query_scalar("SELECT DISTINCT consumer_name::text FROM receiver_inbox")
                .fetch_all(conn)
                .await?,
        )
    }

    async fn has_rows_on(
        conn: &mut PgConnection,
        name: &str,
        queue: &str,
    ) -> Result<bool, DbError> {
        let found: Option<i32> = sqlx::query_scalar(
            "SELECT 1 FROM receiver_inbox WHERE consumer_name = $1 AND queue_id = $2::bpchar LIMIT 1",
        )
        .bind(name)
        .bind(queue)
        .fetch_optional(conn)
        .await?;
        Ok(found.is_some())
    }

    async fn table_size(
        conn: &mut PgConnection,
        table: &'static str,
    ) -> Result<(u64, u64, u64), DbError> {
        let (rows, data, index): (i64, i64, i64) = sqlx::query_as(&format!(
            "SELECT (SELECT count(*) FROM {table}), \
             pg_table_size(to_regclass($1)), pg_indexes_size(to_regclass($1))"
        ))
        .bind(table)
        .fetch_one(conn)
        .await?;
        Ok((
            rows.unsigned_abs(),
            data.unsigned_abs(),
            index.unsigned_abs(),
        ))
    }

    async fn inbox_totals(conn: &mut PgConnection) -> Result<InboxTotals, DbError> {
        let sql = format!(
            "SELECT coalesce(sum(applied), 0)::bigint, \
             (count(*) - coalesce(sum(applied), 0))::bigint, {}, {}, \
             coalesce(avg(octet_length(event_canonical)), 0)::float8, \
             coalesce(max(octet_length(event_canonical)), 0)::bigint, \
             floor(extract(epoch FROM {NOW} - min(received_at)))::bigint \
             FROM receiver_inbox",
            rfc3339("min(received_at)"),
            rfc3339("max(received_at)")
        );
        let row = sqlx::query(&sql).fetch_one(conn).await?;
        Ok(InboxTotals {
            applied: row.try_get::<i64, _>(0)?.unsigned_abs(),
            stale: row.try_get::<i64, _>(1)?.unsigned_abs(),
            oldest: row.try_get(2)?,
            newest: row.try_get(3)?,
            average_bytes: row.try_get(4)?,
            largest_bytes: row.try_get::<i64, _>(5)?.unsigned_abs(),
            oldest_age_seconds: row.try_get(6)?,
        })
    }

    async fn past_window(conn: &mut PgConnection, seconds: u64) -> Result<(u64, u64), DbError> {
        let (rows, bytes): (i64, i64) = sqlx::query_as(&format!(
            "SELECT count(*), coalesce(sum(octet_length(event_canonical)), 0)::bigint \
             FROM receiver_inbox WHERE received_at < {NOW} - make_interval(secs => $1)"
        ))
        .bind(seconds as f64)
        .fetch_one(conn)
        .await?;
        Ok((rows.unsigned_abs(), bytes.unsigned_abs()))
    }

    async fn events_per_day(
        conn: &mut PgConnection,
        days: u32,
    ) -> Result<Vec<(String, u64)>, DbError> {
        per_day(conn, "receiver_inbox", "received_at", days).await
    }

    async fn effect_totals(conn: &mut PgConnection) -> Result<EffectTotals, DbError> {
        let row = sqlx::query(&format!(
            "SELECT count(*) FILTER (WHERE state = 'pending'), \
             count(*) FILTER (WHERE state = 'sent'), count(*) FILTER (WHERE state = 'dead'), \
             floor(extract(epoch FROM {NOW} - min(created_at) FILTER (WHERE state = 'pending')))::bigint \
             FROM receiver_outbox"
        ))
        .fetch_one(conn)
        .await?;
        Ok(EffectTotals {
            pending: row.try_get::<i64, _>(0)?.unsigned_abs(),
            sent: row.try_get::<i64, _>(1)?.unsigned_abs(),
            dead: row.try_get::<i64, _>(2)?.unsigned_abs(),
            oldest_pending_age_seconds: row.try_get(3)?,
        })
    }

    async fn effects_per_day(
        conn: &mut PgConnection,
        days: u32,
    ) -> Result<Vec<(String, u64)>, DbError> {
        per_day(conn, "receiver_outbox", "created_at", days).await
    }
}

/// Rows of `table` per UTC day of `column`, today and the `days - 1` days
/// before it, oldest first, days without rows included.
async fn per_day(
    conn: &mut PgConnection,
    table: &str,
    column: &str,
    days: u32,
) -> Result<Vec<(String, u64)>, DbError> {
    let rows: Vec<(String, i64)> = sqlx::query_as(&format!(
        "WITH today AS (SELECT ({NOW})::date AS d) \
         SELECT to_char(today.d - n, 'YYYY-MM-DD'), coalesce(counted.day_rows, 0) \
         FROM today CROSS JOIN generate_series(0, $1) AS n \
         LEFT JOIN ( \
           SELECT {column}::date AS day, count(*) AS day_rows \
           FROM {table}, today WHERE {column} >= today.d - $1 \
           GROUP BY 1 \
         ) AS counted ON counted.day = today.d - n \
         ORDER BY n DESC"
    ))
    .bind(days.saturating_sub(1) as i32)
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(day, rows)| (day, rows.unsigned_abs()))
        .collect())
}
