//! `receiver stats`: sizes and growth of both tables, and of the outbox
//! where it is there.

use clap::Args;

use result_inbox::stats::{self, Stats};

use crate::args::{parse_duration, required_dsn, DatabaseArgs};
use crate::exit::{config, database_failure, printed, read_only, Outcome};
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

/// The text report: one line per group of facts, each `key=value` under
/// the key `--json` gives it (a group nested in the JSON starts with its
/// name).
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
        "oldest_received_at={} newest_received_at={} oldest_age_s={}",
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
    lines.push(format!("applied={} stale={}", stats.applied, stats.stale));
    lines.push(format!(
        "average_event_bytes={} largest_event_bytes={}",
        stats.average_event_bytes, stats.largest_event_bytes
    ));
    lines.extend(stats.events_per_day.iter().map(|d| match d.effects {
        Some(effects) => format!("day={} events={} effects={effects}", d.day, d.events),
        None => format!("day={} events={}", d.day, d.events),
    }));
    lines.push(format!(
        "inbox_bytes_per_event={} average_events_per_day={} growth_bytes_per_day={}",
        stats.inbox_bytes_per_event, stats.average_events_per_day, stats.growth_bytes_per_day
    ));
    if let Some(outbox) = &stats.outbox {
        lines.push(format!(
            "outbox pending={} sent={} dead={} oldest_pending_age_s={} bytes_per_effect={} \
             average_effects_per_day={} growth_bytes_per_day={}",
            outbox.pending,
            outbox.sent,
            outbox.dead,
            outbox
                .oldest_pending_age_seconds
                .map_or_else(|| "-".to_owned(), |s| s.to_string()),
            outbox.bytes_per_effect,
            outbox.average_effects_per_day,
            outbox.growth_bytes_per_day
        ));
    }
    lines
}
