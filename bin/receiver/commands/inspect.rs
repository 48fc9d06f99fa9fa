//! `receiver inspect event|task`: what is stored about one event or task.

use std::process::ExitCode;

use result_inbox::event::{EventId, TaskId};
use result_inbox::inspect::{self, Inspect};

use crate::args::{required_dsn, DatabaseArgs};
use crate::exit::{config, database_failure, fail, Outcome, EXIT_CONFIG, EXIT_FAILED};
use crate::runtime::runtime;
use crate::InspectWhat;

pub(crate) fn run_inspect(database: DatabaseArgs, what: InspectWhat) -> Outcome {
    let dsn = required_dsn(database.dsn).map_err(config)?;
    let runtime = runtime();
    match what {
        InspectWhat::Event { id, show_canonical } => {
            let Some(id) = EventId::parse(&id) else {
                return Err(fail(
                    EXIT_CONFIG,
                    "the event id must be 32 lowercase hexadecimal characters",
                ));
            };
            let options = Inspect { show_canonical };
            match runtime.block_on(inspect::event(&dsn, &id)) {
                Ok(rows) if rows.is_empty() => {
                    Err(fail(EXIT_FAILED, format!("no inbox row for event {id}")))
                }
                Ok(rows) => {
                    for line in rows.iter().flat_map(|r| r.lines(options)) {
                        println!("{line}");
                    }
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => Err(database_failure("inspect", e)),
            }
        }
        InspectWhat::Task { id, show_canonical } => {
            let Some(id) = TaskId::parse(&id) else {
                return Err(fail(
                    EXIT_CONFIG,
                    "the task id must be 32 lowercase hexadecimal characters",
                ));
            };
            let options = Inspect { show_canonical };
            match runtime.block_on(inspect::task(&dsn, &id)) {
                Ok(report) if report.views.is_empty() && report.events.is_empty() => {
                    Err(fail(EXIT_FAILED, format!("nothing stored for task {id}")))
                }
                Ok(report) => {
                    for view in &report.views {
                        println!("{}", view.line);
                    }
                    for line in report.events.iter().flat_map(|r| r.lines(options)) {
                        println!("{line}");
                    }
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => Err(database_failure("inspect", e)),
            }
        }
    }
}
