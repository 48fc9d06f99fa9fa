//! Where the notifications go: the webhook, signed, and the JetStream
//! subject, once NATS answers and a stream captures it; and what `check`
//! finds of each.

use std::path::PathBuf;
use std::time::Duration;

use result_inbox::nats::{self, NatsServers};
use result_inbox::orbit::readable_by_others;
use result_inbox::relay::{
    CapturingStream, JetStream, RelayOptions, Targets, Webhook, WebhookSecret,
};
use result_inbox::retry::{until_answered, Backoff};

use super::{NotifyConfig, NATS_TARGET, TARGET};
use crate::check::{Finding, Problem};
use crate::commands::BROKER_CALL_TIMEOUT;

/// The webhook to `url`, signed with the secret in `secret_file`, each
/// attempt given `timeout`.
pub(super) fn webhook(
    url: String,
    secret_file: Option<PathBuf>,
    timeout: Duration,
) -> Result<(Webhook, String), String> {
    let path = secret_file.ok_or(
        "RECEIVER_NOTIFY_SECRET_FILE is not set (or pass --notify-secret-file): the file holding the webhook's whsec_ secret",
    )?;
    let unreadable = |e: std::io::Error| {
        format!(
            "RECEIVER_NOTIFY_SECRET_FILE: cannot read {}: {e}",
            path.display()
        )
    };
    if readable_by_others(&path).map_err(unreadable)? {
        return Err(format!(
            "RECEIVER_NOTIFY_SECRET_FILE: {} may be read by its group or others; it holds a secret: chmod 600 it",
            path.display()
        ));
    }
    let secret =
        WebhookSecret::from_file(&path).map_err(|e| format!("RECEIVER_NOTIFY_SECRET_FILE: {e}"))?;
    let webhook = Webhook::new(&url, secret)
        .map_err(|e| format!("RECEIVER_NOTIFY_URL: {e}"))?
        .with_timeout(timeout);
    Ok((webhook, url))
}

impl NotifyConfig {
    /// The targets the relay sends to: the webhook as it is; the subject
    /// once NATS answers (waited for with `backoff` while it cannot be
    /// reached) and a stream captures it, which is a configuration error
    /// when none does. Warns when that stream's duplicate window is shorter
    /// than the relay's retries need.
    pub(crate) async fn targets(&self, backoff: Backoff) -> Result<Targets, Problem> {
        let mut targets = Targets::new();
        if let Some((webhook, _)) = &self.webhook {
            targets = targets
                .with(TARGET, webhook.clone())
                .expect("a valid target name");
        }
        if let Some((servers, subject)) = &self.nats {
            let (jetstream, stream) =
                until_answered(backoff, "NATS", Problem::is_transient, || {
                    jetstream(servers, subject, self.timeout)
                })
                .await?;
            tracing::info!(url = %servers.shown_url(), subject = %subject, stream = %stream.name, "notifying a JetStream subject");
            if let Some(warning) = window_warning(&jetstream, &stream, &self.relay) {
                tracing::warn!("{warning}");
            }
            targets = targets
                .with(NATS_TARGET, jetstream)
                .expect("a valid target name");
        }
        Ok(targets)
    }

    /// `check=notify`: the webhook's host answers a TCP connect (the URL
    /// itself was checked when read); NATS answers and a stream captures
    /// the subject. Then, with a subject, `check=notify_stream`: that
    /// stream's duplicate window, a warning when it is shorter than the
    /// relay's retries need.
    pub(crate) async fn findings(&self) -> Vec<Finding> {
        let mut problems = Vec::new();
        if let Some((_, url)) = &self.webhook {
            problems.extend(host_answers(url).await.err());
        }
        let mut window = None;
        if let Some((servers, subject)) = &self.nats {
            match jetstream(servers, subject, self.timeout).await {
                Ok((jetstream, stream)) => {
                    let warning = window_warning(&jetstream, &stream, &self.relay);
                    let detail = warning.clone().unwrap_or_else(|| {
                        format!(
                            "stream {} captures subject {subject:?}, duplicate window {} s",
                            stream.name,
                            stream.duplicate_window.as_secs()
                        )
                    });
                    window = Some(Finding::advisory(
                        "notify_stream",
                        warning.is_none(),
                        detail,
                    ));
                }
                Err(problem) => problems.push(problem.reason()),
            }
        }
        let notify = match problems.is_empty() {
            true => Ok(()),
            false => Err(problems.join("; ")),
        };
        std::iter::once(Finding::of("notify", notify))
            .chain(window)
            .collect()
    }
}

/// A connection to `servers`, the JetStream target of `subject` on it
/// (each attempt given `timeout` for its `PubAck`), and the stream that
/// captures it. One attempt.
async fn jetstream(
    servers: &NatsServers,
    subject: &str,
    timeout: Duration,
) -> Result<(JetStream, CapturingStream), Problem> {
    let client = nats::connect(servers, BROKER_CALL_TIMEOUT)
        .await
        .map_err(Problem::Nats)?;
    let jetstream = JetStream::new(client, subject)
        .map_err(Problem::NotifyStream)?
        .with_timeout(timeout);
    let stream = jetstream.stream().await.map_err(Problem::NotifyStream)?;
    Ok((jetstream, stream))
}

/// What to say of a stream whose duplicate window is shorter than an
/// effect's attempts can be apart: a publish whose `PubAck` was lost may
/// then be stored twice, by a relay with `options`.
fn window_warning(
    jetstream: &JetStream,
    stream: &CapturingStream,
    options: &RelayOptions,
) -> Option<String> {
    let needed = jetstream.window_needed(options);
    (stream.duplicate_window < needed).then(|| {
        format!(
            "stream {} deduplicates within {} s, but the relay may try a notification again up to {} s after an attempt whose PubAck was lost: it may then be stored twice; raise the window, e.g. `nats stream edit {} --dupe-window {}m`",
            stream.name,
            stream.duplicate_window.as_secs(),
            needed.as_secs(),
            stream.name,
            needed.as_secs().div_ceil(60) + 1,
        )
    })
}

/// Whether the host of the webhook's `url` answers a TCP connect.
async fn host_answers(url: &str) -> Result<(), String> {
    let uri: http::Uri = url.parse().map_err(|_| "invalid URL".to_owned())?;
    let host = uri.host().unwrap_or_default().trim_matches(['[', ']']);
    let port = uri
        .port_u16()
        .unwrap_or(if uri.scheme_str() == Some("https") {
            443
        } else {
            80
        });
    let connect = tokio::net::TcpStream::connect((host, port));
    match tokio::time::timeout(Duration::from_secs(5), connect).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!(
            "the webhook's host {host}:{port} does not answer: {e}"
        )),
        Err(_) => Err(format!(
            "the webhook's host {host}:{port} did not answer within 5 s"
        )),
    }
}
