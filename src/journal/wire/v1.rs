//! The shapes carma 0.1 wrote (journal format 1), still read. Frozen.

use serde::{Deserialize, Serialize};

/// carma 0.1's task spec (journal format 1). Frozen.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SpecV1 {
    /// The task's human name (`TaskSpec::name`); frozen.
    pub name: String,
    /// The program and its arguments as the user typed them; frozen.
    pub command: Vec<String>,
    /// The job's absolute working directory; frozen.
    pub workdir: String,
    /// The job's environment, names *and values*: carma 0.1 journaled them, so decoding
    /// keeps only the names and the tick alone reads the values (`legacy_env`); frozen.
    pub env: Vec<(String, String)>,
    /// GPUs the task needs; frozen.
    pub gpus: u32,
    /// Memory the user declared per GPU, MiB; frozen.
    pub memory_mib: Option<u64>,
    /// Absolute path of the model summary for the estimators; frozen.
    pub model_summary: Option<String>,
    /// Training batch size for the estimators; frozen.
    pub batch_size: Option<u32>,
    /// How many times an out-of-memory or lost attempt may be retried; frozen.
    pub max_retries: u32,
    /// Wall-clock limit per attempt, ms; frozen.
    pub time_limit_ms: Option<u64>,
    /// Dataset name from a `.rad` file, informational; frozen.
    pub dataset: Option<String>,
    /// Policy hint from a `.rad` file ("exclusive" or "collocation"); frozen.
    pub policy_hint: Option<String>,
    /// The `.rad` file's reference memory figures; frozen.
    pub reference: ReferenceV1,
}

/// The `.rad` reference figures of [`SpecV1`] and [`SpecV2`](super::SpecV2). Frozen.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ReferenceV1 {
    /// The `.rad` file's oracle figure, MiB (import also declares it as the memory); frozen.
    pub oracle: Option<u64>,
    /// The `.rad` file's Horus estimate, MiB; frozen.
    pub horus: Option<u64>,
    /// The `.rad` file's FakeTensor estimate, MiB; frozen.
    pub faketensor: Option<u64>,
    /// The `.rad` file's GPUMemNet estimate, MiB; frozen.
    pub gpumemnet: Option<u64>,
}

/// carma 0.1's GPU sample (journal format 1). Frozen.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SampleV1 {
    /// The GPU's UUID (`GpuSample::uuid`); frozen.
    pub uuid: String,
    /// The driver's index of the GPU, for display only; frozen.
    pub index: u32,
    /// The GPU's product name; frozen.
    pub name: String,
    /// Installed GPU memory, MiB; frozen.
    pub memory_total_mib: u64,
    /// GPU memory held by processes, MiB; frozen.
    pub memory_used_mib: u64,
    /// Unallocated GPU memory, MiB; frozen.
    pub memory_free_mib: u64,
    /// Mean NVML utilisation since the previous tick, 0..1; frozen.
    pub util_gpu_mean: Option<f32>,
    /// Timestamp of the newest utilisation sample, µs, the next tick's "since"; frozen.
    pub util_last_timestamp_us: Option<u64>,
    /// Fraction of SMs busy, 0..1, from the source `sm_active_source` names; frozen.
    pub sm_active: Option<f32>,
    /// Where `sm_active` came from; frozen.
    pub sm_active_source: SmSourceV1,
    /// Achieved SM occupancy, 0..1; frozen.
    pub sm_occupancy: Option<f32>,
    /// DRAM bandwidth utilisation, 0..1; frozen.
    pub dram_active: Option<f32>,
    /// Board power draw when sampled, milliwatts; frozen.
    pub power_mw: Option<u32>,
    /// The driver's cumulative energy counter, millijoules; frozen.
    pub energy_mj: Option<u64>,
    /// Compute processes holding a context on the GPU; frozen.
    pub processes: Vec<ProcessV1>,
    /// MIG mode and the MIG instances on the GPU; frozen.
    pub mig: MigInfoV1,
    /// Metrics that could not be read, as `"metric: reason"`; frozen.
    pub unavailable: Vec<String>,
}

/// Frozen with [`SampleV1`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SmSourceV1 {
    /// Measured by NVML GPU Performance Monitoring; frozen.
    Gpm,
    /// Read from a fake GPU file; frozen.
    File,
    /// Produced by the simulator; frozen.
    Simulated,
    /// Not measured (`sm_active` is `None`); frozen.
    Unavailable,
}

/// Frozen with [`SampleV1`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessV1 {
    /// The process id, in the host pid namespace; frozen.
    pub pid: u32,
    /// GPU memory the process holds, MiB, when NVML shows it; frozen.
    pub used_mib: Option<u64>,
}

/// Frozen with [`SampleV1`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigInfoV1 {
    /// Whether MIG mode is on; `None` when it could not be read; frozen.
    pub enabled: Option<bool>,
    /// The MIG instances that exist on the GPU; frozen.
    pub instances: Vec<MigInstanceV1>,
}

/// Frozen with [`SampleV1`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigInstanceV1 {
    /// The MIG device's UUID; frozen.
    pub uuid: String,
    /// The instance's slot on its parent GPU; frozen.
    pub index: u32,
    /// The instance's memory, MiB; frozen.
    pub memory_total_mib: u64,
    /// The instance's allocated memory, MiB; frozen.
    pub memory_used_mib: u64,
}
