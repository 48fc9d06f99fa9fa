//! `receiver stats`: sizes and growth of both tables.

use std::process::ExitCode;

use result_inbox::stats;

use crate::args::{required_dsn, DatabaseArgs};
use crate::exit::{database_failure, fail, EXIT_CONFIG};
use crate::runtime::runtime;

pub(crate) fn run_stats(database: DatabaseArgs, json: bool) -> ExitCode {
    let dsn = match required_dsn(database.dsn) {
        Ok(dsn) => dsn,
        Err(e) => return fail(EXIT_CONFIG, e),
    };
    match runtime().block_on(stats::run(&dsn)) {
        Ok(stats) if json => {
            println!(
                "{}",
                serde_json::to_string(&stats).expect("stats serialize")
            );
            ExitCode::SUCCESS
        }
        Ok(stats) => {
            for line in stats.lines() {
                println!("{line}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => database_failure("stats", e),
    }
}
