//! The arguments several commands share: where Orbit, NATS and the
//! receiver's database are, and who the receiver is.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

use result_inbox::db::Dsn;
use result_inbox::ids::SubscriptionId;
#[cfg(feature = "nats")]
use result_inbox::nats::NatsSettings;
use result_inbox::scope::{InboxScope, ReceiverName};

use crate::config::OrbitSettings;

/// Where `consume` takes its deliveries from.
#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum SourceKind {
    /// An Orbit subscription's WebSocket stream.
    Orbit,
    /// A NATS JetStream durable pull consumer.
    Nats,
    /// A RabbitMQ quorum queue.
    Rabbitmq,
}

/// Why a receiver built without a broker (`make demo` builds one for
/// Orbit alone) refuses it: `what` is the option or variable that asked
/// for it, `broker` its name.
#[cfg(not(all(feature = "nats", feature = "rabbitmq")))]
pub(crate) fn built_without(what: &str, broker: &str) -> String {
    format!("{what}: this receiver was built without {broker}; build it with the feature `cli` (make build, or cargo install --path . --features cli)")
}

/// The NATS servers and how to log in: what `--source nats` and a notify
/// subject both read.
#[derive(Args, Clone, Default)]
pub(crate) struct NatsServerArgs {
    /// The NATS server(s), e.g. nats://127.0.0.1:4222; tls:// requires TLS.
    /// Never printed with a user or password it may contain.
    #[arg(long, env = "NATS_URL", hide_env_values = true)]
    pub(crate) nats_url: Option<String>,
    /// A token to log in with. Never printed.
    #[arg(long, env = "NATS_TOKEN", hide_env_values = true)]
    pub(crate) nats_token: Option<String>,
    /// A credentials file (user JWT and NKey seed) to log in with.
    #[arg(long, env = "NATS_CREDS_FILE")]
    pub(crate) nats_creds_file: Option<PathBuf>,
    /// PEM file with the certificate(s) of a private CA that signed the
    /// server's certificate.
    #[arg(long, env = "NATS_CA_FILE")]
    pub(crate) nats_ca_file: Option<PathBuf>,
    /// Refuse a connection without TLS (implied by a tls:// URL). From the
    /// environment: true, false, yes, no, on, off, 1 or 0, in any case.
    #[arg(long, env = "NATS_REQUIRE_TLS", value_parser = clap::builder::BoolishValueParser::new())]
    pub(crate) nats_require_tls: bool,
}

/// Where the queue's events are on NATS (only for `--source nats`).
#[derive(Args, Default)]
pub(crate) struct NatsArgs {
    #[command(flatten)]
    pub(crate) server: NatsServerArgs,
    /// The JetStream stream that holds the queue's events.
    #[arg(long, env = "NATS_STREAM")]
    pub(crate) nats_stream: Option<String>,
    /// The durable pull consumer of that stream (explicit acks; its filter
    /// subject must be the queue's subject).
    #[arg(long, env = "NATS_CONSUMER")]
    pub(crate) nats_consumer: Option<String>,
    /// The subject of the queue's events [default: orbit.results.<ORBIT_QUEUE_ID>].
    #[arg(long, env = "NATS_SUBJECT")]
    pub(crate) nats_subject: Option<String>,
}

/// The RabbitMQ server: what `--source rabbitmq` and a notify queue both
/// read.
#[derive(Args, Clone, Default)]
pub(crate) struct AmqpServerArgs {
    /// The RabbitMQ server, amqp://user:password@host:5672/vhost, or
    /// amqps:// for TLS. Never printed with its password.
    #[arg(long, env = "AMQP_URL", hide_env_values = true)]
    pub(crate) amqp_url: Option<String>,
}

/// Where the queue's events are on RabbitMQ (only for `--source rabbitmq`).
#[derive(Args, Default)]
pub(crate) struct RabbitArgs {
    #[command(flatten)]
    pub(crate) server: AmqpServerArgs,
    /// The quorum queue of the queue's events [default:
    /// orbit.results.<ORBIT_QUEUE_ID>].
    #[arg(long, env = "AMQP_QUEUE")]
    pub(crate) amqp_queue: Option<String>,
    /// How long a delivery whose attempt failed is held before it is
    /// returned to the queue, where the return counts toward the queue's
    /// delivery limit: the pause between two attempts [default: 5s].
    #[arg(long, env = "AMQP_RETRY_AFTER", value_parser = positive_duration)]
    pub(crate) amqp_retry_after: Option<Duration>,
}

