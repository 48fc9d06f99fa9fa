//! Orbit, as `docs/orbit-protocol.md` describes it: the API client and its
//! subscription stream as a [`Source`](crate::source::Source) of the
//! consumer.
//!
//! Every call has a timeout. Errors keep the HTTP status and Orbit's stable
//! error code, never a body or a token. The token itself lives in a
//! [`Token`], which redacts itself everywhere but in the `Authorization`
//! header, and each attempt's [`LeaseProof`] the same way.
//!
//! [`OrbitSource`] is one subscription as the consumer's source:
//! [`OrbitSource::connect`] checks its queue before anything is leased.
//!
//! `https://` URLs use TLS for the API calls and `wss://` for the delivery
//! stream, both with the one rustls configuration of an [`OrbitTls`]:
//! Mozilla's root certificates, plus a private CA when one is configured
//! (`ORBIT_CA_FILE`).

mod api;
mod client;
mod credentials;
mod error;
mod lease;
mod message;
mod source;
mod stream;
mod tls;
mod token;
mod url;

pub use self::api::{DeliveryCounts, DeliveryInfo, DeliveryPage, EventBody, Subscription, Task};
pub use self::client::OrbitClient;
pub use self::credentials::{readable_by_others, Credentials, CredentialsError};
pub use self::error::OrbitError;
pub use self::lease::LeaseProof;
pub use self::message::StreamMessage;
pub use self::source::OrbitSource;
pub use self::stream::DeliveryStream;
pub use self::tls::{CaFileError, OrbitTls};
pub use self::token::{Scope, Token};
pub use self::url::OrbitUrl;
