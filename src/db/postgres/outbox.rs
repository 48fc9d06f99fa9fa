//! The outbox's statements on PostgreSQL: the row an inner service records
//! in the inbox's transaction (`ON CONFLICT DO NOTHING`, so a second
//! effect with one id does not abort it), and the relay's, each in a short
//! transaction of its own, rows claimed with `FOR UPDATE SKIP LOCKED`.

use std::time::Duration;

use sqlx::postgres::{PgConnection, PgRow, Postgres};
use sqlx::{Connection, Row};

use super::inbox::NOW;
use super::statement;
use crate::db::engine::Outbox;
use crate::db::record::{first_found, ClaimedRow, EffectRecord, NewEffectRow};
use crate::db::trace::traced;
use crate::db::{DbError, EngineKind};

/// The table, as the statements' spans name it.
const OUTBOX: &str = "receiver_outbox";

fn rfc3339(column: &str) -> String {
    format!("to_char({column}, 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')")
}

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

fn unsigned(n: i64) -> Result<u64, DbError> {
    u64::try_from(n).map_err(|_| DbError::inconsistent())
}

fn claimed(row: &PgRow) -> Result<ClaimedRow, DbError> {
    let attempts: i32 = row.try_get(11)?;
    Ok(ClaimedRow {
        seq: unsigned(row.try_get(0)?)?,
        effect_id: row.try_get(1)?,
        consumer: row.try_get(2)?,
        queue: row.try_get(3)?,
        event: row.try_get(4)?,
        target: row.try_get(5)?,
        key: row.try_get(6)?,
        ordering_key: row.try_get(7)?,
        body: row.try_get(8)?,
        headers: row.try_get(9)?,
        traceparent: row.try_get(10)?,
        attempts: u32::try_from(attempts).map_err(|_| DbError::inconsistent())?,
        created_at: row.try_get(12)?,
    })
}

fn listed(row: &PgRow) -> Result<EffectRecord, DbError> {
    let attempts: i32 = row.try_get(7)?;
    Ok(EffectRecord {
        seq: unsigned(row.try_get(0)?)?,
        effect_id: row.try_get(1)?,
        event: row.try_get(2)?,
        target: row.try_get(3)?,
        key: row.try_get(4)?,
        ordering_key: row.try_get(5)?,
        state: row.try_get(6)?,
        attempts: u32::try_from(attempts).map_err(|_| DbError::inconsistent())?,
        last_result: row.try_get(8)?,
        created_at: row.try_get(9)?,
        next_attempt_at: row.try_get(10)?,
        age_seconds: row.try_get(11)?,
    })
}

// An effect id is compared as `$n::bpchar`: a text parameter against the
// `char(32)` key would cast the column instead, and read every row of the
// table (sent effects included, until they are pruned) for each answer.

const RECORD_COLUMNS: &str = "effect_id, consumer_name, queue_id, event_id, target, \
     effect_key, ordering_key, body, headers, traceparent";

/// One effect's row (`ON CONFLICT DO NOTHING`): `false` when its id is
/// there already.
async fn record_one(conn: &mut PgConnection, row: &NewEffectRow<'_>) -> Result<bool, sqlx::Error> {
    let sql = format!(
        "INSERT INTO receiver_outbox ({RECORD_COLUMNS}, state, attempts, next_attempt_at, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 'pending', 0, {NOW}, {NOW}) \
         ON CONFLICT (effect_id) DO NOTHING"
    );
    let insert = row.bind(sqlx::query(&sql)).execute(conn);
    let done = traced(statement("INSERT", Some(OUTBOX)), insert).await?;
    Ok(done.rows_affected() == 1)
}

/// The rows of `rows` effects in one statement, all or none: written, in
/// the order listed (which their `seq` follows), only when none of their
/// ids is there already. (One committed between the statement's read
/// and its write would be a unique violation, which aborts the
/// transaction: the delivery fails and is tried again.)
fn record_all_sql(rows: usize) -> String {
    let values = (0..rows)
        .map(|i| {
            let p: Vec<String> = (1..=10).map(|c| format!("${}", i * 10 + c)).collect();
            format!("({i}, {}::bpchar, {})", p[0], p[1..].join(", "))
        })
        .collect::<Vec<_>>()
        .join(", ");
    // One probe of the key per id: a list (`IN`, `= ANY`) makes the plan
    // that PostgreSQL keeps for the prepared statement read the whole
    // table once it was planned while the table looked empty.
    let absent = (0..rows)
        .map(|i| {
            format!(
                "NOT EXISTS (SELECT 1 FROM receiver_outbox WHERE effect_id = ${}::bpchar)",
                i * 10 + 1
            )
        })
        .collect::<Vec<_>>()
        .join(" AND ");
    format!(
        "INSERT INTO receiver_outbox \
         ({RECORD_COLUMNS}, state, attempts, next_attempt_at, created_at) \
         SELECT {RECORD_COLUMNS}, 'pending', 0, {NOW}, {NOW} \
         FROM (VALUES {values}) AS new (n, {RECORD_COLUMNS}) \
         WHERE {absent} ORDER BY n"
    )
}

