//! What went wrong with RabbitMQ or the configured queue.

use crate::source::SourceError;

/// What went wrong with RabbitMQ or the configured queue.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RabbitError {
    /// `AMQP_URL` cannot be read as an AMQP address.
    #[error("{url} is not an AMQP address: {reason}")]
    Address {
        /// The address, without its password.
        url: String,
        /// Why.
        reason: String,
    },
    /// The server could not be reached (yet).
    #[error("RabbitMQ at {url} not reachable: {reason}")]
    Unreachable {
        /// The server, without its password.
        url: String,
        /// Why.
        reason: String,
    },
    /// The server refused the connection: login, vhost, TLS.
    #[error("RabbitMQ at {url} refused the connection: {reason}")]
    Refused {
        /// The server, without its password.
        url: String,
        /// Why.
        reason: String,
    },
    /// The queue does not exist.
    #[error("queue {queue} does not exist in vhost {vhost}; check AMQP_QUEUE, or create it with `receiver subscribe --source rabbitmq`")]
    UnknownQueue {
        /// The configured queue.
        queue: String,
        /// The vhost.
        vhost: String,
    },
    /// The queue exists, but not as one the receiver can consume without
    /// losing or endlessly retrying a delivery.
    #[error("queue {queue} {problem}")]
    UnsuitableQueue {
        /// The configured queue.
        queue: String,
        /// What is wrong with it, and what to do.
        problem: String,
    },
    /// The account may not do what the receiver needs.
    #[error("RabbitMQ refused {what}: {reason}; grant the account configure, write and read permissions on the queue's names in its vhost (rabbitmqctl set_permissions)")]
    Forbidden {
        /// What was asked.
        what: String,
        /// The server's words.
        reason: String,
    },
    /// The channel that received a delivery is closed: only that channel
    /// could acknowledge it, and the server gives it again to whichever
    /// consumer comes next.
    #[error("the channel that received this delivery is closed; it will be delivered again")]
    ChannelGone,
    /// The connection or the channel broke, or the server closed it.
    #[error("RabbitMQ connection lost: {0}")]
    Disconnected(String),
    /// Any other answer of the server to a call.
    #[error("RabbitMQ: {0}")]
    Server(String),
}

impl RabbitError {
    /// Whether the configuration (address, login, queue, permissions) has
    /// to change before the queue can be consumed.
    pub fn is_configuration(&self) -> bool {
        matches!(
            self,
            RabbitError::Address { .. }
                | RabbitError::Refused { .. }
                | RabbitError::UnknownQueue { .. }
                | RabbitError::UnsuitableQueue { .. }
                | RabbitError::Forbidden { .. }
        )
    }
}

impl SourceError for RabbitError {
    fn is_retryable(&self) -> bool {
        // A closed channel's delivery tags mean nothing on another one.
        !self.is_configuration() && !matches!(self, RabbitError::ChannelGone)
    }

    fn is_configuration(&self) -> bool {
        RabbitError::is_configuration(self)
    }

    fn cause(&self) -> &'static str {
        match self {
            RabbitError::Unreachable { .. } => "unreachable",
            RabbitError::Disconnected(_) | RabbitError::ChannelGone => "disconnected",
            RabbitError::Server(_) => "rabbitmq",
            _ => "error",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_and_unsuitable_queues_are_configuration_the_rest_is_retried() {
        let unknown = RabbitError::UnknownQueue {
            queue: "q".into(),
            vhost: "/".into(),
        };
        assert!(unknown.is_configuration() && !unknown.is_retryable());
        assert!(RabbitError::Disconnected("reset".into()).is_retryable());
        assert!(!RabbitError::ChannelGone.is_retryable());
        assert!(!RabbitError::ChannelGone.is_configuration());
    }
}