/// Where Orbit is and who the receiver is there.
#[derive(Args, Default)]
pub(crate) struct OrbitArgs {
    /// Orbit's base URL (http:// only on loopback; https:// in production).
    /// Overrides the credentials file's orbit_url.
    #[arg(long, env = "ORBIT_URL")]
    pub(crate) orbit_url: Option<String>,
    /// The credentials file written by bootstrap (token, queue id, URL); must
    /// be private (mode 0600).
    #[arg(long, env = "ORBIT_CREDENTIALS_FILE")]
    pub(crate) credentials_file: Option<PathBuf>,
    /// The queue token; overrides the credentials file. Never printed.
    #[arg(long, env = "ORBIT_TOKEN", hide_env_values = true)]
    pub(crate) token: Option<String>,
    /// The queue this receiver consumes; overrides the credentials file.
    #[arg(long, env = "ORBIT_QUEUE_ID")]
    pub(crate) queue_id: Option<String>,
    /// PEM file with the certificate(s) of a private CA that signed Orbit's
    /// certificate, trusted besides Mozilla's root certificates for https://.
    #[arg(long, env = "ORBIT_CA_FILE")]
    pub(crate) orbit_ca_file: Option<PathBuf>,
}

impl OrbitArgs {
    pub(crate) fn resolve(self) -> Result<OrbitSettings, String> {
        let orbit = self.settings().map_err(|e| e.to_string())?;
        if !orbit.url.is_tls() && !orbit.url.is_loopback() {
            tracing::warn!(url = %orbit.url, "plain http:// to a non-loopback host: tokens and results travel unencrypted; use https://");
        }
        Ok(orbit)
    }
}

/// The receiver's own database, for the tools that need nothing else.
#[derive(Args)]
pub(crate) struct DatabaseArgs {
    /// The receiver's own database, e.g. mysql://receiver@127.0.0.1:3306/receiver
    /// or postgres://receiver@127.0.0.1:5432/receiver; must name the
    /// database. SELECT on the two tables is enough (verify after a prune:
    /// also on receiver_pruned).
    #[arg(
        long,
        env = "ORBIT_RECEIVER_DSN",
        hide_env_values = true,
        global = true
    )]
    pub(crate) dsn: Option<String>,
}

/// What `demo`, `consume` and `check` need: Orbit, the receiver's database
/// and name.
#[derive(Args)]
pub(crate) struct Receiver {
    #[command(flatten)]
    pub(crate) orbit: OrbitArgs,
    /// The receiver's own database, e.g. mysql://receiver@127.0.0.1:3306/receiver
    /// or postgres://receiver@127.0.0.1:5432/receiver; must name the
    /// database.
    #[arg(long, env = "ORBIT_RECEIVER_DSN", hide_env_values = true)]
    pub(crate) dsn: Option<String>,
    /// The receiver's fixed name: the same for every restart and instance.
    /// At most 64 ASCII characters: a letter or digit, then letters, digits,
    /// '.', '_' or '-'.
    #[arg(long, env = "RECEIVER_NAME", default_value = ReceiverName::DEFAULT)]
    pub(crate) receiver_name: String,
}

/// A receiver's resolved configuration.
pub(crate) struct Resolved {
    pub(crate) orbit: OrbitSettings,
    pub(crate) dsn: Dsn,
    pub(crate) scope: InboxScope,
}

/// The DSN, which every database command needs, named when it is missing;
/// of either engine.
pub(crate) fn required_dsn(dsn: Option<String>) -> Result<Dsn, String> {
    let dsn = dsn.ok_or(
        "ORBIT_RECEIVER_DSN is not set (or pass --dsn): the receiver's own database, mysql://user:password@host:port/database or postgres://user:password@host:port/database",
    )?;
    Dsn::parse(&dsn).map_err(|e| format!("ORBIT_RECEIVER_DSN: {e}"))
}

