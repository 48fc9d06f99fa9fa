//! The inbox's transaction, opened by the statement that inserts the inbox
//! row.
//!
//! The store's connections run with `autocommit` off (set once per
//! connection, see `store.rs`), so the inbox `INSERT` itself opens the
//! transaction: no `BEGIN` round trip, no statement the server must parse
//! on every delivery, and the insert goes as a prepared statement. The price
//! is that sqlx does not know about this transaction, so this type keeps the
//! one promise sqlx's `Transaction` would: a connection never goes back to
//! the pool with a transaction still open. Whenever the end of the
//! transaction is not confirmed (an error, a dropped future, a time-out),
//! the connection is closed instead of returned, and the server rolls back
//! what it had.

use std::fmt;
use std::sync::Arc;

use sqlx::pool::PoolConnection;
use tokio::sync::oneshot;

use super::error::InboxError;
use super::shelf::{Lent, Shelf};
use crate::db::{DbError, Engine};
use crate::digest::Digest;
use crate::event::Event;
use crate::ids::EventId;
use crate::scope::InboxScope;

/// An open transaction on a pooled connection.
pub(crate) struct InboxTx<E: Engine> {
    /// Always there until the transaction is dropped.
    conn: Option<PoolConnection<E>>,
    lent: Lent,
    shelf: Arc<Shelf<E>>,
    /// Whether the transaction may still be open on the server.
    open: bool,
    /// Where the transaction goes when dropped while lent to an inner
    /// service of a batch: back to the batch, which still has its siblings
    /// to commit (see [`lend`](Self::lend)).
    home: Option<oneshot::Sender<InboxTx<E>>>,
}

/// What the statement that inserts an inbox row found, the transaction
/// still open either way.
pub(crate) enum Row {
    /// The row is inserted.
    Inserted,
    /// The row exists (MySQL 1062), with this digest and `applied` flag:
    /// committed before, or inserted earlier in this transaction.
    Duplicate { digest: Digest, applied: bool },
}

/// The stored digest and `applied` flag of an event's inbox row in
/// `scope`, if it has one: what decides between a duplicate and a conflict.
pub(crate) async fn committed_row<E: Engine>(
    conn: &mut E::Connection,
    scope: &InboxScope,
    event: &EventId,
) -> Result<Option<(Digest, bool)>, InboxError> {
    E::committed_row(conn, scope, event)
        .await
        .map_err(InboxError::Database)
}

fn inconsistent() -> InboxError {
    InboxError::Database(DbError::inconsistent())
}

impl<E: Engine> InboxTx<E> {
    /// A connection from `shelf` whose next statement starts a transaction.
    /// Whatever runs on it must end with [`commit`](Self::commit) or
    /// [`rollback`](Self::rollback), or the connection is closed; after
    /// either, it goes back on the shelf.
    pub(crate) async fn acquire(shelf: &Arc<Shelf<E>>) -> Result<InboxTx<E>, sqlx::Error> {
        let (conn, lent) = shelf.acquire().await?;
        Ok(InboxTx {
            conn: Some(conn),
            lent,
            shelf: shelf.clone(),
            // From here on, assume the worst until the server says otherwise.
            open: true,
            home: None,
        })
    }

    /// The transaction for an inner service, and where it comes back when
    /// the service drops it (by failing) instead of handing it back in its
    /// verdict: a batch goes on with its other deliveries after a failed
    /// one.
    pub(crate) fn lend(mut self) -> (InboxTx<E>, oneshot::Receiver<InboxTx<E>>) {
        let (home, back) = oneshot::channel();
        self.home = Some(home);
        (self, back)
    }

    /// A lent transaction that came back in a verdict: no longer lent.
    pub(crate) fn keep(mut self) -> InboxTx<E> {
        self.home = None;
        self
    }

    /// The plain `INSERT` of `event`'s inbox row, in whatever transaction
    /// is open (or opening one). Only error 1062 is read back, in this
    /// transaction: a committed row (an uncommitted one of another
    /// transaction would have made the insert wait for its lock), or one
    /// this transaction inserted. A duplicate key without a readable row
    /// (deleted meanwhile by a prune, or damaged) is an inconsistency: the
    /// delivery fails unacknowledged and its next attempt reads again.
    pub(crate) async fn insert_row(
        &mut self,
        scope: &InboxScope,
        event: &Event,
    ) -> Result<Row, InboxError> {
        match self.insert_one(scope, event).await {
            Ok(true) => Ok(Row::Inserted),
            Ok(false) => {
                let (digest, applied) = committed_row::<E>(self.connection(), scope, event.id())
                    .await?
                    .ok_or_else(inconsistent)?;
                Ok(Row::Duplicate { digest, applied })
            }
            Err(e) => Err(e.into()),
        }
    }

    /// One multi-row `INSERT` of every event's inbox row, all written as
    /// applied. `false` when one of them exists (MySQL 1062): the statement
    /// wrote nothing, and the caller takes the events one at a time.
    pub(crate) async fn insert_all(
        &mut self,
        scope: &InboxScope,
        events: &[&Event],
    ) -> Result<bool, sqlx::Error> {
        E::insert_all(self.connection(), scope, events).await
    }

