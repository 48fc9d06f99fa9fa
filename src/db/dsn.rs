//! The receiver's database address, `ORBIT_RECEIVER_DSN` (see [`Dsn`]).

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use sqlx::mysql::{MySqlConnectOptions, MySqlConnection, MySqlSslMode};
use sqlx::Connection;

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
    address: Address,
    redacted: String,
}

/// The server a [`Dsn`] names, with the options of its driver.
#[derive(Clone)]
// A few per process: the size of the larger variant costs nothing.
#[allow(clippy::large_enum_variant)]
enum Address {
    MySql(MySqlConnectOptions),
    /// One set of options per host the address names (at least one).
    #[cfg(feature = "postgres")]
    Postgres(Vec<sqlx::postgres::PgConnectOptions>),
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
    /// Parses and validates a DSN such as `mysql://user:pw@127.0.0.1:3306/receiver`
    /// or, with TLS (see [TLS](Dsn#tls)),
    /// `mysql://user:pw@db.example:3306/receiver?ssl-mode=VERIFY_IDENTITY&ssl-ca=/etc/ca.pem`.
    /// Reads the `ssl-ca` file, if any; connects to nothing.
    pub fn parse(s: &str) -> Result<Self, DsnError> {
        if s.starts_with("postgres://") || s.starts_with("postgresql://") {
            #[cfg(feature = "postgres")]
            return crate::db::postgres::address::parse(s).map(|(options, redacted)| Self {
                address: Address::Postgres(options),
                redacted,
            });
            #[cfg(not(feature = "postgres"))]
            return Err(DsnError::PostgresNotBuilt);
        }
        if !(s.starts_with("mysql://") || s.starts_with("mariadb://")) {
            return Err(DsnError::Invalid);
        }
        let tls = TlsOptions::from_query(s);
        if let Some(option) = tls.unknown {
            return Err(DsnError::UnknownOption { option });
        }
        if let Some(mode) = &tls.mode {
            if MySqlSslMode::from_str(mode).is_err() {
                return Err(DsnError::SslMode);
            }
        }
        let options = MySqlConnectOptions::from_str(s).map_err(|_| DsnError::Invalid)?;
        let database = match options.get_database() {
            Some(db) if !db.is_empty() => db.to_owned(),
            _ => return Err(DsnError::NoDatabase),
        };
        let verifying = matches!(
            options.get_ssl_mode(),
            MySqlSslMode::VerifyCa | MySqlSslMode::VerifyIdentity
        );
        if let Some(ca) = &tls.ca {
            if !verifying {
                return Err(DsnError::CaWithoutVerification);
            }
            check_ca_file(ca)?;
        }
        let mut redacted = format!(
            "mysql://{}@{}:{}/{}",
            options.get_username(),
            options.get_host(),
            options.get_port(),
            database
        );
        if tls.mode.is_some() {
            redacted.push_str("?ssl-mode=");
            redacted.push_str(ssl_mode_name(options.get_ssl_mode()));
        }
        Ok(Self {
            address: Address::MySql(options),
            redacted,
        })
    }

    /// Which engine the address names.
    pub fn engine(&self) -> EngineKind {
        match &self.address {
            Address::MySql(_) => EngineKind::MySql,
            #[cfg(feature = "postgres")]
            Address::Postgres(_) => EngineKind::Postgres,
        }
    }

    /// The name of the receiver's database.
    pub fn database(&self) -> &str {
        // Present by construction.
        match &self.address {
            Address::MySql(options) => options.get_database().unwrap_or_default(),
            #[cfg(feature = "postgres")]
            Address::Postgres(hosts) => hosts[0].get_database().unwrap_or_default(),
        }
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
        let address = match &self.address {
            Address::MySql(options) => Address::MySql(options.clone().database(database)),
            #[cfg(feature = "postgres")]
            Address::Postgres(hosts) => {
                Address::Postgres(hosts.iter().map(|o| o.clone().database(database)).collect())
            }
        };
        Dsn { address, redacted }
    }

    /// sqlx's connection options, for a MySQL address.
    pub fn mysql_options(&self) -> Option<MySqlConnectOptions> {
        match &self.address {
            Address::MySql(options) => Some(options.clone()),
            #[cfg(feature = "postgres")]
            Address::Postgres(_) => None,
        }
    }

    /// sqlx's connection options, for a PostgreSQL address.
    #[cfg(feature = "postgres")]
    pub fn postgres_options(&self) -> Option<sqlx::postgres::PgConnectOptions> {
        self.postgres_hosts().first().cloned()
    }

