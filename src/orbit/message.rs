//! What the server says on the delivery stream, read from a text frame.
//!
//! A delivery message carries its event verbatim (protocol §10.3): the
//! event's bytes are spliced into the message, so an event that is not JSON
//! makes the whole message unreadable to a JSON parser. Such a message is
//! still a delivery when its own fields can be read around the event: the
//! delivery is handed on with the bytes between them, and the inbox refuses
//! it as `rejected` like any other bad event, without the stream — and every
//! delivery leased on it — going down with it.
//!
//! The producer's trace context comes, when it does, in a field of the
//! message beside the event (`trace_context`), never in the event. It is
//! read for the tracing of what the delivery causes and for nothing else: a
//! malformed one is no context, and the delivery goes on as if none came.

use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::LeaseProof;
use super::OrbitError;
use crate::delivery::{Delivery, DeliveryId, TraceContext};

/// What the server said on the stream.
#[derive(Debug)]
pub enum StreamMessage {
    /// A leased delivery: the raw event bytes, exactly as Orbit stored them,
    /// and the proof that ACKs this attempt.
    Delivery(Delivery<Bytes>, LeaseProof),
    /// The server refused something and is about to close the stream.
    Error {
        /// Orbit's stable stream error code.
        code: String,
    },
    /// A ping or pong: the connection is alive. (Pings are answered by the
    /// WebSocket layer; this only tells the reader that time has not stood
    /// still.)
    Keepalive,
}

impl StreamMessage {
    /// Reads one text frame of the stream.
    ///
    /// A delivery message whose `event` is not JSON is still a
    /// [`StreamMessage::Delivery`] when the message's other fields can be
    /// read around it, with all six fields of §10.3 present and each once;
    /// its body is then the bytes between them, which the inbox refuses. A
    /// delivery id is never taken from inside the event's bytes. A message
    /// that names no delivery is [`OrbitError::UnreadableMessage`], which
    /// carries its length and nothing of its content.
    ///
    /// The optional `trace_context` becomes the delivery's
    /// [`trace`](Delivery::trace) when it is an object with a valid
    /// `traceparent` ([`TraceContext::parse`]); anything else there is
    /// ignored and never makes the message unreadable. Around an event that
    /// is not JSON it is read only when it comes before `event`, where it
    /// is read as JSON like the fields there; after the event it cannot be
    /// told from the event's bytes, and the delivery has no trace context.
    pub fn parse(text: &str) -> Result<Self, OrbitError> {
        let wire: WireMessage<'_> = match serde_json::from_str(text) {
            Ok(wire) => wire,
            Err(_) => {
                return around_the_event(text)
                    .ok_or(OrbitError::UnreadableMessage { bytes: text.len() })
            }
        };
        match wire.kind {
            "delivery" => {
                let (Some(id), Some(attempt), Some(proof), Some(event)) =
                    (wire.delivery_id, wire.attempt, wire.lease_proof, wire.event)
                else {
                    return Err(OrbitError::Protocol("incomplete delivery message"));
                };
                let trace = wire.trace_context.and_then(|raw| trace_context(raw.get()));
                Ok(delivery(id, attempt, proof, event.get(), trace))
            }
            "error" => Ok(StreamMessage::Error {
                code: wire.code.unwrap_or_else(|| "unknown".to_owned()),
            }),
            _ => Err(OrbitError::Protocol("unknown stream message type")),
        }
    }
}

#[derive(Deserialize)]
struct WireMessage<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    delivery_id: Option<&'a str>,
    attempt: Option<u32>,
    lease_proof: Option<String>,
    #[serde(borrow)]
    event: Option<&'a RawValue>,
    code: Option<String>,
    /// Any JSON at all, so that a misshapen context cannot make the message
    /// unreadable; [`trace_context`] reads it.
    #[serde(borrow)]
    trace_context: Option<&'a RawValue>,
}

