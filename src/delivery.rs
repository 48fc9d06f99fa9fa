//! What a source hands a consumer: one attempt at delivering one event.
//!
//! A [`Delivery`] is generic over its body, the way `http::Request<B>` is: the
//! consumer produces `Delivery<Bytes>` (the raw event as it came off the
//! wire), and a middleware such as the inbox may hand its inner service a
//! `Delivery` whose body is something richer (the validated event and the
//! open transaction).
//!
//! What every source must provide is an id for the delivery (the same for
//! every attempt) and the event's bytes; the attempt number is optional
//! (Orbit and JetStream count attempts, a plain queue may not). What a
//! source needs to acknowledge — Orbit's lease proof, JetStream's ack
//! subject — is not part of the delivery: the consumer keeps it next to the
//! delivery's future, so the services that handle the delivery never hold
//! it.
//!
//! A delivery may also carry the [`TraceContext`] of the request that made
//! its event, so that the work it causes joins the producer's trace. The
//! context travels beside the event, never inside it: the event's bytes are
//! digested and must be the same in every attempt.

use std::fmt;

use crate::ids::text_type;

/// The platform's id of one delivery (one event for one subscription).
///
/// Attempts of the same delivery share the id; each attempt has its own
/// proof, which the source hands the consumer beside it.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct DeliveryId(String);

impl DeliveryId {
    /// Wraps an id as the platform sent it.
    pub fn new(id: impl Into<String>) -> Self {
        Self(id.into())
    }
}

text_type!(DeliveryId, "The id as text.");

/// Longest `tracestate` kept: what the W3C recommends every participant
/// propagate at least. A longer one is dropped whole rather than cut, since
/// a cut list member would be wrong, not shorter.
const MAX_TRACESTATE: usize = 512;

/// A producer's W3C trace context (`traceparent`, and `tracestate` when it
/// came with one), as a source received it beside an event.
///
/// Only a well-formed `traceparent` makes one ([`parse`](Self::parse)), so
/// the ids it hands out are always valid hex of the right length. It comes
/// from outside, like the event: a malformed one is no context, never an
/// error, and never affects the delivery it came with.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct TraceContext {
    traceparent: String,
    tracestate: Option<String>,
}

impl TraceContext {
    /// Reads a `traceparent` header and the `tracestate` that came with it,
    /// by the W3C Trace Context rules; `None` unless `traceparent` is valid.
    ///
    /// Version `00` is exactly `00-<trace id>-<parent id>-<flags>`: 32, 16
    /// and 2 lowercase hex digits, neither id all zeros. A later version
    /// (any two lowercase hex digits but `ff`) is read the same way from its
    /// first 55 characters, which must be followed by nothing or by `-` and
    /// more fields, as the spec's forward-compatibility rule says; it is
    /// kept whole. Spaces and tabs around a value are not part of it; any
    /// other character outside printable ASCII makes it invalid, so that
    /// the context can always be written into a header again.
    ///
    /// `tracestate` is kept when it is at most 512 characters of printable
    /// ASCII and not empty; otherwise it is dropped and the `traceparent`
    /// kept.
    pub fn parse(traceparent: &str, tracestate: Option<&str>) -> Option<TraceContext> {
        let traceparent = trim_ows(traceparent);
        if !valid_traceparent(traceparent) {
            return None;
        }
        let tracestate = tracestate.map(trim_ows).filter(|state| {
            !state.is_empty()
                && state.len() <= MAX_TRACESTATE
                && state.bytes().all(|b| (b' '..=b'~').contains(&b))
        });
        Some(TraceContext {
            traceparent: traceparent.to_owned(),
            tracestate: tracestate.map(str::to_owned),
        })
    }

    /// The `traceparent` as received (without surrounding spaces).
    pub fn traceparent(&self) -> &str {
        &self.traceparent
    }

    /// The `tracestate`, when one came and was kept.
    pub fn tracestate(&self) -> Option<&str> {
        self.tracestate.as_deref()
    }

    /// The trace id: 32 lowercase hex digits, not all zeros.
    pub fn trace_id(&self) -> &str {
        &self.traceparent[3..35]
    }

