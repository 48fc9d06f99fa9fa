//! `receiver prune`'s statements on PostgreSQL: the window's edge read
//! back as a `timestamp`, each row found by its whole key (see the task
//! view's lock of its rows for why not `ANY(…)`), the tally added to with
//! `ON CONFLICT DO UPDATE`.
//!
//! A batch's rows are read without `FOR UPDATE`, which PostgreSQL allows
//! only with `UPDATE` on the table: the prune role has `SELECT` and
//! `DELETE`, as on MySQL. The `DELETE` locks each row, checks it again
//! (still there, still past the window) and says which rows went; only
//! those are archived and counted. A row past the window is never written
//! again (a view moves only to an event received now), so what was read is
//! what goes.

use sqlx::postgres::{PgConnection, Postgres};
use sqlx::{Executor, Row};

use super::inbox::NOW;
use crate::db::engine::Prune;
use crate::db::record::LockedRow;
use crate::db::DbError;
use crate::scope::InboxScope;

/// A `received_at` as text, in the form MySQL prints a `DATETIME(6)`.
const RECEIVED_AT: &str = "to_char(received_at, 'YYYY-MM-DD HH24:MI:SS.US')";

impl Prune for Postgres {
    async fn prune_session(conn: &mut PgConnection, lock_wait_seconds: u32) -> Result<(), DbError> {
        conn.execute(
            format!(
                "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ COMMITTED; \
                 SET lock_timeout = '{lock_wait_seconds}s'"
            )
            .as_str(),
        )
        .await?;
        Ok(())
    }

    async fn cutoff(conn: &mut PgConnection, micros: u64) -> Result<String, DbError> {
        let micros = i64::try_from(micros).unwrap_or(i64::MAX);
        Ok(sqlx::query_scalar(&format!(
            "SELECT to_char({NOW} - $1::bigint * interval '1 microsecond', \
             'YYYY-MM-DD HH24:MI:SS.US')"
        ))
        .bind(micros)
        .fetch_one(conn)
        .await?)
    }

    async fn count_window(
        conn: &mut PgConnection,
        scope: &InboxScope,
        cutoff: &str,
    ) -> Result<(u64, u64, u64), DbError> {
        let (rows, bytes, latest): (i64, i64, i64) = sqlx::query_as(
            "SELECT count(*), coalesce(sum(octet_length(event_canonical)), 0)::bigint, \
               (SELECT count(*) FROM receiver_task_views v JOIN receiver_inbox i \
                  ON i.consumer_name = v.consumer_name AND i.queue_id = v.queue_id \
                  AND i.event_id = v.last_event_id \
                WHERE v.consumer_name = $1 AND v.queue_id = $2::bpchar \
                  AND i.received_at < $3::timestamp) \
             FROM receiver_inbox WHERE consumer_name = $1 AND queue_id = $2::bpchar \
               AND received_at < $3::timestamp",
        )
        .bind(scope.receiver.as_str())
        .bind(scope.queue_id.as_str())
        .bind(cutoff)
        .fetch_one(conn)
        .await?;
        Ok((
            rows.unsigned_abs(),
            bytes.unsigned_abs(),
            latest.unsigned_abs(),
        ))
    }

    async fn candidates(
        conn: &mut PgConnection,
        scope: &InboxScope,
        cutoff: &str,
        after: &str,
        limit: u32,
    ) -> Result<Vec<(String, u64, bool)>, DbError> {
        let rows = sqlx::query(
            "SELECT i.event_id, octet_length(i.event_canonical)::bigint, \
             coalesce(v.last_event_id = i.event_id, false) \
             FROM receiver_inbox i LEFT JOIN receiver_task_views v \
             ON v.consumer_name = i.consumer_name AND v.queue_id = i.queue_id \
             AND v.task_id = substr(i.event_canonical, \
                 strpos(i.event_canonical, '\"task\":{\"id\":\"') + 14, 32)::bpchar \
             WHERE i.consumer_name = $1 AND i.queue_id = $2::bpchar AND i.event_id > $3::bpchar \
               AND i.received_at < $4::timestamp \
             ORDER BY i.event_id LIMIT $5",
        )
        .bind(scope.receiver.as_str())
        .bind(scope.queue_id.as_str())
        .bind(after)
        .bind(cutoff)
        .bind(i64::from(limit))
        .fetch_all(conn)
        .await?;
        rows.iter()
            .map(|row| {
                Ok((
                    row.try_get(0)?,
                    row.try_get::<i64, _>(1)?.unsigned_abs(),
                    row.try_get(2)?,
                ))
            })
            .collect()
    }

