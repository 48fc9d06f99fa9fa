//! `receiver verify`'s reads on PostgreSQL: one `REPEATABLE READ` read-only
//! snapshot, the tables in key order by row comparison (a range on the
//! primary key), the per-task totals summed by the server's JSON
//! operators.

use futures::TryStreamExt;
use sqlx::postgres::{PgConnection, Postgres};
use sqlx::{Executor, Row};

use crate::db::engine::Verify;
use crate::db::record::{
    InboxPageRow, LastEventRow, OrphanEffect, PageKey, TaskTotal, ViewPageRow,
};
use crate::db::DbError;

fn number(text: &str) -> Result<u64, DbError> {
    text.parse().map_err(|_| DbError::inconsistent())
}

/// The next page of `table` in key order after `after`, the key columns
/// `consumer_name, queue_id, <id>` first, then `columns`.
async fn page(
    conn: &mut PgConnection,
    table: &str,
    id: &str,
    columns: &str,
    after: Option<&PageKey>,
    limit: u32,
) -> Result<Vec<sqlx::postgres::PgRow>, DbError> {
    let (start, at) = match after {
        None => (String::new(), 1),
        Some(_) => (
            format!("WHERE (consumer_name, queue_id, {id}) > ($1, $2::bpchar, $3::bpchar) "),
            4,
        ),
    };
    let sql = format!(
        "SELECT consumer_name, queue_id, {id}, {columns} FROM {table} \
         {start}ORDER BY consumer_name, queue_id, {id} LIMIT ${at}"
    );
    let mut query = sqlx::query(&sql);
    if let Some((consumer, queue, last)) = after {
        query = query.bind(consumer).bind(queue).bind(last);
    }
    Ok(query.bind(i64::from(limit)).fetch_all(conn).await?)
}

/// One number read inside a savepoint: a table that is missing, or that
/// the account may not read, fails the statement, which on PostgreSQL
/// would abort the whole snapshot; the caller goes on without it.
async fn in_savepoint(conn: &mut PgConnection, statement: &str) -> Result<u64, DbError> {
    conn.execute("SAVEPOINT optional").await?;
    let total: Result<i64, sqlx::Error> = sqlx::query_scalar(statement).fetch_one(&mut *conn).await;
    let end = match total {
        Ok(_) => "RELEASE SAVEPOINT optional",
        Err(_) => "ROLLBACK TO SAVEPOINT optional",
    };
    conn.execute(end).await?;
    Ok(total?.unsigned_abs())
}

impl Verify for Postgres {
    async fn begin_snapshot(conn: &mut PgConnection) -> Result<(), DbError> {
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .await?;
        Ok(())
    }

    async fn end_snapshot(conn: &mut PgConnection) -> Result<(), DbError> {
        conn.execute("ROLLBACK").await?;
        Ok(())
    }

