//! The `orbit-dev` command: `serve`, `bootstrap` and thin admin wrappers.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use orbit_dev::client::{self, BaseUrl, HttpResponse};
use orbit_dev::credentials::{write_secret_file, Credentials};
use orbit_dev::ids::random_secret;
use orbit_dev::Config;
use serde::Deserialize;
use tokio::signal::unix::{signal, SignalKind};

const DEFAULT_ADMIN_TOKEN_FILE: &str = ".local/orbit-dev.admin-token";

/// A local development stand-in for the Orbit task platform.
#[derive(Parser)]
#[command(name = "orbit-dev", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the server.
    Serve(ServeArgs),
    /// Create (or reuse) a queue and write a credentials file for a new token.
    Bootstrap(BootstrapArgs),
    /// Finish a task (admin): succeeded, failed or needs_review.
    Finish(FinishArgs),
    /// Add retry budget to a delivery (admin); an EXPIRED one becomes PENDING.
    AddBudget(AddBudgetArgs),
    /// Submit a task on the credentials' queue (its task.submitted event is
    /// delivered to the queue's subscriptions); prints task=<id>.
    Submit(QueueArgs),
    /// Cancel a task on the credentials' queue (its task.cancelled event is
    /// delivered to the queue's subscriptions); prints task=<id>
    /// version=<n> state=CANCELLED.
    Cancel(CancelArgs),
    /// Publish the events of a subscription to NATS JetStream or RabbitMQ,
    /// as a platform's bridge would: to orbit.results.<queue_id>, under the
    /// event id, each delivery acknowledged once the broker confirmed it.
    Bridge(BridgeArgs),
}

/// A queue's credentials, as `bootstrap` wrote them.
#[derive(Args)]
struct QueueArgs {
    /// The credentials file written by `bootstrap`.
    #[arg(long, env = "ORBIT_CREDENTIALS_FILE")]
    credentials_file: PathBuf,
    /// Orbit's base URL; the credentials file's when absent.
    #[arg(long, env = "ORBIT_URL")]
    url: Option<String>,
}

#[derive(Args)]
struct BridgeArgs {
    #[command(flatten)]
    queue: QueueArgs,
    /// The subscription whose events are published.
    #[arg(long, env = "ORBIT_SUBSCRIPTION_ID")]
    subscription: String,
    /// The NATS server; a `user:password@` or `token@` in it is sent as
    /// the login and never printed.
    #[arg(
        long,
        env = "NATS_URL",
        hide_env_values = true,
        required_unless_present = "amqp_url",
        conflicts_with = "amqp_url"
    )]
    nats_url: Option<String>,
    /// The subject [default: orbit.results.<queue_id>].
    #[arg(long, env = "NATS_SUBJECT")]
    subject: Option<String>,
    /// Instead of NATS, the RabbitMQ server, amqp://user:password@host:port/vhost;
    /// the password is never printed.
    #[arg(long, env = "AMQP_URL", hide_env_values = true)]
    amqp_url: Option<String>,
    /// The RabbitMQ queue, published to through the default exchange
    /// [default: orbit.results.<queue_id>].
    #[arg(long, env = "AMQP_QUEUE")]
    amqp_queue: Option<String>,
}

impl QueueArgs {
    /// The credentials and the base URL to reach Orbit at.
    fn load(&self) -> Result<(Credentials, BaseUrl), String> {
        let text = std::fs::read_to_string(&self.credentials_file)
            .map_err(|e| format!("cannot read {}: {e}", self.credentials_file.display()))?;
        let credentials: Credentials = serde_json::from_str(&text).map_err(|e| {
            format!(
                "{} is not a credentials file: {e}",
                self.credentials_file.display()
            )
        })?;
        let url = BaseUrl::parse(self.url.as_deref().unwrap_or(&credentials.orbit_url))?;
        Ok((credentials, url))
    }
}

#[derive(Args)]
struct ServeArgs {
    /// Address to listen on; port 0 picks a free port (the line printed on
    /// stdout names the real one).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Lease length in milliseconds.
    #[arg(long, default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(1..=86_400_000))]
    lease_ms: u64,
    /// Attempts a new delivery gets.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=1000))]
    budget: u64,
    /// Interval between WebSocket pings, in milliseconds.
    #[arg(long, default_value_t = 15_000, value_parser = clap::value_parser!(u64).range(100..=3_600_000))]
    ping_ms: u64,
    /// The admin token. When absent, one is generated and written to
    /// --admin-token-file.
    #[arg(long, env = "ORBIT_DEV_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<String>,
    /// Where a generated admin token is written (mode 0600, replaced if it
    /// exists).
    #[arg(long, default_value = DEFAULT_ADMIN_TOKEN_FILE)]
    admin_token_file: PathBuf,
}