    async fn begin_batch(conn: &mut PgConnection) -> Result<(), DbError> {
        conn.execute("BEGIN").await?;
        Ok(())
    }

    async fn end_batch(conn: &mut PgConnection, commit: bool) -> Result<(), DbError> {
        conn.execute(if commit { "COMMIT" } else { "ROLLBACK" })
            .await?;
        Ok(())
    }

    async fn batch_rows(
        conn: &mut PgConnection,
        scope: &InboxScope,
        cutoff: &str,
        keys: &[String],
    ) -> Result<Vec<LockedRow>, DbError> {
        let sql = format!(
            "SELECT i.event_id, i.event_digest, i.event_canonical, i.applied = 1, i.received \
             FROM unnest($3::bpchar[]) WITH ORDINALITY AS k(event_id, n) CROSS JOIN LATERAL ( \
               SELECT event_id, event_digest, event_canonical, applied, {RECEIVED_AT} AS received \
               FROM receiver_inbox WHERE consumer_name = $1 AND queue_id = $2::bpchar \
                 AND event_id = k.event_id AND received_at < $4::timestamp) AS i \
             ORDER BY k.n"
        );
        sqlx::query(&sql)
            .bind(scope.receiver.as_str())
            .bind(scope.queue_id.as_str())
            .bind(keys)
            .bind(cutoff)
            .fetch_all(conn)
            .await?
            .iter()
            .map(|row| {
                Ok((
                    row.try_get(0)?,
                    row.try_get(1)?,
                    row.try_get(2)?,
                    row.try_get(3)?,
                    row.try_get(4)?,
                ))
            })
            .collect()
    }

    async fn last_events_of(
        conn: &mut PgConnection,
        scope: &InboxScope,
        tasks: &[&str],
    ) -> Result<Vec<(String, String)>, DbError> {
        Ok(sqlx::query_as(
            "SELECT v.task_id, v.last_event_id FROM unnest($3::bpchar[]) AS k(task_id) \
             CROSS JOIN LATERAL (SELECT task_id, last_event_id FROM receiver_task_views \
               WHERE consumer_name = $1 AND queue_id = $2::bpchar AND task_id = k.task_id) AS v",
        )
        .bind(scope.receiver.as_str())
        .bind(scope.queue_id.as_str())
        .bind(tasks)
        .fetch_all(conn)
        .await?)
    }

    async fn add_to_tally(
        conn: &mut PgConnection,
        scope: &InboxScope,
        per_task: &[(&str, u64, u64, u64)],
    ) -> Result<(), DbError> {
        let number = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        let tasks: Vec<&str> = per_task.iter().map(|t| t.0).collect();
        let events: Vec<i64> = per_task.iter().map(|t| number(t.1)).collect();
        let applied: Vec<i64> = per_task.iter().map(|t| number(t.2)).collect();
        let bytes: Vec<i64> = per_task.iter().map(|t| number(t.3)).collect();
        sqlx::query(&format!(
            "INSERT INTO receiver_pruned (consumer_name, queue_id, task_id, pruned_events, \
             pruned_applied, pruned_bytes, last_pruned_at) \
             SELECT $1, $2, t.task_id, t.events, t.applied, t.bytes, {NOW} \
             FROM unnest($3::bpchar[], $4::bigint[], $5::bigint[], $6::bigint[]) \
               WITH ORDINALITY AS t(task_id, events, applied, bytes, n) ORDER BY t.n \
             ON CONFLICT (consumer_name, queue_id, task_id) DO UPDATE SET \
             pruned_events = receiver_pruned.pruned_events + EXCLUDED.pruned_events, \
             pruned_applied = receiver_pruned.pruned_applied + EXCLUDED.pruned_applied, \
             pruned_bytes = receiver_pruned.pruned_bytes + EXCLUDED.pruned_bytes, \
             last_pruned_at = EXCLUDED.last_pruned_at"
        ))
        .bind(scope.receiver.as_str())
        .bind(scope.queue_id.as_str())
        .bind(tasks)
        .bind(events)
        .bind(applied)
        .bind(bytes)
        .execute(conn)
        .await?;
        Ok(())
    }

