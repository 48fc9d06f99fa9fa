//! `receiver`: the command-line face of result-inbox.
//!
//! Thin by design: parse arguments, set up logging, call the library, map the
//! outcome to an exit code. Exit codes: 0 success, 1 the operation failed
//! (database, platform), 2 usage or configuration error, 3 the input was
//! rejected.
//!
//! The application lives here, beside the library: one file per command in
//! `commands/`, the flows too large for one (`check/`, shared with
//! `consume` and `demo`; `demo/`), configuration from the environment
//! (`config.rs`, `args.rs`), the health endpoint, logging, signals.

mod args;
mod check;
mod commands;
mod config;
mod demo;
mod exit;
mod failed;
mod health;
mod logging;
#[cfg(feature = "nats")]
mod nats;
mod notify;
#[cfg(feature = "otel")]
mod otel;
#[cfg(not(feature = "otel"))]
#[path = "untraced.rs"]
mod otel;
#[cfg(feature = "rabbitmq")]
mod rabbitmq;
mod relay_options;
mod replication;
mod runtime;
mod secret_files;
mod systemd;
mod usage;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::args::{DatabaseArgs, Receiver};
use crate::commands::check::CheckArgs;
use crate::commands::consume::ConsumeArgs;
use crate::commands::failures::FailuresArgs;
use crate::commands::outbox::OutboxArgs;
use crate::commands::prune::PruneArgs;
use crate::commands::relay::RelayArgs;
use crate::commands::replay::ReplayArgs;
use crate::commands::stats::StatsArgs;
use crate::commands::subscribe::SubscribeArgs;
use crate::exit::{config, exit_code, Outcome};
use crate::logging::init_logging;

