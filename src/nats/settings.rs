//! Where the receiver's deliveries are on NATS, and how it logs in.

use std::fmt;
use std::path::PathBuf;

use async_nats::ServerAddr;

use super::NatsError;
use crate::ids::QueueId;

/// A secret used to log in to NATS. Its `Debug` is redacted.
#[derive(Clone)]
pub struct NatsSecret(pub(super) String);

impl NatsSecret {
    /// Wraps a token.
    pub fn new(secret: impl Into<String>) -> Self {
        Self(secret.into())
    }
}

impl fmt::Debug for NatsSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("NatsSecret(<redacted>)")
    }
}

/// How the receiver logs in to NATS.
#[derive(Debug, Clone, Default)]
pub enum NatsAuth {
    /// No credentials (or user and password in the URL).
    #[default]
    None,
    /// A token (`NATS_TOKEN`).
    Token(NatsSecret),
    /// A credentials file with a user JWT and its NKey seed
    /// (`NATS_CREDS_FILE`).
    CredsFile(PathBuf),
}

/// The NATS servers and how to log in to them: what every connection of
/// the receiver needs, whether it consumes a stream or publishes to one.
#[derive(Debug, Clone)]
pub struct NatsServers {
    /// The server(s), e.g. `nats://127.0.0.1:4222` or `tls://nats.example.com`.
    pub url: String,
    /// How to log in.
    pub auth: NatsAuth,
    /// PEM file of a private CA trusted for the server's certificate.
    pub ca_file: Option<PathBuf>,
    /// Refuse to talk to the server without TLS (also implied by `tls://`).
    pub require_tls: bool,
}

/// Where the receiver's deliveries are on NATS and how to reach them.
#[derive(Debug, Clone)]
pub struct NatsSettings {
    /// The servers and the login.
    pub servers: NatsServers,
    /// The JetStream stream holding the queue's events.
    pub stream: String,
    /// The durable pull consumer of that stream this receiver consumes.
    pub consumer: String,
    /// The subject of the queue's events; the consumer's filter subject
    /// must be exactly this.
    pub subject: String,
    /// The queue whose events these are.
    pub queue_id: QueueId,
}

impl NatsSettings {
    /// The subject of a queue's events when none is configured:
    /// `orbit.results.<queue_id>`.
    pub fn default_subject(queue: &QueueId) -> String {
        format!("orbit.results.{queue}")
    }

    /// The servers' URL as it may be shown: any `user:password@` removed.
    pub fn shown_url(&self) -> String {
        self.servers.shown_url()
    }
}

