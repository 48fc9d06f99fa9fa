//! `receiver subscribe`: create the subscription that `receiver consume`
//! then consumes, on the configured queue, for the event types asked for;
//! with `--source nats`, the durable pull consumer of the queue's subject
//! (and, when asked, its stream), and the stream that records the messages
//! that consumer gives up on; with `--source rabbitmq`, the quorum queue
//! and its dead-letter queue.

#[cfg(feature = "nats")]
use std::time::Duration;

use clap::Args;

use result_inbox::event::EventType;
use result_inbox::ids::{QueueId, SubscriptionId};
#[cfg(feature = "nats")]
use result_inbox::inbox::StoreOptions;
#[cfg(feature = "nats")]
use result_inbox::nats::{
    failures_stream_name, ConsumerSpec, NatsError, NatsSettings, Provisioned, MAX_REPLICAS,
};
use result_inbox::orbit::{OrbitClient, OrbitError};

use super::orbit_client;
use crate::args::{NatsArgs, OrbitArgs, RabbitArgs, SourceKind};
use crate::check::Problem;
use crate::exit::{config, failed, printed, Outcome};
use crate::runtime::runtime;

/// What `subscribe` is given; the last three shape the durable pull
/// consumer `subscribe --source nats` creates when there is none.
#[derive(Args)]
pub(crate) struct SubscribeArgs {
    #[command(flatten)]
    orbit: OrbitArgs,
    /// Comma-separated event types, e.g. task.cancelled,task.succeeded.
    /// Default: all five (task.submitted, task.succeeded, task.failed,
    /// task.cancelled, task.needs_review). Only for --source orbit.
    #[arg(long)]
    events: Option<String>,
    /// Where `consume` takes its deliveries from: `orbit`, `nats` or
    /// `rabbitmq`.
    #[arg(long, env = "RECEIVER_SOURCE", value_enum, ignore_case = true, default_value_t = SourceKind::Orbit)]
    source: SourceKind,
    #[command(flatten)]
    nats: NatsArgs,
    /// AckWait in seconds: how long one delivery is leased; longer than the
    /// inbox's 5 s transaction budget. [default: 30]
    #[arg(long, value_name = "SECONDS")]
    ack_wait: Option<u64>,
    /// MaxDeliver: how often a message is delivered at most (its retry
    /// budget). [default: 10]
    #[arg(long, value_parser = at_least_one)]
    max_deliver: Option<i64>,
    /// Create NATS_STREAM (file storage, on the queue's subject) when it
    /// does not exist.
    #[arg(long)]
    create_stream: bool,
    /// How many servers of a JetStream cluster keep the stream
    /// --create-stream creates, 1 to 5; the failures stream gets as many
    /// as the queue's stream has. [default: 1]
    #[arg(long, value_name = "N", value_parser = replicas)]
    replicas: Option<usize>,
    #[command(flatten)]
    rabbitmq: RabbitArgs,
    /// The quorum queue's delivery limit: how often a message may be
    /// returned (a failed attempt, a closed channel) before RabbitMQ moves
    /// it to the dead-letter queue. Only for --source rabbitmq. [default: 20]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    delivery_limit: Option<u32>,
}

/// JetStream's most copies of a stream, for a receiver built without NATS
/// (which refuses `--source nats` after reading its arguments).
#[cfg(not(feature = "nats"))]
const MAX_REPLICAS: usize = 5;

fn replicas(value: &str) -> Result<usize, String> {
    match value.parse::<usize>() {
        Ok(n) if (1..=MAX_REPLICAS).contains(&n) => Ok(n),
        _ => Err(format!(
            "must be a whole number from 1 to {MAX_REPLICAS} (JetStream keeps at most {MAX_REPLICAS} copies of a stream)"
        )),
    }
}

fn at_least_one(value: &str) -> Result<i64, String> {
    match value.parse::<i64>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err("must be a whole number of at least 1 (every message needs one delivery)".into()),
    }
}

