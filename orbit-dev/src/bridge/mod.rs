//! The events of one subscription, published to a broker as a platform's
//! bridge publishes them: each event's bytes unchanged, under the event id
//! (NATS JetStream's `Nats-Msg-Id`, RabbitMQ's `message_id`). A delivery is
//! acknowledged on Orbit only after the broker confirmed the publish; until
//! then it is redelivered, and published again.
//!
//! A delivery's trace context (protocol §10.3) becomes the message's
//! `traceparent` and `tracestate` headers, as W3C propagation over a
//! messaging system carries it: beside the event, whose bytes stay as they
//! are.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

use crate::client::{self, BaseUrl};
use crate::trace::TraceContext;

#[cfg(feature = "nats")]
mod nats;
#[cfg(feature = "rabbitmq")]
mod rabbitmq;

#[cfg(feature = "nats")]
pub use self::nats::shown_url;
#[cfg(feature = "rabbitmq")]
pub use self::rabbitmq::AmqpAddress;

/// Deliveries held at once: what the stream may send before the bridge
/// has published and acknowledged.
const CREDIT: u32 = 64;

/// Pause before opening the stream again after it ended or failed.
const REOPEN_PAUSE: Duration = Duration::from_secs(1);

/// Where the bridge reads and where it publishes.
#[derive(Debug)]
pub struct Bridge {
    /// Orbit's base URL (`http://`).
    pub orbit: BaseUrl,
    /// A token with `events:consume` on the subscription's queue. Secret.
    pub token: String,
    /// The subscription whose deliveries are published.
    pub subscription: String,
    /// Where the events go.
    pub to: Destination,
}

/// The broker a bridge publishes to.
#[derive(Debug)]
pub enum Destination {
    /// NATS JetStream: the server(s), comma-separated (a login in them is
    /// secret), and the subject, `orbit.results.<queue_id>` by default.
    #[cfg(feature = "nats")]
    Nats { url: String, subject: String },
    /// RabbitMQ: the server, and the queue published to through the
    /// default exchange, `orbit.results.<queue_id>` by default.
    #[cfg(feature = "rabbitmq")]
    Rabbitmq { url: AmqpAddress, queue: String },
}

/// One event to publish, under its id.
struct Outgoing<'a> {
    /// The event id, or the delivery id of an event without a readable
    /// one: the same on every attempt.
    id: String,
    delivery: &'a str,
    event: &'a str,
    trace: Option<TraceContext>,
}

/// A connected [`Destination`].
enum Outlet {
    #[cfg(feature = "nats")]
    Nats(nats::Outlet),
    #[cfg(feature = "rabbitmq")]
    Rabbitmq(rabbitmq::Outlet),
}

impl Outlet {
    async fn connect(to: &Destination) -> Result<Self, String> {
        match to {
            #[cfg(feature = "nats")]
            Destination::Nats { url, subject } => {
                Ok(Outlet::Nats(nats::Outlet::connect(url, subject).await?))
            }
            #[cfg(feature = "rabbitmq")]
            Destination::Rabbitmq { url, queue } => Ok(Outlet::Rabbitmq(
                rabbitmq::Outlet::connect(url, queue).await?,
            )),
        }
    }

    async fn publish(&mut self, out: &Outgoing<'_>) -> Result<(), String> {
        match self {
            #[cfg(feature = "nats")]
            Outlet::Nats(nats) => nats.publish(out).await,
            #[cfg(feature = "rabbitmq")]
            Outlet::Rabbitmq(rabbitmq) => rabbitmq.publish(out).await,
        }
    }
}

#[derive(Deserialize)]
struct WireMessage<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    delivery_id: Option<&'a str>,
    lease_proof: Option<&'a str>,
    #[serde(borrow)]
    event: Option<&'a RawValue>,
    code: Option<&'a str>,
    /// Any JSON, so that a misshapen context never keeps a delivery from
    /// being published.
    #[serde(borrow)]
    trace_context: Option<&'a RawValue>,
}

/// The trace context of a delivery message's `trace_context`, when it has a
/// `traceparent` of the right shape; anything else publishes no context.
fn trace_context(raw: Option<&RawValue>) -> Option<TraceContext> {
    let value: serde_json::Value = serde_json::from_str(raw?.get()).ok()?;
    let traceparent = value.get("traceparent")?.as_str()?;
    let tracestate = value.get("tracestate").and_then(serde_json::Value::as_str);
    TraceContext::new(traceparent, tracestate)
}

#[derive(Deserialize)]
struct EventId {
    id: String,
}

/// `%XX` in a URL's user information, decoded.
fn percent_decoded(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let digit = |at: usize| bytes.get(at).and_then(|&b| (b as char).to_digit(16));
        match (bytes[i], digit(i + 1), digit(i + 2)) {
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Publishes until `shutdown` resolves; fails only when the broker cannot
/// be reached at the start. A stream that ends or fails is opened again.
pub async fn run(
    bridge: Bridge,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), String> {
    let mut outlet = Outlet::connect(&bridge.to).await?;
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => return Ok(()),
            ended = session(&bridge, &mut outlet) => {
                if let Err(e) = ended {
                    tracing::warn!(error = %e, "bridge stream ended; opening it again");
                }
            }
        }
        tokio::select! {
            _ = &mut shutdown => return Ok(()),
            _ = tokio::time::sleep(REOPEN_PAUSE) => {}
        }
    }
}

