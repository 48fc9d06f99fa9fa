//! NATS JetStream as a [`Source`] of the consumer: a durable pull consumer
//! whose messages are Orbit event envelopes.
//!
//! | Orbit                          | JetStream                                   |
//! |--------------------------------|---------------------------------------------|
//! | subscription                   | durable pull consumer of a stream           |
//! | the subscription's queue       | the consumer's filter subject               |
//! | credit on the WebSocket        | pull requests (`batch` = credit granted)    |
//! | lease                          | `AckWait`                                   |
//! | retry budget                   | `MaxDeliver`                                |
//! | delivery id                    | `<stream>:<stream sequence>`                |
//! | attempt                        | the delivery count of the ack subject       |
//! | lease proof                    | the message's ack subject (`$JS.ACK…`)      |
//! | ACK, answered                  | `+ACK` as a request (a "double ack")        |
//! | `EXPIRED`                      | `MaxDeliver` reached (an advisory)          |
//!
//! What differs is in `docs/nats.md`: JetStream confirms every `+ACK` it
//! receives, including one for an attempt whose `AckWait` had passed (the
//! inbox makes the second delivery a duplicate), and it can terminate a
//! message (`+TERM`), which the consumer does only for bytes that can never
//! become a valid event.
//!
//! Credit is honoured exactly: each grant is one pull request of `batch = n`
//! on its own inbox subscription, so what the server delivers for it can be
//! counted; a request that expires (`408`) or is refused for now (`409`) is
//! sent again for what it did not deliver. A lost connection ends the stream
//! (the consumer reopens it), because what was in flight on it is unknown.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use async_nats::jetstream::{self, consumer, consumer::AckPolicy};
use async_nats::{Client, ConnectErrorKind, ConnectOptions, Event, Subscriber};
use bytes::Bytes;
use futures::stream::{SelectAll, StreamExt};
use tokio::sync::watch;
use tokio::time::{sleep_until, Instant};

use crate::consumer::{chain, AckOutcome, Incoming, LeaseStream, Source, SourceError};
use crate::delivery::{Delivery, DeliveryId};
use crate::ids::QueueId;

/// How long one pull request waits on the server for messages before it
/// expires and is sent again (its `408` is also the stream's sign of life).
const PULL_EXPIRES: Duration = Duration::from_secs(20);
/// After a `409` (too many waiting requests or unacknowledged messages) the
/// credit it held is asked for again after this long.
const PULL_RETRY: Duration = Duration::from_secs(1);
/// While no pull request is open, a connected client reports a keepalive
/// this often, so that an idle consumer is not taken for a dead stream.
const IDLE_KEEPALIVE: Duration = Duration::from_secs(15);
/// Acknowledgements leave on a shared beat of this period: those of
/// deliveries committed within one beat reach the server in one write and
/// are confirmed together, so that the server wakes once per beat rather
/// than once per acknowledgement. An acknowledgement waits at most this
/// long after its COMMIT.
const ACK_BEAT: Duration = Duration::from_millis(2);

/// The prefetch `receiver consume --source nats` uses unless told
/// otherwise ([`ConsumerOptions::prefetch`](crate::consumer::ConsumerOptions)):
/// credit is then granted in pull requests of 8 (half the prefetch), so the
/// server delivers 8 messages per request and per write instead of 2. With
/// the [acknowledgement beat](JetStreamSource) this halves nats-server's CPU
/// per delivery (`docs/BENCHMARKS.md`). JetStream's own clients pull
/// hundreds ahead; 16 held deliveries spend little of a 30 s AckWait.
pub const DEFAULT_PREFETCH: u32 = 16;

/// The first beat after `now`, counting beats from `origin`.
fn next_beat(origin: Instant, now: Instant) -> Instant {
    let beats = now.saturating_duration_since(origin).as_nanos() / ACK_BEAT.as_nanos() + 1;
    origin + ACK_BEAT * u32::try_from(beats).unwrap_or(u32::MAX)
}

/// A secret used to log in to NATS. Its `Debug` is redacted.
#[derive(Clone)]
pub struct NatsSecret(String);

impl NatsSecret {
    /// Wraps a token.
    pub fn new(secret: impl Into<String>) -> Self {
        Self(secret.into())
    }
}

