//! Why a consumer could not start or had to stop.

use std::fmt;

use crate::ids::QueueId;
use crate::source::SourceError;
use crate::BoxError;

/// The source refused its stream for good (for Orbit: the token, its
/// scopes, an unknown subscription). The consumer stops only for this:
/// everything that may pass it waits out with backoff.
///
/// Whatever the source, its error is carried whole, as the error's
/// `source()`, and keeps its class: [`is_configuration`](Self::is_configuration).
#[derive(Debug)]
pub struct ConsumerError {
    error: BoxError,
    configuration: bool,
}

impl ConsumerError {
    /// Whether the configuration has to change before the consumer can run
    /// (as the source's error says: [`SourceError::is_configuration`]),
    /// rather than an operation having failed.
    pub fn is_configuration(&self) -> bool {
        self.configuration
    }

    /// The source's error.
    pub fn get_ref(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.error
    }

    /// Gives up the wrapper for the source's error.
    pub fn into_inner(self) -> BoxError {
        self.error
    }
}

impl ConsumerError {
    /// The source delivers one queue's events, the probe's dependency
    /// applies another's: every event would be rejected.
    pub(crate) fn queue_mismatch(source: &QueueId, applied: &QueueId) -> Self {
        Self {
            error: format!(
                "the source delivers the events of queue {source}, but the inbox applies those of \
                 queue {applied}: give both the same queue"
            )
            .into(),
            configuration: true,
        }
    }
}

impl<E: SourceError> From<E> for ConsumerError {
    fn from(e: E) -> Self {
        Self {
            configuration: e.is_configuration(),
            error: Box::new(e),
        }
    }
}

impl fmt::Display for ConsumerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for ConsumerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("refused by the broker")]
    struct Refused;

    impl SourceError for Refused {
        fn is_retryable(&self) -> bool {
            false
        }
    }

    #[derive(Debug, thiserror::Error)]
    #[error("broker answered nonsense")]
    struct Nonsense;

    impl SourceError for Nonsense {
        fn is_retryable(&self) -> bool {
            false
        }

        fn is_configuration(&self) -> bool {
            false
        }
    }

    #[test]
    fn a_source_error_keeps_its_class_and_its_text_through_the_consumer() {
        let refused = ConsumerError::from(Refused);
        assert!(refused.is_configuration());
        assert_eq!(refused.to_string(), "refused by the broker");
        let source = std::error::Error::source(&refused).expect("the source's error");
        assert!(source.is::<Refused>());
        let nonsense = ConsumerError::from(Nonsense);
        assert!(!nonsense.is_configuration());
        assert!(nonsense.into_inner().is::<Nonsense>());
    }
}
