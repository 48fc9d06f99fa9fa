//! Events through `Event::from_json` and the decision logic that needs no
//! database (`check_queue`, `EventType::state`, `TaskState::allows_result`).
//!
//! Every input is used twice:
//!
//! 1. **Raw**: the bytes themselves are the event. An accepted event must
//!    satisfy the envelope's rules (version at least 1, type and state
//!    agree, no result where the state allows none, `occurred_at` in
//!    canonical UTC, ids 32 lowercase hex), its canonical form must re-parse
//!    to an equal event, and serde_json must read the same fields out of
//!    that canonical form. A refused one must be refused the same way again,
//!    and a `Json` refusal must be `canonicalize`'s.
//! 2. **Structured**: the bytes drive an `arbitrary::Unstructured` that
//!    builds an envelope field by field, each field valid or broken in a
//!    chosen way, members in a chosen order, spelled with random whitespace
//!    and escapes. The expected outcome is known by construction (expected
//!    canonical text from a reference serializer, expected UTC time from
//!    chrono), and must match exactly: accepted with these fields, or
//!    refused with one of the errors the broken fields call for.
#![no_main]

use arbitrary::{Result as AResult, Unstructured};
use chrono::{Datelike, NaiveDate};
use libfuzzer_sys::fuzz_target;
use result_inbox::digest::{canonicalize, is_utc_timestamp};
use result_inbox::event::{Event, EventError, EventType, TaskState};
use result_inbox::ids::{is_hex_id, QueueId};
use result_inbox_fuzz::{arbitrary_json, arbitrary_text, Rng, Spelling, J};

fuzz_target!(|data: &[u8]| {
    raw(data);
    let mut u = Unstructured::new(data);
    if let Ok(case) = Case::generate(&mut u) {
        case.check();
    }
});

const STATES: [TaskState; 5] = [
    TaskState::Pending,
    TaskState::Succeeded,
    TaskState::Failed,
    TaskState::Cancelled,
    TaskState::NeedsReview,
];

// ---------------------------------------------------------------------------
// Raw bytes
// ---------------------------------------------------------------------------

fn raw(data: &[u8]) {
    let first = Event::from_json(data);
    assert_eq!(
        Event::from_json(data),
        first,
        "from_json is not deterministic"
    );
    match first {
        Ok(event) => accepted(data, &event),
        Err(EventError::Json(err)) => {
            assert_eq!(
                canonicalize(data).unwrap_err(),
                err,
                "Json error is not canonicalize's"
            );
        }
        Err(_) => assert!(
            canonicalize(data).is_ok(),
            "envelope error for non-JSON input"
        ),
    }
}

