//! The receiver's metrics, recorded through the [`metrics`] facade.
//!
//! The library only records; it installs no exporter. A team that embeds the
//! layer and the consumer gets these series in whatever recorder its own
//! program installed (Prometheus, OpenTelemetry, statsd, …), and none at all
//! if it installed none. The `receiver` binary installs a Prometheus exporter
//! (`--metrics-addr`).
//!
//! Names follow Prometheus conventions (base units, `_total` counters,
//! `_seconds` histograms). Label values are a small fixed set — classes,
//! results, causes — never an id, a token, a proof or a body, so the number
//! of series stays bounded whatever the traffic.

use std::time::Duration;

/// Deliveries the inbox handled, by `class`: `applied`, `duplicate`,
/// `stale`, `conflict`, `rejected`, `unconfirmed`, `error` (the classes of
/// the inbox's log line).
pub const DELIVERIES: &str = "receiver_deliveries_total";
/// Seconds from the start of a delivery's apply to its outcome, by `class`.
pub const APPLY_DURATION: &str = "receiver_apply_duration_seconds";
/// ACK reports, by `result`: `confirmed` (the platform accepted it),
/// `refused` (it did not, e.g. a newer lease), `rereported` (an answer was
/// lost and the same proof was sent again).
pub const ACKS: &str = "receiver_acks_total";
/// Deliveries whose service call is running.
pub const IN_FLIGHT: &str = "receiver_deliveries_in_flight";
/// Leased deliveries waiting for a free handler slot (at most the
/// consumer's `prefetch`).
pub const HELD: &str = "receiver_deliveries_held";
/// Transactions run again inside their budget, by `cause`: `deadlock`
/// (1213), `lock_wait` (1205), `connection` (a pooled connection that the
/// server had dropped, before COMMIT).
pub const TRANSACTION_RETRIES: &str = "receiver_transaction_retries_total";
/// Deliveries per transaction of an inbox in batching mode.
pub const BATCH_SIZE: &str = "receiver_batch_size";
/// Delivery streams reopened after they broke or fell silent.
pub const STREAM_RECONNECTS: &str = "receiver_stream_reconnects_total";
/// Delivery streams that broke, by the source's `cause` (Orbit:
/// `transport`, `timeout`, `status`, `protocol`, `unreadable_message`;
/// NATS: `unreachable`, `disconnected`, `jetstream`; otherwise `error`).
pub const STREAM_ERRORS: &str = "receiver_stream_errors_total";
/// Seconds from an applied event's own time (its `occurred_at`) to the
/// COMMIT that applied it: how far behind the platform the view is. Only
/// `applied` deliveries: a duplicate or a stale version changed nothing.
pub const EVENT_AGE: &str = "receiver_event_age_seconds";
/// Deliveries the source holds for this consumer and has not delivered
/// yet, where the source can tell (NATS JetStream: the durable consumer's
/// pending count, from each message and each check of the consumer).
pub const SOURCE_PENDING: &str = "receiver_source_pending";
/// Whether the delivery stream is open (1) or not (0).
pub const STREAM_OPEN: &str = "receiver_stream_open";
/// Whether the last probe of the database answered (1) or not (0).
pub const DATABASE_REACHABLE: &str = "receiver_database_reachable";
/// Whether the consumer stopped taking deliveries because its database
/// cannot be reached (1) or takes them (0).
pub const BREAKER_OPEN: &str = "receiver_breaker_open";

/// How many standbys a COMMIT of the database waits for now (where the
/// server has standbys); 0 means a failover can lose acknowledged commits.
pub const SYNCHRONOUS_STANDBYS: &str = "receiver_database_synchronous_standbys";

/// Effects pending in the outbox, as a relay last counted them.
pub const OUTBOX_PENDING: &str = "receiver_outbox_pending";
/// Seconds since the oldest pending effect was recorded (0 when none is).
pub const OUTBOX_OLDEST_PENDING: &str = "receiver_outbox_oldest_pending_seconds";
/// Seconds from an effect's COMMIT (its `created_at`) to its target's
/// answer that took it, by `target`.
pub const OUTBOX_COMMIT_TO_SENT: &str = "receiver_outbox_commit_to_sent_seconds";
/// Attempts to send an effect, by `target` and `result`: `sent`, `retry`
/// (tried again later), `dead`. Target names are the relay's configured
/// ones, a small fixed set.
pub const OUTBOX_ATTEMPTS: &str = "receiver_outbox_attempts_total";
/// Effects given up (dead), by `target`.
pub const OUTBOX_DEAD: &str = "receiver_outbox_dead_total";
/// Whether a target answered gone (`410`) and its effects wait (1) or not
/// (0), by `target`.
pub const OUTBOX_TARGET_PAUSED: &str = "receiver_outbox_target_paused";

