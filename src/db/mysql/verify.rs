//! `receiver verify`'s reads on MySQL: one consistent snapshot, the tables
//! in key order, the per-task totals summed by the server's JSON functions.

use futures::TryStreamExt;
use sqlx::mysql::{MySql, MySqlConnection};
use sqlx::Executor;

use super::row::{get, text};
use crate::db::engine::Verify;
use crate::db::record::{
    InboxPageRow, LastEventRow, OrphanEffect, PageKey, TaskTotal, ViewPageRow,
};
use crate::db::schema::{OUTBOX_TABLE, PRUNED_TABLE};
use crate::db::DbError;

/// The next page of `table` in key order after `after`. The key columns
/// `consumer_name, queue_id, <id>` come first, then `columns`. The start
/// is spelled out column by column: MariaDB's optimizer turns that into a
/// range on the primary key, while a row comparison `(a, b, c) > (…)`
/// would scan the index from its start on every page.
async fn page(
    conn: &mut MySqlConnection,
    table: &str,
    id: &str,
    columns: &str,
    after: Option<&PageKey>,
    limit: u32,
) -> Result<Vec<sqlx::mysql::MySqlRow>, DbError> {
    let start = match after {
        None => String::new(),
        Some(_) => format!(
            "WHERE consumer_name > ? OR (consumer_name = ? AND \
             (queue_id > ? OR (queue_id = ? AND {id} > ?))) "
        ),
    };
    let sql = format!(
        "SELECT consumer_name, queue_id, {id}, {columns} FROM {table} \
         {start}ORDER BY consumer_name, queue_id, {id} LIMIT ?"
    );
    let mut query = sqlx::query(&sql);
    if let Some((consumer, queue, last)) = after {
        let key = [consumer, consumer, queue, queue, last];
        query = key.into_iter().fold(query, |q, v| q.bind(v));
    }
    Ok(query.bind(limit).fetch_all(conn).await?)
}

/// Whether `table` is in the connection's database, as far as the account
/// may see: MySQL shows no table the account holds no grant on.
async fn table_exists(conn: &mut MySqlConnection, table: &str) -> Result<bool, DbError> {
    let n: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM information_schema.TABLES \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?",
    )
    .bind(table)
    .fetch_one(conn)
    .await?;
    Ok(n > 0)
}

impl Verify for MySql {
    async fn begin_snapshot(conn: &mut MySqlConnection) -> Result<(), DbError> {
        conn.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            .await?;
        conn.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
            .await?;
        Ok(())
    }

    async fn end_snapshot(conn: &mut MySqlConnection) -> Result<(), DbError> {
        conn.execute("ROLLBACK").await?;
        Ok(())
    }

    async fn row_counts(conn: &mut MySqlConnection) -> Result<(u64, u64), DbError> {
        let (inbox, views): (i64, i64) = sqlx::query_as(
            "SELECT (SELECT COUNT(*) FROM receiver_inbox), \
             (SELECT COUNT(*) FROM receiver_task_views)",
        )
        .fetch_one(conn)
        .await?;
        Ok((inbox.unsigned_abs(), views.unsigned_abs()))
    }

    async fn pruned_total(conn: &mut MySqlConnection) -> Result<u64, DbError> {
        Ok(sqlx::query_scalar(
            "SELECT CAST(COALESCE(SUM(pruned_events), 0) AS UNSIGNED) FROM receiver_pruned",
        )
        .fetch_one(conn)
        .await?)
    }

    async fn tally_exists(conn: &mut MySqlConnection) -> Result<bool, DbError> {
        table_exists(conn, PRUNED_TABLE).await
    }

    async fn inbox_page(
        conn: &mut MySqlConnection,
        after: Option<&PageKey>,
        limit: u32,
    ) -> Result<Vec<InboxPageRow>, DbError> {
        let columns = "event_digest, event_canonical";
        page(conn, "receiver_inbox", "event_id", columns, after, limit)
            .await?
            .iter()
            .map(|r| {
                Ok((
                    text(r, 0)?,
                    text(r, 1)?,
                    text(r, 2)?,
                    text(r, 3)?,
                    text(r, 4)?,
                ))
            })
            .collect()
    }

    async fn view_page(
        conn: &mut MySqlConnection,
        after: Option<&PageKey>,
        limit: u32,
    ) -> Result<Vec<ViewPageRow>, DbError> {
        let columns = "task_version, last_event_id, last_state";
        page(
            conn,
            "receiver_task_views",
            "task_id",
            columns,
            after,
            limit,
        )
        .await?
        .iter()
        .map(|r| {
            Ok((
                text(r, 0)?,
                text(r, 1)?,
                text(r, 2)?,
                get(r, 3)?,
                text(r, 4)?,
                text(r, 5)?,
            ))
        })
        .collect()
    }