/// The rules every accepted event keeps, whatever its bytes.
fn accepted(data: &[u8], e: &Event) {
    let task = e.task();
    assert!(task.version >= 1, "version below 1");
    assert_eq!(
        e.event_type().state(),
        task.state,
        "type and state disagree"
    );
    if task.result.is_some() {
        assert!(
            task.state.allows_result(),
            "result in a state that allows none"
        );
    }
    assert_ne!(
        task.result.as_deref(),
        Some("null"),
        "null result kept as a result"
    );
    assert!(
        is_utc_timestamp(e.occurred_at()),
        "occurred_at is not canonical UTC"
    );
    for id in [e.id().as_str(), e.queue_id().as_str(), task.id.as_str()] {
        assert!(is_hex_id(id), "id is not 32 lowercase hex");
    }
    assert_eq!(
        EventType::parse(e.event_type().as_str()),
        Some(e.event_type())
    );
    assert_eq!(TaskState::parse(task.state.as_str()), Some(task.state));

    // The canonical form is the one of the input and re-parses to the same.
    let canonical = canonicalize(data).expect("accepted event is not JSON");
    assert!(
        &canonical == e.canonical(),
        "event canonical form is not canonicalize's"
    );
    let again = Event::from_json(e.canonical().as_bytes()).expect("canonical form refused");
    assert!(again == *e, "canonical form re-parses to another event");

    // Queue decision.
    assert_eq!(e.check_queue(e.queue_id()), Ok(()));
    let other = other_queue(e.queue_id());
    match e.check_queue(&other) {
        Err(EventError::QueueMismatch { expected, actual }) => {
            assert!(
                expected == other && actual == *e.queue_id(),
                "QueueMismatch fields"
            );
        }
        r => panic!("check_queue with another queue: {r:?}"),
    }

    // The result never shows in Debug output (long results only: a short
    // one may coincide with an id or a number that is shown).
    if let Some(result) = &task.result {
        if result.len() > 64 {
            assert!(
                !format!("{e:?}").contains(result.as_str()),
                "result in Debug output"
            );
        }
        assert!(
            canonicalize(result.as_bytes()).is_ok(),
            "result is not JSON"
        );
    }

    // serde_json reads the same fields from the canonical form.
    use serde_json::Value;
    let Ok(v) = serde_json::from_slice::<Value>(e.canonical().as_bytes()) else {
        return; // numbers beyond f64: serde_json refuses, nothing to compare
    };
    assert!(v.is_object(), "accepted event is not a JSON object");
    assert_eq!(v["id"].as_str(), Some(e.id().as_str()));
    assert_eq!(v["type"].as_str(), Some(e.event_type().as_str()));
    assert_eq!(v["queue_id"].as_str(), Some(e.queue_id().as_str()));
    assert_eq!(v["occurred_at"].as_str(), Some(e.occurred_at()));
    let t = &v["task"];
    assert!(t.is_object(), "accepted task is not a JSON object");
    assert_eq!(t["id"].as_str(), Some(task.id.as_str()));
    assert_eq!(t["version"].as_u64(), Some(task.version));
    assert_eq!(t["state"].as_str(), Some(task.state.as_str()));
    match (&t["result"], &task.result) {
        (Value::Null, None) => {}
        (value, Some(text)) => {
            let read: Value = serde_json::from_str(text).expect("result text");
            assert!(
                read == *value,
                "result differs from the task's result member"
            );
        }
        (value, None) => panic!("result member {value} dropped"),
    }
}

fn other_queue(q: &QueueId) -> QueueId {
    let mut s = q.as_str().to_owned();
    let last = if s.ends_with('0') { "1" } else { "0" };
    s.replace_range(31.., last);
    QueueId::parse(&s).expect("hex id")
}

// ---------------------------------------------------------------------------
// Structured events
// ---------------------------------------------------------------------------

