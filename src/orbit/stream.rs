//! The WebSocket delivery stream of one subscription.

use futures::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{Connector, MaybeTlsStream, WebSocketStream};

use super::{OrbitError, StreamMessage};

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
            return Some(match self.socket.next().await? {
                Ok(Message::Text(text)) => StreamMessage::parse(text.as_str()),
                Ok(Message::Close(_)) => return None,
                // Ping/Pong are handled by tungstenite; binary frames are not
                // part of the protocol.
                Ok(Message::Binary(_)) => Err(OrbitError::Protocol("binary frame")),
                Ok(Message::Ping(_) | Message::Pong(_)) => Ok(StreamMessage::Keepalive),
                Ok(Message::Frame(_)) => continue,
                Err(e) => Err(OrbitError::transport(e)),
            });
        }
    }

    /// Closes the stream politely. Leases held are not released: they run
    /// out on the server as the protocol says.
    pub async fn close(mut self) {
        let _ = self.socket.close(None).await;
    }
}
