//! `receiver init`: the receiver's two tables, created once.

use std::process::ExitCode;

use result_inbox::db::schema;

use crate::args::required_dsn;
use crate::exit::{fail, EXIT_CONFIG, EXIT_FAILED};
use crate::runtime::runtime;

pub(crate) fn run_init(dsn: Option<String>, keep_existing: bool) -> ExitCode {
    let dsn = match required_dsn(dsn) {
        Ok(dsn) => dsn,
        Err(e) => return fail(EXIT_CONFIG, e),
    };
    let existing = if keep_existing {
        schema::Existing::Report
    } else {
        schema::Existing::Refuse
    };
    match runtime().block_on(schema::init_with(&dsn, existing)) {
        Ok(report) => {
            println!(
                "receiver_schema_initialized=true foreign_keys={}",
                report.foreign_keys
            );
            ExitCode::SUCCESS
        }
        Err(e) if e.is_configuration() => fail(EXIT_CONFIG, format!("init on {dsn}: {e}")),
        Err(e) => fail(EXIT_FAILED, format!("init on {dsn}: {e}")),
    }
}
