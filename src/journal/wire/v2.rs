//! The shapes carma 0.2 added. Frozen.

use serde::{Deserialize, Serialize};

use super::{ReferenceV1, TaskIdV1};

/// carma 0.2's task spec: environment names, never values.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SpecV2 {
    /// The task's human name (`TaskSpec::name`); frozen.
    pub name: String,
    /// The program and its arguments as the user typed them; frozen.
    pub command: Vec<String>,
    /// `command[0]` resolved to an absolute path at submit; frozen.
    pub program: Option<String>,
    /// The job's absolute working directory; frozen.
    pub workdir: String,
    /// The names of the job's environment variables, sorted; the values never reach the journal;
    /// frozen.
    pub env_names: Vec<String>,
    /// How the environment was captured (`ALL`, `NONE` or the names given to `--export`); frozen.
    pub export: Option<String>,
    /// The job's standard output path template, relative to `workdir`; frozen.
    pub output: Option<String>,
    /// The job's standard error path template, relative to `workdir`; frozen.
    pub error: Option<String>,
    /// The MIG profile the task asks for (e.g. `1g.10gb`); frozen.
    pub mig_profile: Option<String>,
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
    /// Tasks that must end, as each kind says, before this one starts (`--after`); frozen.
    pub dependencies: Vec<DependencyV2>,
    /// Stay pending instead of being cancelled when a dependency can no longer be met; frozen.
    pub keep_on_dependency_failure: bool,
    /// The task's place in an array or sweep; frozen.
    pub array: Option<ArrayMemberV2>,
    /// Order in the main queue, higher first (`--priority`); frozen.
    pub priority: i32,
    /// Subtracted from the priority (`--nice`); frozen.
    pub nice: i32,
    /// Submitted held (`--hold`); frozen.
    pub hold: bool,
    /// The program and arguments run as the submitter when the task ends (`--notify`); frozen.
    pub notify: Vec<String>,
    /// The address mailed about the task (`--mail-user`); frozen.
    pub mail_user: Option<String>,
    /// The job script's absolute path at submit; its text is not in the journal; frozen.
    pub script: Option<String>,
}

/// One dependency of [`SpecV2`]. Frozen with it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DependencyV2 {
    /// How the dependency must end; frozen.
    pub kind: DependencyKindV2,
    /// The task depended on; frozen.
    pub task: TaskIdV1,
}

/// Frozen with [`SpecV2`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DependencyKindV2 {
    /// The dependency finished with exit 0; frozen.
    AfterOk,
    /// The dependency ended, however; frozen.
    AfterAny,
    /// The dependency failed or was cancelled; frozen.
    AfterNotOk,
}

/// Array or sweep membership of [`SpecV2`]. Frozen with it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ArrayMemberV2 {
    /// The array's id, shared by every member; frozen.
    pub id: TaskIdV1,
    /// The member's `--array` index, or its position in the sweep from 0; frozen.
    pub index: u32,
    /// How many tasks the submission created; frozen.
    pub count: u32,
    /// At most this many members run at once (`%N`); frozen.
    pub running_max: Option<u32>,
    /// The sweep's values for this member (`--param`), in flag order; frozen.
    pub params: Vec<(String, String)>,
}

/// carma 0.2's GPU sample: [`SampleV1`](super::SampleV1) plus driver-reserved memory, health,
/// per-process SM utilisation, MIG profiles and the coarse SM-activity sources.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SampleV2 {
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
    /// Memory the driver reserves for itself, MiB, when known; frozen.
    pub memory_reserved_mib: Option<u64>,
    /// Whether the GPU answered normally; frozen.
    pub health: HealthV2,
    /// Mean NVML utilisation since the previous tick, 0..1; frozen.
    pub util_gpu_mean: Option<f32>,
    /// Timestamp of the newest utilisation sample, µs, the next tick's "since"; frozen.
    pub util_last_timestamp_us: Option<u64>,
    /// Fraction of SMs busy, 0..1, from the source `sm_active_source` names; frozen.
    pub sm_active: Option<f32>,
    /// Where `sm_active` came from; frozen.
    pub sm_active_source: SmSourceV2,
    /// Achieved SM occupancy, 0..1; frozen.
    pub sm_occupancy: Option<f32>,
    /// DRAM bandwidth utilisation, 0..1; frozen.
    pub dram_active: Option<f32>,
    /// Board power draw when sampled, milliwatts; frozen.
    pub power_mw: Option<u32>,
    /// The driver's cumulative energy counter, millijoules; frozen.
    pub energy_mj: Option<u64>,
    /// Compute processes holding a context on the GPU; frozen.
    pub processes: Vec<ProcessV2>,
    /// MIG mode and the MIG instances on the GPU; frozen.
    pub mig: MigInfoV2,
    /// Metrics that could not be read, as `"metric: reason"`; frozen.
    pub unavailable: Vec<String>,
}

/// Frozen with [`SampleV2`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum HealthV2 {
    /// Readable and reporting no error; frozen.
    Healthy,
    /// NVML reports the GPU lost (fallen off the bus); frozen.
    Lost {
        /// What NVML said, in words; frozen.
        detail: String,
    },
    /// The driver reported an XID error that needs a reset; frozen.
    XidError {
        /// The XID error number; frozen.
        xid: u64,
        /// What the driver said, in words; frozen.
        detail: String,
    },
    /// Basic readings (memory) failed; frozen.
    Unreadable {
        /// Which reading failed and why; frozen.
        detail: String,
    },
}

/// Frozen with [`SampleV2`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SmSourceV2 {
    /// Measured by NVML GPU Performance Monitoring; frozen.
    Gpm,
    /// Read from a fake GPU file; frozen.
    File,
    /// Produced by the simulator; frozen.
    Simulated,
    /// Not measured (`sm_active` is `None`); frozen.
    Unavailable,
    /// NVML's device utilisation, a stand-in on GPUs without GPM; frozen.
    DeviceUtil,
    /// The sum of NVML's per-process SM utilisation, a stand-in on GPUs without GPM; frozen.
    ProcessUtil,
}

/// Frozen with [`SampleV2`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProcessV2 {
    /// The process id, in the host pid namespace; frozen.
    pub pid: u32,
    /// GPU memory the process holds, MiB, when NVML shows it; frozen.
    pub used_mib: Option<u64>,
    /// The process's SM utilisation since the previous sample, 0..1, when measured; frozen.
    pub sm_util: Option<f32>,
}

/// Frozen with [`SampleV2`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MigInfoV2 {
    /// Whether MIG mode is on; `None` when it could not be read; frozen.
    pub enabled: Option<bool>,
    /// The MIG instances that exist on the GPU; frozen.
    pub instances: Vec<MigInstanceV2>,
}

/// Frozen with [`SampleV2`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MigInstanceV2 {
    /// The MIG device's UUID; frozen.
    pub uuid: String,
    /// The instance's slot on its parent GPU; frozen.
    pub index: u32,
    /// The GPU instance profile (e.g. `1g.10gb`), when known; frozen.
    pub profile: Option<String>,
    /// The instance's memory, MiB; frozen.
    pub memory_total_mib: u64,
    /// The instance's allocated memory, MiB; frozen.
    pub memory_used_mib: u64,
    /// Compute processes on the instance; frozen.
    pub processes: Vec<ProcessV2>,
}
