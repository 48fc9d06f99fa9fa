//! The library against a real MySQL-compatible server and a real PostgreSQL
//! server: the inbox, batching, the schema and its privileges, the canonical
//! digest, a lost COMMIT answer, TLS, and the library as a team embeds it.
//!
//! One test binary for the area, since every binary compiles the shared
//! test code and links the whole dependency tree again; each file of
//! `tests/` stays a module of its own, named after it.

#[path = "../batching.rs"]
mod batching;
#[path = "../commit_loss.rs"]
mod commit_loss;
#[path = "../common/mod.rs"]
mod common;
#[path = "../conformance.rs"]
mod conformance;
#[path = "../diagnosis.rs"]
mod diagnosis;
#[path = "../digest.rs"]
mod digest;
#[path = "../embedding.rs"]
mod embedding;
#[path = "../fuzz_regressions.rs"]
mod fuzz_regressions;
#[path = "../inbox.rs"]
mod inbox;
#[path = "../outbox.rs"]
mod outbox;
#[path = "../postgres.rs"]
mod postgres;
#[path = "../postgres_inbox.rs"]
mod postgres_inbox;
#[path = "../privileges.rs"]
mod privileges;
#[path = "../relay.rs"]
mod relay;
#[path = "../relay_jetstream.rs"]
mod relay_jetstream;
#[path = "../relay_rabbitmq.rs"]
mod relay_rabbitmq;
#[path = "../schema.rs"]
mod schema;
#[path = "../tls.rs"]
mod tls;
