//! The messages JetStream gave up on, kept in a stream of their own, and
//! bringing chosen ones back.
//!
//! JetStream announces each message that reached MaxDeliver and each one
//! the receiver terminated in an advisory, published once whether or not
//! anyone listens. The failures stream that [`provision`](super::provision)
//! creates captures those advisories as they happen, so that they can be
//! read back at any later time; it also holds a replay marker for every
//! message [`replay`] brought back, so that the marker, not a deletion,
//! takes it off the list and the record itself stays.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use async_nats::jetstream::{self, stream::RawMessageErrorKind};
use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::{JetStreamSource, NatsError, NatsSettings};
use crate::delivery::TraceContext;

/// The name of the failures stream of `consumer` on `stream`:
/// `<stream>_<consumer>_FAILURES`, with anything but ASCII letters, digits,
/// `_` and `-` replaced by `_`, so that it is a valid JetStream name
/// whatever the two names hold.
pub fn failures_stream_name(stream: &str, consumer: &str) -> String {
    format!("{stream}_{consumer}_FAILURES")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The subject of JetStream's advisory of a message of `consumer` on
/// `stream` that reached MaxDeliver.
pub fn max_deliveries_subject(stream: &str, consumer: &str) -> String {
    format!("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{stream}.{consumer}")
}

/// The subject of JetStream's advisory of a message of `consumer` on
/// `stream` that was terminated (`+TERM`).
pub fn terminated_subject(stream: &str, consumer: &str) -> String {
    format!("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.{stream}.{consumer}")
}

/// The subject on which [`replay`] records that it brought a failed
/// message of `consumer` on `stream` back, in the failures stream.
pub fn replayed_subject(stream: &str, consumer: &str) -> String {
    format!("receiver.failures.{stream}.{consumer}.replayed")
}

/// The subjects the failures stream of `consumer` on `stream` must
/// capture: both advisories and the replay marker.
pub(super) fn failures_subjects(stream: &str, consumer: &str) -> [String; 3] {
    [
        max_deliveries_subject(stream, consumer),
        terminated_subject(stream, consumer),
        replayed_subject(stream, consumer),
    ]
}

/// Why JetStream gave up on a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureReason {
    /// It was delivered MaxDeliver times and never acknowledged.
    MaxDeliveries,
    /// The receiver terminated it (`+TERM`): its bytes can never be an
    /// event.
    Terminated,
}

impl FailureReason {
    /// `max_deliveries` or `terminated`.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureReason::MaxDeliveries => "max_deliveries",
            FailureReason::Terminated => "terminated",
        }
    }
}

impl fmt::Display for FailureReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A message of the queue's stream that JetStream gave up on and that was
/// not replayed since. Its `Debug` shows the body's length only: the body
/// holds a task's result.
#[derive(Clone, PartialEq, Eq)]
pub struct FailedMessage {
    /// Its sequence in the queue's stream.
    pub stream_sequence: u64,
    /// Why JetStream gave up on it.
    pub reason: FailureReason,
    /// How often it had been delivered by then.
    pub deliveries: u64,
    /// When JetStream gave up on it: its advisory's `timestamp`, RFC 3339
    /// in UTC as the server wrote it (`2026-12-07T09:21:04.123456789Z`);
    /// `None` when the advisory had none.
    pub failed_at: Option<String>,
    /// Its bytes, read back from the queue's stream by its sequence; `None`
    /// when the stream no longer holds it (its limits removed it, or it was
    /// deleted).
    pub body: Option<Bytes>,
    /// The producer's trace context its headers carried (`traceparent`,
    /// `tracestate`), read with its body: [`replay`] gives it to the copy,
    /// whose delivery then joins the producer's trace.
    pub trace: Option<TraceContext>,
}

impl fmt::Debug for FailedMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FailedMessage")
            .field("stream_sequence", &self.stream_sequence)
            .field("reason", &self.reason)
            .field("deliveries", &self.deliveries)
            .field("failed_at", &self.failed_at)
            .field(
                "body",
                &format_args!(
                    "{}",
                    match &self.body {
                        Some(body) => format!("<{} bytes>", body.len()),
                        None => "<gone>".to_owned(),
                    }
                ),
            )
            .field("trace", &self.trace)
            .finish()
    }
}

