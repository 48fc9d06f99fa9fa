//! `receiver`: the command-line face of result-inbox.
//!
//! Thin by design: parse arguments, set up logging, call the library, map the
//! outcome to an exit code. Exit codes: 0 success, 1 the operation failed
//! (database, platform), 2 usage or configuration error, 3 the input was
//! rejected.

use std::io::Read;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use tokio_util::sync::CancellationToken;

use result_inbox::check::{self, CheckConfig};
use result_inbox::config::{NatsSource, OrbitSettings, OrbitSource};
use result_inbox::consume::{self, ConsumeConfig, SourceConfig};
use result_inbox::consumer::{ConsumerOptions, Health};
use result_inbox::demo::{self, DemoOptions};
use result_inbox::digest::{self, MAX_EVENT_BYTES};
use result_inbox::dsn::Dsn;
use result_inbox::event::{EventId, EventType, TaskId};
use result_inbox::health::{self, Endpoint};
use result_inbox::ids::SubscriptionId;
use result_inbox::inbox::{mysql_errno, DbError, InboxStore, StoreOptions};
use result_inbox::inspect::{self, Inspect};
use result_inbox::orbit::{OrbitClient, Token};
use result_inbox::schema;
use result_inbox::scope::{InboxScope, ReceiverName};
use result_inbox::subscribe::{self, SubscribeError};
use result_inbox::{stats, verify};

/// Timeout of every single call to Orbit.
const ORBIT_CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Timeout of every request to NATS, acknowledgements included.
const NATS_CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// From a SIGINT/SIGTERM to the end of the process, in every state.
const SHUTDOWN_LIMIT: Duration = Duration::from_secs(10);
/// How long `consume` lets pending ACKs finish after the signal; the rest of
/// [`SHUTDOWN_LIMIT`] is for closing connections and exiting.
const CONSUME_GRACE: Duration = Duration::from_secs(7);

/// Exit code: the operation failed.
const EXIT_FAILED: u8 = 1;
/// Exit code: usage or configuration error.
const EXIT_CONFIG: u8 = 2;
/// Exit code: the input was rejected.
const EXIT_REJECTED: u8 = 3;

/// The log filter when neither RECEIVER_LOG nor RUST_LOG is set: one line
/// per delivery, warnings from everything else, and sqlx's own slow-statement
/// and slow-acquire warnings left out (the receiver reports its outcomes
/// itself, redacted).
const DEFAULT_LOG_FILTER: &str = "warn,result_inbox=info,receiver=info,sqlx=error";

/// The most the NATS client may log, whatever the filter says.
const NATS_CLIENT_LOG_CAP: &str = "async_nats=info";