/// A refusal the broken fields of a case call for.
#[derive(Debug, Clone, PartialEq)]
enum Refusal {
    Malformed(&'static str),
    InvalidVersion,
    TypeState,
    ResultNotAllowed,
}

impl Refusal {
    fn matches(&self, err: &EventError) -> bool {
        match (self, err) {
            (Refusal::Malformed(f), EventError::Malformed { field, .. }) => f == field,
            (Refusal::InvalidVersion, EventError::InvalidVersion) => true,
            (Refusal::TypeState, EventError::TypeStateMismatch { .. }) => true,
            (Refusal::ResultNotAllowed, EventError::ResultNotAllowed(_)) => true,
            _ => false,
        }
    }
}

/// What a case expects when it is accepted.
#[derive(Debug, Default)]
struct Fields {
    id: Option<String>,
    event_type: Option<EventType>,
    queue_id: Option<String>,
    occurred_at: Option<String>,
    task_id: Option<String>,
    version: Option<u64>,
    state: Option<TaskState>,
    /// Canonical text of the result (`None`: absent or null).
    result: Option<String>,
}

#[derive(Debug)]
struct Case {
    input: Vec<u8>,
    /// The expected canonical form of the input.
    canonical: String,
    refusals: Vec<Refusal>,
    fields: Fields,
}

impl Case {
    fn generate(u: &mut Unstructured<'_>) -> AResult<Case> {
        let mut refusals = Vec::new();
        let mut fields = Fields::default();
        let mut members: Vec<(String, J)> = Vec::new();
        let push = |members: &mut Vec<(String, J)>, key: &str, value: Option<J>| {
            if let Some(value) = value {
                members.push((key.to_owned(), value));
            }
        };

        let id = hex_id(u, "id", &mut refusals)?;
        fields.id = id.1;
        push(&mut members, "id", id.0);

        let event_type = event_type(u, &mut refusals)?;
        fields.event_type = event_type.1;
        push(&mut members, "type", event_type.0);

        let queue = hex_id(u, "queue_id", &mut refusals)?;
        fields.queue_id = queue.1;
        push(&mut members, "queue_id", queue.0);

        let (occurred_at, utc) = timestamp(u, &mut refusals)?;
        fields.occurred_at = utc.clone();
        push(&mut members, "occurred_at", occurred_at);

        let task = task(u, fields.event_type, &mut fields, &mut refusals)?;
        push(&mut members, "task", task);

        extras(
            u,
            &mut members,
            &["id", "type", "queue_id", "occurred_at", "task"],
        )?;
        shuffle(u, &mut members)?;

        // Rarely, the envelope's values as an array in field order: still
        // not an event (the envelope must be an object). Finding 1 was that
        // serde's derived structs read such arrays positionally
        // (tests/fuzz_regressions.rs).
        let as_array = u.ratio(1, 16)?;
        let doc = if as_array {
            refusals.push(Refusal::Malformed("(event)"));
            let mut values: Vec<J> = Vec::new();
            for key in ["id", "type", "queue_id", "occurred_at", "task"] {
                if let Some((_, v)) = members.iter().find(|(k, _)| k == key) {
                    values.push(v.clone());
                }
            }
            J::Arr(values)
        } else {
            J::Obj(members)
        };

        // The expected canonical form: the reference serializer, with the
        // timestamp rule applied by hand.
        let mut expected = doc.clone();
        if let (J::Obj(members), Some(utc)) = (&mut expected, &utc) {
            for (k, v) in members.iter_mut() {
                if k == "occurred_at" {
                    *v = J::Str(utc.clone());
                }
            }
        }
        let canonical = expected.canonical_string();

        let spelling = Spelling {
            u_escape_one_in: *u.choose(&[0, 2, 5, 30])?,
            ws_one_in: *u.choose(&[0, 1, 3, 10])?,
        };
        let mut rng = Rng::from_bytes(&u.arbitrary::<u64>()?.to_le_bytes());
        let mut input = Vec::new();
        doc.spell(&mut rng, spelling, &mut input);
        Ok(Case {
            input,
            canonical,
            refusals,
            fields,
        })
    }

