//! The receiver's database address, `ORBIT_RECEIVER_DSN`.
//!
//! A [`Dsn`] always names its database: the receiver's tables must land in a
//! dedicated database chosen on purpose, never in whatever the account's
//! default happens to be (least of all the platform's). The check happens
//! before any connection is made. The password never appears in `Debug` or
//! `Display` output.

use std::fmt;
use std::str::FromStr;

use sqlx::mysql::MySqlConnectOptions;

/// A MySQL connection address that names a database.
#[derive(Clone)]
pub struct Dsn {
    options: MySqlConnectOptions,
    redacted: String,
}

/// Why a DSN was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DsnError {
    /// Not a `mysql://` URL sqlx understands. The input is not repeated: it
    /// may hold a password.
    #[error("database DSN is not a valid mysql:// URL")]
    Invalid,
    /// The URL has no `/database` path.
    #[error(
        "database DSN must name the receiver's database, e.g. mysql://user@host:3306/receiver"
    )]
    NoDatabase,
}

impl Dsn {
    /// Parses and validates a DSN such as `mysql://user:pw@127.0.0.1:3306/receiver`.
    pub fn parse(s: &str) -> Result<Self, DsnError> {
        if !(s.starts_with("mysql://") || s.starts_with("mariadb://")) {
            return Err(DsnError::Invalid);
        }
        let options = MySqlConnectOptions::from_str(s).map_err(|_| DsnError::Invalid)?;
        let database = match options.get_database() {
            Some(db) if !db.is_empty() => db.to_owned(),
            _ => return Err(DsnError::NoDatabase),
        };
        let redacted = format!(
            "mysql://{}@{}:{}/{}",
            options.get_username(),
            options.get_host(),
            options.get_port(),
            database
        );
        Ok(Self { options, redacted })
    }

    /// The name of the receiver's database.
    pub fn database(&self) -> &str {
        // Present by construction.
        self.options.get_database().unwrap_or_default()
    }

    /// The connection options for sqlx.
    pub fn connect_options(&self) -> MySqlConnectOptions {
        self.options.clone()
    }
}

impl FromStr for Dsn {
    type Err = DsnError;

    fn from_str(s: &str) -> Result<Self, DsnError> {
        Self::parse(s)
    }
}

impl fmt::Display for Dsn {
    /// The address without password or options.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted)
    }
}

impl fmt::Debug for Dsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Dsn({})", self.redacted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dsn_without_a_database_is_refused_before_connecting() {
        assert_eq!(
            Dsn::parse("mysql://root@127.0.0.1:3306").unwrap_err(),
            DsnError::NoDatabase
        );
        assert_eq!(
            Dsn::parse("mysql://root@127.0.0.1:3306/").unwrap_err(),
            DsnError::NoDatabase
        );
    }

    #[test]
    fn a_dsn_that_is_not_a_mysql_url_is_refused() {
        assert_eq!(
            Dsn::parse("postgres://u@h/db").unwrap_err(),
            DsnError::Invalid
        );
        assert_eq!(Dsn::parse("receiver").unwrap_err(), DsnError::Invalid);
    }

    #[test]
    fn the_password_never_shows() {
        let dsn = Dsn::parse("mysql://app:sentinel-pw@db.example:3307/receiver").unwrap();
        assert_eq!(dsn.database(), "receiver");
        assert_eq!(dsn.to_string(), "mysql://app@db.example:3307/receiver");
        assert!(!format!("{dsn:?}").contains("sentinel-pw"));
    }
}
