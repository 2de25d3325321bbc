//! The simulator: the real tick against simulated GPUs, a simulated runner and a virtual
//! clock.
//!
//! `carma simulate` and the tests call [`simulate`], which submits a trace through the real
//! spool and drives the very `tick::run` that `carma tick` runs; only the three edges differ
//! ([`edges`]). The simulated machine ([`model`]) follows DESIGN.md's interference,
//! out-of-memory and power model with the parameters of [`params`], read from a documented
//! file. Every run leaves a real journal that `carma report` reads, and the same seed gives the
//! same journal. [`copies`] runs a configuration and the exclusive baseline on jittered copies
//! of a trace and reports the mean and spread. Faults (tick crashes, lost exit records, reboots) can be injected, and every
//! run checks the invariants of [`faults`].

pub mod copies;
pub mod driver;
pub mod edges;
pub mod faults;
pub mod model;
pub mod params;
pub mod readings;
pub mod reservations;
pub mod resume;
pub mod tracegen;
pub mod workload;

pub use copies::{CopiesPlan, CopiesSummary, run_copies};
pub use driver::{
    Estimator, SIM_EPOCH_MS, SimOptions, SimSummary, TIME_LIMIT_FACTOR_DEFAULT, TIME_LIMIT_FACTOR_LOOSE,
    TimeLimits, read_journal, simulate,
};
pub use faults::{FaultCounts, FaultPlan, Rng};
pub use params::{DEFAULT_MODEL_TOML, ModelParams};
pub use workload::{GpuSet, Profile, TraceRow, parse_profiles, parse_trace};
