//! What the consumer reads from a failed delivery's error, whatever service
//! stack produced it.
//!
//! The consumer gets errors as [`BoxError`]s: the inbox's own
//! [`InboxError`](crate::inbox::InboxError), possibly boxed again or wrapped
//! by layers above it. These helpers look through the box and the error's
//! `source()` chain for the inbox's answer.

use crate::BoxError;

/// The stable class of a failed delivery for the consumer's log line: the
/// inbox's class (`rejected`, `conflict`, `unconfirmed`, `error`) when the
/// error comes from it, `error` otherwise.
pub fn class(e: &BoxError) -> &'static str {
    #[cfg(feature = "mysql")]
    if let Some(inbox) = find_inbox_error(e) {
        return inbox.class();
    }
    let _ = e;
    "error"
}

/// Whether the error says that the database cannot be reached at all
/// (connection refused or lost, no connection in time, server shutting
/// down), rather than something about this one delivery. Such errors open
/// the consumer's breaker; deadlocks, conflicts and rejections do not.
pub fn is_unavailable(e: &BoxError) -> bool {
    #[cfg(feature = "mysql")]
    if let Some(inbox) = find_inbox_error(e) {
        return inbox.is_unavailable();
    }
    let _ = e;
    false
}

#[cfg(feature = "mysql")]
fn find_inbox_error(e: &BoxError) -> Option<&crate::inbox::InboxError> {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e.as_ref());
    while let Some(error) = next {
        if let Some(inbox) = error.downcast_ref::<crate::inbox::InboxError>() {
            return Some(inbox);
        }
        next = error.source();
    }
    None
}

#[cfg(all(test, feature = "mysql"))]
mod tests {
    use super::*;
    use crate::inbox::InboxError;

    #[derive(Debug, thiserror::Error)]
    #[error("outer layer failed")]
    struct Outer(#[source] InboxError);

    #[test]
    fn an_inbox_error_keeps_its_class_inside_a_box() {
        let e: BoxError = Box::new(InboxError::CommitUnconfirmed);
        assert_eq!(class(&e), "unconfirmed");
        assert!(!is_unavailable(&e));
    }

    #[test]
    fn an_inbox_error_is_found_behind_another_layers_error() {
        let e: BoxError = Box::new(Outer(InboxError::CommitUnconfirmed));
        assert_eq!(class(&e), "unconfirmed");
    }

    #[test]
    fn any_other_error_is_of_class_error_and_not_an_outage() {
        let e: BoxError = "something else".into();
        assert_eq!(class(&e), "error");
        assert!(!is_unavailable(&e));
    }
}
