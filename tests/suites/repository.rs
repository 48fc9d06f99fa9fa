//! What the repository itself promises: the layers of `ARCHITECTURE.md` and the
//! `rust-version` of each package.
//!
//! One test binary for the area, since every binary compiles the shared
//! test code and links the whole dependency tree again; each file of
//! `tests/` stays a module of its own, named after it.
#[path = "../layers.rs"]
mod layers;
#[path = "../package.rs"]
mod package;
