//! Helpers shared by the fuzz targets.
//!
//! * [`split_top_level_members`] / [`reverse_top_level`]: a bracket-aware
//!   scanner over *canonical* JSON (no whitespace, minimal escapes) that
//!   splits an object into its top-level members.
//! * [`Node`] / [`parse_canonical`]: the same scanner as a tree, and
//!   emitters that spell a canonical document differently without changing
//!   its value: members shuffled, whitespace between tokens, escapes
//!   ([`scramble`]); large padding members that force the parser's deferred
//!   reordering path ([`padded`]).
//! * [`J`]: a tiny JSON tree with an independent reference serializer of
//!   the canonical form ([`J::canonical`]) and a randomized spelling
//!   ([`J::spell`]), for generated documents.
//!
//! Everything here is written for the fuzz targets only: simple rather than
//! fast, and it panics on input that breaks its own assumptions.

use arbitrary::{Result as AResult, Unstructured};

/// Largest input the library accepts (`MAX_EVENT_BYTES`).
pub const MAX_INPUT: usize = result_inbox::digest::MAX_EVENT_BYTES;

// ---------------------------------------------------------------------------
// Canonical text scanner
// ---------------------------------------------------------------------------

/// Splits the canonical text of an object, `{m1,m2,…}`, into its members
/// (`"key":value` slices). `None` if `canon` is not an object; `Some(vec![])`
/// for `{}`.
///
/// Canonical text has no whitespace, so the scanner only tracks strings (and
/// the escapes in them, so that `\"` does not end one) and the nesting of
/// brackets: a `,` outside strings at depth 0 separates two members.
pub fn split_top_level_members(canon: &[u8]) -> Option<Vec<&[u8]>> {
    let body = canon.strip_prefix(b"{")?.strip_suffix(b"}")?;
    let mut members = Vec::new();
    if body.is_empty() {
        return Some(members);
    }
    let (mut depth, mut in_string, mut escaped, mut start) = (0usize, false, false, 0usize);
    for (i, &b) in body.iter().enumerate() {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => depth += 1,
            b']' | b'}' => depth = depth.checked_sub(1)?,
            b',' if depth == 0 => {
                members.push(&body[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if in_string || depth != 0 {
        return None;
    }
    members.push(&body[start..]);
    Some(members)
}

/// The canonical object `canon` with its top-level members in reverse order,
/// or `None` if it is not an object with at least two members.
pub fn reverse_top_level(canon: &[u8]) -> Option<Vec<u8>> {
    let members = split_top_level_members(canon)?;
    if members.len() < 2 {
        return None;
    }
    let mut out = Vec::with_capacity(canon.len());
    out.push(b'{');
    for (n, m) in members.iter().rev().enumerate() {
        if n > 0 {
            out.push(b',');
        }
        out.extend_from_slice(m);
    }
    out.push(b'}');
    Some(out)
}

/// A canonical document as a tree of slices of its text.
#[derive(Debug)]
pub enum Node<'a> {
    /// A number or a literal, as written.
    Atom(&'a [u8]),
    /// A string: the canonical text between the quotes.
    Str(&'a [u8]),
    /// An array.
    Arr(Vec<Node<'a>>),
    /// An object: (key text between the quotes, value), in canonical order.
    Obj(Vec<(&'a [u8], Node<'a>)>),
}

/// Reads canonical text (no whitespace) into a [`Node`]; `None` if it is not
/// shaped like canonical JSON.
pub fn parse_canonical(s: &[u8]) -> Option<Node<'_>> {
    let mut p = 0;
    let node = node(s, &mut p)?;
    (p == s.len()).then_some(node)
}

fn node<'a>(s: &'a [u8], p: &mut usize) -> Option<Node<'a>> {
    match *s.get(*p)? {
        b'"' => string_text(s, p).map(Node::Str),
        b'[' => {
            *p += 1;
            let mut items = Vec::new();
            if s.get(*p) == Some(&b']') {
                *p += 1;
                return Some(Node::Arr(items));
            }
            loop {
                items.push(node(s, p)?);
                match *s.get(*p)? {
                    b',' => *p += 1,
                    b']' => {
                        *p += 1;
                        return Some(Node::Arr(items));
                    }
                    _ => return None,
                }
            }
        }
        b'{' => {
            *p += 1;
            let mut members = Vec::new();
            if s.get(*p) == Some(&b'}') {
                *p += 1;
                return Some(Node::Obj(members));
            }
            loop {
                if s.get(*p) != Some(&b'"') {
                    return None;
                }
                let key = string_text(s, p)?;
                if s.get(*p) != Some(&b':') {
                    return None;
                }
                *p += 1;
                members.push((key, node(s, p)?));
                match *s.get(*p)? {
                    b',' => *p += 1,
                    b'}' => {
                        *p += 1;
                        return Some(Node::Obj(members));
                    }
                    _ => return None,
                }
            }
        }
        _ => {
            let start = *p;
            while s.get(*p).is_some_and(|b| !matches!(b, b',' | b']' | b'}')) {
                *p += 1;
            }
            (*p > start).then(|| Node::Atom(&s[start..*p]))
        }
    }
}

/// The text between the quotes of the string at `s[*p]`; moves `p` past it.
fn string_text<'a>(s: &'a [u8], p: &mut usize) -> Option<&'a [u8]> {
    let start = *p + 1;
    let mut i = start;
    loop {
        match *s.get(i)? {
            b'"' => {
                *p = i + 1;
                return Some(&s[start..i]);
            }
            b'\\' => i += 2,
            _ => i += 1,
        }
    }
}

/// Decodes the text of a string in canonical spelling (only the escapes the
/// canonical form writes). `None` on anything else.
pub fn decode_canonical_string(text: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(text).ok()?;
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        out.push(match chars.next()? {
            '"' => '"',
            '\\' => '\\',
            'b' => '\u{8}',
            'f' => '\u{c}',
            'n' => '\n',
            'r' => '\r',
            't' => '\t',
            'u' => {
                let hex: String = chars.by_ref().take(4).collect();
                if hex.len() != 4 || !hex.starts_with("00") || hex != hex.to_lowercase() {
                    return None;
                }
                char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?
            }
            _ => return None,
        });
    }
    Some(out)
}

