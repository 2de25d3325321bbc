//! carma: a collocation-aware GPU resource manager for deep-learning training.
//!
//! The crate is a library with a thin binary on top (`src/main.rs`). See
//! ARCHITECTURE.md for the map of modules and the invariants between them.

pub mod error;
pub mod id;
pub mod spec;

pub use error::{Error, Result};
pub mod cli;
pub mod clock;
pub mod commands;
pub mod config;
pub mod fsutil;
pub mod home;
pub mod inventory;
pub mod journal;
pub mod spool;
pub mod tick;
pub mod bench;
