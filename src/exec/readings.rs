//! The supervisor's GPU memory readings as files carry them: the plan's `gpu_watch` (what to
//! read, how often) and the exit record's `gpu_readings` (what was read), with the source
//! trait the sampler ([`super::gpu_watch`]) reads through. Plain data, so the plan and the
//! exit record depend on nothing of the sampler.

use serde::{Deserialize, Serialize};

/// Default of `[enforce] supervisor-sample-ms`: twice a second, so an out-of-memory in the
/// first second of a job is seen at least once.
pub const INTERVAL_MS_DEFAULT: u64 = 500;
/// Shortest cadence a plan may ask for: a busy loop would cost the machine a core.
pub const INTERVAL_MS_MIN: u64 = 10;
/// How many of the latest readings the exit record keeps (8 s at the default cadence, well
/// past the moment of an out-of-memory).
pub const LAST_READINGS_MAX: usize = 16;
/// One GPU or MIG instance as a memory source reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryNow {
    /// Its UUID (`GPU-…`, `MIG-…`), as the plan names it.
    pub uuid: String,
    /// Memory in use, MiB: what the tick counts as used (total − free).
    pub used_mib: u64,
    /// Its total memory, MiB.
    pub total_mib: u64,
    /// The compute processes on it, with the memory each holds, MiB.
    pub processes: Vec<(u32, u64)>,
}

/// Where the readings come from. The `gpu` module implements it over the tick's probes.
pub trait MemorySource {
    /// Every GPU and MIG instance once, memory only; `Err` says why not, in words.
    fn read(&mut self) -> Result<Vec<MemoryNow>, String>;
}

/// Opens the source a plan names (`nvml`, `fake:FILE`): given by the binary, called once on
/// the sampler's thread.
pub type OpenSource = fn(&str) -> Result<Box<dyn MemorySource>, String>;

/// `plan.json`'s `gpu_watch`: the supervisor samples its attempt's GPU memory (since 1,
/// optional; absent in plans of carma before it, and when the queue has no GPU source).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct WatchPlan {
    /// The tick's GPU source: `nvml`, or `fake:` and an absolute path.
    pub source: String,
    /// Time between two readings, ms (at least [`INTERVAL_MS_MIN`]).
    pub interval_ms: u64,
}

/// One GPU of the attempt in one reading.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct GpuReading {
    /// The GPU's (or MIG instance's) UUID.
    pub uuid: String,
    /// Memory in use on it, MiB.
    pub used_mib: u64,
    /// Its total memory, MiB.
    pub total_mib: u64,
    /// What the attempt's own processes held on it, MiB.
    pub attempt_mib: u64,
}

/// One reading of all of the attempt's GPUs.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Reading {
    /// When it was taken, ms since the epoch (the clock of the exit record's `ended_ms`).
    pub time_ms: u64,
    /// The attempt's GPUs the source listed, in the plan's order.
    pub gpus: Vec<GpuReading>,
}

/// `exit.json`'s `gpu_readings`: what the supervisor read of its attempt's GPU memory (since
/// 1, optional; absent when the plan asked for none).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct GpuReadings {
    /// The cadence it read at, ms.
    pub interval_ms: u64,
    /// How many readings it took.
    pub count: u64,
    /// The most memory the attempt's own processes held on one of its GPUs, MiB; `None`: they
    /// were never seen holding any.
    pub peak_mib: Option<u64>,
    /// The latest readings, oldest first, at most [`LAST_READINGS_MAX`].
    pub last: Vec<Reading>,
    /// Why readings failed (the source could not be opened, or the latest failed reading).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}
