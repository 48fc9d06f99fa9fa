//! The inbox's transaction, opened by the round trip that inserts the inbox
//! row.
//!
//! `BEGIN` and the inbox `INSERT` travel as one multi-statement text query:
//! a round trip saved on every delivery. The price is that sqlx does not
//! know about this transaction, so this type keeps the one promise sqlx's
//! `Transaction` would: a connection never goes back to the pool with the
//! transaction still open. Whenever the end of the transaction is not
//! confirmed (an error, a dropped future, a time-out), the connection is
//! closed instead of returned, and the server rolls back what it had.

use std::fmt;

use sqlx::mysql::{MySql, MySqlConnection, MySqlPool};
use sqlx::pool::PoolConnection;
use sqlx::Executor;

use super::error;
use super::store;
use crate::event::Event;
use crate::scope::InboxScope;

/// An open transaction on a pooled connection.
pub(crate) struct InboxTx {
    conn: PoolConnection<MySql>,
    /// Whether the transaction may still be open on the server.
    open: bool,
}

/// How the first round trip ended.
pub(crate) enum Begun {
    /// The inbox row is inserted; the transaction is open.
    Inserted(InboxTx),
    /// The row exists (MySQL 1062): this event was committed before. The
    /// transaction was rolled back.
    Duplicate,
}

impl InboxTx {
    /// `BEGIN` and the plain `INSERT` of `event`'s inbox row, in one round
    /// trip. Only error 1062 becomes [`Begun::Duplicate`]; any other error
    /// is returned, with the transaction rolled back or the connection
    /// closed.
    pub(crate) async fn begin_with_insert(
        pool: &MySqlPool,
        scope: &InboxScope,
        event: &Event,
    ) -> Result<Begun, sqlx::Error> {
        let mut tx = InboxTx {
            conn: pool.acquire().await?,
            // From here on, assume the worst until the server says otherwise.
            open: true,
        };
        let sql = format!("BEGIN; {}", store::insert_event_sql(scope, event));
        match tx.conn.execute(sqlx::raw_sql(&sql)).await {
            Ok(_) => Ok(Begun::Inserted(tx)),
            Err(e) if error::is_duplicate_key(&e) => {
                tx.rollback().await?;
                Ok(Begun::Duplicate)
            }
            Err(e) => {
                // The BEGIN may have run; end it before giving up.
                let _ = tx.rollback().await;
                Err(e)
            }
        }
    }

    /// The connection, as an executor for the statements of the transaction.
    pub(crate) fn connection(&mut self) -> &mut MySqlConnection {
        &mut self.conn
    }

    /// `COMMIT`. An error leaves the outcome to the caller's judgement (see
    /// `error::commit_error`); the connection is then closed, not reused.
    pub(crate) async fn commit(mut self) -> Result<(), sqlx::Error> {
        self.conn.execute("COMMIT").await?;
        self.open = false;
        Ok(())
    }

    /// `ROLLBACK`.
    pub(crate) async fn rollback(mut self) -> Result<(), sqlx::Error> {
        self.conn.execute("ROLLBACK").await?;
        self.open = false;
        Ok(())
    }
}

impl Drop for InboxTx {
    fn drop(&mut self) {
        if self.open {
            // Closing the connection makes the server roll back; returning it
            // could hand an open transaction (and its locks) to the next user.
            self.conn.close_on_drop();
        }
    }
}

impl fmt::Debug for InboxTx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InboxTx")
            .field("open", &self.open)
            .finish_non_exhaustive()
    }
}
