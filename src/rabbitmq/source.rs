//! A quorum queue as the consumer's source: one connection, one channel,
//! one consumer on it at a time.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use amqprs::channel::{
    BasicAckArguments, BasicCancelArguments, BasicConsumeArguments, BasicNackArguments,
    BasicQosArguments, BasicRejectArguments, ConsumerMessage,
};
use bytes::Bytes;
use tokio::sync::{mpsc, Mutex};
use tokio::task::JoinHandle;

use super::connect::{open, Link};
use super::headers::{integer, trace_context};
use super::provision::{required, suitable};
use super::{RabbitError, RabbitSettings};
use crate::delivery::{Delivery, DeliveryId};
use crate::source::{AckBeat, AckOutcome, Incoming, LeaseStream, Source};

/// While no delivery comes, an open stream reports a keepalive this often,
/// so that an idle queue is not taken for a dead stream (the connection's
/// own heartbeats are the client library's).
const IDLE_KEEPALIVE: Duration = Duration::from_secs(15);

/// A RabbitMQ quorum queue as the consumer's source.
///
/// Each stream is one consumer (`basic.consume`, manual acknowledgement)
/// on the source's channel, started at the stream's first grant with a
/// prefetch of [`RabbitSettings::window`]. Closing a stream cancels its
/// consumer and keeps the channel, so that deliveries still in hand can
/// be acknowledged on it: AMQP acknowledges a delivery only on the channel
/// that received it, and a delivery tag means nothing on another channel.
/// So each proof names its channel, and one whose channel has closed is
/// refused rather than sent on the next ([`RabbitError::ChannelGone`]):
/// the server has given that delivery back to the queue already.
#[derive(Clone)]
pub struct RabbitSource {
    shared: Arc<Shared>,
}

struct Shared {
    settings: RabbitSettings,
    timeout: Duration,
    name: String,
    live: Mutex<Option<Arc<Live>>>,
    generations: AtomicU64,
    /// The deliveries the queue allows a message: its delivery limit's
    /// returns, and the one after them.
    attempts_allowed: Option<u32>,
    /// The beat its acknowledgements leave on: a quorum queue commits
    /// each acknowledgement to its log, and those that arrive together
    /// share one write.
    beat: AckBeat,
}

/// A link and which one it is: the proofs of its deliveries carry the
/// number.
struct Live {
    link: Link,
    generation: u64,
    acks: std::sync::Mutex<Acks>,
}

impl Live {
    fn acks(&self) -> std::sync::MutexGuard<'_, Acks> {
        self.acks.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A channel's deliveries not settled yet and its acknowledgements waiting
/// for the beat. A channel delivers its tags in order, so an
/// acknowledgement with `multiple` of the highest due tag below every
/// unsettled one settles exactly the due tags below it: one frame, and one
/// command in the quorum queue's log, for a beat's worth of them.
#[derive(Debug, Default)]
struct Acks {
    /// Handed to the consumer, neither acknowledged nor rejected yet.
    open: BTreeSet<u64>,
    /// Acknowledged by the consumer, waiting for the beat.
    due: BTreeSet<u64>,
}

/// What one beat sends: an acknowledgement of every tag up to `upto` (with
/// `multiple` when it covers more than one), and one for each of `each`.
#[derive(Debug, PartialEq, Eq)]
struct Due {
    upto: Option<(u64, bool)>,
    each: Vec<u64>,
}

impl Acks {
    fn delivered(&mut self, tag: u64) {
        self.open.insert(tag);
    }

    /// `tag` was rejected or returned: the frame has been handed over.
    fn settled(&mut self, tag: u64) {
        self.open.remove(&tag);
    }

    fn acked(&mut self, tag: u64) {
        self.open.remove(&tag);
        self.due.insert(tag);
    }

    /// What to send now, if `tag` is still due (another caller of the
    /// same beat may have taken it): the due tags below every open one
    /// together, those above one by one.
    fn take(&mut self, tag: u64) -> Option<Due> {
        if !self.due.contains(&tag) {
            return None;
        }
        let low = self.open.first().copied().unwrap_or(u64::MAX);
        let due = std::mem::take(&mut self.due);
        let below = due.range(..low).count();
        let upto = due.range(..low).next_back().map(|t| (*t, below > 1));
        Some(Due {
            upto,
            each: due.range(low..).copied().collect(),
        })
    }
}

/// What acknowledges one attempt of a RabbitMQ delivery: its delivery tag
/// on the channel that received it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct DeliveryTag {
    generation: u64,
    tag: u64,
}