/// The server, found the same way by every command: `--url`, else
/// `ORBIT_URL`, else the `orbit_url` of the credentials file
/// (`--credentials-file`, `ORBIT_CREDENTIALS_FILE`), else
/// `http://127.0.0.1:8080`.
const DEFAULT_URL: &str = "http://127.0.0.1:8080";

#[derive(Args)]
struct AdminArgs {
    /// Base URL of the orbit-dev server [default: the credentials file's
    /// orbit_url, else http://127.0.0.1:8080].
    #[arg(long, env = "ORBIT_URL")]
    url: Option<String>,
    /// A credentials file, read only for its orbit_url.
    #[arg(long, env = "ORBIT_CREDENTIALS_FILE")]
    credentials_file: Option<PathBuf>,
    /// The admin token; when absent it is read from --admin-token-file.
    #[arg(long, env = "ORBIT_DEV_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<String>,
    /// File holding the admin token, as written by `orbit-dev serve`.
    #[arg(long, default_value = DEFAULT_ADMIN_TOKEN_FILE)]
    admin_token_file: PathBuf,
}

#[derive(Args)]
struct BootstrapArgs {
    #[command(flatten)]
    admin: AdminArgs,
    /// Application name.
    #[arg(long)]
    application: String,
    /// Namespace name.
    #[arg(long)]
    namespace: String,
    /// Environment name.
    #[arg(long)]
    environment: String,
    /// Queue name.
    #[arg(long)]
    queue: String,
    /// Also grant events:read, events:consume and events:manage.
    #[arg(long)]
    event_access: bool,
    /// Exact scopes to grant instead (comma-separated), e.g.
    /// events:read,events:consume.
    #[arg(long, value_delimiter = ',', conflicts_with = "event_access")]
    scopes: Option<Vec<String>>,
    /// Where to write the credentials file (mode 0600).
    #[arg(long)]
    output: PathBuf,
    /// Replace an existing credentials file.
    #[arg(long)]
    force: bool,
}

#[derive(Args)]
struct CancelArgs {
    #[command(flatten)]
    queue: QueueArgs,
    /// The task's id, as `submit` printed it.
    #[arg(long)]
    task_id: String,
}

#[derive(Args)]
struct FinishArgs {
    #[command(flatten)]
    admin: AdminArgs,
    /// The task's id.
    #[arg(long)]
    task_id: String,
    /// succeeded, failed or needs_review.
    #[arg(long, value_parser = ["succeeded", "failed", "needs_review"])]
    outcome: String,
    /// The result, as JSON text (sent unchanged).
    #[arg(long)]
    result: Option<String>,
}

#[derive(Args)]
struct AddBudgetArgs {
    #[command(flatten)]
    admin: AdminArgs,
    /// The delivery's id.
    #[arg(long)]
    delivery_id: String,
    /// Attempts to add, 1 to 100.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=100))]
    add: u64,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("orbit-dev: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = runtime.block_on(async {
        match cli.command {
            Command::Serve(args) => serve(args).await,
            Command::Bootstrap(args) => bootstrap(args).await,
            Command::Finish(args) => finish(args).await,
            Command::AddBudget(args) => add_budget(args).await,
            Command::Submit(args) => submit(args).await,
            Command::Cancel(args) => cancel(args).await,
            Command::Bridge(args) => bridge(args).await,
        }
    });
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("orbit-dev: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn submit(args: QueueArgs) -> Result<(), String> {
    let (credentials, url) = args.load()?;
    let authorization = format!("Bearer {}", credentials.token);
    let answer = client::send(
        &url,
        "POST",
        "/v1/tasks",
        &[("Authorization", &authorization)],
        None,
    )
    .await
    .map_err(|e| format!("cannot reach {}: {e}", url.authority()))?;
    #[derive(Deserialize)]
    struct Task {
        id: String,
    }
    match answer.status {
        200 | 201 => {
            let task: Task = answer
                .json()
                .map_err(|e| format!("unexpected answer to the submission: {e}"))?;
            println!("task={}", task.id);
            Ok(())
        }
        status => Err(format!(
            "Orbit answered {status} {} to the submission",
            answer.error_code().unwrap_or_default()
        )),
    }
}

