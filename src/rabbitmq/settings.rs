//! Where the receiver's deliveries are on RabbitMQ, and how it logs in.

use std::fmt;
use std::time::Duration;

use super::RabbitError;
use crate::ids::QueueId;

/// A RabbitMQ address, `amqp://user:password@host:port/vhost` or
/// `amqps://…`, read as RabbitMQ's URI specification reads it. Its `Debug`
/// and [`shown`](AmqpUrl::shown) leave the password out.
#[derive(Clone, PartialEq, Eq)]
pub struct AmqpUrl {
    pub(super) tls: bool,
    pub(super) host: String,
    pub(super) port: u16,
    pub(super) user: String,
    pub(super) password: String,
    pub(super) vhost: String,
}

impl AmqpUrl {
    /// Reads `amqp://` or `amqps://` addresses. Without a user RabbitMQ's
    /// `guest`/`guest` is used (which a server accepts from loopback only);
    /// without a path the vhost is `/`, and `%2f` spells it in a path.
    pub fn parse(url: &str) -> Result<Self, RabbitError> {
        let refused = |reason: &str| RabbitError::Address {
            url: shown(url),
            reason: reason.to_owned(),
        };
        let parsed = url::Url::parse(url).map_err(|e| refused(&e.to_string()))?;
        let tls = match parsed.scheme() {
            "amqp" => false,
            "amqps" => true,
            _ => return Err(refused("the scheme must be amqp:// or amqps://")),
        };
        let host = parsed
            .host_str()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| refused("no host"))?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        if parsed.query().is_some() || parsed.fragment().is_some() {
            return Err(refused(
                "query parameters are not read; give the address without them",
            ));
        }
        let decode = |s: &str| {
            percent_decode(s).ok_or_else(|| refused("a percent-escape is not valid UTF-8"))
        };
        let path = parsed.path();
        let vhost = match path.strip_prefix('/') {
            None | Some("") => "/".to_owned(),
            Some(rest) if rest.contains('/') => {
                return Err(refused("the vhost is one path segment; write `/` as %2f"))
            }
            Some(rest) => decode(rest)?,
        };
        let (user, password) = if parsed.username().is_empty() {
            ("guest".to_owned(), "guest".to_owned())
        } else {
            (
                decode(parsed.username())?,
                decode(parsed.password().unwrap_or(""))?,
            )
        };
        Ok(Self {
            tls,
            port: parsed.port().unwrap_or(if tls { 5671 } else { 5672 }),
            host,
            user,
            password,
            vhost,
        })
    }

    /// The address as it may be shown: scheme, user, host, port and vhost,
    /// never the password.
    pub fn shown(&self) -> String {
        let scheme = if self.tls { "amqps" } else { "amqp" };
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        let vhost = if self.vhost == "/" {
            String::new()
        } else {
            self.vhost.replace('%', "%25").replace('/', "%2f")
        };
        format!("{scheme}://{}@{host}:{}/{vhost}", self.user, self.port)
    }

    /// The virtual host.
    pub fn vhost(&self) -> &str {
        &self.vhost
    }

    /// Whether the connection is TLS (`amqps://`).
    pub fn is_tls(&self) -> bool {
        self.tls
    }
}

impl fmt::Debug for AmqpUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AmqpUrl({})", self.shown())
    }
}

/// An address as it may be shown before it could be read: whatever stands
/// between `//` and `@` is cut to the user.
fn shown(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "<an address that is not a URL>".to_owned();
    };
    match rest.split_once('@') {
        Some((login, host)) => {
            let user = login.split_once(':').map_or(login, |(user, _)| user);
            format!("{scheme}://{user}@{host}")
        }
        None => url.to_owned(),
    }
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Where the receiver's deliveries are on RabbitMQ and how to reach them.
#[derive(Debug, Clone)]
pub struct RabbitSettings {
    /// The server.
    pub url: AmqpUrl,
    /// The quorum queue holding the queue's events.
    pub queue: String,
    /// The queue whose events these are.
    pub queue_id: QueueId,
    /// How long a delivery whose attempt failed is held before it is
    /// returned to the queue (`basic.reject`), where it counts toward the
    /// delivery limit and comes again: RabbitMQ has no lease that runs out,
    /// so this is the pause between two attempts.
    pub retry_after: Duration,
    /// The prefetch of each consumer (`basic.qos`): how many deliveries
    /// the server hands out before one is settled. The receiver makes it
    /// its concurrency plus its prefetch.
    pub window: u16,
}

impl RabbitSettings {
    /// The quorum queue of a queue's events when none is configured:
    /// `orbit.results.<queue_id>`.
    pub fn default_queue(queue: &QueueId) -> String {
        format!("orbit.results.{queue}")
    }

    /// The pause between two attempts of a delivery unless told otherwise.
    pub const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(5);

    /// The settings of `queue_id`'s events in `queue` on `url`, with the
    /// default pause between attempts.
    pub fn new(url: AmqpUrl, queue: impl Into<String>, queue_id: QueueId) -> Self {
        Self {
            url,
            queue: queue.into(),
            queue_id,
            retry_after: Self::DEFAULT_RETRY_AFTER,
            window: 20,
        }
    }

    /// The dead-letter queue of the queue: where RabbitMQ moves what spent
    /// its delivery limit or was refused for good.
    pub fn dead_letter_queue(&self) -> String {
        dead_letter_queue(&self.queue)
    }
}

/// The dead-letter queue of `queue`: `<queue>.failed`.
pub fn dead_letter_queue(queue: &str) -> String {
    format!("{queue}.failed")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_gives_its_host_port_login_and_vhost() {
        let url = AmqpUrl::parse("amqp://orbit:s%40cret@mq.example.com:5673/results").unwrap();
        assert_eq!(
            (
                url.host.as_str(),
                url.port,
                url.user.as_str(),
                url.password.as_str(),
                url.vhost()
            ),
            ("mq.example.com", 5673, "orbit", "s@cret", "results")
        );
        assert!(!url.is_tls());
    }

    #[test]
    fn defaults_are_rabbitmq_s_port_guest_and_the_root_vhost() {
        let url = AmqpUrl::parse("amqps://mq.example.com").unwrap();
        assert_eq!(
            (url.port, url.user.as_str(), url.vhost(), url.is_tls()),
            (5671, "guest", "/", true)
        );
        assert_eq!(AmqpUrl::parse("amqp://h/%2f").unwrap().vhost(), "/");
        assert_eq!(AmqpUrl::parse("amqp://h/").unwrap().vhost(), "/");
    }

    #[test]
    fn the_shown_address_and_debug_never_hold_the_password() {
        let url = AmqpUrl::parse("amqp://orbit:hunter2@h:5672/a%2fb").unwrap();
        assert_eq!(url.shown(), "amqp://orbit@h:5672/a%2fb");
        assert!(!format!("{url:?}").contains("hunter2"));
        for bad in [
            "amqp://orbit:hunter2@h:5672/a/b",
            "http://orbit:hunter2@h",
            "amqp://orbit:hunter2@h?heartbeat=5",
            "amqp://orbit:hunter2@h:99999",
        ] {
            let e = AmqpUrl::parse(bad).unwrap_err().to_string();
            assert!(!e.contains("hunter2"), "{bad}: {e}");
        }
    }

    #[test]
    fn an_address_that_is_not_amqp_is_refused_naming_why() {
        let e = AmqpUrl::parse("nats://h:4222").unwrap_err().to_string();
        assert!(e.contains("amqp:// or amqps://"), "{e}");
    }
}
