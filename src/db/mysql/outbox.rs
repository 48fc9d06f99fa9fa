//! The outbox's statements on MySQL and MariaDB: the row an inner service
//! records in the inbox's transaction, and the relay's, each in a short
//! `READ COMMITTED` transaction of its own (no gap locks that would hold up
//! the inbox's inserts), rows claimed with `FOR UPDATE SKIP LOCKED`.

use std::time::Duration;

use sqlx::mysql::{MySql, MySqlConnection, MySqlRow};
use sqlx::{Connection, Executor};

use super::statement;
use crate::db::engine::Outbox;
use crate::db::record::{first_found, ClaimedRow, EffectRecord, NewEffectRow};
use crate::db::row::{get, text};
use crate::db::trace::traced;
use crate::db::{sql, DbError, EngineKind};

/// The table, as the statements' spans name it.
const OUTBOX: &str = "receiver_outbox";

const RECORD_SQL: &str = "\
INSERT INTO receiver_outbox
  (effect_id, consumer_name, queue_id, event_id, target, effect_key, ordering_key,
   body, headers, traceparent, state, attempts, next_attempt_at, created_at)
VALUES ";

const RECORD_ROW: &str =
    "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', 0, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))";

/// The `INSERT` of `rows` effects: one statement, whose rows take their
/// `seq` in the order they are listed.
fn record_sql(rows: usize) -> String {
    format!("{RECORD_SQL}{}", sql::list(RECORD_ROW, rows))
}

