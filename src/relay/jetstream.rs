//! The NATS JetStream target: a publish of the effect's stored bytes to
//! one subject, under the effect's id, sent once the stream's `PubAck`
//! says it holds it.
//!
//! Each attempt carries
//!
//! - the effect's stored headers (a stored `Nats-Msg-Id` is left out);
//! - `Nats-Msg-Id`: the effect's id, the same on every attempt, so that
//!   the stream keeps one message however often it is published within
//!   its duplicate window;
//! - `traceparent`: the delivery's trace context, when it came with one.
//!
//! Answers: a `PubAck` is [`Sent`], kept as `ack seq=N`, and a `PubAck`
//! that says the stream already held a message of that id as `ack
//! duplicate seq=N` (the first one's sequence): sent too, since the stream
//! has it. No `PubAck` — a timeout, a connection lost or not there yet, no
//! responders (`503`: no stream captures the subject, or JetStream is not
//! answering) — has an unknown outcome or a cause an operator mends: tried
//! again under the same id. A refusal by the stream is tried again as well
//! (a stream full with `discard: new`, storage exhausted, a cluster
//! without a leader), except one that no later attempt can change: a
//! message larger than the stream's or the server's limit, or headers
//! larger than the stream takes, which is dead at once.
//!
//! The stream's duplicate window (2 min unless its configuration says
//! otherwise) bounds the deduplication: a second publish of one id after
//! the window has passed is stored as a second message. An attempt whose
//! `PubAck` was lost is tried again after the relay's backoff (up to
//! [`RelayOptions::max_backoff`](super::RelayOptions::max_backoff)), or
//! once the lease of a relay that died ran out
//! ([`RelayOptions::lease`](super::RelayOptions::lease)); a window shorter
//! than the longer of the two ([`JetStream::window_needed`]) lets such an
//! effect reach the stream twice.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use async_nats::jetstream::context::{PublishError, PublishErrorKind};
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::{self, ErrorCode};
use async_nats::{Client, HeaderMap, Subject};
use tower::Service;

use super::target::{Attempt, Failed, Sent};
use super::RelayOptions;

/// The header JetStream deduplicates by.
const MSG_ID: &str = "Nats-Msg-Id";

/// Why a JetStream target cannot be set up, or its stream is not one it
/// can publish to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JetStreamError {
    /// The subject is not one subject a message can be published to.
    #[error("invalid subject {0:?}: one subject to publish to, without wildcards (* or >), empty tokens or white space")]
    InvalidSubject(String),
    /// No stream captures the subject: a publish to it is answered by no
    /// one.
    #[error("no stream captures subject {subject:?}: create one, e.g. `nats stream add --subjects {subject:?} --defaults NOTIFY`")]
    NoStream {
        /// The subject.
        subject: String,
    },
    /// The stream that captures the subject does not acknowledge what is
    /// published to it (`no_ack`), so no publish would ever count as sent.
    #[error("stream {stream} captures subject {subject:?} but does not acknowledge publishes (no_ack): the relay would never see a PubAck; turn no_ack off")]
    NoAck {
        /// The stream.
        stream: String,
        /// The subject.
        subject: String,
    },
    /// JetStream did not answer the question, or refused it.
    #[error("JetStream did not say which stream captures subject {subject:?}: {reason}")]
    Unanswered {
        /// The subject.
        subject: String,
        /// Why.
        reason: String,
    },
}

/// The stream that takes what a [`JetStream`] target publishes, as
/// [`JetStream::stream`] finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CapturingStream {
    /// Its name.
    pub name: String,
    /// How long it remembers a `Nats-Msg-Id`: the bound of the
    /// deduplication.
    pub duplicate_window: Duration,
}

/// The JetStream target: publishes each effect to one subject, under its
/// id. Cheap to clone (the client's connection is shared); the client
/// reconnects by itself.
#[derive(Clone)]
pub struct JetStream {
    client: Client,
    context: jetstream::Context,
    subject: Subject,
    timeout: Duration,
}

impl fmt::Debug for JetStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JetStream")
            .field("subject", &self.subject.as_str())
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// Whether `subject` is one subject a message can be published to.
fn is_concrete(subject: &str) -> bool {
    !subject.is_empty()
        && !subject.chars().any(|c| c.is_whitespace() || c.is_control())
        && subject
            .split('.')
            .all(|token| !token.is_empty() && token != "*" && token != ">")
}

