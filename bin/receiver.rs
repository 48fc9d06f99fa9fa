//! `receiver`: the command-line face of result-inbox.
//!
//! Thin by design: parse arguments, set up logging, call the library, map the
//! outcome to an exit code. Exit codes: 0 success, 1 the operation failed
//! (database, platform), 2 usage or configuration error, 3 the input was
//! rejected.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use tower::ServiceBuilder;

use result_inbox::config::{OrbitSettings, OrbitSource};
use result_inbox::consumer::{Consumer, ConsumerError, ConsumerOptions};
use result_inbox::demo::{self, DemoOptions};
use result_inbox::digest::{self, MAX_EVENT_BYTES};
use result_inbox::dsn::Dsn;
use result_inbox::ids::SubscriptionId;
use result_inbox::inbox::{DbErrorKind, InboxLayer, InboxStore, StoreOptions};
use result_inbox::orbit::{OrbitClient, Token};
use result_inbox::schema;
use result_inbox::scope::{InboxScope, ReceiverName};
use result_inbox::task_view::TaskView;

/// Timeout of every single call to Orbit.
const ORBIT_CALL_TIMEOUT: Duration = Duration::from_secs(10);

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
    after_help = "Exit codes: 0 success, 1 operation failed, 2 usage or configuration error, 3 input rejected.\nLogs go to stderr; RECEIVER_LOG sets the filter (default warn,result_inbox=info,receiver=info)."
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
    /// Run the whole flow once: subscribe to task.cancelled, submit and cancel
    /// a task, apply its event twice (applied, then duplicate), ACK, check the
    /// view, pause the subscription. Needs a dedicated queue and a token with
    /// events:read, events:consume, events:manage, tasks:submit, tasks:cancel.
    /// Finishes within 20 s; on failure everything is kept for inspection.
    Demo(Receiver),
    /// Consume an existing subscription until SIGINT/SIGTERM (concurrency 4,
    /// shutdown within 10 s). Needs only events:read and events:consume on the
    /// subscription's queue. Never pauses the subscription.
    Consume {
        #[command(flatten)]
        receiver: Receiver,
        /// The subscription to consume (32 lowercase hex characters), created
        /// with the same credentials.
        #[arg(long, env = "ORBIT_SUBSCRIPTION_ID")]
        subscription_id: String,
    },
    /// Print the SHA-256 of a JSON document's canonical form, as the inbox
    /// stores it (`sha256=<64 hex>`), to investigate conflicts.
    Digest {
        /// The document; `-` or nothing reads standard input.
        file: Option<PathBuf>,
    },
}

/// What `demo` and `consume` need: Orbit, the receiver's database and name.
#[derive(Args)]
struct Receiver {
    /// Orbit's base URL (http:// only on loopback; https:// in production).
    /// Overrides the credentials file's orbit_url.
    #[arg(long, env = "ORBIT_URL")]
    orbit_url: Option<String>,
    /// The credentials file written by bootstrap (token, queue id, URL); must
    /// be private (mode 0600).
    #[arg(long, env = "ORBIT_CREDENTIALS_FILE")]
    credentials_file: Option<PathBuf>,
    /// The queue token; overrides the credentials file. Never printed.
    #[arg(long, env = "ORBIT_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// The queue this receiver consumes; overrides the credentials file.
    #[arg(long, env = "ORBIT_QUEUE_ID")]
    queue_id: Option<String>,
    /// PEM file with the certificate(s) of a private CA that signed Orbit's
    /// certificate, trusted besides Mozilla's root certificates for https://.
    #[arg(long, env = "ORBIT_CA_FILE")]
    orbit_ca_file: Option<PathBuf>,
    /// The receiver's own database; must name the database.
    #[arg(long, env = "ORBIT_RECEIVER_DSN", hide_env_values = true)]
    dsn: String,
    /// The receiver's fixed name: the same for every restart and instance.
    /// At most 64 ASCII characters: a letter or digit, then letters, digits,
    /// '.', '_' or '-'.
    #[arg(long, env = "RECEIVER_NAME", default_value = ReceiverName::DEFAULT)]
    receiver_name: String,
}

/// A receiver's resolved configuration.
struct Resolved {
    orbit: OrbitSettings,
    dsn: Dsn,
    name: ReceiverName,
}

impl Receiver {
    fn resolve(self) -> Result<Resolved, String> {
        let dsn = Dsn::parse(&self.dsn).map_err(|e| format!("ORBIT_RECEIVER_DSN: {e}"))?;
        let name =
            ReceiverName::parse(&self.receiver_name).map_err(|e| format!("RECEIVER_NAME: {e}"))?;
        let orbit = OrbitSource {
            url: self.orbit_url,
            credentials_file: self.credentials_file,
            token: self.token.map(Token::new),
            queue_id: self.queue_id,
            ca_file: self.orbit_ca_file,
        }
        .resolve()
        .map_err(|e| e.to_string())?;
        if !orbit.url.is_tls() && !orbit.url.is_loopback() {
            tracing::warn!(url = %orbit.url, "plain http:// to a non-loopback host: tokens and results travel unencrypted; use https://");
        }
        Ok(Resolved { orbit, dsn, name })
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    init_logging();
    match cli.command {
        Command::Init { dsn } => run_init(&dsn),
        Command::Digest { file } => run_digest(file),
        Command::Demo(receiver) => run_demo(receiver),
        Command::Consume {
            receiver,
            subscription_id,
        } => run_consume(receiver, &subscription_id),
    }
}

/// Help and version go out as clap writes them; a usage error becomes one
/// line (clap's first), exit code 2, like every other configuration error.
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => e.exit(),
        _ => {
            let message = e.to_string();
            let first = message.lines().next().unwrap_or("invalid arguments");
            let first = first.strip_prefix("error: ").unwrap_or(first);
            fail(EXIT_CONFIG, format!("{first} (see receiver --help)"))
        }
    }
}