#[derive(Parser)]
#[command(
    name = "receiver",
    version,
    about = "Receive Orbit task results exactly once in effect (inbox + task result view in MySQL).",
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
    /// Create the receiver's two tables (schema.sql) in an empty database.
    ///
    /// Runs only the initial DDL: if either table exists it stops with an error
    /// and changes nothing. Needs the CREATE privilege.
    Init {
        /// The receiver's database, e.g. mysql://admin@127.0.0.1:3306/receiver.
        /// Must name the database. Never the platform's database.
        #[arg(long, env = "ORBIT_RECEIVER_DSN", hide_env_values = true)]
        dsn: Option<String>,
        /// When both tables already exist with every column of schema.sql,
        /// change nothing and print the same line as a fresh init (foreign
        /// keys counted); a partial or different schema still fails.
        #[arg(long)]
        keep_existing: bool,
    },
    /// Run the whole flow once: subscribe to task.cancelled, submit and cancel
    /// a task, apply its event twice (applied, then duplicate), ACK, check the
    /// view, pause the subscription. Needs a dedicated queue and a token with
    /// events:read, events:consume, events:manage, tasks:submit, tasks:cancel.
    /// Checks the database and the token first; finishes within 20 s; on
    /// failure everything it created is kept for inspection.
    Demo(Receiver),
    /// Consume an existing subscription until SIGINT/SIGTERM (concurrency 4,
    /// --prefetch more leased ahead, shutdown within 10 s). Needs only
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
    /// Check the database (reachable, tables and columns, SELECT/INSERT/UPDATE)
    /// and Orbit (reachable, token, scopes, subscription bound to the queue)
    /// without changing anything. One line per check; exit 0 only if all pass,
    /// 1 if one fails.
    ///
    /// With --source nats it checks the database and NATS instead: the
    /// server (reachable, login, TLS) and the stream's durable pull consumer
    /// (explicit acks, filter subject = the queue's subject), as consume
    /// does before fetching anything.
    Check {
        #[command(flatten)]
        receiver: Receiver,
        /// What `consume` would consume: `orbit` or `nats`.
        #[arg(long, env = "RECEIVER_SOURCE", value_enum, default_value_t = SourceKind::Orbit)]
        source: SourceKind,
        #[command(flatten)]
        nats: NatsArgs,
        /// The subscription `consume` would consume (required without --demo,
        /// checked when given with it).
        #[arg(long, env = "ORBIT_SUBSCRIPTION_ID")]
        subscription_id: Option<String>,
        /// Check the scopes `demo` needs (all five) instead of those of
        /// `consume`; no subscription needed.
        #[arg(long)]
        demo: bool,
    },
    /// Create a subscription on the configured queue for the given event
    /// types and print `subscription=<32 hex>`, the ORBIT_SUBSCRIPTION_ID of
    /// `consume`. Needs events:manage.
    ///
    /// With --source nats it makes sure NATS_CONSUMER exists on NATS_STREAM
    /// as `consume --source nats` needs it: a missing one is created (durable,
    /// pull, explicit acks, the queue's subject, --ack-wait, --max-deliver),
    /// an existing one is only checked, never changed. Prints
    /// `consumer=<name> stream=<stream> created|existing ack_wait_s=… max_deliver=…`.
    Subscribe {
        #[command(flatten)]
        orbit: OrbitArgs,
        /// Comma-separated event types, e.g. task.cancelled,task.succeeded.
        /// Default: all five (task.submitted, task.succeeded, task.failed,
        /// task.cancelled, task.needs_review). Only for --source orbit.
        #[arg(long)]
        events: Option<String>,
        /// Where `consume` takes its deliveries from: `orbit` or `nats`.
        #[arg(long, env = "RECEIVER_SOURCE", value_enum, default_value_t = SourceKind::Orbit)]
        source: SourceKind,
        #[command(flatten)]
        nats: NatsArgs,
        #[command(flatten)]
        consumer: NatsConsumerArgs,
    },
    /// Read both tables once and check that they agree: digests, canonical
    /// texts, events, each view against its events. One line per problem
    /// (ids only), a summary line last; exit 0 when ok, 1 otherwise. Needs
    /// only SELECT; a consistent snapshot, no locks.
    Verify {
        #[command(flatten)]
        database: DatabaseArgs,
    },
    /// Sizes and growth of both tables for capacity planning: rows, bytes,
    /// oldest and newest receipt, events per day (30 days), applied vs
    /// stale, event sizes, growth per day. Needs only SELECT.
    Stats {
        #[command(flatten)]
        database: DatabaseArgs,
        /// One JSON object instead of key=value lines.
        #[arg(long)]
        json: bool,
    },
    /// Show what is stored about one event or one task (ids, digest,
    /// applied, version, state, times, result size; never a result unless
    /// --show-canonical). Exit 1 when nothing is stored. Needs only SELECT.
    Inspect {
        #[command(flatten)]
        database: DatabaseArgs,
        #[command(subcommand)]
        what: InspectWhat,
    },
    /// Print the SHA-256 of a JSON document's canonical form, as the inbox
    /// stores it (`sha256=<64 hex>`), to investigate conflicts.
    Digest {
        /// The document; `-` or nothing reads standard input.
        file: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum InspectWhat {
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

/// Where `consume` takes its deliveries from.
#[derive(Clone, Copy, ValueEnum)]
enum SourceKind {
    /// An Orbit subscription's WebSocket stream.
    Orbit,
    /// A NATS JetStream durable pull consumer.
    Nats,
}

/// Where the queue's events are on NATS (only for `--source nats`).
#[derive(Args)]
struct NatsArgs {
    /// The NATS server(s), e.g. nats://127.0.0.1:4222; tls:// requires TLS.
    /// Never printed with a user or password it may contain.
    #[arg(long, env = "NATS_URL", hide_env_values = true)]
    nats_url: Option<String>,
    /// The JetStream stream that holds the queue's events.
    #[arg(long, env = "NATS_STREAM")]
    nats_stream: Option<String>,
    /// The durable pull consumer of that stream (explicit acks; its filter
    /// subject must be the queue's subject).
    #[arg(long, env = "NATS_CONSUMER")]
    nats_consumer: Option<String>,
    /// The subject of the queue's events [default: orbit.results.<ORBIT_QUEUE_ID>].
    #[arg(long, env = "NATS_SUBJECT")]
    nats_subject: Option<String>,
    /// A token to log in with. Never printed.
    #[arg(long, env = "NATS_TOKEN", hide_env_values = true)]
    nats_token: Option<String>,
    /// A credentials file (user JWT and NKey seed) to log in with.
    #[arg(long, env = "NATS_CREDS_FILE")]
    nats_creds_file: Option<PathBuf>,
    /// PEM file with the certificate(s) of a private CA that signed the
    /// server's certificate.
    #[arg(long, env = "NATS_CA_FILE")]
    nats_ca_file: Option<PathBuf>,
    /// Refuse a connection without TLS (implied by a tls:// URL).
    #[arg(long, env = "NATS_REQUIRE_TLS")]
    nats_require_tls: bool,
}

impl NatsArgs {
    fn resolve(self, queue_id: Option<String>) -> Result<result_inbox::nats::NatsSettings, String> {
        NatsSource {
            url: self.nats_url,
            stream: self.nats_stream,
            consumer: self.nats_consumer,
            subject: self.nats_subject,
            queue_id,
            token: self.nats_token.map(result_inbox::nats::NatsSecret::new),
            creds_file: self.nats_creds_file,
            ca_file: self.nats_ca_file,
            require_tls: self.nats_require_tls,
        }
        .resolve()
        .map_err(|e| e.to_string())
    }
}

/// The durable pull consumer `subscribe --source nats` creates when there
/// is none.
#[derive(Args)]
struct NatsConsumerArgs {
    /// AckWait in seconds: how long one delivery is leased; longer than the
    /// inbox's 5 s transaction budget. [default: 30]
    #[arg(long, value_name = "SECONDS")]
    ack_wait: Option<u64>,
    /// MaxDeliver: how often a message is delivered at most (its retry
    /// budget). [default: 10]
    #[arg(long, value_parser = at_least_one)]
    max_deliver: Option<i64>,
    /// Create NATS_STREAM (file storage, on the queue's subject) when it
    /// does not exist.
    #[arg(long)]
    create_stream: bool,
}

fn at_least_one(value: &str) -> Result<i64, String> {
    match value.parse::<i64>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err("must be a whole number of at least 1 (every message needs one delivery)".into()),
    }
}

/// Where Orbit is and who the receiver is there.
#[derive(Args)]
struct OrbitArgs {
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
}

impl OrbitArgs {
    fn resolve(self) -> Result<OrbitSettings, String> {
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
        Ok(orbit)
    }
}

/// The receiver's own database, for the tools that need nothing else.
#[derive(Args)]
struct DatabaseArgs {
    /// The receiver's own database, e.g. mysql://receiver@127.0.0.1:3306/receiver;
    /// must name the database. SELECT on the two tables is enough.
    #[arg(long, env = "ORBIT_RECEIVER_DSN", hide_env_values = true)]
    dsn: Option<String>,
}

/// What `demo`, `consume` and `check` need: Orbit, the receiver's database
/// and name.
#[derive(Args)]
struct Receiver {
    #[command(flatten)]
    orbit: OrbitArgs,
    /// The receiver's own database; must name the database.
    #[arg(long, env = "ORBIT_RECEIVER_DSN", hide_env_values = true)]
    dsn: Option<String>,
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

/// The DSN, which every database command needs, named when it is missing.
fn required_dsn(dsn: Option<String>) -> Result<Dsn, String> {
    let dsn = dsn.ok_or(
        "ORBIT_RECEIVER_DSN is not set (or pass --dsn): the receiver's own database, mysql://user:password@host:port/database",
    )?;
    Dsn::parse(&dsn).map_err(|e| format!("ORBIT_RECEIVER_DSN: {e}"))
}

fn required_subscription(id: Option<String>) -> Result<SubscriptionId, String> {
    let id = id.ok_or(
        "ORBIT_SUBSCRIPTION_ID is not set (or pass --subscription-id): the subscription to consume (32 hex), created with the same credentials",
    )?;
    SubscriptionId::parse(&id).ok_or_else(|| {
        "ORBIT_SUBSCRIPTION_ID must be 32 lowercase hexadecimal characters".to_owned()
    })
}

impl Receiver {
    fn resolve(self) -> Result<Resolved, String> {
        let (dsn, name) = self.database_and_name()?;
        let orbit = self.orbit.resolve()?;
        Ok(Resolved { orbit, dsn, name })
    }

    /// For `--source nats`: the database, the name and NATS; of Orbit's
    /// settings only the queue.
    fn resolve_for_nats(
        self,
        nats: NatsArgs,
    ) -> Result<(Dsn, ReceiverName, result_inbox::nats::NatsSettings), String> {
        let (dsn, name) = self.database_and_name()?;
        Ok((dsn, name, nats.resolve(self.orbit.queue_id)?))
    }

    fn database_and_name(&self) -> Result<(Dsn, ReceiverName), String> {
        let dsn = required_dsn(self.dsn.clone())?;
        let name =
            ReceiverName::parse(&self.receiver_name).map_err(|e| format!("RECEIVER_NAME: {e}"))?;
        Ok((dsn, name))
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    if let Err(e) = init_logging() {
        return fail(EXIT_CONFIG, e);
    }
    match cli.command {
        Command::Init { dsn, keep_existing } => run_init(dsn, keep_existing),
        Command::Digest { file } => run_digest(file),
        Command::Demo(receiver) => run_demo(receiver),
        Command::Consume(args) => run_consume(args),
        Command::Check {
            receiver,
            source: SourceKind::Nats,
            nats,
            ..
        } => run_check_nats(receiver, nats),
        Command::Check {
            receiver,
            subscription_id,
            demo,
            ..
        } => run_check(receiver, subscription_id, demo),
        Command::Subscribe {
            orbit,
            source: SourceKind::Nats,
            events,
            nats,
            consumer,
        } => run_subscribe_nats(orbit, events, nats, consumer),
        Command::Subscribe { orbit, events, .. } => run_subscribe(orbit, events),
        Command::Verify { database } => run_verify(database),
        Command::Stats { database, json } => run_stats(database, json),
        Command::Inspect { database, what } => run_inspect(database, what),
    }
}

/// Help and version go out as clap writes them; a usage error becomes one
/// line (clap's first, with the missing arguments when that is the error),
/// exit code 2, like every other configuration error.
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    match e.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => e.exit(),
        ErrorKind::MissingRequiredArgument => {
            let missing = match e.get(ContextKind::InvalidArg) {
                Some(ContextValue::Strings(args)) => args.join(", "),
                _ => "an argument".to_owned(),
            };
            fail(
                EXIT_CONFIG,
                format!("missing required setting(s): {missing} (see receiver --help)"),
            )
        }
        _ => {
            let message = e.to_string();
            let first = message.lines().next().unwrap_or("invalid arguments");
            let first = first.strip_prefix("error: ").unwrap_or(first);
            fail(EXIT_CONFIG, format!("{first} (see receiver --help)"))
        }
    }
}

/// stderr logging as RECEIVER_LOG (else RUST_LOG) and RECEIVER_LOG_FORMAT
/// say. A filter or format that cannot be read is a configuration error,
/// never a silent fall-back to the default.
fn init_logging() -> Result<(), String> {
    use tracing_subscriber::EnvFilter;
    // An empty variable is taken as unset, as env_logger does.
    let set = |name| std::env::var(name).ok().filter(|f| !f.trim().is_empty());
    let (variable, filter) = match (set("RECEIVER_LOG"), set("RUST_LOG")) {
        (Some(f), _) => ("RECEIVER_LOG", f),
        (None, Some(f)) => ("RUST_LOG", f),
        (None, None) => ("", DEFAULT_LOG_FILTER.to_owned()),
    };
    let filter = EnvFilter::builder()
        .parse(&filter)
        .map_err(|e| format!("{variable}: invalid log filter: {e}"))?
        // At debug and below the NATS client prints server addresses with
        // their passwords and every message's payload (result bodies).
        .add_directive(NATS_CLIENT_LOG_CAP.parse().expect("a valid directive"));
    let json = match std::env::var("RECEIVER_LOG_FORMAT").as_deref() {
        Err(_) | Ok("text") => false,
        Ok("json") => true,
        Ok(other) => {
            return Err(format!(
                "RECEIVER_LOG_FORMAT: {other:?} is neither \"text\" nor \"json\""
            ))
        }
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false);
    if json {
        builder.json().flatten_event(true).init();
    } else {
        builder.init();
    }
    Ok(())
}

fn fail(code: u8, message: impl std::fmt::Display) -> ExitCode {
    eprintln!("receiver: {message}");
    ExitCode::from(code)
}

/// One thread: a delivery is mostly waiting on sockets, and its own work
/// (a digest, a few statements) is small, so a second worker mostly adds
/// cross-thread wake-ups (measured end to end over NATS: 5.6 context
/// switches per delivery on two workers, 2.2 on one, and 40 % less CPU).
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// A token cancelled by the first SIGINT or SIGTERM. The handlers are
/// installed here, before any start-up step, so that a signal during
/// start-up is neither lost nor fatal. The same signal arms a watchdog that
/// ends the process [`SHUTDOWN_LIMIT`] after it, whatever is still running:
/// nothing un-ACKed is lost by that (its lease runs out), and a service
/// manager's own kill timer is never the one that fires.
fn shutdown_on_signal(runtime: &tokio::runtime::Runtime) -> CancellationToken {
    use tokio::signal::unix::{signal, SignalKind};
    let token = CancellationToken::new();
    let _context = runtime.enter();
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    let cancel = token.clone();
    runtime.spawn(async move {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        tracing::info!("shutdown requested: no new deliveries, cancelling in-flight handlers");
        std::thread::spawn(|| {
            std::thread::sleep(SHUTDOWN_LIMIT);
            eprintln!("receiver: shutdown did not finish within 10 s of the signal; exiting anyway (nothing un-ACKed is lost)");
            std::process::exit(EXIT_FAILED.into());
        });
        cancel.cancel();
    });
    token
}

/// The metrics endpoint, when an address is configured.
async fn metrics_endpoint(
    addr: Option<String>,
    health: &Health,
) -> Result<Option<Endpoint>, (u8, String)> {
    let Some(addr) = addr else {
        return Ok(None);
    };
    let addr: SocketAddr = addr.parse().map_err(|_| {
        (
            EXIT_CONFIG,
            format!("RECEIVER_METRICS_ADDR: {addr:?} is not an address like 127.0.0.1:9464"),
        )
    })?;
    let handle =
        health::install_recorder().map_err(|e| (EXIT_FAILED, format!("metrics recorder: {e}")))?;
    let endpoint = Endpoint::start(addr, handle, health.clone())
        .await
        .map_err(|e| {
            (
                EXIT_CONFIG,
                format!("RECEIVER_METRICS_ADDR: cannot listen on {addr}: {e}"),
            )
        })?;
    tracing::info!(addr = %endpoint.addr, "metrics endpoint listening (/metrics, /healthz, /readyz)");
    Ok(Some(endpoint))
}

fn orbit_client(orbit: &OrbitSettings) -> Result<OrbitClient, String> {
    orbit
        .client(ORBIT_CALL_TIMEOUT)
        .map_err(|e| format!("ORBIT_URL: {e}"))
}

fn run_demo(receiver: Receiver) -> ExitCode {
    let resolved = match receiver.resolve() {
        Ok(r) => r,
        Err(e) => return fail(EXIT_CONFIG, e),
    };
    let client = match orbit_client(&resolved.orbit) {
        Ok(c) => c,
        Err(e) => return fail(EXIT_CONFIG, e),
    };
    let options = DemoOptions::default();
    let runtime = runtime();
    let shutdown = shutdown_on_signal(&runtime);
    let code = runtime.block_on(async {
        let scope = InboxScope::new(resolved.name.clone(), resolved.orbit.queue_id.clone());
        // The demo's own check reports a database that cannot be reached.
        let store = InboxStore::connect_lazy(&resolved.dsn, scope, StoreOptions::default());
        let outcome = tokio::select! {
            _ = shutdown.cancelled() => return fail(EXIT_FAILED, "demo interrupted by a signal"),
            outcome = demo::run(client, store, options) => outcome,
        };
        match outcome {
            Ok(report) => {
                for line in report.lines() {
                    println!("{line}");
                }
                ExitCode::SUCCESS
            }
            Err(failure) => {
                let code = match &failure.error {
                    demo::DemoError::Check(p) if p.is_configuration() => EXIT_CONFIG,
                    _ => EXIT_FAILED,
                };
                fail(
                    code,
                    format!("demo failed: {}; {}", failure.error, failure.kept),
                )
            }
        }
    });
    runtime.shutdown_timeout(Duration::from_secs(1));
    code
}

/// What `consume` is given.
#[derive(Args)]
struct ConsumeArgs {
    #[command(flatten)]
    receiver: Receiver,
    /// Where the deliveries come from: `orbit` (a subscription's stream)
    /// or `nats` (a JetStream durable pull consumer, see the NATS_*
    /// settings).
    #[arg(long, env = "RECEIVER_SOURCE", value_enum, default_value_t = SourceKind::Orbit)]
    source: SourceKind,
    /// The subscription to consume (32 lowercase hex characters), created
    /// with the same credentials. Only for --source orbit.
    #[arg(long, env = "ORBIT_SUBSCRIPTION_ID")]
    subscription_id: Option<String>,
    #[command(flatten)]
    nats: NatsArgs,
    /// Serve /metrics (Prometheus text), /healthz and /readyz on this
    /// address, e.g. 127.0.0.1:9464. Off unless set.
    #[arg(long, env = "RECEIVER_METRICS_ADDR")]
    metrics_addr: Option<String>,
    /// Deliveries leased ahead of the 4 handler slots, so that a slot
    /// freed by a commit finds its next delivery waiting (0 to 64). Each
    /// spends a lease while it waits, and one attempt if an outage
    /// outlasts its lease: 0 leases only for free slots. [default: 4 with
    /// --source orbit, 16 with --source nats (pull requests of 8)]
    #[arg(long, env = "RECEIVER_PREFETCH", value_parser = clap::value_parser!(u32).range(0..=64))]
    prefetch: Option<u32>,
}

fn run_consume(args: ConsumeArgs) -> ExitCode {
    let metrics_addr = args.metrics_addr.clone();
    let config = match consume_config(args) {
        Ok(config) => config,
        Err(e) => return fail(EXIT_CONFIG, e),
    };
    let runtime = runtime();
    let shutdown = shutdown_on_signal(&runtime);
    let code = runtime.block_on(async {
        let health = Health::new();
        let endpoint = match metrics_endpoint(metrics_addr, &health).await {
            Ok(endpoint) => endpoint,
            Err((code, e)) => return fail(code, e),
        };
        let outcome = consume::run(config, health, shutdown).await;
        if let Some(endpoint) = endpoint {
            endpoint.stop();
        }
        match outcome {
            Ok(Some(report)) => {
                tracing::info!(
                    received = report.received,
                    acked = report.acked,
                    failed = report.failed,
                    terminated = report.terminated,
                    ack_refused = report.ack_refused,
                    abandoned = report.abandoned,
                    released = report.released,
                    "stopped"
                );
                ExitCode::SUCCESS
            }
            Ok(None) => {
                tracing::info!("stopped during start-up; nothing was leased");
                ExitCode::SUCCESS
            }
            Err(e) if e.is_configuration() => fail(EXIT_CONFIG, e),
            Err(e) => fail(EXIT_FAILED, e),
        }
    });
    runtime.shutdown_timeout(Duration::from_secs(1));
    code
}

fn consume_config(args: ConsumeArgs) -> Result<ConsumeConfig, String> {
    let ConsumeArgs {
        receiver,
        source,
        subscription_id,
        nats,
        prefetch,
        ..
    } = args;
    let consumer = ConsumerOptions {
        shutdown_grace: CONSUME_GRACE,
        prefetch: prefetch.unwrap_or(match source {
            SourceKind::Orbit => ConsumerOptions::default().prefetch,
            SourceKind::Nats => result_inbox::nats::DEFAULT_PREFETCH,
        }),
        ..ConsumerOptions::default()
    };
    let (source, dsn, name) = match source {
        SourceKind::Orbit => {
            let subscription = required_subscription(subscription_id)?;
            let resolved = receiver.resolve()?;
            let source = SourceConfig::Orbit {
                settings: resolved.orbit,
                subscription,
                call_timeout: ORBIT_CALL_TIMEOUT,
            };
            (source, resolved.dsn, resolved.name)
        }
        SourceKind::Nats => {
            let (dsn, name, settings) = receiver.resolve_for_nats(nats)?;
            let source = SourceConfig::Nats {
                settings,
                call_timeout: NATS_CALL_TIMEOUT,
            };
            (source, dsn, name)
        }
    };
    Ok(ConsumeConfig {
        source,
        dsn,
        name,
        consumer,
    })
}

fn run_check(receiver: Receiver, subscription_id: Option<String>, demo: bool) -> ExitCode {
    let resolved = match receiver.resolve() {
        Ok(r) => r,
        Err(e) => return fail(EXIT_CONFIG, e),
    };
    // `consume` needs a subscription; `demo` creates its own, and checks
    // one only when it is given.
    let subscription = match (demo, subscription_id) {
        (true, None) => None,
        (_, id) => match required_subscription(id) {
            Ok(s) => Some(s),
            Err(e) => return fail(EXIT_CONFIG, e),
        },
    };
    let config = CheckConfig {
        orbit: resolved.orbit,
        dsn: resolved.dsn,
        name: resolved.name,
        subscription,
        demo,
        orbit_call_timeout: ORBIT_CALL_TIMEOUT,
    };
    match runtime().block_on(check::run(config)) {
        Ok(findings) => print_findings(&findings),
        Err(e) => fail(EXIT_CONFIG, format!("ORBIT_URL: {e}")),
    }
}

fn run_check_nats(receiver: Receiver, nats: NatsArgs) -> ExitCode {
    let (dsn, name, settings) = match receiver.resolve_for_nats(nats) {
        Ok(r) => r,
        Err(e) => return fail(EXIT_CONFIG, e),
    };
    let findings = runtime().block_on(check::run_nats(&dsn, name, &settings, NATS_CALL_TIMEOUT));
    print_findings(&findings)
}

/// One line per check; exit 0 only if all passed.
fn print_findings(findings: &[check::Finding]) -> ExitCode {
    for finding in findings {
        println!("{finding}");
    }
    if findings.iter().all(|f| f.ok()) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_FAILED)
    }
}

