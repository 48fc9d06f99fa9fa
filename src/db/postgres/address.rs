//! A `postgres://` (or `postgresql://`) address, checked as a MySQL one is:
//! it names its database, its TLS options are libpq's and make sense
//! together, and no option is one the driver would ignore.

use std::path::PathBuf;
use std::str::FromStr;

use sqlx::postgres::{PgConnectOptions, PgSslMode};

use crate::db::dsn::{check_ca_file, form_decode, DsnError, POSTGRES_OPTIONS};

/// The options and the redacted form (no password, no options but
/// `sslmode` when given) of a PostgreSQL address.
pub(crate) fn parse(s: &str) -> Result<(PgConnectOptions, String), DsnError> {
    let (without_fragment, _) = s.split_once('#').unwrap_or((s, ""));
    let (base, query) = without_fragment
        .split_once('?')
        .unwrap_or((without_fragment, ""));
    let mut mode = None;
    let mut ca = None;
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match form_decode(key).as_str() {
            "sslmode" | "ssl-mode" => mode = Some(form_decode(value)),
            "sslrootcert" | "ssl-root-cert" | "ssl-ca" => {
                ca = Some(PathBuf::from(form_decode(value)));
            }
            "ssl-cert" | "ssl-key" => {}
            known if POSTGRES_OPTIONS.contains(&known) => {}
            named if named.starts_with("options[") && named.ends_with(']') => {}
            unknown => {
                return Err(DsnError::UnknownPostgresOption {
                    option: unknown.to_owned(),
                })
            }
        }
    }
    let mode = match &mode {
        Some(mode) => Some(PgSslMode::from_str(mode).map_err(|_| DsnError::PgSslMode)?),
        None => None,
    };
    // The database is the URL's path, never one the environment supplies.
    let path = base
        .split_once("://")
        .map(|(_, rest)| rest)
        .and_then(|rest| rest.split_once('/'))
        .map_or("", |(_, path)| path);
    if path.is_empty() {
        return Err(DsnError::NoDatabase);
    }
    let options = PgConnectOptions::from_str(s).map_err(|_| DsnError::Invalid)?;
    if let Some(ca) = &ca {
        let verifying = matches!(
            options.get_ssl_mode(),
            PgSslMode::Require | PgSslMode::VerifyCa | PgSslMode::VerifyFull
        );
        if !verifying {
            return Err(DsnError::PgCaWithoutVerification);
        }
        check_ca_file(ca)?;
    }
    let mut redacted = format!(
        "postgres://{}@{}:{}/{}",
        options.get_username(),
        options.get_host(),
        options.get_port(),
        options.get_database().unwrap_or_default(),
    );
    if let Some(mode) = mode {
        redacted.push_str("?sslmode=");
        redacted.push_str(mode_name(mode));
    }
    Ok((options, redacted))
}

fn mode_name(mode: PgSslMode) -> &'static str {
    match mode {
        PgSslMode::Disable => "disable",
        PgSslMode::Allow => "allow",
        PgSslMode::Prefer => "prefer",
        PgSslMode::Require => "require",
        PgSslMode::VerifyCa => "verify-ca",
        PgSslMode::VerifyFull => "verify-full",
    }
}

#[cfg(test)]
mod tests {
    use crate::db::{Dsn, DsnError, EngineKind};

    #[test]
    fn a_postgres_address_names_its_engine_and_its_database() {
        for scheme in ["postgres", "postgresql"] {
            let dsn = Dsn::parse(&format!("{scheme}://receiver:secret@db:5433/inbox")).unwrap();
            assert_eq!(dsn.engine(), EngineKind::Postgres);
            assert_eq!(dsn.database(), "inbox");
            assert!(dsn.postgres_options().is_some() && dsn.mysql_options().is_none());
        }
    }

    #[test]
    fn a_postgres_address_without_a_database_is_refused() {
        for dsn in [
            "postgres://receiver@db:5432",
            "postgres://receiver@db:5432/",
        ] {
            assert_eq!(Dsn::parse(dsn).unwrap_err(), DsnError::NoDatabase, "{dsn}");
        }
    }

    #[test]
    fn the_password_never_shows_and_the_ssl_mode_does() {
        let dsn =
            Dsn::parse("postgres://receiver:s3cret@db:5432/inbox?sslmode=verify-full").unwrap();
        for shown in [dsn.to_string(), format!("{dsn:?}")] {
            assert!(!shown.contains("s3cret"), "{shown}");
            assert!(
                shown.contains("postgres://receiver@db:5432/inbox?sslmode=verify-full"),
                "{shown}"
            );
        }
    }

    #[test]
    fn a_misspelled_option_or_ssl_mode_is_refused_by_name_never_by_value() {
        let e = Dsn::parse("postgres://r@db/inbox?ssl_mode=require").unwrap_err();
        assert_eq!(
            e,
            DsnError::UnknownPostgresOption {
                option: "ssl_mode".into()
            }
        );
        assert!(e.to_string().contains("sslmode"), "{e}");
        let e = Dsn::parse("postgres://r@db/inbox?sslmode=verify-identity").unwrap_err();
        assert_eq!(e, DsnError::PgSslMode);
        assert!(!e.to_string().contains("verify-identity"), "{e}");
    }

    #[test]
    fn a_root_certificate_without_verification_is_refused() {
        let e =
            Dsn::parse("postgres://r@db/inbox?sslmode=prefer&sslrootcert=/etc/ca.pem").unwrap_err();
        assert_eq!(e, DsnError::PgCaWithoutVerification);
    }
}
