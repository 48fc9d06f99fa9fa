//! Single-pass parser that produces the canonical form without building a
//! tree.
//!
//! # Design
//!
//! The parser is an explicit-stack state machine (at most [`MAX_DEPTH`]
//! frames, no recursion) that never builds a tree. Most of a typical input
//! is already canonical, so output is produced lazily: the input bytes from
//! `pend` up to the current position are *pending*, to be copied to the
//! output verbatim. Only when something must change — whitespace to drop, an
//! escape to rewrite, a timestamp to normalize, an object to reorder — are
//! the pending bytes flushed and the change written. Output positions are
//! therefore tracked as *logical* positions, `out.len() + (pos - pend)`,
//! which never change once assigned. The bytes still pending at the end
//! are never copied: the canonical form is `out` followed by them
//! ([`Output`]), and the digest hashes both where they lie.
//!
//! For each open object the parser records its members (key, 8-byte key
//! prefix, output position). When the object closes:
//!
//! * keys already strictly increasing (checked without data-dependent
//!   branches) mean the output is right and there is no duplicate;
//! * otherwise the members are ordered — by ranking their prefixes when the
//!   object is small and the prefixes differ (branch-free), else by a
//!   comparison sort that also finds duplicate keys — and the object is
//!   rewritten: straight from the input if none of it was flushed yet,
//!   otherwise through a scratch buffer;
//! * except for large objects (body of at least [`DEFER_MIN_BODY`] bytes):
//!   their sorted member ranges are recorded and the bytes stay in input
//!   order, and a final pass ([`Output::emit`], recursive along the nesting
//!   of such objects, so at most `MAX_DEPTH` deep) writes every byte once
//!   in canonical order. This keeps an event whose envelope, `task` and
//!   `result` are all out of order from copying its body once per level.
//!
//! Errors abort the parse; before one is returned, the still-open objects
//! are searched for a duplicate key that comes earlier in the input
//! ([`Parser::fail`]), so that the first problem in the input is reported.
//!
//! The input must already be known to be valid UTF-8 and at most
//! [`MAX_EVENT_BYTES`](super::MAX_EVENT_BYTES) long (so every offset fits in
//! a `u32`).

use std::cell::Cell;
use std::cmp::Ordering;
use std::ops::Range;

use super::error::DigestError;
use super::timestamp;
use super::MAX_DEPTH;

// The `reason`s of `DigestError::InvalidJson`. They are part of the stable
// Display output: change them only deliberately.
const R_EMPTY: &str = "empty input";
const R_EOF: &str = "unexpected end of input";
const R_VALUE: &str = "expected a value";
const R_KEY: &str = "expected an object key";
const R_COLON: &str = "expected ':' after an object key";
const R_OBJECT_NEXT: &str = "expected ',' or '}' after an object member";
const R_ARRAY_NEXT: &str = "expected ',' or ']' after an array element";
const R_TRAILING: &str = "trailing data after the value";
const R_NUMBER: &str = "invalid number";
const R_LITERAL: &str = "invalid literal";
const R_ESCAPE: &str = "invalid escape sequence";
const R_CONTROL: &str = "unescaped control character in a string";
const R_UNTERMINATED: &str = "unterminated string";

/// The top-level key whose string value gets the timestamp rule.
const TIMESTAMP_KEY: &[u8] = b"occurred_at";

/// Writes the canonical form of `input`, which must be valid UTF-8 and at
/// most `MAX_EVENT_BYTES` long.
pub(super) fn canonical_bytes(input: &[u8]) -> Result<Vec<u8>, DigestError> {
    with_buffers(|buffers| {
        parse(input, buffers, |output| {
            // The caller keeps the bytes: one allocation of the exact size.
            let mut bytes = Vec::with_capacity(output.len());
            output.write(|piece| bytes.extend_from_slice(piece));
            bytes
        })
    })
}

/// Feeds the canonical form of `input` (see [`canonical_bytes`]) to `sink`,
/// in order, piece by piece.
///
/// Nothing is assembled: the pieces are taken from the parser's output and
/// from the input where the input was already canonical, so hashing the
/// canonical form copies none of the bytes the parse did not have to
/// rewrite.
pub(super) fn with_canonical_pieces(
    input: &[u8],
    sink: impl FnMut(&[u8]),
) -> Result<(), DigestError> {
    with_buffers(|buffers| parse(input, buffers, |output| output.write(sink)))
}

/// The parser's working memory, kept per thread between calls: for the
/// small documents that make up most traffic, allocating (and growing) the
/// half dozen buffers anew on every call costs about a tenth of the time.
#[derive(Default)]
struct Buffers {
    /// The output written so far (see [`Parser::pend`]).
    out: Vec<u8>,
    /// The open arrays and objects, innermost last.
    frames: Vec<Frame>,
    /// Member records of all open objects, innermost last.
    members: Vec<Member>,
    /// Unescaped keys that had escapes in the input, innermost last.
    keys: Vec<u8>,
    /// The sorted order of an object's members.
    order: Vec<u32>,
    /// Room for rewriting an object in sorted order.
    scratch: Vec<u8>,
    /// Large objects to reorder at the end, and their members' ranges.
    deferred: Vec<Deferred>,
    spans: Vec<(u32, u32)>,
}

