//! What went wrong with NATS or the configured stream and consumer.

use std::path::PathBuf;

use crate::ids::QueueId;
use crate::source::SourceError;

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
    /// The stream that records the consumer's failed messages does not
    /// exist, so nothing was recorded.
    #[error("failures stream {failures} of consumer {consumer} on stream {stream} does not exist, so no failed message was recorded; run `receiver subscribe --source nats` to create it (failures from before then are not recorded)")]
    NoFailuresStream {
        /// The failures stream's name.
        failures: String,
        /// The configured stream.
        stream: String,
        /// The configured consumer.
        consumer: String,
    },
    /// A stream of the failures stream's name exists but does not capture
    /// what it must record.
    #[error("stream {failures} does not capture {missing:?} (its subjects: {subjects:?}), so it cannot record the failed messages of consumer {consumer} on stream {stream}; add those subjects to it, or delete it and run `receiver subscribe --source nats`")]
    FailuresStreamSubjects {
        /// The failures stream's name.
        failures: String,
        /// The configured stream.
        stream: String,
        /// The configured consumer.
        consumer: String,
        /// The subjects it does not capture.
        missing: Vec<String>,
        /// Its subjects.
        subjects: Vec<String>,
    },
    /// A stream cannot have the replicas asked for: outside what JetStream
    /// keeps, or more than the servers can place.
    #[error("stream {stream} cannot have {replicas} replicas: {reason}")]
    Replicas {
        /// The stream.
        stream: String,
        /// The replicas asked for.
        replicas: usize,
        /// Why not.
        reason: String,
    },
    /// A failed message's body is no longer in the stream: there is
    /// nothing to replay.
    #[error("message {sequence} of stream {stream} is no longer held by the stream: it cannot be replayed")]
    MessageGone {
        /// The configured stream.
        stream: String,
        /// The message's stream sequence.
        sequence: u64,
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
                | NatsError::NoFailuresStream { .. }
                | NatsError::FailuresStreamSubjects { .. }
                | NatsError::Replicas { .. }
        )
    }
}

impl SourceError for NatsError {
    // The trait's default `is_configuration` (not retryable) is then this type's.
    fn is_retryable(&self) -> bool {
        // A message gone from the stream does not come back.
        !self.is_configuration() && !matches!(self, NatsError::MessageGone { .. })
    }

    fn cause(&self) -> &'static str {
        match self {
            NatsError::Unreachable { .. } => "unreachable",
            NatsError::Disconnected => "disconnected",
            NatsError::JetStream(_) => "jetstream",
            _ => "error",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
