//! The W3C trace context a producer sends with the request that makes a
//! task, kept with the task and passed on beside its events (protocol
//! §5.3, §10.3), never inside them: an event's bytes stay what every
//! attempt delivers.
//!
//! orbit-dev checks only the shape of a `traceparent`, not its digits: a
//! consumer validates it anyway, and tests can send it a bad one through
//! orbit-dev.

use axum::http::HeaderMap;
use serde::{Deserialize, Serialize};

/// Longest `tracestate` passed on; a longer one is dropped whole.
pub const MAX_TRACESTATE: usize = 512;

/// The lengths of a `traceparent`'s first four fields (version, trace id,
/// parent id, flags); a later version may add more after a `-`.
const FIELD_LENGTHS: [usize; 4] = [2, 32, 16, 2];

/// A `traceparent` and the `tracestate` that came with it, as passed on in
/// a delivery message's `trace_context`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceContext {
    /// The `traceparent`, as received.
    pub traceparent: String,
    /// The `tracestate`, when one came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
}

impl TraceContext {
    /// The context of a request's `traceparent` and `tracestate` headers:
    /// none unless there is exactly one `traceparent` of the right shape;
    /// several `tracestate` headers are one list, as the W3C says.
    pub fn from_headers(headers: &HeaderMap) -> Option<TraceContext> {
        let mut parents = headers.get_all("traceparent").iter();
        let (Some(traceparent), None) = (parents.next(), parents.next()) else {
            return None;
        };
        let states: Option<Vec<&str>> = headers
            .get_all("tracestate")
            .iter()
            .map(|value| value.to_str().ok())
            .collect();
        let tracestate = states
            .filter(|states| !states.is_empty())
            .map(|states| states.join(","));
        TraceContext::new(traceparent.to_str().ok()?, tracestate.as_deref())
    }

    /// A context from its two values: none unless `traceparent` has the
    /// shape of one; a `tracestate` that could not be a header value again,
    /// or is longer than [`MAX_TRACESTATE`], is dropped alone.
    pub fn new(traceparent: &str, tracestate: Option<&str>) -> Option<TraceContext> {
        let traceparent = traceparent.trim_matches([' ', '\t']);
        if !looks_like_traceparent(traceparent) {
            return None;
        }
        let tracestate = tracestate
            .map(|state| state.trim_matches([' ', '\t']))
            .filter(|state| {
                !state.is_empty()
                    && state.len() <= MAX_TRACESTATE
                    && state.bytes().all(|b| (b' '..=b'~').contains(&b))
            });
        Some(TraceContext {
            traceparent: traceparent.to_owned(),
            tracestate: tracestate.map(str::to_owned),
        })
    }
}

/// Whether `value` has the shape of a `traceparent`: four `-`-separated
/// fields of 2, 32, 16 and 2 characters (55 in all), maybe followed by more
/// fields of a later version, in printable ASCII without spaces.
pub fn looks_like_traceparent(value: &str) -> bool {
    if value.len() < 55 || !value.bytes().all(|b| (b'!'..=b'~').contains(&b)) {
        return false;
    }
    let fields: Vec<&str> = value.splitn(5, '-').collect();
    fields.len() >= 4
        && fields.iter().zip(FIELD_LENGTHS).all(|(f, n)| f.len() == n)
        && fields.get(4).is_none_or(|more| !more.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn only_the_shape_of_a_traceparent_is_checked() {
        assert!(looks_like_traceparent(PARENT));
        assert!(looks_like_traceparent(&PARENT.to_uppercase()));
        assert!(looks_like_traceparent(&format!("cc{}-more", &PARENT[2..])));
        for bad in [
            "",
            &PARENT[..54],
            &format!("{PARENT}0"),
            &format!("{PARENT}-"),
            &PARENT.replacen('-', "_", 1),
            &format!("0-0{}", &PARENT[3..]),
            &PARENT.replace("00f0", "00 0"),
        ] {
            assert!(!looks_like_traceparent(bad), "{bad}");
        }
    }

    #[test]
    fn headers_give_a_context_only_with_one_traceparent_and_join_tracestates() {
        let mut headers = HeaderMap::new();
        assert_eq!(TraceContext::from_headers(&headers), None);
        headers.append("traceparent", HeaderValue::from_static(PARENT));
        headers.append("tracestate", HeaderValue::from_static("a=1"));
        headers.append("tracestate", HeaderValue::from_static("b=2"));
        assert_eq!(
            TraceContext::from_headers(&headers),
            Some(TraceContext {
                traceparent: PARENT.into(),
                tracestate: Some("a=1,b=2".into()),
            })
        );
        headers.append("traceparent", HeaderValue::from_static(PARENT));
        assert_eq!(TraceContext::from_headers(&headers), None);
    }

    #[test]
    fn a_bad_tracestate_is_dropped_alone() {
        let long = "x".repeat(MAX_TRACESTATE + 1);
        for state in [long.as_str(), "", "a=\u{e9}"] {
            assert_eq!(
                TraceContext::new(PARENT, Some(state)),
                Some(TraceContext {
                    traceparent: PARENT.into(),
                    tracestate: None,
                })
            );
        }
    }
}
