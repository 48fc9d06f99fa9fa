//! Recording an effect in the inbox's transaction.

use std::collections::HashSet;

use bytes::Bytes;

use super::effect::Effect;
use super::error::OutboxError;
use super::id::EffectId;
use crate::db::record::NewEffectRow;
use crate::db::Engine;
use crate::delivery::TraceContext;
use crate::ids::EventId;
use crate::scope::InboxScope;

/// The effects one delivery's transaction has recorded so far: a second
/// effect with one key is refused before any statement.
#[derive(Debug, Default)]
pub(crate) struct Recorded(HashSet<EffectId>);

/// Records effects in the transaction the inbox lent, for the event it is
/// applying: what [`Applying::outbox`](crate::inbox::Applying::outbox)
/// returns.
///
/// Each [`record`](Self::record) writes the effect's row at once, on the
/// transaction's connection, as `pending`: it commits with the delivery
/// or not at all. [`record_all`](Self::record_all) writes several in one
/// statement. The row carries the inbox identity (receiver name,
/// queue, event), the derived [`EffectId`], and the `traceparent` the
/// delivery came with, if any.
pub struct Recorder<'a, E: Engine> {
    conn: &'a mut E::Connection,
    scope: &'a InboxScope,
    event: &'a EventId,
    trace: Option<&'a TraceContext>,
    recorded: &'a mut Recorded,
}

impl<E: Engine> std::fmt::Debug for Recorder<'_, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("scope", self.scope)
            .field("event", self.event)
            .finish_non_exhaustive()
    }
}

impl<'a, E: Engine> Recorder<'a, E> {
    /// A recorder on the lent connection, for `event` in `scope`.
    pub(crate) fn new(
        conn: &'a mut E::Connection,
        scope: &'a InboxScope,
        event: &'a EventId,
        trace: Option<&'a TraceContext>,
        recorded: &'a mut Recorded,
    ) -> Self {
        Self {
            conn,
            scope,
            event,
            trace,
            recorded,
        }
    }

    /// Records `body` for `target` under `key`, with no headers and the
    /// key as its ordering key: its id, or why not. A second effect with
    /// one key and target for this event is
    /// [`OutboxError::DuplicateEffect`], and writes nothing.
    pub async fn record(
        &mut self,
        target: &str,
        key: &str,
        body: impl Into<Bytes>,
    ) -> Result<EffectId, OutboxError> {
        self.record_effect(Effect::new(target, key, body)?).await
    }

    /// Records `effect` (with its headers and ordering key): its id.
    pub async fn record_effect(&mut self, effect: Effect) -> Result<EffectId, OutboxError> {
        let mut ids = self.record_all([effect]).await?;
        Ok(ids.remove(0))
    }

    /// Records every effect of `effects`, in their order, in one statement
    /// (one round trip however many there are): their ids, or why not,
    /// and then none of them is written. Two with one key and target, or
    /// one recorded before (in this transaction, or committed by an
    /// earlier application of this event) is
    /// [`OutboxError::DuplicateEffect`] naming the first such. No effects
    /// write nothing.
    pub async fn record_all(
        &mut self,
        effects: impl IntoIterator<Item = Effect>,
    ) -> Result<Vec<EffectId>, OutboxError> {
        let effects: Vec<Effect> = effects.into_iter().collect();
        let ids: Vec<EffectId> = effects.iter().map(|e| self.effect_id(e)).collect();
        let duplicate = |i: usize| OutboxError::DuplicateEffect {
            effect_id: ids[i].clone(),
            target: effects[i].target().as_str().to_owned(),
        };
        for (i, id) in ids.iter().enumerate() {
            if self.recorded.0.contains(id) || ids[..i].contains(id) {
                return Err(duplicate(i));
            }
        }
        if effects.is_empty() {
            return Ok(ids);
        }
        let headers: Vec<String> = effects.iter().map(|e| e.headers().to_json()).collect();
        let traceparent = self
            .trace
            .map(TraceContext::traceparent)
            .filter(|t| t.len() <= 255);
        let rows: Vec<NewEffectRow<'_>> = effects
            .iter()
            .zip(&ids)
            .zip(&headers)
            .map(|((effect, id), headers)| NewEffectRow {
                effect_id: id.as_str(),
                consumer: self.scope.receiver.as_str(),
                queue: self.scope.queue_id.as_str(),
                event: self.event.as_str(),
                target: effect.target().as_str(),
                key: effect.key().as_str(),
                ordering_key: effect.ordering_key().as_str(),
                body: effect.body(),
                headers,
                traceparent,
            })
            .collect();
        // `Some`: that key is there already, committed by an earlier
        // application of this event.
        if let Some(i) = E::record_effects(&mut *self.conn, &rows).await? {
            return Err(duplicate(i));
        }
        self.recorded.0.extend(ids.iter().cloned());
        Ok(ids)
    }

    /// The id `effect` has (or would have) when recorded here.
    pub fn effect_id(&self, effect: &Effect) -> EffectId {
        EffectId::derive(self.scope, self.event, effect.target(), effect.key())
    }
}
