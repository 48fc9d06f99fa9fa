//! What the repository itself promises: the layers of `ARCHITECTURE.md`, the
//! `rust-version` of each package, and a guide for embedders that builds as
//! written.
//!
//! One test binary for the area, since every binary compiles the shared
//! test code and links the whole dependency tree again; each file of
//! `tests/` stays a module of its own, named after it.
#[path = "../guide.rs"]
mod guide;
#[path = "../layers.rs"]
mod layers;
#[path = "../package.rs"]
mod package;
