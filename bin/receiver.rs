//! `receiver`: the command-line face of result-inbox.
//!
//! Thin by design: parse arguments, set up logging, call the library, map the
//! outcome to an exit code. Exit codes: 0 success, 1 the operation failed
//! (database, platform), 2 usage or configuration error, 3 the input was
//! rejected.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use result_inbox::digest::{self, MAX_EVENT_BYTES};
use result_inbox::dsn::Dsn;
use result_inbox::schema;

/// Exit code: the operation failed.
const EXIT_FAILED: u8 = 1;
/// Exit code: usage or configuration error.
const EXIT_CONFIG: u8 = 2;
/// Exit code: the input was rejected.
const EXIT_REJECTED: u8 = 3;

#[derive(Parser)]
#[command(
    name = "receiver",
    version,
    about = "Receive Orbit task results exactly once in effect (inbox + task result view in MySQL).",
    after_help = "Exit codes: 0 success, 1 operation failed, 2 usage or configuration error, 3 input rejected."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create the receiver's two tables (schema.sql) in an empty database.
    ///
    /// Runs only the initial DDL: if either table exists it stops with an error
    /// and changes nothing. Needs the CREATE privilege.
    Init {
        /// The receiver's database, e.g. mysql://admin@127.0.0.1:3306/receiver.
        /// Must name the database. Never the platform's database.
        #[arg(long, env = "ORBIT_RECEIVER_DSN", hide_env_values = true)]
        dsn: String,
    },
    /// Print the SHA-256 of a JSON document's canonical form, as the inbox
    /// stores it (`sha256=<64 hex>`), to investigate conflicts.
    Digest {
        /// The document; `-` or nothing reads standard input.
        file: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    match cli.command {
        Command::Init { dsn } => run_init(&dsn),
        Command::Digest { file } => run_digest(file),
    }
}

fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("RECEIVER_LOG").unwrap_or_else(|_| EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
}

fn fail(code: u8, message: impl std::fmt::Display) -> ExitCode {
    eprintln!("receiver: {message}");
    ExitCode::from(code)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

fn run_init(dsn: &str) -> ExitCode {
    let dsn = match Dsn::parse(dsn) {
        Ok(dsn) => dsn,
        Err(e) => return fail(EXIT_CONFIG, format!("ORBIT_RECEIVER_DSN: {e}")),
    };
    match runtime().block_on(schema::init(&dsn)) {
        Ok(report) => {
            println!(
                "receiver_schema_initialized=true foreign_keys={}",
                report.foreign_keys
            );
            ExitCode::SUCCESS
        }
        Err(e) => fail(EXIT_FAILED, format!("init on {dsn}: {e}")),
    }
}

fn run_digest(file: Option<PathBuf>) -> ExitCode {
    let source = file.filter(|p| p.as_os_str() != "-");
    let reader: Box<dyn Read> = match &source {
        Some(path) => match std::fs::File::open(path) {
            Ok(f) => Box::new(f),
            Err(e) => return fail(EXIT_CONFIG, format!("cannot read {}: {e}", path.display())),
        },
        None => Box::new(std::io::stdin()),
    };
    // Read one byte past the limit, never more: an oversized document is
    // reported as too large without being held in memory.
    let mut input = Vec::new();
    if let Err(e) = reader
        .take(MAX_EVENT_BYTES as u64 + 1)
        .read_to_end(&mut input)
    {
        return fail(EXIT_CONFIG, format!("cannot read input: {e}"));
    }
    if input.len() > MAX_EVENT_BYTES {
        return fail(
            EXIT_REJECTED,
            format!("invalid document: larger than {MAX_EVENT_BYTES} bytes (512 KiB)"),
        );
    }
    match digest::digest(&input) {
        Ok(d) => {
            println!("sha256={d}");
            ExitCode::SUCCESS
        }
        Err(e) => fail(EXIT_REJECTED, format!("invalid document: {e}")),
    }
}