/// The part of both advisories that is read; the server sends more.
#[derive(Deserialize)]
struct Advisory {
    stream_seq: u64,
    #[serde(default)]
    deliveries: u64,
    #[serde(default)]
    timestamp: Option<String>,
}

/// What [`replay`] records in the failures stream.
#[derive(Serialize, Deserialize)]
struct ReplayMarker {
    /// The failed message's sequence in the queue's stream.
    stream_seq: u64,
    /// The sequence its replayed copy got.
    replayed_as: u64,
}

/// One failure as recorded, before its body is read.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Failure {
    reason: FailureReason,
    deliveries: u64,
    failed_at: Option<String>,
}

/// An advisory's time, if it reads as one: it goes into `key=value` lines
/// as it is.
fn time_of(timestamp: Option<String>) -> Option<String> {
    timestamp.filter(|t| {
        !t.is_empty()
            && t.len() <= 40
            && t.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b':' | b'.' | b'+'))
    })
}

/// The failures the records (subject and payload, in the failures stream's
/// order) hold for `stream` and `consumer`, by stream sequence: the first
/// record of a sequence counts, and a sequence with a replay marker is
/// left out. Records on other subjects (a failures stream an operator made
/// wider) and payloads that cannot be read are skipped.
fn failures_of<'a>(
    stream: &str,
    consumer: &str,
    records: impl IntoIterator<Item = (&'a str, &'a [u8])>,
) -> BTreeMap<u64, Failure> {
    let max_deliveries = max_deliveries_subject(stream, consumer);
    let terminated = terminated_subject(stream, consumer);
    let replayed_subject = replayed_subject(stream, consumer);
    let mut failures = BTreeMap::new();
    let mut replayed = BTreeSet::new();
    for (subject, payload) in records {
        let reason = if subject == max_deliveries {
            FailureReason::MaxDeliveries
        } else if subject == terminated {
            FailureReason::Terminated
        } else {
            if subject == replayed_subject {
                if let Ok(marker) = serde_json::from_slice::<ReplayMarker>(payload) {
                    replayed.insert(marker.stream_seq);
                }
            }
            continue;
        };
        let Ok(advisory) = serde_json::from_slice::<Advisory>(payload) else {
            continue;
        };
        failures.entry(advisory.stream_seq).or_insert(Failure {
            reason,
            deliveries: advisory.deliveries,
            failed_at: time_of(advisory.timestamp),
        });
    }
    failures.retain(|sequence, _| !replayed.contains(sequence));
    failures
}

/// The failures stream of the configured stream and consumer, or
/// [`NatsError::NoFailuresStream`].
async fn failures_stream(source: &JetStreamSource) -> Result<jetstream::stream::Stream, NatsError> {
    let name = failures_stream_name(&source.stream, &source.consumer);
    source
        .context
        .get_stream(&name)
        .await
        .map_err(|e| match e.kind() {
            jetstream::context::GetStreamErrorKind::JetStream(js)
                if js.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND =>
            {
                NatsError::NoFailuresStream {
                    failures: name.clone(),
                    stream: source.stream.clone(),
                    consumer: source.consumer.clone(),
                }
            }
            _ => NatsError::JetStream(format!("stream {name}: {e}")),
        })
}

