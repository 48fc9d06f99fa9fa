//! The notify settings `consume`, `check` and `relay` share: a webhook, a
//! JetStream subject and/or a RabbitMQ queue told of every delivery that
//! advanced the task view, through the outbox and a relay.

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use tokio_util::sync::CancellationToken;

use result_inbox::db::{Dsn, Engine};
use result_inbox::ids::QueueId;
use result_inbox::inbox::{InboxStore, Outcome, Receipt, StoreOptions};
#[cfg(feature = "nats")]
use result_inbox::nats::NatsServers;
use result_inbox::relay::{Relay, RelayError, RelayOptions, RelayWaker, Targets, Webhook};
use result_inbox::scope::{InboxScope, ReceiverName};
use result_inbox::task_view::Notify;

use crate::args::{positive_duration, AmqpServerArgs, NatsServerArgs};
use crate::check::{database_problem, unready_problem, Problem};
use crate::exit::{failed, Failed};
use crate::relay_options::RelayOptionArgs;

#[cfg(feature = "nats")]
mod jetstream;
#[cfg(feature = "rabbitmq")]
mod rabbitmq;
mod targets;

/// The outbox target the webhook's notifications are recorded for.
pub(crate) const TARGET: &str = "notify";
/// The outbox target the subject's notifications are recorded for: a
/// target of its own, so each notification has an effect id per target.
pub(crate) const NATS_TARGET: &str = "notify-nats";
/// The outbox target the RabbitMQ queue's notifications are recorded for.
pub(crate) const RABBITMQ_TARGET: &str = "notify-rabbitmq";

/// What names a target to notify, for the errors that need one.
pub(crate) const WHERE_TO_NOTIFY: &str = "RECEIVER_NOTIFY_URL, RECEIVER_NOTIFY_NATS_SUBJECT or RECEIVER_NOTIFY_AMQP_QUEUE (or --notify-url, --notify-nats-subject, --notify-amqp-queue)";

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
    /// Publish a notification of every delivery that advanced the task
    /// view to this JetStream subject, after COMMIT, exactly once in effect
    /// (`Nats-Msg-Id`: the effect's id), with the NATS_URL, NATS_TOKEN or
    /// NATS_CREDS_FILE, NATS_CA_FILE and NATS_REQUIRE_TLS settings; a
    /// stream must capture it (needs `receiver init --outbox`). Off unless
    /// set; with --notify-url, both are notified.
    #[arg(long, env = "RECEIVER_NOTIFY_NATS_SUBJECT")]
    pub(crate) notify_nats_subject: Option<String>,
    /// Publish a notification of every delivery that advanced the task
    /// view to this RabbitMQ queue (through the default exchange), after
    /// COMMIT, persistent, `message_id` the effect's id, confirmed by the
    /// server, with AMQP_URL; the queue must exist (needs `receiver init
    /// --outbox`). Off unless set; beside the others, all are notified.
    #[arg(long, env = "RECEIVER_NOTIFY_AMQP_QUEUE")]
    pub(crate) notify_amqp_queue: Option<String>,
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
    /// Each attempt's limit: a webhook that has not answered by then, a
    /// stream whose PubAck or a queue whose confirm has not come, is an
    /// outcome unknown, tried again under the same id (50ms, 10s, 1m).
    #[arg(long, env = "RECEIVER_NOTIFY_TIMEOUT", default_value = "10s", value_parser = positive_duration)]
    pub(crate) notify_timeout: Duration,
    #[command(flatten)]
    pub(crate) relay: RelayOptionArgs,
}

/// The notify settings, checked.
#[derive(Clone)]
pub(crate) struct NotifyConfig {
    /// The endpoint, with its secret, and its URL as given, for `check` to
    /// reach its host (never printed: its path may hold a token).
    webhook: Option<(Webhook, String)>,
    /// The NATS servers and the subject.
    #[cfg(feature = "nats")]
    nats: Option<(NatsServers, String)>,
    /// The RabbitMQ server and the queue.
    #[cfg(feature = "rabbitmq")]
    rabbitmq: Option<(result_inbox::rabbitmq::AmqpUrl, String)>,
    /// Whether each notification carries the result.
    include_result: bool,
    /// Each attempt's limit, on every target.
    #[cfg_attr(not(any(feature = "nats", feature = "rabbitmq")), allow(dead_code))]
    timeout: Duration,
    /// How its relay claims, sends and gives up.
    relay: RelayOptions,
}