/// Which of `rows` is there already, after their `INSERT` wrote none.
async fn recorded_before(
    conn: &mut PgConnection,
    rows: &[NewEffectRow<'_>],
) -> Result<Option<usize>, sqlx::Error> {
    let sql = (1..=rows.len())
        .map(|i| {
            format!("SELECT effect_id::text FROM receiver_outbox WHERE effect_id = ${i}::bpchar")
        })
        .collect::<Vec<_>>()
        .join(" UNION ALL ");
    let found: Vec<String> = rows
        .iter()
        .fold(sqlx::query_scalar(&sql), |q, r| q.bind(r.effect_id))
        .fetch_all(conn)
        .await?;
    Ok(first_found(rows, &found))
}

/// One `UPDATE` in a transaction of its own: the rows it changed.
async fn update_one(
    conn: &mut PgConnection,
    query: sqlx::query::Query<'_, Postgres, sqlx::postgres::PgArguments>,
) -> Result<u64, DbError> {
    let mut tx = conn.begin().await?;
    let done = query.execute(&mut *tx).await?;
    tx.commit().await?;
    Ok(done.rows_affected())
}

impl Outbox for Postgres {
    async fn record_effects(
        conn: &mut PgConnection,
        rows: &[NewEffectRow<'_>],
    ) -> Result<Option<usize>, sqlx::Error> {
        if let [row] = rows {
            return Ok(match record_one(conn, row).await? {
                true => None,
                false => Some(0),
            });
        }
        let sql = record_all_sql(rows.len());
        let insert = rows
            .iter()
            .fold(sqlx::query(&sql), |q, row| row.bind(q))
            .execute(&mut *conn);
        let written = traced(statement("INSERT", Some(OUTBOX)), insert)
            .await?
            .rows_affected();
        if written == rows.len() as u64 {
            return Ok(None);
        }
        match recorded_before(conn, rows).await? {
            Some(i) => Ok(Some(i)),
            // Written none, and none is there: the guard and the rows
            // disagree, which only a damaged table could make.
            None => Err(sqlx::Error::Protocol(format!(
                "the outbox wrote {} of {} effects and holds none of them",
                written,
                rows.len()
            ))),
        }
    }

    async fn server_version(conn: &mut PgConnection) -> Result<(EngineKind, String), DbError> {
        let version: String = sqlx::query_scalar("SELECT current_setting('server_version')")
            .fetch_one(conn)
            .await?;
        Ok((EngineKind::Postgres, version))
    }

    async fn claim(
        conn: &mut PgConnection,
        owner: &str,
        lease: Duration,
        limit: u32,
    ) -> Result<Vec<ClaimedRow>, DbError> {
        // Due, free and the head of its target's ordering key. The
        // subquery is a plain read; only the outer rows are locked, and a
        // row another claimer holds is skipped, never waited for.
        let claim_sql = format!(
            "SELECT o.seq, o.effect_id::text, o.consumer_name::text, o.queue_id::text, \
             o.event_id::text, o.target::text, o.effect_key::text, o.ordering_key::text, \
             o.body, o.headers, o.traceparent::text, o.attempts, {} \
             FROM receiver_outbox o \
             WHERE o.state = 'pending' AND o.next_attempt_at <= {NOW} \
             AND (o.lease_until IS NULL OR o.lease_until <= {NOW}) \
             AND NOT EXISTS (SELECT 1 FROM receiver_outbox h \
               WHERE h.target = o.target AND h.ordering_key = o.ordering_key \
               AND h.state = 'pending' AND h.seq < o.seq) \
             ORDER BY o.next_attempt_at, o.seq LIMIT $1 FOR UPDATE OF o SKIP LOCKED",
            rfc3339("o.created_at")
        );
        let mut tx = conn.begin().await?;
        let rows = sqlx::query(&claim_sql)
            .bind(i64::from(limit))
            .fetch_all(&mut *tx)
            .await?;
        let claimed = rows.iter().map(claimed).collect::<Result<Vec<_>, _>>()?;
        if !claimed.is_empty() {
            // Planned anew at each claim, with its ids (`persistent(false)`):
            // a relay's connection would otherwise keep the plan PostgreSQL
            // makes once for any list after a few claims, and one made while
            // the outbox was nearly empty reads the whole table, sent
            // effects included, at every claim until an `ANALYZE` replaces
            // it. The claim's own read keeps its plan: along the due index
            // whatever the table holds.
            let ids: Vec<&str> = claimed.iter().map(|r| r.effect_id.as_str()).collect();
            sqlx::query(&format!(
                "UPDATE receiver_outbox SET lease_owner = $1, \
                 lease_until = {NOW} + $2::bigint * interval '1 microsecond' \
                 WHERE effect_id = ANY($3::char(32)[])"
            ))
            .bind(owner)
            .bind(micros(lease))
            .bind(ids)
            .persistent(false)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(claimed)
    }

    async fn mark_sent(
        conn: &mut PgConnection,
        effect_id: &str,
        owner: &str,
        result: &str,
    ) -> Result<bool, DbError> {
        let sql = format!(
            "UPDATE receiver_outbox SET state = 'sent', attempts = attempts + 1, \
             last_result = $1, sent_at = {NOW}, lease_owner = NULL, lease_until = NULL \
             WHERE effect_id = $2::bpchar AND state = 'pending' AND lease_owner = $3"
        );
        let query = sqlx::query(&sql).bind(result).bind(effect_id).bind(owner);
        Ok(update_one(conn, query).await? == 1)
    }

    async fn mark_failed(
        conn: &mut PgConnection,
        effect_id: &str,
        owner: &str,
        retry_in: Duration,
        result: &str,
    ) -> Result<bool, DbError> {
        let sql = format!(
            "UPDATE receiver_outbox SET attempts = attempts + 1, last_result = $1, \
             next_attempt_at = {NOW} + $2::bigint * interval '1 microsecond', \
             lease_owner = NULL, lease_until = NULL \
             WHERE effect_id = $3::bpchar AND state = 'pending' AND lease_owner = $4"
        );
        let query = sqlx::query(&sql)
            .bind(result)
            .bind(micros(retry_in))
            .bind(effect_id)
            .bind(owner);
        Ok(update_one(conn, query).await? == 1)
    }

    async fn mark_dead(
        conn: &mut PgConnection,
        effect_id: &str,
        owner: &str,
        result: &str,
    ) -> Result<bool, DbError> {
        let query = sqlx::query(
            "UPDATE receiver_outbox SET state = 'dead', attempts = attempts + 1, \
             last_result = $1, lease_owner = NULL, lease_until = NULL \
             WHERE effect_id = $2::bpchar AND state = 'pending' AND lease_owner = $3",
        )
        .bind(result)
        .bind(effect_id)
        .bind(owner);
        Ok(update_one(conn, query).await? == 1)
    }

    async fn list_effects(
        conn: &mut PgConnection,
        state: &'static str,
        after_seq: u64,
        limit: u32,
    ) -> Result<Vec<EffectRecord>, DbError> {
        let sql = format!(
            "SELECT seq, effect_id::text, event_id::text, target::text, effect_key::text, \
             ordering_key::text, state::text, attempts, last_result::text, {}, {}, \
             floor(extract(epoch FROM {NOW} - created_at))::bigint \
             FROM receiver_outbox WHERE state = $1 AND seq > $2 ORDER BY seq LIMIT $3",
            rfc3339("created_at"),
            rfc3339("next_attempt_at"),
        );
        let mut tx = conn.begin().await?;
        let rows = sqlx::query(&sql)
            .bind(state)
            .bind(i64::try_from(after_seq).unwrap_or(i64::MAX))
            .bind(i64::from(limit))
            .fetch_all(&mut *tx)
            .await?;
        tx.commit().await?;
        rows.iter().map(listed).collect()
    }

    async fn pending_summary(conn: &mut PgConnection) -> Result<(u64, Option<f64>), DbError> {
        let sql = format!(
            "SELECT count(*), extract(epoch FROM {NOW} - min(created_at))::float8 \
             FROM receiver_outbox WHERE state = 'pending'"
        );
        let mut tx = conn.begin().await?;
        let (count, oldest): (i64, Option<f64>) = sqlx::query_as(&sql).fetch_one(&mut *tx).await?;
        tx.commit().await?;
        Ok((unsigned(count)?, oldest))
    }

    async fn replay_dead(conn: &mut PgConnection, effect_id: Option<&str>) -> Result<u64, DbError> {
        let sql = format!(
            "UPDATE receiver_outbox SET state = 'pending', attempts = 0, \
             next_attempt_at = {NOW}, lease_owner = NULL, lease_until = NULL \
             WHERE state = 'dead' AND ($1::text IS NULL OR effect_id = $1::bpchar)"
        );
        let query = sqlx::query(&sql).bind(effect_id);
        update_one(conn, query).await
    }
}