/// The messages of the configured stream that its consumer gave up on
/// (MaxDeliver reached, or terminated) and that were not [replayed](replay)
/// since, in the order of their stream sequences (the order they were
/// published in): one entry per message, whatever number of records it
/// has. Each carries its body as the queue's stream still holds it.
///
/// Only reads: the failures stream record by record and the queue's stream
/// message by message (`$JS.API.STREAM.INFO` and `$JS.API.STREAM.MSG.GET`
/// of both); no consumer is created or moved. Failures from before the
/// failures stream existed were not recorded; a missing failures stream is
/// [`NatsError::NoFailuresStream`].
pub async fn failed_messages(
    settings: &NatsSettings,
    timeout: Duration,
) -> Result<Vec<FailedMessage>, NatsError> {
    let source = JetStreamSource::unchecked(settings, timeout).await?;
    let failures = failures_stream(&source).await?;
    let name = failures.cached_info().config.name.clone();
    let last = failures.cached_info().state.last_sequence;
    let mut records = Vec::new();
    let mut next = failures.cached_info().state.first_sequence.max(1);
    // One request per record, skipping the gaps deleted records leave;
    // records arriving meanwhile are left for the next reading.
    while next <= last {
        match failures.get_first_raw_message_by_subject(">", next).await {
            Ok(record) if record.sequence <= last => {
                next = record.sequence + 1;
                records.push((record.subject, record.payload));
            }
            Ok(_) => break,
            Err(e) if matches!(e.kind(), RawMessageErrorKind::NoMessageFound) => break,
            Err(e) => {
                return Err(NatsError::JetStream(format!(
                    "stream {name}, record {next}: {e}"
                )))
            }
        }
    }
    let found = failures_of(
        &source.stream,
        &source.consumer,
        records.iter().map(|(s, p)| (s.as_str(), p.as_ref())),
    );
    if found.is_empty() {
        return Ok(Vec::new());
    }
    let stream = source.stream_handle().await?;
    let mut messages = Vec::with_capacity(found.len());
    for (stream_sequence, failure) in found {
        let (body, trace) = match stream.get_raw_message(stream_sequence).await {
            Ok(message) => (
                Some(message.payload),
                super::pull::trace_context(Some(&message.headers)),
            ),
            Err(e) if matches!(e.kind(), RawMessageErrorKind::NoMessageFound) => (None, None),
            Err(e) => {
                return Err(NatsError::JetStream(format!(
                    "stream {}, message {stream_sequence}: {e}",
                    source.stream
                )))
            }
        };
        messages.push(FailedMessage {
            stream_sequence,
            reason: failure.reason,
            deliveries: failure.deliveries,
            failed_at: failure.failed_at,
            body,
            trace,
        });
    }
    Ok(messages)
}

/// The header a replayed copy carries, naming the message it copies
/// (`<stream>:<sequence>`), for whoever reads the stream.
pub const REPLAY_OF_HEADER: &str = "Result-Inbox-Replay-Of";

/// Publishes a failed message's body again on the queue's subject, so that
/// the durable consumer delivers it as a new message (a new stream
/// sequence, a fresh delivery budget), with the producer's trace context
/// the original carried, then records in the failures stream that it was
/// replayed, which takes it off [`failed_messages`]. Returns the new
/// stream sequence.
///
/// The copy carries no `Nats-Msg-Id`: the stream's duplicate window would
/// otherwise drop a copy of a message whose id it still remembers. A copy
/// the server nevertheless calls a duplicate, or that another stream
/// stored, is an error. Replaying the same message twice (two concurrent
/// calls, or again after the marker could not be recorded) delivers it
/// twice; the inbox makes the second a duplicate.
///
/// A message whose body is gone is [`NatsError::MessageGone`]; nothing is
/// published. Needs publish permission on the queue's subject and on the
/// [replay marker's subject](replayed_subject).
pub async fn replay(
    settings: &NatsSettings,
    timeout: Duration,
    message: &FailedMessage,
) -> Result<u64, NatsError> {
    let Some(body) = message.body.clone() else {
        return Err(NatsError::MessageGone {
            stream: settings.stream.clone(),
            sequence: message.stream_sequence,
        });
    };
    let source = JetStreamSource::unchecked(settings, timeout).await?;
    // Before anything is published: the marker must have somewhere to go,
    // or the copy would be delivered and the message still listed.
    let failures = failures_stream(&source).await?;
    let failures_name = failures.cached_info().config.name.clone();
    let marker_subject = replayed_subject(&source.stream, &source.consumer);
    let subjects = &failures.cached_info().config.subjects;
    if !subjects
        .iter()
        .any(|pattern| super::provision::captures(pattern, &marker_subject))
    {
        return Err(NatsError::FailuresStreamSubjects {
            failures: failures_name,
            stream: source.stream.clone(),
            consumer: source.consumer.clone(),
            missing: vec![marker_subject],
            subjects: subjects.clone(),
        });
    }
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(
        REPLAY_OF_HEADER,
        format!("{}:{}", source.stream, message.stream_sequence).as_str(),
    );
    if let Some(trace) = &message.trace {
        headers.insert("traceparent", trace.traceparent());
        if let Some(state) = trace.tracestate() {
            headers.insert("tracestate", state);
        }
    }
    let ack = publish_checked(
        &source,
        source.subject.clone(),
        Some(headers),
        body,
        &source.stream,
    )
    .await
    .map_err(|e| {
        NatsError::JetStream(format!(
            "replay of message {} of stream {}: {e}",
            message.stream_sequence, source.stream
        ))
    })?;
    let marker = serde_json::to_vec(&ReplayMarker {
        stream_seq: message.stream_sequence,
        replayed_as: ack,
    })
    .expect("two numbers serialize");
    publish_checked(&source, marker_subject, None, marker.into(), &failures_name)
        .await
        .map_err(|e| {
            NatsError::JetStream(format!(
                "message {} of stream {} was replayed as {ack}, but the replay could not be recorded in {failures_name} ({e}): it is still listed, and replaying it again delivers a copy the inbox takes for a duplicate",
                message.stream_sequence, source.stream
            ))
        })?;
    tracing::info!(
        stream = %source.stream,
        sequence = message.stream_sequence,
        replayed_as = ack,
        "failed message replayed"
    );
    Ok(ack)
}