fn run_subscribe(orbit: OrbitArgs, events: Option<String>) -> ExitCode {
    let types = match events.as_deref().map(subscribe::event_types) {
        None => EventType::ALL.to_vec(),
        Some(Ok(types)) => types,
        Some(Err(e)) => return fail(EXIT_CONFIG, format!("--events: {e}")),
    };
    let orbit = match orbit.resolve() {
        Ok(o) => o,
        Err(e) => return fail(EXIT_CONFIG, e),
    };
    let client = match orbit_client(&orbit) {
        Ok(c) => c,
        Err(e) => return fail(EXIT_CONFIG, e),
    };
    match runtime().block_on(subscribe::run(&client, &orbit.queue_id, &types)) {
        Ok(id) => {
            println!("subscription={id}");
            ExitCode::SUCCESS
        }
        Err(e) => subscribe_failure(e),
    }
}

fn run_subscribe_nats(
    orbit: OrbitArgs,
    events: Option<String>,
    nats: NatsArgs,
    consumer: NatsConsumerArgs,
) -> ExitCode {
    if events.is_some() {
        return fail(
            EXIT_CONFIG,
            "--events is only for --source orbit: a JetStream consumer takes every event on the queue's subject",
        );
    }
    let settings = match nats.resolve(orbit.queue_id) {
        Ok(s) => s,
        Err(e) => return fail(EXIT_CONFIG, e),
    };
    let defaults = result_inbox::nats::ConsumerSpec::default();
    let spec = result_inbox::nats::ConsumerSpec {
        ack_wait: consumer
            .ack_wait
            .map_or(defaults.ack_wait, Duration::from_secs),
        max_deliver: consumer.max_deliver.unwrap_or(defaults.max_deliver),
        create_stream: consumer.create_stream,
    };
    // Only what was asked for can be at odds with an existing consumer.
    let asked_otherwise = |done: &result_inbox::nats::Provisioned| {
        consumer
            .ack_wait
            .is_some_and(|_| done.ack_wait != spec.ack_wait)
            || consumer.max_deliver.is_some_and(|n| done.max_deliver != n)
    };
    match runtime().block_on(subscribe::nats(&settings, NATS_CALL_TIMEOUT, &spec)) {
        Ok(done) => {
            if !done.consumer_created && asked_otherwise(&done) {
                tracing::warn!(
                    ack_wait_s = done.ack_wait.as_secs(),
                    max_deliver = done.max_deliver,
                    "the consumer exists with its own AckWait and MaxDeliver, left as they are: --ack-wait and --max-deliver only shape a consumer this command creates"
                );
            }
            if done.stream_created {
                println!(
                    "stream={} created subject={}",
                    settings.stream, settings.subject
                );
            }
            println!(
                "consumer={} stream={} {} ack_wait_s={} max_deliver={}",
                settings.consumer,
                settings.stream,
                if done.consumer_created {
                    "created"
                } else {
                    "existing"
                },
                done.ack_wait.as_secs(),
                done.max_deliver
            );
            ExitCode::SUCCESS
        }
        Err(e) => subscribe_failure(e),
    }
}