async fn cancel(args: CancelArgs) -> Result<(), String> {
    let (credentials, url) = args.queue.load()?;
    let authorization = format!("Bearer {}", credentials.token);
    let path = format!("/v1/tasks/{}/cancel", urlencoding(&args.task_id));
    let answer = client::send(
        &url,
        "POST",
        &path,
        &[("Authorization", &authorization)],
        None,
    )
    .await
    .map_err(|e| format!("cannot reach {}: {e}", url.authority()))?;
    #[derive(Deserialize)]
    struct Task {
        id: String,
        version: u64,
        state: String,
    }
    match answer.status {
        200 => {
            let task: Task = answer
                .json()
                .map_err(|e| format!("unexpected answer to the cancellation: {e}"))?;
            println!(
                "task={} version={} state={}",
                task.id, task.version, task.state
            );
            Ok(())
        }
        status => Err(format!(
            "Orbit answered {status} {} to the cancellation",
            answer.error_code().unwrap_or_default()
        )),
    }
}

/// A path segment as it is typed: an id is hex, anything else is sent
/// percent-encoded so that it cannot reach another path.
fn urlencoding(segment: &str) -> String {
    segment
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' => (b as char).to_string(),
            other => format!("%{other:02X}"),
        })
        .collect()
}

#[cfg(any(feature = "nats", feature = "rabbitmq"))]
async fn bridge(args: BridgeArgs) -> Result<(), String> {
    use orbit_dev::bridge::{Bridge, Destination};
    init_logging();
    let (credentials, orbit) = args.queue.load()?;
    let default = format!("orbit.results.{}", credentials.queue_id);
    let to = match (args.nats_url, args.amqp_url) {
        (Some(url), _) => nats_destination(url, args.subject.unwrap_or(default))?,
        (None, Some(url)) => rabbitmq_destination(&url, args.amqp_queue.unwrap_or(default))?,
        (None, None) => {
            return Err("give --nats-url (NATS_URL) or --amqp-url (AMQP_URL)".to_owned())
        }
    };
    let shutdown = stop_signal()?;
    let (name, server) = match &to {
        #[cfg(feature = "nats")]
        Destination::Nats { url, subject } => (subject.clone(), orbit_dev::bridge::shown_url(url)),
        #[cfg(feature = "rabbitmq")]
        Destination::Rabbitmq { url, queue } => (format!("queue {queue}"), url.to_string()),
    };
    println!(
        "orbit-dev: bridging subscription {} to {name} on {server}",
        args.subscription
    );
    orbit_dev::bridge::run(
        Bridge {
            orbit,
            token: credentials.token,
            subscription: args.subscription,
            to,
        },
        shutdown,
    )
    .await
}

/// `make demo`'s orbit-dev, which has no broker to publish to.
#[cfg(not(any(feature = "nats", feature = "rabbitmq")))]
async fn bridge(_: BridgeArgs) -> Result<(), String> {
    Err(built_without(
        "NATS and RabbitMQ",
        "orbit-dev/nats, orbit-dev/rabbitmq",
    ))
}

#[cfg(feature = "nats")]
fn nats_destination(
    url: String,
    subject: String,
) -> Result<orbit_dev::bridge::Destination, String> {
    Ok(orbit_dev::bridge::Destination::Nats { url, subject })
}

#[cfg(all(not(feature = "nats"), feature = "rabbitmq"))]
fn nats_destination(_: String, _: String) -> Result<orbit_dev::bridge::Destination, String> {
    Err(built_without("NATS", "orbit-dev/nats"))
}

#[cfg(feature = "rabbitmq")]
fn rabbitmq_destination(
    url: &str,
    queue: String,
) -> Result<orbit_dev::bridge::Destination, String> {
    Ok(orbit_dev::bridge::Destination::Rabbitmq {
        url: orbit_dev::bridge::AmqpAddress::parse(url)?,
        queue,
    })
}

#[cfg(all(not(feature = "rabbitmq"), feature = "nats"))]
fn rabbitmq_destination(_: &str, _: String) -> Result<orbit_dev::bridge::Destination, String> {
    Err(built_without("RabbitMQ", "orbit-dev/rabbitmq"))
}

/// Why a bridge to a broker this build left out is refused.
#[cfg(not(all(feature = "nats", feature = "rabbitmq")))]
fn built_without(broker: &str, features: &str) -> String {
    format!("this orbit-dev was built without {broker}: build it with `make build` ({features})")
}

