//! The credentials file `orbit-dev bootstrap` writes, and writing secrets to
//! disk with mode 0600.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use serde::{Deserialize, Serialize};

/// The content of a credentials file.
#[derive(Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Credentials {
    /// Base URL of the Orbit API, e.g. `http://127.0.0.1:8080`.
    pub orbit_url: String,
    /// The bearer token. Secret.
    pub token: String,
    /// Id of the queue the token is bound to.
    pub queue_id: String,
    /// Namespace name.
    pub namespace: String,
    /// Application name.
    pub application: String,
    /// Environment name.
    pub environment: String,
    /// Queue name.
    pub queue: String,
    /// The token's scopes.
    pub scopes: Vec<String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("orbit_url", &self.orbit_url)
            .field("token", &"<redacted>")
            .field("queue_id", &self.queue_id)
            .field("namespace", &self.namespace)
            .field("application", &self.application)
            .field("environment", &self.environment)
            .field("queue", &self.queue)
            .field("scopes", &self.scopes)
            .finish()
    }
}

/// Writes `contents` to `path` readable and writable by the owner only
/// (0600), creating missing parent directories. Without `overwrite`, an
/// existing file is an `AlreadyExists` error and is left untouched.
pub fn write_secret_file(path: &Path, contents: &[u8], overwrite: bool) -> io::Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(parent)?;
    }
    let mut options = OpenOptions::new();
    options.write(true).mode(0o600);
    if overwrite {
        options.create(true).truncate(true);
    } else {
        options.create_new(true);
    }
    let mut file = options.open(path)?;
    // An existing file keeps its old mode on open: set it before writing.
    file.set_permissions(fs::Permissions::from_mode(0o600))?;
    file.write_all(contents)?;
    file.sync_all()
}
