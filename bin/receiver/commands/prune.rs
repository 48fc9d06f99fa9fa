//! `receiver prune`: inbox rows past a window archived and deleted, in
//! small batches, under an account of their own.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;

use result_inbox::db::Dsn;
use result_inbox::ids::QueueId;
use result_inbox::prune::{self, Archive, Plan, PruneError, PrunedRow};
use result_inbox::scope::{InboxScope, ReceiverName};

use super::Progress;
use crate::args::{parse_duration, OrbitArgs};
use crate::exit::{config, database_failure, fail, failed, printed, Failed, Outcome, EXIT_FAILED};
use crate::runtime::{runtime, stop_on_signal};

#[derive(Args)]
pub(crate) struct PruneArgs {
    /// Delete rows received longer ago than this (30d, 36h, 90m): at least
    /// the minimum retention. The row of each view's last event is kept,
    /// and, where receiver_outbox is there, the sent effects recorded
    /// before it are deleted and a row whose event has effects left is
    /// kept.
    #[arg(long, value_parser = parse_duration)]
    older_than: Duration,
    /// The prune account's URL, mysql://user:password@host:port/database or
    /// postgres://user:password@host:port/database:
    /// SELECT, DELETE on receiver_inbox, SELECT on receiver_task_views,
    /// SELECT, INSERT, UPDATE on receiver_pruned, and SELECT, DELETE on
    /// receiver_outbox where it is there. Not the runtime account, which
    /// never gets DELETE.
    #[arg(long, env = "RECEIVER_PRUNE_DSN", hide_env_values = true)]
    dsn: Option<String>,
    /// The receiver whose rows are pruned (the name `consume` runs with).
    #[arg(long, env = "RECEIVER_NAME", default_value = ReceiverName::DEFAULT)]
    receiver_name: String,
    /// The queue whose rows are pruned; else the credentials file's.
    #[arg(long, env = "ORBIT_QUEUE_ID")]
    queue_id: Option<String>,
    /// A credentials file written by bootstrap: only its queue is read.
    #[arg(long, env = "ORBIT_CREDENTIALS_FILE")]
    credentials_file: Option<PathBuf>,
    /// The floor below which --older-than is refused. Lower it only when
    /// nothing can redeliver an older event (see docs/operations.md).
    #[arg(long, env = "RECEIVER_PRUNE_MIN_RETENTION", value_parser = parse_duration, default_value = "7d")]
    min_retention: Duration,
    /// Most rows per batch; each batch is one short transaction.
    #[arg(long, default_value_t = prune::DEFAULT_BATCH_ROWS)]
    batch_rows: u32,
    /// The shortest pause after each batch.
    #[arg(long, value_parser = parse_duration, default_value = "50ms")]
    pause: Duration,
    /// The pause after a batch is at least this many times the batch's own
    /// time, so that prune yields more to a busy server (0: only --pause).
    #[arg(long, default_value_t = prune::DEFAULT_PAUSE_FACTOR)]
    pause_factor: u32,
    /// Count what would be deleted; delete and archive nothing. Needs
    /// only SELECT.
    #[arg(long)]
    dry_run: bool,
    /// Before each batch is deleted, append its rows to FILE (JSON lines,
    /// every column; gzip when FILE ends in .gz), flushed and synced. The
    /// file holds results: it is created with mode 0600, with the first
    /// row it holds (a run that deletes nothing, or is refused, leaves no
    /// file).
    #[arg(long, value_name = "FILE")]
    archive: Option<PathBuf>,
    /// One JSON object instead of a key=value line.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run_prune(args: PruneArgs) -> Outcome {
    let dsn = args.dsn.clone().ok_or_else(|| {
        config("RECEIVER_PRUNE_DSN is not set (or pass --dsn): the prune account's URL, mysql://user:password@host:port/database or postgres://… (see docs/operations.md for its grants)")
    })?;
    let dsn = Dsn::parse(&dsn).map_err(|e| config(format!("RECEIVER_PRUNE_DSN: {e}")))?;
    let plan = args.plan().map_err(config)?;
    plan.check().map_err(|e| config(format!("prune: {e}")))?;
    let runtime = runtime();
    if let Some(warning) = runtime.block_on(crate::check::name_warning(&dsn, &plan.scope)) {
        crate::logging::report_warning(&warning);
    }
    if args.dry_run {
        let counted = runtime
            .block_on(prune::count(&dsn, &plan))
            .map_err(failure)?;
        let fields = [
            ("dry_run", serde_json::Value::from(true)),
            ("past_window", counted.rows.into()),
            ("past_window_bytes", counted.bytes.into()),
            ("kept_latest", counted.latest.into()),
            ("kept_effects", counted.kept_effects.into()),
            ("would_delete", counted.prunable().into()),
            ("would_delete_effects", counted.sent_effects.into()),
        ];
        if args.json {
            let object = fields.map(|(key, value)| (key.to_owned(), value));
            return printed(serde_json::Value::Object(object.into_iter().collect()));
        }
        let pairs: Vec<String> = fields.iter().map(|(k, v)| format!("{k}={v}")).collect();
        return printed(format!("prune {}", pairs.join(" ")));
    }
    let mut archive: Box<dyn Archive> = match &args.archive {
        Some(path) => Box::new(FileArchive::open(path).map_err(|e| {
            fail(
                EXIT_FAILED,
                format!("prune: archive {}: {e}", path.display()),
            )
        })?),
        None => Box::new(()),
    };
    let stop = stop_on_signal(
        &runtime,
        "stop requested: prune ends after the batch under way",
    );
    let mut progress =
        Progress::new("{bar:40} {pos}/{len} rows past the window, {msg} {per_sec} {eta}");
    let outcome = runtime.block_on(prune::run(
        &dsn,
        &plan,
        archive.as_mut(),
        &mut progress,
        &stop,
    ));
    progress.0.finish_and_clear();
    let summary = outcome.map_err(failure)?;
    if args.json {
        printed(serde_json::to_string(&summary).expect("a summary serializes"))
    } else {
        printed(format!(
            "prune deleted={} deleted_bytes={} kept_latest={} kept_unreadable={} kept_effects={} effects_deleted={} batches={} retries={} elapsed_s={:.3} stopped={}",
            summary.deleted,
            summary.deleted_bytes,
            summary.kept_latest,
            summary.kept_unreadable,
            summary.kept_effects,
            summary.effects_deleted,
            summary.batches,
            summary.retries,
            summary.elapsed.as_millis() as f64 / 1000.0,
            summary.stopped
        ))
    }
}