/// Gives every series its help text and unit, for exporters that show them.
/// Call once after installing a recorder; recording works without it.
pub fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_counter!(
        DELIVERIES,
        "Deliveries handled by the inbox, by outcome class."
    );
    describe_histogram!(
        APPLY_DURATION,
        Unit::Seconds,
        "Time from the start of an apply to its outcome, by class."
    );
    describe_histogram!(
        EVENT_AGE,
        Unit::Seconds,
        "Age of each applied event at its COMMIT, from the event's own time."
    );
    describe_gauge!(
        SOURCE_PENDING,
        "Deliveries the source holds for this consumer, not yet delivered."
    );
    describe_counter!(ACKS, "ACK reports, by result.");
    describe_gauge!(IN_FLIGHT, "Deliveries whose service call is running.");
    describe_gauge!(HELD, "Leased deliveries waiting for a free handler slot.");
    describe_counter!(
        TRANSACTION_RETRIES,
        "Transactions run again inside their time budget, by cause."
    );
    describe_histogram!(
        BATCH_SIZE,
        Unit::Count,
        "Deliveries per transaction of an inbox in batching mode."
    );
    describe_counter!(STREAM_RECONNECTS, "Delivery streams reopened.");
    describe_counter!(STREAM_ERRORS, "Delivery streams that broke, by cause.");
    describe_gauge!(STREAM_OPEN, "1 while the delivery stream is open.");
    describe_gauge!(
        DATABASE_REACHABLE,
        "1 while the database answers its probe."
    );
    describe_gauge!(
        SYNCHRONOUS_STANDBYS,
        "Standbys a COMMIT waits for, where the database has standbys."
    );
    describe_gauge!(OUTBOX_PENDING, "Effects pending in the outbox.");
    describe_gauge!(
        OUTBOX_OLDEST_PENDING,
        Unit::Seconds,
        "Age of the oldest pending effect."
    );
    describe_histogram!(
        OUTBOX_COMMIT_TO_SENT,
        Unit::Seconds,
        "Time from an effect's COMMIT to its target taking it, by target."
    );
    describe_counter!(
        OUTBOX_ATTEMPTS,
        "Attempts to send an effect, by target and result."
    );
    describe_counter!(OUTBOX_DEAD, "Effects given up, by target.");
    describe_gauge!(
        OUTBOX_TARGET_PAUSED,
        "1 while a target that answered gone is left alone."
    );
    describe_gauge!(
        BREAKER_OPEN,
        "1 while no deliveries are taken because the database is unreachable."
    );
}

/// Counts one delivery of `class` and how long it took.
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
pub(crate) fn delivery(class: &'static str, took: Duration) {
    metrics::counter!(DELIVERIES, "class" => class).increment(1);
    metrics::histogram!(APPLY_DURATION, "class" => class).record(took.as_secs_f64());
}

/// Records the age at COMMIT of an applied event that occurred at
/// `occurred_at` (seconds since the Unix epoch). A clock behind the
/// platform's reads 0, not a negative age.
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
pub(crate) fn event_age(occurred_at: f64) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    metrics::histogram!(EVENT_AGE).record((now - occurred_at).max(0.0));
}

/// Sets what the source says it holds for this consumer.
#[cfg_attr(not(feature = "nats"), allow(dead_code))]
pub(crate) fn source_pending(deliveries: u64) {
    metrics::gauge!(SOURCE_PENDING).set(deliveries as f64);
}

/// Every class a delivery the inbox handles may end in, at 0, before the
/// first delivery: a rate sees the first conflict rise from 0, where a
/// series born at 1 shows no increase at all.
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
pub(crate) fn start_deliveries() {
    for class in [
        "applied",
        "duplicate",
        "stale",
        "conflict",
        "rejected",
        "refused",
        "unconfirmed",
        "timeout",
        "error",
    ] {
        metrics::counter!(DELIVERIES, "class" => class).increment(0);
    }
}

/// Every result of an ACK report, at 0 (see [`start_deliveries`]).
pub(crate) fn start_acks() {
    for result in ["confirmed", "refused", "rereported"] {
        metrics::counter!(ACKS, "result" => result).increment(0);
    }
}

/// A relay's series of `target` at 0: its attempts of every result, its
/// dead effects, and not paused (see [`start_deliveries`]: an alert on the
/// first dead effect needs a series that was there before it).
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
pub(crate) fn start_outbox(target: &str) {
    for result in ["sent", "retry", "dead"] {
        metrics::counter!(OUTBOX_ATTEMPTS, "target" => target.to_owned(), "result" => result)
            .increment(0);
    }
    metrics::counter!(OUTBOX_DEAD, "target" => target.to_owned()).increment(0);
    metrics::gauge!(OUTBOX_TARGET_PAUSED, "target" => target.to_owned()).set(0.0);
}

/// Counts one ACK report of `result`.
pub(crate) fn ack(result: &'static str) {
    metrics::counter!(ACKS, "result" => result).increment(1);
}

/// Counts one delivery stream that broke for `cause`.
pub(crate) fn stream_error(cause: &'static str) {
    metrics::counter!(STREAM_ERRORS, "cause" => cause).increment(1);
}

/// Counts one transaction run again for `cause`.
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
pub(crate) fn transaction_retry(cause: &'static str) {
    metrics::counter!(TRANSACTION_RETRIES, "cause" => cause).increment(1);
}

/// Records the size of one batch's transaction.
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
pub(crate) fn batch_size(deliveries: usize) {
    metrics::histogram!(BATCH_SIZE).record(deliveries as f64);
}

/// Sets a 0/1 gauge.
pub(crate) fn flag(name: &'static str, on: bool) {
    metrics::gauge!(name).set(if on { 1.0 } else { 0.0 });
}