/// Which of `rows` is there already, after the `INSERT` of all of them
/// met a duplicate key: MySQL names the entry in its message (the table's
/// one unique key besides `seq` is the effect id), and a read says
/// otherwise. `None` when none is there any more.
async fn recorded_before(
    conn: &mut MySqlConnection,
    rows: &[NewEffectRow<'_>],
    message: &str,
) -> Result<Option<usize>, sqlx::Error> {
    if let Some(i) = rows.iter().position(|r| message.contains(r.effect_id)) {
        return Ok(Some(i));
    }
    let sql = format!(
        "SELECT CAST(effect_id AS CHAR) FROM receiver_outbox WHERE effect_id IN ({})",
        sql::list("?", rows.len())
    );
    let found: Vec<String> = rows
        .iter()
        .fold(sqlx::query_scalar(&sql), |q, r| q.bind(r.effect_id))
        .fetch_all(conn)
        .await?;
    Ok(first_found(rows, &found))
}

/// Due, free and the head of its target's ordering key: no pending effect
/// of the key was recorded before it. The subquery is a plain read: only
/// the outer rows are locked, and a row another claimer holds is skipped,
/// never waited for. The scan follows the due index in its own order, so
/// it stops at the limit: a sort would read, and lock, every due row
/// first, and leave a second claimer nothing to take.
fn claim_sql() -> String {
    format!(
        "SELECT o.seq, o.effect_id, o.consumer_name, o.queue_id, o.event_id, o.target, \
         o.effect_key, o.ordering_key, o.body, o.headers, o.traceparent, o.attempts, {} \
         FROM receiver_outbox o FORCE INDEX (receiver_outbox_due) \
         WHERE o.state = 'pending' AND o.next_attempt_at <= UTC_TIMESTAMP(6) \
         AND (o.lease_until IS NULL OR o.lease_until <= UTC_TIMESTAMP(6)) \
         AND NOT EXISTS (SELECT 1 FROM receiver_outbox h \
           WHERE h.target = o.target AND h.ordering_key = o.ordering_key \
           AND h.state = 'pending' AND h.seq < o.seq) \
         ORDER BY o.next_attempt_at, o.seq LIMIT ? FOR UPDATE SKIP LOCKED",
        sql::rfc3339("o.created_at")
    )
}

fn opt_text(row: &MySqlRow, i: usize) -> Result<Option<String>, DbError> {
    let bytes: Option<Vec<u8>> = get(row, i)?;
    bytes
        .map(|b| String::from_utf8(b).map_err(|_| DbError::inconsistent()))
        .transpose()
}

fn claimed(row: &MySqlRow) -> Result<ClaimedRow, DbError> {
    Ok(ClaimedRow {
        seq: get(row, 0)?,
        effect_id: text(row, 1)?,
        consumer: text(row, 2)?,
        queue: text(row, 3)?,
        event: text(row, 4)?,
        target: text(row, 5)?,
        key: text(row, 6)?,
        ordering_key: text(row, 7)?,
        body: get(row, 8)?,
        headers: text(row, 9)?,
        traceparent: opt_text(row, 10)?,
        attempts: get(row, 11)?,
        created_at: text(row, 12)?,
    })
}

fn listed(row: &MySqlRow) -> Result<EffectRecord, DbError> {
    Ok(EffectRecord {
        seq: get(row, 0)?,
        effect_id: text(row, 1)?,
        event: text(row, 2)?,
        target: text(row, 3)?,
        key: text(row, 4)?,
        ordering_key: text(row, 5)?,
        state: text(row, 6)?,
        attempts: get(row, 7)?,
        last_result: opt_text(row, 8)?,
        created_at: text(row, 9)?,
        next_attempt_at: text(row, 10)?,
        age_seconds: get(row, 11)?,
    })
}

/// One `UPDATE` in a transaction of its own: whether it changed a row.
async fn update_one(
    conn: &mut MySqlConnection,
    query: sqlx::query::Query<'_, MySql, sqlx::mysql::MySqlArguments>,
) -> Result<u64, DbError> {
    let mut tx = conn.begin().await?;
    let done = query.execute(&mut *tx).await?;
    tx.commit().await?;
    Ok(done.rows_affected())
}

impl Outbox for MySql {
    async fn record_effects(
        conn: &mut MySqlConnection,
        rows: &[NewEffectRow<'_>],
    ) -> Result<Option<usize>, sqlx::Error> {
        let sql = record_sql(rows.len());
        let insert = rows
            .iter()
            .fold(sqlx::query(&sql), |q, row| row.bind(q))
            .execute(&mut *conn);
        match traced(statement("INSERT", Some(OUTBOX)), insert).await {
            Ok(_) => Ok(None),
            // 1062: an effect id is there; the statement alone is undone,
            // the transaction goes on.
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
                let message = e.message().to_owned();
                match recorded_before(conn, rows, &message).await? {
                    Some(i) => Ok(Some(i)),
                    // Gone since (a prune): the next attempt writes it.
                    None => Err(sqlx::Error::Database(e)),
                }
            }
            Err(e) => Err(e),
        }
    }

    async fn server_version(conn: &mut MySqlConnection) -> Result<(EngineKind, String), DbError> {
        let version: String = sqlx::query_scalar("SELECT CAST(VERSION() AS CHAR)")
            .fetch_one(conn)
            .await?;
        Ok((EngineKind::MySql, version))
    }

    async fn claim(
        conn: &mut MySqlConnection,
        owner: &str,
        lease: Duration,
        limit: u32,
    ) -> Result<Vec<ClaimedRow>, DbError> {
        // For the next transaction only: READ COMMITTED locks the rows it
        // returns, no gaps.
        conn.execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
            .await?;
        let mut tx = conn.begin().await?;
        let rows = sqlx::query(&claim_sql())
            .bind(limit)
            .fetch_all(&mut *tx)
            .await?;
        let claimed = rows.iter().map(claimed).collect::<Result<Vec<_>, _>>()?;
        if !claimed.is_empty() {
            let lease_sql = format!(
                "UPDATE receiver_outbox SET lease_owner = ?, \
                 lease_until = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND \
                 WHERE effect_id IN ({})",
                sql::list("?", claimed.len())
            );
            let mut update = sqlx::query(&lease_sql)
                .bind(owner)
                .bind(u64::try_from(lease.as_micros()).unwrap_or(u64::MAX));
            for row in &claimed {
                update = update.bind(row.effect_id.as_str());
            }
            update.execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(claimed)
    }

    async fn mark_sent(
        conn: &mut MySqlConnection,
        effect_id: &str,
        owner: &str,
        result: &str,
    ) -> Result<bool, DbError> {
        let query = sqlx::query(
            "UPDATE receiver_outbox SET state = 'sent', attempts = attempts + 1, \
             last_result = ?, sent_at = UTC_TIMESTAMP(6), lease_owner = NULL, lease_until = NULL \
             WHERE effect_id = ? AND state = 'pending' AND lease_owner = ?",
        )
        .bind(result)
        .bind(effect_id)
        .bind(owner);
        Ok(update_one(conn, query).await? == 1)
    }

    async fn mark_failed(
        conn: &mut MySqlConnection,
        effect_id: &str,
        owner: &str,
        retry_in: Duration,
        result: &str,
    ) -> Result<bool, DbError> {
        let query = sqlx::query(
            "UPDATE receiver_outbox SET attempts = attempts + 1, last_result = ?, \
             next_attempt_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, \
             lease_owner = NULL, lease_until = NULL \
             WHERE effect_id = ? AND state = 'pending' AND lease_owner = ?",
        )
        .bind(result)
        .bind(u64::try_from(retry_in.as_micros()).unwrap_or(u64::MAX))
        .bind(effect_id)
        .bind(owner);
        Ok(update_one(conn, query).await? == 1)
    }

    async fn mark_dead(
        conn: &mut MySqlConnection,
        effect_id: &str,
        owner: &str,
        result: &str,
    ) -> Result<bool, DbError> {
        let query = sqlx::query(
            "UPDATE receiver_outbox SET state = 'dead', attempts = attempts + 1, \
             last_result = ?, lease_owner = NULL, lease_until = NULL \
             WHERE effect_id = ? AND state = 'pending' AND lease_owner = ?",
        )
        .bind(result)
        .bind(effect_id)
        .bind(owner);
        Ok(update_one(conn, query).await? == 1)
    }

    async fn list_effects(
        conn: &mut MySqlConnection,
        state: &'static str,
        after_seq: u64,
        limit: u32,
    ) -> Result<Vec<EffectRecord>, DbError> {
        let list_sql = format!(
            "SELECT seq, effect_id, event_id, target, effect_key, ordering_key, state, attempts, \
             last_result, {}, {}, TIMESTAMPDIFF(SECOND, created_at, UTC_TIMESTAMP(6)) \
             FROM receiver_outbox WHERE state = ? AND seq > ? ORDER BY seq LIMIT ?",
            sql::rfc3339("created_at"),
            sql::rfc3339("next_attempt_at"),
        );
        let mut tx = conn.begin().await?;
        let rows = sqlx::query(&list_sql)
            .bind(state)
            .bind(after_seq)
            .bind(limit)
            .fetch_all(&mut *tx)
            .await?;
        tx.commit().await?;
        rows.iter().map(listed).collect()
    }

    async fn pending_summary(conn: &mut MySqlConnection) -> Result<(u64, Option<f64>), DbError> {
        let mut tx = conn.begin().await?;
        let (count, oldest): (i64, Option<f64>) = sqlx::query_as(
            "SELECT COUNT(*), CAST(TIMESTAMPDIFF(MICROSECOND, MIN(created_at), UTC_TIMESTAMP(6)) \
             AS DOUBLE) / 1e6 FROM receiver_outbox WHERE state = 'pending'",
        )
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok((u64::try_from(count).unwrap_or(0), oldest))
    }

    async fn replay_dead(
        conn: &mut MySqlConnection,
        effect_id: Option<&str>,
    ) -> Result<u64, DbError> {
        let replay_sql = format!(
            "UPDATE receiver_outbox SET state = 'pending', attempts = 0, \
             next_attempt_at = UTC_TIMESTAMP(6), lease_owner = NULL, lease_until = NULL \
             WHERE state = 'dead'{}",
            if effect_id.is_some() {
                " AND effect_id = ?"
            } else {
                ""
            }
        );
        let mut query = sqlx::query(&replay_sql);
        if let Some(id) = effect_id {
            query = query.bind(id);
        }
        update_one(conn, query).await
    }
}