impl fmt::Debug for NatsSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("NatsSecret(<redacted>)")
    }
}

/// How the receiver logs in to NATS.
#[derive(Debug, Clone, Default)]
pub enum NatsAuth {
    /// No credentials (or user and password in the URL).
    #[default]
    None,
    /// A token (`NATS_TOKEN`).
    Token(NatsSecret),
    /// A credentials file with a user JWT and its NKey seed
    /// (`NATS_CREDS_FILE`).
    CredsFile(PathBuf),
}

/// Where the receiver's deliveries are on NATS and how to reach them.
#[derive(Debug, Clone)]
pub struct NatsSettings {
    /// The server(s), e.g. `nats://127.0.0.1:4222` or `tls://nats.example.com`.
    pub url: String,
    /// The JetStream stream holding the queue's events.
    pub stream: String,
    /// The durable pull consumer of that stream this receiver consumes.
    pub consumer: String,
    /// The subject of the queue's events; the consumer's filter subject
    /// must be exactly this.
    pub subject: String,
    /// The queue whose events these are.
    pub queue_id: QueueId,
    /// How to log in.
    pub auth: NatsAuth,
    /// PEM file of a private CA trusted for the server's certificate.
    pub ca_file: Option<PathBuf>,
    /// Refuse to talk to the server without TLS (also implied by `tls://`).
    pub require_tls: bool,
}

impl NatsSettings {
    /// The subject of a queue's events when none is configured:
    /// `orbit.results.<queue_id>`.
    pub fn default_subject(queue: &QueueId) -> String {
        format!("orbit.results.{queue}")
    }

    /// The URL as it may be shown: any `user:password@` removed.
    pub fn shown_url(&self) -> String {
        shown_url(&self.url)
    }
}

