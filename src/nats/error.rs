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
    // The trait's default `is_configuration` (not retryable) is then this type's.
    fn is_retryable(&self) -> bool {
        !self.is_configuration()
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