impl PruneArgs {
    fn plan(&self) -> Result<Plan, String> {
        let receiver =
            ReceiverName::parse(&self.receiver_name).map_err(|e| format!("RECEIVER_NAME: {e}"))?;
        let orbit = OrbitArgs {
            queue_id: self.queue_id.clone(),
            credentials_file: self.credentials_file.clone(),
            ..OrbitArgs::default()
        };
        let queue = orbit.queue_id().map_err(|e| e.to_string())?.ok_or(
            "ORBIT_QUEUE_ID is not set (or pass --queue-id, or ORBIT_CREDENTIALS_FILE): the queue whose rows are pruned",
        )?;
        let queue = QueueId::parse(&queue)
            .map_err(|_| "ORBIT_QUEUE_ID must be 32 lowercase hexadecimal characters")?;
        let mut plan = Plan::new(InboxScope::new(receiver, queue), self.older_than);
        plan.minimum_retention = self.min_retention;
        plan.batch_rows = self.batch_rows;
        plan.pause = self.pause;
        plan.pause_factor = self.pause_factor;
        Ok(plan)
    }
}

/// A failed prune: what to change (exit 2) or what failed (exit 1). A
/// database failure is reported as every command reports one (a missing
/// table says what to run).
fn failure(e: PruneError) -> Failed {
    match e {
        PruneError::Database(db) => database_failure("prune", db, prune_grants),
        e => failed(e.is_configuration(), format!("prune: {e}")),
    }
}

/// What the prune account needs on each table (docs/operations.md).
fn prune_grants(table: &str) -> &'static str {
    match table {
        "receiver_inbox" | "receiver_outbox" => "SELECT, DELETE",
        "receiver_task_views" => "SELECT",
        _ => "SELECT, INSERT, UPDATE",
    }
}

impl prune::Report for Progress {
    fn wants_total(&self) -> bool {
        !self.0.is_hidden()
    }

    fn total(&mut self, rows: u64) {
        self.0.set_length(rows);
    }

    fn advance(&mut self, examined: u64, _deleted: u64) {
        self.0.inc(examined);
    }
}

/// `--archive FILE`: JSON lines appended, never truncated; with `.gz`, one
/// gzip member per batch, so that every synced batch is complete and the
/// file stays readable by `zcat` after a crash in the middle of one. The
/// file is created with its first rows: an empty file is no gzip at all,
/// and a backup check would call it corrupt.
struct FileArchive {
    path: PathBuf,
    file: Option<File>,
    gzip: bool,
}

impl FileArchive {
    /// Checks that FILE can be appended to (or created in its directory)
    /// before anything is deleted; creates nothing.
    fn open(path: &Path) -> std::io::Result<Self> {
        let file = if path.exists() {
            Some(OpenOptions::new().append(true).open(path)?)
        } else {
            let dir = directory_of(path);
            if !dir.is_dir() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("no directory {}", dir.display()),
                ));
            }
            None
        };
        Ok(Self {
            path: path.to_owned(),
            file,
            gzip: path.extension().is_some_and(|e| e == "gz"),
        })
    }

    fn file(&mut self) -> std::io::Result<&mut File> {
        if self.file.is_none() {
            let file = OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .open(&self.path)?;
            // The file's own entry in its directory must survive a crash too.
            File::open(directory_of(&self.path))?.sync_all()?;
            self.file = Some(file);
        }
        Ok(self.file.as_mut().expect("opened above"))
    }
}

fn directory_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

impl Archive for FileArchive {
    fn keep(&mut self, rows: &[PrunedRow]) -> std::io::Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let gzip = self.gzip;
        let file = self.file()?;
        let text: String = rows.iter().map(PrunedRow::json_line).collect();
        if gzip {
            let mut member =
                flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            member.write_all(text.as_bytes())?;
            file.write_all(&member.finish()?)?;
        } else {
            file.write_all(text.as_bytes())?;
        }
        file.sync_data()
    }
}
