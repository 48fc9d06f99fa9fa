//! `receiver prune`: retention of the inbox without a second effect.
//!
//! The inbox row of an event is what makes a redelivery a duplicate, so a
//! row may go only when no copy of its event can come back and do harm.
//! Prune deletes the rows of one scope (receiver name and queue) received
//! before a window that has to cover the source's redeliveries, added
//! budgets and backup restores ([`Plan`] refuses a window below its
//! minimum retention), and keeps, whatever their age:
//!
//! * the row of each view's `last_event_id`: a redelivery of the latest
//!   event stays an exact duplicate, and an older event whose row is gone
//!   comes back below the view's version, stale, never applied again;
//! * a row whose stored text is not a readable event: `receiver verify`
//!   reports it, and prune does not delete evidence;
//! * where `receiver_outbox` is there, a row whose event still has effects
//!   in it: pending or dead ones (never deleted: still to be sent, or
//!   waiting for a replay), or sent ones recorded within the window. An
//!   effect never outlives its event's inbox row, so `receiver verify`
//!   finds no orphan after a prune.
//!
//! Before the inbox rows it deletes the scope's sent effects recorded
//! before the window, in batches of their own (`effects.rs`), so that their
//! events' rows can go in the same run.
//!
//! It works in batches by primary key, each its own short `READ
//! COMMITTED` transaction, with a pause between them that grows with the
//! time a batch took (so a prune yields more to a busy server): the rows of
//! a batch are found without locks, then read again by their keys (never a
//! range, so a consumer inserting new rows never waits on it; MySQL locks
//! them there, PostgreSQL's `DELETE` locks and checks each one), deleted,
//! handed to the [`Archive`] (which returns once they are durable) and
//! counted per task in `receiver_pruned`, in that order, before one COMMIT:
//! the archive and the tally hold exactly the rows the `DELETE` took. A
//! crash can leave rows archived twice, never a row deleted and not
//! archived, nor a count without its DELETE.
//!
//! The account needs, on either engine, `SELECT` and `DELETE` on
//! `receiver_inbox`, `SELECT` on `receiver_task_views`, `SELECT`,
//! `INSERT`, `UPDATE` on `receiver_pruned`, and, where `receiver_outbox`
//! is there, `SELECT` and `DELETE` on it ([`check_privileges`]); the
//! runtime account never gets `DELETE`.

mod archive;
mod effects;
mod error;
mod plan;
mod privileges;
mod run;

pub use self::archive::{Archive, PrunedRow};
pub use self::error::PruneError;
pub use self::plan::{
    Plan, DEFAULT_BATCH_BYTES, DEFAULT_BATCH_ROWS, DEFAULT_MINIMUM_RETENTION, DEFAULT_PAUSE,
    DEFAULT_PAUSE_FACTOR,
};
pub use self::privileges::{check, check_privileges, OUTBOX_PRIVILEGES, PRIVILEGES};
pub use self::run::{count, run, Count, Report, Summary};
