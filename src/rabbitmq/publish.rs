//! Publishing with publisher confirms: a message is sent once the server
//! confirmed it (`basic.ack` on a channel in confirm mode) and did not
//! return it as unroutable, never before.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use amqprs::callbacks::ChannelCallback;
use amqprs::channel::{BasicPublishArguments, Channel, ConfirmSelectArguments};
use amqprs::{Ack, BasicProperties, Cancel, CloseChannel, Nack, Return};
use tokio::sync::watch;

use super::connect::{described, LastWords, Link};
use super::{AmqpUrl, RabbitError};

/// The messages ready in `queue` on the server at `url`, asked on a
/// connection of its own (a passive declare) as `name`, closed after;
/// [`RabbitError::UnknownQueue`] when there is no such queue.
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
pub(crate) async fn queue_ready(
    url: &AmqpUrl,
    name: &str,
    queue: &str,
    timeout: Duration,
) -> Result<u32, RabbitError> {
    let link = super::connect::open(url, name, timeout).await?;
    let ready = super::provision::required(&link, queue, url.vhost(), timeout).await;
    link.close().await;
    ready
}

/// Why a publish was not confirmed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
pub(crate) enum Unsent {
    /// No queue took it (`basic.return`): the queue is not there.
    Unroutable,
    /// The server refused it (`basic.nack`).
    Nacked,
    /// No confirm came in time: the server may hold it or not.
    Unconfirmed,
    /// The connection or the channel failed, or could not be opened.
    Connection,
}

/// A publish that was not confirmed: why, and the error that says so.
#[derive(Debug)]
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
pub(crate) struct NotSent {
    pub(crate) why: Unsent,
    pub(crate) error: RabbitError,
}

impl From<NotSent> for RabbitError {
    fn from(not_sent: NotSent) -> Self {
        not_sent.error
    }
}

fn not_sent(why: Unsent, error: RabbitError) -> NotSent {
    NotSent { why, error }
}

/// The server's answer to the latest publish: its delivery tag (with
/// `multiple`, every tag up to it) and whether it was taken.
#[derive(Debug, Clone, Copy, Default)]
struct Answer {
    tag: u64,
    taken: bool,
}

/// A channel in confirm mode that publishes one message at a time and
/// waits for the server's answer to it: confirms cost a round trip each,
/// which the callers (a replay, an outbox's effect) afford, and one
/// message in flight needs no matching of answers to messages.
pub(super) struct Confirming {
    channel: Channel,
    words: LastWords,
    answers: watch::Receiver<Answer>,
    returned: Arc<Mutex<Option<(u16, String)>>>,
    published: u64,
}

impl Confirming {
    /// A channel of its own on `link`'s connection, in confirm mode.
    pub(super) async fn open(link: &Link, timeout: Duration) -> Result<Self, RabbitError> {
        let words = LastWords::default();
        let (answer, answers) = watch::channel(Answer::default());
        let returned = Arc::new(Mutex::new(None));
        let callback = Confirms {
            words: words.clone(),
            answer,
            returned: returned.clone(),
        };
        let opened = async {
            let channel = link.connection.open_channel(None).await?;
            channel.register_callback(callback).await?;
            channel
                .confirm_select(ConfirmSelectArguments::default())
                .await?;
            Ok::<_, amqprs::error::Error>(channel)
        };
        match tokio::time::timeout(timeout, opened).await {
            Ok(Ok(channel)) => Ok(Self {
                channel,
                words,
                answers,
                returned,
                published: 0,
            }),
            Ok(Err(e)) => Err(link.error("opening a channel for publishing", &e)),
            Err(_) => Err(RabbitError::Disconnected(format!(
                "no channel opened for publishing within {timeout:?}"
            ))),
        }
    }

