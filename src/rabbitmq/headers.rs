//! What a message's headers say: integers whichever width the publisher
//! chose, strings, and the producer's W3C trace context.

use amqprs::{FieldName, FieldTable, FieldValue};

use crate::delivery::TraceContext;

/// An integer header, whichever width the publisher chose.
pub(super) fn integer(headers: &FieldTable, name: &str) -> Option<i64> {
    let key = FieldName::try_from(name).ok()?;
    match headers.get(&key)? {
        FieldValue::b(v) => Some((*v).into()),
        FieldValue::B(v) => Some((*v).into()),
        FieldValue::s(v) => Some((*v).into()),
        FieldValue::u(v) => Some((*v).into()),
        FieldValue::I(v) => Some((*v).into()),
        FieldValue::i(v) => Some((*v).into()),
        FieldValue::l(v) => Some(*v),
        _ => None,
    }
}

/// A string header.
pub(super) fn text<'a>(headers: &'a FieldTable, name: &str) -> Option<&'a str> {
    let key = FieldName::try_from(name).ok()?;
    match headers.get(&key)? {
        FieldValue::S(v) => Some(v.as_ref().as_str()),
        _ => None,
    }
}

/// The producer's trace context in a message's `traceparent` and
/// `tracestate` headers.
pub(super) fn trace_context(headers: &FieldTable) -> Option<TraceContext> {
    TraceContext::parse(text(headers, "traceparent")?, text(headers, "tracestate"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    fn headers(pairs: &[(&str, FieldValue)]) -> FieldTable {
        let mut table = FieldTable::new();
        for (name, value) in pairs {
            table.insert(FieldName::try_from(*name).unwrap(), value.clone());
        }
        table
    }

    fn text(value: &str) -> FieldValue {
        FieldValue::from(value.to_owned())
    }

    #[test]
    fn a_producer_s_traceparent_header_is_the_delivery_s_trace_context() {
        let table = headers(&[("traceparent", text(PARENT)), ("tracestate", text("k=v"))]);
        let trace = trace_context(&table).unwrap();
        assert_eq!(
            (trace.traceparent(), trace.tracestate()),
            (PARENT, Some("k=v"))
        );
        assert!(trace_context(&headers(&[("traceparent", text("00-junk"))])).is_none());
        assert!(trace_context(&headers(&[])).is_none());
    }

    #[test]
    fn the_delivery_count_is_read_whichever_integer_width_the_server_chose() {
        for value in [
            FieldValue::l(3),
            FieldValue::I(3),
            FieldValue::s(3),
            FieldValue::B(3),
        ] {
            let table = headers(&[("x-delivery-count", value)]);
            assert_eq!(integer(&table, "x-delivery-count"), Some(3));
        }
        assert_eq!(
            integer(
                &headers(&[("x-delivery-count", text("3"))]),
                "x-delivery-count"
            ),
            None
        );
    }
}