impl Buffers {
    /// Empties every buffer, and frees those larger than
    /// [`RETAIN_MAX_BYTES`].
    fn trim(&mut self) {
        let Buffers {
            out,
            frames,
            members,
            keys,
            order,
            scratch,
            deferred,
            spans,
        } = self;
        trim(out);
        trim(frames);
        trim(members);
        trim(keys);
        trim(order);
        trim(scratch);
        trim(deferred);
        trim(spans);
    }
}

/// Buffers larger than this are not kept for the next call, so that one
/// large event does not pin its memory in every thread that saw one.
const RETAIN_MAX_BYTES: usize = 128 * 1024;

/// Empties `v`, and frees it if it is larger than [`RETAIN_MAX_BYTES`].
fn trim<T>(v: &mut Vec<T>) {
    v.clear();
    if v.capacity() * std::mem::size_of::<T>() > RETAIN_MAX_BYTES {
        *v = Vec::new();
    }
}

thread_local! {
    static BUFFERS: Cell<Option<Box<Buffers>>> = const { Cell::new(None) };
}

/// Runs `f` with this thread's [`Buffers`], empty, and puts them back
/// afterwards (trimmed). They are moved out for the call (boxed, so that
/// taking and returning them moves one pointer), so a nested call (there is
/// none) or a thread being torn down just gets fresh ones.
fn with_buffers<R>(f: impl FnOnce(&mut Buffers) -> R) -> R {
    let mut buffers = BUFFERS
        .try_with(Cell::take)
        .ok()
        .flatten()
        .unwrap_or_default();
    let result = f(&mut buffers);
    buffers.trim();
    // Fails only while the thread is being torn down; then drop them.
    let _ = BUFFERS.try_with(|cell| cell.set(Some(buffers)));
    result
}

/// Parses `input` with `buffers` (which must be empty) and, if it is valid,
/// calls `finish` with its canonical form.
fn parse<R>(
    input: &[u8],
    buffers: &mut Buffers,
    finish: impl FnOnce(Output<'_>) -> R,
) -> Result<R, DigestError> {
    let mut parser = Parser {
        input,
        pend: 0,
        buf: buffers,
    };
    parser.buf.out.reserve(input.len());
    parser.run().map(|()| {
        let buf = &mut *parser.buf;
        // Deferred objects nest like the values they are; `emit` walks them
        // in order of position.
        buf.deferred.sort_unstable_by_key(|d| d.open);
        finish(Output {
            head: &buf.out,
            tail: &input[parser.pend..],
            deferred: &buf.deferred,
            spans: &buf.spans,
        })
    })
}

/// The canonical form as a finished parse leaves it: the bytes `head` (what
/// the parser wrote) followed by `tail` (the input it did not need to
/// touch), in which the members of each deferred object are still in input
/// order.
struct Output<'a> {
    head: &'a [u8],
    tail: &'a [u8],
    deferred: &'a [Deferred],
    spans: &'a [(u32, u32)],
}

impl Output<'_> {
    /// Length of the canonical form (reordering does not change it).
    fn len(&self) -> usize {
        self.head.len() + self.tail.len()
    }

    /// Feeds the canonical form to `sink`, piece by piece.
    fn write(&self, mut sink: impl FnMut(&[u8])) {
        self.emit(0..self.len() as u32, &mut sink);
    }

    /// Feeds the bytes at logical positions `range` to `sink`.
    fn piece(&self, range: Range<u32>, sink: &mut impl FnMut(&[u8])) {
        let (start, end) = (range.start as usize, range.end as usize);
        let split = self.head.len();
        if start >= end {
            return;
        }
        if start < split {
            sink(&self.head[start..end.min(split)]);
        }
        if end > split {
            sink(&self.tail[start.max(split) - split..end - split]);
        }
    }

    /// Feeds the bytes at logical positions `range` to `sink`, with the
    /// members of every deferred object in it in sorted order. Recursion
    /// follows the nesting of deferred objects, so it is at most
    /// `MAX_DEPTH` deep.
    fn emit(&self, range: Range<u32>, sink: &mut impl FnMut(&[u8])) {
        let mut cursor = range.start;
        loop {
            // The first deferred object opening at or after the cursor.
            // (Objects inside one that was just written are skipped this
            // way, and a member's range never includes its own object's
            // `{`.)
            let next = self.deferred.partition_point(|d| d.open < cursor);
            let Some(object) = self.deferred.get(next).filter(|d| d.open < range.end) else {
                break;
            };
            self.piece(cursor..object.open + 1, sink);
            let members =
                &self.spans[object.first as usize..(object.first + object.count) as usize];
            for (n, &(start, end)) in members.iter().enumerate() {
                if n > 0 {
                    sink(b",");
                }
                self.emit(start..end, sink);
            }
            cursor = object.close;
        }
        self.piece(cursor..range.end, sink);
    }
}

/// Objects whose body (between the braces) is at least this long are not
/// rewritten when they close but once, at the end (see [`Deferred`]).
const DEFER_MIN_BODY: u32 = 4096;

