//! Orbit's delivery messages through `StreamMessage::parse`, whose event is
//! spliced in verbatim (protocol §10.3) and so may be anything.
//!
//! Every input is used twice:
//!
//! 1. **Raw**: the bytes, when UTF-8, are a stream message. Reading it
//!    never panics; a message that is JSON without duplicate fields and is
//!    read as a delivery names the delivery that serde_json reads in it.
//! 2. **Structured**: the bytes drive an `arbitrary::Unstructured` that
//!    builds a delivery message as a server does: the six fields with their
//!    own values (the proof with escapes), in a chosen order, with chosen
//!    whitespace, and an event of arbitrary text spliced in among them —
//!    often made of pieces that look like the message's own fields
//!    (`"delivery_id":"…"`, braces, quotes, backslashes). The message must
//!    be read as a delivery with the server's delivery id, attempt and
//!    proof, never one taken from inside the event; when it is not JSON, its
//!    body is exactly the event's bytes.
#![no_main]

use arbitrary::{Result as AResult, Unstructured};
use libfuzzer_sys::fuzz_target;
use result_inbox::orbit::StreamMessage;
use result_inbox_fuzz::arbitrary_text;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        raw(text);
    }
    let mut u = Unstructured::new(data);
    if let Ok(case) = Case::generate(&mut u) {
        case.check();
    }
});

fn raw(text: &str) {
    let Ok(StreamMessage::Delivery(delivery, _)) = StreamMessage::parse(text) else {
        return;
    };
    #[derive(serde::Deserialize)]
    struct Named<'a> {
        delivery_id: &'a str,
    }
    if let Ok(named) = serde_json::from_str::<Named<'_>>(text) {
        assert_eq!(delivery.id().as_str(), named.delivery_id, "delivery id");
    }
}

const WS: [&str; 5] = ["", " ", "\n", "\t ", "\r\n  "];

#[derive(Debug)]
struct Case {
    text: String,
    delivery_id: String,
    attempt: u32,
    proof: String,
    event: String,
}

impl Case {
    fn generate(u: &mut Unstructured<'_>) -> AResult<Case> {
        let bytes: [u8; 16] = u.arbitrary()?;
        let delivery_id: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let attempt: u32 = u.arbitrary()?;
        let proof = format!("lp_{}", arbitrary_text(u, 12)?);
        let event = event(u)?;

        let mut fields: Vec<(&str, String)> = vec![
            ("type", r#""delivery""#.to_owned()),
            ("delivery_id", quoted(&delivery_id)),
            ("subscription_id", quoted(&"5".repeat(32))),
            ("attempt", attempt.to_string()),
            ("lease_proof", quoted(&proof)),
            ("lease_expires_at", quoted("2026-11-30T16:03:14.123456Z")),
            ("event", event.clone()),
        ];
        for i in (1..fields.len()).rev() {
            let j = u.int_in_range(0..=i)?;
            fields.swap(i, j);
        }
        let mut text = String::new();
        text.push_str(u.choose(&WS)?);
        text.push('{');
        for (n, (key, value)) in fields.iter().enumerate() {
            if n > 0 {
                text.push(',');
            }
            text.push_str(u.choose(&WS)?);
            text.push_str(&quoted(key));
            text.push_str(u.choose(&WS)?);
            text.push(':');
            text.push_str(u.choose(&WS)?);
            text.push_str(value);
            text.push_str(u.choose(&WS)?);
        }
        text.push('}');
        text.push_str(u.choose(&WS)?);
        Ok(Case {
            text,
            delivery_id,
            attempt,
            proof,
            event,
        })
    }

    fn check(&self) {
        let message = StreamMessage::parse(&self.text);
        let Ok(StreamMessage::Delivery(delivery, proof)) = message else {
            panic!("not read as a delivery: {message:?}\n{}", self.text);
        };
        assert_eq!(delivery.id().as_str(), self.delivery_id, "delivery id");
        assert_eq!(delivery.attempt(), Some(self.attempt), "attempt");
        assert_eq!(proof.expose(), self.proof, "lease proof");
        if serde_json::from_str::<serde::de::IgnoredAny>(&self.text).is_err() {
            assert_eq!(
                delivery.body().as_ref(),
                self.event.trim_matches([' ', '\t', '\n', '\r']).as_bytes(),
                "the event's bytes"
            );
        }
    }
}

fn quoted(text: &str) -> String {
    serde_json::to_string(text).unwrap()
}

/// Text that is seldom JSON, built from pieces of a delivery message.
fn event(u: &mut Unstructured<'_>) -> AResult<String> {
    let pieces = [
        "{",
        "}",
        "[",
        "]",
        ",",
        ":",
        "\"",
        "\\",
        "\\\"",
        r#""delivery_id""#,
        r#""delivery_id":"ffffffffffffffffffffffffffffffff""#,
        r#","lease_proof":"lp_spoof""#,
        r#","attempt":7"#,
        r#""event":"#,
        r#"{"id":"0123456789abcdef0123456789abcdef"}"#,
        "garbage",
        "1",
        " ",
    ];
    let mut event = String::new();
    for _ in 0..u.int_in_range(0..=12u8)? {
        if u.ratio(1, 4)? {
            event.push_str(&arbitrary_text(u, 6)?);
        } else {
            event.push_str(u.choose(&pieces)?);
        }
    }
    Ok(event)
}
