//! The pull requests of an open stream: credit as `batch`, honoured
//! exactly.

use std::fmt;
use std::time::Duration;

use async_nats::jetstream;
use async_nats::{Client, Subscriber};
use bytes::Bytes;
use futures::stream::{SelectAll, StreamExt};
use tokio::sync::watch;
use tokio::time::{sleep_until, Instant};

use super::{AckSubject, NatsError, IDLE_KEEPALIVE};
use crate::delivery::{Delivery, DeliveryId, TraceContext};
use crate::source::{Incoming, LeaseStream};
use crate::telemetry;

/// How long one pull request waits on the server for messages before it
/// expires and is sent again (its `408` is also the stream's sign of life).
const PULL_EXPIRES: Duration = Duration::from_secs(20);
/// After a `409` (too many waiting requests or unacknowledged messages) the
/// credit it held is asked for again after this long.
const PULL_RETRY: Duration = Duration::from_secs(1);
/// While a pull request waits, the server that holds it (the consumer's
/// leader) sends a heartbeat this often (`idle_heartbeat`, a `100`
/// status).
const PULL_HEARTBEAT: Duration = Duration::from_secs(5);
/// A pull request that brought nothing, not even a heartbeat, for this
/// long is taken for lost with the server that held it: in a cluster, a
/// leader that died takes its waiting requests along, its successor knows
/// nothing of them, and no `408` would ever end them. Its credit is asked
/// for again.
const PULL_SILENCE: Duration = Duration::from_secs(2 * PULL_HEARTBEAT.as_secs());

/// What one pull request's subscription yields.
enum Pulled {
    /// A message; with the request's subscription when it was the last of
    /// its batch (the request is done and the subscription free again).
    Message {
        message: Box<async_nats::Message>,
        done: Option<ReplyInbox>,
    },
    /// The request ended with `unfilled` of its batch undelivered.
    Ended {
        unfilled: u32,
        status: u16,
        description: String,
    },
    Heartbeat,
}

type Request = futures::stream::BoxStream<'static, Pulled>;

/// A subscription to a unique reply subject (a NATS "inbox"), for one pull
/// request at a time.
struct ReplyInbox {
    subject: String,
    subscriber: Subscriber,
}

/// An open stream of a [`JetStreamSource`](super::JetStreamSource): the pull requests in flight.
pub struct PullStream {
    client: Client,
    context: jetstream::Context,
    next_subject: String,
    requests: SelectAll<Request>,
    open_requests: usize,
    /// Subscriptions of requests that were filled, free for the next.
    idle: Vec<ReplyInbox>,
    /// Credit that a refused request gave back, to be asked for at
    /// `retry_at`.
    unplaced: u32,
    retry_at: Option<Instant>,
    disconnects: watch::Receiver<u64>,
    /// The consumer's MaxDeliver when the stream opened, which each
    /// delivery carries so that its last failed attempt can be told.
    attempts_allowed: Option<u32>,
}

impl fmt::Debug for PullStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PullStream")
            .field("open_requests", &self.open_requests)
            .field("unplaced", &self.unplaced)
            .finish_non_exhaustive()
    }
}

impl PullStream {
    pub(super) fn new(
        client: Client,
        context: jetstream::Context,
        next_subject: String,
        disconnects: watch::Receiver<u64>,
        attempts_allowed: Option<u32>,
    ) -> Self {
        Self {
            client,
            context,
            next_subject,
            requests: SelectAll::new(),
            open_requests: 0,
            idle: Vec::new(),
            unplaced: 0,
            retry_at: None,
            disconnects,
            attempts_allowed,
        }
    }