    async fn delete_rows(
        conn: &mut PgConnection,
        scope: &InboxScope,
        cutoff: &str,
        keys: &[&str],
    ) -> Result<Vec<String>, DbError> {
        Ok(sqlx::query_scalar(
            "DELETE FROM receiver_inbox WHERE ctid = ANY(ARRAY( \
               SELECT i.ctid FROM unnest($3::bpchar[]) AS k(event_id) \
               CROSS JOIN LATERAL (SELECT ctid FROM receiver_inbox WHERE consumer_name = $1 \
                 AND queue_id = $2::bpchar AND event_id = k.event_id) i)) \
             AND received_at < $4::timestamp RETURNING event_id",
        )
        .bind(scope.receiver.as_str())
        .bind(scope.queue_id.as_str())
        .bind(keys)
        .bind(cutoff)
        .fetch_all(conn)
        .await?)
    }

    async fn count_effects(
        conn: &mut PgConnection,
        scope: &InboxScope,
        cutoff: &str,
    ) -> Result<(u64, u64), DbError> {
        // The view of a row's task is found as `candidates` finds it.
        let (sent, held): (i64, i64) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM receiver_outbox WHERE consumer_name = $1 \
                 AND queue_id = $2::bpchar AND state = 'sent' AND created_at < $3::timestamp), \
               (SELECT count(*) FROM receiver_inbox i LEFT JOIN receiver_task_views v \
                 ON v.consumer_name = i.consumer_name AND v.queue_id = i.queue_id \
                 AND v.task_id = substr(i.event_canonical, \
                     strpos(i.event_canonical, '\"task\":{\"id\":\"') + 14, 32)::bpchar \
                 WHERE i.consumer_name = $1 AND i.queue_id = $2::bpchar \
                 AND i.received_at < $3::timestamp \
                 AND NOT coalesce(v.last_event_id = i.event_id, false) \
                 AND EXISTS (SELECT 1 FROM receiver_outbox o \
                   WHERE o.consumer_name = i.consumer_name AND o.queue_id = i.queue_id \
                   AND o.event_id = i.event_id \
                   AND NOT (o.state = 'sent' AND o.created_at < $3::timestamp)))",
        )
        .bind(scope.receiver.as_str())
        .bind(scope.queue_id.as_str())
        .bind(cutoff)
        .fetch_one(conn)
        .await?;
        Ok((sent.unsigned_abs(), held.unsigned_abs()))
    }

    async fn sent_effects(
        conn: &mut PgConnection,
        scope: &InboxScope,
        cutoff: &str,
        after: &str,
        limit: u32,
    ) -> Result<Vec<(String, u64)>, DbError> {
        sqlx::query(
            "SELECT effect_id, (octet_length(body) + octet_length(headers))::bigint \
             FROM receiver_outbox WHERE consumer_name = $1 AND queue_id = $2::bpchar \
             AND state = 'sent' AND created_at < $3::timestamp AND effect_id > $4::bpchar \
             ORDER BY effect_id LIMIT $5",
        )
        .bind(scope.receiver.as_str())
        .bind(scope.queue_id.as_str())
        .bind(cutoff)
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(conn)
        .await?
        .iter()
        .map(|row| Ok((row.try_get(0)?, row.try_get::<i64, _>(1)?.unsigned_abs())))
        .collect()
    }

    /// By primary key, each row checked again: still the scope's, still
    /// sent, still past the window. A sent effect is never written again,
    /// so no relay holds it.
    async fn delete_effects(
        conn: &mut PgConnection,
        scope: &InboxScope,
        cutoff: &str,
        ids: &[String],
    ) -> Result<u64, DbError> {
        Ok(sqlx::query(
            "DELETE FROM receiver_outbox WHERE ctid = ANY(ARRAY( \
               SELECT o.ctid FROM unnest($1::bpchar[]) AS k(effect_id) \
               CROSS JOIN LATERAL (SELECT ctid FROM receiver_outbox \
                 WHERE effect_id = k.effect_id) o)) \
             AND consumer_name = $2 AND queue_id = $3::bpchar AND state = 'sent' \
             AND created_at < $4::timestamp",
        )
        .bind(ids)
        .bind(scope.receiver.as_str())
        .bind(scope.queue_id.as_str())
        .bind(cutoff)
        .execute(conn)
        .await?
        .rows_affected())
    }

    async fn events_with_effects(
        conn: &mut PgConnection,
        scope: &InboxScope,
        events: &[&str],
    ) -> Result<Vec<String>, DbError> {
        Ok(sqlx::query_scalar(
            "SELECT k.event_id::text FROM unnest($3::bpchar[]) AS k(event_id) \
             WHERE EXISTS (SELECT 1 FROM receiver_outbox WHERE consumer_name = $1 \
               AND queue_id = $2::bpchar AND event_id = k.event_id)",
        )
        .bind(scope.receiver.as_str())
        .bind(scope.queue_id.as_str())
        .bind(events)
        .fetch_all(conn)
        .await?)
    }
}
