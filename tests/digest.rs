//! Integration tests of the canonical JSON form and its digest, through the
//! public API only.
//!
//! The golden vectors are the frozen contract: the canonical bytes were
//! written by hand from `docs/canonical-json.md` and their SHA-256 computed
//! with `printf -- '<canonical>' | sha256sum` (and cross-checked with
//! Python's `hashlib`), independently of this crate. If one of them fails,
//! the implementation changed the contract — fix the implementation, never
//! the vector.

use std::collections::BTreeMap;

use proptest::prelude::*;
use result_inbox::digest::{
    canonicalize, digest, is_utc_timestamp, Digest, DigestError, MAX_DEPTH, MAX_EVENT_BYTES,
};

// ---------------------------------------------------------------------------
// Golden vectors
// ---------------------------------------------------------------------------

/// (name, input, canonical form, SHA-256 of the canonical form). The same
/// table is in `docs/canonical-json.md`.
const GOLDEN: &[(&str, &str, &str, &str)] = &[
    (
        "keys sort by UTF-8 bytes, a prefix first, non-ASCII last",
        r#"{"é":1,"b":2,"ab":3,"a":4,"Z":5}"#,
        r#"{"Z":5,"a":4,"ab":3,"b":2,"é":1}"#,
        "b6bce75ba7940c590927a4b2337d9e9dcf2ee2caa077e514ca158351470820fe",
    ),
    (
        "keys sort by their unescaped bytes",
        r#"{"\u0062":1,"a\"":2,"a":3,"\u00e9":4,"\t":5}"#,
        r#"{"\t":5,"a":3,"a\"":2,"b":1,"é":4}"#,
        "04cffcf44f58de68168ee0f886a6c7423f9d05ab381e4a8c249d3425ad561343",
    ),
    (
        "escapes are re-minimized",
        r#"["\/","\u0041\u0022\u005C","\u0008\u000c\u000A\u000d\u0009","\u0000\u001F","\b\f\n\r\t\"\\"]"#,
        r#"["/","A\"\\","\b\f\n\r\t","\u0000\u001f","\b\f\n\r\t\"\\"]"#,
        "2df547bd84e42e6228ad7da144a224f63c19ccc1bba99581d4cddedab3e987fa",
    ),
    (
        "DEL, U+2028 and U+2029 are written raw",
        r#"["\u007F","\u2028","\u2029"]"#,
        "[\"\u{7f}\",\"\u{2028}\",\"\u{2029}\"]",
        "cb89475109e0c6e73314860b2c7c3dbf276bcebb9246a79b2e8eb83715703d0e",
    ),
    (
        "a \\u00e9 escape becomes a raw é",
        r#"{"caf\u00e9":"\u00e9t\u00E9"}"#,
        r#"{"café":"été"}"#,
        "75699c6b76a9a5b5068d4df977dddb244ce9d4783ea0c3b533a5b024302cc4dc",
    ),
    (
        "a surrogate pair becomes one 4-byte UTF-8 character",
        r#""\ud83d\ude00 \uD83D\uDE00""#,
        "\"\u{1f600} \u{1f600}\"",
        "433646a884a5193ceb2ccb60d969c542c27f58fadbea918adcb651699624d67d",
    ),
    (
        "numbers are copied exactly as written",
        "[1.10, -0, 1E+2, 123456789012345678901234567890, 0.5e-7, -12.50E3]",
        "[1.10,-0,1E+2,123456789012345678901234567890,0.5e-7,-12.50E3]",
        "e9096e2d491c3c27615264deb7c838b2f48033efcf4d030f781d5c75b24a81de",
    ),
    (
        "nested arrays and objects lose their whitespace and sort inside",
        "{ \"z\" : [ { \"y\" : [ ] , \"x\" : { } } , [ [ null ] ] ] ,\n\t\"a\" : { \"c\" : true , \"b\" : false } }",
        r#"{"a":{"b":false,"c":true},"z":[{"x":{},"y":[]},[[null]]]}"#,
        "05b7f4b6c42bc31a215e4819125e8b3c7de1e263a29014425cf1f3d2ea44470c",
    ),
    (
        "a top-level string is a document",
        " \t\r\n\"top-level string\" \n",
        r#""top-level string""#,
        "97855b10de0a3311ba7a0d45b5fe072d82d75a1dfdf2a1fcd9080797205d703f",
    ),
    (
        "a top-level number is a document",
        "\n-0.50E-3\n",
        "-0.50E-3",
        "43a6f85fffae2792dde458c25142cb5358e3fe11513fe8e70ccaa3d4356ad7b5",
    ),
    (
        "occurred_at with an offset and a fraction moves to UTC",
        r#"{"occurred_at":"2024-03-10T16:30:45.120+08:00","id":"evt-1"}"#,
        r#"{"id":"evt-1","occurred_at":"2024-03-10T08:30:45.12Z"}"#,
        "e420e5dd71649d3339891c6de5c64d0d5a34c74ce3024f78d602817523337de3",
    ),
    (
        "occurred_at crosses a day, month and year boundary",
        r#"{"occurred_at":"2025-01-01T05:00:00+09:00"}"#,
        r#"{"occurred_at":"2024-12-31T20:00:00Z"}"#,
        "c3313247345ebefdf34d0cb5a45bc95faa9f6ce8b3271887c6d6183cfd136fd9",
    ),
    (
        "occurred_at goes back onto a leap day; lowercase t, zero fraction",
        r#"{"occurred_at":"2024-03-01t01:30:00.000+02:00"}"#,
        r#"{"occurred_at":"2024-02-29T23:30:00Z"}"#,
        "a9fb9c529bae0ae20022efa83b66a3bcd4c7168b70810b342b4e47ce617f7051",
    ),
    (
        "occurred_at goes forward onto a leap day with a negative offset",
        r#"{"occurred_at":"2024-02-28T23:30:00.5-01:00"}"#,
        r#"{"occurred_at":"2024-02-29T00:30:00.5Z"}"#,
        "a53e46c00dba6a1405d77379d8525c97290c276fadbc97744c7fe27dadc2bac6",
    ),
    (
        "a nested occurred_at is not normalized",
        r#"{"task":{"occurred_at":"2024-03-10T16:30:45.120+08:00"}}"#,
        r#"{"task":{"occurred_at":"2024-03-10T16:30:45.120+08:00"}}"#,
        "6d35f0698bb597960a0411954c9a0280f62589c1949dd1cec459f3a4fe6a3818",
    ),
    (
        "an invalid occurred_at (29 February 2023) is left as it is",
        r#"{"type":"x","occurred_at":"2023-02-29T12:00:00Z"}"#,
        r#"{"occurred_at":"2023-02-29T12:00:00Z","type":"x"}"#,
        "dab1544db4996b18cd5dd4f51b8aed296a020c1761f2431d7bd1bcedbe0326c4",
    ),
    (
        "an occurred_at that is not a string is left as it is",
        r#"{ "occurred_at" : 1710059445 }"#,
        r#"{"occurred_at":1710059445}"#,
        "ce2195282eb1257e534298d387201dcb3ba0ae7bb548138119ba3c36e7994cb4",
    ),
    (
        "empty containers, the empty string and the literals",
        r#"[ {}, [ ], "", true, false, null ]"#,
        r#"[{},[],"",true,false,null]"#,
        "98b452864b88eb0d63f8e4cee07256e5b0ebc258c673ac9e8833327d4e6b660a",
    ),
];

