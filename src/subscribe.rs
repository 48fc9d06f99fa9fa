//! `receiver subscribe`: create the subscription that `receiver consume`
//! then consumes, on the configured queue, for the event types asked for.

use crate::event::EventType;
use crate::ids::{QueueId, SubscriptionId};
use crate::orbit::{OrbitClient, OrbitError};

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
