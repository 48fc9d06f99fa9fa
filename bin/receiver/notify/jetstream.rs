//! The JetStream subject as a notify target: reached once NATS answers and
//! a stream captures the subject, with a word when that stream's duplicate
//! window is shorter than the relay's retries need.

use std::time::Duration;

use result_inbox::nats::{self, NatsServers};
use result_inbox::relay::{CapturingStream, JetStream, RelayOptions};
use result_inbox::retry::{until_answered, Backoff};

use crate::check::{Finding, Problem};
use crate::commands::BROKER_CALL_TIMEOUT;

/// The target of `subject` on `servers`, once NATS answers (waited for
/// with `backoff` while it cannot be reached) and a stream captures it,
/// which is a configuration error when none does. Warns when that
/// stream's duplicate window is shorter than a relay with `options` needs.
pub(super) async fn target(
    servers: &NatsServers,
    subject: &str,
    timeout: Duration,
    options: &RelayOptions,
    backoff: Backoff,
) -> Result<JetStream, Problem> {
    let (jetstream, stream) = until_answered(backoff, "NATS", Problem::is_transient, || {
        jetstream(servers, subject, timeout)
    })
    .await?;
    tracing::info!(url = %servers.shown_url(), subject = %subject, stream = %stream.name, "notifying a JetStream subject");
    if let Some(warning) = window_warning(&jetstream, &stream, options) {
        tracing::warn!("{warning}");
    }
    Ok(jetstream)
}

/// `check=notify_stream`: the stream that captures `subject` and its
/// duplicate window, advisory when it is shorter than a relay with
/// `options` needs. One attempt.
pub(super) async fn finding(
    servers: &NatsServers,
    subject: &str,
    timeout: Duration,
    options: &RelayOptions,
) -> Result<Finding, Problem> {
    let (jetstream, stream) = jetstream(servers, subject, timeout).await?;
    let warning = window_warning(&jetstream, &stream, options);
    let detail = warning.clone().unwrap_or_else(|| {
        format!(
            "stream {} captures subject {subject:?}, duplicate window {} s",
            stream.name,
            stream.duplicate_window.as_secs()
        )
    });
    Ok(Finding::advisory(
        "notify_stream",
        warning.is_none(),
        detail,
    ))
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
