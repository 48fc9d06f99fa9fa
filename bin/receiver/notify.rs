//! The notify settings `consume`, `check` and `relay` share: a webhook
//! told of every delivery that advanced the task view, through the outbox
//! and a relay.

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use tokio_util::sync::CancellationToken;

use result_inbox::db::{Dsn, Engine};
use result_inbox::ids::QueueId;
use result_inbox::inbox::{InboxStore, StoreOptions};
use result_inbox::orbit::readable_by_others;
use result_inbox::relay::{Relay, RelayError, RelayOptions, Targets, Webhook, WebhookSecret};
use result_inbox::scope::{InboxScope, ReceiverName};
use result_inbox::task_view::Notify;

use crate::args::positive_duration;
use crate::check::{database_problem, unready_problem, Problem};
use crate::exit::{failed, Failed};
use crate::relay_options::RelayOptionArgs;

/// The outbox target the notifications are recorded for.
pub(crate) const TARGET: &str = "notify";

/// How long a relay beside `consume`, or alone, waits for its sends in
/// flight once stopping: inside the 10 s from the signal to the exit. An
/// abandoned send's lease runs out and it is sent again under its id.
const RELAY_GRACE: Duration = Duration::from_secs(5);

/// How notifications go out.
#[derive(Args, Clone)]
pub(crate) struct NotifyArgs {
    /// Notify this webhook (http:// or https://) of every delivery that
    /// advanced the task view, signed by Standard Webhooks, after COMMIT,
    /// exactly once in effect (needs `receiver init --outbox`). Off
    /// unless set.
    #[arg(long, env = "RECEIVER_NOTIFY_URL", hide_env_values = true)]
    pub(crate) notify_url: Option<String>,
    /// The webhook's signing secret, `whsec_` and the key in base64, alone
    /// in this file (readable by its owner only). Required with
    /// --notify-url.
    #[arg(long, env = "RECEIVER_NOTIFY_SECRET_FILE")]
    pub(crate) notify_secret_file: Option<PathBuf>,
    /// Each notification carries the task's result too (`result`); by
    /// default only its SHA-256 (`result_sha256`).
    #[arg(
        long,
        env = "RECEIVER_NOTIFY_INCLUDE_RESULT",
        value_parser = clap::builder::BoolishValueParser::new(),
        default_value_t = false,
        default_missing_value = "true",
        num_args = 0..=1,
        require_equals = true
    )]
    pub(crate) notify_include_result: bool,
    /// Each attempt's limit: a webhook that has not answered by then is an
    /// outcome unknown, tried again under the same id (50ms, 10s, 1m).
    #[arg(long, env = "RECEIVER_NOTIFY_TIMEOUT", default_value = "10s", value_parser = positive_duration)]
    pub(crate) notify_timeout: Duration,
    #[command(flatten)]
    pub(crate) relay: RelayOptionArgs,
}

/// The notify settings, checked.
#[derive(Clone)]
pub(crate) struct NotifyConfig {
    /// The endpoint, with its secret.
    webhook: Webhook,
    /// The URL as given, for `check` to reach its host (never printed:
    /// its path may hold a token).
    url: String,
    /// Whether each notification carries the result.
    include_result: bool,
    /// How its relay claims, sends and gives up.
    relay: RelayOptions,
}

impl std::fmt::Debug for NotifyConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NotifyConfig")
            .field("webhook", &self.webhook)
            .field("include_result", &self.include_result)
            .field("relay", &self.relay)
            .finish_non_exhaustive()
    }
}