impl fmt::Debug for DeliveryTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DeliveryTag({}.{})", self.generation, self.tag)
    }
}

impl fmt::Debug for RabbitSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RabbitSource")
            .field("url", &self.shared.settings.url)
            .field("queue", &self.shared.settings.queue)
            .finish_non_exhaustive()
    }
}

impl RabbitSource {
    /// Connects to RabbitMQ and checks that the queue exists and is one the
    /// receiver can consume (a quorum queue with a delivery limit and a
    /// dead-letter exchange), before anything is consumed. One attempt, each call within `timeout`:
    /// [`SourceError::is_retryable`](crate::source::SourceError::is_retryable)
    /// says whether to try again.
    pub async fn connect(
        settings: &RabbitSettings,
        timeout: Duration,
    ) -> Result<Self, RabbitError> {
        let mut source = Self {
            shared: Arc::new(Shared {
                settings: settings.clone(),
                timeout,
                name: format!("result-inbox {}", settings.queue),
                live: Mutex::new(None),
                generations: AtomicU64::new(0),
                attempts_allowed: None,
                beat: AckBeat::new(),
            }),
        };
        source.check().await?;
        let live = source.live().await?;
        let found = suitable(&live.link, &settings.queue, timeout).await?;
        if let Some(shared) = Arc::get_mut(&mut source.shared) {
            // Not yet cloned: the limit is known before any delivery.
            shared.attempts_allowed = found
                .delivery_limit
                .and_then(|limit| u32::try_from(limit.saturating_add(1)).ok());
        }
        Ok(source)
    }

    /// The deliveries the queue allows a message (its delivery limit + 1).
    pub fn attempts_allowed(&self) -> Option<u32> {
        self.shared.attempts_allowed
    }

    /// The queue.
    pub fn queue_name(&self) -> &str {
        &self.shared.settings.queue
    }

    /// Asks the server whether the queue exists (a passive declare),
    /// returning how many messages it holds ready.
    pub async fn check(&self) -> Result<u32, RabbitError> {
        let live = self.live().await?;
        let settings = &self.shared.settings;
        let ready = required(
            &live.link,
            &settings.queue,
            settings.url.vhost(),
            self.shared.timeout,
        )
        .await;
        // A queue that is not there is the server's answer; anything else
        // may have left the link unusable.
        if let Err(e) = &ready {
            if !matches!(e, RabbitError::UnknownQueue { .. }) {
                self.discard(&live);
            }
        }
        ready
    }

    /// The open link, or a new one when there is none or it closed.
    async fn live(&self) -> Result<Arc<Live>, RabbitError> {
        let mut live = self.shared.live.lock().await;
        if let Some(current) = live.as_ref().filter(|l| l.link.is_open()) {
            return Ok(current.clone());
        }
        if let Some(old) = live.take() {
            old.link.close().await;
        }
        let link = open(
            &self.shared.settings.url,
            &self.shared.name,
            self.shared.timeout,
        )
        .await?;
        let generation = self.shared.generations.fetch_add(1, Ordering::Relaxed) + 1;
        let opened = Arc::new(Live {
            link,
            generation,
            acks: Default::default(),
        });
        *live = Some(opened.clone());
        Ok(opened)
    }

    /// Stops using `live`: a call on it failed or was not answered, and a
    /// channel left waiting for an answer cannot be trusted with the next
    /// one. What was unacknowledged on it goes back to the queue when it
    /// closes.
    fn discard(&self, live: &Arc<Live>) {
        let shared = self.shared.clone();
        let generation = live.generation;
        tokio::spawn(async move {
            let mut current = shared.live.lock().await;
            if current.as_ref().is_some_and(|l| l.generation == generation) {
                if let Some(old) = current.take() {
                    drop(current);
                    old.link.close().await;
                }
            }
        });
    }

