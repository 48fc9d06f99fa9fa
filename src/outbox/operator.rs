//! What `receiver outbox` reads and changes, on the engine an address
//! names: the effects an operator acts on (pending and dead, never the
//! sent ones, never a body) and the replay of dead ones under their own
//! ids. Functions that return data, which the binary prints.

use super::claim::{list, replay_dead, EffectState, Listed};
use super::error::OutboxError;
use super::id::EffectId;
use crate::db::any::{on_engine, AnyConnection};
use crate::db::{Dsn, Engine};

/// Rows read per page.
const PAGE_ROWS: u32 = 1_000;

/// Every pending effect, then every dead one, each in record order.
pub async fn effects(dsn: &Dsn) -> Result<Vec<Listed>, OutboxError> {
    let mut conn = AnyConnection::open(dsn).await?;
    let listed = on_engine!(&mut conn, c => effects_on::<E>(c).await);
    conn.close().await;
    listed
}

async fn effects_on<E: Engine>(conn: &mut E::Connection) -> Result<Vec<Listed>, OutboxError> {
    let mut all = Vec::new();
    for state in [EffectState::Pending, EffectState::Dead] {
        all.extend(all_in::<E>(conn, state).await?);
    }
    Ok(all)
}

/// Every effect in `state`, page by page.
async fn all_in<E: Engine>(
    conn: &mut E::Connection,
    state: EffectState,
) -> Result<Vec<Listed>, OutboxError> {
    let mut all: Vec<Listed> = Vec::new();
    loop {
        let after = all.last().map_or(0, |l| l.seq);
        let page = list::<E>(&mut *conn, state, after, PAGE_ROWS).await?;
        let full = page.len() == PAGE_ROWS as usize;
        all.extend(page);
        if !full {
            return Ok(all);
        }
    }
}

/// What a replay found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Replayed {
    /// The dead effects it was asked to bring back, as they were listed
    /// before (none when `effect` named no dead effect).
    pub dead: Vec<Listed>,
    /// How many came back to pending (0 for a dry run).
    pub replayed: u64,
}

/// Brings `effect` back to pending under the same id, or every dead effect
/// when `effect` is `None`; with `dry_run`, only lists what it would bring
/// back. An effect that is pending or sent is never touched.
pub async fn replay(
    dsn: &Dsn,
    effect: Option<&EffectId>,
    dry_run: bool,
) -> Result<Replayed, OutboxError> {
    let mut conn = AnyConnection::open(dsn).await?;
    let replayed = on_engine!(&mut conn, c => replay_on::<E>(c, effect, dry_run).await);
    conn.close().await;
    replayed
}

async fn replay_on<E: Engine>(
    conn: &mut E::Connection,
    effect: Option<&EffectId>,
    dry_run: bool,
) -> Result<Replayed, OutboxError> {
    let dead: Vec<Listed> = all_in::<E>(&mut *conn, EffectState::Dead)
        .await?
        .into_iter()
        .filter(|l| effect.is_none_or(|id| l.id == id.as_str()))
        .collect();
    let replayed = if dry_run || dead.is_empty() {
        0
    } else {
        replay_dead::<E>(conn, effect).await?
    };
    Ok(Replayed { dead, replayed })
}
