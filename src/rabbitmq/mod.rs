//! A RabbitMQ quorum queue as a [`Source`](crate::source::Source) of the
//! consumer: one Orbit event envelope per message, exactly as over NATS.
//!
//! | Orbit                          | RabbitMQ                                      |
//! |--------------------------------|-----------------------------------------------|
//! | subscription                   | a consumer of a quorum queue                  |
//! | credit on the WebSocket        | the consumer's prefetch (`basic.qos`)         |
//! | lease                          | held until settled or the channel closes      |
//! | retry budget                   | the queue's `x-delivery-limit`                |
//! | attempt                        | `x-delivery-count` + 1                        |
//! | lease proof                    | the delivery tag on the channel that got it   |
//! | ACK                            | `basic.ack` on that channel                   |
//! | `EXPIRED`                      | dead-lettered to `<queue>.failed`             |
//!
//! What differs is in `docs/rabbitmq.md`. Nothing runs out on its own: a
//! delivery is the consumer's until it is settled or its channel closes.
//! So an attempt that failed is returned by the source itself after a
//! pause ([`Source::retry`](crate::source::Source::retry): `basic.reject`
//! with requeue, the return that counts toward the delivery limit on every
//! version), bytes that can never be an event are rejected without requeue
//! (dead-lettered at once), and deliveries never started are returned with
//! `basic.nack`, which from RabbitMQ 4.3 on does not count. AMQP does not
//! answer an acknowledgement, and only the channel that received a
//! delivery can acknowledge it: a closed channel's deliveries come again,
//! and the inbox finds them duplicates.

mod connect;
mod error;
mod failures;
mod headers;
mod provision;
pub(crate) mod publish;
mod settings;
mod source;

pub use self::error::RabbitError;
pub use self::failures::{
    dead_letters, is_dead_letter_key, replay, DeadLetter, Replayed, REPLAY_OF_HEADER,
};
pub use self::provision::{provision, queue_arguments, Provisioned, QueueArguments, QueueSpec};

/// The deliveries a receiver of a RabbitMQ queue holds beyond its handler
/// slots unless told otherwise (the consumer's `ConsumerOptions::prefetch`,
/// the most it takes): the window is slots + prefetch. A quorum queue
/// gives a delivery's place in the window back only once its
/// acknowledgement is committed to the queue's log, so a window of the
/// slots and a few more leaves the consumer waiting for that commit
/// between deliveries; RabbitMQ's quorum queue guide asks for higher
/// prefetch for that reason. Nothing runs out while a delivery is held.
pub const DEFAULT_PREFETCH: u32 = 64;
pub use self::settings::{dead_letter_queue, AmqpUrl, RabbitSettings};
pub use self::source::{DeliveryTag, RabbitSource, RabbitStream};