/// An object whose members were sorted but whose bytes were left in input
/// order, to be reordered by [`Output::emit`] when the whole output is known.
///
/// Rewriting an object in place costs a copy of its body; objects out of
/// order nested in objects out of order (a typical event: the envelope, its
/// `task`, the `result`) would copy the big inner bodies once per level.
/// Deferring large objects copies every byte once however deep they nest.
#[derive(Clone, Copy)]
struct Deferred {
    /// Output positions of the `{` and the `}`.
    open: u32,
    close: u32,
    /// The members' output ranges, in sorted order, are
    /// `spans[first..first + count]`.
    first: u32,
    count: u32,
}

/// An open array or object.
#[derive(Clone, Copy)]
struct Frame {
    object: bool,
    /// Index of this object's first record in `Parser::members`.
    members_base: u32,
    /// Length of `Parser::keys` when the object opened.
    keys_base: u32,
    /// Input position of the `[` or `{`.
    open: u32,
    /// Logical output position of the `{`.
    out_open: u32,
}

/// A member of an open object.
#[derive(Clone, Copy)]
struct Member {
    /// The first 8 bytes of the unescaped key, big-endian, zero-padded: most
    /// key comparisons are decided by this number alone.
    prefix: u64,
    /// The unescaped key is `keys[key_start..key_end]` if `key_in_buf`,
    /// else `input[key_start..key_end]` (a key written without escapes).
    key_start: u32,
    key_end: u32,
    key_in_buf: bool,
    /// Input offset of the key's opening quote.
    key_offset: u32,
    /// Logical output position of the key's opening quote.
    out_start: u32,
    /// Output position after the member's value; set only when the object
    /// closes out of order.
    out_end: u32,
}

/// Unescaped string content: `(in_buf, start, end)`, see [`Member`].
type Text = (bool, usize, usize);

struct Parser<'a, 'b> {
    input: &'a [u8],
    /// Start of the pending input bytes, to be copied verbatim to
    /// `buf.out`.
    pend: usize,
    buf: &'b mut Buffers,
}

fn key_of<'s>(input: &'s [u8], keys: &'s [u8], m: &Member) -> &'s [u8] {
    let range = m.key_start as usize..m.key_end as usize;
    if m.key_in_buf {
        &keys[range]
    } else {
        &input[range]
    }
}

/// Orders two members by unescaped key, bytewise.
#[inline(always)]
fn compare_keys(input: &[u8], keys: &[u8], a: &Member, b: &Member) -> Ordering {
    match a.prefix.cmp(&b.prefix) {
        Ordering::Equal => {
            let (a_len, b_len) = (a.key_end - a.key_start, b.key_end - b.key_start);
            if a_len <= 8 && b_len <= 8 {
                // Equal zero-padded prefixes: the shorter key is a prefix of
                // the longer one (or they are equal).
                a_len.cmp(&b_len)
            } else {
                key_of(input, keys, a).cmp(key_of(input, keys, b))
            }
        }
        unequal => unequal,
    }
}

/// Orders two members by unescaped key, then by position in the input.
fn compare_members(input: &[u8], keys: &[u8], a: &Member, b: &Member) -> Ordering {
    compare_keys(input, keys, a, b).then(a.key_offset.cmp(&b.key_offset))
}

/// The first 8 bytes of `key` as a big-endian number, zero-padded.
///
/// `source[start..start + len]` is the key; bytes after it in `source` are
/// read when available and masked off.
#[inline]
fn key_prefix(source: &[u8], start: usize, len: usize) -> u64 {
    let mut word = [0u8; 8];
    match source.get(start..start + 8) {
        Some(chunk) => word.copy_from_slice(chunk),
        None => {
            for (to, &from) in word.iter_mut().zip(&source[start..start + len]) {
                *to = from;
            }
        }
    }
    let word = u64::from_be_bytes(word);
    if len >= 8 {
        word
    } else {
        // Keep the first `len` bytes (the high ones); `len` is 0..=7.
        word & !(u64::MAX >> (8 * len))
    }
}

/// Whether the keys of `members` are strictly increasing: then the object is
/// already in canonical order and has no duplicate keys.
///
/// Checked once when the object closes rather than key by key, and without
/// data-dependent branches in the common case (distinct prefixes), because
/// in objects that are out of order the outcome of each comparison is
/// unpredictable.
#[inline(always)]
fn in_order(input: &[u8], keys: &[u8], members: &[Member]) -> bool {
    let mut increasing = true;
    for pair in members.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        increasing &= (a.prefix < b.prefix)
            | (a.prefix == b.prefix && compare_keys(input, keys, a, b) == Ordering::Less);
    }
    increasing
}

/// Largest object sorted by [`order_by_prefix`].
const RANK_SORT_MAX: usize = 16;