impl std::fmt::Debug for NotifyConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NotifyConfig")
            .field(
                "webhook",
                &self.webhook.as_ref().map(|(webhook, _)| webhook),
            )
            .field("subject", &self.nats_subject())
            .field("queue", &self.amqp_queue())
            .field("include_result", &self.include_result)
            .field("relay", &self.relay)
            .finish_non_exhaustive()
    }
}

impl NotifyArgs {
    /// The settings, `None` when nothing is to be notified; a secret file
    /// that its group or others may read is refused, like a credentials
    /// file. A subject takes the NATS servers and login from `nats`, a
    /// queue the RabbitMQ server from `amqp`.
    #[cfg_attr(
        not(all(feature = "nats", feature = "rabbitmq")),
        allow(unused_variables)
    )]
    pub(crate) fn resolve(
        self,
        nats: NatsServerArgs,
        amqp: AmqpServerArgs,
    ) -> Result<Option<NotifyConfig>, String> {
        if self.notify_url.is_none() && self.notify_secret_file.is_some() {
            return Err("RECEIVER_NOTIFY_SECRET_FILE needs RECEIVER_NOTIFY_URL (or --notify-url): the webhook to notify".to_owned());
        }
        if self.notify_url.is_none()
            && self.notify_nats_subject.is_none()
            && self.notify_amqp_queue.is_none()
        {
            if self.notify_include_result {
                return Err(format!(
                    "RECEIVER_NOTIFY_INCLUDE_RESULT needs {WHERE_TO_NOTIFY}: what to notify"
                ));
            }
            return Ok(None);
        }
        let webhook = match self.notify_url {
            Some(url) => Some(targets::webhook(
                url,
                self.notify_secret_file,
                self.notify_timeout,
            )?),
            None => None,
        };
        #[cfg(not(feature = "nats"))]
        if self.notify_nats_subject.is_some() {
            return Err(crate::args::built_without(
                "RECEIVER_NOTIFY_NATS_SUBJECT",
                "NATS",
            ));
        }
        #[cfg(feature = "nats")]
        let nats = match self.notify_nats_subject {
            Some(subject) => {
                if !crate::nats::is_concrete_subject(&subject) {
                    return Err(format!("RECEIVER_NOTIFY_NATS_SUBJECT: {subject:?} is not one subject to publish to (no wildcards, no empty tokens, no white space)"));
                }
                let servers = nats
                    .servers()
                    .map_err(|e| format!("RECEIVER_NOTIFY_NATS_SUBJECT: {e}"))?;
                Some((servers, subject))
            }
            None => None,
        };
        #[cfg(not(feature = "rabbitmq"))]
        if self.notify_amqp_queue.is_some() {
            return Err(crate::args::built_without(
                "RECEIVER_NOTIFY_AMQP_QUEUE",
                "RabbitMQ",
            ));
        }
        #[cfg(feature = "rabbitmq")]
        let rabbitmq = match self.notify_amqp_queue {
            Some(queue) if queue.is_empty() || queue.len() > 255 => {
                return Err(format!(
                    "RECEIVER_NOTIFY_AMQP_QUEUE: {queue:?} is not a queue name (1 to 255 bytes)"
                ))
            }
            Some(queue) => {
                let url = amqp
                    .url()
                    .map_err(|e| format!("RECEIVER_NOTIFY_AMQP_QUEUE: {e}"))?;
                Some((url, queue))
            }
            None => None,
        };
        let mut relay = self
            .relay
            .options(self.notify_timeout)
            .map_err(|e| e.to_string())?;
        relay.shutdown_grace = RELAY_GRACE;
        Ok(Some(NotifyConfig {
            webhook,
            #[cfg(feature = "nats")]
            nats,
            #[cfg(feature = "rabbitmq")]
            rabbitmq,
            include_result: self.notify_include_result,
            timeout: self.notify_timeout,
            relay,
        }))
    }
}