fn shown_url(url: &str) -> String {
    url.split(',')
        .map(|server| match (server.find("://"), server.rfind('@')) {
            (Some(scheme), Some(at)) if at > scheme => {
                format!("{}<redacted>@{}", &server[..scheme + 3], &server[at + 1..])
            }
            (None, Some(at)) => format!("<redacted>@{}", &server[at + 1..]),
            _ => server.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// What went wrong with NATS or the configured stream and consumer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NatsError {
    /// The server could not be reached (yet).
    #[error("NATS at {url} not reachable: {reason}")]
    Unreachable {
        /// The server, without credentials.
        url: String,
        /// Why.
        reason: String,
    },
    /// The server refused the connection: credentials, TLS, the URL.
    #[error("NATS at {url} refused the connection: {reason}")]
    Refused {
        /// The server, without credentials.
        url: String,
        /// Why.
        reason: String,
    },
    /// `NATS_CREDS_FILE` cannot be read.
    #[error("NATS_CREDS_FILE {path}: {reason}")]
    CredsFile {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The stream does not exist.
    #[error("stream {stream} does not exist (consumer {consumer}); check NATS_STREAM")]
    UnknownStream {
        /// The configured stream.
        stream: String,
        /// The configured consumer.
        consumer: String,
    },
    /// The durable consumer does not exist on the stream.
    #[error("consumer {consumer} does not exist on stream {stream}; check NATS_CONSUMER (create it as a durable pull consumer)")]
    UnknownConsumer {
        /// The configured stream.
        stream: String,
        /// The configured consumer.
        consumer: String,
    },
    /// The consumer's filter subject is not the queue's subject.
    #[error("consumer {consumer} of stream {stream} filters subject {actual:?}, but this receiver consumes queue {queue} on subject {expected:?}; check NATS_SUBJECT and ORBIT_QUEUE_ID")]
    SubjectMismatch {
        /// The configured stream.
        stream: String,
        /// The configured consumer.
        consumer: String,
        /// The configured queue.
        queue: QueueId,
        /// The queue's subject.
        expected: String,
        /// The consumer's filter subject (empty: the whole stream).
        actual: String,
    },
    /// The stream exists but does not hold the queue's subject, so no
    /// consumer of it can filter that subject.
    #[error("stream {stream} does not hold subject {subject:?} (its subjects: {subjects:?}); add the subject to the stream, or check NATS_STREAM, NATS_SUBJECT and ORBIT_QUEUE_ID")]
    SubjectNotInStream {
        /// The configured stream.
        stream: String,
        /// The queue's subject.
        subject: String,
        /// The stream's subjects.
        subjects: Vec<String>,
    },
    /// The consumer cannot work as a lease: not durable, push-based or not
    /// acknowledged one by one.
    #[error("consumer {consumer} of stream {stream} {problem}")]
    UnsuitableConsumer {
        /// The configured stream.
        stream: String,
        /// The configured consumer.
        consumer: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// A JetStream request failed or was not answered in time.
    #[error("JetStream: {0}")]
    JetStream(String),
    /// The connection was lost; what was in flight on the stream is unknown.
    #[error("connection to NATS lost")]
    Disconnected,
    /// The acknowledgement's answer did not come.
    #[error("acknowledgement not confirmed: {0}")]
    Ack(String),
}

impl NatsError {
    /// Whether the configuration (or the consumer on the server) has to
    /// change before the receiver can consume.
    pub fn is_configuration(&self) -> bool {
        matches!(
            self,
            NatsError::Refused { .. }
                | NatsError::CredsFile { .. }
                | NatsError::UnknownStream { .. }
                | NatsError::UnknownConsumer { .. }
                | NatsError::SubjectMismatch { .. }
                | NatsError::SubjectNotInStream { .. }
                | NatsError::UnsuitableConsumer { .. }
        )
    }
}

impl SourceError for NatsError {
    fn is_retryable(&self) -> bool {
        !self.is_configuration()
    }
}

/// A durable JetStream pull consumer as the consumer's source.
///
/// Its acknowledgements wait for a shared beat (at most 2 ms) so that those
/// of deliveries committed close together go out in one write; credit goes
/// out at once, one pull request per grant.
#[derive(Debug, Clone)]
pub struct JetStreamSource {
    client: Client,
    context: jetstream::Context,
    stream: String,
    consumer: String,
    subject: String,
    queue: QueueId,
    ack_timeout: Duration,
    disconnects: watch::Receiver<u64>,
    /// Where the acknowledgement beat counts from.
    origin: Instant,
}

/// What acknowledges one attempt of a JetStream message: its ack subject.
/// Shown redacted, like Orbit's lease proof.
#[derive(Clone)]
pub struct AckSubject(async_nats::Subject);

impl fmt::Debug for AckSubject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AckSubject(<redacted>)")
    }
}

impl JetStreamSource {
    /// Connects to NATS and checks, before anything is fetched, that the
    /// stream and the durable pull consumer exist, that the consumer
    /// acknowledges explicitly and that its filter subject is the queue's
    /// subject. One attempt: [`NatsError::is_retryable`](SourceError) says
    /// whether to try again.
    pub async fn connect(settings: &NatsSettings, timeout: Duration) -> Result<Self, NatsError> {
        let source = Self::unchecked(settings, timeout).await?;
        source.check().await?;
        Ok(source)
    }

    /// Connected, nothing asked of JetStream yet.
    async fn unchecked(settings: &NatsSettings, timeout: Duration) -> Result<Self, NatsError> {
        let (client, disconnects) = connect_client(settings, timeout).await?;
        let mut context = jetstream::new(client.clone());
        context.set_timeout(timeout);
        Ok(Self {
            client,
            context,
            stream: settings.stream.clone(),
            consumer: settings.consumer.clone(),
            subject: settings.subject.clone(),
            queue: settings.queue_id.clone(),
            ack_timeout: timeout,
            disconnects,
            origin: Instant::now(),
        })
    }

    /// The stream.
    pub fn stream(&self) -> &str {
        &self.stream
    }

    /// The durable consumer.
    pub fn consumer(&self) -> &str {
        &self.consumer
    }

    /// Asks the server about the stream and the consumer (see
    /// [`connect`](Self::connect)).
    pub async fn check(&self) -> Result<(), NatsError> {
        let stream = self.stream_handle().await?;
        let info = self.consumer_info(&stream).await?;
        self.suitable(&info.config)
    }

    /// Whether a consumer so configured can be consumed as the queue's
    /// (the part of [`check`](Self::check) after asking the server).
    fn suitable(&self, config: &consumer::Config) -> Result<(), NatsError> {
        let unsuitable = |problem| NatsError::UnsuitableConsumer {
            stream: self.stream.clone(),
            consumer: self.consumer.clone(),
            problem,
        };
        if config.deliver_subject.is_some() {
            return Err(unsuitable("is a push consumer; create a pull consumer"));
        }
        if config.durable_name.is_none() {
            return Err(unsuitable(
                "is not durable: its leases would vanish with it; create a durable consumer",
            ));
        }
        if config.ack_policy != AckPolicy::Explicit {
            return Err(unsuitable(
                "does not acknowledge each message (ack policy must be explicit)",
            ));
        }
        if config.filter_subject != self.subject {
            return Err(NatsError::SubjectMismatch {
                stream: self.stream.clone(),
                consumer: self.consumer.clone(),
                queue: self.queue.clone(),
                expected: self.subject.clone(),
                actual: config.filter_subject.clone(),
            });
        }
        Ok(())
    }

    async fn stream_handle(&self) -> Result<jetstream::stream::Stream, NatsError> {
        self.context
            .get_stream(&self.stream)
            .await
            .map_err(|e| match e.kind() {
                jetstream::context::GetStreamErrorKind::JetStream(js)
                    if js.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND =>
                {
                    self.unknown_stream()
                }
                _ => NatsError::JetStream(format!("stream {}: {e}", self.stream)),
            })
    }

    async fn consumer_info(
        &self,
        stream: &jetstream::stream::Stream,
    ) -> Result<consumer::Info, NatsError> {
        use jetstream::context::ConsumerInfoErrorKind as Kind;
        stream
            .consumer_info(&self.consumer)
            .await
            .map_err(|e| match e.kind() {
                Kind::NotFound => NatsError::UnknownConsumer {
                    stream: self.stream.clone(),
                    consumer: self.consumer.clone(),
                },
                Kind::StreamNotFound => self.unknown_stream(),
                _ => NatsError::JetStream(format!(
                    "consumer {} of stream {}: {e}",
                    self.consumer, self.stream
                )),
            })
    }

    fn unknown_stream(&self) -> NatsError {
        NatsError::UnknownStream {
            stream: self.stream.clone(),
            consumer: self.consumer.clone(),
        }
    }
}

/// The durable pull consumer that [`provision`] creates when there is none:
/// the queue's subject, explicit acknowledgements, from the stream's first
/// message, with this lease and budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerSpec {
    /// AckWait: how long one delivery is leased.
    pub ack_wait: Duration,
    /// MaxDeliver: how often a message is delivered at most.
    pub max_deliver: i64,
    /// Create the stream when it does not exist: file storage, the queue's
    /// subject only, messages kept as JetStream keeps them by default.
    pub create_stream: bool,
}

impl Default for ConsumerSpec {
    /// AckWait 30 s, MaxDeliver 10, no stream created.
    fn default() -> Self {
        Self {
            ack_wait: Duration::from_secs(30),
            max_deliver: 10,
            create_stream: false,
        }
    }
}

/// Whether a stream subject `pattern` (tokens, `*` for one, `>` for the
/// rest) captures the concrete `subject`.
fn captures(pattern: &str, subject: &str) -> bool {
    let mut subject = subject.split('.');
    for token in pattern.split('.') {
        match (token, subject.next()) {
            (">", Some(_)) => return true,
            ("*", Some(_)) => {}
            (token, Some(actual)) if token == actual => {}
            _ => return false,
        }
    }
    subject.next().is_none()
}

/// What [`provision`] found or created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provisioned {
    /// The stream did not exist and was created.
    pub stream_created: bool,
    /// The consumer did not exist and was created; otherwise the existing
    /// one passed the checks of `consume` and was left as it was.
    pub consumer_created: bool,
    /// The consumer's AckWait (an existing consumer's own).
    pub ack_wait: Duration,
    /// The consumer's MaxDeliver (an existing consumer's own; `-1`: no limit).
    pub max_deliver: i64,
}

