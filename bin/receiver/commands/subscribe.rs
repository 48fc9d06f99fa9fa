//! `receiver subscribe`: the subscription (or the JetStream consumer) that
//! `consume` then consumes (the work itself is [`crate::subscribe`]).

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use result_inbox::event::EventType;
use result_inbox::nats::{ConsumerSpec, Provisioned};

use super::{orbit_client, NATS_CALL_TIMEOUT};
use crate::args::{NatsArgs, OrbitArgs};
use crate::exit::{fail, EXIT_CONFIG, EXIT_FAILED};
use crate::runtime::runtime;
use crate::subscribe::{self, SubscribeError};

/// The durable pull consumer `subscribe --source nats` creates when there
/// is none.
#[derive(Args)]
pub(crate) struct NatsConsumerArgs {
    /// AckWait in seconds: how long one delivery is leased; longer than the
    /// inbox's 5 s transaction budget. [default: 30]
    #[arg(long, value_name = "SECONDS")]
    pub(crate) ack_wait: Option<u64>,
    /// MaxDeliver: how often a message is delivered at most (its retry
    /// budget). [default: 10]
    #[arg(long, value_parser = at_least_one)]
    pub(crate) max_deliver: Option<i64>,
    /// Create NATS_STREAM (file storage, on the queue's subject) when it
    /// does not exist.
    #[arg(long)]
    pub(crate) create_stream: bool,
}

pub(crate) fn at_least_one(value: &str) -> Result<i64, String> {
    match value.parse::<i64>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err("must be a whole number of at least 1 (every message needs one delivery)".into()),
    }
}

pub(crate) fn run_subscribe(orbit: OrbitArgs, events: Option<String>) -> ExitCode {
    let types = match events.as_deref().map(subscribe::event_types) {
        None => EventType::ALL.to_vec(),
        Some(Ok(types)) => types,
        Some(Err(e)) => return fail(EXIT_CONFIG, format!("--events: {e}")),
    };
    let orbit = match orbit.resolve() {
        Ok(o) => o,
        Err(e) => return fail(EXIT_CONFIG, e),
    };
    let client = match orbit_client(&orbit) {
        Ok(c) => c,
        Err(e) => return fail(EXIT_CONFIG, e),
    };
    match runtime().block_on(subscribe::run(&client, &orbit.queue_id, &types)) {
        Ok(id) => {
            println!("subscription={id}");
            ExitCode::SUCCESS
        }
        Err(e) => subscribe_failure(e),
    }
}

pub(crate) fn run_subscribe_nats(
    orbit: OrbitArgs,
    events: Option<String>,
    nats: NatsArgs,
    consumer: NatsConsumerArgs,
) -> ExitCode {
    if events.is_some() {
        return fail(
            EXIT_CONFIG,
            "--events is only for --source orbit: a JetStream consumer takes every event on the queue's subject",
        );
    }
    let settings = match nats.resolve(orbit.queue_id) {
        Ok(s) => s,
        Err(e) => return fail(EXIT_CONFIG, e),
    };
    let defaults = ConsumerSpec::default();
    let spec = ConsumerSpec {
        ack_wait: consumer
            .ack_wait
            .map_or(defaults.ack_wait, Duration::from_secs),
        max_deliver: consumer.max_deliver.unwrap_or(defaults.max_deliver),
        create_stream: consumer.create_stream,
    };
    // Only what was asked for can be at odds with an existing consumer.
    let asked_otherwise = |done: &Provisioned| {
        consumer
            .ack_wait
            .is_some_and(|_| done.ack_wait != spec.ack_wait)
            || consumer.max_deliver.is_some_and(|n| done.max_deliver != n)
    };
    match runtime().block_on(subscribe::nats(&settings, NATS_CALL_TIMEOUT, &spec)) {
        Ok(done) => {
            if !done.consumer_created && asked_otherwise(&done) {
                tracing::warn!(
                    ack_wait_s = done.ack_wait.as_secs(),
                    max_deliver = done.max_deliver,
                    "the consumer exists with its own AckWait and MaxDeliver, left as they are: --ack-wait and --max-deliver only shape a consumer this command creates"
                );
            }
            if done.stream_created {
                println!(
                    "stream={} created subject={}",
                    settings.stream, settings.subject
                );
            }
            println!(
                "consumer={} stream={} {} ack_wait_s={} max_deliver={}",
                settings.consumer,
                settings.stream,
                if done.consumer_created {
                    "created"
                } else {
                    "existing"
                },
                done.ack_wait.as_secs(),
                done.max_deliver
            );
            ExitCode::SUCCESS
        }
        Err(e) => subscribe_failure(e),
    }
}

pub(crate) fn subscribe_failure(e: SubscribeError) -> ExitCode {
    let code = if e.is_configuration() {
        EXIT_CONFIG
    } else {
        EXIT_FAILED
    };
    fail(code, e)
}