fn init_logging() {
    use tracing_subscriber::EnvFilter;
    // One line per delivery from the inbox (class, delivery, event); warnings
    // from everything else. Nothing logged carries secrets or result bodies.
    let filter = EnvFilter::try_from_env("RECEIVER_LOG")
        .unwrap_or_else(|_| EnvFilter::new("warn,result_inbox=info,receiver=info"));
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
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// Resolves when SIGINT or SIGTERM arrives. The handlers are installed when
/// this is called, not when the future is first polled, so a signal during
/// start-up is not lost (nor does it kill the process uncleanly).
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    async move {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        tracing::info!("shutdown requested: no new deliveries, cancelling in-flight handlers");
    }
}

/// Whether a database that cannot be reached at start is an error (`demo`)
/// or something to wait for while consuming (`consume`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Unreachable {
    Fail,
    Wait,
}

async fn connect(
    resolved: &Resolved,
    unreachable: Unreachable,
) -> Result<(OrbitClient, InboxStore), (u8, String)> {
    let client = OrbitClient::with_tls(
        resolved.orbit.url.clone(),
        resolved.orbit.token.clone(),
        ORBIT_CALL_TIMEOUT,
        resolved.orbit.tls.clone(),
    )
    .map_err(|e| (EXIT_CONFIG, format!("ORBIT_URL: {e}")))?;
    let scope = InboxScope::new(resolved.name.clone(), resolved.orbit.queue_id.clone());
    let store = match InboxStore::connect(&resolved.dsn, scope.clone(), StoreOptions::default())
        .await
    {
        Ok(store) => store,
        // Down or not yet up: no delivery is applied or ACKed until it
        // answers, as during an outage. A refused login, a missing database
        // or a failed TLS check will not mend by waiting, so those still
        // stop the consumer.
        Err(e)
            if unreachable == Unreachable::Wait
                && matches!(e.kind(), DbErrorKind::Connection | DbErrorKind::PoolTimeout) =>
        {
            tracing::warn!(
                database = %resolved.dsn,
                error = %e,
                "database unreachable at start; deliveries are neither applied nor ACKed until it answers"
            );
            InboxStore::connect_lazy(&resolved.dsn, scope, StoreOptions::default())
        }
        Err(e) => return Err((EXIT_FAILED, format!("database {}: {e}", resolved.dsn))),
    };
    Ok((client, store))
}

fn run_demo(receiver: Receiver) -> ExitCode {
    let resolved = match receiver.resolve() {
        Ok(r) => r,
        Err(e) => return fail(EXIT_CONFIG, e),
    };
    let options = DemoOptions::default();
    runtime().block_on(async {
        let (client, store) = match connect(&resolved, Unreachable::Fail).await {
            Ok(c) => c,
            Err((code, e)) => return fail(code, e),
        };
        match demo::run(client, store, options).await {
            Ok(report) => {
                for line in report.lines() {
                    println!("{line}");
                }
                ExitCode::SUCCESS
            }
            Err(e) => fail(
                EXIT_FAILED,
                format!("demo failed: {e}; task, subscription, deliveries and rows are kept for inspection"),
            ),
        }
    })
}

fn run_consume(receiver: Receiver, subscription_id: &str) -> ExitCode {
    let Some(subscription) = SubscriptionId::parse(subscription_id) else {
        return fail(
            EXIT_CONFIG,
            "ORBIT_SUBSCRIPTION_ID must be 32 lowercase hexadecimal characters",
        );
    };
    let resolved = match receiver.resolve() {
        Ok(r) => r,
        Err(e) => return fail(EXIT_CONFIG, e),
    };
    let options = ConsumerOptions::default();
    let runtime = runtime();
    let shutdown = {
        let _context = runtime.enter();
        shutdown_signal()
    };
    runtime.block_on(async {
        let (client, store) = match connect(&resolved, Unreachable::Wait).await {
            Ok(c) => c,
            Err((code, e)) => return fail(code, e),
        };
        let consumer = match Consumer::connect(
            client,
            subscription,
            &resolved.orbit.queue_id,
            options,
        )
        .await
        {
            Ok(c) => c,
            Err(e @ ConsumerError::QueueMismatch { .. }) => return fail(EXIT_CONFIG, e),
            Err(e) => return fail(EXIT_FAILED, e),
        };
        let service = ServiceBuilder::new()
            .layer(InboxLayer::new(store))
            .service(TaskView::new());
        tracing::info!(receiver = %resolved.name, queue = %resolved.orbit.queue_id, "consuming");
        match consumer.run(service, shutdown).await {
            Ok(report) => {
                tracing::info!(
                    received = report.received,
                    acked = report.acked,
                    failed = report.failed,
                    ack_refused = report.ack_refused,
                    abandoned = report.abandoned,
                    "stopped"
                );
                ExitCode::SUCCESS
            }
            Err(e) => fail(EXIT_FAILED, e),
        }
    })
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
