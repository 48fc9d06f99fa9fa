//! The credentials file written by bootstrap (`ORBIT_CREDENTIALS_FILE`).

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::Token;
use crate::ids::QueueId;

/// What a consumer needs from the credentials file.
#[derive(Debug, Clone)]
pub struct Credentials {
    /// The API's base URL, if the file names one.
    pub orbit_url: Option<String>,
    /// The queue token.
    pub token: Token,
    /// The queue the token is bound to.
    pub queue_id: QueueId,
}

/// Why the credentials file cannot be used. Never quotes the file's content.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CredentialsError {
    /// The file cannot be read.
    #[error("cannot read credentials file {path}: {source}")]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Group or others may read it: a token file must be private (mode 0600).
    #[error("credentials file {0} is readable by group or others; make it private (chmod 600)")]
    NotPrivate(PathBuf),
    /// Not the JSON the protocol describes.
    #[error("credentials file {path} is not valid: {problem}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong, without content.
        problem: &'static str,
    },
}

#[derive(Deserialize)]
struct WireCredentials {
    orbit_url: Option<String>,
    token: String,
    queue_id: String,
}

/// Whether a file that holds a secret may be read by its group or by
/// others (mode bits `0o077`): such a file is refused, whoever could read
/// it could act with the secret. Always `false` where there are no Unix
/// modes.
pub fn readable_by_others(path: &Path) -> std::io::Result<bool> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path)?.permissions().mode();
        Ok(mode & 0o077 != 0)
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        Ok(false)
    }
}

impl Credentials {
    /// Reads and checks a credentials file.
    pub fn load(path: &Path) -> Result<Self, CredentialsError> {
        let unreadable = |source| CredentialsError::Unreadable {
            path: path.to_owned(),
            source,
        };
        if readable_by_others(path).map_err(unreadable)? {
            return Err(CredentialsError::NotPrivate(path.to_owned()));
        }
        let bytes = std::fs::read(path).map_err(unreadable)?;
        let invalid = |problem| CredentialsError::Invalid {
            path: path.to_owned(),
            problem,
        };
        let wire: WireCredentials = serde_json::from_slice(&bytes)
            .map_err(|_| invalid("expected a JSON object with token and queue_id"))?;
        if wire.token.is_empty() {
            return Err(invalid("token is empty"));
        }
        let queue_id = QueueId::parse(&wire.queue_id)
            .map_err(|_| invalid("queue_id is not 32 lowercase hex characters"))?;
        Ok(Credentials {
            orbit_url: wire.orbit_url,
            token: Token::new(wire.token),
            queue_id,
        })
    }
}
