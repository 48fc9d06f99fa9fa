//! The receiver's database, below the inbox and the operator tools: its
//! address ([`Dsn`]), its errors ([`DbError`], redacted, classified by
//! [error number](errno)) and its schema ([`schema`], `receiver init`).
//!
//! Nothing here knows the inbox, a delivery or a broker: the inbox, the
//! task view, `verify`, `stats` and `inspect` all build on it.

pub(crate) mod any;
mod dsn;
pub mod engine;
mod error;
mod grant;
pub(crate) mod mysql;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;
pub(crate) mod record;
mod replication;
pub mod schema;
pub(crate) mod sql;
pub(crate) mod trace;

pub use self::dsn::{Dsn, DsnError, EngineKind, ACCEPTED_OPTIONS, POSTGRES_OPTIONS};
pub use self::engine::Engine;
pub use self::error::{DbError, DbErrorKind};
pub use self::mysql::{errno, row};
pub use self::replication::Replication;