/// Fills `order` with the indices of `members` in key order, if the members
/// are few and their key prefixes all differ (then the prefixes alone decide
/// the order, and no two keys are equal). Returns false otherwise.
///
/// Ranks each member by counting the members with a smaller prefix:
/// quadratic, but free of data-dependent branches and of memory round trips
/// (each rank is summed in a register), which beats a comparison sort on the
/// small objects that make up most documents.
fn order_by_prefix(members: &[Member], order: &mut Vec<u32>) -> bool {
    let n = members.len();
    if n > RANK_SORT_MAX {
        return false;
    }
    let mut prefixes = [0u64; RANK_SORT_MAX];
    for (prefix, member) in prefixes.iter_mut().zip(members) {
        *prefix = member.prefix;
    }
    let prefixes = &prefixes[..n];
    let mut ranked = [0u32; RANK_SORT_MAX];
    // Bit r is set once some member has rank r. Distinct prefixes give
    // distinct ranks, 0..n; two equal prefixes share one rank and leave a
    // bit unset: then the keys need a full comparison (and may be
    // duplicates).
    let mut taken = 0u32;
    for (i, &p) in prefixes.iter().enumerate() {
        let rank: u32 = prefixes.iter().map(|&q| u32::from(q < p)).sum();
        ranked[rank as usize] = i as u32;
        taken |= 1 << rank;
    }
    if taken != (1u32 << n) - 1 {
        return false;
    }
    order.clear();
    order.extend_from_slice(&ranked[..n]);
    true
}

/// Sorts the records of one object and returns the offset of the earliest
/// key that repeats an earlier one, if any.
fn sort_and_find_duplicate(input: &[u8], keys: &[u8], members: &mut [Member]) -> Option<u32> {
    members.sort_unstable_by(|a, b| compare_members(input, keys, a, b));
    // Equal keys are now adjacent and ordered by offset, so the first
    // repetition of each key is the right element of some adjacent pair.
    members
        .windows(2)
        .filter(|w| compare_keys(input, keys, &w[0], &w[1]) == Ordering::Equal)
        .map(|w| w[1].key_offset)
        .min()
}

#[inline]
fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

#[inline]
fn is_digit(b: Option<&u8>) -> bool {
    matches!(b, Some(b'0'..=b'9'))
}

