//! `receiver stats`: sizes and growth of both tables.

use std::process::ExitCode;

use result_inbox::stats;

use crate::args::{required_dsn, DatabaseArgs};
use crate::exit::{config, database_failure, Outcome};
use crate::runtime::runtime;

pub(crate) fn run_stats(database: DatabaseArgs, json: bool) -> Outcome {
    let dsn = required_dsn(database.dsn).map_err(config)?;
    match runtime().block_on(stats::run(&dsn)) {
        Ok(stats) if json => {
            println!(
                "{}",
                serde_json::to_string(&stats).expect("stats serialize")
            );
            Ok(ExitCode::SUCCESS)
        }
        Ok(stats) => {
            for line in stats.lines() {
                println!("{line}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => Err(database_failure("stats", e)),
    }
}
