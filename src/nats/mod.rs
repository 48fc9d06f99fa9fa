//! NATS JetStream as a [`Source`](crate::source::Source) of the consumer: a durable pull consumer
//! whose messages are Orbit event envelopes.
//!
//! | Orbit                          | JetStream                                   |
//! |--------------------------------|---------------------------------------------|
//! | subscription                   | durable pull consumer of a stream           |
//! | the subscription's queue       | the consumer's filter subject               |
//! | credit on the WebSocket        | pull requests (`batch` = credit granted)    |
//! | lease                          | `AckWait`                                   |
//! | retry budget                   | `MaxDeliver`                                |
//! | delivery id                    | `<stream>:<stream sequence>`                |
//! | attempt                        | the delivery count of the ack subject       |
//! | lease proof                    | the message's ack subject (`$JS.ACK…`)      |
//! | ACK, answered                  | `+ACK` as a request (a "double ack")        |
//! | `EXPIRED`                      | `MaxDeliver` reached (an advisory)          |
//!
//! What differs is in `docs/nats.md`: JetStream confirms every `+ACK` it
//! receives, including one for an attempt whose `AckWait` had passed (the
//! inbox makes the second delivery a duplicate), and it can terminate a
//! message (`+TERM`), which the consumer does only for bytes that can never
//! become a valid event.
//!
//! Credit is honoured exactly: each grant is one pull request of `batch = n`
//! on its own inbox subscription, so what the server delivers for it can be
//! counted; a request that expires (`408`) or is refused for now (`409`) is
//! sent again for what it did not deliver. A lost connection ends the stream
//! (the consumer reopens it), because what was in flight on it is unknown.
//!
//! The messages JetStream gave up on (MaxDeliver reached, or terminated)
//! are recorded in a failures stream of their own, which [`provision`]
//! creates: [`failed_messages`] lists them and [`replay`] brings one back.

mod connect;
mod error;
mod failures;
mod provision;
mod pull;
mod settings;
mod source;

use std::time::Duration;

pub use self::connect::connect;
pub use self::error::NatsError;
pub use self::failures::{
    failed_messages, failures_stream_name, max_deliveries_subject, replay, replayed_subject,
    terminated_subject, FailedMessage, FailureReason, REPLAY_OF_HEADER,
};
pub use self::provision::{provision, ConsumerSpec, Provisioned, MAX_REPLICAS};
pub use self::pull::PullStream;
pub use self::settings::{NatsAuth, NatsSecret, NatsServers, NatsSettings, UrlLogin};
pub use self::source::{AckSubject, JetStreamSource};

/// The prefetch `receiver consume --source nats` uses unless told
/// otherwise (the consumer's `ConsumerOptions::prefetch`):
/// credit is then granted in pull requests of 8 (half the prefetch), so the
/// server delivers 8 messages per request and per write instead of 2. With
/// the [acknowledgement beat](JetStreamSource) this halves nats-server's CPU
/// per delivery (`docs/BENCHMARKS.md`). JetStream's own clients pull
/// hundreds ahead; 16 held deliveries spend little of a 30 s AckWait.
pub const DEFAULT_PREFETCH: u32 = 16;

/// While no pull request is open, a connected client reports a keepalive
/// this often, so that an idle consumer is not taken for a dead stream.
const IDLE_KEEPALIVE: Duration = Duration::from_secs(15);
