//! The WebSocket delivery stream of one subscription.

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{Connector, MaybeTlsStream, WebSocketStream};

use super::LeaseProof;
use super::OrbitError;
use crate::delivery::{Delivery, DeliveryId};

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
}

/// An open delivery stream.
pub struct DeliveryStream {
    socket: WebSocketStream<MaybeTlsStream<TcpStream>>,
}

impl std::fmt::Debug for DeliveryStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeliveryStream").finish_non_exhaustive()
    }
}

impl DeliveryStream {
    /// Opens the stream at `url` (`ws://` or `wss://`); a `wss://` URL is
    /// secured with `connector`'s TLS configuration.
    pub(super) async fn connect(
        url: &str,
        authorization: http::HeaderValue,
        connector: Connector,
    ) -> Result<Self, OrbitError> {
        let mut request = url
            .into_client_request()
            .map_err(|_| OrbitError::Config("invalid stream URL"))?;
        request
            .headers_mut()
            .insert(http::header::AUTHORIZATION, authorization);
        let connecting =
            tokio_tungstenite::connect_async_tls_with_config(request, None, false, Some(connector));
        match connecting.await {
            Ok((socket, _response)) => Ok(Self { socket }),
            Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
                let body = response.body().as_deref().unwrap_or_default();
                Err(super::error::status_error(response.status(), body))
            }
            Err(e) => Err(OrbitError::transport(e)),
        }
    }

    /// Grants the server `n` more deliveries (flow control).
    pub async fn grant(&mut self, n: u32) -> Result<(), OrbitError> {
        if n == 0 {
            return Ok(());
        }
        let message = serde_json::json!({ "type": "credit", "n": n }).to_string();
        self.socket
            .send(Message::text(message))
            .await
            .map_err(OrbitError::transport)
    }

    /// The next message, or `None` once the stream has closed. Pings are
    /// answered while reading and reported as [`StreamMessage::Keepalive`].
    pub async fn next_message(&mut self) -> Option<Result<StreamMessage, OrbitError>> {
        loop {
            let frame = match self.socket.next().await? {
                Ok(frame) => frame,
                Err(e) => return Some(Err(OrbitError::transport(e))),
            };
            match frame {
                Message::Text(text) => return Some(parse(text.as_str())),
                Message::Close(_) => return None,
                // Ping/Pong are handled by tungstenite; binary frames are not
                // part of the protocol.
                Message::Binary(_) => return Some(Err(OrbitError::Protocol("binary frame"))),
                Message::Ping(_) | Message::Pong(_) => return Some(Ok(StreamMessage::Keepalive)),
                Message::Frame(_) => continue,
            }
        }
    }

    /// Closes the stream politely. Leases held are not released: they run
    /// out on the server as the protocol says.
    pub async fn close(mut self) {
        let _ = self.socket.close(None).await;
    }
}

fn parse(text: &str) -> Result<StreamMessage, OrbitError> {
    let wire: WireMessage<'_> =
        serde_json::from_str(text).map_err(|_| OrbitError::Protocol("malformed stream message"))?;
    match wire.kind {
        "delivery" => {
            let (Some(id), Some(attempt), Some(proof), Some(event)) =
                (wire.delivery_id, wire.attempt, wire.lease_proof, wire.event)
            else {
                return Err(OrbitError::Protocol("incomplete delivery message"));
            };
            Ok(StreamMessage::Delivery(
                Delivery::new(
                    DeliveryId::new(id),
                    Bytes::copy_from_slice(event.get().as_bytes()),
                )
                .with_attempt(attempt),
                LeaseProof::new(proof),
            ))
        }
        "error" => Ok(StreamMessage::Error {
            code: wire.code.unwrap_or_else(|| "unknown".to_owned()),
        }),
        _ => Err(OrbitError::Protocol("unknown stream message type")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delivery_message_keeps_the_event_bytes_verbatim() {
        let text = r#"{"type":"delivery","delivery_id":"d","subscription_id":"s","attempt":2,"lease_proof":"p","lease_expires_at":"x","event":{"b": 1.10 ,"a":123456789012345678901234567890,"a":1}}"#;
        let StreamMessage::Delivery(d, proof) = parse(text).unwrap() else {
            panic!("not a delivery")
        };
        assert_eq!(d.id().as_str(), "d");
        assert_eq!(d.attempt(), Some(2));
        assert_eq!(proof.expose(), "p");
        assert_eq!(
            &d.body()[..],
            br#"{"b": 1.10 ,"a":123456789012345678901234567890,"a":1}"#
        );
    }

    #[test]
    fn an_incomplete_delivery_is_a_protocol_error() {
        assert!(matches!(
            parse(r#"{"type":"delivery","delivery_id":"d"}"#),
            Err(OrbitError::Protocol(_))
        ));
    }

    #[test]
    fn an_error_message_carries_its_code() {
        assert!(matches!(
            parse(r#"{"type":"error","code":"keepalive_timeout","message":"m"}"#),
            Ok(StreamMessage::Error { code }) if code == "keepalive_timeout"
        ));
    }
}