/// Makes sure the configured durable pull consumer exists as `consume`
/// needs it: creates it from `spec` when it does not exist, and the stream
/// too when `spec` asks for that. An existing consumer is never changed; it
/// must pass the checks `consume` makes (pull, durable, explicit
/// acknowledgements, the queue's subject), or nothing is created and the
/// error says why. Nothing is fetched.
pub async fn provision(
    settings: &NatsSettings,
    timeout: Duration,
    spec: &ConsumerSpec,
) -> Result<Provisioned, NatsError> {
    let source = JetStreamSource::unchecked(settings, timeout).await?;
    let (stream, stream_created) = match source.stream_handle().await {
        Ok(stream) => (stream, false),
        Err(NatsError::UnknownStream { .. }) if spec.create_stream => {
            let created = source
                .context
                .create_stream(jetstream::stream::Config {
                    name: source.stream.clone(),
                    subjects: vec![source.subject.clone()],
                    storage: jetstream::stream::StorageType::File,
                    ..Default::default()
                })
                .await
                .map_err(|e| {
                    NatsError::JetStream(format!("create stream {}: {e}", source.stream))
                })?;
            (created, true)
        }
        Err(e) => return Err(e),
    };
    let subjects = &stream.cached_info().config.subjects;
    if !subjects
        .iter()
        .any(|pattern| captures(pattern, &source.subject))
    {
        return Err(NatsError::SubjectNotInStream {
            stream: source.stream.clone(),
            subject: source.subject.clone(),
            subjects: subjects.clone(),
        });
    }
    let (config, consumer_created) = match source.consumer_info(&stream).await {
        Ok(info) => (info.config, false),
        Err(NatsError::UnknownConsumer { .. }) => {
            let created = stream
                .create_consumer(consumer::pull::Config {
                    durable_name: Some(source.consumer.clone()),
                    filter_subject: source.subject.clone(),
                    ack_policy: AckPolicy::Explicit,
                    ack_wait: spec.ack_wait,
                    max_deliver: spec.max_deliver,
                    ..Default::default()
                })
                .await
                .map_err(|e| {
                    NatsError::JetStream(format!(
                        "create consumer {} on stream {}: {e}",
                        source.consumer, source.stream
                    ))
                })?;
            (created.cached_info().config.clone(), true)
        }
        Err(e) => return Err(e),
    };
    // The server's own account of the consumer, as `consume` would check it.
    source.suitable(&config)?;
    Ok(Provisioned {
        stream_created,
        consumer_created,
        ack_wait: config.ack_wait,
        max_deliver: config.max_deliver,
    })
}

