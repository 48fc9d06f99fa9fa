//! Connections handed from one inbox transaction straight to the next.
//!
//! sqlx pings every connection that goes back to its pool before anyone
//! may take it again, to catch one that a cancelled future left in the
//! middle of a statement. An [`InboxTx`](super::tx::InboxTx) lets go of a
//! connection only after the server answered its COMMIT or ROLLBACK (every
//! other end closes it), so that ping can find nothing; yet it is a fourth
//! round trip on every applied delivery, which needs three (INSERT, the
//! view's UPDATE, COMMIT). Such a connection waits on the shelf for the
//! next transaction instead.
//!
//! The pool still sees every connection regularly: one that rested on the
//! shelf longer than [`REST`], or that has gone from transaction to
//! transaction for [`ROUND`] since it last came from the pool, goes back
//! through the pool — its ping, its idle time-out, its lifetime — when the
//! next transaction begins. A connection error clears the shelf: after a
//! server restart the shelved connections are as dead as the one that
//! failed.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use sqlx::pool::PoolConnection;
use sqlx::Pool;
use tokio::sync::Notify;

/// Longest a connection waits on the shelf before it goes back to the pool.
const REST: Duration = Duration::from_secs(2);
/// Longest a connection goes from transaction to transaction without
/// passing through the pool.
const ROUND: Duration = Duration::from_secs(60);

use crate::db::Engine;

/// The pool, and the connections ready for the next transaction.
#[derive(Debug)]
pub(crate) struct Shelf<E: Engine> {
    pool: Pool<E>,
    ready: Mutex<Vec<Ready<E>>>,
    /// Wakes a transaction waiting for the pool when a connection is
    /// shelved instead: with every connection lent out, the pool would not
    /// see it.
    shelved: Notify,
}

#[derive(Debug)]
struct Ready<E: Engine> {
    conn: PoolConnection<E>,
    since: Instant,
    lent: Lent,
}

/// When a connection last came from the pool.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Lent(Instant);

impl<E: Engine> Shelf<E> {
    pub(crate) fn new(pool: Pool<E>) -> Self {
        Self {
            pool,
            ready: Mutex::new(Vec::new()),
            shelved: Notify::new(),
        }
    }

    pub(crate) fn pool(&self) -> &Pool<E> {
        &self.pool
    }

    /// The connection shelved last, or one from the pool, whichever comes
    /// first.
    pub(crate) async fn acquire(&self) -> Result<(PoolConnection<E>, Lent), sqlx::Error> {
        loop {
            // Listening before looking: a connection shelved in between
            // still wakes this transaction.
            let shelved = self.shelved.notified();
            tokio::pin!(shelved);
            shelved.as_mut().enable();
            if let Some(ready) = self.take() {
                return Ok((ready.conn, ready.lent));
            }
            tokio::select! {
                () = &mut shelved => {}
                conn = self.pool.acquire() => return Ok((conn?, Lent(Instant::now()))),
            }
        }
    }

    /// Keeps `conn`, whose last transaction the server confirmed ended, for
    /// the next transaction.
    pub(crate) fn put(&self, conn: PoolConnection<E>, lent: Lent) {
        self.lock().push(Ready {
            conn,
            since: Instant::now(),
            lent,
        });
        self.shelved.notify_one();
    }

    /// Gives every shelved connection back to the pool, which pings it and
    /// closes it if it is dead.
    pub(crate) fn clear(&self) {
        let all = std::mem::take(&mut *self.lock());
        drop(all);
    }

    fn take(&self) -> Option<Ready<E>> {
        let now = Instant::now();
        let mut ready = self.lock();
        let due = |r: &Ready<E>| {
            now.saturating_duration_since(r.since) > REST
                || now.saturating_duration_since(r.lent.0) > ROUND
        };
        let (back, keep): (Vec<_>, Vec<_>) = ready.drain(..).partition(due);
        *ready = keep;
        let next = ready.pop();
        drop(ready);
        // Dropped outside the lock: each goes back through the pool.
        drop(back);
        next
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Ready<E>>> {
        // Nothing panics while holding it; a poisoned list is still a list.
        self.ready.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<E: Engine> Drop for Shelf<E> {
    fn drop(&mut self) {
        // A pooled connection dropped normally is returned by a task on the
        // runtime; without one, close the socket here instead.
        if tokio::runtime::Handle::try_current().is_err() {
            for ready in self.lock().drain(..) {
                drop(ready.conn.detach());
            }
        }
    }
}
