//! The strict canonical JSON form of an event and its SHA-256 digest.
//!
//! The inbox stores the digest of every event it accepts and compares it when
//! the same event id arrives again: equal digests mean a redelivery, different
//! digests a conflict. The canonical form is therefore a **frozen contract**:
//! once released, no byte of it may change for any input, or stored digests
//! would stop matching redeliveries. `docs/canonical-json.md` is the normative
//! description, with golden vectors that `tests/digest.rs` checks.
//!
//! # The canonical form in short
//!
//! The input must be exactly one strict RFC 8259 JSON value in UTF-8, at most
//! [`MAX_EVENT_BYTES`] long, nested at most [`MAX_DEPTH`] levels, with no byte
//! order mark, no duplicate object keys and no lone UTF-16 surrogate escapes.
//! Insignificant whitespace (space, tab, line feed, carriage return) may
//! appear around tokens. The canonical form of the value is:
//!
//! 1. no insignificant whitespace at all;
//! 2. object members sorted by the UTF-8 bytes of their *unescaped* keys
//!    (bytewise, a prefix before its extensions);
//! 3. strings with escapes decoded and then re-escaped minimally: `\"`, `\\`,
//!    `\b`, `\f`, `\n`, `\r`, `\t`, `\u00xx` (lowercase hex) for the other
//!    control characters U+0000..U+001F, and every other character, `/`,
//!    U+007F and U+2028 included, as raw UTF-8;
//! 4. numbers validated against the JSON grammar and copied byte for byte
//!    (`1.10`, `1E+2`, `-0` stay as written);
//! 5. `true`, `false`, `null` as is;
//! 6. the envelope timestamp rule: when the top-level value is an object with
//!    an `occurred_at` member whose string value is a valid RFC 3339
//!    date-time, that value is rewritten to the same instant in UTC as
//!    `YYYY-MM-DDTHH:MM:SS[.fraction]Z` (fraction without trailing zeros); a
//!    string that is not a valid date-time stays as it is.
//!
//! The [`Digest`] is SHA-256 over the canonical bytes.
//!
//! # Example
//!
//! ```
//! use result_inbox::digest::{canonicalize, digest, DigestError};
//!
//! let a = canonicalize(br#"{ "b": [1.10, "\u00e9\/"], "a": null }"#)?;
//! assert_eq!(a.as_str(), r#"{"a":null,"b":[1.10,"é/"]}"#);
//!
//! let b = digest(br#"{"a":null,"b":[1.10,"\u00e9/"]}"#)?;
//! assert_eq!(a.digest(), &b);
//!
//! assert!(matches!(
//!     canonicalize(br#"{"a":1,"\u0061":2}"#),
//!     Err(DigestError::DuplicateKey { offset: 7 })
//! ));
//! # Ok::<(), DigestError>(())
//! ```
//!
//! # Cost
//!
//! One pass over the input without building a tree: output goes straight into
//! one buffer of at most the input's length (the canonical form is never
//! longer than its input), and runs of already-canonical input are copied in
//! bulk. Objects whose keys arrive out of order are sorted when they close;
//! large ones are reordered in one final pass, so that every byte is copied
//! once however deeply such objects nest. Memory is a small multiple of the
//! input size, and no input can exhaust the stack.

mod error;
mod parse;
mod timestamp;

use std::fmt;

use sha2::{Digest as _, Sha256};

pub use self::error::DigestError;

/// Largest accepted input, in bytes (512 KiB = 524 288). An input of exactly
/// this length is accepted; one byte more is [`DigestError::TooLarge`].
pub const MAX_EVENT_BYTES: usize = 512 * 1024;

/// Deepest accepted nesting of arrays and objects.
///
/// A scalar at top level has depth 0, `[]` and `{}` depth 1, `[[]]` depth 2.
/// Opening a container at depth `MAX_DEPTH + 1` is
/// [`DigestError::TooDeep`].
pub const MAX_DEPTH: usize = 128;

/// A document in canonical form together with its SHA-256 [`Digest`].
///
/// `Debug` shows only the length and the digest, never the content, which
/// may hold confidential result bodies.
#[derive(Clone, PartialEq, Eq)]
pub struct Canonical {
    bytes: Vec<u8>,
    digest: Digest,
}

impl Canonical {
    /// The canonical bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The canonical form as text.
    ///
    /// The canonical form is always valid UTF-8. This re-checks that (a
    /// linear scan, with SIMD where the CPU has it) on every call, since the
    /// crate uses no `unsafe`; prefer [`as_bytes`](Self::as_bytes) on hot
    /// paths.
    pub fn as_str(&self) -> &str {
        simdutf8::basic::from_utf8(&self.bytes).expect("canonical JSON is always valid UTF-8")
    }

    /// The canonical bytes, without copying.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }

    /// SHA-256 of [`as_bytes`](Self::as_bytes).
    pub fn digest(&self) -> &Digest {
        &self.digest
    }
}

impl fmt::Debug for Canonical {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Canonical")
            .field("len", &self.bytes.len())
            .field("digest", &self.digest)
            .finish()
    }
}

/// SHA-256 of canonical bytes.
///
/// Displays as 64 lowercase hex digits, the form stored in the database.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Digest([u8; 32]);

