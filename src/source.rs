//! The source contract: what any broker of leased deliveries offers a
//! consumer. It sits below the consumer and below every source (Orbit's
//! subscription stream, a NATS JetStream pull consumer); the consumer names
//! no broker, and no broker names the consumer.
//!
//! The consumer relies on four things of a source, and nothing else:
//!
//! 1. it opens a stream that leases nothing until credit is granted, and
//!    never more than was granted ([`LeaseStream::grant`]);
//! 2. each delivery comes with what acknowledges *this attempt* of it (a
//!    proof: Orbit's lease proof, JetStream's ack subject), which the
//!    consumer keeps beside the delivery's future;
//! 3. an acknowledgement is confirmed or refused by the source, and one
//!    whose answer was lost can be sent again with the same proof
//!    ([`Source::ack`]);
//! 4. what is not acknowledged comes again (a lease runs out, or the
//!    source is told that the attempt failed: [`Source::retry`]).
//!
//! A source may also be able to drop a delivery for good without
//! acknowledging it ([`Source::terminate`]: JetStream's `+TERM`); the
//! consumer asks for that only for bytes that can never become a valid
//! event. Orbit cannot, so such a delivery spends its budget there. And it
//! may take back a delivery the consumer leased but never started
//! ([`Source::release`]: JetStream's `-NAK`), which the consumer does at
//! shutdown so that those come again at once rather than when their
//! leases run out.
//!
//! The breaker, the metrics and the bounded shutdown live in the consumer,
//! so every source has them.

use std::future::Future;

use bytes::Bytes;

use crate::delivery::{Delivery, DeliveryId};
use crate::ids::QueueId;

/// What a source's stream said.
#[derive(Debug)]
pub enum Incoming<R> {
    /// A leased delivery and the proof that acknowledges this attempt.
    Delivery(Delivery<Bytes>, R),
    /// The connection is alive (a ping): time has not stood still.
    Keepalive,
    /// The source reported a problem (a stable code) and may end the stream.
    Notice(String),
}

/// What a source said to an acknowledgement it accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckOutcome {
    /// This acknowledgement acknowledged the delivery.
    Acked,
    /// The delivery had been acknowledged with this proof before (e.g. the
    /// answer to an earlier acknowledgement was lost).
    AlreadyAcked,
}

/// An error of a source, and whether the same call may succeed later.
pub trait SourceError: std::error::Error + Send + Sync + 'static {
    /// Whether the same call may succeed later (a lost connection, a
    /// time-out, a server error), rather than being refused again.
    fn is_retryable(&self) -> bool;

    /// Whether the configuration (credentials, names, the queue) has to
    /// change before the source can be consumed, rather than an operation
    /// having failed. Default: what is not retryable.
    fn is_configuration(&self) -> bool {
        !self.is_retryable()
    }

    /// A stable one-word cause for the metric of broken streams
    /// (`receiver_stream_errors_total{cause}`): a small fixed set, never an
    /// id or a text. Default: `error`.
    fn cause(&self) -> &'static str {
        "error"
    }
}