// ---------------------------------------------------------------------------
// Spelling a document differently
// ---------------------------------------------------------------------------

/// A small deterministic PRNG (xorshift64*), seeded from the fuzz input.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// Seeds from bytes (FNV-1a); never the zero state.
    pub fn from_bytes(data: &[u8]) -> Rng {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for &b in data {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        Rng(h | 1)
    }

    /// The next number.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number below `n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// True with probability 1/n.
    pub fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }
}

/// How [`write_string`] may spell a string.
#[derive(Debug, Clone, Copy)]
pub struct Spelling {
    /// Chance (1 in n, 0 = never) that a character is written as `\uXXXX`.
    pub u_escape_one_in: u64,
    /// Chance that insignificant whitespace is written around a token.
    pub ws_one_in: u64,
}

/// Writes insignificant whitespace (maybe none).
pub fn write_ws(out: &mut Vec<u8>, rng: &mut Rng, spelling: Spelling) {
    if spelling.ws_one_in == 0 || !rng.one_in(spelling.ws_one_in) {
        return;
    }
    for _ in 0..=rng.below(2) {
        out.push(b" \t\n\r"[rng.below(4) as usize]);
    }
}

/// Writes `s` as a JSON string: canonical escapes, or with `rng` and
/// `spelling` any other valid spelling of the same characters.
pub fn write_string(out: &mut Vec<u8>, s: &str, rng: &mut Rng, spelling: Spelling) {
    out.push(b'"');
    for c in s.chars() {
        let u_escape = spelling.u_escape_one_in != 0 && rng.one_in(spelling.u_escape_one_in);
        if u_escape {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                if rng.one_in(2) {
                    out.extend_from_slice(format!("\\u{unit:04X}").as_bytes());
                } else {
                    out.extend_from_slice(format!("\\u{unit:04x}").as_bytes());
                }
            }
        } else if c == '/' && spelling.u_escape_one_in != 0 && rng.one_in(2) {
            out.extend_from_slice(b"\\/");
        } else {
            write_canonical_char(out, c);
        }
    }
    out.push(b'"');
}

/// Writes one character as the canonical form does (reference version,
/// written from `docs/canonical-json.md`).
pub fn write_canonical_char(out: &mut Vec<u8>, c: char) {
    match c {
        '"' => out.extend_from_slice(b"\\\""),
        '\\' => out.extend_from_slice(b"\\\\"),
        '\u{8}' => out.extend_from_slice(b"\\b"),
        '\u{c}' => out.extend_from_slice(b"\\f"),
        '\n' => out.extend_from_slice(b"\\n"),
        '\r' => out.extend_from_slice(b"\\r"),
        '\t' => out.extend_from_slice(b"\\t"),
        c if (c as u32) < 0x20 => out.extend_from_slice(format!("\\u{:04x}", c as u32).as_bytes()),
        c => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
    }
}

