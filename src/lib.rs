//! carma: a collocation-aware GPU resource manager for deep-learning training.
//!
//! The crate is a library with a thin binary on top (`src/main.rs`). See
//! ARCHITECTURE.md for the map of modules and the invariants between them.

// Visibility says who may use an item: `pub` only where the crate exports it (tests and the
// binary use the library), `pub(crate)` elsewhere. Every exported item says what it means, its
// unit and who sets it (issue 22); clippy's `-D warnings` in CI makes both lints errors.
#![warn(unreachable_pub, missing_docs)]

pub mod access;
pub mod bench;
pub mod cli;
pub mod clock;
pub mod commands;
pub mod config;
pub mod doctor;
pub mod error;
pub mod estimate;
pub mod exec;
pub mod fsutil;
pub mod gpu;
pub mod home;
pub mod id;
pub mod intake;
pub mod inventory;
pub mod journal;
pub mod mcp;
pub mod metrics;
pub mod notify;
pub mod replay;
pub mod report;
pub mod sched;
pub mod scratch;
pub mod serve;
pub mod session;
pub mod sim;
pub mod slurm;
pub mod spec;
pub mod submit_argv;
pub mod systemd;
pub mod text;
pub mod tick;
pub mod view;

pub use error::{Error, Result};