    async fn row_counts(conn: &mut PgConnection) -> Result<(u64, u64), DbError> {
        let (inbox, views): (i64, i64) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM receiver_inbox), \
             (SELECT count(*) FROM receiver_task_views)",
        )
        .fetch_one(conn)
        .await?;
        Ok((inbox.unsigned_abs(), views.unsigned_abs()))
    }

    /// Inside a savepoint: without the tally the snapshot goes on.
    async fn pruned_total(conn: &mut PgConnection) -> Result<u64, DbError> {
        in_savepoint(
            conn,
            "SELECT coalesce(sum(pruned_events), 0)::bigint FROM receiver_pruned",
        )
        .await
    }

    async fn tally_exists(conn: &mut PgConnection) -> Result<bool, DbError> {
        Ok(
            sqlx::query_scalar("SELECT to_regclass('receiver_pruned') IS NOT NULL")
                .fetch_one(conn)
                .await?,
        )
    }

    async fn inbox_page(
        conn: &mut PgConnection,
        after: Option<&PageKey>,
        limit: u32,
    ) -> Result<Vec<InboxPageRow>, DbError> {
        let columns = "event_digest, event_canonical";
        page(conn, "receiver_inbox", "event_id", columns, after, limit)
            .await?
            .iter()
            .map(|r| {
                Ok((
                    r.try_get(0)?,
                    r.try_get(1)?,
                    r.try_get(2)?,
                    r.try_get(3)?,
                    r.try_get(4)?,
                ))
            })
            .collect()
    }

    async fn view_page(
        conn: &mut PgConnection,
        after: Option<&PageKey>,
        limit: u32,
    ) -> Result<Vec<ViewPageRow>, DbError> {
        let columns = "task_version::text, last_event_id, last_state";
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
                r.try_get(0)?,
                r.try_get(1)?,
                r.try_get(2)?,
                number(r.try_get(3)?)?,
                r.try_get(4)?,
                r.try_get(5)?,
            ))
        })
        .collect()
    }

    async fn last_events(
        conn: &mut PgConnection,
        consumer: &str,
        queue: &str,
        events: &[&str],
    ) -> Result<Vec<LastEventRow>, DbError> {
        // One lookup of the whole key per event: see the set path's reads
        // (`task_view.rs`) for why not `event_id = ANY(...)`.
        sqlx::query(
            "SELECT i.consumer_name, i.queue_id, i.event_id, i.applied = 1, i.event_canonical \
             FROM unnest($3::bpchar[]) AS k(event_id) CROSS JOIN LATERAL ( \
               SELECT * FROM receiver_inbox \
               WHERE consumer_name = $1 AND queue_id = $2::bpchar AND event_id = k.event_id) AS i",
        )
        .bind(consumer)
        .bind(queue)
        .bind(events)
        .fetch_all(conn)
        .await?
        .iter()
        .map(|r| {
            Ok((
                r.try_get(0)?,
                r.try_get(1)?,
                r.try_get(2)?,
                r.try_get(3)?,
                r.try_get(4)?,
            ))
        })
        .collect()
    }

    /// A text that is not JSON would fail the whole statement here, where
    /// MySQL's `JSON_VALID` leaves it out; PostgreSQL 15 has no such test.
    /// So the rows whose text the caller could not read as an event are
    /// left out by key, and the cast sits inside a `CASE`, which decides
    /// before it runs.
    ///
    /// PostgreSQL cannot turn the escape `\u0000` into text, and `->`
    /// turns every key of the object it searches into text: one such key
    /// anywhere (a result's, valid JSON the inbox stores) would fail the
    /// whole statement (22P05). The canonical form writes U+0000 only as
    /// that escape, so each `\u0000` becomes `\u0001` first: the JSON stays
    /// valid and keeps its shape (after an escaped backslash the six
    /// characters were never an escape and stay plain text), and only the
    /// task's id and version, which hold no escape, are read from it.
    async fn task_totals(
        conn: &mut PgConnection,
        tally: bool,
        unreadable: &[PageKey],
        each: &mut dyn FnMut(TaskTotal),
    ) -> Result<(), DbError> {
        let (pruned, join) = if tally {
            (
                "coalesce(max(p.pruned_applied), 0)::bigint",
                "LEFT JOIN receiver_pruned p \
                 ON p.consumer_name = i.consumer_name AND p.queue_id = i.queue_id \
                 AND p.task_id = i.task_id",
            )
        } else {
            ("0::bigint", "")
        };
        let sql = format!(
            "\
SELECT i.consumer_name, i.queue_id, i.task_id,
       sum(i.applied)::bigint,
       coalesce(max(CASE WHEN i.applied = 1 THEN i.version ELSE 0 END), 0)::text,
       max(v.applied_events), max(v.task_version)::text, count(v.task_id), {pruned}
FROM (
  SELECT consumer_name, queue_id, applied,
         (t ->> 'id') COLLATE \"C\" AS task_id, (t ->> 'version')::numeric AS version
  FROM (
    SELECT consumer_name, queue_id, applied,
           CASE WHEN consumer_name || ' ' || queue_id || ' ' || event_id <> ALL($1)
                THEN replace(event_canonical, '\\u0000', '\\u0001')::json -> 'task' END AS t
    FROM receiver_inbox
  ) AS r
) AS i
LEFT JOIN receiver_task_views v
  ON v.consumer_name = i.consumer_name AND v.queue_id = i.queue_id AND v.task_id = i.task_id
{join}
WHERE i.task_id IS NOT NULL
GROUP BY i.consumer_name, i.queue_id, i.task_id"
        );
        let keys: Vec<String> = unreadable
            .iter()
            .map(|(consumer, queue, event)| format!("{consumer} {queue} {event}"))
            .collect();
        let mut rows = sqlx::query(&sql).bind(keys).fetch(conn);
        while let Some(row) = rows.try_next().await? {
            let version: Option<String> = row.try_get(6)?;
            each(TaskTotal {
                consumer: row.try_get(0)?,
                queue: row.try_get(1)?,
                task: row.try_get(2)?,
                present: row.try_get::<i64, _>(3)?.unsigned_abs(),
                highest: number(&row.try_get::<String, _>(4)?)?,
                counted: row.try_get::<Option<i64>, _>(5)?.map(i64::unsigned_abs),
                version: version.as_deref().map(number).transpose()?,
                views: row.try_get::<i64, _>(7)?.unsigned_abs(),
                pruned: row.try_get::<i64, _>(8)?.unsigned_abs(),
            });
        }
        Ok(())
    }

    async fn effect_count(conn: &mut PgConnection) -> Result<u64, DbError> {
        in_savepoint(conn, "SELECT count(*) FROM receiver_outbox").await
    }

    async fn outbox_exists(conn: &mut PgConnection) -> Result<bool, DbError> {
        Ok(
            sqlx::query_scalar("SELECT to_regclass('receiver_outbox') IS NOT NULL")
                .fetch_one(conn)
                .await?,
        )
    }

    /// Each effect looks its event up by the inbox's primary key.
    async fn orphan_effects(
        conn: &mut PgConnection,
        each: &mut dyn FnMut(OrphanEffect),
    ) -> Result<(), DbError> {
        let mut rows = sqlx::query(
            "SELECT o.consumer_name, o.queue_id, o.event_id, o.effect_id, o.target, o.state \
             FROM receiver_outbox o WHERE NOT EXISTS (SELECT 1 FROM receiver_inbox i \
               WHERE i.consumer_name = o.consumer_name AND i.queue_id = o.queue_id \
               AND i.event_id = o.event_id) \
             ORDER BY o.seq",
        )
        .fetch(conn);
        while let Some(row) = rows.try_next().await? {
            each(OrphanEffect {
                consumer: row.try_get(0)?,
                queue: row.try_get(1)?,
                event: row.try_get(2)?,
                effect_id: row.try_get(3)?,
                target: row.try_get(4)?,
                state: row.try_get(5)?,
            });
        }
        Ok(())
    }
}