pub(crate) fn run_subscribe(args: SubscribeArgs) -> Outcome {
    match args.source {
        SourceKind::Orbit | SourceKind::Nats if args.delivery_limit.is_some() => Err(config(
            "--delivery-limit is only for --source rabbitmq (NATS: --max-deliver)",
        )),
        SourceKind::Orbit => {
            let nats_only = [
                ("--ack-wait", args.ack_wait.is_some()),
                ("--max-deliver", args.max_deliver.is_some()),
                ("--create-stream", args.create_stream),
                ("--replicas", args.replicas.is_some()),
            ];
            if let Some((flag, _)) = nats_only.iter().find(|(_, given)| *given) {
                return Err(config(format!(
                    "{flag} is only for --source nats: an Orbit subscription's lease and budget are the platform's"
                )));
            }
            subscribe_orbit(args.orbit, args.events)
        }
        #[cfg(feature = "nats")]
        SourceKind::Nats => subscribe_nats(args),
        #[cfg(not(feature = "nats"))]
        SourceKind::Nats => Err(config(crate::args::built_without("--source nats", "NATS"))),
        #[cfg(feature = "rabbitmq")]
        SourceKind::Rabbitmq => subscribe_rabbitmq(args),
        #[cfg(not(feature = "rabbitmq"))]
        SourceKind::Rabbitmq => Err(config(crate::args::built_without(
            "--source rabbitmq",
            "RabbitMQ",
        ))),
    }
}

#[cfg(feature = "rabbitmq")]
fn subscribe_rabbitmq(args: SubscribeArgs) -> Outcome {
    use result_inbox::rabbitmq::{provision, QueueSpec};
    let elsewhere = [
        ("--events", args.events.is_some()),
        ("--ack-wait", args.ack_wait.is_some()),
        ("--max-deliver", args.max_deliver.is_some()),
        ("--create-stream", args.create_stream),
        ("--replicas", args.replicas.is_some()),
    ];
    if let Some((flag, _)) = elsewhere.iter().find(|(_, given)| *given) {
        return Err(config(format!(
            "{flag} is not for --source rabbitmq: a quorum queue takes every event routed to it, holds a delivery until it is settled, and counts returns against --delivery-limit"
        )));
    }
    let queue_id = args.orbit.queue_id().map_err(config)?;
    let settings = args.rabbitmq.settings(queue_id).map_err(config)?;
    let spec = QueueSpec {
        delivery_limit: args
            .delivery_limit
            .unwrap_or(QueueSpec::default().delivery_limit),
    };
    let done = runtime()
        .block_on(provision(
            &settings,
            spec,
            crate::commands::BROKER_CALL_TIMEOUT,
        ))
        .map_err(|e| failed(e.is_configuration(), e))?;
    if !done.created
        && args
            .delivery_limit
            .is_some_and(|n| i64::from(n) != done.delivery_limit)
    {
        tracing::warn!(
            delivery_limit = done.delivery_limit,
            "the queue exists with its own delivery limit, left as it is: --delivery-limit only shapes a queue this command declares"
        );
    }
    printed(format!(
        "queue={} {} type=quorum delivery_limit={} dead_letter_queue={} ready={}",
        done.queue,
        if done.created { "created" } else { "existing" },
        done.delivery_limit,
        done.dead_letter_queue,
        done.ready
    ))
}

fn subscribe_orbit(orbit: OrbitArgs, events: Option<String>) -> Outcome {
    let types = match events.as_deref().map(event_types) {
        None => EventType::ALL.to_vec(),
        Some(Ok(types)) => types,
        Some(Err(e)) => return Err(config(format!("--events: {e}"))),
    };
    let orbit = orbit.resolve().map_err(config)?;
    let client = orbit_client(&orbit).map_err(config)?;
    let id = runtime()
        .block_on(create_subscription(&client, &orbit.queue_id, &types))
        .map_err(|e| failed(e.is_configuration(), e))?;
    printed(format!("subscription={id}"))
}

