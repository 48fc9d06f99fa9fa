//! Secrets read from files: for each variable that may hold a secret,
//! `<NAME>_FILE` names a private file whose content is the value, as a
//! service manager's credentials (systemd's `LoadCredential=`) or a
//! container's mounted secrets hand them over, so that no password or
//! token has to sit in an environment file, a unit or a process listing.

use std::path::Path;

use result_inbox::orbit::readable_by_others;

use crate::exit::{config, Failed};

/// The variables that may be given as `<NAME>_FILE`: each may hold a
/// password or a token (a DSN's password, a token, a webhook URL whose
/// path is its key).
pub(crate) const FROM_FILES: [&str; 5] = [
    "ORBIT_RECEIVER_DSN",
    "RECEIVER_PRUNE_DSN",
    "ORBIT_TOKEN",
    "NATS_TOKEN",
    "RECEIVER_NOTIFY_URL",
];

/// Sets each variable of [`FROM_FILES`] whose `<NAME>_FILE` is set from
/// that file, before the arguments are read (a flag still wins). Both set,
/// or a file that cannot be read, is empty, or may be read by its group or
/// others, is a configuration error naming the variable.
///
/// Runs before the runtime or any thread starts: the environment is
/// changed while nothing else can read it.
pub(crate) fn read_secret_files() -> Result<(), Failed> {
    for name in FROM_FILES {
        let file_variable = format!("{name}_FILE");
        let Some(path) = std::env::var_os(&file_variable).filter(|p| !p.is_empty()) else {
            continue;
        };
        if std::env::var_os(name).is_some() {
            return Err(config(format!(
                "{name} and {file_variable} are both set: set one (the file keeps the secret out of the environment's files)"
            )));
        }
        let value = secret_of(Path::new(&path)).map_err(|e| {
            config(format!(
                "{file_variable}: {}: {e}",
                Path::new(&path).display()
            ))
        })?;
        std::env::set_var(name, value);
    }
    Ok(())
}

/// The file's content without its trailing newline.
fn secret_of(path: &Path) -> Result<String, String> {
    if readable_by_others(path).map_err(|e| format!("cannot read it: {e}"))? {
        return Err("may be read by its group or others; it holds a secret: chmod 600 it".into());
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read it: {e}"))?;
    let value = text.trim_end_matches(['\n', '\r']);
    if value.is_empty() {
        return Err("is empty".into());
    }
    Ok(value.to_owned())
}
