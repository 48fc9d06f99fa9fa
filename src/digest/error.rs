//! Why an input has no canonical form.

/// Why an input has no canonical form.
///
/// Offsets are byte offsets into the input, counted from 0. The
/// [`Display`](std::fmt::Display) messages are short, stable, single-line,
/// start in lowercase and never quote the input: they name only the kind of
/// problem and where it is, because events may carry confidential result
/// bodies and error messages end up in logs.
///
/// When an input has several problems, the checks run in this order: size,
/// byte order mark, UTF-8 validity of the whole input, then the JSON parse,
/// which reports the problem that comes first in the input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DigestError {
    /// The input is longer than [`MAX_EVENT_BYTES`](super::MAX_EVENT_BYTES).
    /// Checked before anything else.
    #[error("event too large: {len} bytes, limit {limit}", limit = super::MAX_EVENT_BYTES)]
    TooLarge {
        /// Length of the input in bytes.
        len: usize,
    },
    /// The input starts with a UTF-8 byte order mark (`EF BB BF`).
    #[error("input starts with a byte order mark")]
    ByteOrderMark,
    /// The input is not valid UTF-8 (overlong forms, surrogate code points
    /// and truncated sequences included).
    #[error("invalid utf-8 at byte {offset}")]
    InvalidUtf8 {
        /// Offset of the first byte of the first invalid sequence.
        offset: usize,
    },
    /// The input is not one strict RFC 8259 JSON value: an unexpected byte,
    /// trailing data, empty input, a malformed number or escape, a raw control
    /// character inside a string, an unterminated string or container, ...
    #[error("invalid json at byte {offset}: {reason}")]
    InvalidJson {
        /// Offset of the offending byte, or the input length when the input
        /// ends too early.
        offset: usize,
        /// A fixed, content-free description of the problem.
        reason: &'static str,
    },
    /// Two members of one object have keys that are equal after unescaping
    /// (`"a"` and `"\u0061"` collide).
    #[error("duplicate object key at byte {offset}")]
    DuplicateKey {
        /// Offset of the opening quote of the later of the two keys.
        offset: usize,
    },
    /// A `\u` escape names a UTF-16 surrogate that is not part of a proper
    /// high-low pair: a high surrogate (`\uD800`..`\uDBFF`) not immediately
    /// followed by a low one (`\uDC00`..`\uDFFF`), or a low surrogate without
    /// a high one before it.
    #[error("lone utf-16 surrogate escape at byte {offset}")]
    LoneSurrogate {
        /// Offset of the backslash of the offending escape.
        offset: usize,
    },
    /// Arrays and objects are nested deeper than
    /// [`MAX_DEPTH`](super::MAX_DEPTH).
    #[error("nesting deeper than {limit} levels at byte {offset}", limit = super::MAX_DEPTH)]
    TooDeep {
        /// Offset of the `[` or `{` that opens the first level too many.
        offset: usize,
    },
}

impl DigestError {
    /// The byte offset in the input the error points at, if it has one.
    ///
    /// [`TooLarge`](Self::TooLarge) and
    /// [`ByteOrderMark`](Self::ByteOrderMark) concern the input as a whole
    /// (the latter is always at offset 0) and return `None`.
    pub fn offset(&self) -> Option<usize> {
        match *self {
            Self::TooLarge { .. } | Self::ByteOrderMark => None,
            Self::InvalidUtf8 { offset }
            | Self::InvalidJson { offset, .. }
            | Self::DuplicateKey { offset }
            | Self::LoneSurrogate { offset }
            | Self::TooDeep { offset } => Some(offset),
        }
    }
}