pub(crate) fn required_subscription(id: Option<String>) -> Result<SubscriptionId, String> {
    let id = id.ok_or(
        "ORBIT_SUBSCRIPTION_ID is not set (or pass --subscription-id): the subscription to consume (32 hex), created with the same credentials",
    )?;
    SubscriptionId::parse(&id)
        .map_err(|_| "ORBIT_SUBSCRIPTION_ID must be 32 lowercase hexadecimal characters".to_owned())
}

/// A duration as the commands take it: a whole number and a unit, `ms`,
/// `s`, `m`, `h` or `d` (`30d`, `36h`, `50ms`).
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits);
    let n: u64 = number.parse().map_err(|_| {
        format!("{text:?} is not a duration: a whole number and a unit (ms, s, m, h, d), e.g. 30d")
    })?;
    let seconds = |factor: u64| {
        n.checked_mul(factor)
            .map(Duration::from_secs)
            .ok_or_else(|| format!("{text:?} is too long"))
    };
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" => seconds(1),
        "m" => seconds(60),
        "h" => seconds(3_600),
        "d" => seconds(86_400),
        "" => Err(format!(
            "{text:?} has no unit: a whole number and one of ms, s, m, h, d, e.g. 30d"
        )),
        unit => Err(format!(
            "{text:?}: {unit:?} is not a unit; a whole number and one of ms, s, m, h, d, e.g. 30d (a week is 7d)"
        )),
    }
}

/// A duration longer than zero, as [`parse_duration`] reads it.
pub(crate) fn positive_duration(text: &str) -> Result<Duration, String> {
    let duration = parse_duration(text)?;
    if duration.is_zero() {
        return Err("must be more than zero, e.g. 1s".to_owned());
    }
    Ok(duration)
}

/// A duration as the commands print it: whole seconds where it is, else
/// milliseconds (`60s`, `1500ms`).
pub(crate) fn shown_duration(duration: Duration) -> String {
    match duration.subsec_millis() {
        0 => format!("{}s", duration.as_secs()),
        _ => format!("{}ms", duration.as_millis()),
    }
}

impl Receiver {
    pub(crate) fn resolve(self) -> Result<Resolved, String> {
        let (dsn, name) = self.database_and_name()?;
        let orbit = self.orbit.resolve()?;
        let scope = InboxScope::new(name, orbit.queue_id.clone());
        Ok(Resolved { orbit, dsn, scope })
    }

    /// For `--source nats`: the database, the scope and NATS; of Orbit's
    /// settings only the queue.
    #[cfg(feature = "nats")]
    pub(crate) fn resolve_for_nats(
        self,
        nats: NatsArgs,
    ) -> Result<(Dsn, InboxScope, NatsSettings), String> {
        let (dsn, name) = self.database_and_name()?;
        let queue_id = self.orbit.queue_id().map_err(|e| e.to_string())?;
        let settings = nats.settings(queue_id).map_err(|e| e.to_string())?;
        let scope = InboxScope::new(name, settings.queue_id.clone());
        Ok((dsn, scope, settings))
    }

    /// For `--source rabbitmq`: the database, the scope and RabbitMQ; of
    /// Orbit's settings only the queue.
    #[cfg(feature = "rabbitmq")]
    pub(crate) fn resolve_for_rabbitmq(
        self,
        rabbit: RabbitArgs,
    ) -> Result<(Dsn, InboxScope, result_inbox::rabbitmq::RabbitSettings), String> {
        let (dsn, name) = self.database_and_name()?;
        let queue_id = self.orbit.queue_id().map_err(|e| e.to_string())?;
        let settings = rabbit.settings(queue_id).map_err(|e| e.to_string())?;
        let scope = InboxScope::new(name, settings.queue_id.clone());
        Ok((dsn, scope, settings))
    }

    fn database_and_name(&self) -> Result<(Dsn, ReceiverName), String> {
        let dsn = required_dsn(self.dsn.clone())?;
        let name =
            ReceiverName::parse(&self.receiver_name).map_err(|e| format!("RECEIVER_NAME: {e}"))?;
        Ok((dsn, name))
    }
}
