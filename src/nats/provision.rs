//! Making sure the durable pull consumer exists as `consume` needs it.

use std::time::Duration;

use async_nats::jetstream::{self, consumer, consumer::AckPolicy};

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