/// `trace_context` as the protocol writes it (§10.3), each part any JSON
/// until it is read.
#[derive(Deserialize)]
struct WireTrace<'a> {
    #[serde(borrow)]
    traceparent: Option<&'a RawValue>,
    #[serde(borrow)]
    tracestate: Option<&'a RawValue>,
}

/// The trace context in a message's `trace_context` value, if it is an
/// object with a valid `traceparent`; a `tracestate` that is not a string
/// is dropped alone.
fn trace_context(raw: &str) -> Option<TraceContext> {
    let wire: WireTrace<'_> = serde_json::from_str(raw).ok()?;
    let traceparent: String = serde_json::from_str(wire.traceparent?.get()).ok()?;
    let tracestate = wire
        .tracestate
        .and_then(|raw| serde_json::from_str::<String>(raw.get()).ok());
    TraceContext::parse(&traceparent, tracestate.as_deref())
}

fn delivery(
    id: &str,
    attempt: u32,
    proof: String,
    event: &str,
    trace: Option<TraceContext>,
) -> StreamMessage {
    StreamMessage::Delivery(
        Delivery::new(
            DeliveryId::new(id),
            Bytes::copy_from_slice(event.as_bytes()),
        )
        .with_attempt(attempt)
        .with_trace(trace),
        LeaseProof::new(proof),
    )
}

/// The fields of a delivery message besides `event` (§10.3). All of them
/// must be found, each once, for a message with an unreadable event to count
/// as a delivery: the server always sends them, so a field missing around
/// the event is a sign that one was taken for part of it.
const FIELDS: [&str; 6] = [
    "type",
    "delivery_id",
    "subscription_id",
    "attempt",
    "lease_proof",
    "lease_expires_at",
];

/// The four characters JSON allows between tokens.
const JSON_WS: [char; 4] = [' ', '\t', '\n', '\r'];

/// Reads a delivery message whose `event` is not JSON: the fields before
/// `event` from the left, as JSON values; the fields after it from the
/// right, as strings or numbers, stopping at the first that is not one of
/// [`FIELDS`] not yet seen (so the event's own bytes are never read as a
/// field once the message's fields are all found); the event is what lies
/// between. Other fields before the event are passed over, but for
/// `trace_context`, which the parser in front of the event reads as safely
/// as the six (given twice, it is ambiguous and dropped). `None` if the
/// message is not an object, has no `event`, or lacks one of the fields.
fn around_the_event(text: &str) -> Option<StreamMessage> {
    let mut fields: Vec<(&str, &str)> = Vec::with_capacity(FIELDS.len());
    let mut traces: Vec<&str> = Vec::new();

    let mut left = Cursor { text, at: 0 };
    left.skip_ws();
    left.eat(b'{')?;
    let event_start = loop {
        left.skip_ws();
        let key = left.key()?;
        left.skip_ws();
        left.eat(b':')?;
        left.skip_ws();
        if key == "event" {
            break left.at;
        }
        let value = left.value()?;
        if FIELDS.contains(&key) {
            if fields.iter().any(|(k, _)| *k == key) {
                return None;
            }
            fields.push((key, value));
        } else if key == "trace_context" {
            traces.push(value);
        }
        left.skip_ws();
        left.eat(b',')?;
    };

    let bytes = text.as_bytes();
    let mut end = text.trim_end_matches(JSON_WS).len();
    if end == 0 || bytes[end - 1] != b'}' {
        return None;
    }
    end -= 1;
    while fields.len() < FIELDS.len() {
        match field_before(text, end, event_start) {
            Some((start, key, value))
                if FIELDS.contains(&key) && !fields.iter().any(|(k, _)| *k == key) =>
            {
                fields.push((key, value));
                end = start;
            }
            _ => break,
        }
    }

    let field = |name: &str| fields.iter().find(|(k, _)| *k == name).map(|(_, v)| *v);
    if fields.len() != FIELDS.len()
        || serde_json::from_str::<&str>(field("type")?).ok()? != "delivery"
    {
        return None;
    }
    let id: String = serde_json::from_str(field("delivery_id")?).ok()?;
    let attempt: u32 = serde_json::from_str(field("attempt")?).ok()?;
    let proof: String = serde_json::from_str(field("lease_proof")?).ok()?;
    let event = text.get(event_start..end)?.trim_matches(JSON_WS);
    let trace = match traces[..] {
        [raw] => trace_context(raw),
        _ => None,
    };
    Some(delivery(&id, attempt, proof, event, trace))
}

