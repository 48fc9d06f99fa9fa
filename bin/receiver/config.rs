//! How the `receiver` commands find Orbit: URL, token and queue, and which
//! certificate authorities to trust for `https://`.
//!
//! The credentials file written by bootstrap supplies the first three;
//! `ORBIT_URL`, `ORBIT_TOKEN` and `ORBIT_QUEUE_ID` override it field by field.
//! `ORBIT_CA_FILE` adds a private CA to Mozilla's root certificates. Every
//! error names the variable to fix and never echoes a secret.

use result_inbox::ids::QueueId;
use result_inbox::orbit::{Credentials, CredentialsError, OrbitTls, OrbitUrl, Token};

use crate::args::OrbitArgs;

/// Where Orbit is and who we are there.
#[derive(Debug, Clone)]
pub struct OrbitSettings {
    /// The API's base URL.
    pub url: OrbitUrl,
    /// The queue token.
    pub token: Token,
    /// The queue this receiver consumes.
    pub queue_id: QueueId,
    /// The certificate authorities trusted for `https://` and `wss://`.
    pub tls: OrbitTls,
}

/// A configuration that cannot work.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A required setting is absent.
    #[error("{0} is not set (and no credentials file supplies it)")]
    Missing(&'static str),
    /// A setting is malformed.
    #[error("{variable}: {problem}")]
    Invalid {
        /// The variable.
        variable: &'static str,
        /// What is wrong with it.
        problem: String,
    },
    /// The credentials file cannot be used.
    #[error("ORBIT_CREDENTIALS_FILE: {0}")]
    Credentials(#[from] CredentialsError),
    /// A setting without which the chosen source cannot work is absent.
    #[cfg_attr(not(any(feature = "nats", feature = "rabbitmq")), allow(dead_code))]
    #[error("{variable} is not set: {what}")]
    Unset {
        /// The variable.
        variable: &'static str,
        /// What it is for.
        what: &'static str,
    },
}

impl ConfigError {
    pub(crate) fn invalid(variable: &'static str, problem: impl Into<String>) -> Self {
        ConfigError::Invalid {
            variable,
            problem: problem.into(),
        }
    }
}

impl OrbitArgs {
    /// The credentials file, when one is configured.
    fn credentials(&self) -> Result<Option<Credentials>, ConfigError> {
        Ok(self
            .credentials_file
            .as_deref()
            .map(Credentials::load)
            .transpose()?)
    }

    /// The queue, as `--source nats` needs it of Orbit's settings:
    /// `ORBIT_QUEUE_ID`, else the credentials file's (the file written by
    /// `bootstrap` serves both sources), else none.
    pub(crate) fn queue_id(&self) -> Result<Option<String>, ConfigError> {
        if let Some(queue) = &self.queue_id {
            return Ok(Some(queue.clone()));
        }
        Ok(self.credentials()?.map(|f| f.queue_id.to_string()))
    }

    /// Resolves the settings: explicit values first, then the credentials
    /// file. Reads the CA file, if any, so that an unusable one is a
    /// configuration error before any connection.
    pub(crate) fn settings(self) -> Result<OrbitSettings, ConfigError> {
        let file = self.credentials()?;
        let url = self
            .orbit_url
            .or_else(|| file.as_ref().and_then(|f| f.orbit_url.clone()))
            .ok_or(ConfigError::Missing("ORBIT_URL"))?;
        let url =
            OrbitUrl::parse(&url).map_err(|e| ConfigError::invalid("ORBIT_URL", e.to_string()))?;
        let token = self
            .token
            .map(Token::new)
            .or_else(|| file.as_ref().map(|f| f.token.clone()))
            .ok_or(ConfigError::Missing("ORBIT_TOKEN"))?;
        let queue_id = match self.queue_id {
            Some(q) => parse_queue_id(&q)?,
            None => file
                .as_ref()
                .map(|f| f.queue_id.clone())
                .ok_or(ConfigError::Missing("ORBIT_QUEUE_ID"))?,
        };
        let tls = match &self.orbit_ca_file {
            Some(path) => OrbitTls::with_ca_file(path)
                .map_err(|e| ConfigError::invalid("ORBIT_CA_FILE", e.to_string()))?,
            None => OrbitTls::public_roots(),
        };
        Ok(OrbitSettings {
            url,
            token,
            queue_id,
            tls,
        })
    }
}

/// `ORBIT_QUEUE_ID` as a broker's source needs it: set, and a queue id;
/// `what` says what the queue is to that broker.
#[cfg_attr(not(any(feature = "nats", feature = "rabbitmq")), allow(dead_code))]
pub(crate) fn required_queue_id(
    queue_id: Option<String>,
    what: &'static str,
) -> Result<QueueId, ConfigError> {
    let queue_id = queue_id.ok_or(ConfigError::Unset {
        variable: "ORBIT_QUEUE_ID",
        what,
    })?;
    parse_queue_id(&queue_id)
}

fn parse_queue_id(value: &str) -> Result<QueueId, ConfigError> {
    QueueId::parse(value).map_err(|_| {
        ConfigError::invalid(
            "ORBIT_QUEUE_ID",
            "must be 32 lowercase hexadecimal characters",
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const Q: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn explicit_values_need_no_credentials_file() {
        let settings = OrbitArgs {
            orbit_url: Some("http://127.0.0.1:8080".into()),
            token: Some("t".into()),
            queue_id: Some(Q.into()),
            ..Default::default()
        }
        .settings()
        .unwrap();
        assert_eq!(settings.queue_id.as_str(), Q);
    }

    #[test]
    fn a_missing_setting_is_named() {
        let err = OrbitArgs {
            orbit_url: Some("http://127.0.0.1:8080".into()),
            queue_id: Some(Q.into()),
            ..Default::default()
        }
        .settings()
        .unwrap_err();
        assert!(err.to_string().starts_with("ORBIT_TOKEN"), "{err}");
    }

    #[test]
    fn a_bad_queue_id_is_refused() {
        let err = OrbitArgs {
            orbit_url: Some("http://127.0.0.1:8080".into()),
            token: Some("t".into()),
            queue_id: Some("inbox-demo".into()),
            ..Default::default()
        }
        .settings()
        .unwrap_err();
        assert!(err.to_string().starts_with("ORBIT_QUEUE_ID"), "{err}");
    }

    #[test]
    fn an_unreadable_ca_file_is_named_before_any_connection() {
        let err = OrbitArgs {
            orbit_url: Some("https://127.0.0.1:8443".into()),
            token: Some("sentinel-token".into()),
            queue_id: Some(Q.into()),
            orbit_ca_file: Some("/nonexistent/orbit-ca.pem".into()),
            ..Default::default()
        }
        .settings()
        .unwrap_err();
        let text = err.to_string();
        assert!(text.starts_with("ORBIT_CA_FILE"), "{text}");
        assert!(text.contains("/nonexistent/orbit-ca.pem"), "{text}");
        assert!(!text.contains("sentinel-token"));
    }

    #[test]
    fn without_a_ca_file_only_the_public_roots_are_trusted() {
        let settings = OrbitArgs {
            orbit_url: Some("https://orbit.example".into()),
            token: Some("t".into()),
            queue_id: Some(Q.into()),
            ..Default::default()
        }
        .settings()
        .unwrap();
        assert!(settings.url.is_tls());
        assert_eq!(settings.tls.private_cas(), 0);
    }

    #[test]
    fn an_unreadable_credentials_file_is_reported_with_its_path() {
        let err = OrbitArgs {
            credentials_file: Some("/nonexistent/creds.json".into()),
            ..Default::default()
        }
        .settings()
        .unwrap_err();
        assert!(err.to_string().contains("/nonexistent/creds.json"), "{err}");
    }
}
