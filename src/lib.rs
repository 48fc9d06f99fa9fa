//! Receive task results from the Orbit task platform exactly once in effect.
//!
//! Orbit delivers every event at least once: leases run out, consumers crash,
//! ACK responses get lost, and the same event arrives again. This crate turns
//! that into an effect that happens once. For each delivery it runs one local
//! `READ COMMITTED` transaction in the receiver's *own* MySQL database that
//!
//! 1. inserts the event into an inbox table keyed by
//!    `(consumer_name, queue_id, event_id)` together with the SHA-256 digest of
//!    its canonical JSON — a second copy of the event hits the unique key;
//! 2. lets the business service check the task version and advance its view
//!    in the same transaction — an older version never overwrites a newer one;
//! 3. commits, and only then reports success, so that the consumer ACKs only
//!    what is durably recorded.
//!
//! # Getting started
//!
//! ```toml
//! [dependencies]
//! result-inbox = "0.1"       # default features: the inbox (MySQL) and the consumer
//! tokio = { version = "1", features = ["macros", "rt-multi-thread"] }
//! tower = "0.5"
//! bytes = "1"
//! ```
//!
//! sqlx comes re-exported as [`result_inbox::sqlx`](sqlx), so the queries of
//! your inner service run on the same sqlx as the inbox's connection. Start
//! with the [`guide`] (the README: the pattern, the `receiver` command, an
//! inner service that writes its own table) and the runnable examples in
//! `examples/`: `own_table.rs` (your table in the inbox's transaction),
//! `tower_stack.rs` (a full tower stack in the recommended order),
//! `custom_consumer.rs` (the consumer over a service of your own).
//!
//! # Features
//!
//! * `mysql` (default) — the inbox, the task view, the schema and the
//!   operator tools, with sqlx (MySQL, rustls). Without it the crate has no
//!   database driver: the digest, the event model, the Orbit client and the
//!   consumer stand alone.
//! * `nats` — NATS JetStream as a second source of deliveries beside Orbit's
//!   stream: a durable pull consumer whose messages are Orbit events
//!   (`docs/nats.md`), with the `async-nats` client.
//! * `cli` — what only the `receiver` binary needs: clap, the log output,
//!   the Prometheus exporter and its HTTP endpoint, the progress bar. Not
//!   needed to embed the crate; `cargo install --path . --features cli`
//!   installs the binary.
//!
//! # Map of the crate
//!
//! * [`digest`] — the frozen canonical JSON form and its SHA-256 digest.
//! * [`event`] — the Orbit event envelope, its ids and its validation.
//! * [`ids`] — Orbit's 32-hex ids, one type per kind.
//! * [`delivery`] — what a source hands a consumer: a delivery id, the event
//!   bytes, the attempt when the source counts them; Orbit's lease proof.
//! * [`orbit`] — the Orbit API client: subscriptions, tasks, ACKs, and the
//!   WebSocket delivery stream (`docs/orbit-protocol.md`).
//! * [`consumer`] — drives any `Service<Delivery<Bytes>>` over one
//!   subscription with bounded concurrency, and ACKs only what returned `Ok`.
//! * `nats` (feature `nats`) — a JetStream durable pull consumer as the
//!   consumer's source.
//! * [`telemetry`] — the metrics the library records through the `metrics`
//!   facade (no exporter: the embedding program picks one).
//! * [`scope`] — the receiver's identity: a validated [`scope::ReceiverName`]
//!   and the queue it consumes.
//! * `inbox` (feature `mysql`) — [`InboxLayer`](inbox::InboxLayer), the tower
//!   middleware that deduplicates and commits around an inner service.
//! * `task_view` (feature `mysql`) — the receiver's task result view, the
//!   inner service that [`InboxLayer`](inbox::InboxLayer) wraps in the
//!   `receiver` binary.
//! * [`config`] — how the commands find Orbit (credentials file, overrides).
//! * `check` and `consume` (feature `mysql`) — the self-check every command
//!   runs before it leases anything, and the `receiver consume` flow.
//! * `demo` (feature `mysql`) — the `receiver demo` flow.
//! * [`subscribe`], and `verify`, `stats`, `inspect` (feature `mysql`) — the
//!   operator tools: create the subscription, check the tables' agreement,
//!   size them for capacity planning, look at one event or task.
//! * `health` (feature `cli`) — the `/metrics`, `/healthz` and `/readyz`
//!   endpoint of the `receiver` binary.
//! * `schema` and `dsn` (feature `mysql`) — `schema.sql` and the one-time
//!   `receiver init`, and a database address that always names its database.
//!
//! `ARCHITECTURE.md` in the repository lists the invariants every part keeps.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]

pub mod config;
pub mod consumer;
pub mod delivery;
pub mod digest;
pub mod event;
pub mod ids;
pub mod orbit;
pub mod scope;
pub mod subscribe;
pub mod telemetry;

#[cfg(feature = "mysql")]
#[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
pub mod check;
#[cfg(feature = "mysql")]
#[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
pub mod consume;
#[cfg(feature = "mysql")]
#[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
pub mod demo;
#[cfg(feature = "mysql")]
#[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
pub mod dsn;
#[cfg(feature = "mysql")]
#[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
pub mod inbox;
#[cfg(feature = "mysql")]
#[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
pub mod inspect;
#[cfg(feature = "mysql")]
#[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
pub mod schema;
#[cfg(feature = "mysql")]
#[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
pub mod stats;
#[cfg(feature = "mysql")]
#[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
pub mod task_view;
#[cfg(feature = "mysql")]
#[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
pub mod verify;

#[cfg(feature = "cli")]
#[cfg_attr(docsrs, doc(cfg(feature = "cli")))]
pub mod health;

#[cfg(feature = "nats")]
#[cfg_attr(docsrs, doc(cfg(feature = "nats")))]
pub mod nats;

/// The sqlx this crate was built with, so that the queries of an inner
/// service use the same version as the connection they run on (add no
/// `sqlx` dependency of your own for them).
#[cfg(feature = "mysql")]
#[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
pub use sqlx;

/// The error type of inner services: any error that can cross threads.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

// The README, rendered as the crate's guide; its Rust example is compiled
// as a doctest, so that it cannot drift from the code.
#[cfg(feature = "mysql")]
#[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
#[doc = include_str!("../README.md")]
pub mod guide {}
