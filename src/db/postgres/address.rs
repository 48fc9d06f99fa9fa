//! A `postgres://` (or `postgresql://`) address, checked as a MySQL one is:
//! it names its database, its TLS options are libpq's and make sense
//! together, and no option is one the driver would ignore.

use std::any::Any;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

use sqlx::postgres::{PgConnectOptions, PgSslMode};

use crate::db::dsn::{check_ca_file, form_decode, Address, POSTGRES_OPTIONS};
use crate::db::{Dsn, DsnError, EngineKind};

/// The options of each host a PostgreSQL address names, in its order (at
/// least one).
struct Hosts(Vec<PgConnectOptions>);

/// A PostgreSQL address, with the options of each host and the redacted
/// form (no password, no options but `sslmode` when given). An address
/// may name several hosts, as libpq's do (`postgres://u@h1:5432,h2:5432/db`,
/// what `pg_autoctl show uri` prints): the receiver writes to the one that
/// is not a standby (`target_session_attrs=read-write` is all it accepts).
pub(crate) fn parse(s: &str) -> Result<Dsn, DsnError> {
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
            "target_session_attrs" => match form_decode(value).as_str() {
                "read-write" | "primary" => {}
                other => {
                    return Err(DsnError::UnknownPostgresOption {
                        option: format!("target_session_attrs={other}"),
                    })
                }
            },
            "dbname" => return Err(out_of_place("dbname", "its database in its path")),
            "user" => return Err(out_of_place("user", "its user before the @")),
            "password" => {
                return Err(out_of_place(
                    "password",
                    "its password after the user, before the @",
                ))
            }
            option @ ("host" | "hostaddr") => {
                return Err(out_of_place(option, "its host after the @"))
            }
            "port" => return Err(out_of_place("port", "its port after the host")),
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
        return Err(DsnError::PgNoDatabase);
    }
    let hosts = one_url_per_host(base, query)?;
    let options = hosts
        .iter()
        .map(|url| PgConnectOptions::from_str(url).map_err(|_| DsnError::Invalid))
        .collect::<Result<Vec<_>, _>>()?;
    let first = &options[0];
    if let Some(ca) = &ca {
        let verifying = matches!(
            first.get_ssl_mode(),
            PgSslMode::Require | PgSslMode::VerifyCa | PgSslMode::VerifyFull
        );
        if !verifying {
            return Err(DsnError::PgCaWithoutVerification);
        }
        check_ca_file(ca)?;
    }
    let hosts: Vec<String> = options
        .iter()
        .map(|o| format!("{}:{}", o.get_host(), o.get_port()))
        .collect();
    let mut redacted = format!(
        "postgres://{}@{}/{}",
        first.get_username(),
        hosts.join(","),
        first.get_database().unwrap_or_default(),
    );
    if let Some(mode) = mode {
        redacted.push_str("?sslmode=");
        redacted.push_str(mode_name(mode));
    }
    Ok(Dsn::new(Hosts(options), redacted))
}

impl Address for Hosts {
    fn engine(&self) -> EngineKind {
        EngineKind::Postgres
    }

    fn database(&self) -> &str {
        self.0[0].get_database().unwrap_or_default()
    }

