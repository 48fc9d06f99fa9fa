//! What can go wrong when an effect is recorded, or when a relay asks the
//! table for work.

use crate::db::DbError;

/// Why the outbox did not do what was asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OutboxError {
    /// A target, key, ordering key, header or body that can never be
    /// recorded; nothing was sent to the server.
    #[error("invalid {what}: expected {expected}")]
    Invalid {
        /// What was wrong: `target`, `key`, `ordering key`, `header name`,
        /// `header value`, `headers`, `body`.
        what: &'static str,
        /// What it must be.
        expected: &'static str,
    },
    /// An effect with this key for this target was recorded already for
    /// the same event: in this delivery, or by a transaction that
    /// committed it before. Never a second row; the same on every
    /// redelivery, so not retryable.
    #[error("effect {effect_id} for target {target} was recorded already for this event (one effect per key, target and event)")]
    DuplicateEffect {
        /// The effect's id.
        effect_id: super::EffectId,
        /// Its target.
        target: String,
    },
    /// The server cannot claim effects without waiting on the rows other
    /// relays hold: it lacks `FOR UPDATE SKIP LOCKED`.
    #[error("the database server ({server}) lacks FOR UPDATE SKIP LOCKED, which the outbox's relay needs: {needs}")]
    SkipLockedMissing {
        /// The server's version string.
        server: String,
        /// The versions that have it.
        needs: &'static str,
    },
    /// The server refused or could not be reached; redacted.
    #[error("outbox: {0}")]
    Database(#[source] DbError),
}

impl OutboxError {
    pub(super) fn invalid(what: &'static str, expected: &'static str) -> Self {
        OutboxError::Invalid { what, expected }
    }

    /// Whether trying again may succeed: only for the database's errors
    /// that are not a refusal (a lost connection, a deadlock). A bad
    /// effect, a second effect with one key and a server without `SKIP
    /// LOCKED` fail the same way every time.
    pub fn is_retryable(&self) -> bool {
        match self {
            OutboxError::Database(e) => !e.is_refusal(),
            _ => false,
        }
    }
}

impl From<DbError> for OutboxError {
    fn from(e: DbError) -> Self {
        OutboxError::Database(e)
    }
}

impl From<sqlx::Error> for OutboxError {
    fn from(e: sqlx::Error) -> Self {
        OutboxError::Database(DbError::from(e))
    }
}
