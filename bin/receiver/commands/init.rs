//! `receiver init`: the receiver's two tables, created once.

use std::process::ExitCode;

use result_inbox::db::schema;

use crate::args::required_dsn;
use crate::exit::{config, fail, Outcome, EXIT_CONFIG, EXIT_FAILED};
use crate::runtime::runtime;

pub(crate) fn run_init(dsn: Option<String>, keep_existing: bool) -> Outcome {
    let dsn = required_dsn(dsn).map_err(config)?;
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
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            let code = if e.is_configuration() {
                EXIT_CONFIG
            } else {
                EXIT_FAILED
            };
            let hint = match e {
                schema::InitError::TablesExist { .. } => {
                    " (`receiver init --keep-existing` accepts tables that have every column of schema.sql)"
                }
                _ => "",
            };
            Err(fail(code, format!("init on {dsn}: {e}{hint}")))
        }
    }
}