/// The position of the first byte at or after `i` that is not an ASCII
/// digit (or `s.len()`).
///
/// Eight bytes at a time: the end of a run of digits is found without a
/// branch per digit, whose misprediction at the end of every number cost
/// more than the digits themselves.
#[inline(always)]
fn skip_digits(s: &[u8], mut i: usize) -> usize {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    while let Some(chunk) = s.get(i..i + 8) {
        // `'0'..='9'` become 0..=9, and no other byte does. A byte is not a
        // digit when its value is 10 or more: adding 0x76 to its low seven
        // bits then sets the high bit (without a carry into the next byte),
        // or its own high bit is set already.
        let x = load(chunk) ^ 0x3030_3030_3030_3030;
        let not_digit = (((x & LOW7) + 0x7676_7676_7676_7676) | x) & HIGHS;
        if not_digit != 0 {
            return i + (not_digit.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while is_digit(s.get(i)) {
        i += 1;
    }
    i
}

/// Marks (high bit of the byte) each byte of `w` that is `"`, `\` or below
/// 0x20. Only the lowest mark is exact: false marks can appear above a true
/// one (borrows), never below, so the lowest mark of `special(w)` is the
/// first special byte of `w` in little-endian order.
#[inline(always)]
fn special(w: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let quote = w ^ (ONES * u64::from(b'"'));
    let backslash = w ^ (ONES * u64::from(b'\\'));
    ((quote.wrapping_sub(ONES) & !quote)
        | (backslash.wrapping_sub(ONES) & !backslash)
        | (w.wrapping_sub(ONES * 0x20) & !w))
        & HIGHS
}

#[inline(always)]
fn load(chunk: &[u8]) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(chunk);
    u64::from_le_bytes(word)
}

/// Index of the first `"`, `\\` or byte below 0x20 at or after `i`, or
/// `s.len()` if there is none.
#[inline(always)]
fn find_string_special(s: &[u8], mut i: usize) -> usize {
    if let Some(chunk) = s.get(i..i + 8) {
        let marks = special(load(chunk));
        if marks != 0 {
            return i + (marks.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while let Some(chunk) = s.get(i..i + 16) {
        let low = special(load(&chunk[..8]));
        let high = special(load(&chunk[8..]));
        if low | high != 0 {
            let bit = if low != 0 {
                low.trailing_zeros()
            } else {
                64 + high.trailing_zeros()
            };
            return i + (bit / 8) as usize;
        }
        i += 16;
    }
    while let Some(&b) = s.get(i) {
        if b == b'"' || b == b'\\' || b < 0x20 {
            return i;
        }
        i += 1;
    }
    s.len()
}

/// Appends `src[range]` to `out`.
///
/// Short ranges are copied as one fixed-size block (which compiles to a few
/// vector moves instead of a call to `memcpy`) and the excess is cut off
/// again; this matters because most copies are a single token or member.
/// Only done with room to spare, so that it never makes `out` reallocate.
#[inline(always)]
fn append(out: &mut Vec<u8>, src: &[u8], range: Range<usize>) {
    const BLOCK: usize = 32;
    let len = range.end - range.start;
    if len <= BLOCK && out.capacity() - out.len() >= BLOCK {
        if let Some(block) = src.get(range.start..range.start + BLOCK) {
            let before = out.len();
            out.extend_from_slice(block);
            out.truncate(before + len);
            return;
        }
    }
    out.extend_from_slice(&src[range]);
}

/// The value of four hex digits (either case) at `s[at..]`.
#[inline]
fn hex4(s: &[u8], at: usize) -> Option<u32> {
    let digits = s.get(at..at + 4)?;
    digits.iter().try_fold(0u32, |acc, &b| {
        let v = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            b'A'..=b'F' => b - b'A' + 10,
            _ => return None,
        };
        Some(acc << 4 | u32::from(v))
    })
}

/// Writes one character of string content in canonical (minimal) escaping.
fn write_escaped_char(out: &mut Vec<u8>, c: char) {
    match c {
        '"' => out.extend_from_slice(b"\\\""),
        '\\' => out.extend_from_slice(b"\\\\"),
        '\u{8}' => out.extend_from_slice(b"\\b"),
        '\u{c}' => out.extend_from_slice(b"\\f"),
        '\n' => out.extend_from_slice(b"\\n"),
        '\r' => out.extend_from_slice(b"\\r"),
        '\t' => out.extend_from_slice(b"\\t"),
        '\0'..='\u{1f}' => {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            let v = c as usize;
            out.extend_from_slice(b"\\u00");
            out.push(HEX[v >> 4]);
            out.push(HEX[v & 0xf]);
        }
        _ => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
    }
}

/// Whether the six input bytes of a `\uXXXX` escape for code point `cp` are
/// exactly what [`write_escaped_char`] would write.
fn is_canonical_u_escape(cp: u32, escape: &[u8]) -> bool {
    if cp >= 0x20 || matches!(cp, 0x08 | 0x09 | 0x0a | 0x0c | 0x0d) {
        return false;
    }
    let hi = if cp >= 0x10 { b'1' } else { b'0' };
    let lo = b"0123456789abcdef"[(cp & 0xf) as usize];
    escape == [b'\\', b'u', b'0', b'0', hi, lo]
}

impl Parser<'_, '_> {
    // The current input position is passed by value through the helpers
    // (never stored in `self`), so that it stays in a register: each token's
    // start depends on the previous token's end, and a round trip through
    // memory would lengthen that chain for every token.

    /// The logical output position of input position `pos`; valid when the
    /// pending bytes reach `pos`.
    #[inline(always)]
    fn logical(&self, pos: usize) -> u32 {
        (self.buf.out.len() + pos - self.pend) as u32
    }

    /// Copies the pending bytes up to `upto` to the output.
    #[inline]
    fn flush(&mut self, upto: usize) {
        append(&mut self.buf.out, self.input, self.pend..upto);
        self.pend = upto;
    }

    /// Skips insignificant whitespace at `pos` (dropping it from the output)
    /// and returns the position after it.
    #[inline(always)]
    fn skip_ws(&mut self, pos: usize) -> usize {
        match self.input.get(pos) {
            Some(&b) if is_ws(b) => self.skip_ws_slow(pos),
            _ => pos,
        }
    }

    #[cold]
    #[inline(never)]
    fn skip_ws_slow(&mut self, mut pos: usize) -> usize {
        self.flush(pos);
        while self.input.get(pos).is_some_and(|&b| is_ws(b)) {
            pos += 1;
        }
        self.pend = pos;
        pos
    }

    /// Turns an error into the error to report: a duplicate key that was
    /// already read in a still-open object comes earlier in the input than
    /// the error at hand (objects are only checked in full when they close).
    #[cold]
    #[inline(never)]
    fn fail(&mut self, err: DigestError) -> DigestError {
        let mut earliest: Option<u32> = None;
        let mut end = self.buf.members.len();
        for frame in self.buf.frames.iter().rev().filter(|f| f.object) {
            let base = frame.members_base as usize;
            let found = sort_and_find_duplicate(
                self.input,
                &self.buf.keys,
                &mut self.buf.members[base..end],
            );
            earliest = match (earliest, found) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            end = base;
        }
        match (earliest, err.offset()) {
            (Some(dup), Some(at)) if (dup as usize) < at => DigestError::DuplicateKey {
                offset: dup as usize,
            },
            _ => err,
        }
    }

    #[cold]
    #[inline(never)]
    fn syntax(&mut self, offset: usize, reason: &'static str) -> DigestError {
        self.fail(DigestError::InvalidJson { offset, reason })
    }

    /// The error for a missing token at `pos`.
    #[cold]
    #[inline(never)]
    fn expected(&mut self, pos: usize, reason: &'static str) -> DigestError {
        let reason = if pos >= self.input.len() {
            R_EOF
        } else {
            reason
        };
        self.syntax(pos, reason)
    }

    fn run(&mut self) -> Result<(), DigestError> {
        let input = self.input;
        let mut pos = 0;
        // Whether the innermost open container is an object.
        let mut in_object = false;
        // Whether the next value is that of the top-level `occurred_at`.
        let mut timestamp_next = false;
        'value: loop {
            pos = self.skip_ws(pos);
            let at_timestamp = std::mem::take(&mut timestamp_next);
            let Some(&b) = input.get(pos) else {
                let reason = if self.buf.frames.is_empty() {
                    R_EMPTY
                } else {
                    R_EOF
                };
                return Err(self.syntax(pos, reason));
            };
            pos = match b {
                b'"' if at_timestamp => self.timestamp_string(pos)?,
                b'"' => self.string(pos, false)?.0,
                b'-' | b'0'..=b'9' => self.number(pos)?,
                b't' => self.literal(pos, b"true")?,
                b'f' => self.literal(pos, b"false")?,
                b'n' => self.literal(pos, b"null")?,
                b'[' | b'{' => {
                    if self.buf.frames.len() >= MAX_DEPTH {
                        return Err(self.fail(DigestError::TooDeep { offset: pos }));
                    }
                    let object = b == b'{';
                    self.buf.frames.push(Frame {
                        object,
                        members_base: self.buf.members.len() as u32,
                        keys_base: self.buf.keys.len() as u32,
                        open: pos as u32,
                        out_open: self.logical(pos),
                    });
                    pos = self.skip_ws(pos + 1);
                    match input.get(pos) {
                        Some(b']') if !object => {
                            self.buf.frames.pop();
                            pos + 1
                        }
                        Some(b'}') if object => {
                            self.buf.frames.pop();
                            pos + 1
                        }
                        Some(b'"') if object => {
                            in_object = true;
                            (pos, timestamp_next) = self.member_key(pos)?;
                            continue 'value;
                        }
                        _ if object => return Err(self.expected(pos, R_KEY)),
                        _ => {
                            in_object = false;
                            continue 'value;
                        }
                    }
                }
                _ => return Err(self.syntax(pos, R_VALUE)),
            };

            // A value is complete: close containers until one continues.
            loop {
                pos = self.skip_ws(pos);
                if self.buf.frames.is_empty() {
                    if pos != input.len() {
                        return Err(self.syntax(pos, R_TRAILING));
                    }
                    // The pending bytes are the tail of the output.
                    return Ok(());
                }
                match input.get(pos) {
                    Some(b',') => {
                        pos += 1;
                        if in_object {
                            pos = self.skip_ws(pos);
                            if input.get(pos) != Some(&b'"') {
                                return Err(self.expected(pos, R_KEY));
                            }
                            (pos, timestamp_next) = self.member_key(pos)?;
                        }
                        continue 'value;
                    }
                    Some(b']') if !in_object => {
                        self.buf.frames.pop();
                        pos += 1;
                    }
                    Some(b'}') if in_object => pos = self.close_object(pos)?,
                    _ if in_object => return Err(self.expected(pos, R_OBJECT_NEXT)),
                    _ => return Err(self.expected(pos, R_ARRAY_NEXT)),
                }
                in_object = self.buf.frames.last().is_some_and(|f| f.object);
            }
        }
    }

    /// Reads a member key (opening quote at `pos`) and the `:` after it, and
    /// records the member. Returns the position after the `:` and whether
    /// the key is the top-level `occurred_at`.
    #[inline(always)]
    fn member_key(&mut self, pos: usize) -> Result<(usize, bool), DigestError> {
        let out_start = self.logical(pos);
        let (after, (in_buf, start, end)) = self.string(pos, true)?;
        let source = if in_buf {
            &self.buf.keys[..]
        } else {
            self.input
        };
        let prefix = key_prefix(source, start, end - start);
        let is_timestamp = self.buf.frames.len() == 1 && &source[start..end] == TIMESTAMP_KEY;
        self.buf.members.push(Member {
            prefix,
            key_start: start as u32,
            key_end: end as u32,
            key_in_buf: in_buf,
            key_offset: pos as u32,
            out_start,
            out_end: out_start,
        });
        let colon = self.skip_ws(after);
        if self.input.get(colon) != Some(&b':') {
            return Err(self.expected(colon, R_COLON));
        }
        Ok((colon + 1, is_timestamp))
    }

    /// Closes the object whose `}` is at `pos`, putting its members in order.
    /// Returns the position after the `}`.
    fn close_object(&mut self, pos: usize) -> Result<usize, DigestError> {
        let Some(&frame) = self.buf.frames.last() else {
            return Ok(pos + 1);
        };
        let base = frame.members_base as usize;
        if !in_order(self.input, &self.buf.keys, &self.buf.members[base..]) {
            self.sort_object(&frame, pos)?;
        }
        self.buf.members.truncate(base);
        self.buf.keys.truncate(frame.keys_base as usize);
        self.buf.frames.pop();
        Ok(pos + 1)
    }

    /// Rewrites the output of the object `frame`, whose `}` is at `pos`, with
    /// its members sorted by key.
    fn sort_object(&mut self, frame: &Frame, pos: usize) -> Result<(), DigestError> {
        let input = self.input;
        let close = self.logical(pos);
        let members = &mut self.buf.members[frame.members_base as usize..];
        // Each member ends just before the comma that precedes the next one,
        // the last just before the `}`.
        let mut next_start = close + 1;
        for member in members.iter_mut().rev() {
            member.out_end = next_start - 1;
            next_start = member.out_start;
        }

        let members = &self.buf.members[frame.members_base as usize..];
        if !order_by_prefix(members, &mut self.buf.order) {
            let keys = &self.buf.keys;
            self.buf.order.clear();
            self.buf.order.extend(0..members.len() as u32);
            self.buf.order.sort_unstable_by(|&a, &b| {
                compare_members(input, keys, &members[a as usize], &members[b as usize])
            });
            let duplicate = self
                .buf
                .order
                .windows(2)
                .map(|w| (&members[w[0] as usize], &members[w[1] as usize]))
                .filter(|(a, b)| compare_keys(input, keys, a, b) == Ordering::Equal)
                .map(|(_, later)| later.key_offset)
                .min();
            if let Some(offset) = duplicate {
                let err = DigestError::DuplicateKey {
                    offset: offset as usize,
                };
                return Err(self.fail(err));
            }
        }

        let body_start = frame.out_open + 1;
        if close - body_start >= DEFER_MIN_BODY {
            let first = self.buf.spans.len() as u32;
            let spans = self.buf.order.iter().map(|&k| {
                let member = &members[k as usize];
                (member.out_start, member.out_end)
            });
            self.buf.spans.extend(spans);
            self.buf.deferred.push(Deferred {
                open: frame.out_open,
                close,
                first,
                count: self.buf.order.len() as u32,
            });
            return Ok(());
        }

        let open = frame.open as usize;
        if self.pend <= open {
            // Nothing was rewritten since the `{`: the whole object is still
            // pending, and logical positions inside it are input positions
            // shifted by a constant. Write the sorted members from the input.
            let shift = open - frame.out_open as usize;
            append(&mut self.buf.out, input, self.pend..open + 1);
            for (n, &k) in self.buf.order.iter().enumerate() {
                if n > 0 {
                    self.buf.out.push(b',');
                }
                let member = &members[k as usize];
                let range = member.out_start as usize + shift..member.out_end as usize + shift;
                append(&mut self.buf.out, input, range);
            }
        } else {
            // Part of the object is already in `out` (logical positions
            // below `flushed`), the rest is pending input. Assemble the
            // sorted body in `scratch`, then replace the object's tail of
            // `out` with it (the `{` is in `out`, as something after it was
            // written).
            let flushed = self.buf.out.len();
            let to_input = |logical: usize| logical - flushed + self.pend;
            self.buf.scratch.clear();
            for (n, &k) in self.buf.order.iter().enumerate() {
                if n > 0 {
                    self.buf.scratch.push(b',');
                }
                let member = &members[k as usize];
                let (start, end) = (member.out_start as usize, member.out_end as usize);
                if start < flushed {
                    append(
                        &mut self.buf.scratch,
                        &self.buf.out,
                        start..end.min(flushed),
                    );
                }
                if end > flushed {
                    append(
                        &mut self.buf.scratch,
                        input,
                        to_input(start.max(flushed))..to_input(end),
                    );
                }
            }
            self.buf.out.truncate(frame.out_open as usize + 1);
            self.buf.out.extend_from_slice(&self.buf.scratch);
        }
        self.pend = pos;
        Ok(())
    }

    /// Reads the string whose opening quote is at `pos`; returns the position
    /// after its closing quote and its unescaped content. Escapes that are
    /// not canonical are rewritten in the output. With `decode`, content
    /// with escapes is decoded into `keys`; otherwise the returned content
    /// is meaningful only when the string has no escapes.
    #[inline(always)]
    fn string(&mut self, pos: usize, decode: bool) -> Result<(usize, Text), DigestError> {
        let start = pos + 1;
        let i = find_string_special(self.input, start);
        if self.input.get(i) == Some(&b'"') {
            // No escapes: the content is the input range, copied verbatim.
            return Ok((i + 1, (false, start, i)));
        }
        self.string_slow(start, i, decode)
    }

    /// [`string`](Self::string) from `i`, the first byte after `start` that
    /// is not plain content.
    #[inline(never)]
    fn string_slow(
        &mut self,
        start: usize,
        mut i: usize,
        decode: bool,
    ) -> Result<(usize, Text), DigestError> {
        let input = self.input;
        // Decoded so far: input[start..run] (when `buf_start` is None) or
        // keys[buf_start..] followed by input[run..i] (otherwise).
        let mut run = start;
        let mut buf_start: Option<usize> = None;
        loop {
            match input.get(i) {
                Some(b'"') => {
                    let text = match buf_start {
                        None => (false, start, i),
                        Some(buf_start) => {
                            self.buf.keys.extend_from_slice(&input[run..i]);
                            (true, buf_start, self.buf.keys.len())
                        }
                    };
                    return Ok((i + 1, text));
                }
                Some(b'\\') => {
                    i = match input.get(i + 1) {
                        // Canonical short escapes, when not decoding, need
                        // nothing but a skip.
                        Some(b'"' | b'\\' | b'b' | b'f' | b'n' | b'r' | b't') if !decode => i + 2,
                        _ => {
                            if decode {
                                buf_start.get_or_insert(self.buf.keys.len());
                                self.buf.keys.extend_from_slice(&input[run..i]);
                            }
                            let next = self.escape(i, decode)?;
                            run = next;
                            next
                        }
                    };
                }
                Some(_) => return Err(self.syntax(i, R_CONTROL)),
                None => return Err(self.syntax(input.len(), R_UNTERMINATED)),
            }
            i = find_string_special(input, i);
        }
    }

    /// Handles the escape whose backslash is at `i`; returns the position
    /// after it.
    fn escape(&mut self, i: usize, decode: bool) -> Result<usize, DigestError> {
        let input = self.input;
        let Some(&letter) = input.get(i + 1) else {
            return Err(self.syntax(input.len(), R_UNTERMINATED));
        };
        let simple = match letter {
            b'"' => b'"',
            b'\\' => b'\\',
            b'/' => b'/',
            b'b' => 0x08,
            b'f' => 0x0c,
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'u' => 0,
            _ => return Err(self.syntax(i, R_ESCAPE)),
        };
        if letter != b'u' {
            if letter == b'/' {
                // `\/` is the only short escape that is not canonical.
                self.flush(i);
                self.buf.out.push(b'/');
                self.pend = i + 2;
            }
            if decode {
                self.buf.keys.push(simple);
            }
            return Ok(i + 2);
        }

        let Some(unit) = hex4(input, i + 2) else {
            return Err(self.syntax(i, R_ESCAPE));
        };
        let (cp, next) = match unit {
            0xD800..=0xDBFF => {
                let low = match input.get(i + 6..i + 8) {
                    Some(b"\\u") => hex4(input, i + 8),
                    _ => None,
                };
                match low {
                    Some(low @ 0xDC00..=0xDFFF) => {
                        (0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00), i + 12)
                    }
                    _ => return Err(self.fail(DigestError::LoneSurrogate { offset: i })),
                }
            }
            0xDC00..=0xDFFF => return Err(self.fail(DigestError::LoneSurrogate { offset: i })),
            _ => (unit, i + 6),
        };
        let Some(c) = char::from_u32(cp) else {
            // Unreachable: surrogates were handled above.
            return Err(self.fail(DigestError::LoneSurrogate { offset: i }));
        };
        if !is_canonical_u_escape(cp, &input[i..i + 6]) {
            self.flush(i);
            write_escaped_char(&mut self.buf.out, c);
            self.pend = next;
        }
        if decode {
            self.buf
                .keys
                .extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
        }
        Ok(next)
    }

    /// Reads the value of the top-level `occurred_at` member, a string at
    /// `pos`, applying the timestamp rule. Returns the position after it.
    fn timestamp_string(&mut self, pos: usize) -> Result<usize, DigestError> {
        self.flush(pos);
        let out_mark = self.buf.out.len();
        let keys_mark = self.buf.keys.len();
        let (after, (in_buf, start, end)) = self.string(pos, true)?;
        let text = if in_buf {
            &self.buf.keys[start..end]
        } else {
            &self.input[start..end]
        };
        if let Some(utc) = timestamp::normalize(text) {
            self.buf.out.truncate(out_mark);
            self.buf.out.push(b'"');
            self.buf.out.extend_from_slice(utc.as_bytes());
            self.buf.out.push(b'"');
            self.pend = after;
        }
        self.buf.keys.truncate(keys_mark);
        Ok(after)
    }

    /// Validates the number at `pos` (it is copied verbatim) and returns the
    /// position after it.
    #[inline(always)]
    fn number(&mut self, pos: usize) -> Result<usize, DigestError> {
        let s = self.input;
        let mut i = pos;
        if s.get(i) == Some(&b'-') {
            i += 1;
        }
        match s.get(i) {
            Some(b'0') => {
                i += 1;
                if is_digit(s.get(i)) {
                    return Err(self.syntax(i, R_NUMBER));
                }
            }
            Some(b'1'..=b'9') => {
                i += 1;
                i = skip_digits(s, i);
            }
            _ => return Err(self.syntax(i, R_NUMBER)),
        }
        if s.get(i) == Some(&b'.') {
            i += 1;
            if !is_digit(s.get(i)) {
                return Err(self.syntax(i, R_NUMBER));
            }
            i = skip_digits(s, i);
        }
        if matches!(s.get(i), Some(b'e' | b'E')) {
            i += 1;
            if matches!(s.get(i), Some(b'+' | b'-')) {
                i += 1;
            }
            if !is_digit(s.get(i)) {
                return Err(self.syntax(i, R_NUMBER));
            }
            i = skip_digits(s, i);
        }
        Ok(i)
    }

    /// Checks for `word` (`true`, `false` or `null`) at `pos` and returns
    /// the position after it.
    #[inline(always)]
    fn literal(&mut self, pos: usize, word: &[u8]) -> Result<usize, DigestError> {
        if self.input[pos..].starts_with(word) {
            Ok(pos + word.len())
        } else {
            Err(self.syntax(pos, R_LITERAL))
        }
    }
}
