//! `receiver init`: the receiver's two tables, created once; prune's tally
//! and the outbox with them, or beside them later, when asked. On MySQL or PostgreSQL, as
//! the address says.

use result_inbox::db::schema::{self, Existing, InitError, InitOptions};

use crate::args::required_dsn;
use crate::exit::{config, failed, printed, Outcome};
use crate::runtime::runtime;

pub(crate) fn run_init(
    dsn: Option<String>,
    keep_existing: bool,
    retention: bool,
    outbox: bool,
) -> Outcome {
    let dsn = required_dsn(dsn).map_err(config)?;
    let options = InitOptions {
        existing: if keep_existing {
            Existing::Report
        } else {
            Existing::Refuse
        },
        retention,
        outbox,
    };
    let report = runtime()
        .block_on(schema::init_with(&dsn, options))
        .map_err(|e| {
            let file = schema::schema_file(dsn.engine());
            let hint = match e {
                InitError::TablesExist { .. } if outbox => format!(
                    " (`receiver init --keep-existing --outbox` adds receiver_outbox beside tables that have every column of {file})"
                ),
                InitError::TablesExist { .. } if retention => format!(
                    " (`receiver init --keep-existing --retention` adds receiver_pruned beside tables that have every column of {file})"
                ),
                InitError::TablesExist { .. } => format!(
                    " (`receiver init --keep-existing` accepts tables that have every column of {file})"
                ),
                _ => String::new(),
            };
            failed(e.is_configuration(), format!("init on {dsn}: {e}{hint}"))
        })?;
    printed(format!(
        "receiver_schema_initialized=true foreign_keys={}",
        report.foreign_keys
    ))
}
