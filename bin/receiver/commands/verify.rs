//! `receiver verify`: both tables read once, their agreement checked.

use result_inbox::verify;

use super::progress_bar;
use crate::args::{required_dsn, DatabaseArgs};
use crate::exit::{config, database_failure, passed, Outcome};
use crate::runtime::runtime;

/// `receiver verify`'s progress bar on stderr (drawn only on a terminal)
/// and its findings on stdout.
pub(crate) struct VerifyProgress {
    bar: indicatif::ProgressBar,
}

impl verify::Report for VerifyProgress {
    fn total(&mut self, rows: u64) {
        self.bar.set_length(rows);
    }

    fn advance(&mut self, rows: u64) {
        self.bar.inc(rows);
    }

    fn finding(&mut self, finding: verify::Finding) {
        self.bar.suspend(|| println!("{finding}"));
    }
}

pub(crate) fn run_verify(database: DatabaseArgs) -> Outcome {
    let dsn = required_dsn(database.dsn).map_err(config)?;
    let mut progress = VerifyProgress {
        bar: progress_bar("{bar:40} {pos}/{len} rows {per_sec} {eta}"),
    };
    let outcome = runtime().block_on(verify::run(&dsn, &mut progress));
    progress.bar.finish_and_clear();
    match outcome {
        Ok(summary) => {
            println!("{summary}");
            passed(summary.ok())
        }
        Err(e) => Err(database_failure("verify", e)),
    }
}