#[cfg(feature = "nats")]
fn subscribe_nats(args: SubscribeArgs) -> Outcome {
    if args.events.is_some() {
        return Err(config(
            "--events is only for --source orbit: a JetStream consumer takes every event on the queue's subject",
        ));
    }
    let queue_id = args.orbit.queue_id().map_err(config)?;
    let settings = args.nats.settings(queue_id).map_err(config)?;
    let defaults = ConsumerSpec::default();
    let spec = ConsumerSpec {
        ack_wait: args.ack_wait.map_or(defaults.ack_wait, Duration::from_secs),
        max_deliver: args.max_deliver.unwrap_or(defaults.max_deliver),
        create_stream: args.create_stream,
        replicas: args.replicas.unwrap_or(defaults.replicas),
    };
    let done = runtime()
        .block_on(provision_consumer(
            &settings,
            crate::commands::BROKER_CALL_TIMEOUT,
            &spec,
        ))
        .map_err(|e| failed(e.is_configuration(), e))?;
    // Only what was asked for can be at odds with an existing consumer.
    let asked_otherwise = args
        .ack_wait
        .is_some_and(|_| done.ack_wait != spec.ack_wait)
        || args.max_deliver.is_some_and(|n| done.max_deliver != n);
    if !done.consumer_created && asked_otherwise {
        tracing::warn!(
            ack_wait_s = done.ack_wait.as_secs(),
            max_deliver = done.max_deliver,
            "the consumer exists with its own AckWait and MaxDeliver, left as they are: --ack-wait and --max-deliver only shape a consumer this command creates"
        );
    }
    if !done.stream_created && args.replicas.is_some_and(|n| done.replicas != n) {
        tracing::warn!(
            replicas = done.replicas,
            "the stream exists with its own replicas, left as they are: --replicas only shapes a stream --create-stream creates"
        );
    }
    if done.stream_created {
        println!(
            "stream={} created subject={}",
            settings.stream, settings.subject
        );
    }
    let created = |yes| if yes { "created" } else { "existing" };
    println!(
        "consumer={} stream={} {} ack_wait_s={} max_deliver={}",
        settings.consumer,
        settings.stream,
        created(done.consumer_created),
        done.ack_wait.as_secs(),
        done.max_deliver
    );
    printed(format!(
        "failures={} {}",
        failures_stream_name(&settings.stream, &settings.consumer),
        created(done.failures_stream_created)
    ))
}

/// Why no usable subscription came out of it.
#[derive(Debug, thiserror::Error)]
enum SubscribeError {
    /// Orbit refused or could not be reached; nothing was created. A
    /// refused token is named as `check` and `consume` name it.
    #[error("{}", match .0 {
        OrbitError::Status { status: 401, .. } => Problem::Token(.0.clone()).to_string(),
        other => other.to_string(),
    })]
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
    #[cfg(feature = "nats")]
    AckWaitTooShort {
        /// The AckWait asked for.
        ack_wait: std::time::Duration,
        /// The inbox's budget for one apply.
        budget: std::time::Duration,
    },
    /// The stream does not exist and was not to be created.
    #[error("stream {stream} does not exist; check NATS_STREAM, or pass --create-stream to create it for subject {subject:?}")]
    #[cfg(feature = "nats")]
    NoStream {
        /// The configured stream.
        stream: String,
        /// The queue's subject.
        subject: String,
    },
    /// NATS refused, or the existing stream or consumer cannot serve the
    /// queue; nothing was created.
    #[error("{0}")]
    #[cfg(feature = "nats")]
    Nats(#[from] NatsError),
}

impl SubscribeError {
    /// Whether the configuration (or what exists on the server) has to
    /// change before the command can succeed.
    fn is_configuration(&self) -> bool {
        match self {
            SubscribeError::Orbit(e) => e.is_refusal(),
            SubscribeError::OtherQueue { .. } => true,
            #[cfg(feature = "nats")]
            SubscribeError::AckWaitTooShort { .. } | SubscribeError::NoStream { .. } => true,
            #[cfg(feature = "nats")]
            SubscribeError::Nats(e) => e.is_configuration(),
        }
    }
}

/// Reads a comma-separated list of event types (`task.cancelled,task.failed`);
/// an empty or unknown name is refused, naming it.
fn event_types(list: &str) -> Result<Vec<EventType>, String> {
    let mut types = Vec::new();
    for name in list.split(',').map(str::trim) {
        let t = EventType::parse(name).map_err(|_| {
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
async fn create_subscription(
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
#[cfg(feature = "nats")]
async fn provision_consumer(
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