/// The field `,"key":value` that ends at `end` (before a `}` or the next
/// field), read backwards, and not reaching into `floor`: its start (the
/// comma), key and value. Values after the event are strings or numbers.
fn field_before(text: &str, end: usize, floor: usize) -> Option<(usize, &str, &str)> {
    let bytes = text.as_bytes();
    let mut at = skip_ws_back(bytes, end, floor);
    let value_end = at;
    if at > floor && bytes[at - 1] == b'"' {
        at = opening_quote(bytes, at - 1, floor)?;
    } else {
        while at > floor
            && matches!(
                bytes[at - 1],
                b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'
            )
        {
            at -= 1;
        }
    }
    let value = text.get(at..value_end)?;
    if value.is_empty() {
        return None;
    }
    at = skip_ws_back(bytes, at, floor);
    if at == floor || bytes[at - 1] != b':' {
        return None;
    }
    at = skip_ws_back(bytes, at - 1, floor);
    if at == floor || bytes[at - 1] != b'"' {
        return None;
    }
    let key_end = at - 1;
    let key_start = bytes[floor..key_end].iter().rposition(|&b| b == b'"')? + floor + 1;
    let key = text.get(key_start..key_end)?;
    at = skip_ws_back(bytes, key_start - 1, floor);
    if at == floor || bytes[at - 1] != b',' {
        return None;
    }
    Some((at - 1, key, value))
}

/// The position of the `"` that opens the string whose closing quote is at
/// `close`: the nearest quote before it that no backslash escapes.
fn opening_quote(bytes: &[u8], close: usize, floor: usize) -> Option<usize> {
    let mut at = close;
    while at > floor {
        at -= 1;
        if bytes[at] == b'"' {
            let backslashes = bytes[floor..at]
                .iter()
                .rev()
                .take_while(|&&b| b == b'\\')
                .count();
            if backslashes % 2 == 0 {
                return Some(at);
            }
        }
    }
    None
}

fn skip_ws_back(bytes: &[u8], mut at: usize, floor: usize) -> usize {
    while at > floor && matches!(bytes[at - 1], b' ' | b'\t' | b'\n' | b'\r') {
        at -= 1;
    }
    at
}