/// stderr logging, `orbit_dev=info` unless `RUST_LOG` says otherwise
/// (`level` or `target=level`, comma-separated).
fn init_logging() {
    use tracing_subscriber::filter::Targets;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    let filter = std::env::var("RUST_LOG")
        .ok()
        .and_then(|f| f.parse::<Targets>().ok())
        .unwrap_or_else(|| Targets::new().with_target("orbit_dev", tracing::Level::INFO));
    let log = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    tracing_subscriber::registry()
        .with(log.with_filter(filter))
        .init();
}

/// Resolves at SIGTERM or SIGINT. The handlers are registered here, before
/// anything is announced, so that a signal sent right after an
/// announcement is never the default (fatal) one.
fn stop_signal() -> Result<impl std::future::Future<Output = ()>, String> {
    let mut terminate =
        signal(SignalKind::terminate()).map_err(|e| format!("cannot handle SIGTERM: {e}"))?;
    let mut interrupt =
        signal(SignalKind::interrupt()).map_err(|e| format!("cannot handle SIGINT: {e}"))?;
    Ok(async move {
        tokio::select! {
            _ = terminate.recv() => {}
            _ = interrupt.recv() => {}
        }
    })
}

async fn serve(args: ServeArgs) -> Result<(), String> {
    init_logging();
    let admin_token = match args.admin_token {
        Some(token) => {
            if token.is_empty() || token.chars().any(|c| !c.is_ascii_graphic()) {
                return Err("the admin token must be non-empty visible ASCII".into());
            }
            token
        }
        None => {
            let token = random_secret("oda_");
            write_secret_file(&args.admin_token_file, token.as_bytes(), true).map_err(|e| {
                format!(
                    "cannot write the admin token to {}: {e}",
                    args.admin_token_file.display()
                )
            })?;
            tracing::info!(path = %args.admin_token_file.display(), "admin token written");
            token
        }
    };
    let stopped = stop_signal()?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let address = listener
        .local_addr()
        .map_err(|e| format!("cannot read the bound address: {e}"))?;
    println!("orbit-dev listening on http://{address}");
    let mut config = Config::new(admin_token);
    config.lease = Duration::from_millis(args.lease_ms);
    config.budget = args.budget;
    config.ping_interval = Duration::from_millis(args.ping_ms);
    tracing::info!(lease_ms = args.lease_ms, budget = args.budget, "serving");
    let shutdown = async move {
        stopped.await;
        tracing::info!("stopping");
    };
    orbit_dev::serve(listener, config, shutdown)
        .await
        .map_err(|e| format!("the server failed: {e}"))
}

impl AdminArgs {
    /// The server's URL as the commands find it (see [`DEFAULT_URL`]).
    fn url(&self) -> String {
        if let Some(url) = &self.url {
            return url.clone();
        }
        self.credentials_file
            .as_deref()
            .and_then(|path| std::fs::read_to_string(path).ok())
            .and_then(|text| serde_json::from_str::<Credentials>(&text).ok())
            .map_or_else(|| DEFAULT_URL.to_owned(), |c| c.orbit_url)
    }

    fn token(&self) -> Result<String, String> {
        if let Some(token) = &self.admin_token {
            return Ok(token.clone());
        }
        let text = std::fs::read_to_string(&self.admin_token_file).map_err(|e| {
            format!(
                "no admin token: set ORBIT_DEV_ADMIN_TOKEN or --admin-token, or point \
                 --admin-token-file at the file `orbit-dev serve` wrote ({}: {e})",
                self.admin_token_file.display()
            )
        })?;
        let token = text.trim();
        if token.is_empty() {
            return Err(format!("{} is empty", self.admin_token_file.display()));
        }
        Ok(token.to_string())
    }

    async fn post(&self, path: &str, body: &[u8]) -> Result<HttpResponse, String> {
        let url = self.url();
        let base = BaseUrl::parse(&url)?;
        let token = self.token()?;
        let authorization = format!("Bearer {token}");
        client::send(
            &base,
            "POST",
            path,
            &[("Authorization", &authorization)],
            Some(body),
        )
        .await
        .map_err(|e| format!("cannot reach {url}: {e}"))
    }
}

/// Describes a failed call without echoing any body but an error's code and
/// message.
fn failure(what: &str, response: &HttpResponse) -> String {
    #[derive(Deserialize)]
    struct ErrorBody {
        error: ErrorInner,
    }
    #[derive(Deserialize)]
    struct ErrorInner {
        code: String,
        message: String,
    }
    match response.json::<ErrorBody>() {
        Ok(body) => format!(
            "{what} failed with HTTP {}: {} ({})",
            response.status, body.error.code, body.error.message
        ),
        Err(_) => format!("{what} failed with HTTP {}", response.status),
    }
}