/// Spells the canonical document `node` differently: every object's members
/// shuffled, whitespace around tokens, escapes in strings and keys. Its
/// canonical form must be the text `node` was read from.
pub fn scramble(node: &Node<'_>, rng: &mut Rng, spelling: Spelling, out: &mut Vec<u8>) {
    write_ws(out, rng, spelling);
    match node {
        Node::Atom(text) => out.extend_from_slice(text),
        Node::Str(text) => {
            let s = decode_canonical_string(text).expect("canonical string text");
            write_string(out, &s, rng, spelling);
        }
        Node::Arr(items) => {
            out.push(b'[');
            for (n, item) in items.iter().enumerate() {
                if n > 0 {
                    write_ws(out, rng, spelling);
                    out.push(b',');
                }
                scramble(item, rng, spelling, out);
                write_ws(out, rng, spelling);
            }
            if items.is_empty() {
                write_ws(out, rng, spelling);
            }
            out.push(b']');
        }
        Node::Obj(members) => {
            let mut order: Vec<usize> = (0..members.len()).collect();
            match rng.below(3) {
                0 => order.reverse(),
                1 => {
                    // Fisher-Yates.
                    for i in (1..order.len()).rev() {
                        order.swap(i, rng.below(i as u64 + 1) as usize);
                    }
                }
                _ => {
                    if !order.is_empty() {
                        let k = rng.below(order.len() as u64) as usize;
                        order.rotate_left(k);
                    }
                }
            }
            out.push(b'{');
            for (n, &k) in order.iter().enumerate() {
                let (key, value) = &members[k];
                if n > 0 {
                    out.push(b',');
                }
                write_ws(out, rng, spelling);
                let key = decode_canonical_string(key).expect("canonical key text");
                write_string(out, &key, rng, spelling);
                write_ws(out, rng, spelling);
                out.push(b':');
                scramble(value, rng, spelling, out);
                write_ws(out, rng, spelling);
            }
            if members.is_empty() {
                write_ws(out, rng, spelling);
            }
            out.push(b'}');
        }
    }
}

/// Length of the padding string in [`padded`]: more than the parser's
/// threshold (4096 bytes of object body) for reordering an object at the end.
pub const PAD_LEN: usize = 4200;

/// Builds, from the canonical document `node`, an input whose objects (the
/// first `pads` of them, in document order, that have no `""` key) each get
/// an extra member `"":"ppp…"` of [`PAD_LEN`] bytes, written *last* with the
/// other members in reverse order; and the canonical form of that input,
/// where the pad comes first (the empty key sorts before every other key).
pub fn padded(node: &Node<'_>, pads: &mut usize, input: &mut Vec<u8>, expected: &mut Vec<u8>) {
    match node {
        Node::Atom(text) => {
            input.extend_from_slice(text);
            expected.extend_from_slice(text);
        }
        Node::Str(text) => {
            for out in [&mut *input, &mut *expected] {
                out.push(b'"');
                out.extend_from_slice(text);
                out.push(b'"');
            }
        }
        Node::Arr(items) => {
            input.push(b'[');
            expected.push(b'[');
            for (n, item) in items.iter().enumerate() {
                if n > 0 {
                    input.push(b',');
                    expected.push(b',');
                }
                padded(item, pads, input, expected);
            }
            input.push(b']');
            expected.push(b']');
        }
        Node::Obj(members) => {
            let pad = *pads > 0 && members.iter().all(|(k, _)| !k.is_empty());
            if pad {
                *pads -= 1;
            }
            let pad_text = {
                let mut t = b"\"\":\"".to_vec();
                t.resize(t.len() + PAD_LEN, b'p');
                t.push(b'"');
                t
            };
            // The canonical form, members in order, pad first.
            expected.push(b'{');
            if pad {
                expected.extend_from_slice(&pad_text);
            }
            // Each member's value is written into both outputs at once, so
            // the input side is assembled member by member and reversed.
            let mut input_members = Vec::with_capacity(members.len());
            for (n, (key, value)) in members.iter().enumerate() {
                if n > 0 || pad {
                    expected.push(b',');
                }
                let mut member = Vec::new();
                for out in [&mut member, &mut *expected] {
                    out.push(b'"');
                    out.extend_from_slice(key);
                    out.extend_from_slice(b"\":");
                }
                padded(value, pads, &mut member, expected);
                input_members.push(member);
            }
            expected.push(b'}');
            input.push(b'{');
            for (n, member) in input_members.iter().rev().enumerate() {
                if n > 0 {
                    input.push(b',');
                }
                input.extend_from_slice(member);
            }
            if pad {
                if !members.is_empty() {
                    input.push(b',');
                }
                input.extend_from_slice(&pad_text);
            }
            input.push(b'}');
        }
    }
}

