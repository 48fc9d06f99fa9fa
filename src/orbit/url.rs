//! Where an Orbit deployment is.

use std::fmt;

use super::OrbitError;

/// The base URL of an Orbit deployment: `http://` or `https://`, no path.
#[derive(Clone, PartialEq, Eq)]
pub struct OrbitUrl {
    base: String,
    tls: bool,
    loopback: bool,
}

impl OrbitUrl {
    /// Parses `http://host:port` or `https://host[:port]` (a trailing `/` is
    /// accepted, any other path is not).
    pub fn parse(s: &str) -> Result<Self, OrbitError> {
        let trimmed = s.trim_end_matches('/');
        let uri: http::Uri = trimmed
            .parse()
            .map_err(|_| OrbitError::Config("not a valid URL"))?;
        let tls = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => return Err(OrbitError::Config("must start with http:// or https://")),
        };
        let host = uri.host().ok_or(OrbitError::Config("has no host"))?;
        if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
            return Err(OrbitError::Config(
                "must not have a path or query (the base URL only, e.g. https://orbit.example)",
            ));
        }
        let loopback = host == "localhost"
            || host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        Ok(Self {
            base: trimmed.to_owned(),
            tls,
            loopback,
        })
    }

    /// Whether the URL uses TLS (`https://`, and so `wss://` for streams).
    pub fn is_tls(&self) -> bool {
        self.tls
    }

    /// Whether the host is a loopback address.
    pub fn is_loopback(&self) -> bool {
        self.loopback
    }

    /// The URL of an API path.
    pub(super) fn http(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The WebSocket URL of an API path.
    pub(super) fn ws(&self, path: &str) -> String {
        let rest = self
            .base
            .split_once("://")
            .map(|(_, rest)| rest)
            .unwrap_or(&self.base);
        let scheme = if self.tls { "wss" } else { "ws" };
        format!("{scheme}://{rest}{path}")
    }
}

impl fmt::Display for OrbitUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.base)
    }
}

impl fmt::Debug for OrbitUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OrbitUrl({})", self.base)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_map_to_http_and_websocket_endpoints() {
        let url = OrbitUrl::parse("http://127.0.0.1:8080/").unwrap();
        assert_eq!(url.http("/v1/tasks"), "http://127.0.0.1:8080/v1/tasks");
        assert_eq!(url.ws("/v1/x"), "ws://127.0.0.1:8080/v1/x");
        assert!(url.is_loopback() && !url.is_tls());
        let tls = OrbitUrl::parse("https://orbit.example").unwrap();
        assert_eq!(tls.ws("/v1/x"), "wss://orbit.example/v1/x");
        assert!(tls.is_tls() && !tls.is_loopback());
    }

    #[test]
    fn urls_with_paths_or_other_schemes_are_refused() {
        for bad in [
            "ftp://h",
            "http://h/api",
            "127.0.0.1:8080",
            "http://h?x=1",
            "",
        ] {
            assert!(OrbitUrl::parse(bad).is_err(), "{bad}");
        }
    }
}