    /// The options of each host a PostgreSQL address names, in its order
    /// (empty for a MySQL address).
    #[cfg(feature = "postgres")]
    pub fn postgres_hosts(&self) -> &[sqlx::postgres::PgConnectOptions] {
        match &self.address {
            Address::Postgres(hosts) => hosts,
            Address::MySql(_) => &[],
        }
    }

    /// One connection of its own, as the operator tools and `init` use.
    /// They run on MySQL: a PostgreSQL address is refused.
    pub(crate) async fn connect(&self) -> Result<MySqlConnection, sqlx::Error> {
        match &self.address {
            Address::MySql(options) => MySqlConnection::connect_with(options).await,
            #[cfg(feature = "postgres")]
            Address::Postgres(_) => Err(sqlx::Error::Configuration(
                "this tool runs on MySQL; the DSN names a PostgreSQL server".into(),
            )),
        }
    }

    /// The TLS mode of a MySQL address: `ssl-mode` as given, else sqlx's
    /// default `PREFERRED`.
    pub fn ssl_mode(&self) -> Option<MySqlSslMode> {
        self.mysql_options().map(|options| options.get_ssl_mode())
    }
}

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
pub const POSTGRES_OPTIONS: [&str; 9] = [
    "sslmode",
    "target_session_attrs",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "statement-cache-capacity",
    "password",
    "application_name",
    "options",
];

const OTHER_SPELLINGS: [&str; 5] = ["sslmode", "sslca", "sslcert", "sslkey", "time-zone"];

/// The TLS options of a DSN's query string, as given (last one wins, as in
/// sqlx), and the first option sqlx would ignore.
#[derive(Default)]
struct TlsOptions {
    mode: Option<String>,
    ca: Option<PathBuf>,
    unknown: Option<String>,
}

impl TlsOptions {
    fn from_query(dsn: &str) -> Self {
        let mut found = Self::default();
        let Some((_, query)) = dsn.split_once('?') else {
            return found;
        };
        let query = query.split_once('#').map_or(query, |(q, _)| q);
        for pair in query.split('&') {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            match form_decode(key).as_str() {
                "ssl-mode" | "sslmode" => found.mode = Some(form_decode(value)),
                "ssl-ca" | "sslca" => found.ca = Some(PathBuf::from(form_decode(value))),
                "" => {}
                known if ACCEPTED_OPTIONS.contains(&known) || OTHER_SPELLINGS.contains(&known) => {}
                unknown => {
                    found.unknown.get_or_insert_with(|| unknown.to_owned());
                }
            }
        }
        found
    }
}