    /// The inbox row of one event that an inner service may be lent the
    /// transaction for: when it opens the transaction, sqlx knows the
    /// transaction from this first statement (see
    /// [`open_for_lending`](Self::open_for_lending)).
    async fn insert_one(&mut self, scope: &InboxScope, event: &Event) -> Result<bool, sqlx::Error> {
        E::insert_one(self.connection(), scope, event).await
    }

    /// `BEGIN`, through sqlx, for a transaction whose first statement is
    /// not the inbox's (a [`Session`](super::Session)).
    pub(crate) async fn begin(&mut self) -> Result<(), sqlx::Error> {
        E::begin(self.connection()).await
    }

    /// Makes the open transaction sqlx's own before an inner service gets
    /// the connection, so that what sqlx users do by habit stays inside
    /// it: `begin()` on the lent connection sends `SAVEPOINT` (a `BEGIN`
    /// would make MySQL commit the inbox row), the nested transaction's
    /// `commit()` releases that savepoint and dropping it rolls back to
    /// it. The single-row INSERT that opens a transaction already made it
    /// sqlx's ([`insert_one`](Self::insert_one)), so this sends nothing on
    /// the inbox's paths.
    pub(crate) async fn open_for_lending(&mut self) -> Result<(), sqlx::Error> {
        E::adopt(self.connection()).await
    }

    /// Rolls back the nested transactions an inner service left open
    /// (only `mem::forget` can leave one: a dropped one rolls back by
    /// itself), so that the inbox's next statement runs in its own
    /// transaction, not in a savepoint that a later rollback would undo.
    pub(crate) async fn close_nested(&mut self) -> Result<(), sqlx::Error> {
        E::close_nested(self.connection()).await
    }

    /// Marks a savepoint: what follows can be undone alone.
    pub(crate) async fn savepoint(&mut self) -> Result<(), sqlx::Error> {
        self.close_nested().await?;
        E::savepoint(self.connection()).await
    }

    /// Undoes everything since the last [`savepoint`](Self::savepoint).
    pub(crate) async fn rollback_to_savepoint(&mut self) -> Result<(), sqlx::Error> {
        self.close_nested().await?;
        E::rollback_to_savepoint(self.connection()).await
    }

    /// `ROLLBACK`, keeping the connection for the next transaction, which
    /// the next statement opens.
    pub(crate) async fn rollback_all(&mut self) -> Result<(), sqlx::Error> {
        self.end(End::Rollback).await
    }

    /// `COMMIT` or `ROLLBACK` of the whole transaction, nested ones first.
    async fn end(&mut self, end: End) -> Result<(), sqlx::Error> {
        self.close_nested().await?;
        E::end(self.connection(), matches!(end, End::Commit)).await
    }

    /// The connection, as an executor for the statements of the transaction.
    pub(crate) fn connection(&mut self) -> &mut E::Connection {
        self.conn
            .as_mut()
            .expect("a transaction has its connection until it is dropped")
    }

    /// `COMMIT`. An error leaves the outcome to the caller's judgement (see
    /// `error::commit_error`); the connection is then closed, not reused.
    pub(crate) async fn commit(mut self) -> Result<(), sqlx::Error> {
        self.end(End::Commit).await?;
        self.open = false;
        Ok(())
    }

    /// `ROLLBACK`.
    pub(crate) async fn rollback(mut self) -> Result<(), sqlx::Error> {
        self.end(End::Rollback).await?;
        self.open = false;
        Ok(())
    }

    /// Puts the connection back without ending a transaction, after
    /// statements that open none (the engine's `ping` and `settings`,
    /// which read no table: with autocommit off MySQL opens a transaction
    /// only with one, PostgreSQL never without `BEGIN`). A `ROLLBACK`
    /// there would be a round trip for nothing, which PostgreSQL answers
    /// with a warning (`there is no transaction in progress`).
    pub(crate) fn release(mut self) {
        self.open = false;
    }
}

#[derive(Clone, Copy)]
enum End {
    Commit,
    Rollback,
}

impl<E: Engine> Drop for InboxTx<E> {
    fn drop(&mut self) {
        let Some(mut conn) = self.conn.take() else {
            return;
        };
        if let Some(home) = self.home.take() {
            let back = InboxTx {
                conn: Some(conn),
                lent: self.lent,
                shelf: self.shelf.clone(),
                open: self.open,
                home: None,
            };
            // A batch that stopped waiting drops it here, which closes or
            // shelves it as below.
            let _ = home.send(back);
            return;
        }
        if self.open {
            // Closing the connection makes the server roll back; returning it
            // could hand an open transaction (and its locks) to the next user.
            conn.close_on_drop();
        } else {
            self.shelf.put(conn, self.lent);
        }
    }
}

impl<E: Engine> fmt::Debug for InboxTx<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InboxTx")
            .field("open", &self.open)
            .finish_non_exhaustive()
    }
}