impl NatsServers {
    /// The servers of `url` (a list, comma-separated), without a login,
    /// a private CA or required TLS.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            auth: NatsAuth::None,
            ca_file: None,
            require_tls: false,
        }
    }

    /// The URL as it may be shown: any `user:password@` removed.
    pub fn shown_url(&self) -> String {
        shown_url(&self.url)
    }

    /// The login the URL carries (`nats://user:password@host` or
    /// `nats://token@host`, percent-encoded as in any URL), from the first
    /// server that has one. The NATS client does not send what is in the
    /// address itself, so the receiver takes it apart.
    pub fn url_login(&self) -> Option<UrlLogin> {
        self.servers().find_map(url_login)
    }

    /// The servers of the list, as the client is given them: each without
    /// the login it may carry, which goes to every server through the
    /// client's options instead ([`url_login`](Self::url_login)), so that
    /// a login written in one URL serves the others too, and no address the
    /// client holds (and may log) carries a secret. An address the client
    /// cannot read is a refusal naming it without its credentials.
    pub(super) fn server_addrs(&self) -> Result<Vec<ServerAddr>, NatsError> {
        self.servers()
            .map(|server| {
                let refused = |reason: String| NatsError::Refused {
                    url: shown_url(server),
                    reason,
                };
                let mut url = server
                    .parse::<ServerAddr>()
                    .map_err(|e| refused(e.to_string()))?
                    .into_inner();
                // Neither can fail on an address that has a host.
                let _ = url.set_username("");
                let _ = url.set_password(None);
                ServerAddr::from_url(url).map_err(|e| refused(e.to_string()))
            })
            .collect()
    }

    /// Whether any server of the list is to be reached over TLS only
    /// (`tls://`): then every one is, so that the connection never falls
    /// back to plain text on another node.
    pub(super) fn any_tls_only(&self) -> bool {
        self.servers().any(|server| server.starts_with("tls://"))
    }

    /// The list's servers, trimmed.
    fn servers(&self) -> impl Iterator<Item = &str> {
        self.url.split(',').map(str::trim)
    }

    /// Whether `url` can be read as a list of NATS servers: each
    /// `scheme://[user:password@]host[:port]` with the scheme `nats`,
    /// `tls`, `ws` or `wss`, or `host:port`. The problem names the server
    /// without its credentials. An address that cannot be read is a
    /// configuration error, where a server that does not answer is only
    /// waited for.
    pub fn check_servers(url: &str) -> Result<(), String> {
        for server in url.split(',').map(str::trim) {
            let shown = shown_url(server);
            let (scheme, rest) = match server.split_once("://") {
                Some((scheme, rest)) => (Some(scheme), rest),
                None => (None, server),
            };
            if let Some(scheme) = scheme {
                if !matches!(scheme, "nats" | "tls" | "ws" | "wss") {
                    return Err(format!(
                        "{shown:?}: the scheme must be nats://, tls://, ws:// or wss://"
                    ));
                }
            }
            let address = rest.rsplit_once('@').map_or(rest, |(_, address)| address);
            let address = address.trim_end_matches('/');
            let (host, port) = match address.rsplit_once(':') {
                Some((host, port)) if !host.ends_with(':') && !address.ends_with(']') => {
                    (host, Some(port))
                }
                _ => (address, None),
            };
            let host_ok = !host.is_empty()
                && host.chars().all(|c| {
                    c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '[' | ']' | ':')
                });
            let port_ok = port.is_none_or(|p| p.parse::<u16>().is_ok_and(|p| p > 0));
            if !host_ok || !port_ok || (scheme.is_none() && port.is_none()) {
                return Err(format!(
                    "{shown:?} is not a server address (nats://host:port, tls://host:port or host:port)"
                ));
            }
        }
        Ok(())
    }
}

/// A login written into a NATS URL. Its `Debug` is redacted.
#[derive(Clone)]
pub enum UrlLogin {
    /// `user:password@`.
    UserPassword {
        /// The user.
        user: String,
        /// The password.
        password: NatsSecret,
    },
    /// `token@`.
    Token(NatsSecret),
}

impl fmt::Debug for UrlLogin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UrlLogin::UserPassword { user, .. } => write!(f, "UserPassword({user}, <redacted>)"),
            UrlLogin::Token(_) => f.write_str("Token(<redacted>)"),
        }
    }
}

fn url_login(server: &str) -> Option<UrlLogin> {
    let rest = server.split_once("://").map_or(server, |(_, rest)| rest);
    let (login, _) = rest.rsplit_once('@')?;
    Some(match login.split_once(':') {
        Some((user, password)) => UrlLogin::UserPassword {
            user: percent_decoded(user),
            password: NatsSecret(percent_decoded(password)),
        },
        None => UrlLogin::Token(NatsSecret(percent_decoded(login))),
    })
}