    /// Publishes `body` through the default exchange to the queue named
    /// `queue` (mandatory: a queue that is not there is an error, not a
    /// message dropped) and returns once the server confirmed it, within
    /// `timeout`. An error leaves it unknown whether the queue has the
    /// message only when it is [`RabbitError::Disconnected`]: sending
    /// again may then make a copy.
    pub(super) async fn publish(
        &mut self,
        queue: &str,
        properties: &BasicProperties,
        body: Vec<u8>,
        timeout: Duration,
    ) -> Result<(), NotSent> {
        let what = format!("publishing to queue {queue}");
        *self.returned.lock().unwrap_or_else(|e| e.into_inner()) = None;
        let args = BasicPublishArguments::new("", queue)
            .mandatory(true)
            .finish();
        self.channel
            .basic_publish(properties.clone(), body, args)
            .await
            .map_err(|e| {
                let error = described(&self.words, self.channel.is_open(), &what, &e);
                not_sent(Unsent::Connection, error)
            })?;
        self.published += 1;
        let tag = self.published;
        let answered = tokio::time::timeout(timeout, self.answers.wait_for(|a| a.tag >= tag)).await;
        let answer = match answered {
            Ok(Ok(answer)) => *answer,
            Ok(Err(_)) => {
                return Err(not_sent(
                    Unsent::Connection,
                    RabbitError::Disconnected(format!(
                        "{what}: the channel closed before the server confirmed"
                    )),
                ))
            }
            Err(_) => {
                let error = match self.words.heard() {
                    Some((code, text)) => RabbitError::Server(format!("{what}: {code} {text}")),
                    None => {
                        RabbitError::Disconnected(format!("{what}: no confirm within {timeout:?}"))
                    }
                };
                return Err(not_sent(Unsent::Unconfirmed, error));
            }
        };
        if !answer.taken {
            return Err(not_sent(
                Unsent::Nacked,
                RabbitError::Server(format!(
                    "{what}: the server refused the message (basic.nack)"
                )),
            ));
        }
        // A returned message is answered by a return, then by an ack.
        if let Some((code, text)) = self
            .returned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            return Err(not_sent(
                Unsent::Unroutable,
                RabbitError::Server(format!(
                    "{what}: no queue took it ({code} {text}); check that the queue exists"
                )),
            ));
        }
        Ok(())
    }

    /// Closes the channel.
    pub(super) async fn close(self) {
        if self.channel.is_open() {
            let _ = self.channel.close().await;
        }
    }
}

/// A connection of its own and a channel in confirm mode on it, opened at
/// the first publish and again after any publish that failed, so that one
/// broken connection costs one attempt. The relay's RabbitMQ target is
/// what uses it.
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
pub(crate) struct Publishing {
    url: AmqpUrl,
    name: &'static str,
    open: Option<(Link, Confirming)>,
}

#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
impl Publishing {
    /// Publishes to the server at `url`, as the connection `name`.
    pub(crate) fn new(url: AmqpUrl, name: &'static str) -> Self {
        Self {
            url,
            name,
            open: None,
        }
    }

    /// [`Confirming::publish`] on the open channel, or on a new connection
    /// when there is none; any failure closes the connection.
    pub(crate) async fn publish(
        &mut self,
        queue: &str,
        properties: &BasicProperties,
        body: Vec<u8>,
        timeout: Duration,
    ) -> Result<(), NotSent> {
        let (link, mut confirming) = match self.open.take() {
            Some((link, confirming)) if link.connection.is_open() => (link, confirming),
            stale => {
                if let Some((link, _)) = stale {
                    link.close().await;
                }
                let link = super::connect::open(&self.url, self.name, timeout)
                    .await
                    .map_err(|e| not_sent(Unsent::Connection, e))?;
                match Confirming::open(&link, timeout).await {
                    Ok(confirming) => (link, confirming),
                    Err(e) => {
                        link.close().await;
                        return Err(not_sent(Unsent::Connection, e));
                    }
                }
            }
        };
        match confirming.publish(queue, properties, body, timeout).await {
            Ok(()) => {
                self.open = Some((link, confirming));
                Ok(())
            }
            Err(e) => {
                link.close().await;
                Err(e)
            }
        }
    }

    /// The server it publishes to, and the name its connections go by.
    pub(crate) fn server(&self) -> (&AmqpUrl, &'static str) {
        (&self.url, self.name)
    }

    /// Closes the connection, if one is open.
    pub(crate) async fn close(&mut self) {
        if let Some((link, _)) = self.open.take() {
            link.close().await;
        }
    }
}

/// The server's answers on a channel in confirm mode, and its last words.
struct Confirms {
    words: LastWords,
    answer: watch::Sender<Answer>,
    returned: Arc<Mutex<Option<(u16, String)>>>,
}

#[async_trait::async_trait]
impl ChannelCallback for Confirms {
    async fn close(
        &mut self,
        _: &Channel,
        close: CloseChannel,
    ) -> Result<(), amqprs::error::Error> {
        self.words.said(close.reply_code(), close.reply_text());
        Ok(())
    }
    async fn cancel(&mut self, _: &Channel, _: Cancel) -> Result<(), amqprs::error::Error> {
        Ok(())
    }
    async fn flow(&mut self, _: &Channel, active: bool) -> Result<bool, amqprs::error::Error> {
        Ok(active)
    }
    async fn publish_ack(&mut self, _: &Channel, ack: Ack) {
        self.answer.send_replace(Answer {
            tag: ack.delivery_tag(),
            taken: true,
        });
    }
    async fn publish_nack(&mut self, _: &Channel, nack: Nack) {
        self.answer.send_replace(Answer {
            tag: nack.delivery_tag(),
            taken: false,
        });
    }
    async fn publish_return(&mut self, _: &Channel, ret: Return, _: BasicProperties, _: Vec<u8>) {
        *self.returned.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((ret.reply_code(), ret.reply_text().clone()));
    }
}
