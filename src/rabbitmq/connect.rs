//! One connection and one channel to RabbitMQ, and what the server said
//! when it closed either.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use amqprs::callbacks::{ChannelCallback, ConnectionCallback};
use amqprs::channel::Channel;
use amqprs::connection::{Connection, OpenConnectionArguments};
use amqprs::tls::TlsAdaptor;
use amqprs::{Ack, BasicProperties, Cancel, Close, CloseChannel, Nack, Return};

use super::{AmqpUrl, RabbitError};

/// The last words of the server on a channel or a connection it closed
/// (`406 PRECONDITION_FAILED - …`): the client library reports a closed
/// channel without them.
#[derive(Debug, Clone, Default)]
pub(super) struct LastWords(Arc<Mutex<Option<(u16, String)>>>);

impl LastWords {
    pub(super) fn said(&self, code: u16, text: &str) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some((code, text.to_owned()));
    }

    /// What the server said, if it closed something.
    pub(super) fn heard(&self) -> Option<(u16, String)> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// An open connection and one channel on it.
pub(super) struct Link {
    pub(super) connection: Connection,
    pub(super) channel: Channel,
    pub(super) last_words: LastWords,
}

impl Link {
    /// Whether the channel can still be used.
    pub(super) fn is_open(&self) -> bool {
        self.connection.is_open() && self.channel.is_open()
    }

    /// An error of a call on this link: the server's words when it closed
    /// the channel or the connection, the client's otherwise.
    pub(super) fn error(&self, what: &str, e: &amqprs::error::Error) -> RabbitError {
        described(&self.last_words, self.is_open(), what, e)
    }

    /// Closes the connection (and its channel), also while others still
    /// hold this link; what was not acknowledged on it goes back to the
    /// queue.
    pub(super) async fn close(&self) {
        if self.connection.is_open() {
            let _ = self.connection.clone().close().await;
        }
    }

    /// One more channel on the connection, with its own last words.
    pub(super) async fn another_channel(
        &self,
        timeout: Duration,
    ) -> Result<(Channel, LastWords), RabbitError> {
        let words = LastWords::default();
        let opened = async {
            let channel = self.connection.open_channel(None).await?;
            channel.register_callback(Words(words.clone())).await?;
            Ok::<_, amqprs::error::Error>(channel)
        };
        match tokio::time::timeout(timeout, opened).await {
            Ok(Ok(channel)) => Ok((channel, words)),
            Ok(Err(e)) => Err(self.error("opening a channel", &e)),
            Err(_) => Err(RabbitError::Disconnected(format!(
                "no channel opened within {timeout:?}"
            ))),
        }
    }
}

/// An error of a call: the server's `words` when it closed the channel or
/// the connection, the client's otherwise.
pub(super) fn described(
    words: &LastWords,
    open: bool,
    what: &str,
    e: &amqprs::error::Error,
) -> RabbitError {
    match words.heard() {
        Some((403, text)) => RabbitError::Forbidden {
            what: what.to_owned(),
            reason: text,
        },
        Some((code, text)) => RabbitError::Server(format!("{what}: {code} {text}")),
        None if !open => RabbitError::Disconnected(format!("{what}: {e}")),
        None => RabbitError::Server(format!("{what}: {e}")),
    }
}

/// Opens a connection and a channel within `timeout`, naming the
/// connection after the receiver so that an operator finds it in
/// `rabbitmqctl list_connections`.
pub(super) async fn open(
    url: &AmqpUrl,
    name: &str,
    timeout: Duration,
) -> Result<Link, RabbitError> {
    let mut args = OpenConnectionArguments::new(&url.host, url.port, &url.user, &url.password);
    args.virtual_host(&url.vhost)
        .connection_name(name)
        // The server's default (60 s) notices a dead peer in minutes.
        .heartbeat(10);
    if url.tls {
        let connector = tokio_rustls::TlsConnector::from(tls_config());
        args.tls_adaptor(TlsAdaptor::new(connector, url.host.clone()));
    }
    let unreachable = |reason: String| RabbitError::Unreachable {
        url: url.shown(),
        reason,
    };
    let connection = match tokio::time::timeout(timeout, Connection::open(&args)).await {
        Err(_) => return Err(unreachable(format!("no answer within {timeout:?}"))),
        Ok(Err(e)) => return Err(connection_error(url, &e)),
        Ok(Ok(connection)) => connection,
    };
    let last_words = LastWords::default();
    let opened = async {
        connection
            .register_callback(Words(last_words.clone()))
            .await?;
        let channel = connection.open_channel(None).await?;
        channel.register_callback(Words(last_words.clone())).await?;
        Ok::<_, amqprs::error::Error>(channel)
    };
    match tokio::time::timeout(timeout, opened).await {
        Ok(Ok(channel)) => Ok(Link {
            connection,
            channel,
            last_words,
        }),
        Ok(Err(e)) => Err(unreachable(format!("opening a channel: {e}"))),
        Err(_) => Err(unreachable(format!("no channel opened within {timeout:?}"))),
    }
}

