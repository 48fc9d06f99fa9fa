//! Conformance corpus for the strict canonical JSON form
//! (`docs/canonical-json.md`), run through the public API only.
//!
//! The cases live in `tests/conformance/cases.jsonl`, one JSON object per
//! line. Every expectation was written by hand from the document, not taken
//! from the implementation: if a case fails, read the document before
//! touching the case. Fields:
//!
//! * `name`: unique, `snake_case`; `category`: the area the case covers;
//!   `why`: one line saying what the case checks.
//! * `input`: the exact input bytes, either as a hex string or, for large
//!   inputs, as a list of segments `{"text": ".."}` or `{"hex": ".."}`, each
//!   with an optional `"times": n` (default 1), concatenated.
//! * `input_text` (optional): the input as text, for reading; when present it
//!   must equal the input bytes exactly (checked).
//! * `expect`: `"accept"` or `"reject"`.
//! * accept: `output` (same forms as `input`) is the exact canonical form,
//!   with an optional `output_text` like `input_text`.
//! * reject: `error` is the `DigestError` variant name; `offset` is given
//!   where the document determines it (never for `TooLarge`, whose `len` is
//!   checked against the input length, nor for `ByteOrderMark`); `reason`
//!   (optional) is the `InvalidJson` reason phrase.
//!
//! Besides the verdict, every accepted case checks that `digest()` agrees,
//! that the digest is the SHA-256 of the expected bytes, that the output is
//! not longer than the input and that the expected form is its own canonical
//! form; every rejected case checks that `digest()` returns the same error.
//! All failures are collected and reported together.

use std::collections::{BTreeMap, HashSet};

use result_inbox::digest::{canonicalize, digest, DigestError, MAX_DEPTH, MAX_EVENT_BYTES};
use serde_json::{Map, Value};
use sha2::{Digest as _, Sha256};

const CORPUS: &str = include_str!("conformance/cases.jsonl");

/// The corpus must keep at least this many cases.
const MIN_CASES: usize = 150;

/// Areas the corpus must cover (each needs at least one case).
const CATEGORIES: &[&str] = &[
    "structure",
    "numbers",
    "literals",
    "strings",
    "surrogates",
    "utf8",
    "bom",
    "depth",
    "size",
    "duplicates",
    "ordering",
    "occurred_at",
];

const ERROR_NAMES: &[&str] = &[
    "TooLarge",
    "ByteOrderMark",
    "InvalidUtf8",
    "InvalidJson",
    "DuplicateKey",
    "LoneSurrogate",
    "TooDeep",
];

const FIELDS: &[&str] = &[
    "name",
    "category",
    "why",
    "input",
    "input_text",
    "expect",
    "output",
    "output_text",
    "error",
    "offset",
    "reason",
];

struct Case {
    line: usize,
    name: String,
    category: String,
    input: Vec<u8>,
    expect: Expect,
}

enum Expect {
    Accept(Vec<u8>),
    Reject {
        error: String,
        offset: Option<usize>,
        reason: Option<String>,
    },
}

/// An error reduced to what the corpus can state about it.
#[derive(PartialEq, Eq)]
struct Seen {
    name: String,
    offset: Option<usize>,
    reason: Option<String>,
    len: Option<usize>,
}

impl Seen {
    fn of(e: &DigestError) -> Seen {
        let (name, len, reason) = match e {
            DigestError::TooLarge { len } => ("TooLarge", Some(*len), None),
            DigestError::ByteOrderMark => ("ByteOrderMark", None, None),
            DigestError::InvalidUtf8 { .. } => ("InvalidUtf8", None, None),
            DigestError::InvalidJson { reason, .. } => ("InvalidJson", None, Some(*reason)),
            DigestError::DuplicateKey { .. } => ("DuplicateKey", None, None),
            DigestError::LoneSurrogate { .. } => ("LoneSurrogate", None, None),
            DigestError::TooDeep { .. } => ("TooDeep", None, None),
            // The enum is non-exhaustive: a new variant never matches a case.
            _ => {
                return Seen {
                    name: format!("{e:?}"),
                    offset: e.offset(),
                    reason: None,
                    len: None,
                }
            }
        };
        Seen {
            name: name.to_owned(),
            offset: e.offset(),
            reason: reason.map(str::to_owned),
            len,
        }
    }

    fn show(&self) -> String {
        let mut s = self.name.clone();
        if let Some(offset) = self.offset {
            s.push_str(&format!(" at {offset}"));
        }
        if let Some(len) = self.len {
            s.push_str(&format!(" (len {len})"));
        }
        if let Some(reason) = &self.reason {
            s.push_str(&format!(" ({reason:?})"));
        }
        s
    }
}

