//! Publishing to RabbitMQ: each event, persistent, through the default
//! exchange to the queue of its name, with the event id as `message_id`,
//! on a channel in confirm mode; sent once the server confirmed it and did
//! not return it. RabbitMQ keeps no window of ids: an event the bridge
//! publishes again (its Orbit acknowledgement was lost) is a second
//! message, which the receiver's inbox finds a duplicate.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use amqprs::callbacks::{ChannelCallback, DefaultConnectionCallback};
use amqprs::channel::{BasicPublishArguments, Channel, ConfirmSelectArguments};
use amqprs::connection::{Connection, OpenConnectionArguments};
use amqprs::{Ack, BasicProperties, Cancel, CloseChannel, FieldTable, FieldValue, Nack, Return};
use tokio::sync::watch;

use super::{percent_decoded, Outgoing};

/// How long a publish waits for the server's confirm.
const CONFIRM_TIMEOUT: Duration = Duration::from_secs(10);

/// An `amqp://user:password@host:port/vhost` address. Its `Debug` and
/// `Display` leave the password out.
#[derive(Clone, PartialEq, Eq)]
pub struct AmqpAddress {
    host: String,
    port: u16,
    user: String,
    password: String,
    vhost: String,
}

impl AmqpAddress {
    /// Reads `amqp://[user[:password]@]host[:port][/vhost]` (`guest`
    /// without a user, `/` without a vhost, `%2f` for `/` in one).
    pub fn parse(url: &str) -> Result<Self, String> {
        let problem = |why: &str| format!("AMQP_URL {}: {why}", shown(url));
        let Some(rest) = url.strip_prefix("amqp://") else {
            return Err(problem(
                "orbit-dev bridge speaks amqp:// (no TLS): give amqp://host:port/vhost",
            ));
        };
        let (authority, vhost) = rest.split_once('/').unwrap_or((rest, ""));
        let (login, address) = match authority.rsplit_once('@') {
            Some((login, address)) => (Some(login), address),
            None => (None, authority),
        };
        let (user, password) = match login.map(|l| l.split_once(':').unwrap_or((l, ""))) {
            Some((user, password)) => (percent_decoded(user), percent_decoded(password)),
            None => ("guest".to_owned(), "guest".to_owned()),
        };
        let (host, port) = match address.rsplit_once(':') {
            Some((host, port)) => (
                host,
                port.parse()
                    .map_err(|_| problem("the port is not a number"))?,
            ),
            None => (address, 5672),
        };
        if host.is_empty() {
            return Err(problem("no host"));
        }
        Ok(Self {
            host: host.to_owned(),
            port,
            user,
            password,
            vhost: if vhost.is_empty() {
                "/".to_owned()
            } else {
                percent_decoded(vhost)
            },
        })
    }
}

/// `url` with the password of its login replaced by `<redacted>`.
fn shown(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => match rest.split_once('@') {
            Some((login, address)) => {
                let user = login.split(':').next().unwrap_or_default();
                format!("{scheme}://{user}:<redacted>@{address}")
            }
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

impl fmt::Display for AmqpAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let vhost = if self.vhost == "/" { "" } else { &self.vhost };
        write!(
            f,
            "amqp://{}@{}:{}/{vhost}",
            self.user, self.host, self.port
        )
    }
}

impl fmt::Debug for AmqpAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AmqpAddress({self})")
    }
}

/// The server's answer to the latest publish.
#[derive(Clone, Copy, Default)]
struct Answer {
    tag: u64,
    taken: bool,
}

/// A connection and a channel in confirm mode.
struct Link {
    connection: Connection,
    channel: Channel,
    answers: watch::Receiver<Answer>,
    returned: Arc<Mutex<Option<String>>>,
    published: u64,
}

/// The server, the queue, and the link while it works: one that failed is
/// dropped and opened again at the next publish.
pub(super) struct Outlet {
    url: AmqpAddress,
    queue: String,
    link: Option<Link>,
}

impl Outlet {
    /// Connects, so that a server that cannot be reached is said at once.
    pub(super) async fn connect(url: &AmqpAddress, queue: &str) -> Result<Self, String> {
        let link = open(url).await?;
        Ok(Self {
            url: url.clone(),
            queue: queue.to_owned(),
            link: Some(link),
        })
    }

    /// Publishes one event and waits for the server's confirm.
    pub(super) async fn publish(&mut self, out: &Outgoing<'_>) -> Result<(), String> {
        let mut link = match self.link.take() {
            Some(link) if link.channel.is_open() => link,
            _ => open(&self.url).await?,
        };
        match publish(&mut link, &self.queue, out).await {
            Ok(()) => {
                tracing::info!(event = %out.id, delivery = %out.delivery, queue = %self.queue, "published");
                self.link = Some(link);
                Ok(())
            }
            Err(e) => {
                let _ = link.connection.close().await;
                Err(e)
            }
        }
    }
}

