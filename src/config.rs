//! How the `receiver` commands find Orbit: URL, token and queue, and which
//! certificate authorities to trust for `https://`.
//!
//! The credentials file written by bootstrap supplies the first three;
//! `ORBIT_URL`, `ORBIT_TOKEN` and `ORBIT_QUEUE_ID` override it field by field.
//! `ORBIT_CA_FILE` adds a private CA to Mozilla's root certificates.
//! Every error names the variable to fix and never echoes a secret.

use std::path::PathBuf;

use crate::ids::QueueId;
use crate::orbit::{
    Credentials, CredentialsError, OrbitClient, OrbitError, OrbitTls, OrbitUrl, Token,
};

/// The Orbit settings as given (environment or flags), before resolution.
#[derive(Debug, Default, Clone)]
pub struct OrbitSource {
    /// `ORBIT_URL`.
    pub url: Option<String>,
    /// `ORBIT_CREDENTIALS_FILE`.
    pub credentials_file: Option<PathBuf>,
    /// `ORBIT_TOKEN` (overrides the file's token).
    pub token: Option<Token>,
    /// `ORBIT_QUEUE_ID` (overrides the file's queue).
    pub queue_id: Option<String>,
    /// `ORBIT_CA_FILE`: PEM certificate(s) of a private CA, trusted besides
    /// Mozilla's roots for `https://`.
    pub ca_file: Option<PathBuf>,
}

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

impl OrbitSettings {
    /// A client of this deployment with this token, every call limited to
    /// `timeout`, trusting the configured certificate authorities.
    pub fn client(&self, timeout: std::time::Duration) -> Result<OrbitClient, OrbitError> {
        OrbitClient::with_tls(
            self.url.clone(),
            self.token.clone(),
            timeout,
            self.tls.clone(),
        )
    }
}

/// A configuration that cannot work.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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
}

impl OrbitSource {
    /// Resolves the settings: explicit values first, then the credentials
    /// file. Reads the CA file, if any, so that an unusable one is a
    /// configuration error before any connection.
    pub fn resolve(self) -> Result<OrbitSettings, ConfigError> {
        let file = self
            .credentials_file
            .as_deref()
            .map(Credentials::load)
            .transpose()?;
        let url = self
            .url
            .or_else(|| file.as_ref().and_then(|f| f.orbit_url.clone()))
            .ok_or(ConfigError::Missing("ORBIT_URL"))?;
        let url = OrbitUrl::parse(&url).map_err(|e| ConfigError::Invalid {
            variable: "ORBIT_URL",
            problem: e.to_string(),
        })?;
        let token = self
            .token
            .or_else(|| file.as_ref().map(|f| f.token.clone()))
            .ok_or(ConfigError::Missing("ORBIT_TOKEN"))?;
        let queue_id = match self.queue_id {
            Some(q) => QueueId::parse(&q).ok_or_else(|| ConfigError::Invalid {
                variable: "ORBIT_QUEUE_ID",
                problem: "must be 32 lowercase hexadecimal characters".into(),
            })?,
            None => file
                .as_ref()
                .map(|f| f.queue_id.clone())
                .ok_or(ConfigError::Missing("ORBIT_QUEUE_ID"))?,
        };
        let tls = match &self.ca_file {
            Some(path) => OrbitTls::with_ca_file(path).map_err(|e| ConfigError::Invalid {
                variable: "ORBIT_CA_FILE",
                problem: e.to_string(),
            })?,
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

#[cfg(test)]
mod tests {
    use super::*;

    const Q: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn explicit_values_need_no_credentials_file() {
        let settings = OrbitSource {
            url: Some("http://127.0.0.1:8080".into()),
            token: Some(Token::new("t")),
            queue_id: Some(Q.into()),
            ..Default::default()
        }
        .resolve()
        .unwrap();
        assert_eq!(settings.queue_id.as_str(), Q);
    }

    #[test]
    fn a_missing_setting_is_named() {
        let err = OrbitSource {
            url: Some("http://127.0.0.1:8080".into()),
            queue_id: Some(Q.into()),
            ..Default::default()
        }
        .resolve()
        .unwrap_err();
        assert!(err.to_string().starts_with("ORBIT_TOKEN"), "{err}");
    }

    #[test]
    fn a_bad_queue_id_is_refused() {
        let err = OrbitSource {
            url: Some("http://127.0.0.1:8080".into()),
            token: Some(Token::new("t")),
            queue_id: Some("inbox-demo".into()),
            ..Default::default()
        }
        .resolve()
        .unwrap_err();
        assert!(err.to_string().starts_with("ORBIT_QUEUE_ID"), "{err}");
    }

    #[test]
    fn an_unreadable_ca_file_is_named_before_any_connection() {
        let err = OrbitSource {
            url: Some("https://127.0.0.1:8443".into()),
            token: Some(Token::new("sentinel-token")),
            queue_id: Some(Q.into()),
            ca_file: Some("/nonexistent/orbit-ca.pem".into()),
            ..Default::default()
        }
        .resolve()
        .unwrap_err();
        let text = err.to_string();
        assert!(text.starts_with("ORBIT_CA_FILE"), "{text}");
        assert!(text.contains("/nonexistent/orbit-ca.pem"), "{text}");
        assert!(!text.contains("sentinel-token"));
    }

    #[test]
    fn without_a_ca_file_only_the_public_roots_are_trusted() {
        let settings = OrbitSource {
            url: Some("https://orbit.example".into()),
            token: Some(Token::new("t")),
            queue_id: Some(Q.into()),
            ..Default::default()
        }
        .resolve()
        .unwrap();
        assert!(settings.url.is_tls());
        assert_eq!(settings.tls.private_cas(), 0);
    }

    #[test]
    fn an_unreadable_credentials_file_is_reported_with_its_path() {
        let err = OrbitSource {
            credentials_file: Some("/nonexistent/creds.json".into()),
            ..Default::default()
        }
        .resolve()
        .unwrap_err();
        assert!(err.to_string().contains("/nonexistent/creds.json"), "{err}");
    }
}
