//! Publishing to NATS JetStream: each event on the queue's subject, with
//! the event id as `Nats-Msg-Id`, so that the stream's duplicate window
//! drops what a restarted bridge publishes again; sent once JetStream's
//! `PubAck` says the stream holds it.

use super::{percent_decoded, Outgoing};

/// A JetStream context and the subject the bridge publishes on.
pub(super) struct Outlet {
    jetstream: async_nats::jetstream::Context,
    subject: String,
}

impl Outlet {
    /// Connects to the servers of `url` with the login it carries.
    pub(super) async fn connect(url: &str, subject: &str) -> Result<Self, String> {
        let nats = login(async_nats::ConnectOptions::new(), url)
            .connect(servers(url)?)
            .await
            .map_err(|e| format!("cannot reach NATS at {}: {e}", shown_url(url)))?;
        Ok(Self {
            jetstream: async_nats::jetstream::new(nats),
            subject: subject.to_owned(),
        })
    }

    /// Publishes one event and waits for JetStream's `PubAck`.
    pub(super) async fn publish(&self, out: &Outgoing<'_>) -> Result<(), String> {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", out.id.as_str());
        // `TraceContext::new` let through printable ASCII only: no value can
        // break the header block.
        if let Some(trace) = &out.trace {
            headers.insert("traceparent", trace.traceparent.as_str());
            if let Some(tracestate) = &trace.tracestate {
                headers.insert("tracestate", tracestate.as_str());
            }
        }
        let ack = self
            .jetstream
            .publish_with_headers(self.subject.clone(), headers, out.event.to_owned().into())
            .await
            .map_err(|e| format!("cannot publish on {}: {e}", self.subject))?
            .await
            .map_err(|e| {
                format!(
                    "JetStream did not confirm the publish on {}: {e}",
                    self.subject
                )
            })?;
        tracing::info!(
            event = %out.id,
            delivery = %out.delivery,
            stream = %ack.stream,
            sequence = ack.sequence,
            duplicate = ack.duplicate,
            "published"
        );
        Ok(())
    }
}

/// The NATS URL as it may be printed: any `user:password@` or `token@`
/// replaced by `<redacted>@`.
pub fn shown_url(url: &str) -> String {
    url.split(',')
        .map(|server| {
            let (scheme, rest) = server
                .split_once("://")
                .map_or(("", server), |(scheme, rest)| (scheme, rest));
            let prefix = if scheme.is_empty() {
                String::new()
            } else {
                format!("{scheme}://")
            };
            match rest.rsplit_once('@') {
                Some((_, address)) => format!("{prefix}<redacted>@{address}"),
                None => server.to_owned(),
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The login a NATS URL carries (`user:password@` or `token@`, from the
/// first server that has one), which the NATS client does not send by
/// itself.
fn login(options: async_nats::ConnectOptions, url: &str) -> async_nats::ConnectOptions {
    let userinfo = url.split(',').map(str::trim).find_map(|server| {
        let rest = server.split_once("://").map_or(server, |(_, rest)| rest);
        rest.rsplit_once('@').map(|(login, _)| login)
    });
    match userinfo.map(|login| login.split_once(':')) {
        Some(Some((user, password))) => {
            options.user_and_password(percent_decoded(user), percent_decoded(password))
        }
        Some(None) => options.token(percent_decoded(userinfo.unwrap_or_default())),
        None => options,
    }
}

/// The servers of a comma-separated list, each without the login it may
/// carry: the client sends the one [`login`] gives it to whichever server
/// answers, and holds (and may log) no address with a secret in it.
fn servers(url: &str) -> Result<Vec<async_nats::ServerAddr>, String> {
    url.split(',')
        .map(str::trim)
        .map(|server| {
            let unreadable = |e: std::io::Error| format!("NATS server {}: {e}", shown_url(server));
            let mut address = server
                .parse::<async_nats::ServerAddr>()
                .map_err(unreadable)?
                .into_inner();
            // Neither can fail on an address that has a host.
            let _ = address.set_username("");
            let _ = address.set_password(None);
            async_nats::ServerAddr::from_url(address).map_err(unreadable)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_of_servers_is_each_server_without_its_login() {
        let list = servers("nats://bridge:s3cret@10.0.0.1:4222, tls://10.0.0.2:4222,10.0.0.3:4223")
            .unwrap();
        let shown: Vec<&str> = list.iter().map(|server| server.as_url_str()).collect();
        assert_eq!(
            shown,
            [
                "nats://10.0.0.1:4222",
                "tls://10.0.0.2:4222",
                "nats://10.0.0.3:4223"
            ]
        );
        let problem = servers("nats://bridge:s3cret@10.0.0.1:port,nats://h:4222").unwrap_err();
        assert!(problem.contains("<redacted>@10.0.0.1:port"), "{problem}");
        assert!(!problem.contains("s3cret"), "{problem}");
    }
}