fn subscribe_failure(e: SubscribeError) -> ExitCode {
    let code = if e.is_configuration() {
        EXIT_CONFIG
    } else {
        EXIT_FAILED
    };
    fail(code, e)
}

/// The exit code of a database failure: the configuration's to fix (a
/// refused login, an unknown database, a missing grant) or a failure.
fn database_failure(what: &str, e: DbError) -> ExitCode {
    let configuration = e.is_refusal() || e.number() == Some(mysql_errno::NO_SUCH_TABLE);
    let code = if configuration {
        EXIT_CONFIG
    } else {
        EXIT_FAILED
    };
    fail(code, format!("{what}: database: {e}"))
}

/// `receiver verify`'s progress bar on stderr (drawn only on a terminal)
/// and its findings on stdout.
struct VerifyProgress {
    bar: indicatif::ProgressBar,
}

impl verify::Report for VerifyProgress {
    fn total(&mut self, rows: u64) {
        self.bar.set_length(rows);
    }

    fn advance(&mut self, rows: u64) {
        self.bar.inc(rows);
    }

    fn finding(&mut self, finding: verify::Finding) {
        self.bar.suspend(|| println!("{finding}"));
    }
}

fn run_verify(database: DatabaseArgs) -> ExitCode {
    let dsn = match required_dsn(database.dsn) {
        Ok(dsn) => dsn,
        Err(e) => return fail(EXIT_CONFIG, e),
    };
    let bar =
        indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::stderr());
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} rows {per_sec} {eta}")
            .expect("a valid template"),
    );
    let mut progress = VerifyProgress { bar };
    let outcome = runtime().block_on(verify::run(&dsn, &mut progress));
    progress.bar.finish_and_clear();
    match outcome {
        Ok(summary) => {
            println!("{summary}");
            if summary.ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(EXIT_FAILED)
            }
        }
        Err(e) => database_failure("verify", e),
    }
}