async fn bootstrap(args: BootstrapArgs) -> Result<(), String> {
    if args.output.exists() && !args.force {
        return Err(format!(
            "{} exists; pass --force to replace it",
            args.output.display()
        ));
    }
    let mut request = serde_json::json!({
        "application": args.application,
        "namespace": args.namespace,
        "environment": args.environment,
        "queue": args.queue,
        "event_access": args.event_access,
    });
    if let Some(scopes) = &args.scopes {
        request["scopes"] = serde_json::json!(scopes);
    }
    let body = serde_json::to_vec(&request).map_err(|e| e.to_string())?;
    let response = args.admin.post("/v1/admin/bootstrap", &body).await?;
    if response.status != 201 {
        return Err(failure("bootstrap", &response));
    }
    #[derive(Deserialize)]
    struct Issued {
        token: String,
        queue_id: String,
        namespace: String,
        application: String,
        environment: String,
        queue: String,
        scopes: Vec<String>,
    }
    let issued: Issued = response
        .json()
        .map_err(|_| "the bootstrap response is not what was expected".to_string())?;
    let credentials = Credentials {
        orbit_url: args.admin.url().trim_end_matches('/').to_string(),
        token: issued.token,
        queue_id: issued.queue_id,
        namespace: issued.namespace,
        application: issued.application,
        environment: issued.environment,
        queue: issued.queue,
        scopes: issued.scopes,
    };
    let mut text = serde_json::to_vec_pretty(&credentials).map_err(|e| e.to_string())?;
    text.push(b'\n');
    write_credentials(&args.output, &text, args.force)?;
    println!(
        "orbit-dev: queue {} (id {}) in namespace {}, scopes {}; credentials written to {}",
        credentials.queue,
        credentials.queue_id,
        credentials.namespace,
        credentials.scopes.join(","),
        args.output.display()
    );
    Ok(())
}

fn write_credentials(path: &Path, text: &[u8], force: bool) -> Result<(), String> {
    write_secret_file(path, text, force).map_err(|e| match e.kind() {
        std::io::ErrorKind::AlreadyExists => {
            format!("{} exists; pass --force to replace it", path.display())
        }
        _ => format!("cannot write {}: {e}", path.display()),
    })
}

#[derive(Deserialize)]
struct TaskSummary {
    id: String,
    state: String,
    version: u64,
}

async fn finish(args: FinishArgs) -> Result<(), String> {
    // The result goes out byte for byte: build the body as text.
    let outcome = serde_json::to_string(&args.outcome).map_err(|e| e.to_string())?;
    let body = match &args.result {
        Some(result) => {
            serde_json::from_str::<serde::de::IgnoredAny>(result)
                .map_err(|_| "--result is not valid JSON".to_string())?;
            format!(r#"{{"outcome":{outcome},"result":{result}}}"#)
        }
        None => format!(r#"{{"outcome":{outcome}}}"#),
    };
    let path = format!("/v1/admin/tasks/{}/finish", args.task_id);
    let response = args.admin.post(&path, body.as_bytes()).await?;
    if response.status != 200 {
        return Err(failure("finish", &response));
    }
    let task: TaskSummary = response
        .json()
        .map_err(|_| "the finish response is not what was expected".to_string())?;
    println!(
        "orbit-dev: task {} is now {} (version {})",
        task.id, task.state, task.version
    );
    Ok(())
}

async fn add_budget(args: AddBudgetArgs) -> Result<(), String> {
    #[derive(Deserialize)]
    struct DeliverySummary {
        id: String,
        state: String,
        attempts: u64,
        budget: u64,
    }
    let body = format!(r#"{{"add":{}}}"#, args.add);
    let path = format!("/v1/admin/deliveries/{}/budget", args.delivery_id);
    let response = args.admin.post(&path, body.as_bytes()).await?;
    if response.status != 200 {
        return Err(failure("add-budget", &response));
    }
    let delivery: DeliverySummary = response
        .json()
        .map_err(|_| "the add-budget response is not what was expected".to_string())?;
    println!(
        "orbit-dev: delivery {} is now {} (attempts {}, budget {})",
        delivery.id, delivery.state, delivery.attempts, delivery.budget
    );
    Ok(())
}
