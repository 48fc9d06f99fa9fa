//! `receiver digest`: the SHA-256 of a document's canonical form.

use std::io::Read;
use std::path::PathBuf;

use result_inbox::digest::{self, MAX_EVENT_BYTES};

use crate::exit::{config, fail, printed, Outcome, EXIT_REJECTED};

pub(crate) fn run_digest(file: Option<PathBuf>) -> Outcome {
    let source = file.filter(|p| p.as_os_str() != "-");
    let input_name = source
        .as_ref()
        .map_or_else(|| "standard input".to_owned(), |p| p.display().to_string());
    let reader: Box<dyn Read> = match &source {
        Some(path) => match std::fs::File::open(path) {
            Ok(f) => Box::new(f),
            Err(e) => return Err(config(format!("cannot read {}: {e}", path.display()))),
        },
        None => Box::new(std::io::stdin()),
    };
    // Read one byte past the limit, never more: an oversized document is
    // reported as too large without being held in memory.
    let mut input = Vec::new();
    reader
        .take(MAX_EVENT_BYTES as u64 + 1)
        .read_to_end(&mut input)
        .map_err(|e| config(format!("cannot read {input_name}: {e}")))?;
    if input.len() > MAX_EVENT_BYTES {
        return Err(fail(
            EXIT_REJECTED,
            format!("invalid document: larger than {MAX_EVENT_BYTES} bytes (512 KiB)"),
        ));
    }
    let d = digest::digest(&input)
        .map_err(|e| fail(EXIT_REJECTED, format!("invalid document: {e}")))?;
    printed(format!("sha256={d}"))
}
