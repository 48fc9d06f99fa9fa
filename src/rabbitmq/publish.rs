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
use super::RabbitError;

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
pub(crate) struct Confirming {
    channel: Channel,
    words: LastWords,
    answers: watch::Receiver<Answer>,
    returned: Arc<Mutex<Option<(u16, String)>>>,
    published: u64,
}

impl Confirming {
    /// A channel of its own on `link`'s connection, in confirm mode.
    pub(crate) async fn open(link: &Link, timeout: Duration) -> Result<Self, RabbitError> {
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
    pub(crate) async fn publish(
        &mut self,
        queue: &str,
        properties: &BasicProperties,
        body: Vec<u8>,
        timeout: Duration,
    ) -> Result<(), RabbitError> {
        let what = format!("publishing to queue {queue}");
        *self.returned.lock().unwrap_or_else(|e| e.into_inner()) = None;
        let args = BasicPublishArguments::new("", queue)
            .mandatory(true)
            .finish();
        self.channel
            .basic_publish(properties.clone(), body, args)
            .await
            .map_err(|e| described(&self.words, self.channel.is_open(), &what, &e))?;
        self.published += 1;
        let tag = self.published;
        let answered = tokio::time::timeout(timeout, self.answers.wait_for(|a| a.tag >= tag)).await;
        let answer = match answered {
            Ok(Ok(answer)) => *answer,
            Ok(Err(_)) => {
                return Err(RabbitError::Disconnected(format!(
                    "{what}: the channel closed before the server confirmed"
                )))
            }
            Err(_) => {
                return Err(match self.words.heard() {
                    Some((code, text)) => RabbitError::Server(format!("{what}: {code} {text}")),
                    None => {
                        RabbitError::Disconnected(format!("{what}: no confirm within {timeout:?}"))
                    }
                })
            }
        };
        if !answer.taken {
            return Err(RabbitError::Server(format!(
                "{what}: the server refused the message (basic.nack)"
            )));
        }
        // A returned message is answered by a return, then by an ack.
        if let Some((code, text)) = self
            .returned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            return Err(RabbitError::Server(format!(
                "{what}: no queue took it ({code} {text}); check that the queue exists"
            )));
        }
        Ok(())
    }

    /// Closes the channel.
    pub(crate) async fn close(self) {
        if self.channel.is_open() {
            let _ = self.channel.close().await;
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