    /// The producer's span id, the parent of what the delivery causes: 16
    /// lowercase hex digits, not all zeros.
    pub fn parent_span_id(&self) -> &str {
        &self.traceparent[36..52]
    }

    /// The trace flags.
    pub fn flags(&self) -> u8 {
        // Checked by `parse`: two hex digits.
        u8::from_str_radix(&self.traceparent[53..55], 16).unwrap_or(0)
    }

    /// Whether the producer sampled the trace (flag `01`).
    pub fn sampled(&self) -> bool {
        self.flags() & 1 == 1
    }
}

/// What HTTP calls optional whitespace: not part of a header's value.
fn trim_ows(value: &str) -> &str {
    value.trim_matches([' ', '\t'])
}

fn valid_traceparent(value: &str) -> bool {
    let bytes = value.as_bytes();
    let hex = |range: std::ops::Range<usize>| {
        bytes[range]
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
    };
    let not_zero = |range: std::ops::Range<usize>| bytes[range].iter().any(|&b| b != b'0');
    if bytes.len() < 55
        || !hex(0..2)
        || &bytes[0..2] == b"ff"
        || [2, 35, 52].iter().any(|&at| bytes[at] != b'-')
        || !hex(3..35)
        || !hex(36..52)
        || !hex(53..55)
        || !not_zero(3..35)
        || !not_zero(36..52)
    {
        return false;
    }
    match (&bytes[0..2], bytes.len()) {
        (_, 55) => true,
        // Version 00 has these four fields and nothing more.
        (b"00", _) => false,
        _ => bytes[55] == b'-' && bytes[56..].iter().all(|b| (b'!'..=b'~').contains(b)),
    }
}

/// One attempt at delivering one event, with a body of type `B`.
#[derive(Clone)]
pub struct Delivery<B> {
    id: DeliveryId,
    attempt: Option<u32>,
    /// How many attempts the source allows the delivery, when it says.
    attempts_allowed: Option<u32>,
    trace: Option<TraceContext>,
    body: B,
}

impl<B> Delivery<B> {
    /// A delivery of `body` under the source's id for it.
    pub fn new(id: DeliveryId, body: B) -> Self {
        Self {
            id,
            attempt: None,
            attempts_allowed: None,
            trace: None,
            body,
        }
    }

    /// The same delivery, known to be attempt `attempt` (from 1), for
    /// sources that count attempts.
    pub fn with_attempt(mut self, attempt: u32) -> Self {
        self.attempt = Some(attempt);
        self
    }

    /// The same delivery, known to be allowed `attempts` attempts in all,
    /// for sources that say (JetStream's MaxDeliver): when attempt
    /// `attempts` fails, the source gives up on it.
    pub fn with_attempts_allowed(mut self, attempts: u32) -> Self {
        self.attempts_allowed = Some(attempts);
        self
    }

    /// The same delivery, with the trace context its source received
    /// beside the event (or none).
    pub fn with_trace(mut self, trace: Option<TraceContext>) -> Self {
        self.trace = trace;
        self
    }

    /// The delivery's id.
    pub fn id(&self) -> &DeliveryId {
        &self.id
    }

    /// Which attempt this is, starting at 1, when the source counts them.
    pub fn attempt(&self) -> Option<u32> {
        self.attempt
    }

    /// How many attempts the source allows the delivery in all, when it
    /// says.
    pub fn attempts_allowed(&self) -> Option<u32> {
        self.attempts_allowed
    }

    /// Whether this is the last attempt the source allows: if it fails,
    /// the source gives up on the delivery. `false` when the source does
    /// not say.
    pub fn is_last_attempt(&self) -> bool {
        matches!((self.attempt, self.attempts_allowed), (Some(attempt), Some(allowed)) if attempt >= allowed)
    }

    /// The producer's trace context, when the source received a valid one
    /// (the same in every attempt of the delivery).
    pub fn trace(&self) -> Option<&TraceContext> {
        self.trace.as_ref()
    }

    /// The body.
    pub fn body(&self) -> &B {
        &self.body
    }

