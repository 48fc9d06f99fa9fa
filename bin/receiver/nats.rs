//! `--source nats` and the JetStream notify target in the binary: the
//! `NATS_*` settings and the queue, read into the library's settings. Every
//! error names the variable to fix and never echoes a secret.

use result_inbox::nats::{NatsAuth, NatsSecret, NatsServers, NatsSettings};

use crate::args::{NatsArgs, NatsServerArgs};
use crate::config::{required_queue_id, ConfigError};

impl NatsServerArgs {
    /// The servers and the login; every error names the variable to fix.
    pub(crate) fn servers(self) -> Result<NatsServers, ConfigError> {
        let url = self.nats_url.ok_or(ConfigError::Unset {
            variable: "NATS_URL",
            what: "the NATS server(s), e.g. nats://127.0.0.1:4222",
        })?;
        NatsServers::check_servers(&url)
            .map_err(|problem| ConfigError::invalid("NATS_URL", problem))?;
        let auth = match (self.nats_token, self.nats_creds_file) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::invalid(
                    "NATS_TOKEN",
                    "set NATS_TOKEN or NATS_CREDS_FILE, not both",
                ))
            }
            (Some(token), None) => NatsAuth::Token(NatsSecret::new(token)),
            (None, Some(file)) => NatsAuth::CredsFile(file),
            (None, None) => NatsAuth::None,
        };
        if let Some(ca) = &self.nats_ca_file {
            std::fs::metadata(ca).map_err(|e| {
                ConfigError::invalid("NATS_CA_FILE", format!("{}: {e}", ca.display()))
            })?;
        }
        Ok(NatsServers {
            url,
            auth,
            ca_file: self.nats_ca_file,
            require_tls: self.nats_require_tls,
        })
    }
}

/// Whether `subject` is one subject a message can be published to: no
/// wildcard, no empty token, no white space.
pub(crate) fn is_concrete_subject(subject: &str) -> bool {
    !subject.is_empty()
        && !subject
            .split('.')
            .any(|token| token.is_empty() || token == "*" || token == ">")
        && !subject.chars().any(char::is_whitespace)
}

impl NatsArgs {
    /// Resolves the settings for the queue `queue_id` (`ORBIT_QUEUE_ID`);
    /// every error names the variable to fix.
    pub(crate) fn settings(self, queue_id: Option<String>) -> Result<NatsSettings, ConfigError> {
        let servers = self.server.servers()?;
        let stream = name(
            self.nats_stream,
            "NATS_STREAM",
            "the JetStream stream of the queue's events",
        )?;
        let consumer = name(
            self.nats_consumer,
            "NATS_CONSUMER",
            "the durable pull consumer of that stream",
        )?;
        let queue_id = required_queue_id(
            queue_id,
            "the queue whose events the stream carries (32 hex)",
        )?;
        let subject = self
            .nats_subject
            .unwrap_or_else(|| NatsSettings::default_subject(&queue_id));
        if !is_concrete_subject(&subject) {
            return Err(ConfigError::invalid(
                "NATS_SUBJECT",
                format!("{subject:?} is not one concrete subject (no wildcards, no empty tokens)"),
            ));
        }
        Ok(NatsSettings {
            servers,
            stream,
            consumer,
            subject,
            queue_id,
        })
    }
}

/// A stream or consumer name: JetStream refuses names with `.`, `*`, `>`,
/// slashes or white space.
fn name(
    value: Option<String>,
    variable: &'static str,
    what: &'static str,
) -> Result<String, ConfigError> {
    let value = value.ok_or(ConfigError::Unset { variable, what })?;
    if value.is_empty()
        || value
            .chars()
            .any(|c| c.is_whitespace() || matches!(c, '.' | '*' | '>' | '/' | '\\'))
    {
        return Err(ConfigError::invalid(
            variable,
            format!("{value:?} is not a JetStream name (no '.', '*', '>', slashes or spaces)"),
        ));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    const Q: &str = "0123456789abcdef0123456789abcdef";

    fn nats() -> NatsArgs {
        NatsArgs {
            server: NatsServerArgs {
                nats_url: Some("nats://127.0.0.1:4222".into()),
                ..Default::default()
            },
            nats_stream: Some("ORBIT".into()),
            nats_consumer: Some("receiver".into()),
            ..Default::default()
        }
    }

    #[test]
    fn the_queue_subject_defaults_to_orbit_results_and_the_queue() {
        let settings = nats().settings(Some(Q.into())).unwrap();
        assert_eq!(settings.subject, format!("orbit.results.{Q}"));
    }

    #[test]
    fn a_wildcard_subject_or_a_dotted_stream_name_is_refused_by_name() {
        let err = NatsArgs {
            nats_subject: Some("orbit.results.>".into()),
            ..nats()
        }
        .settings(Some(Q.into()))
        .unwrap_err();
        assert!(err.to_string().starts_with("NATS_SUBJECT"), "{err}");
        let err = NatsArgs {
            nats_stream: Some("a.b".into()),
            ..nats()
        }
        .settings(Some(Q.into()))
        .unwrap_err();
        assert!(err.to_string().starts_with("NATS_STREAM"), "{err}");
    }

    #[test]
    fn a_missing_nats_setting_is_named_and_no_orbit_credentials_are_needed() {
        let err = NatsArgs {
            nats_consumer: None,
            ..nats()
        }
        .settings(Some(Q.into()))
        .unwrap_err();
        assert!(
            err.to_string().starts_with("NATS_CONSUMER is not set"),
            "{err}"
        );
    }

    #[test]
    fn a_token_and_a_creds_file_together_are_refused_without_showing_the_token() {
        let err = NatsArgs {
            server: NatsServerArgs {
                nats_token: Some("sentinel-nats-token".into()),
                nats_creds_file: Some("/etc/receiver.creds".into()),
                ..nats().server
            },
            ..nats()
        }
        .settings(Some(Q.into()))
        .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("not both"), "{text}");
        assert!(!text.contains("sentinel-nats-token"));
    }
}