    /// The link whose channel received the delivery `proof` settles, if it
    /// is still open.
    async fn live_for(&self, proof: &DeliveryTag) -> Result<Arc<Live>, RabbitError> {
        let live = self.shared.live.lock().await;
        live.as_ref()
            .filter(|l| l.generation == proof.generation && l.link.is_open())
            .cloned()
            .ok_or(RabbitError::ChannelGone)
    }

    /// Settles the delivery `proof` names on the channel that received it
    /// (`ChannelGone` when that channel has closed).
    async fn settle(&self, proof: &DeliveryTag, how: Settle) -> Result<(), RabbitError> {
        let live = self.live_for(proof).await?;
        let channel = &live.link.channel;
        let (sent, what) = match how {
            Settle::Reject { requeue } => (
                channel
                    .basic_reject(BasicRejectArguments::new(proof.tag, requeue))
                    .await,
                "rejecting",
            ),
            Settle::Nack => (
                channel
                    .basic_nack(BasicNackArguments::new(proof.tag, false, true))
                    .await,
                "returning",
            ),
        };
        // Only now, with its frame ahead of any later acknowledgement's on
        // the channel, may a `multiple` acknowledgement pass over it.
        live.acks().settled(proof.tag);
        sent.map_err(|e| live.link.error(what, &e))
    }

    /// Acknowledges the delivery `proof` names on the next beat, together
    /// with those of the same channel acknowledged within it.
    async fn acknowledge(&self, proof: &DeliveryTag) -> Result<(), RabbitError> {
        let live = self.live_for(proof).await?;
        live.acks().acked(proof.tag);
        self.shared.beat.wait().await;
        let Some(due) = live.acks().take(proof.tag) else {
            // Sent on this beat by another acknowledgement's call.
            return Ok(());
        };
        let channel = &live.link.channel;
        let sent = async {
            if let Some((upto, multiple)) = due.upto {
                channel
                    .basic_ack(BasicAckArguments::new(upto, multiple))
                    .await?;
            }
            for tag in due.each {
                channel
                    .basic_ack(BasicAckArguments::new(tag, false))
                    .await?;
            }
            Ok(())
        };
        sent.await
            .map_err(|e: amqprs::error::Error| live.link.error("acknowledging", &e))
    }

    async fn call<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, amqprs::error::Error>>,
    ) -> Result<T, amqprs::error::Error> {
        match tokio::time::timeout(self.shared.timeout, call).await {
            Ok(done) => done,
            Err(_) => Err(amqprs::error::Error::NetworkError(format!(
                "no answer within {:?}",
                self.shared.timeout
            ))),
        }
    }
}

impl Source for RabbitSource {
    type Proof = DeliveryTag;
    type Stream = RabbitStream;
    type Error = RabbitError;

    fn subscription(&self) -> String {
        format!(
            "queue {} on {}",
            self.shared.settings.queue,
            self.shared.settings.url.shown()
        )
    }

    fn system(&self) -> &'static str {
        "rabbitmq"
    }

    fn destination(&self) -> String {
        self.shared.settings.queue.clone()
    }

    async fn open(&self) -> Result<RabbitStream, RabbitError> {
        // The queue may have been deleted since start-up.
        self.check().await?;
        let live = self.live().await?;
        Ok(RabbitStream {
            source: self.clone(),
            live,
            consumer: Consumer::Idle,
        })
    }

    async fn ack(&self, _id: &DeliveryId, proof: &DeliveryTag) -> Result<AckOutcome, RabbitError> {
        self.acknowledge(proof).await?;
        // AMQP does not answer an acknowledgement: one that the channel
        // took is as confirmed as it gets. If the channel closes before
        // the server reads it, the delivery comes again as a duplicate.
        Ok(AckOutcome::Acked)
    }

    async fn terminate(&self, _id: &DeliveryId, proof: &DeliveryTag) -> Result<bool, RabbitError> {
        // Without requeue: to the dead-letter queue at once, whatever the
        // delivery limit.
        match self.settle(proof, Settle::Reject { requeue: false }).await {
            Err(RabbitError::ChannelGone) => Ok(false),
            settled => settled.map(|()| true),
        }
    }

    async fn release(&self, _id: &DeliveryId, proof: &DeliveryTag) -> Result<bool, RabbitError> {
        // Never attempted: the return that does not count, from 4.3 on.
        match self.settle(proof, Settle::Nack).await {
            Err(RabbitError::ChannelGone) => Ok(false),
            settled => settled.map(|()| true),
        }
    }

    async fn shutdown(&self) {
        // Closing the connection is answered only after every frame before
        // it was written: the acknowledgements handed to the channel leave
        // before the process may exit. What is unacknowledged goes back.
        if let Some(live) = self.shared.live.lock().await.take() {
            live.link.close().await;
        }
    }

    async fn retry(&self, _id: &DeliveryId, proof: &DeliveryTag) -> Result<bool, RabbitError> {
        // No lease runs out on RabbitMQ: a delivery held is held until the
        // channel closes. Held for the pause first, so that a failing
        // delivery does not spend its whole limit in a moment.
        tokio::time::sleep(self.shared.settings.retry_after).await;
        // `basic.reject` with requeue: the return that counts toward the
        // delivery limit on every RabbitMQ version (`docs/rabbitmq.md`).
        match self.settle(proof, Settle::Reject { requeue: true }).await {
            // The channel closed: the server has returned it already.
            Err(RabbitError::ChannelGone) => Ok(true),
            settled => settled.map(|()| true),
        }
    }
}