/// Decodes one `application/x-www-form-urlencoded` component (`+` is a
/// space, `%XX` a byte), as the URL parser behind sqlx does.
pub(super) fn form_decode(s: &str) -> String {
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
pub(super) fn check_ca_file(path: &Path) -> Result<(), DsnError> {
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

fn ssl_mode_name(mode: MySqlSslMode) -> &'static str {
    match mode {
        MySqlSslMode::Disabled => "DISABLED",
        MySqlSslMode::Preferred => "PREFERRED",
        MySqlSslMode::Required => "REQUIRED",
        MySqlSslMode::VerifyCa => "VERIFY_CA",
        MySqlSslMode::VerifyIdentity => "VERIFY_IDENTITY",
    }
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
    fn an_option_the_driver_would_ignore_is_refused_by_its_name_never_by_its_value() {
        for (dsn, option) in [
            (
                "mysql://u:pw@h:3306/db?ssl_mode=VERIFY_IDENTITY",
                "ssl_mode",
            ),
            ("mysql://u:pw@h:3306/db?foo=bar", "foo"),
            (
                "mysql://u:pw@h:3306/db?ssl-mode=REQUIRED&sslmod=VERIFY_CA",
                "sslmod",
            ),
        ] {
            let e = Dsn::parse(dsn).unwrap_err();
            assert_eq!(
                e,
                DsnError::UnknownOption {
                    option: option.to_owned()
                },
                "{dsn}"
            );
            let text = e.to_string();
            assert!(
                text.contains(&format!("`{option}`")) && text.contains("ssl-mode"),
                "{text}"
            );
            assert!(!text.contains("VERIFY") && !text.contains("bar") && !text.contains("pw"));
        }
    }

    #[test]
    fn every_option_the_driver_knows_is_accepted_in_both_spellings() {
        for query in [
            "ssl-mode=REQUIRED",
            "sslmode=REQUIRED",
            "charset=utf8mb4",
            "collation=utf8mb4_bin",
            "statement-cache-capacity=10",
            "timezone=%2B00:00",
            "time-zone=%2B00:00",
            "socket=/tmp/x.sock",
        ] {
            let dsn = format!("mysql://u@h:3306/db?{query}");
            assert!(Dsn::parse(&dsn).is_ok(), "{dsn}");
        }
    }

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

    #[test]
    fn the_password_never_shows() {
        let dsn = Dsn::parse("mysql://app:sentinel-pw@db.example:3307/receiver").unwrap();
        assert_eq!(dsn.database(), "receiver");
        assert_eq!(dsn.to_string(), "mysql://app@db.example:3307/receiver");
        assert!(!format!("{dsn:?}").contains("sentinel-pw"));
    }

    fn ca_file(name: &str, content: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("result-inbox-dsn-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ca file.pem");
        std::fs::write(&path, content).unwrap();
        path
    }

    const PEM: &str = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";

    #[test]
    fn tls_options_are_sqlx_s_and_the_mode_shows_without_the_password() {
        let ca = ca_file("ok", PEM);
        let encoded = ca.display().to_string().replace(' ', "%20");
        let dsn = Dsn::parse(&format!(
            "mysql://app:sentinel-pw@db.example:3306/receiver?ssl-mode=verify_identity&ssl-ca={encoded}"
        ))
        .unwrap();
        std::fs::remove_dir_all(ca.parent().unwrap()).ok();
        assert!(matches!(dsn.ssl_mode(), Some(MySqlSslMode::VerifyIdentity)));
        assert_eq!(
            dsn.to_string(),
            "mysql://app@db.example:3306/receiver?ssl-mode=VERIFY_IDENTITY"
        );
        assert!(!format!("{dsn:?}").contains("sentinel-pw"));
        let default = Dsn::parse("mysql://app@db.example/receiver").unwrap();
        assert!(matches!(default.ssl_mode(), Some(MySqlSslMode::Preferred)));
        let disabled = Dsn::parse("mysql://app@db.example/receiver?sslmode=DISABLED").unwrap();
        assert!(matches!(disabled.ssl_mode(), Some(MySqlSslMode::Disabled)));
    }

    #[test]
    fn an_unknown_ssl_mode_is_named() {
        let err = Dsn::parse("mysql://app:sentinel-pw@h/receiver?ssl-mode=VERIFY").unwrap_err();
        assert_eq!(err, DsnError::SslMode);
        assert!(err.to_string().contains("VERIFY_IDENTITY"));
        assert!(!err.to_string().contains("sentinel-pw"));
    }

    #[test]
    fn a_ca_without_certificate_verification_is_refused() {
        let ca = ca_file("weak", PEM);
        for mode in [
            "",
            "&ssl-mode=PREFERRED",
            "&ssl-mode=REQUIRED",
            "&ssl-mode=DISABLED",
        ] {
            let err = Dsn::parse(&format!(
                "mysql://app@h/receiver?ssl-ca={}{mode}",
                ca.display().to_string().replace(' ', "+")
            ))
            .unwrap_err();
            assert_eq!(err, DsnError::CaWithoutVerification, "{mode}");
        }
        std::fs::remove_dir_all(ca.parent().unwrap()).ok();
    }

    #[test]
    fn an_unusable_ca_file_is_refused_before_connecting() {
        let err =
            Dsn::parse("mysql://app@h/receiver?ssl-mode=VERIFY_CA&ssl-ca=/nonexistent/ca.pem")
                .unwrap_err();
        assert!(matches!(err, DsnError::CaFile { .. }), "{err}");
        assert!(err.to_string().contains("/nonexistent/ca.pem"), "{err}");
        let ca = ca_file("nocert", "sentinel-key-material\n");
        let err = Dsn::parse(&format!(
            "mysql://app@h/receiver?ssl-mode=VERIFY_CA&ssl-ca={}",
            ca.display().to_string().replace(' ', "%20")
        ))
        .unwrap_err();
        std::fs::remove_dir_all(ca.parent().unwrap()).ok();
        assert!(
            err.to_string().contains("holds no PEM certificate"),
            "{err}"
        );
        assert!(!err.to_string().contains("sentinel-key-material"));
    }

    #[test]
    fn form_decoding_matches_the_url_parser() {
        assert_eq!(form_decode("a%20b+c%2Fd"), "a b c/d");
        assert_eq!(form_decode("100%"), "100%");
        assert_eq!(form_decode("%zz%é"), "%zz%é");
    }
}