/// `%XX` in a URL's user information, decoded.
fn percent_decoded(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |at: usize| {
            bytes
                .get(at)
                .and_then(|&b| (b as char).to_digit(16))
                .map(|d| d as u8)
        };
        match (bytes[i], hex(i + 1), hex(i + 2)) {
            (b'%', Some(hi), Some(lo)) => {
                out.push(hi * 16 + lo);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn shown_url(url: &str) -> String {
    url.split(',')
        .map(|server| match (server.find("://"), server.rfind('@')) {
            (Some(scheme), Some(at)) if at > scheme => {
                format!("{}<redacted>@{}", &server[..scheme + 3], &server[at + 1..])
            }
            (None, Some(at)) => format!("<redacted>@{}", &server[at + 1..]),
            _ => server.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_addresses_are_read_as_nats_reads_them_and_anything_else_is_named() {
        for good in [
            "nats://127.0.0.1:4222",
            "tls://nats.example.com",
            "nats://alice:s3cret@h1:4222, nats://h2:4222",
            "localhost:4222",
            "ws://[::1]:8080",
            "nats://[::1]",
        ] {
            assert_eq!(NatsServers::check_servers(good), Ok(()), "{good}");
        }
        for bad in [
            "garbage",
            "",
            "http://h:4222",
            "nats://:4222",
            "nats://h:port",
            "h:0",
        ] {
            assert!(NatsServers::check_servers(bad).is_err(), "{bad}");
        }
        let problem = NatsServers::check_servers("nats://alice:s3cret@h 1:4222").unwrap_err();
        assert!(!problem.contains("s3cret"), "{problem}");
    }

    fn settings(url: &str) -> NatsServers {
        NatsServers::new(url)
    }

    #[test]
    fn the_login_in_the_url_is_taken_apart_and_decoded() {
        match settings("nats://h1:4222,nats://alice:s3%40cret@h2:4222").url_login() {
            Some(UrlLogin::UserPassword { user, password }) => {
                assert_eq!((user.as_str(), password.0.as_str()), ("alice", "s3@cret"));
            }
            other => panic!("{other:?}"),
        }
        match settings("tls://t0ken@h:4222").url_login() {
            Some(UrlLogin::Token(token)) => assert_eq!(token.0, "t0ken"),
            other => panic!("{other:?}"),
        }
        assert!(settings("nats://h:4222").url_login().is_none());
        let shown = format!("{:?}", settings("nats://alice:pw@h").url_login());
        assert!(!shown.contains("pw"), "{shown}");
    }

    #[test]
    fn every_server_of_the_list_goes_to_the_client_without_its_login() {
        let mut settings = settings("nats://alice:s3cret@h1:4222, tls://h2:4222,h3:4223");
        let servers = settings.server_addrs().unwrap();
        let urls: Vec<&str> = servers.iter().map(|server| server.as_url_str()).collect();
        assert_eq!(urls, ["nats://h1:4222", "tls://h2:4222", "nats://h3:4223"]);
        assert!(settings.any_tls_only());
        match settings.url_login() {
            Some(UrlLogin::UserPassword { user, password }) => {
                assert_eq!((user.as_str(), password.0.as_str()), ("alice", "s3cret"));
            }
            other => panic!("{other:?}"),
        }

        settings.url = "nats://h1:4222,nats://h2:4222".into();
        assert!(!settings.any_tls_only());
        settings.url = "nats://alice:s3cret@h1:port".into();
        let refused = settings.server_addrs().unwrap_err().to_string();
        assert!(refused.contains("nats://<redacted>@h1:port"), "{refused}");
        assert!(!refused.contains("s3cret"), "{refused}");
    }

    #[test]
    fn a_shown_url_never_carries_credentials() {
        assert_eq!(
            shown_url("nats://alice:s3cret@10.0.0.1:4222"),
            "nats://<redacted>@10.0.0.1:4222"
        );
        assert_eq!(
            shown_url("tls://a:b@h1:4222,nats://h2:4222"),
            "tls://<redacted>@h1:4222,nats://h2:4222"
        );
        assert_eq!(shown_url("token@h:4222"), "<redacted>@h:4222");
        assert_eq!(shown_url("nats://h:4222"), "nats://h:4222");
    }

    #[test]
    fn a_secret_is_redacted_in_debug() {
        let shown = format!("{:?}", NatsAuth::Token(NatsSecret::new("s3cret")));
        assert!(!shown.contains("s3cret"), "{shown}");
    }
}