fn run_stats(database: DatabaseArgs, json: bool) -> ExitCode {
    let dsn = match required_dsn(database.dsn) {
        Ok(dsn) => dsn,
        Err(e) => return fail(EXIT_CONFIG, e),
    };
    match runtime().block_on(stats::run(&dsn)) {
        Ok(stats) if json => {
            println!(
                "{}",
                serde_json::to_string(&stats).expect("stats serialize")
            );
            ExitCode::SUCCESS
        }
        Ok(stats) => {
            for line in stats.lines() {
                println!("{line}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => database_failure("stats", e),
    }
}

fn run_inspect(database: DatabaseArgs, what: InspectWhat) -> ExitCode {
    let dsn = match required_dsn(database.dsn) {
        Ok(dsn) => dsn,
        Err(e) => return fail(EXIT_CONFIG, e),
    };
    let runtime = runtime();
    match what {
        InspectWhat::Event { id, show_canonical } => {
            let Some(id) = EventId::parse(&id) else {
                return fail(
                    EXIT_CONFIG,
                    "the event id must be 32 lowercase hexadecimal characters",
                );
            };
            let options = Inspect { show_canonical };
            match runtime.block_on(inspect::event(&dsn, &id)) {
                Ok(rows) if rows.is_empty() => {
                    fail(EXIT_FAILED, format!("no inbox row for event {id}"))
                }
                Ok(rows) => {
                    for line in rows.iter().flat_map(|r| r.lines(options)) {
                        println!("{line}");
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => database_failure("inspect", e),
            }
        }
        InspectWhat::Task { id, show_canonical } => {
            let Some(id) = TaskId::parse(&id) else {
                return fail(
                    EXIT_CONFIG,
                    "the task id must be 32 lowercase hexadecimal characters",
                );
            };
            let options = Inspect { show_canonical };
            match runtime.block_on(inspect::task(&dsn, &id)) {
                Ok(report) if report.views.is_empty() && report.events.is_empty() => {
                    fail(EXIT_FAILED, format!("nothing stored for task {id}"))
                }
                Ok(report) => {
                    for view in &report.views {
                        println!("{}", view.line);
                    }
                    for line in report.events.iter().flat_map(|r| r.lines(options)) {
                        println!("{line}");
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => database_failure("inspect", e),
            }
        }
    }
}

fn run_init(dsn: Option<String>, keep_existing: bool) -> ExitCode {
    let dsn = match required_dsn(dsn) {
        Ok(dsn) => dsn,
        Err(e) => return fail(EXIT_CONFIG, e),
    };
    let existing = if keep_existing {
        schema::Existing::Report
    } else {
        schema::Existing::Refuse
    };
    match runtime().block_on(schema::init_with(&dsn, existing)) {
        Ok(report) => {
            println!(
                "receiver_schema_initialized=true foreign_keys={}",
                report.foreign_keys
            );
            ExitCode::SUCCESS
        }
        Err(e) if e.is_configuration() => fail(EXIT_CONFIG, format!("init on {dsn}: {e}")),
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
