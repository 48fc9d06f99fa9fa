//! What a relay asks of the outbox table, each in a short transaction of
//! its own, never while anything is being sent.
//!
//! A relay [`claim`]s due effects: pending, `next_attempt_at` passed, no
//! lease or one that has run out, and each the **head** of its target's
//! ordering key — no pending effect of the same target and ordering key
//! recorded before it. So a key waits behind its failed head (pending,
//! tried again later) while other keys go on; a dead or sent effect no
//! longer holds its key. The rows are locked with `FOR UPDATE SKIP
//! LOCKED`, so relays on any number of hosts claim disjoint effects
//! without waiting on each other, and leased to the claimer (`lease_owner`,
//! `lease_until`) before the claim's COMMIT. The relay then sends with no
//! transaction open and records the answer: [`mark_sent`], [`mark_failed`]
//! or [`mark_dead`], each only while the lease is its own (a relay whose
//! lease was taken over changes nothing). A relay that dies leaves a lease
//! that runs out, never a lock.
//!
//! A server without `SKIP LOCKED` would make relays wait on one another's
//! claims; [`check_skip_locked`] refuses it, naming the version needed.

use std::time::Duration;

use bytes::Bytes;

use super::effect::{EffectKey, Headers, Target};
use super::error::OutboxError;
use super::id::EffectId;
use crate::db::record::{ClaimedRow, EffectRecord};
use crate::db::{DbError, Engine, EngineKind};
use crate::ids::EventId;

/// The longest lease owner, in bytes (the column holds 128).
const MAX_OWNER_BYTES: usize = 128;
/// The longest last result kept, in characters (the column holds 128).
const MAX_RESULT_CHARS: usize = 128;

/// Where an effect is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EffectState {
    /// Recorded, not sent yet: due at `next_attempt_at`.
    Pending,
    /// The target took it.
    Sent,
    /// Given up on; an operator may replay it under the same id.
    Dead,
}

impl EffectState {
    /// As stored: `pending`, `sent`, `dead`.
    pub fn as_str(self) -> &'static str {
        match self {
            EffectState::Pending => "pending",
            EffectState::Sent => "sent",
            EffectState::Dead => "dead",
        }
    }
}

/// An effect claimed under a lease: everything a target needs to send it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Claimed {
    /// Its id: the same on every attempt.
    pub id: EffectId,
    /// Its place in record order.
    pub seq: u64,
    /// The receiver name that recorded it.
    pub consumer: String,
    /// The queue of the event it came from.
    pub queue: String,
    /// The event it came from.
    pub event: EventId,
    /// Where it goes.
    pub target: Target,
    /// Its key.
    pub key: EffectKey,
    /// Its ordering key.
    pub ordering_key: EffectKey,
    /// The exact bytes to send.
    pub body: Bytes,
    /// The headers to send.
    pub headers: Headers,
    /// The delivery's W3C `traceparent`, if it came with one.
    pub traceparent: Option<String>,
    /// Attempts before this one.
    pub attempts: u32,
    /// When it was recorded (RFC 3339, UTC).
    pub created_at: String,
}

impl Claimed {
    fn from_row(row: ClaimedRow) -> Result<Self, DbError> {
        let bad = |_| DbError::inconsistent();
        Ok(Claimed {
            id: EffectId::parse(&row.effect_id).ok_or_else(DbError::inconsistent)?,
            seq: row.seq,
            consumer: row.consumer,
            queue: row.queue,
            event: EventId::parse(&row.event).map_err(|_| DbError::inconsistent())?,
            target: Target::parse(&row.target).map_err(bad)?,
            key: EffectKey::parse(&row.key).map_err(bad)?,
            ordering_key: EffectKey::parse(&row.ordering_key).map_err(bad)?,
            body: Bytes::from(row.body),
            headers: Headers::from_json(&row.headers).ok_or_else(DbError::inconsistent)?,
            traceparent: row.traceparent,
            attempts: row.attempts,
            created_at: row.created_at,
        })
    }
}

/// An effect as an operator lists it: no body, no headers.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Listed {
    /// Its id.
    pub id: String,
    /// Its place in record order (the next page starts after it).
    pub seq: u64,
    /// The event it came from.
    pub event: String,
    /// Where it goes.
    pub target: String,
    /// Its key.
    pub key: String,
    /// Its ordering key.
    pub ordering_key: String,
    /// `pending` or `dead`.
    pub state: String,
    /// Attempts so far.
    pub attempts: u32,
    /// The last answer (a status or an error class), if tried.
    pub last_result: Option<String>,
    /// When it was recorded (RFC 3339, UTC).
    pub created_at: String,
    /// When it may next be tried (RFC 3339, UTC).
    pub next_attempt_at: String,
    /// Seconds since it was recorded, by the server's clock.
    pub age_seconds: i64,
}

