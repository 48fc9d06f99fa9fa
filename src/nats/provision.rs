//! Making sure the durable pull consumer exists as `consume` needs it, and
//! the stream that records the messages it gives up on.

use std::time::Duration;

use async_nats::jetstream::{self, consumer, consumer::AckPolicy};

use super::failures::{failures_stream_name, failures_subjects};
use super::{JetStreamSource, NatsError, NatsSettings};

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
    /// How many servers of a JetStream cluster keep the stream created
    /// with `create_stream`, from 1 to [`MAX_REPLICAS`]: with 3, the stream
    /// and its consumer carry on when one server dies. An existing stream
    /// keeps its own. The failures stream, when created, has as many as
    /// the queue's stream, so that the record of a failed message is kept
    /// as well as the message.
    pub replicas: usize,
}

/// The most replicas JetStream keeps of a stream.
pub const MAX_REPLICAS: usize = 5;

impl Default for ConsumerSpec {
    /// AckWait 30 s, MaxDeliver 10, no stream created, one replica.
    fn default() -> Self {
        Self {
            ack_wait: Duration::from_secs(30),
            max_deliver: 10,
            create_stream: false,
            replicas: 1,
        }
    }
}

/// Whether a stream subject `pattern` (tokens, `*` for one, `>` for the
/// rest) captures the concrete `subject`.
pub(super) fn captures(pattern: &str, subject: &str) -> bool {
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
    /// The failures stream
    /// ([`failures_stream_name`](super::failures_stream_name)) did not exist
    /// and was created; otherwise the existing one captures what it must.
    pub failures_stream_created: bool,
    /// How many replicas the queue's stream has (an existing stream's
    /// own); a failures stream created here has as many.
    pub replicas: usize,
}

/// Makes sure the configured durable pull consumer exists as `consume`
/// needs it: creates it from `spec` when it does not exist, and the stream
/// too when `spec` asks for that. An existing consumer is never changed; it
/// must pass the checks `consume` makes (pull, durable, explicit
/// acknowledgements, the queue's subject), or nothing is created and the
/// error says why. Nothing is fetched.
///
/// It also makes sure the failures stream exists, which records from then
/// on what [`failed_messages`](super::failed_messages) lists: created when
/// missing (file storage, JetStream's default limits), an existing one
/// only checked to capture both advisories and the replay marker. It is
/// checked before the consumer is created and created after it, so that
/// an unusable one leaves nothing created. The consumer is created with
/// as many replicas as its stream has.
///
/// `spec.replicas` outside 1 to [`MAX_REPLICAS`] is refused before
/// anything is asked of the server, and so are replicas that the server
/// cannot place (more than it has servers, or a server not in a cluster).
pub async fn provision(
    settings: &NatsSettings,
    timeout: Duration,
    spec: &ConsumerSpec,
) -> Result<Provisioned, NatsError> {
    if !(1..=MAX_REPLICAS).contains(&spec.replicas) {
        return Err(NatsError::Replicas {
            stream: settings.stream.clone(),
            replicas: spec.replicas,
            reason: format!("a stream has 1 to {MAX_REPLICAS} replicas"),
        });
    }
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
                    num_replicas: spec.replicas,
                    ..Default::default()
                })
                .await
                .map_err(|e| create_stream_error(&source.stream, spec.replicas, &e))?;
            (created, true)
        }
        Err(e) => return Err(e),
    };
    // A stream of one server reports 0 or 1.
    let replicas = stream.cached_info().config.num_replicas.max(1);
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
    let failures_name = failures_stream_name(&source.stream, &source.consumer);
    let failures_exists = match source.context.get_stream(&failures_name).await {
        Ok(failures) => {
            let subjects = &failures.cached_info().config.subjects;
            let missing: Vec<String> = failures_subjects(&source.stream, &source.consumer)
                .into_iter()
                .filter(|subject| !subjects.iter().any(|pattern| captures(pattern, subject)))
                .collect();
            if !missing.is_empty() {
                return Err(NatsError::FailuresStreamSubjects {
                    failures: failures_name,
                    stream: source.stream.clone(),
                    consumer: source.consumer.clone(),
                    missing,
                    subjects: subjects.clone(),
                });
            }
            true
        }
        Err(e) => match e.kind() {
            jetstream::context::GetStreamErrorKind::JetStream(js)
                if js.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND =>
            {
                false
            }
            _ => return Err(NatsError::JetStream(format!("stream {failures_name}: {e}"))),
        },
    };
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
    if !failures_exists {
        source
            .context
            .create_stream(jetstream::stream::Config {
                name: failures_name.clone(),
                description: Some(format!(
                    "messages consumer {} of stream {} gave up on (result-inbox)",
                    source.consumer, source.stream
                )),
                subjects: failures_subjects(&source.stream, &source.consumer).to_vec(),
                storage: jetstream::stream::StorageType::File,
                num_replicas: replicas,
                ..Default::default()
            })
            .await
            .map_err(|e| create_stream_error(&failures_name, replicas, &e))?;
    }
    Ok(Provisioned {
        stream_created,
        consumer_created,
        ack_wait: config.ack_wait,
        max_deliver: config.max_deliver,
        failures_stream_created: !failures_exists,
        replicas,
    })
}

/// Why `stream` could not be created with `replicas`: the server's refusal
/// of the replicas (no cluster, fewer servers than replicas) is the
/// configuration's to fix; anything else may pass.
fn create_stream_error(
    stream: &str,
    replicas: usize,
    e: &jetstream::context::CreateStreamError,
) -> NatsError {
    use jetstream::ErrorCode;
    let refused_replicas = match e.kind() {
        jetstream::context::CreateStreamErrorKind::JetStream(js) => [
            ErrorCode::STREAM_REPLICAS_NOT_SUPPORTED,
            ErrorCode::INSUFFICIENT_RESOURCES,
            ErrorCode::CLUSTER_NO_PEERS,
        ]
        .contains(&js.error_code())
        .then(|| js.to_string()),
        _ => None,
    };
    match refused_replicas {
        Some(reason) if replicas > 1 => NatsError::Replicas {
            stream: stream.to_owned(),
            replicas,
            reason: format!("{reason} (replicas need a JetStream cluster of as many servers)"),
        },
        _ => NatsError::JetStream(format!("create stream {stream}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