impl NotifyArgs {
    /// The settings, `None` when no webhook is set; a secret file that its
    /// group or others may read is refused, like a credentials file.
    pub(crate) fn resolve(self) -> Result<Option<NotifyConfig>, String> {
        let Some(url) = self.notify_url else {
            if self.notify_secret_file.is_some() || self.notify_include_result {
                return Err("RECEIVER_NOTIFY_SECRET_FILE and RECEIVER_NOTIFY_INCLUDE_RESULT need RECEIVER_NOTIFY_URL (or --notify-url): the webhook to notify".to_owned());
            }
            return Ok(None);
        };
        let path = self.notify_secret_file.ok_or(
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
        let secret = WebhookSecret::from_file(&path)
            .map_err(|e| format!("RECEIVER_NOTIFY_SECRET_FILE: {e}"))?;
        let webhook = Webhook::new(&url, secret)
            .map_err(|e| format!("RECEIVER_NOTIFY_URL: {e}"))?
            .with_timeout(self.notify_timeout);
        let mut relay = self
            .relay
            .options(self.notify_timeout)
            .map_err(|e| e.to_string())?;
        relay.shutdown_grace = RELAY_GRACE;
        Ok(Some(NotifyConfig {
            webhook,
            url,
            include_result: self.notify_include_result,
            relay,
        }))
    }
}

impl NotifyConfig {
    /// The inner service: the task view, recording a notification for
    /// each event that advanced it.
    pub(crate) fn service(&self) -> Notify {
        let notify = Notify::new(TARGET).expect("a valid target name");
        match self.include_result {
            true => notify.with_result(),
            false => notify,
        }
    }

    /// A relay that sends the notifications recorded in `dsn`'s outbox.
    pub(crate) fn relay<E: Engine>(&self, dsn: &Dsn) -> Relay<E> {
        let targets = Targets::new()
            .with(TARGET, self.webhook.clone())
            .expect("a valid target name");
        Relay::new(dsn.clone(), targets, self.relay.clone())
    }

    /// `check=notify`: the URL's host answers a TCP connect (the URL itself
    /// was checked when read).
    pub(crate) async fn host_answers(&self) -> Result<(), String> {
        let uri: http::Uri = self.url.parse().map_err(|_| "invalid URL".to_owned())?;
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
}

/// The outbox check: `receiver_outbox` is there with its columns, the
/// account may SELECT, INSERT and UPDATE it, and the server has `FOR UPDATE
/// SKIP LOCKED`, which the relay claims with. Writes no row.
pub(crate) async fn outbox_ready<E: Engine>(store: &InboxStore<E>) -> Result<(), Problem> {
    store
        .check_outbox_ready()
        .await
        .map_err(|unready| unready_problem(unready, store.engine()))?;
    crate::check::skip_locked(store).await
}

/// A store on `dsn` for the outbox check of a command without a receiver
/// name or queue (`relay`): the check reads no row of any queue.
pub(crate) fn store_for_check<E: Engine>(dsn: &Dsn) -> Result<InboxStore<E>, Failed> {
    let queue = QueueId::parse(&"0".repeat(32)).expect("a valid queue id");
    let scope = InboxScope::new(ReceiverName::default(), queue);
    InboxStore::<E>::open_lazy(dsn, scope, StoreOptions::default()).map_err(|e| {
        let problem = database_problem(e);
        failed(problem.is_configuration(), problem)
    })
}

/// Runs `consume` with `relay` beside it, in this process. The relay stops
/// at the signal (`shutdown`), beside the consumer's drain, or once
/// `consume` ended; a relay that cannot start stops the consumer (through
/// the token `consume` is given) and its error is the answer.
pub(crate) async fn with_relay<E: Engine, T, F: Future<Output = T>>(
    relay: Relay<E>,
    shutdown: &CancellationToken,
    consume: impl FnOnce(CancellationToken) -> F,
) -> Result<T, RelayError> {
    let stop = shutdown.child_token();
    let relay_stop = shutdown.child_token();
    let relaying = tokio::spawn({
        let (stop, relay_stop) = (stop.clone(), relay_stop.clone());
        async move {
            let ran = relay.run(relay_stop).await;
            if ran.is_err() {
                stop.cancel();
            }
            ran
        }
    });
    let consumed = consume(stop).await;
    relay_stop.cancel();
    match relaying.await {
        Ok(Err(e)) => Err(e),
        _ => Ok(consumed),
    }
}
