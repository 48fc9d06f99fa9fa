//! `receiver init`: the receiver's two tables, created once.

use result_inbox::db::schema;

use crate::args::required_dsn;
use crate::exit::{config, failed, printed, Outcome};
use crate::runtime::runtime;

pub(crate) fn run_init(dsn: Option<String>, keep_existing: bool) -> Outcome {
    let dsn = required_dsn(dsn).map_err(config)?;
    let existing = if keep_existing {
        schema::Existing::Report
    } else {
        schema::Existing::Refuse
    };
    let report = runtime()
        .block_on(schema::init_with(&dsn, existing))
        .map_err(|e| {
            let hint = match e {
                schema::InitError::TablesExist { .. } => {
                    " (`receiver init --keep-existing` accepts tables that have every column of schema.sql)"
                }
                _ => "",
            };
            failed(e.is_configuration(), format!("init on {dsn}: {e}{hint}"))
        })?;
    printed(format!(
        "receiver_schema_initialized=true foreign_keys={}",
        report.foreign_keys
    ))
}