impl JetStream {
    /// A target that publishes to `subject` through `client` (one the
    /// program connected, e.g. with `nats::connect`), each attempt given
    /// 5 s for its `PubAck`; [`JetStreamError::InvalidSubject`] for a
    /// subject with a wildcard, an empty token or white space.
    pub fn new(client: Client, subject: &str) -> Result<Self, JetStreamError> {
        if !is_concrete(subject) {
            return Err(JetStreamError::InvalidSubject(subject.to_owned()));
        }
        let timeout = Duration::from_secs(5);
        let mut context = jetstream::new(client.clone());
        context.set_timeout(timeout);
        Ok(Self {
            client,
            context,
            subject: Subject::from(subject),
            timeout,
        })
    }

    /// The same target, each attempt given `timeout` for its `PubAck`;
    /// keep it below the relay's lease.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self.context.set_timeout(timeout);
        self
    }

    /// The subject it publishes to.
    pub fn subject(&self) -> &str {
        self.subject.as_str()
    }

    /// The shortest duplicate window in which the stream takes every
    /// attempt at one effect, made by a relay with `options`, as one
    /// message: two publishes of an effect are at most the relay's longest
    /// wait between attempts plus this target's timeout apart (an attempt
    /// whose `PubAck` was lost, or that the client held while it was
    /// disconnected and sent once it was back), or a lease plus a poll (a
    /// relay that died after the publish, and the next one that claims
    /// it).
    pub fn window_needed(&self, options: &RelayOptions) -> Duration {
        window_needed(self.timeout, options)
    }

    /// The stream that captures the subject, and its duplicate window: a
    /// question for a start-up check. [`JetStreamError::NoStream`] when
    /// none does, [`JetStreamError::NoAck`] for one that would never
    /// answer a publish.
    pub async fn stream(&self) -> Result<CapturingStream, JetStreamError> {
        use async_nats::jetstream::context::GetStreamByNameErrorKind;
        let subject = self.subject.to_string();
        let unanswered = |reason: String| JetStreamError::Unanswered {
            subject: subject.clone(),
            reason,
        };
        let name = match self.context.stream_by_subject(subject.clone()).await {
            Ok(name) => name,
            Err(e) if e.kind() == GetStreamByNameErrorKind::NotFound => {
                return Err(JetStreamError::NoStream {
                    subject: subject.clone(),
                })
            }
            Err(e) => return Err(unanswered(e.to_string())),
        };
        let mut stream = self
            .context
            .get_stream(&name)
            .await
            .map_err(|e| unanswered(e.to_string()))?;
        let config = &stream
            .info()
            .await
            .map_err(|e| unanswered(e.to_string()))?
            .config;
        if config.no_ack {
            return Err(JetStreamError::NoAck {
                stream: name,
                subject,
            });
        }
        Ok(CapturingStream {
            duplicate_window: config.duplicate_window,
            name,
        })
    }

    /// Whether `bytes` on the wire are more than the server takes in one
    /// message (a client that has heard from no server yet knows no limit).
    fn too_large(&self, bytes: usize) -> bool {
        let max = self.client.server_info().max_payload;
        max > 0 && bytes > max
    }

    /// The headers of `attempt`'s publish, and their size on the wire.
    fn headers(attempt: &Attempt) -> (HeaderMap, usize) {
        let effect = &attempt.effect;
        let mut headers = HeaderMap::new();
        let mut size = "NATS/1.0\r\n\r\n".len();
        let mut add = |headers: &mut HeaderMap, name: &str, value: &str| {
            size += name.len() + ": ".len() + value.len() + "\r\n".len();
            headers.insert(name, value);
        };
        for (name, value) in effect.headers.iter() {
            if !name.eq_ignore_ascii_case(MSG_ID) {
                add(&mut headers, name, value);
            }
        }
        if let Some(traceparent) = effect.traceparent.as_deref() {
            add(&mut headers, "traceparent", traceparent);
        }
        add(&mut headers, MSG_ID, effect.id.as_str());
        (headers, size)
    }
}

/// [`JetStream::window_needed`] of a target whose attempts are given
/// `timeout`.
fn window_needed(timeout: Duration, options: &RelayOptions) -> Duration {
    (options.max_backoff + timeout).max(options.lease + options.poll_interval)
}