    async fn last_events(
        conn: &mut MySqlConnection,
        consumer: &str,
        queue: &str,
        events: &[&str],
    ) -> Result<Vec<LastEventRow>, DbError> {
        let marks = crate::db::sql::list("?", events.len());
        let sql = format!(
            "SELECT consumer_name, queue_id, event_id, applied, event_canonical FROM receiver_inbox \
             WHERE consumer_name = ? AND queue_id = ? AND event_id IN ({marks})"
        );
        let query = sqlx::query(&sql).bind(consumer).bind(queue);
        let query = events.iter().fold(query, |q, event| q.bind(*event));
        query
            .fetch_all(conn)
            .await?
            .iter()
            .map(|r| {
                Ok((
                    text(r, 0)?,
                    text(r, 1)?,
                    text(r, 2)?,
                    get(r, 3)?,
                    text(r, 4)?,
                ))
            })
            .collect()
    }

    /// A text the server cannot parse as JSON has no task here (check 1
    /// reported it); `unreadable` is not needed.
    async fn task_totals(
        conn: &mut MySqlConnection,
        tally: bool,
        _unreadable: &[PageKey],
        each: &mut dyn FnMut(TaskTotal),
    ) -> Result<(), DbError> {
        let (pruned, join) = if tally {
            (
                "CAST(COALESCE(MAX(p.pruned_applied), 0) AS UNSIGNED)",
                "LEFT JOIN receiver_pruned p \
                 ON p.consumer_name = i.consumer_name AND p.queue_id = i.queue_id \
                 AND p.task_id = i.task_id",
            )
        } else {
            ("CAST(0 AS UNSIGNED)", "")
        };
        let sql = format!("\
SELECT i.consumer_name, i.queue_id, i.task_id,
       CAST(SUM(i.applied) AS UNSIGNED),
       CAST(MAX(CASE WHEN i.applied = 1 THEN i.version ELSE 0 END) AS UNSIGNED),
       MAX(v.applied_events), MAX(v.task_version), COUNT(v.task_id), {pruned}
FROM (
  SELECT consumer_name, queue_id, applied,
         CAST(JSON_UNQUOTE(JSON_EXTRACT(event_canonical, '$.task.id')) AS CHAR(32)) COLLATE utf8mb4_bin AS task_id,
         CAST(JSON_EXTRACT(event_canonical, '$.task.version') AS UNSIGNED) AS version
  FROM receiver_inbox
  WHERE JSON_VALID(event_canonical)
) AS i
LEFT JOIN receiver_task_views v
  ON v.consumer_name = i.consumer_name AND v.queue_id = i.queue_id AND v.task_id = i.task_id
{join}
WHERE i.task_id IS NOT NULL
GROUP BY i.consumer_name, i.queue_id, i.task_id");
        let mut rows = sqlx::query(&sql).fetch(conn);
        while let Some(row) = rows.try_next().await? {
            each(TaskTotal {
                consumer: text(&row, 0)?,
                queue: text(&row, 1)?,
                task: text(&row, 2)?,
                present: get(&row, 3)?,
                highest: get(&row, 4)?,
                counted: get(&row, 5)?,
                version: get(&row, 6)?,
                views: get::<i64>(&row, 7)?.unsigned_abs(),
                pruned: get(&row, 8)?,
            });
        }
        Ok(())
    }

    async fn effect_count(conn: &mut MySqlConnection) -> Result<u64, DbError> {
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM receiver_outbox")
            .fetch_one(conn)
            .await?;
        Ok(n.unsigned_abs())
    }

    async fn outbox_exists(conn: &mut MySqlConnection) -> Result<bool, DbError> {
        table_exists(conn, OUTBOX_TABLE).await
    }

    /// Each effect looks its event up by the inbox's primary key.
    async fn orphan_effects(
        conn: &mut MySqlConnection,
        each: &mut dyn FnMut(OrphanEffect),
    ) -> Result<(), DbError> {
        let mut rows = sqlx::query(
            "SELECT o.consumer_name, o.queue_id, o.event_id, o.effect_id, o.target, o.state \
             FROM receiver_outbox o LEFT JOIN receiver_inbox i \
             ON i.consumer_name = o.consumer_name AND i.queue_id = o.queue_id \
             AND i.event_id = o.event_id \
             WHERE i.event_id IS NULL ORDER BY o.seq",
        )
        .fetch(conn);
        while let Some(row) = rows.try_next().await? {
            each(OrphanEffect {
                consumer: text(&row, 0)?,
                queue: text(&row, 1)?,
                event: text(&row, 2)?,
                effect_id: text(&row, 3)?,
                target: text(&row, 4)?,
                state: text(&row, 5)?,
            });
        }
        Ok(())
    }
}