impl Digest {
    /// The 32 raw bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The digest as 64 lowercase hex digits.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// Parses 64 hex digits (either case; nothing else, no surrounding
    /// whitespace). Returns `None` for any other text.
    pub fn from_hex(s: &str) -> Option<Digest> {
        let mut bytes = [0u8; 32];
        hex::decode_to_slice(s, &mut bytes).ok()?;
        Some(Digest(bytes))
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({})", self.to_hex())
    }
}

/// Computes the canonical form of `input` and its SHA-256.
///
/// The whole input must be one JSON value (see the [module
/// documentation](self) and `docs/canonical-json.md`). Checks run in this
/// order: size ([`DigestError::TooLarge`]), byte order mark, UTF-8 validity
/// of the whole input, then the parse, which reports the problem that comes
/// first in the input.
pub fn canonicalize(input: &[u8]) -> Result<Canonical, DigestError> {
    check_input(input)?;
    let bytes = parse::canonical_bytes(input)?;
    let digest = Digest(Sha256::digest(&bytes).into());
    Ok(Canonical { bytes, digest })
}

/// The checks before the parse: size, byte order mark, UTF-8.
fn check_input(input: &[u8]) -> Result<(), DigestError> {
    if input.len() > MAX_EVENT_BYTES {
        return Err(DigestError::TooLarge { len: input.len() });
    }
    if input.starts_with(b"\xEF\xBB\xBF") {
        return Err(DigestError::ByteOrderMark);
    }
    // The `compat` flavour reports where the input stops being valid, as
    // std does; the offset is part of the error.
    if let Err(e) = simdutf8::compat::from_utf8(input) {
        return Err(DigestError::InvalidUtf8 {
            offset: e.valid_up_to(),
        });
    }
    Ok(())
}

/// Computes only the digest of `input`: the same value as
/// `canonicalize(input)?.digest()`, for callers that do not need the bytes.
pub fn digest(input: &[u8]) -> Result<Digest, DigestError> {
    check_input(input)?;
    // The canonical bytes are hashed where they lie, never assembled.
    let mut hasher = Sha256::new();
    parse::with_canonical_pieces(input, |piece| hasher.update(piece))?;
    Ok(Digest(hasher.finalize().into()))
}

/// Whether `s` is a valid RFC 3339 date-time already in the form the
/// timestamp rule writes: `YYYY-MM-DDTHH:MM:SS[.fraction]Z` in UTC, with
/// uppercase `T` and `Z` and no trailing zero in the fraction.
///
/// After canonicalization, the top-level `occurred_at` string passes this
/// check exactly when it was a valid RFC 3339 date-time in the input (the
/// rule leaves any other string unchanged, and no such string passes).
pub fn is_utc_timestamp(s: &str) -> bool {
    timestamp::normalize(s.as_bytes()).is_some_and(|utc| utc.as_bytes() == s.as_bytes())
}

/// Seconds since the Unix epoch of an RFC 3339 date-time such as an
/// event's `occurred_at`, or `None` when `s` is not one.
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
pub(crate) fn unix_seconds(s: &str) -> Option<f64> {
    timestamp::unix_seconds(s.as_bytes())
}

/// The RFC 3339 date-time, in UTC to the second, of `seconds` since the
/// Unix epoch (a broker's timestamp), or `None` outside the years
/// 0000..=9999.
#[cfg_attr(not(feature = "rabbitmq"), allow(dead_code))]
pub(crate) fn utc_text(seconds: i64) -> Option<String> {
    timestamp::utc_text(seconds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_of_canonical_shows_length_and_digest_but_not_content() {
        let c = canonicalize(br#"{"secret":"hunter2"}"#).unwrap();
        let shown = format!("{c:?}");
        assert!(
            !shown.contains("hunter2") && !shown.contains("secret"),
            "{shown}"
        );
        assert!(shown.contains("len: 20"), "{shown}");
        assert!(shown.contains(&c.digest().to_hex()), "{shown}");
    }

    #[test]
    fn digest_hex_round_trips_and_rejects_other_text() {
        let d = digest(b"null").unwrap();
        let hex = d.to_hex();
        assert_eq!(hex.len(), 64);
        assert_eq!(hex, hex.to_lowercase());
        assert_eq!(d.to_string(), hex);
        assert_eq!(Digest::from_hex(&hex), Some(d));
        assert_eq!(Digest::from_hex(&hex.to_uppercase()), Some(d));
        assert_eq!(Digest::from_hex(&hex[..62]), None);
        assert_eq!(Digest::from_hex(&format!("{hex}00")), None);
        assert_eq!(Digest::from_hex(&format!(" {}", &hex[1..])), None);
        assert_eq!(Digest::from_hex(&format!("g{}", &hex[1..])), None);
        assert_eq!(format!("{d:?}"), format!("Digest({hex})"));
    }

    #[test]
    fn canonical_output_is_never_longer_than_the_input() {
        for input in [
            &br#" { "b" : "\/\u00e9\ud83d\ude00\u001F" , "a" : [ 1 , -0.5e+3 ] } "#[..],
            br#"{"occurred_at":"2024-01-01T00:00:00.000000000+08:00"}"#,
            br#""\u0000\u0008\t""#,
        ] {
            let c = canonicalize(input).unwrap();
            assert!(c.as_bytes().len() <= input.len());
        }
    }
}
