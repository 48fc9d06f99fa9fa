//! `receiver subscribe`: create the subscription that `receiver consume`
//! then consumes, on the configured queue, for the event types asked for;
//! with `--source nats`, the durable pull consumer of the queue's subject
//! (and, when asked, its stream).

use result_inbox::event::EventType;
use result_inbox::ids::{QueueId, SubscriptionId};
use result_inbox::inbox::StoreOptions;
use result_inbox::nats::{ConsumerSpec, NatsError, NatsSettings, Provisioned};
use result_inbox::orbit::{OrbitClient, OrbitError};

/// Why no usable subscription came out of it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SubscribeError {
    /// Orbit refused or could not be reached; nothing was created.
    #[error("{0}")]
    Orbit(#[from] OrbitError),
    /// Orbit created the subscription on the token's queue, which is not
    /// the configured one: `consume` with this configuration would refuse
    /// it. It exists (nothing is ever deleted) and is named here.
    #[error("subscription {created} was created on the token's queue {actual}, not on the configured queue {expected}; fix ORBIT_QUEUE_ID or the token")]
    OtherQueue {
        /// The subscription Orbit created.
        created: SubscriptionId,
        /// The queue it is bound to.
        actual: QueueId,
        /// The configured queue.
        expected: QueueId,
    },
    /// The lease asked for would run out while an apply may still run, so
    /// a delivery would come again beside its own first attempt.
    #[error(
        "--ack-wait {ack_wait:?} must be longer than the inbox's transaction budget of {budget:?}"
    )]
    AckWaitTooShort {
        /// The AckWait asked for.
        ack_wait: std::time::Duration,
        /// The inbox's budget for one apply.
        budget: std::time::Duration,
    },
    /// The stream does not exist and was not to be created.
    #[error("stream {stream} does not exist; check NATS_STREAM, or pass --create-stream to create it for subject {subject:?}")]
    NoStream {
        /// The configured stream.
        stream: String,
        /// The queue's subject.
        subject: String,
    },
    /// NATS refused, or the existing stream or consumer cannot serve the
    /// queue; nothing was created.
    #[error("{0}")]
    Nats(#[from] NatsError),
}

impl SubscribeError {
    /// Whether the configuration (or what exists on the server) has to
    /// change before the command can succeed.
    pub fn is_configuration(&self) -> bool {
        match self {
            SubscribeError::Orbit(e) => e.is_refusal(),
            SubscribeError::OtherQueue { .. } | SubscribeError::AckWaitTooShort { .. } => true,
            SubscribeError::NoStream { .. } => true,
            SubscribeError::Nats(e) => e.is_configuration(),
        }
    }
}

/// Reads a comma-separated list of event types (`task.cancelled,task.failed`);
/// an empty or unknown name is refused, naming it.
pub fn event_types(list: &str) -> Result<Vec<EventType>, String> {
    let mut types = Vec::new();
    for name in list.split(',').map(str::trim) {
        let t = EventType::parse(name).ok_or_else(|| {
            let known: Vec<&str> = EventType::ALL.iter().map(|t| t.as_str()).collect();
            format!(
                "{name:?} is not an event type (one of {})",
                known.join(", ")
            )
        })?;
        if !types.contains(&t) {
            types.push(t);
        }
    }
    Ok(types)
}

/// Creates an enabled subscription for `types` and checks that it is bound
/// to `queue`.
pub async fn run(
    client: &OrbitClient,
    queue: &QueueId,
    types: &[EventType],
) -> Result<SubscriptionId, SubscribeError> {
    let created = client.create_subscription(types).await?;
    if &created.queue_id != queue {
        return Err(SubscribeError::OtherQueue {
            created: created.id,
            actual: created.queue_id,
            expected: queue.clone(),
        });
    }
    Ok(created.id)
}

/// Makes sure the durable pull consumer `consume --source nats` needs
/// exists: creates it from `spec` (and the stream, when `spec` says so) or
/// accepts an existing one that passes consume's checks, changing nothing.
pub async fn nats(
    settings: &NatsSettings,
    timeout: std::time::Duration,
    spec: &ConsumerSpec,
) -> Result<Provisioned, SubscribeError> {
    let budget = StoreOptions::default().transaction_timeout;
    if spec.ack_wait <= budget {
        return Err(SubscribeError::AckWaitTooShort {
            ack_wait: spec.ack_wait,
            budget,
        });
    }
    result_inbox::nats::provision(settings, timeout, spec)
        .await
        .map_err(|e| match e {
            NatsError::UnknownStream { stream, .. } => SubscribeError::NoStream {
                stream,
                subject: settings.subject.clone(),
            },
            e => e.into(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_of_event_types_is_read_in_order_without_repeats() {
        assert_eq!(
            event_types("task.cancelled, task.failed,task.cancelled").unwrap(),
            [EventType::Cancelled, EventType::Failed]
        );
    }

    #[test]
    fn an_unknown_or_empty_event_type_is_named() {
        let e = event_types("task.cancelled,task.done").unwrap_err();
        assert!(e.starts_with("\"task.done\" is not an event type"), "{e}");
        assert!(event_types("").is_err());
    }
}
