//! A connection of the engine a [`Dsn`] names: what the operator tools
//! (`failures`, `replay`, `inspect`, `stats`, `verify`) hold. Their logic
//! is written once, generic over [`Engine`](super::Engine); this is the
//! one place where an address picks which engine's code runs.

use sqlx::mysql::MySqlConnection;
use sqlx::Connection;

use super::{DbError, Dsn};

/// One connection of its own to the server a [`Dsn`] names.
pub(crate) enum AnyConnection {
    MySql(MySqlConnection),
    #[cfg(feature = "postgres")]
    Postgres(sqlx::postgres::PgConnection),
}

impl AnyConnection {
    /// Connects to the server `dsn` names, on its engine.
    pub(crate) async fn open(dsn: &Dsn) -> Result<AnyConnection, DbError> {
        use super::engine::Statements;
        let failed = |e: sqlx::Error| DbError::from(e).connecting_to(dsn.engine());
        Ok(match dsn.engine() {
            #[cfg(feature = "postgres")]
            super::EngineKind::Postgres => {
                AnyConnection::Postgres(sqlx::Postgres::connect_one(dsn).await.map_err(failed)?)
            }
            _ => AnyConnection::MySql(sqlx::MySql::connect_one(dsn).await.map_err(failed)?),
        })
    }

    /// Ends the connection; a failure to say goodbye changes nothing.
    pub(crate) async fn close(self) {
        let _ = match self {
            AnyConnection::MySql(conn) => conn.close().await,
            #[cfg(feature = "postgres")]
            AnyConnection::Postgres(conn) => conn.close().await,
        };
    }
}

/// Runs `$body` with `$conn` bound to the engine's connection of an
/// [`AnyConnection`] and the type `E` naming its engine, so that a tool
/// calls its generic code once for every engine.
macro_rules! on_engine {
    ($any:expr, $conn:ident => $body:expr) => {
        match $any {
            $crate::db::any::AnyConnection::MySql($conn) => {
                #[allow(dead_code)]
                type E = ::sqlx::MySql;
                $body
            }
            #[cfg(feature = "postgres")]
            $crate::db::any::AnyConnection::Postgres($conn) => {
                #[allow(dead_code)]
                type E = ::sqlx::Postgres;
                $body
            }
        }
    };
}
pub(crate) use on_engine;
