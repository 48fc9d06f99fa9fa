//! `receiver stats`: sizes and growth of both tables.

use std::process::ExitCode;

use result_inbox::stats::{self, Stats};

use crate::args::{required_dsn, DatabaseArgs};
use crate::exit::{config, database_failure, Outcome};
use crate::runtime::runtime;

pub(crate) fn run_stats(
    database: DatabaseArgs,
    older_than: Option<std::time::Duration>,
    json: bool,
) -> Outcome {
    let dsn = required_dsn(database.dsn).map_err(config)?;
    match runtime().block_on(stats::run_with(&dsn, older_than)) {
        Ok(stats) if json => {
            println!(
                "{}",
                serde_json::to_string(&stats).expect("stats serialize")
            );
            Ok(ExitCode::SUCCESS)
        }
        Ok(stats) => {
            for line in lines(&stats) {
                println!("{line}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => Err(database_failure("stats", e)),
    }
}

/// The text report: one `key=value` line per fact.
fn lines(stats: &Stats) -> Vec<String> {
    let mut lines: Vec<String> = stats
        .tables
        .iter()
        .map(|t| {
            format!(
                "table={} rows={} data_bytes={} index_bytes={}",
                t.table, t.rows, t.data_bytes, t.index_bytes
            )
        })
        .collect();
    lines.push(format!(
        "received_at oldest={} newest={} oldest_age_s={}",
        stats.oldest_received_at.as_deref().unwrap_or("-"),
        stats.newest_received_at.as_deref().unwrap_or("-"),
        stats
            .oldest_age_seconds
            .map_or_else(|| "-".to_owned(), |s| s.to_string())
    ));
    if let Some(past) = &stats.past_window {
        lines.push(format!(
            "past_window older_than_s={} rows={} bytes={}",
            past.older_than_seconds, past.rows, past.bytes
        ));
    }
    lines.push(format!(
        "inbox applied={} stale={}",
        stats.applied, stats.stale
    ));
    lines.push(format!(
        "event_bytes average={:.0} largest={}",
        stats.average_event_bytes, stats.largest_event_bytes
    ));
    lines.extend(
        stats
            .events_per_day
            .iter()
            .map(|d| format!("day={} events={}", d.day, d.events)),
    );
    lines.push(format!(
        "growth bytes_per_event={:.0} events_per_day={:.1} bytes_per_day={:.0}",
        stats.inbox_bytes_per_event, stats.average_events_per_day, stats.growth_bytes_per_day
    ));
    lines
}