/// How a delivery is given back.
enum Settle {
    /// `basic.reject`: with requeue, a return that counts toward the
    /// delivery limit; without, to the dead-letter queue.
    Reject { requeue: bool },
    /// `basic.nack` with requeue: from RabbitMQ 4.3 on, a return that
    /// does not count.
    Nack,
}

/// One consumer of the queue on the source's channel.
pub struct RabbitStream {
    source: RabbitSource,
    live: Arc<Live>,
    consumer: Consumer,
}

/// Where a stream's consumer is: not asked for yet, being started (a
/// quorum queue that is electing or recovering may take a while to
/// answer, longer than a grant may take), or started.
enum Consumer {
    Idle,
    Starting(JoinHandle<Result<Started, RabbitError>>),
    Started(Started),
}

type Started = (String, mpsc::UnboundedReceiver<ConsumerMessage>);

impl fmt::Debug for RabbitStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let consumer = match &self.consumer {
            Consumer::Idle => "idle",
            Consumer::Starting(_) => "starting",
            Consumer::Started((tag, _)) => tag.as_str(),
        };
        f.debug_struct("RabbitStream")
            .field("queue", &self.source.shared.settings.queue)
            .field("channel", &self.live.generation)
            .field("consumer", &consumer)
            .finish()
    }
}

impl RabbitStream {
    fn delivery(&self, message: ConsumerMessage) -> Option<Incoming<DeliveryTag>> {
        let deliver = message.deliver?;
        let proof = DeliveryTag {
            generation: self.live.generation,
            tag: deliver.delivery_tag(),
        };
        self.live.acks().delivered(proof.tag);
        let properties = message.basic_properties;
        let headers = properties.as_ref().and_then(|p| p.headers());
        let queue = &self.source.shared.settings.queue;
        let id = match properties.as_ref().and_then(|p| p.message_id()) {
            Some(message_id) => format!("{queue}:{message_id}"),
            None => format!("{queue}#{}.{}", proof.generation, proof.tag),
        };
        // A quorum queue counts the earlier deliveries of a message in
        // `x-delivery-count` (absent on the first).
        let earlier = headers
            .and_then(|h| integer(h, "x-delivery-count"))
            .unwrap_or(0);
        let attempt = u32::try_from(earlier.saturating_add(1)).unwrap_or(u32::MAX);
        let body = Bytes::from(message.content.unwrap_or_default());
        let mut delivery = Delivery::new(DeliveryId::new(id), body)
            .with_attempt(attempt)
            .with_trace(headers.and_then(trace_context));
        if let Some(allowed) = self.source.attempts_allowed() {
            delivery = delivery.with_attempts_allowed(allowed);
        }
        Some(Incoming::Delivery(delivery, proof))
    }

    /// A keepalive while the link is open.
    fn keepalive(&self) -> Result<Incoming<DeliveryTag>, RabbitError> {
        if self.live.link.is_open() {
            Ok(Incoming::Keepalive)
        } else {
            Err(RabbitError::Disconnected("the connection closed".into()))
        }
    }

    /// The stream broke: its link is not used again.
    fn broke(&self, e: RabbitError) -> Option<Result<Incoming<DeliveryTag>, RabbitError>> {
        self.source.discard(&self.live);
        Some(Err(e))
    }
}