/// One delivery stream: publish, then acknowledge, one delivery at a time.
async fn session(bridge: &Bridge, outlet: &mut Outlet) -> Result<(), String> {
    let authorization = format!("Bearer {}", bridge.token);
    let url = bridge
        .orbit
        .ws_url(&format!("/v1/subscriptions/{}/stream", bridge.subscription));
    let mut request = url
        .into_client_request()
        .map_err(|e| format!("stream URL: {e}"))?;
    request.headers_mut().insert(
        "authorization",
        authorization
            .parse()
            .map_err(|_| "the token is not a valid header value".to_string())?,
    );
    let (mut socket, _) = tokio_tungstenite::connect_async(request)
        .await
        .map_err(|e| format!("cannot open the stream: {e}"))?;
    let credit = |n: u32| Message::text(serde_json::json!({"type": "credit", "n": n}).to_string());
    socket
        .send(credit(CREDIT))
        .await
        .map_err(|e| e.to_string())?;
    while let Some(frame) = socket.next().await {
        let text = match frame.map_err(|e| e.to_string())? {
            Message::Text(text) => text,
            Message::Close(_) => return Ok(()),
            _ => continue,
        };
        let Ok(message) = serde_json::from_str::<WireMessage<'_>>(text.as_str()) else {
            // An event that is not JSON makes its message unreadable: it is
            // not published, and expires on Orbit.
            tracing::warn!(
                bytes = text.len(),
                "a stream message that cannot be read; skipped"
            );
            continue;
        };
        match (
            message.kind,
            message.delivery_id,
            message.lease_proof,
            message.event,
        ) {
            ("delivery", Some(delivery), Some(proof), Some(event)) => {
                let event = event.get();
                // An event without a readable id still gets a stable one.
                let id = serde_json::from_str::<EventId>(event)
                    .map(|e| e.id)
                    .unwrap_or_else(|_| delivery.to_owned());
                let out = Outgoing {
                    id,
                    delivery,
                    event,
                    trace: trace_context(message.trace_context),
                };
                outlet.publish(&out).await?;
                acknowledge(bridge, &authorization, delivery, proof).await?;
                socket.send(credit(1)).await.map_err(|e| e.to_string())?;
            }
            ("error", ..) => {
                return Err(format!(
                    "Orbit closed the stream: {}",
                    message.code.unwrap_or("unknown")
                ))
            }
            _ => tracing::warn!(bytes = text.len(), "an incomplete stream message; skipped"),
        }
    }
    Ok(())
}

async fn acknowledge(
    bridge: &Bridge,
    authorization: &str,
    delivery: &str,
    proof: &str,
) -> Result<(), String> {
    let body = serde_json::json!({ "lease_proof": proof }).to_string();
    let answer = client::send(
        &bridge.orbit,
        "POST",
        &format!("/v1/deliveries/{delivery}/ack"),
        &[("Authorization", authorization)],
        Some(body.as_bytes()),
    )
    .await
    .map_err(|e| format!("cannot acknowledge delivery {delivery}: {e}"))?;
    match answer.status {
        200 => Ok(()),
        // The lease passed to a newer attempt: that one publishes again,
        // and the stream drops it as a duplicate.
        409 => {
            tracing::warn!(delivery = %delivery, "lease lost before the ACK; it comes again");
            Ok(())
        }
        status => Err(format!(
            "Orbit answered {status} {} to the ACK of delivery {delivery}",
            answer.error_code().unwrap_or_default()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn read(message: &str) -> Option<TraceContext> {
        let wire: WireMessage<'_> = serde_json::from_str(message).expect("readable");
        trace_context(wire.trace_context)
    }

    #[test]
    fn a_delivery_s_trace_context_is_taken_when_it_has_the_shape_of_one_and_never_stops_it() {
        let message = |trace: &str| {
            format!(
                r#"{{"type":"delivery","delivery_id":"d","trace_context":{trace},"event":{{}}}}"#
            )
        };
        assert_eq!(
            read(&message(&format!(
                r#"{{"traceparent":"{PARENT}","tracestate":"a=1"}}"#
            ))),
            TraceContext::new(PARENT, Some("a=1"))
        );
        assert_eq!(
            read(&message(&format!(
                r#"{{"traceparent":"{PARENT}","tracestate":7}}"#
            ))),
            TraceContext::new(PARENT, None)
        );
        for trace in [
            "null",
            "7",
            "{}",
            r#"{"traceparent":"00-junk"}"#,
            r#"{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\n"}"#,
        ] {
            assert_eq!(read(&message(trace)), None, "{trace}");
        }
        assert_eq!(read(r#"{"type":"delivery","event":{}}"#), None);
    }
}
