//! Arbitrary bytes through `result_inbox::digest::canonicalize`.
//!
//! Invariants (a panic is a finding):
//! * no panic, and `digest(x)` agrees with `canonicalize(x)` (same error, or
//!   `digest(x) == canonicalize(x).digest()`), also on a second, warm call;
//! * an accepted input's canonical form is UTF-8, no longer than the input,
//!   hashes (SHA-256, computed here) to the reported digest, is itself
//!   accepted and canonicalizes to the same bytes (idempotence);
//! * key order never matters: the canonical object with its top-level
//!   members reversed (split by a bracket-aware scanner over the canonical
//!   bytes) has the same digest; so do respellings with every object
//!   shuffled, whitespace and escapes added, and with large padding members
//!   that force the parser's deferred reordering (expected output built
//!   here);
//! * agreement with serde_json: an accepted input means the same value as
//!   its canonical form (apart from the top-level `occurred_at`, which is
//!   checked against chrono), and serde_json accepting an input that
//!   canonicalize refuses is explained by a duplicate key, depth or size;
//! * a refused input's error offset is inside the input, and the input cut
//!   at that offset has no earlier problem (errors report the first problem).
#![no_main]

use libfuzzer_sys::fuzz_target;
use result_inbox::digest::{canonicalize, digest, is_utc_timestamp, DigestError};
use result_inbox_fuzz::{
    count_objects, padded, parse_canonical, reverse_top_level, scramble, Rng, Spelling, MAX_INPUT,
    PAD_LEN,
};
use sha2::{Digest as _, Sha256};

fuzz_target!(|data: &[u8]| check(data));

fn check(data: &[u8]) {
    let canon = canonicalize(data);
    let dig = digest(data);
    match (&canon, &dig) {
        (Ok(c), Ok(d)) => assert_eq!(c.digest(), d, "digest() != canonicalize().digest()"),
        (Err(a), Err(b)) => assert_eq!(a, b, "digest() and canonicalize() refuse differently"),
        _ => panic!("digest() and canonicalize() disagree: {canon:?} / {dig:?}"),
    }
    // Warm thread-local buffers must not change anything.
    assert_eq!(digest(data), dig, "second digest() differs");
    assert_eq!(canonicalize(data), canon, "second canonicalize() differs");

    let c = match canon {
        Ok(c) => c,
        Err(err) => return refused(data, &err),
    };
    let bytes = c.as_bytes();
    assert!(
        std::str::from_utf8(bytes).is_ok(),
        "canonical form is not UTF-8"
    );
    assert!(
        bytes.len() <= data.len(),
        "canonical form longer than input"
    );
    assert_eq!(
        Sha256::digest(bytes).as_slice(),
        c.digest().as_bytes(),
        "digest is not SHA-256 of the canonical bytes"
    );

    // Idempotence.
    let again = canonicalize(bytes).expect("canonical form refused");
    assert_eq!(
        again.as_bytes(),
        bytes,
        "canonical form is not a fixed point"
    );
    assert_eq!(digest(bytes).as_ref(), Ok(c.digest()));

    // Top-level members reversed (the scanner works on canonical bytes).
    if let Some(reversed) = reverse_top_level(bytes) {
        assert_eq!(
            digest(&reversed).as_ref(),
            Ok(c.digest()),
            "reversing the top-level members changed the digest"
        );
        assert_eq!(canonicalize(&reversed).unwrap().as_bytes(), bytes);
    }

    let node = parse_canonical(bytes).expect("canonical form is not canonical-shaped JSON");

    // Shuffled members, whitespace and escapes everywhere.
    let mut rng = Rng::from_bytes(data);
    for spelling in [
        Spelling {
            u_escape_one_in: 0,
            ws_one_in: 0,
        },
        Spelling {
            u_escape_one_in: 7,
            ws_one_in: 3,
        },
    ] {
        let mut input = Vec::new();
        scramble(&node, &mut rng, spelling, &mut input);
        if input.len() <= MAX_INPUT {
            assert_canonical_form(&input, bytes, "a respelling of a canonical form");
        }
    }

    // Large out-of-order objects: the deferred reordering path.
    let objects = count_objects(&node);
    if objects > 0 {
        let budget = (MAX_INPUT - bytes.len()) / (PAD_LEN + 8);
        let mut pads = objects.min(budget).min(1 + (data.len() % 7));
        let (mut input, mut expected) = (Vec::new(), Vec::new());
        padded(&node, &mut pads, &mut input, &mut expected);
        if input.len() <= MAX_INPUT {
            assert_canonical_form(&input, &expected, "padded document");
            // The same large objects, shuffled and with whitespace: deferred
            // objects whose input had bytes to drop or rewrite.
            let big = parse_canonical(&expected).expect("padded canonical text");
            let spelling = Spelling {
                u_escape_one_in: 50,
                ws_one_in: 4,
            };
            let mut input = Vec::new();
            scramble(&big, &mut rng, spelling, &mut input);
            if input.len() <= MAX_INPUT {
                assert_canonical_form(&input, &expected, "respelled padded document");
            }
        }
    }

    agrees_with_serde(data, bytes);
}