/// Counts the objects in `node`.
pub fn count_objects(node: &Node<'_>) -> usize {
    match node {
        Node::Atom(_) | Node::Str(_) => 0,
        Node::Arr(items) => items.iter().map(count_objects).sum(),
        Node::Obj(members) => 1 + members.iter().map(|(_, v)| count_objects(v)).sum::<usize>(),
    }
}

// ---------------------------------------------------------------------------
// Generated documents with a reference canonical form
// ---------------------------------------------------------------------------

/// A JSON value built by a fuzz target.
#[derive(Debug, Clone, PartialEq)]
pub enum J {
    /// A number, literal or any other text written as is (valid or not).
    Raw(String),
    /// A string.
    Str(String),
    /// An array.
    Arr(Vec<J>),
    /// An object, members in the order they are written in the input.
    /// Keys must be distinct.
    Obj(Vec<(String, J)>),
}

impl J {
    /// The canonical form, by the rules of `docs/canonical-json.md` (keys by
    /// UTF-8 bytes, minimal escapes, numbers as written). Does not apply the
    /// top-level `occurred_at` rule: the caller puts the normalized value in.
    pub fn canonical(&self, out: &mut Vec<u8>) {
        match self {
            J::Raw(text) => out.extend_from_slice(text.as_bytes()),
            J::Str(s) => {
                out.push(b'"');
                for c in s.chars() {
                    write_canonical_char(out, c);
                }
                out.push(b'"');
            }
            J::Arr(items) => {
                out.push(b'[');
                for (n, item) in items.iter().enumerate() {
                    if n > 0 {
                        out.push(b',');
                    }
                    item.canonical(out);
                }
                out.push(b']');
            }
            J::Obj(members) => {
                let mut sorted: Vec<&(String, J)> = members.iter().collect();
                sorted.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
                out.push(b'{');
                for (n, (key, value)) in sorted.into_iter().enumerate() {
                    if n > 0 {
                        out.push(b',');
                    }
                    J::Str(key.clone()).canonical(out);
                    out.push(b':');
                    value.canonical(out);
                }
                out.push(b'}');
            }
        }
    }

    /// The canonical form as a string.
    pub fn canonical_string(&self) -> String {
        let mut out = Vec::new();
        self.canonical(&mut out);
        String::from_utf8(out).expect("canonical text is UTF-8")
    }

    /// Writes the value in the order given, with random whitespace and
    /// escapes.
    pub fn spell(&self, rng: &mut Rng, spelling: Spelling, out: &mut Vec<u8>) {
        write_ws(out, rng, spelling);
        match self {
            J::Raw(text) => out.extend_from_slice(text.as_bytes()),
            J::Str(s) => write_string(out, s, rng, spelling),
            J::Arr(items) => {
                out.push(b'[');
                for (n, item) in items.iter().enumerate() {
                    if n > 0 {
                        out.push(b',');
                    }
                    item.spell(rng, spelling, out);
                }
                write_ws(out, rng, spelling);
                out.push(b']');
            }
            J::Obj(members) => {
                out.push(b'{');
                for (n, (key, value)) in members.iter().enumerate() {
                    if n > 0 {
                        out.push(b',');
                    }
                    write_ws(out, rng, spelling);
                    write_string(out, key, rng, spelling);
                    write_ws(out, rng, spelling);
                    out.push(b':');
                    value.spell(rng, spelling, out);
                }
                write_ws(out, rng, spelling);
                out.push(b'}');
            }
        }
    }

