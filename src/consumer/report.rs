//! What a consumer did, counted.

/// What a consumer did, counted (the `stopped` line of `receiver consume`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConsumerReport {
    /// Deliveries received from the stream.
    pub received: u64,
    /// Deliveries the service answered with `Ok`.
    pub succeeded: u64,
    /// Deliveries the service answered with `Err` (left un-ACKed).
    pub failed: u64,
    /// ACKs the source confirmed (including "already acknowledged with
    /// this proof").
    pub acked: u64,
    /// ACKs the source refused (e.g. the lease had passed to a newer
    /// attempt).
    pub ack_refused: u64,
    /// ACKs still unanswered when the shutdown grace ran out, handlers
    /// cancelled by shutdown and held deliveries it dropped unstarted.
    /// Their deliveries come again when their leases run out.
    pub abandoned: u64,
    /// Held deliveries given back unstarted at shutdown
    /// ([`Source::release`](crate::source::Source::release): JetStream's
    /// `-NAK`); the source offers them again at once. Never applied by this
    /// consumer, never acknowledged.
    pub released: u64,
    /// Deliveries whose bytes can never be a valid event that the source
    /// dropped for good at the consumer's request (JetStream's `+TERM`);
    /// never applied, never acknowledged. Included in `failed`.
    pub terminated: u64,
}