    /// The body, mutably.
    pub fn body_mut(&mut self) -> &mut B {
        &mut self.body
    }

    /// Gives up the delivery for its body.
    pub fn into_body(self) -> B {
        self.body
    }

    /// The same delivery with another body.
    pub fn map_body<C>(self, f: impl FnOnce(B) -> C) -> Delivery<C> {
        Delivery {
            id: self.id,
            attempt: self.attempt,
            attempts_allowed: self.attempts_allowed,
            trace: self.trace,
            body: f(self.body),
        }
    }
}

impl<B> fmt::Debug for Delivery<B> {
    // The body is an event or a transaction: neither belongs in a log line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Delivery")
            .field("id", &self.id)
            .field("attempt", &self.attempt)
            .field("attempts_allowed", &self.attempts_allowed)
            .field("trace", &self.trace)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_attempt_the_source_says_is_its_last_is_the_last() {
        let d = |attempt| {
            Delivery::new(DeliveryId::new("d1"), ())
                .with_attempt(attempt)
                .with_attempts_allowed(3)
        };
        assert!(!d(2).is_last_attempt());
        assert!(d(3).is_last_attempt());
        assert!(
            d(3).map_body(|()| 1).is_last_attempt(),
            "kept with the body"
        );
        let unsaid = Delivery::new(DeliveryId::new("d1"), ()).with_attempt(9);
        assert!(!unsaid.is_last_attempt());
    }

    #[test]
    fn a_body_never_shows_in_debug_output() {
        let d = Delivery::new(DeliveryId::new("d1"), "sentinel-body");
        let shown = format!("{d:?}");
        assert!(shown.contains("d1"));
        assert!(!shown.contains("sentinel-body"));
    }

    #[test]
    fn a_delivery_needs_only_an_id_and_a_body() {
        let d = Delivery::new(DeliveryId::new("d1"), 1);
        assert_eq!(d.attempt(), None);
        let d = d.with_attempt(3).map_body(|n| n + 1);
        assert_eq!(
            (d.id().as_str(), d.attempt(), *d.body()),
            ("d1", Some(3), 2)
        );
        assert!(d.trace().is_none());
    }

    const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    const SPAN_ID: &str = "00f067aa0ba902b7";

    fn traceparent(version: &str, flags: &str) -> String {
        format!("{version}-{TRACE_ID}-{SPAN_ID}-{flags}")
    }

    #[test]
    fn a_valid_traceparent_gives_its_ids_and_flags() {
        let context = TraceContext::parse(&traceparent("00", "01"), Some("congo=t61rcWkgMzE"))
            .expect("valid");
        assert_eq!(context.traceparent(), traceparent("00", "01"));
        assert_eq!(context.tracestate(), Some("congo=t61rcWkgMzE"));
        assert_eq!(
            (context.trace_id(), context.parent_span_id()),
            (TRACE_ID, SPAN_ID)
        );
        assert!(context.sampled());

        let unsampled = TraceContext::parse(&traceparent("00", "fe"), None).expect("valid");
        assert_eq!((unsampled.flags(), unsampled.sampled()), (0xfe, false));
        assert_eq!(unsampled.tracestate(), None);

        let padded = format!(" \t{}\t ", traceparent("00", "01"));
        assert_eq!(
            TraceContext::parse(&padded, Some(" a=1 ")),
            TraceContext::parse(&traceparent("00", "01"), Some("a=1"))
        );
    }

    #[test]
    fn all_zero_ids_are_invalid() {
        let zero_trace = format!("00-{}-{SPAN_ID}-01", "0".repeat(32));
        let zero_span = format!("00-{TRACE_ID}-{}-01", "0".repeat(16));
        assert_eq!(TraceContext::parse(&zero_trace, Some("a=1")), None);
        assert_eq!(TraceContext::parse(&zero_span, None), None);
    }

