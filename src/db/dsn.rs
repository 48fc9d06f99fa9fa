//! The receiver's database address, `ORBIT_RECEIVER_DSN` (see [`Dsn`]).

use std::any::Any;
use std::fmt;
use std::panic::{RefUnwindSafe, UnwindSafe};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

/// A MySQL connection address that names a database: the receiver's
/// database address, `ORBIT_RECEIVER_DSN`.
///
/// A [`Dsn`] always names its database: the receiver's tables must land in a
/// dedicated database chosen on purpose, never in whatever the account's
/// default happens to be (least of all the platform's). The check happens
/// before any connection is made. The password never appears in `Debug` or
/// `Display` output.
///
/// # TLS
///
/// The connection is encrypted with rustls (ring provider) as the DSN's
/// query options say; they are sqlx's, spelled as in MySQL's client:
///
/// * `ssl-mode` (case-insensitive; sqlx also accepts `sslmode`):
///   * `DISABLED` — never encrypt;
///   * `PREFERRED` — sqlx's default when `ssl-mode` is absent: encrypt if the
///     server offers TLS, else go on in plain text, and **never check the
///     server's certificate**. A server offering only TLS 1.0/1.1 (which
///     rustls does not speak) fails the connection rather than falling back
///     to plain text;
///   * `REQUIRED` — fail if the server does not offer TLS; the certificate is
///     still not checked (protects against eavesdropping, not against an
///     active man in the middle);
///   * `VERIFY_CA` — also check that the certificate chains to a trusted CA,
///     but not which host it names;
///   * `VERIFY_IDENTITY` — also check that the certificate names the DSN's
///     host (an IP address must be in its subject alternative names). **Use
///     this in production.**
/// * `ssl-ca=/path/ca.pem` (or `sslca`) — PEM certificate(s) of the CA that
///   signed the server's certificate, trusted besides Mozilla's root
///   certificates (the `webpki-roots` crate; the operating system's store is
///   not read). A private CA needs it.
///
/// For example
/// `mysql://receiver:…@db.internal:3306/receiver?ssl-mode=VERIFY_IDENTITY&ssl-ca=/etc/receiver/db-ca.pem`.
///
/// Checked before connecting: `ssl-mode` must be one of the five values;
/// `ssl-ca` is accepted only with `VERIFY_CA` or `VERIFY_IDENTITY` (with any
/// other mode sqlx would not check the certificate against it, which would
/// only look safe); the `ssl-ca` file must be readable and hold at least one
/// PEM certificate. sqlx's client-certificate options `ssl-cert` and
/// `ssl-key` are passed through unchanged. A server account created with
/// `REQUIRE SSL` refuses `ssl-mode=DISABLED`.
#[derive(Clone)]
pub struct Dsn {
    address: Arc<dyn Address>,
    redacted: String,
}

/// The server a [`Dsn`] names, with the options of its engine's driver:
/// each engine parses its own address (`db/<engine>/address.rs`) into a
/// type of its own, and reads it back from a [`Dsn`] with
/// [`Dsn::options`]. `db::any` picks the engine by the address's scheme.
pub(crate) trait Address: Any + Send + Sync + RefUnwindSafe + UnwindSafe {
    /// The engine whose driver the options are.
    fn engine(&self) -> EngineKind;
    /// The database the address names (present: each engine's parser
    /// refuses an address without one).
    fn database(&self) -> &str;
    /// The same server, account and options, naming `database` instead.
    fn with_database(&self, database: &str) -> Arc<dyn Address>;
    /// The options as [`Any`], for [`Dsn::options`].
    fn as_any(&self) -> &dyn Any;
}

/// Which engine a [`Dsn`] names: `mysql://` (or `mariadb://`), or
/// `postgres://` (or `postgresql://`, with the `postgres` feature).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EngineKind {
    /// MySQL or MariaDB.
    MySql,
    /// PostgreSQL.
    Postgres,
}