async fn connect_client(
    settings: &NatsSettings,
    timeout: Duration,
) -> Result<(Client, watch::Receiver<u64>), NatsError> {
    let (disconnected, disconnects) = watch::channel(0u64);
    let mut options = ConnectOptions::new()
        .name("result-inbox receiver")
        .connection_timeout(timeout)
        .request_timeout(Some(timeout))
        .ping_interval(IDLE_KEEPALIVE)
        .require_tls(settings.require_tls || settings.url.starts_with("tls://"))
        .event_callback(move |event| {
            if matches!(event, Event::Disconnected) {
                disconnected.send_modify(|n| *n += 1);
            }
            async {}
        });
    if let Some(ca) = &settings.ca_file {
        options = options.add_root_certificates(ca.clone());
    }
    match &settings.auth {
        NatsAuth::None => {}
        NatsAuth::Token(token) => options = options.token(token.0.clone()),
        NatsAuth::CredsFile(path) => {
            options = options
                .credentials_file(path)
                .await
                .map_err(|e| NatsError::CredsFile {
                    path: path.clone(),
                    reason: e.to_string(),
                })?;
        }
    }
    let url = settings.shown_url();
    let client = options
        .connect(settings.url.as_str())
        .await
        .map_err(|e| match e.kind() {
            // A certificate the client does not trust arrives as an I/O
            // error around rustls' own: waiting would not mend it.
            _ if is_tls_refusal(&e) => NatsError::Refused {
                url,
                reason: format!("TLS: {}", chain_text(&e)),
            },
            ConnectErrorKind::Io | ConnectErrorKind::TimedOut | ConnectErrorKind::Dns => {
                NatsError::Unreachable {
                    url,
                    reason: e.to_string(),
                }
            }
            _ => NatsError::Refused {
                url,
                reason: e.to_string(),
            },
        })?;
    Ok((client, disconnects))
}

