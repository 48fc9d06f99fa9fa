//! The connection to NATS: login, TLS, and the signal of a lost connection.

use std::time::Duration;

use async_nats::{Client, ConnectErrorKind, ConnectOptions, Event};
use tokio::sync::watch;

use super::{NatsAuth, NatsError, NatsServers, UrlLogin, IDLE_KEEPALIVE};
use crate::failure::chain;

/// A client of `servers`, logged in as they say (a token, a credentials
/// file, or the login their URL carries; a private CA; TLS required by
/// `tls://` or [`NatsServers::require_tls`]), every request limited to
/// `timeout`, made as the source makes its own: what a program that
/// publishes to JetStream needs (the relay's `JetStream` target). One
/// attempt: a server that does not answer is [`NatsError::Unreachable`],
/// worth trying again; a refused login or certificate is
/// [`NatsError::Refused`], which is not. Once connected, the client
/// reconnects by itself, to any server of the list.
pub async fn connect(servers: &NatsServers, timeout: Duration) -> Result<Client, NatsError> {
    connect_client(servers, timeout)
        .await
        .map(|(client, _)| client)
}

pub(super) async fn connect_client(
    settings: &NatsServers,
    timeout: Duration,
) -> Result<(Client, watch::Receiver<u64>), NatsError> {
    let (disconnected, disconnects) = watch::channel(0u64);
    let mut options = ConnectOptions::new()
        .name("result-inbox receiver")
        .connection_timeout(timeout)
        .request_timeout(Some(timeout))
        .ping_interval(IDLE_KEEPALIVE)
        .require_tls(settings.require_tls || settings.any_tls_only())
        .event_callback(move |event| {
            if matches!(event, Event::Disconnected) {
                disconnected.send_modify(|n| *n += 1);
            }
            async {}
        });
    if let Some(ca) = &settings.ca_file {
        options = options.add_root_certificates(ca.clone());
    }
    match &settings.auth {
        // The client does not send the login an address carries; given
        // here, it goes to whichever server of the list answers.
        NatsAuth::None => match settings.url_login() {
            Some(UrlLogin::UserPassword { user, password }) => {
                options = options.user_and_password(user, password.0);
            }
            Some(UrlLogin::Token(token)) => options = options.token(token.0),
            None => {}
        },
        NatsAuth::Token(token) => options = options.token(token.0.clone()),
        NatsAuth::CredsFile(path) => {
            options = options
                .credentials_file(path)
                .await
                .map_err(|e| NatsError::CredsFile {
                    path: path.clone(),
                    reason: e.to_string(),
                })?;
        }
    }
    let url = settings.shown_url();
    // Every server of the list, so that the client finds another node when
    // the one it talks to is gone (and those the cluster tells it of).
    let servers = settings.server_addrs()?;
    let client = options.connect(servers).await.map_err(|e| {
        let reason = e.to_string();
        match e.kind() {
            // A certificate the client does not trust arrives as an I/O
            // error around rustls' own: waiting would not mend it.
            _ if is_tls_refusal(&e) => NatsError::Refused {
                url,
                reason: format!("TLS: {}", chain_text(&e)),
            },
            ConnectErrorKind::Io | ConnectErrorKind::TimedOut | ConnectErrorKind::Dns => {
                NatsError::Unreachable { url, reason }
            }
            _ => NatsError::Refused { url, reason },
        }
    })?;
    // The client's own lines say only the port and come at info from a
    // crate the default filter keeps at warn: this one is the receiver's.
    let server = client.server_info();
    tracing::info!(url = %settings.shown_url(), server = %server.server_name, server_version = %server.version, "connected to NATS");
    Ok((client, disconnects))
}

/// Whether `e` or one of its sources is a TLS failure of rustls (a
/// certificate not trusted, a name that does not match, no common
/// protocol).
fn is_tls_refusal(e: &(dyn std::error::Error + 'static)) -> bool {
    chain(e).any(|error| {
        error.is::<rustls::Error>()
            || error
                .downcast_ref::<std::io::Error>()
                .and_then(std::io::Error::get_ref)
                .is_some_and(|inner| inner.is::<rustls::Error>())
    })
}

/// `e` and its sources, as one line.
fn chain_text(e: &(dyn std::error::Error + 'static)) -> String {
    chain(e)
        .map(|error| error.to_string())
        .collect::<Vec<_>>()
        .join(": ")
}
