//! `receiver verify`: both tables read once, their agreement checked.

use result_inbox::verify;

use super::Progress;
use crate::args::{required_dsn, DatabaseArgs};
use crate::exit::{config, database_failure, passed, read_only, Outcome};
use crate::runtime::runtime;

/// `receiver verify`'s findings go to stdout, past the progress bar.
impl verify::Report for Progress {
    fn total(&mut self, rows: u64) {
        self.0.set_length(rows);
    }

    fn advance(&mut self, rows: u64) {
        self.0.inc(rows);
    }

    fn finding(&mut self, finding: verify::Finding) {
        self.0.suspend(|| println!("{finding}"));
    }
}

pub(crate) fn run_verify(database: DatabaseArgs) -> Outcome {
    let dsn = required_dsn(database.dsn).map_err(config)?;
    let mut progress = Progress::new("{bar:40} {pos}/{len} rows {per_sec} {eta}");
    let outcome = runtime().block_on(verify::run(&dsn, &mut progress));
    progress.0.finish_and_clear();
    let summary = outcome.map_err(|e| database_failure("verify", e, read_only))?;
    println!("{summary}");
    passed(summary.ok())
}