/// Why a DSN was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DsnError {
    /// Not a `mysql://` (or `postgres://`) URL sqlx understands. The input
    /// is not repeated: it may hold a password.
    #[error("database DSN is not a valid mysql:// or postgres:// URL")]
    Invalid,
    /// A `postgres://` address, in a build without the `postgres` feature.
    #[error("database DSN names a PostgreSQL server, but this build has no PostgreSQL support (cargo feature `postgres`)")]
    PostgresNotBuilt,
    /// `sslmode` of a `postgres://` address is not one of libpq's values.
    #[error(
        "sslmode in the database DSN must be disable, allow, prefer, require, verify-ca or verify-full"
    )]
    PgSslMode,
    /// `sslrootcert` of a `postgres://` address with a mode that would not
    /// check the certificate against it.
    #[error(
        "sslrootcert in the database DSN is used only with sslmode=require, verify-ca or verify-full \
         (production: verify-full); with another mode the server's certificate is not checked"
    )]
    PgCaWithoutVerification,
    /// An option of a `postgres://` address that the driver does not know.
    /// Names the option, never its value.
    #[error(
        "unknown option `{option}` in the database DSN (accepted for postgres://: {})",
        POSTGRES_OPTIONS.join(", ")
    )]
    UnknownPostgresOption {
        /// The option as written.
        option: String,
    },
    /// The URL has no `/database` path.
    #[error(
        "database DSN must name the receiver's database, e.g. mysql://user@host:3306/receiver"
    )]
    NoDatabase,
    /// A `postgres://` URL has no `/database` path.
    #[error(
        "database DSN must name the receiver's database, e.g. postgres://user@host:5432/receiver"
    )]
    PgNoDatabase,
    /// An option of a `postgres://` address that would say again, and
    /// maybe otherwise, what the address says in its one place for it:
    /// `dbname` (the path), `user`, `host`, `hostaddr`, `port` (the
    /// authority). Names the option, never its value.
    #[error(
        "option `{option}` in the database DSN is refused: a postgres:// address gives {place} (postgres://user:password@host:5432/database)"
    )]
    PgOptionOutOfPlace {
        /// The option as written.
        option: String,
        /// Where the address says it instead.
        place: &'static str,
    },
    /// `ssl-mode` is not one of the values MySQL's client knows.
    #[error(
        "ssl-mode in the database DSN must be DISABLED, PREFERRED, REQUIRED, VERIFY_CA or VERIFY_IDENTITY"
    )]
    SslMode,
    /// `ssl-ca` with a mode that would not check the certificate against it.
    #[error(
        "ssl-ca in the database DSN is used only with ssl-mode=VERIFY_CA or VERIFY_IDENTITY \
         (production: VERIFY_IDENTITY); with another mode the server's certificate is not checked"
    )]
    CaWithoutVerification,
    /// An option in the query string that the driver does not know: it
    /// would be ignored without a word (a misspelled `ssl_mode` would leave
    /// the connection unencrypted). Names the option, never its value.
    #[error(
        "unknown option `{option}` in the database DSN (accepted: {})",
        ACCEPTED_OPTIONS.join(", ")
    )]
    UnknownOption {
        /// The option as written.
        option: String,
    },
    /// The `ssl-ca` file cannot be used. Names the file, never its content.
    #[error("ssl-ca file {path} of the database DSN {problem}")]
    CaFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        problem: String,
    },
}

impl Dsn {
    /// The address of `address`'s server, shown as `redacted` (no password,
    /// no options but the TLS mode when given).
    pub(crate) fn new(address: impl Address, redacted: String) -> Self {
        Self {
            address: Arc::new(address),
            redacted,
        }
    }

    /// The options of the engine whose type `T` is, when the address names
    /// a server of that engine.
    pub(crate) fn options<T: Address>(&self) -> Option<&T> {
        self.address.as_any().downcast_ref()
    }

