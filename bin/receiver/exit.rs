//! Exit codes, and how a failure becomes one: 0 success, 1 the operation
//! failed (database, platform), 2 usage or configuration error, 3 the input
//! was rejected.

use std::process::ExitCode;

use result_inbox::db::{errno, DbError};

use crate::check::missing_table_hint;

/// Exit code: the operation failed.
pub(crate) const EXIT_FAILED: u8 = 1;
/// Exit code: usage or configuration error.
pub(crate) const EXIT_CONFIG: u8 = 2;
/// Exit code: the input was rejected.
pub(crate) const EXIT_REJECTED: u8 = 3;

/// A failure already reported on stderr, with the exit code it ends in.
#[derive(Debug)]
pub(crate) struct Failed(ExitCode);

/// What a command ends in: its exit code, or a reported failure.
pub(crate) type Outcome = Result<ExitCode, Failed>;

/// Reports `message` on stderr as the receiver's; the process ends in
/// `code`.
pub(crate) fn fail(code: u8, message: impl std::fmt::Display) -> Failed {
    crate::logging::report_fatal(&message.to_string(), code);
    Failed(ExitCode::from(code))
}

/// A usage or configuration error (exit code 2).
pub(crate) fn config(message: impl std::fmt::Display) -> Failed {
    fail(EXIT_CONFIG, message)
}

/// A configuration error (exit code 2) when `configuration`, else a failed
/// operation (exit code 1).
pub(crate) fn failed(configuration: bool, message: impl std::fmt::Display) -> Failed {
    let code = if configuration {
        EXIT_CONFIG
    } else {
        EXIT_FAILED
    };
    fail(code, message)
}

/// Prints `report` (one line or several) on stdout: exit code 0.
pub(crate) fn printed(report: impl std::fmt::Display) -> Outcome {
    println!("{report}");
    Ok(ExitCode::SUCCESS)
}

/// Exit code 0 when `ok`, else 1.
pub(crate) fn passed(ok: bool) -> Outcome {
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_FAILED)
    })
}

/// The exit code of a command's outcome.
pub(crate) fn exit_code(outcome: Outcome) -> ExitCode {
    outcome.unwrap_or_else(|Failed(code)| code)
}

/// A database failure: the configuration's to fix (a refused login, an
/// unknown database, a missing grant) or a failure. A missing table names
/// what creates it and the grants the command's account needs on it
/// (`grants` of the table).
pub(crate) fn database_failure(what: &str, e: DbError, grants: fn(&str) -> &'static str) -> Failed {
    if let Some(table) = e.missing_table() {
        let hint = missing_table_hint(table, grants(table));
        return config(format!("{what}: table {table} is missing ({hint})"));
    }
    let configuration = e.is_refusal() || e.number() == Some(errno::NO_SUCH_TABLE);
    failed(configuration, format!("{what}: database: {e}"))
}

/// What a read-only tool's account needs on every table.
pub(crate) fn read_only(_table: &str) -> &'static str {
    "SELECT"
}
