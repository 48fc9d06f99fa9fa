//! The `receiver` binary and `orbit-dev` as real processes: the command line, the
//! documented paths, the operator tools, retention, observability, redaction, shutdown,
//! poison deliveries, prefetch, the examples, a database outage, and the
//! outbox's crash windows.
//! operator's kit in `deploy/` (rules, dashboard and service unit).
//!
//! One test binary for the area, since every binary compiles the shared
//! test code and links the whole dependency tree again; each file of
//! `tests/` stays a module of its own, named after it.

#[path = "../cli.rs"]
mod cli;
#[path = "../common/mod.rs"]
mod common;
#[path = "../db_outage.rs"]
mod db_outage;
#[path = "../deploy.rs"]
mod deploy;
#[path = "../deploy_metrics.rs"]
mod deploy_metrics;
#[path = "../e2e.rs"]
mod e2e;
#[path = "../escaped_events.rs"]
mod escaped_events;
#[path = "../examples.rs"]
mod examples;
#[path = "../failures.rs"]
mod failures;
#[path = "../notify.rs"]
mod notify;
#[path = "../notify_jetstream.rs"]
mod notify_jetstream;
#[path = "../notify_rabbitmq.rs"]
mod notify_rabbitmq;
#[path = "../observability.rs"]
mod observability;
#[path = "../orbit_failures.rs"]
mod orbit_failures;
#[path = "../outbox_crash.rs"]
mod outbox_crash;
#[path = "../outbox_tools.rs"]
mod outbox_tools;
#[path = "../pg_failover.rs"]
mod pg_failover;
#[path = "../poison.rs"]
mod poison;
#[path = "../postgres_e2e.rs"]
mod postgres_e2e;
#[path = "../postgres_tools.rs"]
mod postgres_tools;
#[path = "../prefetch.rs"]
mod prefetch;
#[path = "../prune.rs"]
mod prune;
#[path = "../prune_redelivery.rs"]
mod prune_redelivery;
#[path = "../readme.rs"]
mod readme;
#[path = "../redaction.rs"]
mod redaction;
#[path = "../secret_files.rs"]
mod secret_files;
#[path = "../self_check.rs"]
mod self_check;
#[path = "../service_manager.rs"]
mod service_manager;
#[path = "../shutdown.rs"]
mod shutdown;
#[path = "../tools.rs"]
mod tools;
#[path = "../trace_context.rs"]
mod trace_context;
#[path = "../traces.rs"]
mod traces;
