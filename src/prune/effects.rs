//! The outbox's part of a prune: the scope's **sent** effects recorded
//! before the window, deleted in batches before any inbox row. Never a
//! pending or a dead one: those are still to be sent, or waiting for an
//! operator's replay, and they keep their event's inbox row (see
//! `locked_batch`), so that no effect ever belongs to an event the inbox
//! does not hold (what `receiver verify` checks).
//!
//! A sent effect is final: no relay claims or writes it again. Its batch
//! finds the ids without locks, then deletes them by primary key, each
//! checked again (still the scope's, still sent, still past the window),
//! in one short transaction. The effects are not archived: what they said
//! was sent, and the event that made them is in the inbox's archive when
//! its row goes.

use std::time::Instant;

use tokio_util::sync::CancellationToken;

use super::run::{pause_after, Retry};
use super::{Plan, PruneError, Summary};
use crate::db::{Dsn, Engine};

/// Deletes the scope's sent effects recorded before `cutoff`, batch after
/// batch (at most `batch_rows` effects and `batch_bytes` of body and
/// headers each, a pause after each), until none is left or `stop` is
/// cancelled; counts them in `summary`.
pub(super) async fn prune_sent<E: Engine>(
    conn: &mut E::Connection,
    dsn: &Dsn,
    plan: &Plan,
    cutoff: &str,
    stop: &CancellationToken,
    summary: &mut Summary,
) -> Result<(), PruneError> {
    let mut after = String::new();
    loop {
        if stop.is_cancelled() {
            summary.stopped = true;
            return Ok(());
        }
        let found =
            E::sent_effects(&mut *conn, &plan.scope, cutoff, &after, plan.batch_rows).await?;
        let ids = within_bytes(found, plan.batch_bytes);
        let Some(last) = ids.last() else {
            return Ok(());
        };
        after = last.clone();
        let mut retry = Retry::new();
        let started = Instant::now();
        let deleted = loop {
            match batch::<E>(&mut *conn, plan, cutoff, &ids).await {
                Ok(deleted) => break deleted,
                Err(e) => {
                    if !retry.again::<E>(e, &mut *conn, dsn, stop, summary).await? {
                        return Ok(());
                    }
                }
            }
        };
        summary.effects_deleted += deleted;
        summary.batches += u64::from(deleted > 0);
        pause_after(plan, started, stop).await;
    }
}

/// The ids of `found`, in order, cut where their bytes pass `limit` (at
/// least one).
fn within_bytes(found: Vec<(String, u64)>, limit: u64) -> Vec<String> {
    let mut bytes = 0u64;
    let mut ids = Vec::with_capacity(found.len());
    for (id, size) in found {
        bytes = bytes.saturating_add(size);
        if !ids.is_empty() && bytes > limit {
            break;
        }
        ids.push(id);
    }
    ids
}

/// One batch of effects in one transaction; rolled back on any error.
async fn batch<E: Engine>(
    conn: &mut E::Connection,
    plan: &Plan,
    cutoff: &str,
    ids: &[String],
) -> Result<u64, PruneError> {
    E::begin_batch(&mut *conn).await?;
    match E::delete_effects(&mut *conn, &plan.scope, cutoff, ids).await {
        Ok(deleted) => {
            E::end_batch(conn, deleted > 0).await?;
            Ok(deleted)
        }
        Err(e) => {
            let _ = E::end_batch(conn, false).await;
            Err(e.into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(sizes: &[u64]) -> Vec<(String, u64)> {
        sizes
            .iter()
            .enumerate()
            .map(|(i, s)| (format!("{i:032x}"), *s))
            .collect()
    }

    #[test]
    fn a_batch_of_effects_stops_where_their_bytes_pass_the_limit_and_holds_at_least_one() {
        assert_eq!(within_bytes(found(&[10, 10, 10]), 25).len(), 2);
        assert_eq!(within_bytes(found(&[10, 10, 10]), 30).len(), 3);
        assert_eq!(within_bytes(found(&[100, 1]), 25).len(), 1);
        assert!(within_bytes(Vec::new(), 25).is_empty());
    }
}