impl LeaseStream for RabbitStream {
    type Proof = DeliveryTag;
    type Error = RabbitError;

    async fn grant(&mut self, _n: u32) -> Result<(), RabbitError> {
        // The first grant starts the consumer; from then on the prefetch
        // window is the credit, given back by each settled delivery.
        if !matches!(self.consumer, Consumer::Idle) {
            return Ok(());
        }
        let source = self.source.clone();
        let live = self.live.clone();
        self.consumer = Consumer::Starting(tokio::spawn(async move {
            let settings = &source.shared.settings;
            let channel = &live.link.channel;
            let qos = BasicQosArguments::new(0, settings.window, false);
            source
                .call(channel.basic_qos(qos))
                .await
                .map_err(|e| live.link.error("setting the prefetch", &e))?;
            let mut consume = BasicConsumeArguments::new(&settings.queue, "");
            consume.manual_ack(true);
            source
                .call(channel.basic_consume_rx(consume.finish()))
                .await
                .map_err(|e| live.link.error("consuming", &e))
        }));
        Ok(())
    }

    async fn next(&mut self) -> Option<Result<Incoming<DeliveryTag>, RabbitError>> {
        loop {
            let rx = match &mut self.consumer {
                Consumer::Started((_, rx)) => rx,
                Consumer::Idle => {
                    // Not consuming before the first grant: nothing comes.
                    tokio::time::sleep(IDLE_KEEPALIVE).await;
                    return Some(self.keepalive());
                }
                Consumer::Starting(starting) => {
                    match tokio::time::timeout(IDLE_KEEPALIVE, starting).await {
                        Err(_) => return Some(self.keepalive()),
                        Ok(Ok(Ok(started))) => {
                            self.consumer = Consumer::Started(started);
                            continue;
                        }
                        Ok(Ok(Err(e))) => return self.broke(e),
                        Ok(Err(e)) => return self.broke(RabbitError::Disconnected(e.to_string())),
                    }
                }
            };
            match tokio::time::timeout(IDLE_KEEPALIVE, rx.recv()).await {
                Ok(Some(message)) => {
                    if let Some(incoming) = self.delivery(message) {
                        return Some(Ok(incoming));
                    }
                }
                // The consumer ended: cancelled by the server (the queue
                // was deleted), or its channel or connection closed.
                Ok(None) if self.live.link.is_open() => return None,
                Ok(None) => {
                    let closed = amqprs::error::Error::ChannelUseError("closed".into());
                    let e = self.live.link.error("consuming", &closed);
                    return self.broke(e);
                }
                Err(_) => return Some(self.keepalive()),
            }
        }
    }

    async fn close(self) {
        // Cancelled, not closed: deliveries still in hand are acknowledged
        // on this channel after the consumer stopped.
        let (tag, mut rx) = match self.consumer {
            Consumer::Idle => return,
            Consumer::Started(started) => started,
            Consumer::Starting(starting) => {
                // Its answer decides whether there is a consumer to cancel;
                // a channel that does not answer is closed instead.
                match tokio::time::timeout(self.source.shared.timeout, starting).await {
                    Ok(Ok(Ok(started))) => started,
                    Ok(_) => return,
                    Err(_) => {
                        self.source.discard(&self.live);
                        return;
                    }
                }
            }
        };
        let channel = &self.live.link.channel;
        let cancel = BasicCancelArguments::new(&tag);
        if self
            .source
            .call(channel.basic_cancel(cancel))
            .await
            .is_err()
        {
            self.source.discard(&self.live);
            return;
        }
        // What the server sent before it took the cancel was never handed
        // to the consumer: given back now (`basic.nack`, which from 4.3 on
        // does not count toward the limit), or it would stay this
        // channel's, unacknowledged, until the channel closes.
        while let Ok(Some(message)) =
            tokio::time::timeout(self.source.shared.timeout, rx.recv()).await
        {
            let Some(deliver) = message.deliver else {
                continue;
            };
            let nack = BasicNackArguments::new(deliver.delivery_tag(), false, true);
            if channel.basic_nack(nack).await.is_err() {
                self.source.discard(&self.live);
                return;
            }
        }
    }
}