/// A source of leased deliveries.
pub trait Source: Send + Sync + 'static {
    /// What acknowledges one attempt of a delivery. It may be a secret
    /// (Orbit's lease proof): its `Debug` must not show it.
    type Proof: std::fmt::Debug + Send + Sync + 'static;
    /// An open stream of deliveries.
    type Stream: LeaseStream<Proof = Self::Proof, Error = Self::Error>;
    /// What can go wrong.
    type Error: SourceError;

    /// What this source consumes, for the log line of an opened stream
    /// (Orbit: the subscription's id; a broker: its stream and consumer).
    fn subscription(&self) -> String;

    /// The queue whose events this source delivers, when it knows it (a
    /// checked Orbit subscription does). A consumer refuses to start when
    /// its probe applies events of another queue. The default knows none.
    fn queue(&self) -> Option<&QueueId> {
        None
    }

    /// The messaging system, as a delivery's span names it
    /// (`messaging.system`: `orbit`, `nats`). Default: `unknown`.
    fn system(&self) -> &'static str {
        "unknown"
    }

    /// Where the deliveries come from, as a delivery's span names it
    /// (`messaging.destination.name`): the queue by default.
    fn destination(&self) -> String {
        self.queue()
            .map_or_else(|| "unknown".to_owned(), |queue| queue.to_string())
    }

    /// Opens a stream; it holds no credit yet.
    fn open(&self) -> impl Future<Output = Result<Self::Stream, Self::Error>> + Send;

    /// Acknowledges one attempt with its proof; safe to repeat with the
    /// same proof when an answer was lost.
    fn ack(
        &self,
        id: &DeliveryId,
        proof: &Self::Proof,
    ) -> impl Future<Output = Result<AckOutcome, Self::Error>> + Send;

    /// Asks the source never to deliver this message again, without
    /// acknowledging it (it is not applied). `Ok(false)`: the source cannot
    /// (the default); the delivery is left to spend its budget.
    fn terminate(
        &self,
        id: &DeliveryId,
        proof: &Self::Proof,
    ) -> impl Future<Output = Result<bool, Self::Error>> + Send {
        let _ = (id, proof);
        async { Ok(false) }
    }

    /// Gives back a delivery that was leased and never handed to the
    /// service, so that the source offers it again now (to this consumer
    /// or another) instead of when its lease runs out; nothing is
    /// acknowledged. `Ok(false)`: the source cannot (the default); the
    /// lease runs out.
    fn release(
        &self,
        id: &DeliveryId,
        proof: &Self::Proof,
    ) -> impl Future<Output = Result<bool, Self::Error>> + Send {
        let _ = (id, proof);
        async { Ok(false) }
    }

    /// Gives back a delivery whose attempt failed, so that the source
    /// counts the attempt and offers the delivery again; nothing is
    /// acknowledged. For a source where nothing runs out on its own
    /// (RabbitMQ holds a delivery until its channel closes), and which
    /// may pause first so that a failing delivery does not spend its
    /// budget at once. `Ok(false)`: the source needs nothing (the default):
    /// the lease runs out, and that is the pause.
    fn retry(
        &self,
        id: &DeliveryId,
        proof: &Self::Proof,
    ) -> impl Future<Output = Result<bool, Self::Error>> + Send {
        let _ = (id, proof);
        async { Ok(false) }
    }

    /// Called once when the consumer stops, after the last acknowledgement
    /// was handed over: a source whose acknowledgements are not answered
    /// (RabbitMQ's) makes sure they have left before the process may exit.
    /// The default does nothing.
    fn shutdown(&self) -> impl Future<Output = ()> + Send {
        async {}
    }
}

/// An open stream of a [`Source`].
pub trait LeaseStream: Send + 'static {
    /// What acknowledges one attempt.
    type Proof;
    /// What can go wrong.
    type Error;

    /// Allows the source `n` more deliveries on this stream.
    fn grant(&mut self, n: u32) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// The next message, or `None` once the stream has ended.
    fn next(
        &mut self,
    ) -> impl Future<Output = Option<Result<Incoming<Self::Proof>, Self::Error>>> + Send;

    /// Ends the stream politely. Leases held are not released: they run out
    /// at the source.
    fn close(self) -> impl Future<Output = ()> + Send;
}

/// A shared beat on which a source sends its acknowledgements, for a
/// server that wakes once per acknowledgement it reads: those of
/// deliveries committed within one beat reach the server in one write, so
/// that it wakes once per beat. An acknowledgement waits at most one beat
/// (2 ms) after its COMMIT.
#[cfg(any(feature = "nats", feature = "rabbitmq"))]
#[derive(Debug, Clone, Copy)]
pub(crate) struct AckBeat {
    origin: tokio::time::Instant,
}

#[cfg(any(feature = "nats", feature = "rabbitmq"))]
impl AckBeat {
    const PERIOD: std::time::Duration = std::time::Duration::from_millis(2);

    /// Beats counted from now.
    pub(crate) fn new() -> Self {
        Self {
            origin: tokio::time::Instant::now(),
        }
    }

    /// The first beat after `now`.
    fn next(&self, now: tokio::time::Instant) -> tokio::time::Instant {
        let beats =
            now.saturating_duration_since(self.origin).as_nanos() / Self::PERIOD.as_nanos() + 1;
        self.origin + Self::PERIOD * u32::try_from(beats).unwrap_or(u32::MAX)
    }

    /// Waits for the next beat.
    pub(crate) async fn wait(&self) {
        tokio::time::sleep_until(self.next(tokio::time::Instant::now())).await;
    }
}

#[cfg(all(test, any(feature = "nats", feature = "rabbitmq")))]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn acknowledgements_within_one_beat_share_its_end_and_none_waits_longer() {
        let beat = AckBeat::new();
        let origin = beat.origin;
        let at = |micros| origin + Duration::from_micros(micros);
        assert_eq!(beat.next(at(4_100)), at(6_000));
        assert_eq!(beat.next(at(5_999)), at(6_000));
        assert_eq!(beat.next(at(6_000)), at(8_000), "strictly after now");
        assert_eq!(beat.next(origin), at(2_000));
    }
}