    fn with_database(&self, database: &str) -> Arc<dyn Address> {
        Arc::new(Hosts(
            self.0
                .iter()
                .map(|o| o.clone().database(database))
                .collect(),
        ))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Dsn {
    /// sqlx's connection options, for a PostgreSQL address.
    pub fn postgres_options(&self) -> Option<PgConnectOptions> {
        self.postgres_hosts().first().cloned()
    }

    /// The options of each host a PostgreSQL address names, in its order
    /// (empty for a MySQL address).
    pub fn postgres_hosts(&self) -> &[PgConnectOptions] {
        self.options::<Hosts>().map_or(&[], |hosts| &hosts.0)
    }
}

/// An option that would say again what the URL says in its one place for
/// it, where sqlx would let the option win over the URL (`?dbname=` over
/// the path) while the address shown names the URL's.
fn out_of_place(option: &str, place: &'static str) -> DsnError {
    DsnError::PgOptionOutOfPlace {
        option: option.to_owned(),
        place,
    }
}

/// The address once per host it names, each with one host (sqlx reads
/// one), without `target_session_attrs` (sqlx does not know it).
fn one_url_per_host(base: &str, query: &str) -> Result<Vec<String>, DsnError> {
    let (scheme, rest) = base.split_once("://").ok_or(DsnError::Invalid)?;
    let (authority, path) = rest.split_once('/').ok_or(DsnError::PgNoDatabase)?;
    let (user, hosts) = match authority.rsplit_once('@') {
        Some((user, hosts)) => (format!("{user}@"), hosts),
        None => (String::new(), authority),
    };
    let query: Vec<&str> = query
        .split('&')
        .filter(|pair| !pair.is_empty() && !pair.starts_with("target_session_attrs="))
        .collect();
    let query = if query.is_empty() {
        String::new()
    } else {
        format!("?{}", query.join("&"))
    };
    let urls: Vec<String> = hosts
        .split(',')
        .map(|host| format!("{scheme}://{user}{host}/{path}{query}"))
        .collect();
    if hosts.split(',').any(str::is_empty) {
        return Err(DsnError::Invalid);
    }
    Ok(urls)
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
            let e = Dsn::parse(dsn).unwrap_err();
            assert_eq!(e, DsnError::PgNoDatabase, "{dsn}");
            assert!(
                e.to_string()
                    .contains("e.g. postgres://user@host:5432/receiver"),
                "{e}"
            );
        }
    }

    #[test]
    fn an_option_that_says_again_what_the_url_says_in_its_place_is_refused_by_name() {
        for (query, option, place) in [
            ("dbname=platform", "dbname", "database in its path"),
            ("user=postgres", "user", "user before the @"),
            ("password=other", "password", "password after the user"),
            ("host=10.0.0.9", "host", "host after the @"),
            ("hostaddr=10.0.0.9", "hostaddr", "host after the @"),
            ("port=6432", "port", "port after the host"),
            (
                "sslmode=require&dbname=platform",
                "dbname",
                "database in its path",
            ),
        ] {
            let dsn = format!("postgres://receiver:s3cret@db:5432/inbox?{query}");
            let e = Dsn::parse(&dsn).unwrap_err();
            assert!(
                matches!(&e, DsnError::PgOptionOutOfPlace { option: o, .. } if o == option),
                "{dsn}: {e:?}"
            );
            let text = e.to_string();
            assert!(text.contains(&format!("`{option}`")), "{text}");
            assert!(text.contains(place), "{text}");
            for hidden in ["platform", "10.0.0.9", "6432", "s3cret"] {
                assert!(!text.contains(hidden), "{text}");
            }
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
    fn an_address_of_several_hosts_keeps_each_and_shows_them_without_the_password() {
        let dsn = Dsn::parse(
            "postgres://receiver:s3cret@10.0.0.1:5432,10.0.0.2:5433/inbox?target_session_attrs=read-write&sslmode=prefer",
        )
        .unwrap();
        let hosts: Vec<(String, u16)> = dsn
            .postgres_hosts()
            .iter()
            .map(|o| (o.get_host().to_owned(), o.get_port()))
            .collect();
        assert_eq!(
            hosts,
            [("10.0.0.1".to_owned(), 5432), ("10.0.0.2".to_owned(), 5433)]
        );
        assert!(dsn
            .postgres_hosts()
            .iter()
            .all(|o| o.get_database() == Some("inbox")));
        let shown = dsn.to_string();
        assert_eq!(
            shown,
            "postgres://receiver@10.0.0.1:5432,10.0.0.2:5433/inbox?sslmode=prefer"
        );
    }

    #[test]
    fn a_session_attribute_other_than_read_write_is_refused() {
        let e = Dsn::parse("postgres://r@h1,h2/inbox?target_session_attrs=standby").unwrap_err();
        assert_eq!(
            e,
            DsnError::UnknownPostgresOption {
                option: "target_session_attrs=standby".into()
            }
        );
        assert!(Dsn::parse("postgres://r@h1,,h2/inbox").is_err());
    }

    #[test]
    fn a_root_certificate_without_verification_is_refused() {
        let e =
            Dsn::parse("postgres://r@db/inbox?sslmode=prefer&sslrootcert=/etc/ca.pem").unwrap_err();
        assert_eq!(e, DsnError::PgCaWithoutVerification);
    }
}