/// Publishes through JetStream and waits for its acknowledgement, which
/// must come from `stream` and must not call the message a duplicate;
/// returns the stored sequence.
async fn publish_checked(
    source: &JetStreamSource,
    subject: String,
    headers: Option<async_nats::HeaderMap>,
    payload: Bytes,
    stream: &str,
) -> Result<u64, String> {
    let pending = match headers {
        Some(headers) => {
            source
                .context
                .publish_with_headers(subject, headers, payload)
                .await
        }
        None => source.context.publish(subject, payload).await,
    }
    .map_err(|e| e.to_string())?;
    let ack = pending.await.map_err(|e| e.to_string())?;
    if ack.stream != stream {
        return Err(format!(
            "stored by stream {} at {}, not by {stream}",
            ack.stream, ack.sequence
        ));
    }
    if ack.duplicate {
        return Err(format!(
            "dropped by stream {stream} as a duplicate of {}",
            ack.sequence
        ));
    }
    Ok(ack.sequence)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_failures_stream_is_named_after_the_stream_and_the_consumer_as_a_valid_name() {
        assert_eq!(
            failures_stream_name("ORBIT_RESULTS", "task-result-view"),
            "ORBIT_RESULTS_task-result-view_FAILURES"
        );
        assert_eq!(failures_stream_name("a$b", "c/d~e"), "a_b_c_d_e_FAILURES");
    }

    #[test]
    fn one_entry_per_sequence_in_sequence_order_without_the_replayed_ones() {
        let (s, c) = ("S", "C");
        let max = max_deliveries_subject(s, c);
        let term = terminated_subject(s, c);
        let marker = replayed_subject(s, c);
        let records: Vec<(&str, &[u8])> = vec![
            (
                &max,
                br#"{"stream_seq":9,"deliveries":3,"stream":"S","timestamp":"2026-12-07T09:21:04.5Z"}"#,
            ),
            (
                &term,
                br#"{"stream_seq":4,"deliveries":1,"timestamp":"a time with spaces"}"#,
            ),
            (&max, br#"{"stream_seq":9,"deliveries":4}"#),
            (&term, br#"{"stream_seq":7,"deliveries":1}"#),
            (&marker, br#"{"stream_seq":7,"replayed_as":12}"#),
            (&term, b"{not json"),
            (
                "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.S.other",
                br#"{"stream_seq":5,"deliveries":3}"#,
            ),
        ];
        let found: Vec<_> = failures_of(s, c, records).into_iter().collect();
        assert_eq!(
            found,
            [
                (
                    4,
                    Failure {
                        reason: FailureReason::Terminated,
                        deliveries: 1,
                        failed_at: None,
                    }
                ),
                (
                    9,
                    Failure {
                        reason: FailureReason::MaxDeliveries,
                        deliveries: 3,
                        failed_at: Some("2026-12-07T09:21:04.5Z".to_owned()),
                    }
                ),
            ]
        );
    }

    #[test]
    fn a_failed_message_never_shows_its_body() {
        let message = FailedMessage {
            stream_sequence: 3,
            reason: FailureReason::MaxDeliveries,
            deliveries: 2,
            failed_at: None,
            body: Some(Bytes::from_static(b"secret-result")),
            trace: None,
        };
        let shown = format!("{message:?}");
        assert!(!shown.contains("secret"), "{shown}");
        assert!(shown.contains("<13 bytes>"), "{shown}");
    }
}