impl From<EffectRecord> for Listed {
    fn from(r: EffectRecord) -> Self {
        Listed {
            id: r.effect_id,
            seq: r.seq,
            event: r.event,
            target: r.target,
            key: r.key,
            ordering_key: r.ordering_key,
            state: r.state,
            attempts: r.attempts,
            last_result: r.last_result,
            created_at: r.created_at,
            next_attempt_at: r.next_attempt_at,
            age_seconds: r.age_seconds,
        }
    }
}

fn owner_checked(owner: &str) -> Result<&str, OutboxError> {
    let valid =
        (1..=MAX_OWNER_BYTES).contains(&owner.len()) && !owner.chars().any(char::is_control);
    if !valid {
        return Err(OutboxError::invalid(
            "lease owner",
            "1 to 128 bytes of UTF-8 without control characters",
        ));
    }
    Ok(owner)
}

/// The last answer as stored: at most 128 characters.
fn result_kept(result: &str) -> &str {
    match result.char_indices().nth(MAX_RESULT_CHARS) {
        Some((end, _)) => &result[..end],
        None => result,
    }
}

/// Claims up to `limit` due effects for `owner` (a name unique to one
/// relay process) for `lease`, in one short transaction: at most one per
/// ordering key, the head of it; in the order they fell due, then in
/// record order. Relays that claim at once get disjoint effects.
pub async fn claim<E: Engine>(
    conn: &mut E::Connection,
    owner: &str,
    lease: Duration,
    limit: u32,
) -> Result<Vec<Claimed>, OutboxError> {
    let owner = owner_checked(owner)?;
    if limit == 0 {
        return Ok(Vec::new());
    }
    let rows = E::claim(conn, owner, lease, limit).await?;
    Ok(rows
        .into_iter()
        .map(Claimed::from_row)
        .collect::<Result<_, _>>()?)
}

/// Records that `id` was sent, with the target's answer (`200`): `false`
/// when the lease is no longer `owner`'s (another relay claimed it after
/// the lease ran out) or the effect is not pending, and nothing changed.
pub async fn mark_sent<E: Engine>(
    conn: &mut E::Connection,
    id: &EffectId,
    owner: &str,
    result: &str,
) -> Result<bool, OutboxError> {
    let owner = owner_checked(owner)?;
    Ok(E::mark_sent(conn, id.as_str(), owner, result_kept(result)).await?)
}

/// Records a failed attempt (`503`, `timeout`): one more attempt, tried
/// again `retry_in` from now by the server's clock, the lease let go, so
/// its ordering key waits behind it. `false` when the lease is not
/// `owner`'s.
pub async fn mark_failed<E: Engine>(
    conn: &mut E::Connection,
    id: &EffectId,
    owner: &str,
    retry_in: Duration,
    result: &str,
) -> Result<bool, OutboxError> {
    let owner = owner_checked(owner)?;
    Ok(E::mark_failed(conn, id.as_str(), owner, retry_in, result_kept(result)).await?)
}

/// Records an attempt after which the effect is given up (`410`, a budget
/// spent): dead, no longer holding its ordering key. `false` when the
/// lease is not `owner`'s.
pub async fn mark_dead<E: Engine>(
    conn: &mut E::Connection,
    id: &EffectId,
    owner: &str,
    result: &str,
) -> Result<bool, OutboxError> {
    let owner = owner_checked(owner)?;
    Ok(E::mark_dead(conn, id.as_str(), owner, result_kept(result)).await?)
}

/// Up to `limit` effects in `state` after `after_seq` (0 for the first
/// page), in record order, for an operator: pending or dead (sent ones
/// are not listed).
pub async fn list<E: Engine>(
    conn: &mut E::Connection,
    state: EffectState,
    after_seq: u64,
    limit: u32,
) -> Result<Vec<Listed>, OutboxError> {
    if state == EffectState::Sent {
        return Err(OutboxError::invalid("state", "pending or dead"));
    }
    let rows = E::list_effects(conn, state.as_str(), after_seq, limit).await?;
    Ok(rows.into_iter().map(Listed::from).collect())
}

/// Brings dead effects back to pending, under the same id, due now and
/// with their attempts counted from zero: `id`'s, or every dead one. How
/// many came back.
pub async fn replay_dead<E: Engine>(
    conn: &mut E::Connection,
    id: Option<&EffectId>,
) -> Result<u64, OutboxError> {
    Ok(E::replay_dead(conn, id.map(EffectId::as_str)).await?)
}

