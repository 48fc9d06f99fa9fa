//! The inbox on a throwaway three-node MariaDB Galera cluster (`scripts/with-galera.sh`):
//! its tests share the one cluster, and nextest runs them one at a time.
//!
//! One test binary for the area, since every binary compiles the shared
//! test code and links the whole dependency tree again; each file of
//! `tests/` stays a module of its own, named after it.

#[path = "../cluster.rs"]
mod cluster;
#[path = "../cluster_isolation.rs"]
mod cluster_isolation;
#[path = "../cluster_node_loss.rs"]
mod cluster_node_loss;
#[path = "../common/mod.rs"]
mod common;