/// Bytes shown for a failure report: escaped, and cut short when long.
fn show(bytes: &[u8]) -> String {
    const KEEP: usize = 100;
    let text: String = String::from_utf8_lossy(&bytes[..bytes.len().min(KEEP)])
        .escape_debug()
        .collect();
    let text = if std::str::from_utf8(bytes).is_err() {
        format!(
            "{text} [hex {}]",
            hex::encode(&bytes[..bytes.len().min(KEEP)])
        )
    } else {
        text
    };
    if bytes.len() > KEEP {
        format!("\"{text}\" … ({} bytes)", bytes.len())
    } else {
        format!("\"{text}\"")
    }
}

/// Decodes an `input` or `output` field: a hex string or a segment list.
fn bytes_of(value: &Value) -> Result<Vec<u8>, String> {
    match value {
        Value::String(hex) => hex::decode(hex).map_err(|e| format!("bad hex: {e}")),
        Value::Array(segments) => {
            let mut out = Vec::new();
            for segment in segments {
                let segment = segment.as_object().ok_or("a segment must be an object")?;
                if let Some(key) = segment
                    .keys()
                    .find(|k| !matches!(k.as_str(), "text" | "hex" | "times"))
                {
                    return Err(format!("unknown segment field {key:?}"));
                }
                let part = match (segment.get("text"), segment.get("hex")) {
                    (Some(Value::String(t)), None) => t.as_bytes().to_vec(),
                    (None, Some(Value::String(h))) => {
                        hex::decode(h).map_err(|e| format!("bad hex in a segment: {e}"))?
                    }
                    _ => return Err("a segment needs exactly one of text or hex".into()),
                };
                let times = match segment.get("times") {
                    None => 1,
                    Some(t) => t.as_u64().ok_or("times must be a non-negative integer")?,
                };
                for _ in 0..times {
                    out.extend_from_slice(&part);
                }
            }
            Ok(out)
        }
        _ => Err("must be a hex string or a list of segments".into()),
    }
}

fn string_field<'a>(obj: &'a Map<String, Value>, key: &str) -> Result<Option<&'a str>, String> {
    match obj.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(format!("{key} must be a string")),
    }
}

fn required<'a>(obj: &'a Map<String, Value>, key: &str) -> Result<&'a str, String> {
    string_field(obj, key)?.ok_or_else(|| format!("missing {key}"))
}

/// Decodes `key` and checks it against the readable `text_key`, if present.
fn bytes_field(obj: &Map<String, Value>, key: &str, text_key: &str) -> Result<Vec<u8>, String> {
    let bytes = bytes_of(obj.get(key).ok_or_else(|| format!("missing {key}"))?)
        .map_err(|e| format!("{key}: {e}"))?;
    if let Some(text) = string_field(obj, text_key)? {
        if text.as_bytes() != bytes {
            return Err(format!("{text_key} does not match {key}"));
        }
    }
    Ok(bytes)
}

fn parse_case(line: usize, text: &str) -> Result<Case, String> {
    let value: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let obj = value.as_object().ok_or("not a JSON object")?;
    if let Some(key) = obj.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(format!("unknown field {key:?}"));
    }
    let name = required(obj, "name")?.to_owned();
    let category = required(obj, "category")?.to_owned();
    if required(obj, "why")?.trim().is_empty() {
        return Err("empty why".into());
    }
    let input = bytes_field(obj, "input", "input_text")?;
    let expect = match required(obj, "expect")? {
        "accept" => {
            if ["error", "offset", "reason"]
                .iter()
                .any(|k| obj.contains_key(*k))
            {
                return Err("an accepted case has no error, offset or reason".into());
            }
            Expect::Accept(bytes_field(obj, "output", "output_text")?)
        }
        "reject" => {
            if obj.contains_key("output") || obj.contains_key("output_text") {
                return Err("a rejected case has no output".into());
            }
            let error = required(obj, "error")?.to_owned();
            if !ERROR_NAMES.contains(&error.as_str()) {
                return Err(format!("unknown error {error:?}"));
            }
            let offset = match obj.get("offset") {
                None => None,
                Some(v) => {
                    Some(v.as_u64().ok_or("offset must be a non-negative integer")? as usize)
                }
            };
            if offset.is_some() && matches!(error.as_str(), "TooLarge" | "ByteOrderMark") {
                return Err(format!("{error} has no offset"));
            }
            let reason = string_field(obj, "reason")?.map(str::to_owned);
            if reason.is_some() && error != "InvalidJson" {
                return Err("only InvalidJson has a reason".into());
            }
            Expect::Reject {
                error,
                offset,
                reason,
            }
        }
        other => return Err(format!("expect must be accept or reject, not {other:?}")),
    };
    Ok(Case {
        line,
        name,
        category,
        input,
        expect,
    })
}