/// Reads JSON forwards from the start of a message.
struct Cursor<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Cursor<'a> {
    fn skip_ws(&mut self) {
        let rest = &self.text[self.at..];
        self.at += rest.len() - rest.trim_start_matches(JSON_WS).len();
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.text.as_bytes().get(self.at) == Some(&byte)).then(|| self.at += 1)
    }

    /// An object key without escapes, as the protocol's keys are.
    fn key(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let len = self.text[self.at..].find(['"', '\\'])?;
        let key = &self.text[self.at..self.at + len];
        self.at += len;
        self.eat(b'"')?;
        Some(key)
    }

    /// One complete JSON value, as its text.
    fn value(&mut self) -> Option<&'a str> {
        let rest = &self.text[self.at..];
        let mut values = serde_json::Deserializer::from_str(rest).into_iter::<&RawValue>();
        values.next()?.ok()?;
        let len = values.byte_offset();
        self.at += len;
        Some(&rest[..len])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(event: &str) -> String {
        format!(
            r#"{{"type":"delivery","delivery_id":"d1","subscription_id":"s","attempt":2,"lease_proof":"p","lease_expires_at":"x","event":{event}}}"#
        )
    }

    fn read(text: &str) -> (String, Option<u32>, String, Vec<u8>) {
        match StreamMessage::parse(text) {
            Ok(StreamMessage::Delivery(d, proof)) => (
                d.id().as_str().to_owned(),
                d.attempt(),
                proof.expose().to_owned(),
                d.body().to_vec(),
            ),
            other => panic!("not a delivery: {other:?}"),
        }
    }

    #[test]
    fn a_delivery_message_keeps_the_event_bytes_verbatim() {
        let text = message(r#"{"b": 1.10 ,"a":123456789012345678901234567890,"a":1}"#);
        assert_eq!(
            read(&text),
            (
                "d1".into(),
                Some(2),
                "p".into(),
                br#"{"b": 1.10 ,"a":123456789012345678901234567890,"a":1}"#.to_vec()
            )
        );
    }

    #[test]
    fn a_delivery_whose_event_is_not_json_keeps_its_id_proof_and_bytes() {
        for event in ["garbage{", "", r#"{"id":"abc""#, r#"{"a":1}trailing"#] {
            let (id, attempt, proof, body) = read(&message(event));
            assert_eq!((id.as_str(), attempt, proof.as_str()), ("d1", Some(2), "p"));
            assert_eq!(body, event.as_bytes(), "event {event:?}");
        }
    }

    #[test]
    fn fields_after_an_unreadable_event_are_read_from_the_right() {
        let text = r#"{"type":"delivery","subscription_id":"s","event":x,"delivery_id":"d1","lease_expires_at":"t","attempt":3,"lease_proof":"p\"q"}"#;
        let (id, attempt, proof, body) = read(text);
        assert_eq!(
            (id.as_str(), attempt, proof.as_str()),
            ("d1", Some(3), "p\"q")
        );
        assert_eq!(body, b"x");
    }

    #[test]
    fn a_delivery_id_inside_the_event_bytes_is_never_taken_for_the_message_s() {
        let spoof = r#"garbage,"delivery_id":"spoofed","lease_proof":"evil"} }"#;
        let (id, _, proof, body) = read(&message(spoof));
        assert_eq!((id.as_str(), proof.as_str()), ("d1", "p"));
        assert_eq!(body, spoof.as_bytes());
    }

    #[test]
    fn a_message_that_names_no_delivery_is_unreadable_and_says_only_its_length() {
        for text in [
            "garbage{",
            r#"{"type":"delivery","event":garbage{}"#,
            r#"{"type":"delivery","delivery_id":"d1","attempt":1,"lease_proof":"p","event":x}"#,
        ] {
            let error = StreamMessage::parse(text).unwrap_err();
            assert_eq!(error, OrbitError::UnreadableMessage { bytes: text.len() });
            assert!(!error.to_string().contains("garbage"));
        }
    }

    #[test]
    fn an_incomplete_delivery_is_a_protocol_error() {
        assert!(matches!(
            StreamMessage::parse(r#"{"type":"delivery","delivery_id":"d"}"#),
            Err(OrbitError::Protocol(_))
        ));
    }

    const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    /// A delivery message with `trace` (a JSON value, or nothing) as its
    /// `trace_context`, before the event.
    fn traced(trace: &str, event: &str) -> String {
        format!(
            r#"{{"type":"delivery","delivery_id":"d1","subscription_id":"s","attempt":2,"lease_proof":"p","lease_expires_at":"x","trace_context":{trace},"event":{event}}}"#
        )
    }

    /// The delivery's trace context as (traceparent, tracestate), after
    /// checking that the rest of the delivery is as if none had come.
    fn trace_of(text: &str, event: &str) -> Option<(String, Option<String>)> {
        let Ok(StreamMessage::Delivery(d, proof)) = StreamMessage::parse(text) else {
            panic!("not a delivery: {text}");
        };
        assert_eq!(
            (d.id().as_str(), d.attempt(), proof.expose(), &d.body()[..]),
            ("d1", Some(2), "p", event.as_bytes()),
            "{text}"
        );
        d.trace().map(|t| {
            (
                t.traceparent().to_owned(),
                t.tracestate().map(str::to_owned),
            )
        })
    }

    #[test]
    fn a_trace_context_beside_the_event_becomes_the_delivery_s() {
        let event = r#"{"id":"e"}"#;
        let both = format!(r#"{{"traceparent":"{TRACEPARENT}","tracestate":"a=1,b=2"}}"#);
        assert_eq!(
            trace_of(&traced(&both, event), event),
            Some((TRACEPARENT.into(), Some("a=1,b=2".into())))
        );
        let alone = format!(r#"{{"tracestate":null,"traceparent":"{TRACEPARENT}"}}"#);
        assert_eq!(
            trace_of(&traced(&alone, event), event),
            Some((TRACEPARENT.into(), None))
        );
        // After the event, in a message that is JSON, it is just as good.
        let after = message(event).replace(
            "}}",
            &format!(r#"}},"trace_context":{{"traceparent":"{TRACEPARENT}"}}}}"#),
        );
        assert_eq!(trace_of(&after, event), Some((TRACEPARENT.into(), None)));
        assert_eq!(trace_of(&message(event), event), None);
    }

    #[test]
    fn a_malformed_trace_context_is_no_context_and_the_delivery_goes_on() {
        let event = r#"{"id":"e"}"#;
        for trace in [
            "null",
            "1",
            "[]",
            &format!(r#""{TRACEPARENT}""#),
            "{}",
            r#"{"traceparent":"00-junk"}"#,
            r#"{"traceparent":7,"tracestate":"a=1"}"#,
            &format!(r#"{{"traceparent":"{}"}}"#, TRACEPARENT.to_uppercase()),
            &format!(r#"{{"traceparent":"{TRACEPARENT}","traceparent":"{TRACEPARENT}"}}"#),
        ] {
            assert_eq!(trace_of(&traced(trace, event), event), None, "{trace}");
        }
        // A bad tracestate is dropped alone.
        for state in ["7", r#""a=é""#, r#"{"a":1}"#] {
            let trace = format!(r#"{{"traceparent":"{TRACEPARENT}","tracestate":{state}}}"#);
            assert_eq!(
                trace_of(&traced(&trace, event), event),
                Some((TRACEPARENT.into(), None)),
                "{trace}"
            );
        }
    }

    #[test]
    fn around_an_unreadable_event_a_trace_context_before_it_is_read_and_one_after_it_is_not() {
        let context = format!(r#"{{"traceparent":"{TRACEPARENT}","tracestate":"a=1"}}"#);
        for event in ["garbage{", r#"{"a":1}trailing"#] {
            assert_eq!(
                trace_of(&traced(&context, event), event),
                Some((TRACEPARENT.into(), Some("a=1".into()))),
                "{event}"
            );
            assert_eq!(trace_of(&traced("[1]", event), event), None);
            assert_eq!(
                trace_of(&traced(r#"{"traceparent":1}"#, event), event),
                None
            );
        }

        // Given twice, neither is taken.
        let twice = traced(&context, "garbage{").replace(
            r#","event":"#,
            &format!(r#","trace_context":{context},"event":"#),
        );
        assert_eq!(trace_of(&twice, "garbage{"), None);

        // After the event, a context cannot be told from the event's bytes,
        // which it is then taken for: the inbox refuses them either way.
        let spoof = format!(r#"garbage,"trace_context":{context}"#);
        assert_eq!(trace_of(&message(&spoof), &spoof), None);
    }

    #[test]
    fn an_error_message_carries_its_code() {
        assert!(matches!(
            StreamMessage::parse(r#"{"type":"error","code":"keepalive_timeout","message":"m"}"#),
            Ok(StreamMessage::Error { code }) if code == "keepalive_timeout"
        ));
    }
}
