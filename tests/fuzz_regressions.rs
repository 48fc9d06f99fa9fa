//! Regression tests for what the fuzz targets in `fuzz/` found.
//!
//! Each test holds the minimized input inline (the same bytes are kept in
//! `fuzz/regressions/`) and asserts the correct behaviour, so it fails until
//! the bug is fixed and guards the fix afterwards.

use result_inbox::event::{Event, EventError};

/// `fuzz/regressions/event-array-envelope.json`: the envelope's five values
/// as a JSON array, in the order `id, type, queue_id, occurred_at, task`.
/// The envelope must be an object (`docs/orbit-protocol.md`); an array is
/// not an event, whatever it holds.
const ARRAY_ENVELOPE: &[u8] = br#"["aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","task.succeeded","0123456789abcdef0123456789abcdef","2026-11-30T16:02:44Z",{"id":"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb","version":2,"state":"SUCCEEDED"}]"#;

/// `fuzz/regressions/event-array-task.json`: a well-formed envelope whose
/// `task` is the array `[id, version, state, result]` instead of an object.
const ARRAY_TASK: &[u8] = br#"{"id":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","occurred_at":"2026-11-30T16:02:44Z","queue_id":"0123456789abcdef0123456789abcdef","task":["bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",2,"CANCELLED",null],"type":"task.cancelled"}"#;

#[test]
fn array_envelope_is_not_an_event() {
    assert!(
        matches!(
            Event::from_json(ARRAY_ENVELOPE),
            Err(EventError::Malformed {
                field: "(event)",
                ..
            })
        ),
        "got {:?}",
        Event::from_json(ARRAY_ENVELOPE)
    );
}

#[test]
fn array_task_is_not_a_task() {
    assert!(
        matches!(
            Event::from_json(ARRAY_TASK),
            Err(EventError::Malformed { field: "task", .. })
        ),
        "got {:?}",
        Event::from_json(ARRAY_TASK)
    );
}

/// The same array envelope with a non-UTC `occurred_at`: the timestamp rule
/// applies only to a top-level *object*, so today this is refused for its
/// time, not for its shape. The shape is the first problem.
#[test]
fn array_envelope_is_refused_for_its_shape_first() {
    let input = br#"["aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","task.succeeded","0123456789abcdef0123456789abcdef","2026-11-30T16:02:44+08:00",{"id":"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb","version":2,"state":"SUCCEEDED"}]"#;
    assert!(
        matches!(
            Event::from_json(input),
            Err(EventError::Malformed {
                field: "(event)",
                ..
            })
        ),
        "got {:?}",
        Event::from_json(input)
    );
}