/// What a publish that got no `PubAck` makes of the attempt.
fn refused(e: &PublishError) -> Failed {
    let api = std::error::Error::source(e).and_then(|s| s.downcast_ref::<jetstream::Error>());
    match (e.kind(), api) {
        (PublishErrorKind::TimedOut, _) => Failed::retry("timeout"),
        (PublishErrorKind::BrokenPipe, _) => Failed::retry("connection"),
        (PublishErrorKind::StreamNotFound, _) => Failed::retry("no-responders"),
        (PublishErrorKind::MaxAckPending, _) => Failed::retry("overloaded"),
        (_, Some(api)) => refused_by_stream(api.error_code()),
        (_, None) => Failed::retry("error"),
    }
}

/// What the stream's refusal `code` makes of the attempt: dead when no
/// later attempt of the same bytes can be taken, else tried again.
fn refused_by_stream(code: ErrorCode) -> Failed {
    let result = format!("jetstream {}", code.0);
    match code {
        ErrorCode::STREAM_MESSAGE_EXCEEDS_MAXIMUM | ErrorCode::STREAM_HEADER_EXCEEDS_MAXIMUM => {
            Failed::dead(result)
        }
        _ => Failed::retry(result),
    }
}

impl Service<Attempt> for JetStream {
    type Response = Sent;
    type Error = Failed;
    type Future = Pin<Box<dyn Future<Output = Result<Sent, Failed>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Failed>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, attempt: Attempt) -> Self::Future {
        let (headers, header_bytes) = Self::headers(&attempt);
        let body = attempt.effect.body.clone();
        // The server closes a connection that sends more than it takes:
        // such an effect could never be published, and would cut the
        // others' connection each time it is tried.
        let too_large = self.too_large(body.len() + header_bytes);
        let context = self.context.clone();
        let subject = self.subject.clone();
        let timeout = self.timeout;
        Box::pin(async move {
            if too_large {
                return Err(Failed::dead("too-large"));
            }
            let publish = PublishMessage::build().payload(body).headers(headers);
            let acked = tokio::time::timeout(timeout, async {
                context.send_publish(subject, publish).await?.await
            })
            .await;
            match acked {
                Err(_) => Err(Failed::retry("timeout")),
                Ok(Err(e)) => Err(refused(&e)),
                Ok(Ok(ack)) if ack.duplicate => {
                    Ok(Sent::new(format!("ack duplicate seq={}", ack.sequence)))
                }
                Ok(Ok(ack)) => Ok(Sent::new(format!("ack seq={}", ack.sequence))),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::relay::Disposition;

    #[test]
    fn the_window_needed_covers_the_longest_wait_between_attempts_and_a_lease() {
        let mut options = RelayOptions::default();
        let timeout = Duration::from_secs(5);
        assert_eq!(window_needed(timeout, &options), Duration::from_secs(605));
        options.max_backoff = Duration::from_secs(30);
        assert_eq!(window_needed(timeout, &options), Duration::from_secs(61));
    }

    #[test]
    fn a_subject_is_one_concrete_subject() {
        for good in ["notify", "orbit.notify.tasks", "a-b_c.D1"] {
            assert!(is_concrete(good), "{good}");
        }
        for bad in ["", "a..b", ".a", "a.", "a.*", "a.>", ">", "a b", "a\tb"] {
            assert!(!is_concrete(bad), "{bad}");
        }
    }

    #[test]
    fn a_message_too_large_for_the_stream_is_dead_any_other_refusal_tried_again() {
        for code in [
            ErrorCode::STREAM_MESSAGE_EXCEEDS_MAXIMUM,
            ErrorCode::STREAM_HEADER_EXCEEDS_MAXIMUM,
        ] {
            let failed = refused_by_stream(code);
            assert_eq!(failed.disposition(), Disposition::Dead);
            assert_eq!(failed.result(), format!("jetstream {}", code.0));
        }
        for code in [
            ErrorCode::STREAM_STORE_FAILED,
            ErrorCode::STORAGE_RESOURCES_EXCEEDED,
            ErrorCode::STREAM_SEALED,
            ErrorCode::CLUSTER_NOT_AVAILABLE,
        ] {
            assert_eq!(refused_by_stream(code).disposition(), Disposition::Retry);
        }
        for (kind, result) in [
            (PublishErrorKind::TimedOut, "timeout"),
            (PublishErrorKind::BrokenPipe, "connection"),
            (PublishErrorKind::StreamNotFound, "no-responders"),
        ] {
            let failed = refused(&PublishError::new(kind));
            assert_eq!(failed, Failed::retry(result));
        }
    }
}
