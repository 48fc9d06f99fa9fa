//! The one place where an address picks which engine's code runs, and
//! the only file beside the engines' folders that names them: the engine
//! a [`Dsn`]'s scheme names (each engine parses its own address, in
//! `db/<engine>/address.rs`), the engine whose mapping reads a server's
//! error (`db/<engine>/error.rs`), and a connection of the engine a
//! [`Dsn`] names: what the operator tools (`failures`, `replay`,
//! `inspect`, `stats`, `verify`) hold. Their logic is written once,
//! generic over [`Engine`](super::Engine).

use sqlx::error::DatabaseError;
use sqlx::mysql::MySqlConnection;
use sqlx::Connection;

use super::{DbError, Dsn, DsnError};

impl Dsn {
    /// Parses and validates a DSN such as `mysql://user:pw@127.0.0.1:3306/receiver`
    /// or, with TLS (see [TLS](Dsn#tls)),
    /// `mysql://user:pw@db.example:3306/receiver?ssl-mode=VERIFY_IDENTITY&ssl-ca=/etc/ca.pem`.
    /// Reads the `ssl-ca` file, if any; connects to nothing.
    pub fn parse(s: &str) -> Result<Self, DsnError> {
        if s.starts_with("postgres://") || s.starts_with("postgresql://") {
            #[cfg(feature = "postgres")]
            return super::postgres::address::parse(s);
            #[cfg(not(feature = "postgres"))]
            return Err(DsnError::PostgresNotBuilt);
        }
        if !(s.starts_with("mysql://") || s.starts_with("mariadb://")) {
            return Err(DsnError::Invalid);
        }
        super::mysql::address::parse(s)
    }
}

impl From<sqlx::Error> for DbError {
    fn from(e: sqlx::Error) -> Self {
        DbError::from(&e)
    }
}

impl From<&sqlx::Error> for DbError {
    fn from(e: &sqlx::Error) -> Self {
        DbError::classify(e, server_error)
    }
}

/// A server's own error, read by the mapping of the engine whose driver
/// met it.
fn server_error(db: &dyn DatabaseError) -> DbError {
    #[cfg(feature = "postgres")]
    if let Some(pg) = db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>() {
        return super::postgres::error::db_error(pg);
    }
    super::mysql::error::db_error(db)
}

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

#[cfg(test)]
mod tests {
    use crate::db::{Dsn, DsnError};

    #[test]
    fn a_dsn_that_is_neither_a_mysql_nor_a_postgres_url_is_refused() {
        for dsn in ["redis://u@h/db", "receiver", "mysql:/u@h/db"] {
            assert_eq!(Dsn::parse(dsn).unwrap_err(), DsnError::Invalid, "{dsn}");
        }
    }

    #[cfg(not(feature = "postgres"))]
    #[test]
    fn a_postgres_url_without_the_postgres_feature_says_so() {
        let e = Dsn::parse("postgres://u@h/db").unwrap_err();
        assert_eq!(e, DsnError::PostgresNotBuilt);
        assert!(e.to_string().contains("feature `postgres`"), "{e}");
    }
}
