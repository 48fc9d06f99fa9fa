//! A minimal HTTP/1.1 client for plain `http://` URLs: one request per
//! connection, the whole response read into memory. It is what the CLI's admin
//! commands and the tests need, and no more.

use std::io;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Longest a request may take, connection included.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// A base URL such as `http://127.0.0.1:8080` (an optional path prefix is
/// kept).
#[derive(Clone, Debug)]
pub struct BaseUrl {
    authority: String,
    prefix: String,
}

impl BaseUrl {
    /// Parses `http://host[:port][/prefix]`. Only plain HTTP is supported.
    pub fn parse(url: &str) -> Result<Self, String> {
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| format!("{url:?} is not an http:// URL"))?;
        let (authority, prefix) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        if authority.is_empty() || authority.contains(['@', '?', '#', ' ']) {
            return Err(format!("{url:?} has no usable host"));
        }
        Ok(BaseUrl {
            authority: authority.to_string(),
            prefix: prefix.trim_end_matches('/').to_string(),
        })
    }

    /// `host:port` as given in the URL.
    pub fn authority(&self) -> &str {
        &self.authority
    }

    /// The `ws://` URL of `path` (starting with `/`) on this server.
    pub fn ws_url(&self, path: &str) -> String {
        format!("ws://{}{}{path}", self.authority, self.prefix)
    }

    fn connect_address(&self) -> String {
        let has_port = match self.authority.rfind(':') {
            Some(i) => !self.authority[i..].contains(']'),
            None => false,
        };
        if has_port {
            self.authority.clone()
        } else {
            format!("{}:80", self.authority)
        }
    }
}

/// A response: status, headers and the whole body.
#[derive(Debug)]
pub struct HttpResponse {
    /// The status code.
    pub status: u16,
    /// Header names in lower case, with their values.
    pub headers: Vec<(String, String)>,
    /// The body, de-chunked.
    pub body: Vec<u8>,
}

impl HttpResponse {
    /// The first value of a header (name in any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as text (lossy).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body parsed as JSON.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_slice(&self.body)
    }

    /// The `error.code` of an error body, if the body is one.
    pub fn error_code(&self) -> Option<String> {
        let value: serde_json::Value = self.json().ok()?;
        Some(value.get("error")?.get("code")?.as_str()?.to_string())
    }
}

/// Sends one request and reads the whole response. `path` starts with `/`;
/// a body is sent as `application/json`.
pub async fn send(
    base: &BaseUrl,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> io::Result<HttpResponse> {
    tokio::time::timeout(REQUEST_TIMEOUT, exchange(base, method, path, headers, body))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "the request timed out"))?
}

async fn exchange(
    base: &BaseUrl,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> io::Result<HttpResponse> {
    let mut stream = TcpStream::connect(base.connect_address()).await?;
    let mut request = format!(
        "{method} {}{path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n",
        base.prefix, base.authority
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    if let Some(body) = body {
        request.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    request.push_str("\r\n");
    let mut bytes = request.into_bytes();
    bytes.extend_from_slice(body.unwrap_or_default());
    stream.write_all(&bytes).await?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await?;
    parse_response(&raw)
}

fn invalid(message: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message.to_string())
}

fn parse_response(raw: &[u8]) -> io::Result<HttpResponse> {
    let head_end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| invalid("the response has no end of headers"))?;
    let head = std::str::from_utf8(&raw[..head_end])
        .map_err(|_| invalid("the response headers are not UTF-8"))?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| invalid("the response has no status code"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let rest = &raw[head_end + 4..];
    let mut response = HttpResponse {
        status,
        headers,
        body: Vec::new(),
    };
    response.body = if response
        .header("transfer-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
    {
        dechunk(rest)?
    } else if let Some(length) = response.header("content-length") {
        let length: usize = length.parse().map_err(|_| invalid("bad content-length"))?;
        rest.get(..length)
            .ok_or_else(|| invalid("the response body is truncated"))?
            .to_vec()
    } else {
        rest.to_vec()
    };
    Ok(response)
}

fn dechunk(mut rest: &[u8]) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line_end = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or_else(|| invalid("a chunk size line is truncated"))?;
        let size_text = std::str::from_utf8(&rest[..line_end])
            .map_err(|_| invalid("a chunk size is not text"))?;
        let size_text = size_text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16).map_err(|_| invalid("bad chunk size"))?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return Ok(body);
        }
        let chunk = rest
            .get(..size)
            .ok_or_else(|| invalid("a chunk is truncated"))?;
        body.extend_from_slice(chunk);
        rest = rest.get(size + 2..).unwrap_or_default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls_keep_their_authority_and_prefix() {
        let url = BaseUrl::parse("http://127.0.0.1:8080/orbit/").unwrap();
        assert_eq!(url.authority(), "127.0.0.1:8080");
        assert_eq!(url.prefix, "/orbit");
        assert_eq!(
            BaseUrl::parse("http://localhost")
                .unwrap()
                .connect_address(),
            "localhost:80"
        );
        assert!(BaseUrl::parse("https://example.test").is_err());
    }

    #[test]
    fn responses_are_read_by_length_or_by_chunks() {
        let sized = parse_response(b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}").unwrap();
        assert_eq!((sized.status, sized.body.as_slice()), (201, &b"{}"[..]));
        let chunked = parse_response(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
        )
        .unwrap();
        assert_eq!(chunked.body, b"abcde");
    }
}