    fn check(&self) {
        // Whatever the envelope, the document itself is valid JSON.
        let canonical = canonicalize(&self.input).expect("generated document refused");
        assert_eq!(
            canonical.as_str(),
            self.canonical,
            "canonical form differs from the reference"
        );

        let result = Event::from_json(&self.input);
        if !self.refusals.is_empty() {
            match result {
                Err(err) => assert!(
                    self.refusals.iter().any(|r| r.matches(&err)),
                    "refused with {err:?}, expected one of {:?}",
                    self.refusals
                ),
                Ok(e) => panic!(
                    "accepted an event that should be refused ({:?}): {e:?}",
                    self.refusals
                ),
            }
            return;
        }
        let e = match result {
            Ok(e) => e,
            Err(err) => panic!("refused a valid event: {err:?}"),
        };
        let f = &self.fields;
        assert_eq!(Some(e.id().as_str()), f.id.as_deref());
        assert_eq!(Some(e.event_type()), f.event_type);
        assert_eq!(Some(e.queue_id().as_str()), f.queue_id.as_deref());
        assert_eq!(
            Some(e.occurred_at()),
            f.occurred_at.as_deref(),
            "occurred_at"
        );
        assert_eq!(Some(e.task().id.as_str()), f.task_id.as_deref());
        assert_eq!(Some(e.task().version), f.version);
        assert_eq!(Some(e.task().state), f.state);
        assert_eq!(e.task().result, f.result, "result");
        assert_eq!(e.canonical().as_str(), self.canonical);
        accepted(&self.input, &e);
    }
}

/// A hex id member: missing, broken in some way, or valid.
fn hex_id(
    u: &mut Unstructured<'_>,
    field: &'static str,
    refusals: &mut Vec<Refusal>,
) -> AResult<(Option<J>, Option<String>)> {
    let bytes: [u8; 16] = u.arbitrary()?;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let broken = match u.int_in_range(0..=15u8)? {
        0 => None,
        1 => Some(J::Raw("null".into())),
        2 => Some(J::Raw("12".into())),
        3 => Some(J::Str(format!("A{}", &hex[1..]))),
        4 => Some(J::Str(hex[1..].to_string())),
        5 => Some(J::Str(format!("{hex}0"))),
        6 => Some(J::Str(format!("g{}", &hex[1..]))),
        7 => Some(J::Str(format!(" {}", &hex[1..]))),
        _ => return Ok((Some(J::Str(hex.clone())), Some(hex))),
    };
    refusals.push(Refusal::Malformed(field));
    Ok((broken, None))
}

fn event_type(
    u: &mut Unstructured<'_>,
    refusals: &mut Vec<Refusal>,
) -> AResult<(Option<J>, Option<EventType>)> {
    let broken = match u.int_in_range(0..=11u8)? {
        0 => None,
        1 => Some(J::Raw("null".into())),
        2 => Some(J::Raw("true".into())),
        3 => Some(J::Str("task.Succeeded".into())),
        4 => Some(J::Str("task.succeeded ".into())),
        5 => Some(J::Str(arbitrary_text(u, 6)?)),
        _ => {
            let t = *u.choose(&EventType::ALL)?;
            return Ok((Some(J::Str(t.as_str().into())), Some(t)));
        }
    };
    if let Some(J::Str(s)) = &broken {
        if let Some(t) = EventType::parse(s) {
            return Ok((broken, Some(t)));
        }
    }
    refusals.push(Refusal::Malformed("type"));
    Ok((broken, None))
}

fn task_state(
    u: &mut Unstructured<'_>,
    matching: Option<EventType>,
    refusals: &mut Vec<Refusal>,
) -> AResult<(Option<J>, Option<TaskState>)> {
    let broken = match u.int_in_range(0..=15u8)? {
        0 => None,
        1 => Some(J::Raw("null".into())),
        2 => Some(J::Raw("1".into())),
        3 => Some(J::Str("succeeded".into())),
        4 => Some(J::Str("NEEDS REVIEW".into())),
        5 => {
            let s = *u.choose(&STATES)?;
            return Ok((Some(J::Str(s.as_str().into())), Some(s)));
        }
        _ => {
            let s = matching.map_or(TaskState::Succeeded, EventType::state);
            return Ok((Some(J::Str(s.as_str().into())), Some(s)));
        }
    };
    refusals.push(Refusal::Malformed("task.state"));
    Ok((broken, None))
}

/// `occurred_at`: built from calendar fields (each maybe out of range), or
/// something that is not a date-time. Returns the member's value and the
/// expected UTC text when it is a valid date-time within years 0..=9999.
fn timestamp(
    u: &mut Unstructured<'_>,
    refusals: &mut Vec<Refusal>,
) -> AResult<(Option<J>, Option<String>)> {
    let kind = u.int_in_range(0..=15u8)?;
    if kind < 3 {
        refusals.push(Refusal::Malformed("occurred_at"));
        return Ok(match kind {
            0 => (None, None),
            1 => (Some(J::Raw("1764518564".into())), None),
            // Starts with a letter: never a date-time.
            _ => (Some(J::Str(format!("x{}", arbitrary_text(u, 24)?))), None),
        });
    }
    let year: i32 = match u.int_in_range(0..=5u8)? {
        0 => 0,
        1 => 9999,
        2 => 1970,
        _ => u.int_in_range(0..=9999)?,
    };
    let month: u32 = if u.ratio(1, 10)? {
        *u.choose(&[0, 13, 99])?
    } else {
        u.int_in_range(1..=12)?
    };
    let day: u32 = if u.ratio(1, 10)? {
        *u.choose(&[0, 29, 30, 31, 32])?
    } else {
        u.int_in_range(1..=28)?
    };
    let hour: u32 = if u.ratio(1, 12)? {
        24
    } else {
        u.int_in_range(0..=23)?
    };
    let minute: u32 = if u.ratio(1, 12)? {
        60
    } else {
        u.int_in_range(0..=59)?
    };
    let second: u32 = if u.ratio(1, 12)? {
        60
    } else {
        u.int_in_range(0..=59)?
    };
    let fraction: Option<String> = if u.ratio(1, 2)? {
        let n = u.int_in_range(0..=10usize)?;
        let mut f = String::new();
        for _ in 0..n {
            f.push(char::from(b'0' + *u.choose(&[0u8, 0, 1, 5, 9])?));
        }
        Some(f)
    } else {
        None
    };
    let separator = if u.ratio(1, 6)? { 't' } else { 'T' };
    // Offset in minutes east of UTC, None for Z/z.
    let (offset_text, offset_minutes, offset_ok) = match u.int_in_range(0..=5u8)? {
        0 => ("Z".to_string(), 0i64, true),
        1 => ("z".to_string(), 0, true),
        _ => {
            let sign = if u.arbitrary()? { '+' } else { '-' };
            let oh: u32 = if u.ratio(1, 10)? {
                24
            } else {
                u.int_in_range(0..=23)?
            };
            let om: u32 = if u.ratio(1, 10)? {
                60
            } else {
                *u.choose(&[0, 30, 45, 59, 1])?
            };
            let minutes = i64::from(oh * 60 + om) * if sign == '-' { -1 } else { 1 };
            (
                format!("{sign}{oh:02}:{om:02}"),
                minutes,
                oh <= 23 && om <= 59,
            )
        }
    };
    let text =
        format!(
        "{year:04}-{month:02}-{day:02}{separator}{hour:02}:{minute:02}:{second:02}{}{offset_text}",
        fraction.as_ref().map(|f| format!(".{f}")).unwrap_or_default()
    );

    // The reference: chrono for the calendar and the arithmetic.
    let fraction_ok = fraction.as_ref().is_none_or(|f| (1..=9).contains(&f.len()));
    let utc = NaiveDate::from_ymd_opt(year, month, day)
        .and_then(|d| d.and_hms_opt(hour, minute, second))
        .filter(|_| fraction_ok && offset_ok)
        .map(|local| local - chrono::Duration::minutes(offset_minutes))
        .filter(|utc| (0..=9999).contains(&utc.year()))
        .map(|utc| {
            let frac = fraction.as_deref().unwrap_or("").trim_end_matches('0');
            let frac = if frac.is_empty() {
                String::new()
            } else {
                format!(".{frac}")
            };
            format!("{}{frac}Z", utc.format("%Y-%m-%dT%H:%M:%S"))
        });
    if utc.is_none() {
        refusals.push(Refusal::Malformed("occurred_at"));
    }
    Ok((Some(J::Str(text)), utc))
}

fn version(
    u: &mut Unstructured<'_>,
    refusals: &mut Vec<Refusal>,
) -> AResult<(Option<J>, Option<u64>)> {
    let (text, refusal) = match u.int_in_range(0..=15u8)? {
        0 => (None, Refusal::Malformed("task.version")),
        1 => (Some("null"), Refusal::Malformed("task.version")),
        2 => (
            Some(*u.choose(&["\"2\"", "true", "[1]", "{}"])?),
            Refusal::Malformed("task.version"),
        ),
        3 => (
            Some(*u.choose(&["0", "-0", "-1", "-18446744073709551615"])?),
            Refusal::InvalidVersion,
        ),
        4 => (
            Some(*u.choose(&["1.0", "2e0", "1E+2", "0.5", "-0.0"])?),
            Refusal::InvalidVersion,
        ),
        5 => (
            Some(*u.choose(&["18446744073709551616", "99999999999999999999999"])?),
            Refusal::InvalidVersion,
        ),
        6 => return Ok((Some(J::Raw(u64::MAX.to_string())), Some(u64::MAX))),
        _ => {
            let v = u.int_in_range(1..=1000u64)?;
            return Ok((Some(J::Raw(v.to_string())), Some(v)));
        }
    };
    refusals.push(refusal);
    Ok((text.map(|t| J::Raw(t.into())), None))
}

fn task(
    u: &mut Unstructured<'_>,
    event_type: Option<EventType>,
    fields: &mut Fields,
    refusals: &mut Vec<Refusal>,
) -> AResult<Option<J>> {
    match u.int_in_range(0..=15u8)? {
        0 => {
            refusals.push(Refusal::Malformed("task"));
            return Ok(None);
        }
        1 => {
            refusals.push(Refusal::Malformed("task"));
            return Ok(Some(J::Raw(
                u.choose(&["null", "1", "\"task\""])?.to_string(),
            )));
        }
        _ => {}
    }
    let mut members: Vec<(String, J)> = Vec::new();
    let id = hex_id(u, "task.id", refusals)?;
    fields.task_id = id.1;
    if let Some(v) = id.0 {
        members.push(("id".into(), v));
    }
    let version = version(u, refusals)?;
    fields.version = version.1;
    if let Some(v) = version.0 {
        members.push(("version".into(), v));
    }
    let state = task_state(u, event_type, refusals)?;
    fields.state = state.1;
    if let Some(v) = state.0 {
        members.push(("state".into(), v));
    }
    if let (Some(t), Some(s)) = (event_type, state.1) {
        if t.state() != s {
            refusals.push(Refusal::TypeState);
        }
    }
    match u.int_in_range(0..=3u8)? {
        0 => {}
        1 => members.push(("result".into(), J::Raw("null".into()))),
        _ => {
            let value = arbitrary_json(u, 3)?;
            if value != J::Raw("null".into()) {
                fields.result = Some(value.canonical_string());
                if state.1.is_some_and(|s| !s.allows_result()) {
                    refusals.push(Refusal::ResultNotAllowed);
                }
            }
            members.push(("result".into(), value));
        }
    }
    extras(u, &mut members, &["id", "version", "state", "result"])?;
    shuffle(u, &mut members)?;
    if u.ratio(1, 16)? {
        // The task's values as an array in field order: not a task object.
        refusals.push(Refusal::Malformed("task"));
        let mut values = Vec::new();
        for key in ["id", "version", "state", "result"] {
            if let Some((_, v)) = members.iter().find(|(k, _)| k == key) {
                values.push(v.clone());
            }
        }
        return Ok(Some(J::Arr(values)));
    }
    Ok(Some(J::Obj(members)))
}

/// Unknown members, which the envelope ignores.
fn extras(
    u: &mut Unstructured<'_>,
    members: &mut Vec<(String, J)>,
    reserved: &[&str],
) -> AResult<()> {
    for _ in 0..u.int_in_range(0..=2u8)? {
        let key = arbitrary_text(u, 8)?;
        if reserved.contains(&key.as_str()) || members.iter().any(|(k, _)| *k == key) {
            continue;
        }
        members.push((key, arbitrary_json(u, 2)?));
    }
    Ok(())
}

fn shuffle<T>(u: &mut Unstructured<'_>, items: &mut [T]) -> AResult<()> {
    for i in (1..items.len()).rev() {
        let j = u.int_in_range(0..=i)?;
        items.swap(i, j);
    }
    Ok(())
}