/// Whether `e` or one of its sources is a TLS failure of rustls (a
/// certificate not trusted, a name that does not match, no common
/// protocol).
fn is_tls_refusal(e: &(dyn std::error::Error + 'static)) -> bool {
    chain(e).any(|error| {
        error.is::<rustls::Error>()
            || error
                .downcast_ref::<std::io::Error>()
                .and_then(std::io::Error::get_ref)
                .is_some_and(|inner| inner.is::<rustls::Error>())
    })
}

/// `e` and its sources, as one line.
fn chain_text(e: &(dyn std::error::Error + 'static)) -> String {
    chain(e)
        .map(|error| error.to_string())
        .collect::<Vec<_>>()
        .join(": ")
}

impl Source for JetStreamSource {
    type Receipt = AckSubject;
    type Stream = PullStream;
    type Error = NatsError;

    fn subscription(&self) -> String {
        format!("stream {} consumer {}", self.stream, self.consumer)
    }

    async fn open(&self) -> Result<PullStream, NatsError> {
        // The consumer may have been deleted or changed since start-up.
        self.check().await?;
        let mut disconnects = self.disconnects.clone();
        disconnects.mark_unchanged();
        Ok(PullStream {
            client: self.client.clone(),
            context: self.context.clone(),
            next_subject: format!(
                "$JS.API.CONSUMER.MSG.NEXT.{}.{}",
                self.stream, self.consumer
            ),
            requests: SelectAll::new(),
            open_requests: 0,
            idle: Vec::new(),
            unplaced: 0,
            retry_at: None,
            disconnects,
        })
    }

    async fn ack(&self, _id: &DeliveryId, receipt: &AckSubject) -> Result<AckOutcome, NatsError> {
        sleep_until(next_beat(self.origin, Instant::now())).await;
        let request = async_nats::Request::new()
            .payload(Bytes::from_static(b"+ACK"))
            .timeout(Some(self.ack_timeout));
        self.client
            .send_request(receipt.0.clone(), request)
            .await
            .map_err(|e| NatsError::Ack(e.to_string()))?;
        // The server answers every +ACK, also one for a message already
        // acknowledged: it cannot say which, so every answer is "acked".
        Ok(AckOutcome::Acked)
    }

    async fn terminate(&self, _id: &DeliveryId, receipt: &AckSubject) -> Result<bool, NatsError> {
        self.client
            .publish(receipt.0.clone(), Bytes::from_static(b"+TERM"))
            .await
            .map_err(|e| NatsError::Ack(e.to_string()))?;
        Ok(true)
    }

    async fn release(&self, _id: &DeliveryId, receipt: &AckSubject) -> Result<bool, NatsError> {
        self.client
            .publish(receipt.0.clone(), Bytes::from_static(b"-NAK"))
            .await
            .map_err(|e| NatsError::Ack(e.to_string()))?;
        // Called at shutdown: the process may exit right after.
        self.client
            .flush()
            .await
            .map_err(|e| NatsError::Ack(e.to_string()))?;
        Ok(true)
    }
}

/// What one pull request's subscription yields.
enum Pulled {
    /// A message; with the request's subscription when it was the last of
    /// its batch (the request is done and the subscription free again).
    Message {
        message: Box<async_nats::Message>,
        done: Option<Inbox>,
    },
    /// The request ended with `unfilled` of its batch undelivered.
    Ended {
        unfilled: u32,
        status: u16,
        description: String,
    },
    Heartbeat,
}

type Request = futures::stream::BoxStream<'static, Pulled>;

/// A subscription to a unique inbox subject, for one pull request at a time.
struct Inbox {
    subject: String,
    subscriber: Subscriber,
}

/// An open stream of a [`JetStreamSource`]: the pull requests in flight.
pub struct PullStream {
    client: Client,
    context: jetstream::Context,
    next_subject: String,
    requests: SelectAll<Request>,
    open_requests: usize,
    /// Subscriptions of requests that were filled, free for the next.
    idle: Vec<Inbox>,
    /// Credit that a refused request gave back, to be asked for at
    /// `retry_at`.
    unplaced: u32,
    retry_at: Option<Instant>,
    disconnects: watch::Receiver<u64>,
}

impl fmt::Debug for PullStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PullStream")
            .field("open_requests", &self.open_requests)
            .field("unplaced", &self.unplaced)
            .finish_non_exhaustive()
    }
}