#[derive(Parser)]
#[command(
    name = "receiver",
    version,
    about = "Receive Orbit task results exactly once in effect (inbox + task result view in MySQL or PostgreSQL).",
    after_help = "Exit codes: 0 success, 1 operation failed, 2 usage or configuration error, 3 input rejected.\n\
Logs go to stderr. RECEIVER_LOG (else RUST_LOG) sets the filter (default warn,result_inbox=info,receiver=info,sqlx=error);\n\
RECEIVER_LOG_FORMAT=json writes one JSON object per line (default text)."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create the receiver's two tables in an empty database
    ///
    /// The tables of schema.sql (on PostgreSQL schema.postgres.sql):
    /// receiver_inbox and receiver_task_views. Runs only the initial DDL: if
    /// any receiver table exists it stops with an error and changes
    /// nothing. Needs the CREATE privilege: on the database on MySQL, on
    /// the schema on PostgreSQL. Creates receiver_pruned, the table `prune`
    /// counts in, only with --retention, and receiver_outbox only with
    /// --outbox.
    Init {
        /// The receiver's database, e.g. mysql://admin@127.0.0.1:3306/receiver
        /// or postgres://owner@127.0.0.1:5432/receiver. Must name the
        /// database. Never the platform's database.
        #[arg(long, env = "ORBIT_RECEIVER_DSN", hide_env_values = true)]
        dsn: Option<String>,
        /// When both tables already exist with every column of schema.sql
        /// (schema.postgres.sql), change nothing and print the same line as
        /// a fresh init (foreign keys counted); a partial or different
        /// schema still fails.
        #[arg(long)]
        keep_existing: bool,
        /// Also create receiver_pruned (retention.sql, retention.postgres.sql),
        /// which `prune` needs: after the two tables on an empty database;
        /// with --keep-existing, alone beside them, changing nothing else.
        #[arg(long)]
        retention: bool,
        /// Also create receiver_outbox (outbox.sql, outbox.postgres.sql), the
        /// effects recorded in the inbox's transaction to be sent after
        /// COMMIT: after the two tables on an empty database; with
        /// --keep-existing, alone beside them, changing nothing else.
        #[arg(long)]
        outbox: bool,
    },
    /// Run the whole flow once against a dedicated queue
    ///
    /// Subscribes to task.cancelled, submits and cancels
    /// a task, apply its event twice (applied, then duplicate), ACK, check the
    /// view, pause the subscription. Needs a dedicated queue and a token with
    /// events:read, events:consume, events:manage, tasks:submit, tasks:cancel.
    /// Checks the database and the token first; finishes within 20 s; on
    /// failure everything it created is kept for inspection.
    Demo(Receiver),
    /// Consume a subscription (or NATS consumer) until SIGINT/SIGTERM
    ///
    /// Concurrency 4, --prefetch more leased ahead, shutdown within 10 s. Needs only
    /// events:read and events:consume on the subscription's queue. Never
    /// pauses the subscription.
    ///
    /// Before anything is leased it checks the database (tables, columns,
    /// SELECT/INSERT/UPDATE), the token's scopes and the subscription's queue;
    /// a server not reachable yet is waited for, a refusal stops it (exit 2).
    /// While the database is unreachable it takes no deliveries.
    ///
    /// With --source nats it consumes a NATS JetStream durable pull consumer
    /// instead (checked first: stream, consumer, filter subject); Orbit's
    /// URL, token and subscription are not needed then, only ORBIT_QUEUE_ID.
    Consume(ConsumeArgs),
    /// Check everything consume needs, changing nothing
    ///
    /// Checks the database (reachable, tables and columns, SELECT/INSERT/UPDATE)
    /// and Orbit (reachable, token, scopes, subscription bound to the queue)
    /// without changing anything. One line per check; exit 0 only if all pass,
    /// 1 if one fails (a missing ORBIT_SUBSCRIPTION_ID fails the subscription
    /// check after the others ran), 2 if a setting cannot be read before any
    /// check (no ORBIT_RECEIVER_DSN, a malformed value).
    ///
    /// With --source nats it checks the database and NATS instead: the
    /// server (reachable, login, TLS) and the stream's durable pull consumer
    /// (explicit acks, filter subject = the queue's subject), as consume
    /// does before fetching anything.
    Check(CheckArgs),
    /// Create the subscription (or NATS consumer) consume reads
    ///
    /// Creates a subscription on the configured queue for the given event
    /// types and prints `subscription=<32 hex>`, the ORBIT_SUBSCRIPTION_ID of
    /// `consume`. Needs events:manage.
    ///
    /// With --source nats it makes sure NATS_CONSUMER exists on NATS_STREAM
    /// as `consume --source nats` needs it: a missing one is created (durable,
    /// pull, explicit acks, the queue's subject, --ack-wait, --max-deliver),
    /// an existing one is only checked, never changed; and the failures
    /// stream that records what JetStream gives up on, for `receiver
    /// failures`. Prints `consumer=<name> stream=<stream> created|existing
    /// ack_wait_s=… max_deliver=…`, then `failures=<stream> created|existing`.
    Subscribe(SubscribeArgs),
    /// List the deliveries the source gave up on, each diagnosed
    ///
    /// Orbit's EXPIRED deliveries of the subscription, or (--source nats)
    /// the messages JetStream gave up on (MaxDeliver reached, or terminated
    /// by the receiver), as recorded by the failures stream `subscribe
    /// --source nats` creates. One line per delivery with what it would
    /// become if it came again, decided now and read-only as the inbox
    /// decides: apply, duplicate, stale, conflict (both digests, or the
    /// version another event holds) or rejected (why); a summary line last
    /// (`failures total=… apply=… …`). Never prints a body. Exit 0 when
    /// there are none, 1 when there are. Needs events:read (or read access
    /// to the streams) and SELECT.
    Failures(FailuresArgs),
    /// Bring chosen failed deliveries back through the inbox
    ///
    /// By delivery (--delivery, repeatable), by diagnosis (--diagnosis,
    /// repeatable) or all (--all); --dry-run changes nothing. On Orbit each
    /// gets --add more attempts through the admin call (ORBIT_ADMIN_TOKEN or
    /// --admin-token-file; never printed), and `consume` then applies it
    /// like any delivery; over NATS the stored message is published again
    /// and its record marked replayed. Deliveries diagnosed conflict or
    /// rejected are refused (exit 2) unless --force: they would only fail
    /// again. Whatever is replayed twice is a duplicate the second time.
    /// One line per delivery (`replay delivery=… diagnosis=…
    /// result=replayed|skipped|refused`) and a summary. Writes nothing to
    /// the database.
    Replay(ReplayArgs),
    /// Check that both tables agree, read-only
    ///
    /// Reads both tables once and checks digests, canonical
    /// texts, events, each view against its events, and, where
    /// receiver_outbox is there, that each effect belongs to an event the
    /// inbox holds. One line per problem (ids only), a summary line last;
    /// exit 0 when ok, 1 otherwise. Needs only SELECT; a consistent
    /// snapshot, no locks.
    Verify(DatabaseArgs),
    /// Sizes and growth of both tables, for capacity planning
    ///
    /// Rows, bytes,
    /// oldest and newest receipt, events per day (30 days), applied vs
    /// stale, event sizes, growth per day; where receiver_outbox is there,
    /// its size, effects by state and per day, and growth. Needs only
    /// SELECT.
    Stats(StatsArgs),
    /// Delete inbox rows older than a retention window, in short batches
    ///
    /// Deletes the inbox rows of this receiver and queue received longer ago
    /// than --older-than, in batches by primary key (each one short
    /// transaction, then a pause of at least four times its own time),
    /// archived first with --archive.
    /// Keeps each view's last event, so a redelivery of it stays a
    /// duplicate and an older one comes back stale. Where receiver_outbox
    /// is there, first deletes the sent effects past the window (never a
    /// pending or dead one), and keeps a row while its event has effects
    /// left. Refuses a window below
    /// the minimum retention (7d) with exit 2. Runs under its own account
    /// (RECEIVER_PRUNE_DSN); SIGINT/SIGTERM end it after the batch under
    /// way (exit 0); safe to run again, and beside consumers and another
    /// prune. Prints what it did: rows, bytes, time.
    Prune(PruneArgs),
    /// The outbox's pending and dead effects; replay brings dead ones back
    ///
    /// One line per effect (id, target, key, state, attempts, last answer,
    /// age), then a summary; never a body. Needs SELECT on receiver_outbox
    /// (`receiver init --outbox` creates it); `outbox replay` also UPDATE.
    Outbox(OutboxArgs),
    /// Send the outbox's notifications until SIGINT/SIGTERM
    ///
    /// The relay alone, with no consumer, and the notify settings of
    /// consume (a subject with the NATS_* servers and login): what consume
    /// recorded and did not send yet (it stopped, the endpoint or NATS was
    /// down) goes out, each effect under its own id. Any
    /// number of them may run beside each other. Needs SELECT, INSERT,
    /// UPDATE on receiver_outbox; /metrics with RECEIVER_METRICS_ADDR.
    Relay(RelayArgs),
    /// Show what is stored about one event or one task
    ///
    /// Ids, digest, applied, version, state, times, result size; never a
    /// result unless --show-canonical. Exit 1 when nothing is stored. Needs
    /// only SELECT.
    Inspect {
        #[command(flatten)]
        database: DatabaseArgs,
        #[command(subcommand)]
        what: InspectWhat,
    },
    /// Print the SHA-256 of a JSON document's canonical form
    ///
    /// As the inbox stores it (`sha256=<64 hex>`), to investigate conflicts.
    Digest {
        /// The document; `-` or nothing reads standard input.
        file: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
pub(crate) enum InspectWhat {
    /// The inbox rows of one event id (in every receiver name and queue).
    Event {
        /// The event id (32 hex).
        id: String,
        /// Also print the stored canonical event. It contains the task's
        /// result, which may be confidential.
        #[arg(long)]
        show_canonical: bool,
    },
    /// The view of one task and all its inbox rows, in version order (scans
    /// the inbox).
    Task {
        /// The task id (32 hex).
        id: String,
        /// Also print each stored canonical event. They contain the task's
        /// results, which may be confidential.
        #[arg(long)]
        show_canonical: bool,
    },
}

fn main() -> ExitCode {
    let outcome = run();
    // What the traces still hold goes out before the process ends, within
    // a bound of its own.
    otel::shutdown();
    exit_code(outcome)
}

fn run() -> Outcome {
    secret_files::read_secret_files()?;
    let cli = without_unset_values(Cli::command())
        .try_get_matches()
        .and_then(|matches| Cli::from_arg_matches(&matches))
        .map_err(usage::usage_failure)?;
    init_logging(matches!(
        cli.command,
        Command::Consume(_) | Command::Relay(_)
    ))
    .map_err(config)?;
    match cli.command {
        Command::Init {
            dsn,
            keep_existing,
            retention,
            outbox,
        } => commands::init::run_init(dsn, keep_existing, retention, outbox),
        Command::Digest { file } => commands::digest::run_digest(file),
        Command::Demo(receiver) => commands::demo::run_demo(receiver),
        Command::Consume(args) => commands::consume::run_consume(args),
        Command::Check(args) => commands::check::run_check(args),
        Command::Subscribe(args) => commands::subscribe::run_subscribe(args),
        Command::Failures(args) => commands::failures::run_failures(args),
        Command::Replay(args) => commands::replay::run_replay(args),
        Command::Verify(database) => commands::verify::run_verify(database),
        Command::Stats(args) => commands::stats::run_stats(args),
        Command::Prune(args) => commands::prune::run_prune(args),
        Command::Outbox(args) => commands::outbox::run_outbox(args),
        Command::Relay(args) => commands::relay::run_relay(args),
        Command::Inspect { database, what } => commands::inspect::run_inspect(database, what),
    }
}

/// `--help` shows `[env: NAME=value]` for a variable that is set and
/// `[env: NAME]` for one that is not (clap would print `NAME=`, as if it
/// were set to nothing).
fn without_unset_values(command: clap::Command) -> clap::Command {
    command
        .mut_args(|arg| {
            let unset = arg
                .get_env()
                .is_some_and(|name| std::env::var_os(name).is_none());
            if unset {
                arg.hide_env_values(true)
            } else {
                arg
            }
        })
        .mut_subcommands(without_unset_values)
}