/// How many effects are pending, and how old the oldest is (by the
/// server's clock; `None` when none is): what a relay reports as its
/// backlog.
pub async fn pending_summary<E: Engine>(
    conn: &mut E::Connection,
) -> Result<(u64, Option<Duration>), OutboxError> {
    let (count, oldest) = E::pending_summary(conn).await?;
    Ok((
        count,
        oldest.map(|s| Duration::try_from_secs_f64(s.max(0.0)).unwrap_or(Duration::ZERO)),
    ))
}

/// Whether a server of `engine` that reports `version` has `FOR UPDATE
/// SKIP LOCKED`: MySQL from 8.0.1, MariaDB from 10.6, PostgreSQL from 9.5.
/// Otherwise [`OutboxError::SkipLockedMissing`], naming the version needed.
pub fn skip_locked_support(engine: EngineKind, version: &str) -> Result<(), OutboxError> {
    let mariadb = version.to_ascii_lowercase().contains("mariadb");
    // MariaDB before 11 may prefix its version for old replication clients.
    let bare = match version.strip_prefix("5.5.5-") {
        Some(rest) if mariadb => rest,
        _ => version,
    };
    // PostgreSQL 10 and later have two numbers, the last one a patch.
    let numbers: Vec<u32> = bare
        .split(|c: char| !c.is_ascii_digit())
        .take_while(|part| !part.is_empty())
        .take(3)
        .map(|part| part.parse().unwrap_or(0))
        .collect();
    let number = (
        numbers.first().copied().unwrap_or(0),
        numbers.get(1).copied().unwrap_or(0),
        numbers.get(2).copied().unwrap_or(0),
    );
    let (has, needs) = match engine {
        EngineKind::Postgres => (number >= (9, 5, 0), "PostgreSQL 9.5 or later"),
        EngineKind::MySql if mariadb => (number >= (10, 6, 0), "MariaDB 10.6 or later"),
        EngineKind::MySql => (number >= (8, 0, 1), "MySQL 8.0.1 or later"),
    };
    if has {
        return Ok(());
    }
    Err(OutboxError::SkipLockedMissing {
        server: version
            .chars()
            .filter(|c| !c.is_control())
            .take(64)
            .collect(),
        needs,
    })
}

/// Asks the server its version and refuses one without `SKIP LOCKED`
/// ([`skip_locked_support`]): what a relay runs before it claims anything.
pub async fn check_skip_locked<E: Engine>(conn: &mut E::Connection) -> Result<(), OutboxError> {
    let (engine, version) = E::server_version(conn).await?;
    skip_locked_support(engine, &version)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_without_skip_locked_is_refused_naming_the_version_needed() {
        let refused = |engine, version: &str| {
            skip_locked_support(engine, version)
                .unwrap_err()
                .to_string()
        };
        assert!(refused(EngineKind::MySql, "5.7.44-log").contains("MySQL 8.0.1 or later"));
        // 8.0.0 was a development release, before SKIP LOCKED.
        assert!(refused(EngineKind::MySql, "8.0.0-dmr").contains("MySQL 8.0.1 or later"));
        assert!(skip_locked_support(EngineKind::MySql, "8.0.1-dmr").is_ok());
        assert!(refused(EngineKind::MySql, "10.5.23-MariaDB-0+deb11u1")
            .contains("MariaDB 10.6 or later"));
        assert!(refused(EngineKind::MySql, "5.5.5-10.4.1-MariaDB").contains("MariaDB 10.6"));
        assert!(skip_locked_support(EngineKind::MySql, "5.5.5-10.6.4-MariaDB").is_ok());
        assert!(refused(EngineKind::Postgres, "9.4.26").contains("PostgreSQL 9.5"));
        assert!(refused(EngineKind::MySql, "").contains("MySQL 8.0.1"));
        assert!(refused(EngineKind::Postgres, "9.4").contains("PostgreSQL 9.5"));
        for (engine, version) in [
            (EngineKind::MySql, "8.0.36"),
            (EngineKind::MySql, "8.4.3"),
            (EngineKind::MySql, "10.6.0-MariaDB"),
            (EngineKind::MySql, "10.11.6-MariaDB-0+deb12u1"),
            (EngineKind::MySql, "11.4.2-MariaDB"),
            (EngineKind::Postgres, "15.4 (Debian 15.4-1.pgdg120+1)"),
            (EngineKind::Postgres, "9.5.0"),
            (EngineKind::Postgres, "10.23"),
        ] {
            assert!(skip_locked_support(engine, version).is_ok(), "{version}");
        }
    }

    #[test]
    fn the_last_result_is_cut_at_128_characters_on_a_character() {
        let long = "é".repeat(200);
        assert_eq!(result_kept(&long).chars().count(), 128);
        assert_eq!(result_kept("503"), "503");
    }
}