    /// The member `key` of an object.
    pub fn get(&self, key: &str) -> Option<&J> {
        match self {
            J::Obj(members) => members.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }
}

/// A valid JSON number text.
pub fn arbitrary_number(u: &mut Unstructured<'_>) -> AResult<String> {
    let mut s = String::new();
    if u.arbitrary()? {
        s.push('-');
    }
    let int: u64 = u.arbitrary()?;
    if u.ratio(1, 4)? {
        s.push('0');
    } else {
        s.push_str(&(int % 100_000 + 1).to_string());
        if u.ratio(1, 8)? {
            // Beyond u64 and f64 precision.
            s.push_str("123456789012345678901234567890");
        }
    }
    if u.ratio(1, 3)? {
        s.push('.');
        let digits = u.int_in_range(1..=4)?;
        for _ in 0..digits {
            s.push(char::from(b'0' + u.int_in_range(0..=9)?));
        }
    }
    if u.ratio(1, 4)? {
        s.push(*u.choose(&['e', 'E'])?);
        s.push_str(u.choose(&["", "+", "-"])?);
        s.push_str(&u.int_in_range(0..=400u32)?.to_string());
    }
    Ok(s)
}

/// A string of characters picked to exercise escaping and key order.
pub fn arbitrary_text(u: &mut Unstructured<'_>, max_len: usize) -> AResult<String> {
    const POOL: &[char] = &[
        'a',
        'b',
        'z',
        'A',
        '0',
        '_',
        ' ',
        '/',
        '"',
        '\\',
        '\u{0}',
        '\u{8}',
        '\t',
        '\n',
        '\u{c}',
        '\r',
        '\u{1f}',
        '\u{7f}',
        'é',
        '\u{2028}',
        '\u{ffff}',
        '😀',
        '\u{10ffff}',
    ];
    let len = u.int_in_range(0..=max_len)?;
    let mut s = String::new();
    for _ in 0..len {
        if u.ratio(1, 8)? {
            s.push(u.arbitrary::<char>()?);
        } else {
            s.push(*u.choose(POOL)?);
        }
    }
    Ok(s)
}

/// An arbitrary JSON value of at most `depth` levels, with distinct keys.
pub fn arbitrary_json(u: &mut Unstructured<'_>, depth: u32) -> AResult<J> {
    let kind = if depth == 0 {
        u.int_in_range(0..=4)?
    } else {
        u.int_in_range(0..=6)?
    };
    Ok(match kind {
        0 => J::Raw(u.choose(&["null", "true", "false"])?.to_string()),
        1 | 2 => J::Raw(arbitrary_number(u)?),
        3 | 4 => J::Str(arbitrary_text(u, 12)?),
        5 => {
            let n = u.int_in_range(0..=4)?;
            let mut items = Vec::new();
            for _ in 0..n {
                items.push(arbitrary_json(u, depth - 1)?);
            }
            J::Arr(items)
        }
        _ => {
            let n = u.int_in_range(0..=6)?;
            let mut members: Vec<(String, J)> = Vec::new();
            for _ in 0..n {
                let key = if u.ratio(1, 3)? {
                    // Keys that share long prefixes, and the timestamp key
                    // (which is only special at the top level).
                    u.choose(&[
                        "occurred_at",
                        "abcdefgh",
                        "abcdefghi",
                        "abcdefgh\u{0}",
                        "",
                        "abcdefgg",
                    ])?
                    .to_string()
                } else {
                    arbitrary_text(u, 10)?
                };
                if members.iter().any(|(k, _)| *k == key) {
                    continue;
                }
                members.push((key, arbitrary_json(u, depth - 1)?));
            }
            J::Obj(members)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_and_reverses_top_level_members() {
        let c = br#"{"a":[1,{"b":"}\"]"}],"c":{"d":2},"e":"x,y"}"#;
        let members = split_top_level_members(c).unwrap();
        assert_eq!(members.len(), 3);
        assert_eq!(members[1], br#""c":{"d":2}"#);
        assert_eq!(
            reverse_top_level(c).unwrap(),
            br#"{"e":"x,y","c":{"d":2},"a":[1,{"b":"}\"]"}]}"#.to_vec()
        );
        assert_eq!(split_top_level_members(b"{}").unwrap().len(), 0);
        assert!(split_top_level_members(b"[1]").is_none());
    }

    #[test]
    fn padded_builds_input_and_expected() {
        let c = br#"{"a":{"x":1,"y":2},"b":3}"#;
        let node = parse_canonical(c).unwrap();
        let (mut input, mut expected) = (Vec::new(), Vec::new());
        let mut pads = 1;
        padded(&node, &mut pads, &mut input, &mut expected);
        let pad = format!(r#""":"{}""#, "p".repeat(PAD_LEN));
        assert_eq!(
            String::from_utf8(expected).unwrap(),
            format!(r#"{{{pad},"a":{{"x":1,"y":2}},"b":3}}"#)
        );
        assert_eq!(
            String::from_utf8(input).unwrap(),
            format!(r#"{{"b":3,"a":{{"y":2,"x":1}},{pad}}}"#)
        );
    }

    #[test]
    fn decodes_canonical_strings() {
        assert_eq!(
            decode_canonical_string(br#"a\"\\\n\u001f/"#).unwrap(),
            "a\"\\\n\u{1f}/"
        );
        assert!(decode_canonical_string(br#"\u0041"#).is_some());
        assert!(decode_canonical_string(br#"\/"#).is_none());
    }
}