/// TLS with the ring provider and Mozilla's roots (webpki-roots), built
/// once; no ALPN, which AMQP does not negotiate.
fn tls_config() -> Arc<rustls::ClientConfig> {
    static CONFIG: std::sync::OnceLock<Arc<rustls::ClientConfig>> = std::sync::OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let roots = rustls::RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
            };
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .expect("the ring provider supports TLS 1.2 and 1.3")
                .with_root_certificates(roots)
                .with_no_client_auth();
            Arc::new(config)
        })
        .clone()
}

/// A connection that did not open: a refusal (login, vhost, TLS) is
/// configuration, the rest may pass.
fn connection_error(url: &AmqpUrl, e: &amqprs::error::Error) -> RabbitError {
    use amqprs::error::Error;
    let text = e.to_string();
    let refused = |reason: String| RabbitError::Refused {
        url: url.shown(),
        reason,
    };
    match e {
        Error::UriError(_) => refused(text),
        // The server closes a connection whose login or vhost it refuses
        // during the handshake.
        Error::ConnectionOpenError(_)
            if text.contains("ACCESS_REFUSED")
                || text.contains("NOT_ALLOWED")
                || text.contains("access to vhost") =>
        {
            refused(text)
        }
        Error::NetworkError(_) if text.contains("certificate") || text.contains("tls") => {
            refused(format!("TLS: {text}"))
        }
        // A server that refuses the login or the vhost of a client that
        // did not ask to be told (authentication_failure_close) ends the
        // connection in the middle of the handshake, without a word.
        Error::NetworkError(_)
            if text.contains("reset") || text.contains("peer") || text.contains("eof") =>
        {
            refused(format!(
                "{text}: the server ended the handshake, as RabbitMQ does when it refuses the user, the password or the vhost; check AMQP_URL"
            ))
        }
        _ => RabbitError::Unreachable {
            url: url.shown(),
            reason: text,
        },
    }
}

/// Keeps what the server says when it closes; answers every other
/// callback as the client library would without one.
struct Words(LastWords);

#[async_trait::async_trait]
impl ConnectionCallback for Words {
    async fn close(&mut self, _: &Connection, close: Close) -> Result<(), amqprs::error::Error> {
        self.0.said(close.reply_code(), close.reply_text());
        Ok(())
    }
    async fn blocked(&mut self, _: &Connection, reason: String) {
        tracing::warn!(%reason, "RabbitMQ blocked this connection (a resource alarm)");
    }
    async fn unblocked(&mut self, _: &Connection) {
        tracing::info!("RabbitMQ unblocked this connection");
    }
    async fn secret_updated(&mut self, _: &Connection) {}
}

#[async_trait::async_trait]
impl ChannelCallback for Words {
    async fn close(
        &mut self,
        _: &Channel,
        close: CloseChannel,
    ) -> Result<(), amqprs::error::Error> {
        self.0.said(close.reply_code(), close.reply_text());
        Ok(())
    }
    async fn cancel(&mut self, _: &Channel, _: Cancel) -> Result<(), amqprs::error::Error> {
        // The queue was deleted or its leader moved: the stream ends, and
        // the consumer opens it again.
        Ok(())
    }
    async fn flow(&mut self, _: &Channel, active: bool) -> Result<bool, amqprs::error::Error> {
        Ok(active)
    }
    async fn publish_ack(&mut self, _: &Channel, _: Ack) {}
    async fn publish_nack(&mut self, _: &Channel, _: Nack) {}
    async fn publish_return(&mut self, _: &Channel, _: Return, _: BasicProperties, _: Vec<u8>) {}
}
