//! carma: a collocation-aware GPU resource manager for deep-learning training.
//!
//! The crate is a library with a thin binary on top (`src/main.rs`). See
//! ARCHITECTURE.md for the map of modules and the invariants between them.
pub mod exec;
