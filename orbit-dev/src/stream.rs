//! The delivery stream: a WebSocket per consumer, with credit-based flow
//! control.
//!
//! The client grants credit with `{"type":"credit","n":k}`; each delivery the
//! server sends spends one. Several sockets on one subscription share its
//! deliveries; the state lock makes sure a delivery is leased to one of them
//! at a time.

use std::time::Duration;

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::State as Extract;
use axum::http::HeaderMap;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::time::{interval_at, Instant, MissedTickBehavior};

use crate::auth::Scope;
use crate::deliveries::Leased;
use crate::error::ApiError;
use crate::ids::Id;
use crate::state::{App, RawId};

/// Most credit one message may grant, and most unspent credit a socket may
/// hold.
pub const MAX_CREDIT: u64 = 1000;
/// Largest message a client may send.
pub const MAX_CLIENT_MESSAGE: usize = 64 * 1024;
/// A socket from which nothing arrived for this many ping intervals is closed.
pub const IDLE_PINGS: u32 = 4;

/// Close code for protocol errors and keepalive timeouts (policy violation).
const CLOSE_POLICY: u16 = 1008;
/// Close code when the server stops (going away).
const CLOSE_GOING_AWAY: u16 = 1001;

/// `GET /v1/subscriptions/{id}/stream`
pub(crate) async fn open(
    Extract(app): Extract<App>,
    headers: HeaderMap,
    id: RawId,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let grant = app.authenticate(&headers)?;
    grant.require(Scope::EventsConsume)?;
    let id = id.parse()?;
    let wake = app.lock().subscription_for(&grant, id)?.wake.subscribe();
    let upgrade = upgrade.map_err(|_| ApiError::websocket_upgrade_required())?;
    let shutdown = app.shutdown.subscribe();
    Ok(upgrade
        .max_message_size(MAX_CLIENT_MESSAGE)
        .on_upgrade(move |socket| async move {
            tracing::debug!(subscription_id = %id, "stream opened");
            Consumer {
                app,
                subscription_id: id,
                socket,
                wake,
                shutdown,
                credit: 0,
            }
            .run()
            .await;
            tracing::debug!(subscription_id = %id, "stream closed");
        }))
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
enum ClientMessage {
    Credit { n: u64 },
}

#[derive(Serialize)]
struct ErrorMessage<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    code: &'a str,
    message: &'a str,
}

/// Why the server closes a socket.
struct Closing {
    code: u16,
    reason: &'static str,
    message: &'static str,
}

impl Closing {
    fn protocol(reason: &'static str, message: &'static str) -> Self {
        Closing {
            code: CLOSE_POLICY,
            reason,
            message,
        }
    }
}

struct Consumer {
    app: App,
    subscription_id: Id,
    socket: WebSocket,
    wake: watch::Receiver<u64>,
    shutdown: watch::Receiver<bool>,
    credit: u64,
}

impl Consumer {
    async fn run(mut self) {
        let ping_every = self.app.config.ping_interval;
        let mut ping = interval_at(Instant::now() + ping_every, ping_every);
        ping.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let idle_limit = ping_every * IDLE_PINGS;
        let mut last_heard = Instant::now();
        loop {
            if *self.shutdown.borrow() {
                self.close(Closing {
                    code: CLOSE_GOING_AWAY,
                    reason: "server_shutting_down",
                    message: "",
                })
                .await;
                return;
            }
            if self.credit > 0 && !self.dispatch().await {
                return;
            }
            let has_credit = self.credit > 0;
            tokio::select! {
                changed = self.wake.changed(), if has_credit => {
                    if changed.is_err() {
                        return;
                    }
                }
                _ = self.shutdown.changed() => {}
                _ = ping.tick() => {
                    if last_heard.elapsed() >= idle_limit {
                        self.close(Closing::protocol(
                            "keepalive_timeout",
                            "nothing was received from the client for too long",
                        ))
                        .await;
                        return;
                    }
                    if self.socket.send(Message::Ping(Default::default())).await.is_err() {
                        return;
                    }
                }
                received = self.socket.recv() => {
                    let Some(Ok(message)) = received else {
                        return;
                    };
                    if let Message::Close(_) = message {
                        // The WebSocket library has already answered it.
                        return;
                    }
                    last_heard = Instant::now();
                    if let Err(closing) = self.receive(message) {
                        self.close(closing).await;
                        return;
                    }
                }
            }
        }
    }

    /// Handles one client frame; `Err` closes the socket.
    fn receive(&mut self, message: Message) -> Result<(), Closing> {
        let text = match message {
            Message::Text(text) => text,
            Message::Ping(_) | Message::Pong(_) | Message::Close(_) => return Ok(()),
            Message::Binary(_) => {
                return Err(Closing::protocol(
                    "invalid_message",
                    "binary frames are not part of the protocol",
                ))
            }
        };
        let n = parse_credit(text.as_str())?;
        if self.credit + n > MAX_CREDIT {
            return Err(Closing::protocol(
                "credit_limit_exceeded",
                "a socket may hold at most 1000 unspent credits",
            ));
        }
        self.credit += n;
        Ok(())
    }

