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
//!   reports it, and prune does not delete evidence.
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
//! `receiver_inbox`, `SELECT` on `receiver_task_views` and `SELECT`,
//! `INSERT`, `UPDATE` on `receiver_pruned` ([`check_privileges`]); the
//! runtime account never gets `DELETE`.

mod archive;
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
pub use self::privileges::{check, check_privileges, PRIVILEGES};
pub use self::run::{count, run, Count, Report, Summary};