impl PullStream {
    async fn pull(&mut self, batch: u32) -> Result<(), NatsError> {
        let inbox = match self.idle.pop() {
            Some(inbox) => inbox,
            None => {
                let subject = self.client.new_inbox();
                let subscriber = self
                    .client
                    .subscribe(subject.clone())
                    .await
                    .map_err(|e| NatsError::JetStream(format!("subscribe: {e}")))?;
                Inbox {
                    subject,
                    subscriber,
                }
            }
        };
        let body = serde_json::json!({
            "batch": batch,
            "expires": PULL_EXPIRES.as_nanos() as u64,
        });
        self.client
            .publish_with_reply(
                self.next_subject.clone(),
                inbox.subject.clone(),
                Bytes::from(body.to_string()),
            )
            .await
            .map_err(|e| NatsError::JetStream(format!("pull request: {e}")))?;
        self.requests.push(one_request(inbox, batch));
        self.open_requests += 1;
        Ok(())
    }
}

/// The messages of one pull request, then how it ended. A request whose
/// batch was filled gives its subscription back for the next request (the
/// server sends nothing more to it); one that ended otherwise drops it
/// (unsubscribes), so that a late status can never be taken for a newer
/// request's.
fn one_request(inbox: Inbox, batch: u32) -> Request {
    futures::stream::unfold(Some((inbox, batch)), |state| async move {
        let (mut inbox, remaining) = state?;
        let Some(message) = inbox.subscriber.next().await else {
            let ended = Pulled::Ended {
                unfilled: remaining,
                status: 0,
                description: "subscription closed".into(),
            };
            return Some((ended, None));
        };
        match message.status.map(|s| s.as_u16()) {
            None => {
                let left = remaining.saturating_sub(1);
                if left == 0 {
                    let done = Pulled::Message {
                        message: Box::new(message),
                        done: Some(inbox),
                    };
                    return Some((done, None));
                }
                Some((
                    Pulled::Message {
                        message: Box::new(message),
                        done: None,
                    },
                    Some((inbox, left)),
                ))
            }
            Some(100) => Some((Pulled::Heartbeat, Some((inbox, remaining)))),
            Some(status) => {
                let ended = Pulled::Ended {
                    unfilled: remaining,
                    status,
                    description: message.description.unwrap_or_default(),
                };
                Some((ended, None))
            }
        }
    })
    .boxed()
}

impl LeaseStream for PullStream {
    type Receipt = AckSubject;
    type Error = NatsError;

    async fn grant(&mut self, n: u32) -> Result<(), NatsError> {
        self.pull(n).await
    }