    fn delivery(&self, message: async_nats::Message) -> Result<Incoming<AckSubject>, NatsError> {
        let message = jetstream::Message {
            message,
            context: self.context.clone(),
        };
        let info = message.info().map_err(|e| {
            NatsError::JetStream(format!("a message without a JetStream ack subject: {e}"))
        })?;
        // What the server still holds for the consumer after this one.
        telemetry::source_pending(info.pending);
        let id = DeliveryId::new(format!("{}:{}", info.stream, info.stream_sequence));
        let attempt = u32::try_from(info.delivered.max(1)).unwrap_or(u32::MAX);
        let Some(reply) = message.message.reply.clone() else {
            return Err(NatsError::JetStream(
                "a message without an ack subject".into(),
            ));
        };
        let mut delivery = Delivery::new(id, message.message.payload.clone())
            .with_attempt(attempt)
            .with_trace(trace_context(message.message.headers.as_ref()));
        if let Some(allowed) = self.attempts_allowed {
            delivery = delivery.with_attempts_allowed(allowed);
        }
        Ok(Incoming::Delivery(delivery, AckSubject(reply)))
    }
}

/// The producer's trace context in a message's `traceparent` and
/// `tracestate` headers, as W3C propagation over messaging puts it: none
/// unless exactly one valid `traceparent` came; several `tracestate`s are
/// one list. Header names are matched in any case, as HTTP's are, since a
/// publisher may have copied them from HTTP with its own spelling.
pub(super) fn trace_context(headers: Option<&async_nats::HeaderMap>) -> Option<TraceContext> {
    let headers = headers?;
    let values = |name: &'static str| {
        headers
            .iter()
            .filter(move |(key, _)| AsRef::<str>::as_ref(*key).eq_ignore_ascii_case(name))
            .flat_map(|(_, values)| values.iter().map(|value| value.as_str()))
    };
    let mut parents = values("traceparent");
    let (Some(traceparent), None) = (parents.next(), parents.next()) else {
        return None;
    };
    let states: Vec<&str> = values("tracestate").collect();
    let tracestate = (!states.is_empty()).then(|| states.join(","));
    TraceContext::parse(traceparent, tracestate.as_deref())
}

/// The messages of one pull request, then how it ended. A request whose
/// batch was filled gives its subscription back for the next request (the
/// server sends nothing more to it); one that ended otherwise drops it
/// (unsubscribes), so that a late status can never be taken for a newer
/// request's.
fn one_request(inbox: ReplyInbox, batch: u32) -> Request {
    futures::stream::unfold(Some((inbox, batch)), |state| async move {
        let (mut inbox, remaining) = state?;
        let ended = |description: String| Pulled::Ended {
            unfilled: remaining,
            status: 0,
            description,
        };
        let message = match tokio::time::timeout(PULL_SILENCE, inbox.subscriber.next()).await {
            Ok(Some(message)) => message,
            Ok(None) => return Some((ended("subscription closed".into()), None)),
            Err(_) => {
                let silent = format!(
                    "pull request silent for {}s (no message, no heartbeat): the server that held it is gone; asking again",
                    PULL_SILENCE.as_secs()
                );
                return Some((ended(silent), None));
            }
        };
        match message.status.map(|s| s.as_u16()) {
            None => {
                let message = Box::new(message);
                let (done, next) = match remaining.saturating_sub(1) {
                    0 => (Some(inbox), None),
                    left => (None, Some((inbox, left))),
                };
                Some((Pulled::Message { message, done }, next))
            }
            Some(100) => Some((Pulled::Heartbeat, Some((inbox, remaining)))),
            Some(status) => {
                let ended = Pulled::Ended {
                    unfilled: remaining,
                    status,
                    description: message.description.unwrap_or_default(),
                };
                Some((ended, None))
            }
        }
    })
    .boxed()
}

impl LeaseStream for PullStream {
    type Proof = AckSubject;
    type Error = NatsError;

    async fn grant(&mut self, batch: u32) -> Result<(), NatsError> {
        let inbox = match self.idle.pop() {
            Some(inbox) => inbox,
            None => {
                let subject = self.client.new_inbox();
                let subscriber = self
                    .client
                    .subscribe(subject.clone())
                    .await
                    .map_err(|e| NatsError::JetStream(format!("subscribe: {e}")))?;
                ReplyInbox {
                    subject,
                    subscriber,
                }
            }
        };
        let body = serde_json::json!({
            "batch": batch,
            "expires": PULL_EXPIRES.as_nanos() as u64,
            "idle_heartbeat": PULL_HEARTBEAT.as_nanos() as u64,
        });
        self.client
            .publish_with_reply(
                self.next_subject.clone(),
                inbox.subject.clone(),
                Bytes::from(body.to_string()),
            )
            .await
            .map_err(|e| NatsError::JetStream(format!("pull request: {e}")))?;
        self.requests.push(one_request(inbox, batch));
        self.open_requests += 1;
        Ok(())
    }