#[test]
fn golden_vectors_produce_the_frozen_canonical_bytes_and_digests() {
    for &(name, input, canonical, hex) in GOLDEN {
        let c = canonicalize(input.as_bytes()).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(c.as_str(), canonical, "{name}: canonical form");
        assert_eq!(
            c.as_bytes(),
            canonical.as_bytes(),
            "{name}: canonical bytes"
        );
        assert_eq!(c.digest().to_hex(), hex, "{name}: digest");
        assert_eq!(
            digest(input.as_bytes()).unwrap().to_hex(),
            hex,
            "{name}: digest()"
        );
    }
}

#[test]
fn golden_canonical_forms_are_their_own_canonical_form() {
    for &(name, _, canonical, hex) in GOLDEN {
        let c = canonicalize(canonical.as_bytes()).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(c.as_str(), canonical, "{name}");
        assert_eq!(c.digest().to_hex(), hex, "{name}");
    }
}

#[test]
fn the_digest_of_a_document_is_the_sha256_of_its_canonical_bytes() {
    // SHA-256("null"), as printed by `printf null | sha256sum`.
    let d = digest(b" null ").unwrap();
    assert_eq!(
        d.to_hex(),
        "74234e98afe7498fb5daf1f36ac2d78acc339464f950703b8c019892f982b90b"
    );
    assert_eq!(Digest::from_hex(&d.to_string()), Some(d));
}