/// Asserts that `input` is accepted, that its canonical form is `expected`
/// and that `digest` agrees with `canonicalize`. `what` names the input in
/// the message (the bytes are not printed: they can be long).
fn assert_canonical_form(input: &[u8], expected: &[u8], what: &str) {
    let got = canonicalize(input).unwrap_or_else(|e| panic!("{what} refused: {e}"));
    assert!(got.as_bytes() == expected, "{what}: wrong canonical form");
    assert_eq!(
        digest(input).as_ref(),
        Ok(got.digest()),
        "{what}: digest differs from canonicalize"
    );
}

/// An accepted input and its canonical form mean the same value.
fn agrees_with_serde(data: &[u8], canonical: &[u8]) {
    use serde_json::Value;
    let parsed = serde_json::from_slice::<Value>(data);
    let mut input = match parsed {
        Ok(v) => v,
        Err(e) => {
            // serde_json (without arbitrary_precision) refuses numbers that
            // overflow f64, and counts depth one lower.
            let msg = e.to_string();
            assert!(
                msg.contains("number out of range") || msg.contains("recursion limit"),
                "canonicalize accepted what serde_json refuses: {msg}"
            );
            return;
        }
    };
    let mut output: Value =
        serde_json::from_slice(canonical).expect("serde_json refuses canonical form");
    // The timestamp rule: compare the top-level occurred_at separately.
    if let (Value::Object(i), Value::Object(o)) = (&mut input, &mut output) {
        let (before, after) = (i.remove("occurred_at"), o.remove("occurred_at"));
        assert_eq!(before.is_some(), after.is_some());
        if let (Some(Value::String(before)), Some(Value::String(after))) = (before, after) {
            check_timestamp_rule(&before, &after);
        }
    }
    assert!(
        input == output,
        "canonical form means another value than the input"
    );
}

/// `after` is what the timestamp rule made of `before`.
fn check_timestamp_rule(before: &str, after: &str) {
    if is_utc_timestamp(before) {
        assert_eq!(before, after, "a canonical UTC timestamp was rewritten");
    }
    if before != after {
        assert!(
            is_utc_timestamp(after),
            "rewritten timestamp is not canonical UTC"
        );
        // chrono (more lenient, but never wrong about the instant).
        let b = chrono::DateTime::parse_from_rfc3339(before)
            .expect("rewrote a string chrono does not read as RFC 3339");
        let a = chrono::DateTime::parse_from_rfc3339(after).expect("chrono refuses the rewrite");
        assert_eq!(a, b, "the rewrite names another instant");
    }
}

/// A refused input: the error points into the input, at its first problem.
fn refused(data: &[u8], err: &DigestError) {
    if let Some(offset) = err.offset() {
        assert!(offset <= data.len(), "error offset past the end: {err:?}");
        if let DigestError::InvalidUtf8 { offset } = err {
            assert_eq!(
                *offset,
                std::str::from_utf8(data).unwrap_err().valid_up_to()
            );
            return;
        }
        if offset < data.len() && std::str::from_utf8(&data[..offset]).is_ok() {
            // No problem comes before the reported one: the input cut there
            // is accepted or fails at the cut (or later, never earlier).
            if let Err(e) = canonicalize(&data[..offset]) {
                let at = e.offset().unwrap_or(0);
                assert!(
                    at >= offset,
                    "error {err:?} is not the first problem: the prefix fails with {e:?}"
                );
            }
        }
    }
    // serde_json reading the input as a value means only a rule of the
    // canonical form (or a limit) can refuse it.
    if serde_json::from_slice::<serde_json::Value>(data).is_ok() {
        assert!(
            matches!(
                err,
                DigestError::DuplicateKey { .. }
                    | DigestError::TooDeep { .. }
                    | DigestError::TooLarge { .. }
            ),
            "serde_json accepts what canonicalize refuses with {err:?}"
        );
    }
}