/// Loads the corpus; panics listing every malformed line.
fn corpus() -> Vec<Case> {
    let mut cases = Vec::new();
    let mut problems = Vec::new();
    for (n, text) in CORPUS.lines().enumerate() {
        if text.trim().is_empty() {
            continue;
        }
        match parse_case(n + 1, text) {
            Ok(case) => cases.push(case),
            Err(e) => problems.push(format!("line {}: {e}", n + 1)),
        }
    }
    assert!(
        problems.is_empty(),
        "malformed corpus lines:\n{}",
        problems.join("\n")
    );
    cases
}

/// Runs one case; returns what went wrong, if anything.
fn check(case: &Case) -> Vec<String> {
    let mut wrong = Vec::new();
    let result = canonicalize(&case.input);
    match (&case.expect, &result) {
        (Expect::Accept(expected), Ok(c)) => {
            if c.as_bytes() != expected.as_slice() {
                wrong.push(format!(
                    "canonical form: expected {}, got {}",
                    show(expected),
                    show(c.as_bytes())
                ));
            }
            let sha: [u8; 32] = Sha256::digest(expected).into();
            if c.as_bytes() == expected.as_slice() && c.digest().as_bytes() != &sha {
                wrong.push("digest is not the SHA-256 of the canonical bytes".into());
            }
            if digest(&case.input).as_ref() != Ok(c.digest()) {
                wrong.push(format!(
                    "digest() disagrees with canonicalize(): {:?}",
                    digest(&case.input)
                ));
            }
            if c.as_bytes().len() > case.input.len() {
                wrong.push("canonical form is longer than the input".into());
            }
            match canonicalize(expected) {
                Ok(again) if again.as_bytes() == expected.as_slice() => {}
                Ok(again) => wrong.push(format!(
                    "expected canonical form is not a fixed point: it becomes {}",
                    show(again.as_bytes())
                )),
                Err(e) => wrong.push(format!(
                    "expected canonical form is rejected: {}",
                    Seen::of(&e).show()
                )),
            }
        }
        (Expect::Accept(expected), Err(e)) => wrong.push(format!(
            "expected accept with {}, got {}",
            show(expected),
            Seen::of(e).show()
        )),
        (
            Expect::Reject {
                error,
                offset,
                reason,
            },
            outcome,
        ) => {
            let want = Seen {
                name: error.clone(),
                offset: *offset,
                reason: reason.clone(),
                len: (error == "TooLarge").then_some(case.input.len()),
            };
            match outcome {
                Ok(c) => wrong.push(format!(
                    "expected {}, got accept with {}",
                    want.show(),
                    show(c.as_bytes())
                )),
                Err(e) => {
                    let got = Seen::of(e);
                    let matches = got.name == want.name
                        && (offset.is_none() || got.offset == want.offset)
                        && (reason.is_none() || got.reason == want.reason)
                        && (want.len.is_none() || got.len == want.len);
                    if !matches {
                        wrong.push(format!("expected {}, got {}", want.show(), got.show()));
                    }
                    if digest(&case.input).as_ref().err() != Some(e) {
                        wrong.push(format!(
                            "digest() disagrees with canonicalize(): {:?}",
                            digest(&case.input)
                        ));
                    }
                }
            }
        }
    }
    wrong
}

#[test]
fn the_corpus_is_large_named_uniquely_and_covers_every_area() {
    // The size and depth cases are written for these limits.
    assert_eq!(MAX_EVENT_BYTES, 524_288);
    assert_eq!(MAX_DEPTH, 128);

    let cases = corpus();
    assert!(
        cases.len() >= MIN_CASES,
        "the corpus has {} cases, at least {MIN_CASES} are required",
        cases.len()
    );

    let mut seen = HashSet::new();
    let duplicates: Vec<String> = cases
        .iter()
        .filter(|c| !seen.insert(c.name.as_str()))
        .map(|c| format!("line {}: {}", c.line, c.name))
        .collect();
    assert!(
        duplicates.is_empty(),
        "case names must be unique; repeated:\n{}",
        duplicates.join("\n")
    );

    let mut per_category: BTreeMap<&str, usize> = BTreeMap::new();
    for case in &cases {
        *per_category.entry(case.category.as_str()).or_default() += 1;
    }
    let unknown: Vec<&str> = per_category
        .keys()
        .copied()
        .filter(|c| !CATEGORIES.contains(c))
        .collect();
    assert!(unknown.is_empty(), "unknown categories: {unknown:?}");
    let missing: Vec<&str> = CATEGORIES
        .iter()
        .copied()
        .filter(|c| !per_category.contains_key(c))
        .collect();
    assert!(missing.is_empty(), "categories without cases: {missing:?}");
}

#[test]
fn every_case_in_the_corpus_gets_its_documented_verdict() {
    let cases = corpus();
    let mut failures = Vec::new();
    for case in &cases {
        let wrong = check(case);
        if !wrong.is_empty() {
            failures.push(format!(
                "{} (line {}, {}; input {}):\n    {}",
                case.name,
                case.line,
                case.category,
                show(&case.input),
                wrong.join("\n    ")
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} conformance cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