    /// Leases and sends up to `credit` deliveries. `false` when the socket is
    /// gone (its leases then run out normally).
    async fn dispatch(&mut self) -> bool {
        // Mark the current wake-up as seen before looking, so that any
        // delivery becoming leasable after the look wakes us again.
        self.wake.borrow_and_update();
        let batch: Vec<String> = {
            let mut state = self.app.lock();
            let now = Instant::now();
            let mut batch = Vec::new();
            while (batch.len() as u64) < self.credit {
                match state.lease_next(self.subscription_id, now) {
                    Some(leased) => batch.push(delivery_message(&leased)),
                    None => break,
                }
            }
            batch
        };
        self.credit -= batch.len() as u64;
        for text in batch {
            if self.socket.send(Message::Text(text.into())).await.is_err() {
                return false;
            }
        }
        true
    }

    async fn close(&mut self, closing: Closing) {
        if !closing.message.is_empty() {
            let error = ErrorMessage {
                kind: "error",
                code: closing.reason,
                message: closing.message,
            };
            if let Ok(text) = serde_json::to_string(&error) {
                let _ = self.socket.send(Message::Text(text.into())).await;
            }
        }
        let frame = CloseFrame {
            code: closing.code,
            reason: closing.reason.into(),
        };
        let _ = self.socket.send(Message::Close(Some(frame))).await;
        // Give the client a moment to answer the close handshake.
        let _ = tokio::time::timeout(Duration::from_secs(1), async {
            while let Some(Ok(_)) = self.socket.recv().await {}
        })
        .await;
    }
}

/// The credit a client message grants, or why the message is refused.
fn parse_credit(text: &str) -> Result<u64, Closing> {
    let value: serde_json::Value = serde_json::from_str(text)
        .map_err(|_| Closing::protocol("invalid_message", "the message is not valid JSON"))?;
    let known_type = value
        .get("type")
        .and_then(|t| t.as_str())
        .is_some_and(|t| t == "credit");
    if !known_type {
        return Err(Closing::protocol(
            "unknown_message_type",
            "the only message a client sends is {\"type\":\"credit\",\"n\":k}",
        ));
    }
    let invalid_n = || Closing::protocol("invalid_message", "n must be an integer from 1 to 1000");
    let ClientMessage::Credit { n } = serde_json::from_value(value).map_err(|_| invalid_n())?;
    if !(1..=MAX_CREDIT).contains(&n) {
        return Err(invalid_n());
    }
    Ok(n)
}

/// The delivery message, with the event's bytes spliced in unchanged.
fn delivery_message(leased: &Leased) -> String {
    // The trace context goes before the event: a consumer that must read
    // the fields around an event that is not JSON can read those before it
    // as JSON, but cannot tell one after it from the event's bytes.
    let trace = leased
        .event
        .trace
        .as_ref()
        .and_then(|trace| serde_json::to_string(trace).ok())
        .map(|json| format!(r#""trace_context":{json},"#))
        .unwrap_or_default();
    // Every other interpolated value but the event is hex, digits or a
    // timestamp: none needs JSON escaping.
    format!(
        concat!(
            r#"{{"type":"delivery","delivery_id":"{}","subscription_id":"{}","attempt":{},"#,
            r#""lease_proof":"{}","lease_expires_at":"{}",{}"event":{}}}"#
        ),
        leased.delivery_id,
        leased.subscription_id,
        leased.attempt,
        leased.lease_proof,
        leased.lease_expires_at,
        trace,
        leased.event.raw,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(text: &str) -> &'static str {
        parse_credit(text)
            .err()
            .map(|c| c.reason)
            .unwrap_or("accepted")
    }

    #[test]
    fn only_well_formed_credit_messages_grant_credit() {
        assert_eq!(parse_credit(r#"{"type":"credit","n":1}"#).ok(), Some(1));
        assert_eq!(
            parse_credit(r#"{"n":1000,"type":"credit"}"#).ok(),
            Some(1000)
        );
        assert_eq!(refusal(r#"{"type":"credit","n":0}"#), "invalid_message");
        assert_eq!(refusal(r#"{"type":"credit","n":1001}"#), "invalid_message");
        assert_eq!(refusal(r#"{"type":"credit","n":1.5}"#), "invalid_message");
        assert_eq!(refusal(r#"{"type":"credit","n":"1"}"#), "invalid_message");
        assert_eq!(
            refusal(r#"{"type":"credit","n":1,"x":0}"#),
            "invalid_message"
        );
        assert_eq!(refusal(r#"{"type":"credit"}"#), "invalid_message");
        assert_eq!(refusal(r#"{"type":"ack","n":1}"#), "unknown_message_type");
        assert_eq!(refusal(r#"{"n":1}"#), "unknown_message_type");
        assert_eq!(refusal("credit 1"), "invalid_message");
    }
}
