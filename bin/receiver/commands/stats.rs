//! `receiver stats`: sizes and growth of both tables.

use clap::Args;

use result_inbox::stats::{self, Stats};

use crate::args::{parse_duration, required_dsn, DatabaseArgs};
use crate::exit::{config, database_failure, read_only, printed, Outcome};
use crate::runtime::runtime;

/// What `stats` is given.
#[derive(Args)]
pub(crate) struct StatsArgs {
    #[command(flatten)]
    database: DatabaseArgs,
    /// Also count the rows received longer ago than this (30d, 36h):
    /// what `prune --older-than` of that window would look at.
    #[arg(long, value_parser = parse_duration)]
    older_than: Option<std::time::Duration>,
    /// One JSON object instead of key=value lines.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run_stats(args: StatsArgs) -> Outcome {
    let dsn = required_dsn(args.database.dsn).map_err(config)?;
    let stats = runtime()
        .block_on(stats::run_with(&dsn, args.older_than))
        .map_err(|e| database_failure("stats", e, read_only))?;
    if args.json {
        printed(serde_json::to_string(&stats).expect("stats serialize"))
    } else {
        printed(lines(&stats).join("\n"))
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
