//! `receiver consume --source nats` against real nats-servers, and
//! `--source rabbitmq` against real RabbitMQ nodes.
//!
//! One test binary for the area, since every binary compiles the shared
//! test code and links the whole dependency tree again; each file of
//! `tests/` stays a module of its own, named after it.

#[path = "../common/mod.rs"]
mod common;
#[path = "../nats.rs"]
mod nats;
#[path = "../rabbitmq.rs"]
mod rabbitmq;
#[path = "../rabbitmq_failures.rs"]
mod rabbitmq_failures;