async fn open(url: &AmqpAddress) -> Result<Link, String> {
    let mut args = OpenConnectionArguments::new(&url.host, url.port, &url.user, &url.password);
    args.virtual_host(&url.vhost)
        .connection_name("orbit-dev bridge");
    let unreachable = |e: amqprs::error::Error| format!("cannot reach RabbitMQ at {url}: {e}");
    let connection = Connection::open(&args).await.map_err(unreachable)?;
    connection
        .register_callback(DefaultConnectionCallback)
        .await
        .map_err(unreachable)?;
    let channel = connection.open_channel(None).await.map_err(unreachable)?;
    let (answer, answers) = watch::channel(Answer::default());
    let returned = Arc::new(Mutex::new(None));
    channel
        .register_callback(Confirms {
            answer,
            returned: returned.clone(),
        })
        .await
        .map_err(unreachable)?;
    channel
        .confirm_select(ConfirmSelectArguments::default())
        .await
        .map_err(unreachable)?;
    Ok(Link {
        connection,
        channel,
        answers,
        returned,
        published: 0,
    })
}

async fn publish(link: &mut Link, queue: &str, out: &Outgoing<'_>) -> Result<(), String> {
    let mut headers = FieldTable::new();
    if let Some(trace) = &out.trace {
        let mut put = |name: &str, value: &str| {
            if let Ok(name) = name.try_into() {
                headers.insert(name, FieldValue::from(value.to_owned()));
            }
        };
        put("traceparent", &trace.traceparent);
        if let Some(tracestate) = &trace.tracestate {
            put("tracestate", tracestate);
        }
    }
    let mut properties = BasicProperties::default();
    properties
        .with_persistence(true)
        .with_content_type("application/json")
        .with_message_id(&out.id)
        .with_headers(headers);
    *link.returned.lock().unwrap_or_else(|e| e.into_inner()) = None;
    link.channel
        .basic_publish(
            properties,
            out.event.as_bytes().to_vec(),
            BasicPublishArguments::new("", queue)
                .mandatory(true)
                .finish(),
        )
        .await
        .map_err(|e| format!("cannot publish to queue {queue}: {e}"))?;
    link.published += 1;
    let tag = link.published;
    let answer = match tokio::time::timeout(
        CONFIRM_TIMEOUT,
        link.answers.wait_for(|a| a.tag >= tag),
    )
    .await
    {
        Ok(Ok(answer)) => *answer,
        Ok(Err(_)) | Err(_) => {
            return Err(format!(
                "RabbitMQ did not confirm the publish to queue {queue} within {CONFIRM_TIMEOUT:?}"
            ))
        }
    };
    if !answer.taken {
        return Err(format!("RabbitMQ refused the publish to queue {queue}"));
    }
    if let Some(why) = link
        .returned
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
    {
        return Err(format!(
            "no queue {queue} took the event ({why}); create it with `receiver subscribe --source rabbitmq`"
        ));
    }
    Ok(())
}

/// The server's answers on the channel in confirm mode.
struct Confirms {
    answer: watch::Sender<Answer>,
    returned: Arc<Mutex<Option<String>>>,
}

#[async_trait::async_trait]
impl ChannelCallback for Confirms {
    async fn close(
        &mut self,
        _: &Channel,
        close: CloseChannel,
    ) -> Result<(), amqprs::error::Error> {
        tracing::warn!(code = close.reply_code(), reason = %close.reply_text(), "RabbitMQ closed the channel");
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
            Some(format!("{} {}", ret.reply_code(), ret.reply_text()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_read_and_shown_without_its_password() {
        let url = AmqpAddress::parse("amqp://bridge:s%40cret@10.0.0.1:5673/orders").unwrap();
        assert_eq!(url.password, "s@cret");
        assert_eq!(url.to_string(), "amqp://bridge@10.0.0.1:5673/orders");
        assert!(!format!("{url:?}").contains("cret"));
        let plain = AmqpAddress::parse("amqp://127.0.0.1").unwrap();
        assert_eq!(plain.to_string(), "amqp://guest@127.0.0.1:5672/");
        let tls = AmqpAddress::parse("amqps://bridge:s3cret@h/").unwrap_err();
        assert!(tls.contains("amqp://") && !tls.contains("s3cret"), "{tls}");
        let port = AmqpAddress::parse("amqp://bridge:s3cret@h:port/").unwrap_err();
        assert!(port.contains("port") && !port.contains("s3cret"), "{port}");
    }
}