    /// Which engine the address names.
    pub fn engine(&self) -> EngineKind {
        self.address.engine()
    }

    /// The name of the receiver's database.
    pub fn database(&self) -> &str {
        self.address.database()
    }

    /// The same server, account and options, naming `database` instead
    /// (a test database beside the one the DSN names, say).
    pub fn with_database(&self, database: &str) -> Dsn {
        let (server, _) = self
            .redacted
            .split_once('?')
            .unwrap_or((&self.redacted, ""));
        let base = server.rsplit_once('/').map_or(server, |(base, _)| base);
        let query = self.redacted.split_once('?').map(|(_, q)| q);
        let mut redacted = format!("{base}/{database}");
        if let Some(query) = query {
            redacted.push('?');
            redacted.push_str(query);
        }
        Dsn {
            address: self.address.with_database(database),
            redacted,
        }
    }
}

// The options each engine's address accepts stay beside `DsnError`, whose
// messages list them (and `POSTGRES_OPTIONS` is API without the
// `postgres` feature); each engine's parser reads them from here.

/// The query options the MySQL driver (sqlx) understands, as MySQL's
/// client spells them; sqlx also takes the spellings without a hyphen
/// (`sslmode`, `sslca`, `sslcert`, `sslkey`) and `time-zone`.
pub const ACCEPTED_OPTIONS: [&str; 9] = [
    "ssl-mode",
    "ssl-ca",
    "ssl-cert",
    "ssl-key",
    "charset",
    "collation",
    "statement-cache-capacity",
    "socket",
    "timezone",
];

/// The query options a `postgres://` address may hold, as libpq spells
/// them; sqlx also takes `ssl-mode`, `ssl-root-cert`, `ssl-ca`,
/// `ssl-cert`, `ssl-key` and `options[name]`. The options that name the
/// database, the user, the host or the port (`dbname`, `user`, `host`,
/// `hostaddr`, `port`) are refused: the URL has one place for each.
pub const POSTGRES_OPTIONS: [&str; 8] = [
    "sslmode",
    "target_session_attrs",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "statement-cache-capacity",
    "application_name",
    "options",
];

/// Decodes one `application/x-www-form-urlencoded` component (`+` is a
/// space, `%XX` a byte), as the URL parser behind sqlx does.
pub(crate) fn form_decode(s: &str) -> String {
    let hex = |b: u8| (b as char).to_digit(16);
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => match (
                bytes.get(i + 1).and_then(|&b| hex(b)),
                bytes.get(i + 2).and_then(|&b| hex(b)),
            ) {
                (Some(hi), Some(lo)) => {
                    out.push((hi * 16 + lo) as u8);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The `ssl-ca` file is readable and holds at least one PEM certificate.
pub(crate) fn check_ca_file(path: &Path) -> Result<(), DsnError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let problem = |problem: String| DsnError::CaFile {
        path: path.to_owned(),
        problem,
    };
    let pem = std::fs::read(path).map_err(|e| problem(format!("cannot be read: {e}")))?;
    let mut certificates = 0;
    for cert in CertificateDer::pem_slice_iter(&pem) {
        cert.map_err(|e| problem(format!("is not valid PEM ({e})")))?;
        certificates += 1;
    }
    if certificates == 0 {
        return Err(problem(
            "holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into(),
        ));
    }
    Ok(())
}

impl FromStr for Dsn {
    type Err = DsnError;

    fn from_str(s: &str) -> Result<Self, DsnError> {
        Self::parse(s)
    }
}

impl fmt::Display for Dsn {
    /// The address without password or options, except `ssl-mode` when the
    /// DSN gives it.
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
    fn form_decoding_matches_the_url_parser() {
        assert_eq!(form_decode("a%20b+c%2Fd"), "a b c/d");
        assert_eq!(form_decode("100%"), "100%");
        assert_eq!(form_decode("%zz%é"), "%zz%é");
    }
}
