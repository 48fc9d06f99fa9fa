//! Orbit's ids: 32 lowercase hexadecimal characters (128 random bits).
//!
//! Each kind of id is its own type, so that a task id cannot be passed where
//! an event id belongs.

/// For a newtype over one `String`: `as_str` (with the doc `$as_str`),
/// `Display` as the bare text and `Debug` as `Name(text)`. Ids and names are
/// not secret, and say what they are.
macro_rules! text_type {
    ($name:ident, $as_str:literal) => {
        impl $name {
            #[doc = $as_str]
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}({})", stringify!($name), self.0)
            }
        }
    };
}
pub(crate) use text_type;

macro_rules! hex_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        ///
        /// Always 32 lowercase hexadecimal characters.
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub(crate) String);

        impl $name {
            /// Accepts exactly 32 lowercase hexadecimal characters.
            pub fn parse(s: &str) -> Result<Self, InvalidId> {
                if is_hex_id(s) {
                    Ok(Self(s.to_owned()))
                } else {
                    Err(InvalidId(stringify!($name)))
                }
            }
        }

        text_type!($name, "The id as text.");

        impl std::str::FromStr for $name {
            type Err = InvalidId;

            fn from_str(s: &str) -> Result<Self, InvalidId> {
                Self::parse(s)
            }
        }
    };
}

hex_id!(
    /// The platform's id of one event. Redeliveries of an event keep its id.
    EventId
);
hex_id!(
    /// The platform's id of one task.
    TaskId
);
hex_id!(
    /// The platform's id of one queue.
    QueueId
);
hex_id!(
    /// The platform's id of one subscription.
    SubscriptionId
);

/// A string that should have been a 32-character lowercase hex id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0} must be 32 lowercase hexadecimal characters")]
pub struct InvalidId(&'static str);

/// Whether `s` has the shape of an Orbit id.
pub fn is_hex_id(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}
