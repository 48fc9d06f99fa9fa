//! A `mysql://` (or `mariadb://`) address: it names its database, its TLS
//! options are sqlx's as MySQL's client spells them and make sense
//! together (see [TLS](crate::db::Dsn#tls)), and no option is one the
//! driver would ignore. `postgres/address.rs` is the same for PostgreSQL.

use std::any::Any;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

use sqlx::mysql::{MySqlConnectOptions, MySqlConnection, MySqlSslMode};
use sqlx::Connection;

use crate::db::dsn::{check_ca_file, form_decode, Address, ACCEPTED_OPTIONS};
use crate::db::{Dsn, DsnError, EngineKind};

/// A `mysql://` or `mariadb://` address, checked before any connection is
/// made; reads the `ssl-ca` file, if any.
pub(crate) fn parse(s: &str) -> Result<Dsn, DsnError> {
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
    Ok(Dsn::new(options, redacted))
}

impl Address for MySqlConnectOptions {
    fn engine(&self) -> EngineKind {
        EngineKind::MySql
    }

    fn database(&self) -> &str {
        self.get_database().unwrap_or_default()
    }

    fn with_database(&self, database: &str) -> Arc<dyn Address> {
        Arc::new(self.clone().database(database))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Dsn {
    /// sqlx's connection options, for a MySQL address.
    pub fn mysql_options(&self) -> Option<MySqlConnectOptions> {
        self.options::<MySqlConnectOptions>().cloned()
    }

    /// One connection of its own, as the operator tools and `init` use.
    /// They run on MySQL: a PostgreSQL address is refused.
    pub(crate) async fn connect(&self) -> Result<MySqlConnection, sqlx::Error> {
        match self.options::<MySqlConnectOptions>() {
            Some(options) => MySqlConnection::connect_with(options).await,
            None => Err(sqlx::Error::Configuration(
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

fn ssl_mode_name(mode: MySqlSslMode) -> &'static str {
    match mode {
        MySqlSslMode::Disabled => "DISABLED",
        MySqlSslMode::Preferred => "PREFERRED",
        MySqlSslMode::Required => "REQUIRED",
        MySqlSslMode::VerifyCa => "VERIFY_CA",
        MySqlSslMode::VerifyIdentity => "VERIFY_IDENTITY",
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use sqlx::mysql::MySqlSslMode;

    use crate::db::{Dsn, DsnError};

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
}