#[test]
fn into_bytes_returns_the_canonical_bytes() {
    let c = canonicalize(br#"{"b":1, "a":2}"#).unwrap();
    let d = *c.digest();
    assert_eq!(c.into_bytes(), br#"{"a":2,"b":1}"#);
    assert_eq!(d, digest(br#"{"a":2,"b":1}"#).unwrap());
}

// ---------------------------------------------------------------------------
// The timestamp rule, beyond the golden vectors
// ---------------------------------------------------------------------------

fn occurred_at(value: &str) -> String {
    let doc = format!(r#"{{"occurred_at":"{value}"}}"#);
    let c = canonicalize(doc.as_bytes()).unwrap();
    let text = c.as_str();
    text[r#"{"occurred_at":""#.len()..text.len() - 2].to_owned()
}

#[test]
fn occurred_at_is_rewritten_only_when_it_is_a_valid_rfc3339_date_time() {
    assert_eq!(occurred_at("2024-06-01T12:00:00Z"), "2024-06-01T12:00:00Z");
    assert_eq!(occurred_at("2024-06-01t12:00:00z"), "2024-06-01T12:00:00Z");
    assert_eq!(
        occurred_at("2024-06-01T12:00:00.123456789+00:00"),
        "2024-06-01T12:00:00.123456789Z"
    );
    assert_eq!(
        occurred_at("2024-06-01T12:00:00.100000000-00:00"),
        "2024-06-01T12:00:00.1Z"
    );
    assert_eq!(
        occurred_at("2024-06-01T00:00:00+23:59"),
        "2024-05-31T00:01:00Z"
    );
    for kept in [
        "2024-06-01T12:00:00",
        "2024-06-01 12:00:00Z",
        "2024-06-01T12:00:60Z",
        "2024-06-01T24:00:00Z",
        "2024-06-31T12:00:00Z",
        "2024-06-01T12:00:00.Z",
        "2024-06-01T12:00:00.1234567890Z",
        "2024-06-01T12:00:00+24:00",
        "2024-06-01T12:00:00+0800",
        "0000-01-01T00:00:00+00:01",
        "9999-12-31T23:59:59-00:01",
        "",
        "not a date",
    ] {
        assert_eq!(occurred_at(kept), kept);
    }
}

#[test]
fn occurred_at_written_with_escapes_is_decoded_before_the_rule_applies() {
    let c = canonicalize(br#"{"occurred\u005fat":"2024-06-01T14:00:00\u002b02:00"}"#).unwrap();
    assert_eq!(c.as_str(), r#"{"occurred_at":"2024-06-01T12:00:00Z"}"#);
}

#[test]
fn occurred_at_inside_a_top_level_array_is_not_normalized() {
    let input = r#"[{"occurred_at":"2024-06-01T14:00:00+02:00"}]"#;
    assert_eq!(canonicalize(input.as_bytes()).unwrap().as_str(), input);
}

#[test]
fn is_utc_timestamp_accepts_exactly_the_normalized_form() {
    assert!(is_utc_timestamp("2024-06-01T12:00:00Z"));
    assert!(is_utc_timestamp("2024-02-29T23:59:59.5Z"));
    assert!(!is_utc_timestamp("2024-06-01T12:00:00.50Z"));
    assert!(!is_utc_timestamp("2024-06-01T12:00:00.Z"));
    assert!(!is_utc_timestamp("2024-06-01t12:00:00Z"));
    assert!(!is_utc_timestamp("2024-06-01T12:00:00z"));
    assert!(!is_utc_timestamp("2024-06-01T12:00:00+00:00"));
    assert!(!is_utc_timestamp("2023-02-29T12:00:00Z"));
    assert!(!is_utc_timestamp(""));
}

#[test]
fn a_large_event_out_of_order_at_every_level_gets_the_reference_form() {
    // The envelope, `task` and `result` are each many KiB and out of order,
    // and each contains small objects out of order, rewritten escapes and
    // whitespace; the envelope's timestamp is rewritten too.
    let record = |i: usize| {
        format!(
            r#"{{ "sku": "SKU-{i:05}", "name": "Widget \u00e9 \/ {i}", "qty": {i}, "dims": {{"w": 1, "h": 2, "d": 3}} }}"#
        )
    };
    let records: Vec<String> = (0..400).map(record).collect();
    let log = r"line\n".repeat(2000);
    let input = format!(
        r#"{{"id":"e1","type":"task.succeeded","occurred_at":"2026-01-01T01:00:00.500+02:00","task":{{"version":2,"id":"t1","result":{{"status":"ok","records":[{}],"log":"{log}"}}}}}}"#,
        records.join(", ")
    );

    let record = |i: usize| {
        format!(
            r#"{{"dims":{{"d":3,"h":2,"w":1}},"name":"Widget é / {i}","qty":{i},"sku":"SKU-{i:05}"}}"#
        )
    };
    let records: Vec<String> = (0..400).map(record).collect();
    let expected = format!(
        r#"{{"id":"e1","occurred_at":"2025-12-31T23:00:00.5Z","task":{{"id":"t1","result":{{"log":"{log}","records":[{}],"status":"ok"}},"version":2}},"type":"task.succeeded"}}"#,
        records.join(",")
    );
    let c = canonicalize(input.as_bytes()).unwrap();
    assert!(
        c.as_str() == expected,
        "canonical form differs from the reference"
    );
    assert_eq!(canonicalize(expected.as_bytes()).unwrap(), c);
    assert_eq!(digest(input.as_bytes()).unwrap(), *c.digest());
}

// ---------------------------------------------------------------------------
// Error cases
// ---------------------------------------------------------------------------

fn err(input: impl AsRef<[u8]>) -> DigestError {
    let input = input.as_ref();
    let e = canonicalize(input).expect_err("input must be rejected");
    assert_eq!(digest(input), Err(e.clone()), "digest() must agree");
    e
}

fn json_err(input: impl AsRef<[u8]>) -> (usize, &'static str) {
    match err(input) {
        DigestError::InvalidJson { offset, reason } => (offset, reason),
        other => panic!("expected InvalidJson, got {other:?}"),
    }
}

#[test]
fn malformed_numbers_are_invalid_json() {
    for (input, offset) in [
        ("01", 1),
        ("-01", 2),
        ("1.", 2),
        ("1.e5", 2),
        ("1e", 2),
        ("1e+", 3),
        ("-", 1),
        ("-a", 1),
        ("[1.5.2]", 4),
        ("-Infinity", 1),
    ] {
        assert_eq!(json_err(input).0, offset, "{input}");
    }
    for input in ["+1", ".5", "NaN", "Infinity", "0x10"] {
        let (offset, _) = json_err(input);
        assert!(offset <= 1, "{input}");
    }
}

#[test]
fn structural_mistakes_are_invalid_json_at_the_offending_byte() {
    for (input, offset) in [
        ("[1,]", 3),
        ("[1 2]", 3),
        ("[,1]", 1),
        (r#"{"a":1,}"#, 7),
        (r#"{"a" 1}"#, 5),
        (r#"{"a":}"#, 5),
        ("{1:2}", 1),
        ("{'a':1}", 1),
        (r#"{"a":1]"#, 6),
        (r#"[1}"#, 2),
        ("tru", 0),
        ("nul", 0),
        ("True", 0),
        ("\u{b}1", 0),
        ("\u{c}1", 0),
        ("[1,2", 4),
        (r#"{"a":1"#, 6),
        ("[", 1),
    ] {
        assert_eq!(json_err(input).0, offset, "{input:?}");
    }
}

#[test]
fn bad_escapes_are_invalid_json_at_the_backslash() {
    for input in [
        r#""\x""#,
        r#""\U0041""#,
        r#""\u12""#,
        r#""\u00G0""#,
        r#""\'""#,
        r#""\ ""#,
    ] {
        assert_eq!(json_err(input).0, 1, "{input}");
    }
}

#[test]
fn unterminated_strings_are_invalid_json_at_the_end_of_input() {
    for input in [r#""abc"#, r#""abc\"#, r#"{"a"#, r#"["\u00e9"#] {
        let (offset, reason) = json_err(input);
        assert_eq!(offset, input.len(), "{input}");
        assert!(
            reason.contains("unterminated") || reason.contains("end"),
            "{reason}"
        );
    }
}

#[test]
fn raw_control_characters_inside_strings_are_invalid_json() {
    for (input, offset) in [
        ("\"a\tb\"", 2),
        ("\"a\nb\"", 2),
        ("\"\u{0}\"", 1),
        ("{\"k\u{1f}\":1}", 3),
    ] {
        let (at, reason) = json_err(input);
        assert_eq!(at, offset, "{input:?}");
        assert!(reason.contains("control"), "{reason}");
    }
    // DEL is not a control character for JSON.
    assert!(canonicalize("\"\u{7f}\"".as_bytes()).is_ok());
}

#[test]
fn trailing_data_after_the_value_is_invalid_json() {
    for (input, offset) in [
        ("{} x", 3),
        ("1 2", 2),
        ("nullx", 4),
        ("[]]", 2),
        (r#""a""b""#, 3),
        ("{}\u{0}", 2),
    ] {
        let (at, reason) = json_err(input);
        assert_eq!(at, offset, "{input:?}");
        assert!(reason.contains("trailing"), "{reason}");
    }
}

#[test]
fn empty_or_blank_input_is_invalid_json() {
    assert_eq!(json_err(""), (0, "empty input"));
    assert_eq!(json_err(" \t\r\n"), (4, "empty input"));
}

#[test]
fn duplicate_keys_are_rejected_at_the_later_key() {
    assert_eq!(
        err(br#"{"a":1,"a":2}"#),
        DigestError::DuplicateKey { offset: 7 }
    );
    assert_eq!(
        err(br#"{"a":1,"b":2,"a":3}"#),
        DigestError::DuplicateKey { offset: 13 }
    );
    assert_eq!(
        err(br#"{"b":1,"a":2,"b":3}"#),
        DigestError::DuplicateKey { offset: 13 }
    );
}

#[test]
fn keys_that_are_equal_after_unescaping_are_duplicates() {
    assert_eq!(
        err(br#"{"a":1,"\u0061":2}"#),
        DigestError::DuplicateKey { offset: 7 }
    );
    assert_eq!(
        err(br#"{"/":1,"\/":2}"#),
        DigestError::DuplicateKey { offset: 7 }
    );
    assert_eq!(
        err(br#"{"\ud83d\ude00":1,"x":0,"\uD83D\uDE00":2}"#),
        DigestError::DuplicateKey { offset: 24 }
    );
    assert_eq!(
        err("{\"\u{e9}\":1,\"\\u00e9\":2}".as_bytes()),
        DigestError::DuplicateKey { offset: 8 }
    );
}

#[test]
fn nested_duplicate_keys_are_rejected_at_any_depth() {
    assert_eq!(
        err(br#"{"x":{"k":1,"k":2}}"#),
        DigestError::DuplicateKey { offset: 12 }
    );
    assert_eq!(
        err(br#"[{"a":[{"k":1,"j":0,"k":2}]}]"#),
        DigestError::DuplicateKey { offset: 20 }
    );
    // The same key in different objects is fine.
    assert!(canonicalize(br#"{"k":{"k":{"k":1}},"j":[{"k":1},{"k":2}]}"#).is_ok());
}

#[test]
fn the_earliest_problem_in_the_input_is_reported() {
    // The duplicate comes before the syntax error that follows it.
    assert_eq!(
        err(br#"{"a":1,"a":2,}"#),
        DigestError::DuplicateKey { offset: 7 }
    );
    assert_eq!(
        err(br#"{"a":1,"a":2"#),
        DigestError::DuplicateKey { offset: 7 }
    );
    // An outer duplicate comes before an inner one.
    assert_eq!(
        err(br#"{"a":1,"a":{"b":1,"b":2}}"#),
        DigestError::DuplicateKey { offset: 7 }
    );
    // An inner duplicate comes before a later outer one.
    assert_eq!(
        err(br#"{"c":1,"b":{"x":1,"x":2},"c":3}"#),
        DigestError::DuplicateKey { offset: 18 }
    );
    // A syntax error before any duplicate wins.
    assert!(matches!(
        err(br#"{"a":01,"a":2}"#),
        DigestError::InvalidJson { offset: 6, .. }
    ));
    // Nesting too deep after a duplicate: the duplicate.
    let deep = format!(r#"{{"a":1,"a":{}"#, "[".repeat(MAX_DEPTH + 5));
    assert_eq!(err(deep), DigestError::DuplicateKey { offset: 7 });
}

#[test]
fn invalid_utf8_anywhere_is_rejected_before_json_errors() {
    assert_eq!(err(b"\"\xff\""), DigestError::InvalidUtf8 { offset: 1 });
    // Overlong encoding of '/'.
    assert_eq!(err(b"\"\xc0\xaf\""), DigestError::InvalidUtf8 { offset: 1 });
    // Truncated three-byte sequence, then the closing quote.
    assert_eq!(err(b"\"\xe2\x82\""), DigestError::InvalidUtf8 { offset: 1 });
    // Truncated at the end of the input.
    assert_eq!(
        err(b"[\"ok\", \"\xe2\x82"),
        DigestError::InvalidUtf8 { offset: 8 }
    );
    // A UTF-16 surrogate encoded in UTF-8.
    assert_eq!(
        err(b"\"\xed\xa0\x80\""),
        DigestError::InvalidUtf8 { offset: 1 }
    );
    // UTF-8 is checked before the syntax, whatever comes first.
    assert_eq!(err(b"[1,] \xff"), DigestError::InvalidUtf8 { offset: 5 });
    assert_eq!(
        err(b"{\"a\":1,\"a\":2} \x80"),
        DigestError::InvalidUtf8 { offset: 14 }
    );
}

#[test]
fn a_lone_high_surrogate_escape_is_rejected() {
    for input in [
        r#""\ud800""#,
        r#""\uD800x""#,
        r#""\ud800\u0041""#,
        r#""\ud800\ud800""#,
        r#""\ud800\n""#,
        r#""\udbff\u12""#,
    ] {
        assert_eq!(
            err(input),
            DigestError::LoneSurrogate { offset: 1 },
            "{input}"
        );
    }
    assert_eq!(
        err(br#"{"k\udbff":1}"#),
        DigestError::LoneSurrogate { offset: 3 }
    );
}

#[test]
fn a_lone_low_surrogate_escape_is_rejected() {
    assert_eq!(
        err(br#""\udc00""#),
        DigestError::LoneSurrogate { offset: 1 }
    );
    assert_eq!(
        err(br#""ab\uDFFF""#),
        DigestError::LoneSurrogate { offset: 3 }
    );
}

#[test]
fn an_inverted_surrogate_pair_is_rejected_at_its_first_half() {
    assert_eq!(
        err(br#""\udc00\ud800""#),
        DigestError::LoneSurrogate { offset: 1 }
    );
}

#[test]
fn a_byte_order_mark_is_rejected() {
    assert_eq!(err(b"\xef\xbb\xbf{}"), DigestError::ByteOrderMark);
    assert_eq!(err(b"\xef\xbb\xbf"), DigestError::ByteOrderMark);
    // U+FEFF inside a string is ordinary content.
    let c = canonicalize("\"\u{feff}\"".as_bytes()).unwrap();
    assert_eq!(c.as_str(), "\"\u{feff}\"");
}

#[test]
fn an_input_of_max_event_bytes_is_accepted_and_one_byte_more_is_too_large() {
    assert_eq!(MAX_EVENT_BYTES, 524_288);
    let fits = format!("\"{}\"", "a".repeat(MAX_EVENT_BYTES - 2));
    assert_eq!(fits.len(), 524_288);
    let c = canonicalize(fits.as_bytes()).unwrap();
    assert_eq!(c.as_bytes(), fits.as_bytes());

    let over = format!("\"{}\"", "a".repeat(MAX_EVENT_BYTES - 1));
    assert_eq!(err(&over), DigestError::TooLarge { len: 524_289 });
}

#[test]
fn size_is_checked_before_anything_else() {
    let mut over = b"\xef\xbb\xbf\xff".to_vec();
    over.resize(MAX_EVENT_BYTES + 1, b'x');
    assert_eq!(
        err(&over),
        DigestError::TooLarge {
            len: MAX_EVENT_BYTES + 1
        }
    );
    // And the byte order mark before UTF-8 validity.
    assert_eq!(err(b"\xef\xbb\xbf\xff"), DigestError::ByteOrderMark);
}

fn nested_arrays(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

fn nested_objects(depth: usize) -> String {
    format!("{}null{}", r#"{"a":"#.repeat(depth), "}".repeat(depth))
}

#[test]
fn nesting_of_max_depth_is_accepted_and_one_level_more_is_too_deep() {
    assert_eq!(MAX_DEPTH, 128);
    let ok = nested_arrays(128);
    assert_eq!(canonicalize(ok.as_bytes()).unwrap().as_str(), ok);
    assert_eq!(
        err(nested_arrays(129)),
        DigestError::TooDeep { offset: 128 }
    );

    let ok = nested_objects(128);
    assert_eq!(canonicalize(ok.as_bytes()).unwrap().as_str(), ok);
    assert_eq!(
        err(nested_objects(129)),
        DigestError::TooDeep { offset: 128 * 5 }
    );

    // Mixed: 127 arrays around one object is 128 levels.
    let mixed = format!("{}{{}}{}", "[".repeat(127), "]".repeat(127));
    assert!(canonicalize(mixed.as_bytes()).is_ok());
    assert!(canonicalize(b"0").is_ok());
}

#[test]
fn a_hundred_thousand_open_brackets_are_too_deep_without_overflowing_the_stack() {
    assert_eq!(
        err("[".repeat(100_000)),
        DigestError::TooDeep { offset: 128 }
    );
    assert_eq!(
        err(r#"{"a":"#.repeat(100_000)),
        DigestError::TooDeep { offset: 640 }
    );
}

#[test]
fn error_offsets_are_exposed_by_offset() {
    assert_eq!(err(b"[1,]").offset(), Some(3));
    assert_eq!(err(b"\xef\xbb\xbf1").offset(), None);
    assert_eq!(err(br#"{"a":1,"a":2}"#).offset(), Some(7));
}

#[test]
fn error_messages_never_quote_the_input() {
    const SENTINEL: &str = "SENTINEL-f00d";
    let cases = [
        format!(r#"{{"{SENTINEL}":1,"{SENTINEL}":2}}"#),
        format!(r#"{{"a":"{SENTINEL}","a":"{SENTINEL}"}}"#),
        format!(r#"["{SENTINEL}", 01]"#),
        format!(r#"["{SENTINEL}\q"]"#),
        format!(r#"["{SENTINEL}\ud800"]"#),
        format!("[\"{SENTINEL}\u{1}\"]"),
        format!(r#"["{SENTINEL}"] "{SENTINEL}""#),
        format!(r#"["{SENTINEL}"#),
        format!(r#"{{"{SENTINEL}" "{SENTINEL}"}}"#),
        format!("{}\"{SENTINEL}\"", "[".repeat(200)),
        format!("\u{feff}\"{SENTINEL}\""),
        format!("\"{SENTINEL}{}\"", "x".repeat(MAX_EVENT_BYTES)),
    ];
    let mut with_bad_utf8 = format!("[\"{SENTINEL}\"").into_bytes();
    with_bad_utf8.push(0xff);
    let mut inputs: Vec<Vec<u8>> = cases.iter().map(|c| c.clone().into_bytes()).collect();
    inputs.push(with_bad_utf8);

    for input in inputs {
        let e = canonicalize(&input).expect_err("invalid");
        let message = e.to_string();
        assert!(!message.contains("SENTINEL"), "{message}");
        assert!(!message.contains("f00d"), "{message}");
        assert!(!message.contains('\n'), "{message}");
        assert!(
            message.starts_with(|c: char| c.is_ascii_lowercase()),
            "{message}"
        );
        assert!(!format!("{e:?}").contains("SENTINEL"), "{e:?}");
    }
}

#[test]
fn debug_output_of_a_canonical_document_does_not_show_its_content() {
    let c = canonicalize(br#"{"password":"SENTINEL-f00d"}"#).unwrap();
    let shown = format!("{c:?}");
    assert!(
        !shown.contains("SENTINEL") && !shown.contains("password"),
        "{shown}"
    );
    assert!(shown.contains(&c.digest().to_hex()), "{shown}");
}

// ---------------------------------------------------------------------------
// Property tests
// ---------------------------------------------------------------------------

/// A JSON document as a tree, for generating inputs. Object keys are unique
/// (a `BTreeMap`, whose `String` order is the bytewise UTF-8 order the
/// canonical form uses).
#[derive(Clone, Debug)]
enum Json {
    Null,
    Bool(bool),
    Number(String),
    Str(String),
    Array(Vec<Json>),
    Object(BTreeMap<String, Json>),
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9 ]{0,12}",
        "[a-c/\"\\\\ \\t\\n\\x00-\\x1f\\x7f\u{e9}\u{2028}\u{feff}\u{1f600}]{0,10}",
        any::<String>(),
    ]
}

fn key() -> impl Strategy<Value = String> {
    // Keys of at most 10 characters can never be `occurred_at` (11).
    prop_oneof![
        "[a-d]{0,3}",
        "[a-b\"\\\\/\\x00-\\x1f\u{e9}\u{1f600}]{0,3}",
        "[a-z_]{8,10}",
        any::<String>().prop_map(|s| s.chars().take(10).collect()),
    ]
}

fn json() -> impl Strategy<Value = Json> {
    let leaf = prop_oneof![
        Just(Json::Null),
        any::<bool>().prop_map(Json::Bool),
        "-?(0|[1-9][0-9]{0,30})(\\.[0-9]{1,8})?([eE][+-]?[0-9]{1,3})?".prop_map(Json::Number),
        text().prop_map(Json::Str),
    ];
    leaf.prop_recursive(6, 96, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Json::Array),
            prop::collection::btree_map(key(), inner, 0..8).prop_map(Json::Object),
        ]
    })
}

/// The canonical form of a tree, written independently of the crate.
fn reference(value: &Json, out: &mut String) {
    match value {
        Json::Null => out.push_str("null"),
        Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Json::Number(n) => out.push_str(n),
        Json::Str(s) => reference_string(s, out),
        Json::Array(items) => {
            out.push('[');
            for (n, item) in items.iter().enumerate() {
                if n > 0 {
                    out.push(',');
                }
                reference(item, out);
            }
            out.push(']');
        }
        Json::Object(members) => {
            out.push('{');
            for (n, (k, v)) in members.iter().enumerate() {
                if n > 0 {
                    out.push(',');
                }
                reference_string(k, out);
                out.push(':');
                reference(v, out);
            }
            out.push('}');
        }
    }
}

fn reference_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c < ' ' => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Deterministic choices drawn from a generated tape of numbers.
struct Noise<'a> {
    tape: &'a [u32],
    step: usize,
}

impl Noise<'_> {
    fn next(&mut self, below: u32) -> u32 {
        let raw = self.tape[self.step % self.tape.len()];
        let mixed = raw ^ (self.step as u32).wrapping_mul(0x9e37_79b9).rotate_left(13);
        self.step += 1;
        mixed % below
    }

    fn whitespace(&mut self, out: &mut String) {
        for _ in 0..[0, 0, 0, 1, 2][self.next(5) as usize] {
            out.push([' ', '\t', '\n', '\r'][self.next(4) as usize]);
        }
    }
}

/// An equivalent, non-canonical spelling of a tree: random whitespace,
/// shuffled members and needlessly escaped characters.
fn noisy(value: &Json, noise: &mut Noise<'_>, out: &mut String) {
    noise.whitespace(out);
    match value {
        Json::Null | Json::Bool(_) | Json::Number(_) => reference(value, out),
        Json::Str(s) => noisy_string(s, noise, out),
        Json::Array(items) => {
            out.push('[');
            for (n, item) in items.iter().enumerate() {
                if n > 0 {
                    out.push(',');
                }
                noisy(item, noise, out);
            }
            noise.whitespace(out);
            out.push(']');
        }
        Json::Object(members) => {
            let mut members: Vec<_> = members.iter().collect();
            for i in (1..members.len()).rev() {
                members.swap(i, noise.next(i as u32 + 1) as usize);
            }
            out.push('{');
            for (n, (k, v)) in members.into_iter().enumerate() {
                if n > 0 {
                    out.push(',');
                }
                noise.whitespace(out);
                noisy_string(k, noise, out);
                noise.whitespace(out);
                out.push(':');
                noisy(v, noise, out);
            }
            noise.whitespace(out);
            out.push('}');
        }
    }
    noise.whitespace(out);
}

fn noisy_string(s: &str, noise: &mut Noise<'_>, out: &mut String) {
    let u_escape = |unit: u32, upper: bool, out: &mut String| {
        if upper {
            out.push_str(&format!("\\u{unit:04X}"));
        } else {
            out.push_str(&format!("\\u{unit:04x}"));
        }
    };
    out.push('"');
    for c in s.chars() {
        let must_escape = matches!(c, '"' | '\\') || c < ' ';
        let choice = noise.next(10);
        if !must_escape && choice < 6 {
            out.push(c);
        } else if c == '/' && choice < 8 {
            out.push_str("\\/");
        } else if must_escape && choice < 5 && !c.is_control() {
            // '"' or '\\'
            out.push('\\');
            out.push(c);
        } else if must_escape && choice < 5 && "\u{8}\u{c}\n\r\t".contains(c) {
            let letter = match c {
                '\u{8}' => 'b',
                '\u{c}' => 'f',
                '\n' => 'n',
                '\r' => 'r',
                _ => 't',
            };
            out.push('\\');
            out.push(letter);
        } else {
            let upper = noise.next(2) == 1;
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                u_escape(u32::from(*unit), upper, out);
            }
        }
    }
    out.push('"');
}

/// Trees whose objects often exceed a few KiB (long strings, several levels
/// of objects), so that large objects out of order nest in each other.
fn large_json() -> impl Strategy<Value = Json> {
    let leaf = prop_oneof![
        "[a-z\u{e9}\\\\\"/ ]{0,3000}".prop_map(Json::Str),
        "-?[1-9][0-9]{0,5}".prop_map(Json::Number),
        Just(Json::Null),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Json::Array),
            prop::collection::btree_map(key(), inner, 1..6).prop_map(Json::Object),
        ]
    })
}

fn canonical_of(value: &Json) -> String {
    let mut out = String::new();
    reference(value, &mut out);
    out
}

fn noisy_of(value: &Json, tape: &[u32]) -> String {
    let mut out = String::new();
    noisy(value, &mut Noise { tape, step: 0 }, &mut out);
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn canonicalize_produces_the_reference_canonical_form(
        value in json(),
        tape in prop::collection::vec(any::<u32>(), 1..32),
    ) {
        let input = noisy_of(&value, &tape);
        let expected = canonical_of(&value);
        let c = canonicalize(input.as_bytes()).map_err(|e| TestCaseError::fail(format!("{e}")))?;
        prop_assert_eq!(c.as_str(), expected.as_str());
    }

    #[test]
    fn shuffling_members_and_adding_whitespace_never_changes_the_digest(
        value in json(),
        tape_a in prop::collection::vec(any::<u32>(), 1..32),
        tape_b in prop::collection::vec(any::<u32>(), 1..32),
    ) {
        let a = digest(noisy_of(&value, &tape_a).as_bytes()).unwrap();
        let b = digest(noisy_of(&value, &tape_b).as_bytes()).unwrap();
        prop_assert_eq!(a, b);
        prop_assert_eq!(a, digest(canonical_of(&value).as_bytes()).unwrap());
    }

    #[test]
    fn canonical_output_is_accepted_and_is_a_fixed_point(
        value in json(),
        tape in prop::collection::vec(any::<u32>(), 1..32),
    ) {
        let c = canonicalize(noisy_of(&value, &tape).as_bytes()).unwrap();
        let again = canonicalize(c.as_bytes()).unwrap();
        prop_assert_eq!(&again, &c);
    }

    #[test]
    fn large_objects_out_of_order_inside_each_other_get_the_reference_form(
        value in large_json(),
        tape in prop::collection::vec(any::<u32>(), 1..32),
    ) {
        let input = noisy_of(&value, &tape);
        let expected = canonical_of(&value);
        let c = canonicalize(input.as_bytes()).map_err(|e| TestCaseError::fail(format!("{e}")))?;
        prop_assert!(c.as_str() == expected, "canonical form differs from the reference");
        // digest() hashes the same form piece by piece, never assembled.
        prop_assert_eq!(digest(input.as_bytes()).unwrap(), *c.digest());
    }

    #[test]
    fn digest_equals_the_digest_of_canonicalize_for_any_bytes(
        bytes in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        let via_canonical = canonicalize(&bytes).map(|c| *c.digest());
        prop_assert_eq!(digest(&bytes), via_canonical);
    }

    #[test]
    fn damaged_documents_are_handled_without_panicking(
        value in json(),
        tape in prop::collection::vec(any::<u32>(), 1..32),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let mut input = noisy_of(&value, &tape).into_bytes();
        for (at, byte) in &edits {
            if input.is_empty() {
                input.push(*byte);
            } else {
                let i = at.index(input.len());
                input[i] = *byte;
            }
        }
        let result = canonicalize(&input);
        prop_assert_eq!(digest(&input), result.clone().map(|c| *c.digest()));
        match result {
            Ok(c) => {
                prop_assert!(c.as_bytes().len() <= input.len());
                let again = canonicalize(c.as_bytes()).unwrap();
                prop_assert_eq!(&again, &c);
            }
            Err(e) => {
                if let Some(offset) = e.offset() {
                    prop_assert!(offset <= input.len());
                }
            }
        }
    }
}
