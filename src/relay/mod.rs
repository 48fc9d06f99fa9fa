//! The relay: sends the outbox's effects to their targets after COMMIT,
//! never while a transaction or a lock is held.
//!
//! A [`Relay`] claims due effects in a short transaction of its own (a
//! lease, `FOR UPDATE SKIP LOCKED`: relays in any number of processes take
//! disjoint effects), sends each to its target with nothing held, and
//! records the answer in another short transaction: sent; failed, and
//! tried again after an exponential backoff with jitter (or the
//! `Retry-After` the target asked for) within a budget of attempts and
//! age; or dead. The claim gives at most one effect per ordering key, its
//! head, so sending a claimed batch at once keeps each key's order: a key
//! waits behind its failed head, other keys go on. Concurrency across keys
//! is [`RelayOptions::concurrency`].
//!
//! A target is a tower [`Service`](tower::Service) from an [`Attempt`] to
//! [`Sent`], failing with [`Failed`], which says whether to retry, give
//! up, or hold the target (gone). An embedder puts their own target in
//! [`Targets`] under a target name, or [`Webhook`] (Standard Webhooks 1.0),
//! or, with the feature `nats`, `JetStream` (a publish under `Nats-Msg-Id`),
//! or, with the feature `rabbitmq`, `RabbitMq` (a confirmed publish under
//! `message_id`),
//! with tower's timeout, rate-limit or concurrency layers in front. An
//! effect whose target the relay does not know stays pending, with a
//! warning, for a relay that knows it.
//!
//! The relay knows the outbox's table and the database, never the inbox or
//! a source: a consumer wakes it through a [`RelayWaker`] right after a
//! COMMIT that recorded effects, and it polls meanwhile. It stops when its
//! `CancellationToken` is cancelled.
//!
//! Every effect is sent at least once, under its id, until its target
//! takes it or it is dead. A relay that stops (or dies) after the target
//! answered and before it recorded the answer leaves a lease that runs
//! out: the effect is sent again under the same id. The target keeps the
//! ids it has seen to act once (`docs/outbox.md`).
//!
//! | File | What it is |
//! |---|---|
//! | `target.rs` | [`Attempt`], [`Sent`], [`Failed`], [`Disposition`], [`Targets`]: what a target is. |
//! | `run.rs` | [`Relay`], [`RelayOptions`], [`RelayWaker`], [`RelayError`]: the loop. |
//! | `webhook.rs` | [`Webhook`], [`WebhookSecret`], [`WebhookError`]: the HTTP target. |
//! | `jetstream.rs` | `JetStream`, `CapturingStream`, `JetStreamError`: the NATS JetStream target (feature `nats`). |
//! | `rabbitmq.rs` | `RabbitMq`: the RabbitMQ target (feature `rabbitmq`). |
//! | `clock.rs` | Times read (`created_at`, `Retry-After`) and waits chosen (backoff). |

mod clock;
#[cfg(feature = "nats")]
mod jetstream;
#[cfg(feature = "rabbitmq")]
mod rabbitmq;
mod run;
mod target;
mod webhook;

pub use self::run::{Relay, RelayError, RelayOptions, RelayWaker};
pub use self::target::{Attempt, BoxTarget, Disposition, Failed, Sent, Targets};
pub use self::webhook::{Webhook, WebhookError, WebhookSecret};

#[cfg(feature = "nats")]
#[cfg_attr(docsrs, doc(cfg(feature = "nats")))]
pub use self::jetstream::{CapturingStream, JetStream, JetStreamError};

#[cfg(feature = "rabbitmq")]
#[cfg_attr(docsrs, doc(cfg(feature = "rabbitmq")))]
pub use self::rabbitmq::RabbitMq;
