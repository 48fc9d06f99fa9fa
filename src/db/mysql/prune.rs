//! `receiver prune`'s statements on MySQL: times as the server prints a
//! `DATETIME(6)`, rows locked by key with `FOR UPDATE`, the tally added to
//! with `ON DUPLICATE KEY UPDATE`.

use sqlx::mysql::{MySql, MySqlConnection};
use sqlx::Executor;

use super::row::{get, text};
use crate::db::engine::Prune;
use crate::db::record::LockedRow;
use crate::db::{sql, DbError};
use crate::scope::InboxScope;

impl Prune for MySql {
    async fn prune_session(
        conn: &mut MySqlConnection,
        lock_wait_seconds: u32,
    ) -> Result<(), DbError> {
        conn.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
            .await?;
        conn.execute(
            format!("SET SESSION innodb_lock_wait_timeout = {lock_wait_seconds}").as_str(),
        )
        .await?;
        Ok(())
    }

    async fn cutoff(conn: &mut MySqlConnection, micros: u64) -> Result<String, DbError> {
        Ok(
            sqlx::query_scalar("SELECT CAST(UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND AS CHAR)")
                .bind(micros)
                .fetch_one(conn)
                .await?,
        )
    }

    async fn count_window(
        conn: &mut MySqlConnection,
        scope: &InboxScope,
        cutoff: &str,
    ) -> Result<(u64, u64, u64), DbError> {
        let (rows, bytes): (i64, u64) = sqlx::query_as(
            "SELECT COUNT(*), CAST(COALESCE(SUM(LENGTH(event_canonical)), 0) AS UNSIGNED) \
             FROM receiver_inbox WHERE consumer_name = ? AND queue_id = ? AND received_at < ?",
        )
        .bind(scope.receiver.as_str())
        .bind(scope.queue_id.as_str())
        .bind(cutoff)
        .fetch_one(&mut *conn)
        .await?;
        // Each view names its last event by primary key: one lookup per view.
        let latest: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM receiver_task_views v JOIN receiver_inbox i \
             ON i.consumer_name = v.consumer_name AND i.queue_id = v.queue_id \
             AND i.event_id = v.last_event_id \
             WHERE v.consumer_name = ? AND v.queue_id = ? AND i.received_at < ?",
        )
        .bind(scope.receiver.as_str())
        .bind(scope.queue_id.as_str())
        .bind(cutoff)
        .fetch_one(conn)
        .await?;
        Ok((rows as u64, bytes, latest as u64))
    }

    async fn candidates(
        conn: &mut MySqlConnection,
        scope: &InboxScope,
        cutoff: &str,
        after: &str,
        limit: u32,
    ) -> Result<Vec<(String, u64, bool)>, DbError> {
        let rows = sqlx::query(
            "SELECT i.event_id, LENGTH(i.event_canonical), \
             COALESCE(v.last_event_id = i.event_id, FALSE) \
             FROM receiver_inbox i LEFT JOIN receiver_task_views v \
             ON v.consumer_name = i.consumer_name AND v.queue_id = i.queue_id \
             AND v.task_id = SUBSTRING(i.event_canonical, \
                 LOCATE('\"task\":{\"id\":\"', i.event_canonical) + 14, 32) \
             WHERE i.consumer_name = ? AND i.queue_id = ? AND i.event_id > ? AND i.received_at < ? \
             ORDER BY i.event_id LIMIT ?",
        )
        .bind(scope.receiver.as_str())
        .bind(scope.queue_id.as_str())
        .bind(after)
        .bind(cutoff)
        .bind(limit)
        .fetch_all(conn)
        .await?;
        rows.iter()
            .map(|row| Ok((text(row, 0)?, get::<i64>(row, 1)? as u64, get(row, 2)?)))
            .collect()
    }

    async fn begin_batch(conn: &mut MySqlConnection) -> Result<(), DbError> {
        conn.execute("START TRANSACTION").await?;
        Ok(())
    }

    async fn end_batch(conn: &mut MySqlConnection, commit: bool) -> Result<(), DbError> {
        conn.execute(if commit { "COMMIT" } else { "ROLLBACK" })
            .await?;
        Ok(())
    }

    async fn batch_rows(
        conn: &mut MySqlConnection,
        scope: &InboxScope,
        cutoff: &str,
        keys: &[String],
    ) -> Result<Vec<LockedRow>, DbError> {
        let sql = format!(
            "SELECT event_id, event_digest, event_canonical, applied, CAST(received_at AS CHAR) \
             FROM receiver_inbox WHERE consumer_name = ? AND queue_id = ? AND event_id IN ({}) \
             AND received_at < ? ORDER BY event_id FOR UPDATE",
            sql::list("?", keys.len())
        );
        let query = sqlx::query(&sql)
            .bind(scope.receiver.as_str())
            .bind(scope.queue_id.as_str());
        let query = keys.iter().fold(query, |q, key| q.bind(key));
        query
            .bind(cutoff)
            .fetch_all(conn)
            .await?
            .iter()
            .map(|row| {
                Ok((
                    text(row, 0)?,
                    text(row, 1)?,
                    text(row, 2)?,
                    get(row, 3)?,
                    get(row, 4)?,
                ))
            })
            .collect()
    }

    async fn last_events_of(
        conn: &mut MySqlConnection,
        scope: &InboxScope,
        tasks: &[&str],
    ) -> Result<Vec<(String, String)>, DbError> {
        let sql = format!(
            "SELECT task_id, last_event_id FROM receiver_task_views \
             WHERE consumer_name = ? AND queue_id = ? AND task_id IN ({})",
            sql::list("?", tasks.len())
        );
        let query = sqlx::query(&sql)
            .bind(scope.receiver.as_str())
            .bind(scope.queue_id.as_str());
        let query = tasks.iter().fold(query, |q, task| q.bind(*task));
        query
            .fetch_all(conn)
            .await?
            .iter()
            .map(|row| Ok((text(row, 0)?, text(row, 1)?)))
            .collect()
    }

    async fn add_to_tally(
        conn: &mut MySqlConnection,
        scope: &InboxScope,
        per_task: &[(&str, u64, u64, u64)],
    ) -> Result<(), DbError> {
        let rows = format!(
            "SELECT ? AS task_id, ? AS events, ? AS applied, ? AS bytes{}",
            " UNION ALL SELECT ?, ?, ?, ?".repeat(per_task.len().saturating_sub(1))
        );
        let sql = format!(
            "INSERT INTO receiver_pruned (consumer_name, queue_id, task_id, pruned_events, \
             pruned_applied, pruned_bytes, last_pruned_at) \
             SELECT ?, ?, t.task_id, t.events, t.applied, t.bytes, UTC_TIMESTAMP(6) FROM ({rows}) AS t \
             ON DUPLICATE KEY UPDATE pruned_events = receiver_pruned.pruned_events + t.events, \
             pruned_applied = receiver_pruned.pruned_applied + t.applied, \
             pruned_bytes = receiver_pruned.pruned_bytes + t.bytes, \
             last_pruned_at = UTC_TIMESTAMP(6)"
        );
        let mut query = sqlx::query(&sql)
            .bind(scope.receiver.as_str())
            .bind(scope.queue_id.as_str());
        for (task, events, applied, bytes) in per_task {
            query = query.bind(*task).bind(events).bind(applied).bind(bytes);
        }
        query.execute(conn).await?;
        Ok(())
    }

    /// The rows are locked ([`batch_rows`](Prune::batch_rows)): anything
    /// but all of them deleted means the table is not what this
    /// transaction read, and nothing of it may commit.
    async fn delete_rows(
        conn: &mut MySqlConnection,
        scope: &InboxScope,
        _cutoff: &str,
        keys: &[&str],
    ) -> Result<Vec<String>, DbError> {
        let sql = format!(
            "DELETE FROM receiver_inbox WHERE consumer_name = ? AND queue_id = ? AND event_id IN ({})",
            sql::list("?", keys.len())
        );
        let delete = sqlx::query(&sql)
            .bind(scope.receiver.as_str())
            .bind(scope.queue_id.as_str());
        let delete = keys.iter().fold(delete, |q, key| q.bind(*key));
        if delete.execute(conn).await?.rows_affected() != keys.len() as u64 {
            return Err(DbError::inconsistent());
        }
        Ok(keys.iter().map(|key| (*key).to_owned()).collect())
    }

    async fn count_effects(
        conn: &mut MySqlConnection,
        scope: &InboxScope,
        cutoff: &str,
    ) -> Result<(u64, u64), DbError> {
        let sent: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM receiver_outbox WHERE consumer_name = ? AND queue_id = ? \
             AND state = 'sent' AND created_at < ?",
        )
        .bind(scope.receiver.as_str())
        .bind(scope.queue_id.as_str())
        .bind(cutoff)
        .fetch_one(&mut *conn)
        .await?;
        // The view of a row's task is found as `candidates` finds it.
        let held: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM receiver_inbox i LEFT JOIN receiver_task_views v \
             ON v.consumer_name = i.consumer_name AND v.queue_id = i.queue_id \
             AND v.task_id = SUBSTRING(i.event_canonical, \
                 LOCATE('\"task\":{\"id\":\"', i.event_canonical) + 14, 32) \
             WHERE i.consumer_name = ? AND i.queue_id = ? AND i.received_at < ? \
             AND NOT COALESCE(v.last_event_id = i.event_id, FALSE) \
             AND EXISTS (SELECT 1 FROM receiver_outbox o \
               WHERE o.consumer_name = i.consumer_name AND o.queue_id = i.queue_id \
               AND o.event_id = i.event_id AND NOT (o.state = 'sent' AND o.created_at < ?))",
        )
        .bind(scope.receiver.as_str())
        .bind(scope.queue_id.as_str())
        .bind(cutoff)
        .bind(cutoff)
        .fetch_one(conn)
        .await?;
        Ok((sent.unsigned_abs(), held.unsigned_abs()))
    }

    async fn sent_effects(
        conn: &mut MySqlConnection,
        scope: &InboxScope,
        cutoff: &str,
        after: &str,
        limit: u32,
    ) -> Result<Vec<(String, u64)>, DbError> {
        sqlx::query(
            "SELECT effect_id, CAST(LENGTH(body) + LENGTH(headers) AS UNSIGNED) \
             FROM receiver_outbox WHERE consumer_name = ? AND queue_id = ? \
             AND state = 'sent' AND created_at < ? AND effect_id > ? \
             ORDER BY effect_id LIMIT ?",
        )
        .bind(scope.receiver.as_str())
        .bind(scope.queue_id.as_str())
        .bind(cutoff)
        .bind(after)
        .bind(limit)
        .fetch_all(conn)
        .await?
        .iter()
        .map(|row| Ok((text(row, 0)?, get(row, 1)?)))
        .collect()
    }

    /// By primary key, each row checked again: still the scope's, still
    /// sent, still past the window. A sent effect is never written again,
    /// so no relay holds it.
    async fn delete_effects(
        conn: &mut MySqlConnection,
        scope: &InboxScope,
        cutoff: &str,
        ids: &[String],
    ) -> Result<u64, DbError> {
        let sql = format!(
            "DELETE FROM receiver_outbox WHERE effect_id IN ({}) AND consumer_name = ? \
             AND queue_id = ? AND state = 'sent' AND created_at < ?",
            sql::list("?", ids.len())
        );
        let delete = ids.iter().fold(sqlx::query(&sql), |q, id| q.bind(id));
        Ok(delete
            .bind(scope.receiver.as_str())
            .bind(scope.queue_id.as_str())
            .bind(cutoff)
            .execute(conn)
            .await?
            .rows_affected())
    }

    async fn events_with_effects(
        conn: &mut MySqlConnection,
        scope: &InboxScope,
        events: &[&str],
    ) -> Result<Vec<String>, DbError> {
        let sql = format!(
            "SELECT DISTINCT event_id FROM receiver_outbox \
             WHERE consumer_name = ? AND queue_id = ? AND event_id IN ({})",
            sql::list("?", events.len())
        );
        let query = sqlx::query(&sql)
            .bind(scope.receiver.as_str())
            .bind(scope.queue_id.as_str());
        let query = events.iter().fold(query, |q, event| q.bind(*event));
        query
            .fetch_all(conn)
            .await?
            .iter()
            .map(|row| text(row, 0))
            .collect()
    }
}
