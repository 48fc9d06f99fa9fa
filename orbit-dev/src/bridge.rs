//! The events of one subscription, published to NATS JetStream as a
//! platform's bridge publishes them: each event's bytes unchanged, on the
//! queue's subject, with the event id as `Nats-Msg-Id`, so that the stream's
//! duplicate window drops what a restarted bridge publishes again. A
//! delivery is acknowledged on Orbit only after JetStream confirmed the
//! publish; until then it is redelivered, and published again.
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
    /// The NATS server(s), comma-separated.
    pub nats_url: String,
    /// The subject: `orbit.results.<queue_id>` by default.
    pub subject: String,
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

/// Publishes until `shutdown` resolves; fails only when NATS cannot be
/// reached at the start. A stream that ends or fails is opened again.
pub async fn run(
    bridge: Bridge,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), String> {
    let nats = login(async_nats::ConnectOptions::new(), &bridge.nats_url)
        .connect(servers(&bridge.nats_url)?)
        .await
        .map_err(|e| format!("cannot reach NATS at {}: {e}", shown_url(&bridge.nats_url)))?;
    let jetstream = async_nats::jetstream::new(nats);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => return Ok(()),
            ended = session(&bridge, &jetstream) => {
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
async fn session(
    bridge: &Bridge,
    jetstream: &async_nats::jetstream::Context,
) -> Result<(), String> {
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
                let trace = trace_context(message.trace_context);
                publish(bridge, jetstream, delivery, event.get(), trace).await?;
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

async fn publish(
    bridge: &Bridge,
    jetstream: &async_nats::jetstream::Context,
    delivery: &str,
    event: &str,
    trace: Option<TraceContext>,
) -> Result<(), String> {
    // An event without a readable id still gets a stable message id.
    let id = serde_json::from_str::<EventId>(event)
        .map(|e| e.id)
        .unwrap_or_else(|_| delivery.to_owned());
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Nats-Msg-Id", id.as_str());
    // `TraceContext::new` let through printable ASCII only: no value can
    // break the header block.
    if let Some(trace) = trace {
        headers.insert("traceparent", trace.traceparent);
        if let Some(tracestate) = trace.tracestate {
            headers.insert("tracestate", tracestate);
        }
    }
    let ack = jetstream
        .publish_with_headers(bridge.subject.clone(), headers, event.to_owned().into())
        .await
        .map_err(|e| format!("cannot publish on {}: {e}", bridge.subject))?
        .await
        .map_err(|e| {
            format!(
                "JetStream did not confirm the publish on {}: {e}",
                bridge.subject
            )
        })?;
    tracing::info!(
        event = %id,
        delivery = %delivery,
        stream = %ack.stream,
        sequence = ack.sequence,
        duplicate = ack.duplicate,
        "published"
    );
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
