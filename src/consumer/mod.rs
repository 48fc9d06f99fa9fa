//! The consumer: one source's deliveries through a tower service, and an
//! ACK for every `Ok` — and only for those.
//!
//! The consumer knows no broker: any [`Source`](crate::source::Source) of
//! leased deliveries feeds it ([`Consumer::new`]), Orbit's subscription
//! stream and a NATS JetStream pull consumer among them. It knows no inbox
//! either: a failed delivery's class comes from the failure vocabulary
//! ([`crate::failure`]), and from its [`Probe`](crate::probe::Probe), which knows its own
//! dependency's errors. "Credit", "lease proof" and "ACK" below are each
//! source's own equivalents.
//!
//! The consumer opens the source's stream, grants credit for its free
//! handler slots plus a small `prefetch` (so at most `concurrency +
//! prefetch` deliveries are in its hands at once, and a slot freed by a
//! commit does not wait for a round trip to the source), and runs each
//! delivery through a clone of the service. When the service answers,
//! [`settle`] decides: `Ok` is ACKed with the attempt's lease proof, `Err`
//! is left for redelivery.
//!
//! An ACK whose answer is lost (connection cut, time-out, server error) is
//! re-reported with the *same* proof until the source answers; that is
//! safe because the ACK is idempotent for its proof. A stream that breaks
//! is reopened with backoff while handlers and ACKs carry on.
//!
//! With a [`Probe`](crate::probe::Probe) of its database the consumer also has a breaker: while
//! the database cannot be reached it grants no credit and starts none of
//! the deliveries it holds, so nothing more is leased to it and no
//! delivery's retry budget burns during an outage; it probes with backoff
//! and takes deliveries again once the database answers. A held delivery
//! whose lease outlived the outage costs one attempt, as one in a handler
//! does.
//!
//! On shutdown the consumer stops taking deliveries (closes the stream),
//! gives the held ones back unstarted to a source that can take them
//! ([`Source::release`](crate::source::Source::release); otherwise their
//! leases run out), cancels in-flight handlers — dropping an inbox
//! transaction rolls it back, and an interrupted COMMIT is simply not
//! ACKed — then gives pending ACKs the rest of the grace period. It never
//! pauses the subscription: other consumers of it carry on.

mod ack;
mod breaker;
mod error;
mod health;
mod link;
mod options;
mod report;
mod run;
mod settle;
mod span;

pub use self::error::ConsumerError;
pub use self::health::Health;
pub use self::options::ConsumerOptions;
pub use self::report::ConsumerReport;
pub use self::run::Consumer;
pub use self::settle::{settle, Settlement};
pub use self::span::TraceParent;
