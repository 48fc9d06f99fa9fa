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
//! # Map of the crate, by layer
//!
//! Dependencies run one way, from the top of this list to its bottom;
//! `ARCHITECTURE.md` states what each layer must not know, and a test
//! (`tests/layers.rs`) reads every `use crate::…` to hold it so.
//!
//! **Vocabulary** — what every part speaks, knowing no database or broker:
//!
//! * [`ids`] — Orbit's 32-hex ids, one type per kind.
//! * [`digest`] — the frozen canonical JSON form and its SHA-256 digest.
//! * [`event`] — the Orbit event envelope and its validation.
//! * [`delivery`] — what a source hands a consumer: a delivery id, the
//!   event bytes, the attempt when the source counts them.
//! * [`scope`] — the receiver's identity: a validated
//!   [`ReceiverName`](scope::ReceiverName) and the queue it consumes.
//! * [`failure`] — the stable classes of failed deliveries and how an
//!   error says its own; [`probe`] — a dependency that can be asked
//!   whether it answers; [`retry`] — waiting with backoff.
//! * [`telemetry`] — the metrics the library records through the `metrics`
//!   facade (no exporter: the embedding program picks one).
//!
//! **Database** (feature `mysql`) — `db`: the address (`Dsn`), the
//! redacted `DbError` and the error numbers, `schema.sql` and the one-time
//! `receiver init`; the engine the inbox runs on (`db::Engine`: MySQL, and
//! PostgreSQL with the feature `postgres`).
//!
//! **Inbox** (feature `mysql`) — `inbox`: [`InboxLayer`](inbox::InboxLayer),
//! the tower middleware that deduplicates and commits around an inner
//! service; `task_view`: the receiver's task result view, the inner
//! service the `receiver` binary runs in it.
//!
//! **Sources and the consumer** — [`source`]: the contract any broker of
//! leased deliveries offers; [`consumer`]: drives any
//! `Service<Delivery<Bytes>>` over one source with bounded concurrency and
//! ACKs only what returned `Ok`. The sources: [`orbit`] (the Orbit API
//! client and its WebSocket delivery stream, `docs/orbit-protocol.md`) and
//! `nats` (feature `nats`: a JetStream durable pull consumer).
//!
//! **Operator tools** (feature `mysql`) — `verify`, `stats`, `inspect`:
//! check the tables' agreement, size them for capacity planning, look at
//! one event or task; functions that return data, which the `receiver`
//! binary prints.
//!
//! The `receiver` binary (`bin/receiver/`) is the application on top: its
//! commands, configuration from the environment and health endpoint live
//! there, not in the library.
//!
//! `ARCHITECTURE.md` in the repository lists the invariants every part keeps.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]

/// Items of a cargo feature, each with its documentation badge.
macro_rules! feature {
    ($name:literal: $($item:item)*) => {
        $(
            #[cfg(feature = $name)]
            #[cfg_attr(docsrs, doc(cfg(feature = $name)))]
            $item
        )*
    };
}

// Vocabulary.
pub mod delivery;
pub mod digest;
pub mod event;
pub mod failure;
pub mod ids;
pub mod probe;
pub mod retry;
pub mod scope;
pub mod telemetry;

// Sources and the consumer.
pub mod consumer;
pub mod orbit;
pub mod source;

feature! { "nats":
    pub mod nats;
}

feature! { "rabbitmq":
    pub mod rabbitmq;
}

feature! { "mysql":
    // Database, inbox and task view, operator tools.
    pub mod db;
    pub mod inbox;
    pub mod outbox;
    pub mod relay;
    pub mod task_view;
    pub mod diagnosis;
    pub mod inspect;
    pub mod prune;
    pub mod stats;
    pub mod verify;

    /// The sqlx this crate was built with, so that the queries of an inner
    /// service use the same version as the connection they run on (add no
    /// `sqlx` dependency of your own for them).
    pub use sqlx;

    // The README, rendered as the crate's guide; its Rust example is
    // compiled as a doctest, so that it cannot drift from the code.
    #[doc = include_str!("../README.md")]
    pub mod guide {}
}

feature! { "testing":
    pub mod testing;
}

/// What most programs that embed the crate import, in one line:
/// `use result_inbox::prelude::*;`.
///
/// What a basic embedding names, on either engine: the inbox and its inner
/// service's answers, batching, the task view and its version check's
/// answer, the consumer over Orbit with its client's credentials and
/// address, the database address and the engines (`MySql`, and `Postgres`
/// with the feature `postgres`), a delivery and the scope it is applied
/// under; every item keeps its one path in its module.
pub mod prelude {
    pub use crate::consumer::{Consumer, ConsumerOptions};
    pub use crate::delivery::{Delivery, DeliveryId};
    pub use crate::failure::{Classified, Classify, Failure, FailureClass};
    pub use crate::ids::{QueueId, SubscriptionId};
    pub use crate::orbit::{Credentials, OrbitClient, OrbitSource, OrbitUrl};
    pub use crate::scope::{InboxScope, ReceiverName};
    pub use crate::BoxError;

    feature! { "mysql":
        pub use crate::db::Dsn;
        pub use crate::inbox::{
            Applying, Batching, InboxError, InboxLayer, InboxStore, Outcome, Receipt, Refusal,
            StoreOptions, Verdict,
        };
        pub use crate::task_view::{Advance, TaskView};
        pub use sqlx::MySql;
    }

    feature! { "postgres":
        pub use sqlx::Postgres;
    }
}

/// The error type of inner services: any error that can cross threads.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;
