//! What an effect is: a target's name, a key, an ordering key, the exact
//! bytes to send and the headers, each checked before any statement, so
//! that a bad one is a clear error and writes nothing.

use std::collections::BTreeMap;

use bytes::Bytes;

use super::error::OutboxError;

/// The longest key or ordering key, in bytes (the columns hold 255).
pub const MAX_KEY_BYTES: usize = 255;
/// The longest target name, in bytes.
pub const MAX_TARGET_BYTES: usize = 64;
/// The largest body, in bytes: MySQL's `MEDIUMBLOB`.
pub const MAX_BODY_BYTES: usize = (1 << 24) - 1;
/// The largest headers' JSON, in bytes: MySQL's `TEXT`.
pub const MAX_HEADERS_BYTES: usize = (1 << 16) - 1;

/// The name of where an effect goes (`customer-webhook`), which a relay
/// maps to a target it knows: 1 to 64 ASCII letters, digits, `.`, `_` or
/// `-`, compared byte for byte.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Target(String);

impl Target {
    /// A target's name, or [`OutboxError::Invalid`].
    pub fn parse(name: &str) -> Result<Self, OutboxError> {
        let valid = (1..=MAX_TARGET_BYTES).contains(&name.len())
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if !valid {
            return Err(OutboxError::invalid(
                "target",
                "1 to 64 ASCII letters, digits, '.', '_' or '-'",
            ));
        }
        Ok(Target(name.to_owned()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// An effect's key (unique per event and target) or ordering key: 1 to
/// 255 bytes of UTF-8 without control characters, compared byte for byte.
/// Ids and names, never a secret: operators see it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EffectKey(String);

impl EffectKey {
    /// A key, or [`OutboxError::Invalid`].
    pub fn parse(key: &str) -> Result<Self, OutboxError> {
        Self::named(key, "key")
    }

    fn named(key: &str, what: &'static str) -> Result<Self, OutboxError> {
        let valid = (1..=MAX_KEY_BYTES).contains(&key.len()) && !key.chars().any(char::is_control);
        if !valid {
            return Err(OutboxError::invalid(
                what,
                "1 to 255 bytes of UTF-8 without control characters",
            ));
        }
        Ok(EffectKey(key.to_owned()))
    }

    /// The key.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The headers an effect is sent with: names lowercased (HTTP's are
/// case-insensitive), one value each, stored as a canonical JSON object
/// (names sorted, no spaces). Names are HTTP tokens; values hold no
/// control character but tab, so none can split a header.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Headers(BTreeMap<String, String>);

impl Headers {
    /// No headers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `name` to `value` (a second value for a name replaces the
    /// first), or [`OutboxError::Invalid`].
    pub fn insert(&mut self, name: &str, value: &str) -> Result<(), OutboxError> {
        let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
        if name.is_empty() || !name.bytes().all(token) {
            return Err(OutboxError::invalid(
                "header name",
                "an HTTP token (letters, digits, !#$%&'*+-.^_`|~)",
            ));
        }
        if value.chars().any(|c| c.is_control() && c != '\t') {
            return Err(OutboxError::invalid(
                "header value",
                "text without control characters other than tab",
            ));
        }
        self.0.insert(name.to_ascii_lowercase(), value.to_owned());
        Ok(())
    }

    /// The value of `name`, in any case.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.get(&name.to_ascii_lowercase()).map(String::as_str)
    }

    /// Name and value, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }

    /// The canonical JSON object, as stored: `{"content-type":"application/json"}`.
    pub fn to_json(&self) -> String {
        serde_json::to_string(&self.0).unwrap_or_else(|_| "{}".to_owned())
    }

    /// Headers read back from their stored JSON, or `None` when it is not
    /// an object of strings.
    pub fn from_json(json: &str) -> Option<Self> {
        let map: BTreeMap<String, String> = serde_json::from_str(json).ok()?;
        let mut headers = Headers::new();
        for (name, value) in &map {
            headers.insert(name, value).ok()?;
        }
        Some(headers)
    }
}

/// One effect to record: where it goes, its key, the exact bytes to send,
/// and, when given, headers and an ordering key (by default the key).
///
/// ```
/// use result_inbox::outbox::Effect;
///
/// let effect = Effect::new("customer-webhook", "order-42/shipped", &b"{\"order\":42}"[..])?
///     .with_header("content-type", "application/json")?
///     .with_ordering_key("order-42")?;
/// assert_eq!(effect.ordering_key().as_str(), "order-42");
/// # Ok::<(), result_inbox::outbox::OutboxError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effect {
    target: Target,
    key: EffectKey,
    ordering_key: Option<EffectKey>,
    body: Bytes,
    headers: Headers,
}

impl Effect {
    /// An effect of `body` with `key` for `target`, or
    /// [`OutboxError::Invalid`] naming what is wrong.
    pub fn new(target: &str, key: &str, body: impl Into<Bytes>) -> Result<Self, OutboxError> {
        let body = body.into();
        if body.len() > MAX_BODY_BYTES {
            return Err(OutboxError::invalid("body", "at most 16 MiB - 1 bytes"));
        }
        Ok(Effect {
            target: Target::parse(target)?,
            key: EffectKey::parse(key)?,
            ordering_key: None,
            body,
            headers: Headers::new(),
        })
    }

    /// The same effect, sent after the effects of its target recorded
    /// before it with the same ordering key, and before those after it.
    pub fn with_ordering_key(mut self, key: &str) -> Result<Self, OutboxError> {
        self.ordering_key = Some(EffectKey::named(key, "ordering key")?);
        Ok(self)
    }

    /// The same effect, with header `name` set to `value`.
    pub fn with_header(mut self, name: &str, value: &str) -> Result<Self, OutboxError> {
        self.headers.insert(name, value)?;
        if self.headers.to_json().len() > MAX_HEADERS_BYTES {
            return Err(OutboxError::invalid(
                "headers",
                "at most 64 KiB - 1 bytes of JSON",
            ));
        }
        Ok(self)
    }

    /// The same effect, with `headers`.
    pub fn with_headers(mut self, headers: Headers) -> Result<Self, OutboxError> {
        if headers.to_json().len() > MAX_HEADERS_BYTES {
            return Err(OutboxError::invalid(
                "headers",
                "at most 64 KiB - 1 bytes of JSON",
            ));
        }
        self.headers = headers;
        Ok(self)
    }

    /// Where it goes.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// Its key.
    pub fn key(&self) -> &EffectKey {
        &self.key
    }

    /// Its ordering key: the one given, or its key.
    pub fn ordering_key(&self) -> &EffectKey {
        self.ordering_key.as_ref().unwrap_or(&self.key)
    }

    /// The bytes to send.
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// The headers to send.
    pub fn headers(&self) -> &Headers {
        &self.headers
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_target_key_or_header_is_refused_naming_what() {
        for (effect, what) in [
            (Effect::new("", "k", Bytes::new()), "target"),
            (Effect::new("a b", "k", Bytes::new()), "target"),
            (Effect::new(&"t".repeat(65), "k", Bytes::new()), "target"),
            (Effect::new("t", "", Bytes::new()), "key"),
            (Effect::new("t", "a\nb", Bytes::new()), "key"),
            (Effect::new("t", &"k".repeat(256), Bytes::new()), "key"),
            (
                Effect::new("t", "k", Bytes::new()).and_then(|e| e.with_ordering_key("")),
                "ordering key",
            ),
            (
                Effect::new("t", "k", Bytes::new()).and_then(|e| e.with_header("a:b", "v")),
                "header name",
            ),
            (
                Effect::new("t", "k", Bytes::new()).and_then(|e| e.with_header("a", "x\r\ny: z")),
                "header value",
            ),
        ] {
            let e = effect.unwrap_err();
            assert!(e.to_string().contains(&format!("invalid {what}")), "{e}");
            assert!(!e.is_retryable());
        }
    }

    #[test]
    fn the_ordering_key_is_the_key_unless_given_and_headers_are_canonical() {
        let effect = Effect::new("hook", "k1", &b"x"[..]).unwrap();
        assert_eq!(effect.ordering_key().as_str(), "k1");
        let effect = effect
            .with_ordering_key("task-7")
            .unwrap()
            .with_header("X-B", "2")
            .unwrap()
            .with_header("content-type", "a/b")
            .unwrap();
        assert_eq!(effect.ordering_key().as_str(), "task-7");
        assert_eq!(
            effect.headers().to_json(),
            r#"{"content-type":"a/b","x-b":"2"}"#
        );
        assert_eq!(
            Headers::from_json(&effect.headers().to_json()).as_ref(),
            Some(effect.headers())
        );
        assert_eq!(effect.headers().get("X-b"), Some("2"));
    }
}
