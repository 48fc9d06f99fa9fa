//! `receiver verify`: both tables read once, their agreement checked.

use std::process::ExitCode;

use result_inbox::verify;

use crate::args::{required_dsn, DatabaseArgs};
use crate::exit::{config, database_failure, Outcome, EXIT_FAILED};
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
    let bar =
        indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::stderr());
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} rows {per_sec} {eta}")
            .expect("a valid template"),
    );
    let mut progress = VerifyProgress { bar };
    let outcome = runtime().block_on(verify::run(&dsn, &mut progress));
    progress.bar.finish_and_clear();
    match outcome {
        Ok(summary) => {
            println!("{summary}");
            if summary.ok() {
                Ok(ExitCode::SUCCESS)
            } else {
                Ok(ExitCode::from(EXIT_FAILED))
            }
        }
        Err(e) => Err(database_failure("verify", e)),
    }
}
