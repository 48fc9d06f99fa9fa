//! `receiver inspect event|task`: what is stored about one event or task,
//! one line per row; never a result unless `--show-canonical`.

use result_inbox::ids::{EventId, TaskId};
use result_inbox::inspect::{self, InboxRow, ViewRow};

use crate::args::{required_dsn, DatabaseArgs};
use crate::exit::{config, database_failure, fail, printed, read_only, Outcome, EXIT_FAILED};
use crate::runtime::runtime;
use crate::InspectWhat;

pub(crate) fn run_inspect(database: DatabaseArgs, what: InspectWhat) -> Outcome {
    let dsn = required_dsn(database.dsn).map_err(config)?;
    let runtime = runtime();
    let lines: Vec<String> = match what {
        InspectWhat::Event { id, show_canonical } => {
            let id = EventId::parse(&id)
                .map_err(|_| config("the event id must be 32 lowercase hexadecimal characters"))?;
            let rows = runtime
                .block_on(inspect::event(&dsn, &id))
                .map_err(|e| database_failure("inspect", e, read_only))?;
            if rows.is_empty() {
                return Err(fail(EXIT_FAILED, format!("no inbox row for event {id}")));
            }
            rows.iter()
                .flat_map(|r| inbox_lines(r, show_canonical))
                .collect()
        }
        InspectWhat::Task { id, show_canonical } => {
            let id = TaskId::parse(&id)
                .map_err(|_| config("the task id must be 32 lowercase hexadecimal characters"))?;
            let report = runtime
                .block_on(inspect::task(&dsn, &id))
                .map_err(|e| database_failure("inspect", e, read_only))?;
            if report.views.is_empty() && report.events.is_empty() {
                return Err(fail(EXIT_FAILED, format!("nothing stored for task {id}")));
            }
            let views = report.views.iter().map(view_line);
            let events = report
                .events
                .iter()
                .flat_map(|r| inbox_lines(r, show_canonical));
            views.chain(events).collect()
        }
    };
    printed(lines.join("\n"))
}

/// The row as one line, and the canonical text (which holds the result)
/// on a line of its own when asked for.
fn inbox_lines(row: &InboxRow, show_canonical: bool) -> Vec<String> {
    let described = match row.event() {
        Some(e) => format!(
            "type={} task={} version={} state={} occurred_at={} result_bytes={}",
            e.event_type().as_str(),
            e.task().id,
            e.task().version,
            e.task().state.as_str(),
            e.occurred_at(),
            e.task()
                .result
                .as_ref()
                .map_or_else(|| "none".to_owned(), |r| r.len().to_string()),
        ),
        None => "stored_text=unreadable (run receiver verify)".to_owned(),
    };
    let mut lines = vec![format!(
        "inbox receiver={} queue={} event={} sha256={} applied={} received_at={} {described}",
        row.consumer, row.queue, row.event, row.digest, row.applied, row.received_at
    )];
    if show_canonical {
        lines.push(format!("canonical={}", row.canonical()));
    }
    lines
}

fn view_line(view: &ViewRow) -> String {
    format!(
        "view receiver={} queue={} task={} version={} state={} last_event={} \
         applied_events={} result_bytes={} created_at={} updated_at={}",
        view.consumer,
        view.queue,
        view.task,
        view.version,
        view.state,
        view.last_event,
        view.applied_events,
        view.result_bytes
            .map_or_else(|| "none".to_owned(), |n| n.to_string()),
        view.created_at,
        view.updated_at
    )
}