    #[test]
    fn upper_case_hex_is_invalid_anywhere() {
        let upper_ids = traceparent("00", "01").to_uppercase();
        for text in [
            upper_ids.as_str(),
            &format!("00-{}-{SPAN_ID}-01", TRACE_ID.to_uppercase()),
            &format!("00-{TRACE_ID}-{}-01", SPAN_ID.to_uppercase()),
            &traceparent("00", "0A"),
            &traceparent("0A", "01"),
        ] {
            assert_eq!(TraceContext::parse(text, None), None, "{text}");
        }
    }

    #[test]
    fn wrong_lengths_and_separators_are_invalid() {
        let valid = traceparent("00", "01");
        for text in [
            format!("00-{}-{SPAN_ID}-01", &TRACE_ID[1..]),
            format!("00-{TRACE_ID}a-{SPAN_ID}-01"),
            format!("00-{TRACE_ID}-{}-01", &SPAN_ID[1..]),
            format!("00-{TRACE_ID}-{SPAN_ID}a-01"),
            format!("00-{TRACE_ID}-{SPAN_ID}-1"),
            format!("00-{TRACE_ID}-{SPAN_ID}-011"),
            format!("0-{TRACE_ID}-{SPAN_ID}-01"),
            format!("000-{TRACE_ID}-{SPAN_ID}-01"),
            valid.replace('-', "_"),
            valid[..54].to_owned(),
            // Version 00 has exactly four fields.
            format!("{valid}-extra"),
            format!("{valid}-"),
        ] {
            assert_eq!(TraceContext::parse(&text, None), None, "{text}");
        }
    }

    #[test]
    fn a_later_version_is_read_from_its_first_four_fields_and_kept_whole() {
        let later = format!("{}-what-comes-next", traceparent("cc", "03"));
        let context = TraceContext::parse(&later, None).expect("a later version");
        assert_eq!(context.traceparent(), later);
        assert_eq!(
            (
                context.trace_id(),
                context.parent_span_id(),
                context.sampled()
            ),
            (TRACE_ID, SPAN_ID, true)
        );
        assert!(TraceContext::parse(&traceparent("01", "00"), None).is_some());

        for text in [
            // Version ff is forbidden.
            traceparent("ff", "01"),
            // What follows the four fields must be a field of its own.
            format!("{}x", traceparent("cc", "01")),
            format!("{}-new field", traceparent("cc", "01")),
            format!("{}-\u{e9}", traceparent("cc", "01")),
        ] {
            assert_eq!(TraceContext::parse(&text, None), None, "{text}");
        }
    }

    #[test]
    fn junk_is_no_context_and_never_an_error() {
        for text in [
            "",
            "-",
            "00",
            "not a traceparent at all, though it is long enough to be one",
            "00-\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\n",
        ] {
            assert_eq!(TraceContext::parse(text, Some("a=1")), None, "{text:?}");
        }
    }

    #[test]
    fn a_tracestate_too_long_or_not_printable_ascii_is_dropped_and_the_traceparent_kept() {
        let parent = traceparent("00", "01");
        let longest = format!("a={}", "x".repeat(MAX_TRACESTATE - 2));
        let kept = |state: &str| {
            TraceContext::parse(&parent, Some(state))
                .expect("the traceparent is valid")
                .tracestate()
                .map(str::to_owned)
        };
        assert_eq!(kept(&longest), Some(longest.clone()));
        assert_eq!(kept("a=1, b=2"), Some("a=1, b=2".to_owned()));
        for state in [
            format!("{longest}x"),
            "a=\u{e9}".to_owned(),
            "a=1\nb=2".to_owned(),
            "a=\u{7f}".to_owned(),
            String::new(),
            "  ".to_owned(),
        ] {
            assert_eq!(kept(&state), None, "{state:?}");
        }
    }

    #[test]
    fn the_trace_context_stays_with_the_delivery_through_map_body() {
        let context = TraceContext::parse(&traceparent("00", "01"), None);
        let d = Delivery::new(DeliveryId::new("d1"), 1)
            .with_trace(context.clone())
            .with_attempt(2)
            .map_body(|n| n * 10);
        assert_eq!(d.trace(), context.as_ref());
        assert!(format!("{d:?}").contains(TRACE_ID));
    }
}