impl NotifyConfig {
    /// The subject notified, if one is.
    pub(crate) fn nats_subject(&self) -> Option<&str> {
        #[cfg(feature = "nats")]
        return self.nats.as_ref().map(|(_, subject)| subject.as_str());
        #[cfg(not(feature = "nats"))]
        None
    }

    /// The RabbitMQ queue notified, if one is.
    pub(crate) fn amqp_queue(&self) -> Option<&str> {
        #[cfg(feature = "rabbitmq")]
        return self.rabbitmq.as_ref().map(|(_, queue)| queue.as_str());
        #[cfg(not(feature = "rabbitmq"))]
        None
    }

    /// The outbox targets notified, in the order their effects are
    /// recorded.
    pub(crate) fn target_names(&self) -> Vec<&'static str> {
        let webhook = self.webhook.is_some().then_some(TARGET);
        let nats = self.nats_subject().is_some().then_some(NATS_TARGET);
        let rabbitmq = self.amqp_queue().is_some().then_some(RABBITMQ_TARGET);
        webhook.into_iter().chain(nats).chain(rabbitmq).collect()
    }

    /// The inner service: the task view, recording a notification per
    /// target for each event that advanced it.
    pub(crate) fn service(&self) -> Notify {
        let mut names = self.target_names().into_iter();
        let first = names.next().expect("a webhook or a subject");
        let mut notify = Notify::new(first).expect("a valid target name");
        for name in names {
            notify = notify.with_target(name).expect("a valid target name");
        }
        match self.include_result {
            true => notify.with_result(),
            false => notify,
        }
    }

    /// A relay that sends the notifications recorded in `dsn`'s outbox to
    /// `targets`.
    pub(crate) fn relay<E: Engine>(&self, dsn: &Dsn, targets: Targets) -> Relay<E> {
        tracing::info!(targets = ?self.target_names(), "relaying the outbox's notifications");
        Relay::new(dsn.clone(), targets, self.relay.clone())
    }

    /// `consume`'s settings, unless they notify the subject it consumes
    /// (`consumed`), where its notifications would come back as deliveries.
    #[cfg(feature = "nats")]
    pub(crate) fn refuse_consumed(&self, consumed: &str) -> Result<(), String> {
        match self.nats_subject() {
            Some(subject) if subject == consumed => Err(format!("RECEIVER_NOTIFY_NATS_SUBJECT is {subject:?}, the subject this receiver consumes: its notifications would come back to it as deliveries; publish them to another subject")),
            _ => Ok(()),
        }
    }

    /// `consume`'s settings, unless they notify the queue it consumes
    /// (`consumed`) or that queue's dead-letter queue: its notifications
    /// would come back as deliveries, or be listed as failures.
    #[cfg(feature = "rabbitmq")]
    pub(crate) fn refuse_consumed_queue(&self, consumed: &str) -> Result<(), String> {
        let dead = result_inbox::rabbitmq::dead_letter_queue(consumed);
        match self.amqp_queue() {
            Some(queue) if queue == consumed || queue == dead => Err(format!("RECEIVER_NOTIFY_AMQP_QUEUE is {queue:?}, the queue this receiver consumes or its dead-letter queue: its notifications would come back to it as deliveries or failures; publish them to another queue")),
            _ => Ok(()),
        }
    }
}

/// What the inbox's answers pass through beside a relay: after a COMMIT
/// that recorded a notification, `waker` wakes the relay, which finds it
/// at once.
pub(crate) fn waking(waker: RelayWaker) -> impl Fn(Receipt) -> Receipt + Clone {
    move |receipt| {
        if receipt.outcome == Outcome::Applied {
            waker.wake();
        }
        receipt
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