    async fn next(&mut self) -> Option<Result<Incoming<AckSubject>, NatsError>> {
        loop {
            let keepalive_at = Instant::now() + IDLE_KEEPALIVE;
            let retry_at = self.retry_at;
            tokio::select! {
                changed = self.disconnects.changed() => {
                    return Some(Err(match changed {
                        Ok(()) => NatsError::Disconnected,
                        Err(_) => NatsError::JetStream("client closed".into()),
                    }));
                }
                _ = sleep_until(retry_at.unwrap_or(keepalive_at)), if retry_at.is_some() => {
                    self.retry_at = None;
                    let credit = std::mem::take(&mut self.unplaced);
                    if let Err(e) = self.grant(credit).await {
                        return Some(Err(e));
                    }
                }
                _ = sleep_until(keepalive_at), if self.open_requests == 0 => {
                    if self.client.connection_state() == async_nats::connection::State::Connected {
                        return Some(Ok(Incoming::Keepalive));
                    }
                }
                Some(pulled) = self.requests.next(), if self.open_requests > 0 => {
                    match pulled {
                        Pulled::Heartbeat => return Some(Ok(Incoming::Keepalive)),
                        Pulled::Message { message, done } => {
                            if let Some(inbox) = done {
                                self.open_requests = self.open_requests.saturating_sub(1);
                                self.idle.push(inbox);
                            }
                            return Some(self.delivery(*message));
                        }
                        Pulled::Ended { unfilled, status, description } => {
                            self.open_requests = self.open_requests.saturating_sub(1);
                            match status {
                                // Expired: ask again at once for what it
                                // did not bring; its arrival shows the
                                // server is there.
                                408 => {
                                    if unfilled > 0 {
                                        if let Err(e) = self.grant(unfilled).await {
                                            return Some(Err(e));
                                        }
                                    }
                                    return Some(Ok(Incoming::Keepalive));
                                }
                                409 if description.contains("Consumer Deleted") => {
                                    return Some(Err(NatsError::JetStream(format!("409 {description}"))));
                                }
                                _ => {
                                    self.unplaced += unfilled;
                                    self.retry_at.get_or_insert(Instant::now() + PULL_RETRY);
                                    let notice = match status {
                                        0 => description,
                                        status => format!("{status} {description}"),
                                    };
                                    return Some(Ok(Incoming::Notice(notice)));
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    async fn close(self) {
        // Dropping the subscriptions unsubscribes them; what the server
        // still sends to them comes again after AckWait.
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn headers(pairs: &[(&str, &str)]) -> async_nats::HeaderMap {
        let mut headers = async_nats::HeaderMap::new();
        for (name, value) in pairs {
            headers.append(*name, *value);
        }
        headers
    }

    fn read(pairs: &[(&str, &str)]) -> Option<(String, Option<String>)> {
        trace_context(Some(&headers(pairs))).map(|trace| {
            (
                trace.traceparent().to_owned(),
                trace.tracestate().map(str::to_owned),
            )
        })
    }

    #[test]
    fn the_trace_headers_of_a_message_are_its_delivery_s_trace_context() {
        assert_eq!(
            read(&[
                ("Nats-Msg-Id", "e1"),
                ("traceparent", PARENT),
                ("tracestate", "a=1"),
                ("tracestate", "b=2"),
            ]),
            Some((PARENT.into(), Some("a=1,b=2".into())))
        );
        assert_eq!(
            read(&[("Traceparent", PARENT)]),
            Some((PARENT.into(), None))
        );
        assert_eq!(trace_context(None), None);
        assert_eq!(read(&[("Nats-Msg-Id", "e1")]), None);
        assert_eq!(read(&[("tracestate", "a=1")]), None);
        assert_eq!(read(&[("traceparent", "00-junk")]), None);
        assert_eq!(
            read(&[("traceparent", PARENT), ("traceparent", PARENT)]),
            None,
            "two traceparents are no context"
        );
    }
}
