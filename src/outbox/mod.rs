//! The outbox: effects beyond the database (a webhook, a message to the
//! next service), recorded in the inbox's transaction and sent after its
//! COMMIT, never while it holds locks.
//!
//! An inner service records an effect through what the inbox lends it,
//! [`Applying::outbox`](crate::inbox::Applying::outbox): a [`Recorder`]
//! that writes the effect's row in `receiver_outbox` at once, on the
//! transaction's own connection. The row shares the delivery's outcome: a
//! refused or rolled-back delivery leaves no effect, a duplicate delivery
//! never reaches the inner service and records nothing, and in batching
//! mode a refused sibling's savepoint takes its effects with it.
//!
//! Each effect has a stable id ([`EffectId::derive`]): the inbox identity
//! it came from, its target and its key, hashed, so that applying an event
//! again can never make a second id for the same effect. Its ordering key
//! (by default its key) orders it among its target's effects.
//!
//! What a relay asks of the table — claiming due effects under a lease
//! with `FOR UPDATE SKIP LOCKED`, one at the head of each ordering key,
//! and recording what became of each — is in [`claim`]. This module sends
//! no statement of its own: the engine's are in `db/<engine>/outbox.rs`.
//! `docs/outbox.md` says what exists and how to set it up.
//!
//! | File | What it is |
//! |---|---|
//! | `effect.rs` | [`Effect`], [`Target`], [`EffectKey`], [`Headers`]: what an effect is, checked before any statement. |
//! | `id.rs` | [`EffectId`] and its derivation (frozen, with golden vectors). |
//! | `record.rs` | [`Recorder`]: the row written in the inbox's transaction. |
//! | `claim.rs` | The relay's statements: [`claim`], [`mark_sent`], [`mark_failed`], [`mark_dead`], [`list`], [`pending_summary`], [`replay_dead`], [`check_skip_locked`]. |
//! | `operator.rs` | What `receiver outbox` lists and replays, on the engine an address names: [`effects`], [`replay`], [`Replayed`]. |
//! | `error.rs` | [`OutboxError`]. |

mod claim;
mod effect;
mod error;
mod id;
mod operator;
mod record;

pub use self::claim::{
    check_skip_locked, claim, list, mark_dead, mark_failed, mark_sent, pending_summary,
    replay_dead, skip_locked_support, Claimed, EffectState, Listed,
};
pub use self::effect::{
    Effect, EffectKey, Headers, Target, MAX_BODY_BYTES, MAX_HEADERS_BYTES, MAX_KEY_BYTES,
    MAX_TARGET_BYTES,
};
pub use self::error::OutboxError;
pub use self::id::EffectId;
pub use self::operator::{effects, replay, Replayed};
pub(crate) use self::record::Recorded;
pub use self::record::Recorder;
