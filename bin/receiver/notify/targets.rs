//! Where the notifications go: the webhook, signed, the JetStream subject
//! (`jetstream.rs`) and the RabbitMQ queue (`rabbitmq.rs`); and what
//! `check` finds of each.

use std::path::PathBuf;
use std::time::Duration;

use result_inbox::orbit::readable_by_others;
use result_inbox::relay::{Targets, Webhook, WebhookSecret};
use result_inbox::retry::Backoff;

use super::{NotifyConfig, TARGET};
use crate::check::{Finding, Problem};

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
        #[cfg(feature = "nats")]
        if let Some((servers, subject)) = &self.nats {
            let jetstream = super::jetstream::target(
                servers,
                subject,
                self.timeout,
                &self.relay,
                backoff.clone(),
            )
            .await?;
            targets = targets
                .with(super::NATS_TARGET, jetstream)
                .expect("a valid target name");
        }
        #[cfg(feature = "rabbitmq")]
        if let Some((url, queue)) = &self.rabbitmq {
            let rabbitmq = super::rabbitmq::target(url, queue, self.timeout, backoff).await?;
            targets = targets
                .with(super::RABBITMQ_TARGET, rabbitmq)
                .expect("a valid target name");
        }
        #[cfg(not(any(feature = "nats", feature = "rabbitmq")))]
        let _ = backoff;
        Ok(targets)
    }

    /// `check=notify`: the webhook's host answers a TCP connect (the URL
    /// itself was checked when read); NATS answers and a stream captures
    /// the subject; RabbitMQ answers and the queue is there. Then, with a
    /// subject, `check=notify_stream`: that stream's duplicate window, a
    /// warning when it is shorter than the relay's retries need.
    pub(crate) async fn findings(&self) -> Vec<Finding> {
        let mut problems = Vec::new();
        if let Some((_, url)) = &self.webhook {
            problems.extend(host_answers(url).await.err());
        }
        #[allow(unused_mut)]
        let mut window = None;
        #[cfg(feature = "nats")]
        if let Some((servers, subject)) = &self.nats {
            match super::jetstream::finding(servers, subject, self.timeout, &self.relay).await {
                Ok(finding) => window = Some(finding),
                Err(problem) => problems.push(problem.reason()),
            }
        }
        #[cfg(feature = "rabbitmq")]
        if let Some((url, queue)) = &self.rabbitmq {
            if let Err(problem) = super::rabbitmq::reachable(url, queue, self.timeout).await {
                problems.push(problem.reason());
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