    async fn next(&mut self) -> Option<Result<Incoming<AckSubject>, NatsError>> {
        loop {
            let keepalive_at = Instant::now() + IDLE_KEEPALIVE;
            let retry_at = self.retry_at;
            tokio::select! {
                changed = self.disconnects.changed() => {
                    return Some(Err(match changed {
                        Ok(()) => NatsError::Disconnected,
                        Err(_) => NatsError::JetStream("client closed".into()),
                    }));
                }
                _ = sleep_until(retry_at.unwrap_or(keepalive_at)), if retry_at.is_some() => {
                    self.retry_at = None;
                    let credit = std::mem::take(&mut self.unplaced);
                    if let Err(e) = self.pull(credit).await {
                        return Some(Err(e));
                    }
                }
                _ = sleep_until(keepalive_at), if self.open_requests == 0 => {
                    if self.client.connection_state() == async_nats::connection::State::Connected {
                        return Some(Ok(Incoming::Keepalive));
                    }
                }
                Some(pulled) = self.requests.next(), if self.open_requests > 0 => {
                    match pulled {
                        Pulled::Heartbeat => return Some(Ok(Incoming::Keepalive)),
                        Pulled::Message { message, done } => {
                            if let Some(inbox) = done {
                                self.open_requests = self.open_requests.saturating_sub(1);
                                self.idle.push(inbox);
                            }
                            return Some(self.delivery(*message));
                        }
                        Pulled::Ended { unfilled, status, description } => {
                            self.open_requests = self.open_requests.saturating_sub(1);
                            match status {
                                // Expired: ask again at once for what it
                                // did not bring; its arrival shows the
                                // server is there.
                                408 => {
                                    if unfilled > 0 {
                                        if let Err(e) = self.pull(unfilled).await {
                                            return Some(Err(e));
                                        }
                                    }
                                    return Some(Ok(Incoming::Keepalive));
                                }
                                409 if description.contains("Consumer Deleted") => {
                                    return Some(Err(NatsError::JetStream(format!("409 {description}"))));
                                }
                                _ => {
                                    self.unplaced += unfilled;
                                    self.retry_at.get_or_insert(Instant::now() + PULL_RETRY);
                                    return Some(Ok(Incoming::Notice(format!("{status} {description}"))));
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    async fn close(self) {
        // Dropping the subscriptions unsubscribes them; what the server
        // still sends to them comes again after AckWait.
        drop(self.requests);
        drop(self.idle);
    }
}

impl PullStream {
    fn delivery(&self, message: async_nats::Message) -> Result<Incoming<AckSubject>, NatsError> {
        let message = jetstream::Message {
            message,
            context: self.context.clone(),
        };
        let info = message.info().map_err(|e| {
            NatsError::JetStream(format!("a message without a JetStream ack subject: {e}"))
        })?;
        let id = DeliveryId::new(format!("{}:{}", info.stream, info.stream_sequence));
        let attempt = u32::try_from(info.delivered.max(1)).unwrap_or(u32::MAX);
        let Some(reply) = message.message.reply.clone() else {
            return Err(NatsError::JetStream(
                "a message without an ack subject".into(),
            ));
        };
        let delivery = Delivery::new(id, message.message.payload.clone()).with_attempt(attempt);
        Ok(Incoming::Delivery(delivery, AckSubject(reply)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shown_url_never_carries_credentials() {
        assert_eq!(
            shown_url("nats://alice:s3cret@10.0.0.1:4222"),
            "nats://<redacted>@10.0.0.1:4222"
        );
        assert_eq!(
            shown_url("tls://a:b@h1:4222,nats://h2:4222"),
            "tls://<redacted>@h1:4222,nats://h2:4222"
        );
        assert_eq!(shown_url("token@h:4222"), "<redacted>@h:4222");
        assert_eq!(shown_url("nats://h:4222"), "nats://h:4222");
    }

    #[test]
    fn a_stream_subject_captures_a_subject_token_by_token() {
        let subject = "orbit.results.0123456789abcdef0123456789abcdef";
        for pattern in ["orbit.results.*", "orbit.>", ">", subject] {
            assert!(captures(pattern, subject), "{pattern}");
        }
        for pattern in [
            "orbit.results",
            "orbit.*",
            "orbit.results.*.x",
            "other.>",
            "orbit.results.0123",
        ] {
            assert!(!captures(pattern, subject), "{pattern}");
        }
    }

    #[test]
    fn acknowledgements_within_one_beat_share_its_end_and_none_waits_longer() {
        let origin = Instant::now();
        let at = |micros| origin + Duration::from_micros(micros);
        assert_eq!(next_beat(origin, at(4_100)), at(6_000));
        assert_eq!(next_beat(origin, at(5_999)), at(6_000));
        assert_eq!(
            next_beat(origin, at(6_000)),
            at(8_000),
            "strictly after now"
        );
        assert_eq!(next_beat(origin, origin), at(2_000));
    }

    #[test]
    fn a_secret_is_redacted_in_debug() {
        let shown = format!("{:?}", NatsAuth::Token(NatsSecret::new("s3cret")));
        assert!(!shown.contains("s3cret"), "{shown}");
    }

    #[test]
    fn refusals_and_missing_things_are_configuration_the_rest_is_retried() {
        let unknown = NatsError::UnknownConsumer {
            stream: "S".into(),
            consumer: "C".into(),
        };
        assert!(unknown.is_configuration() && !unknown.is_retryable());
        assert!(NatsError::Disconnected.is_retryable());
        assert!(NatsError::Ack("timed out".into()).is_retryable());
    }
}
