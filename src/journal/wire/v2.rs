//! The shapes carma 0.2 added. Frozen.

use serde::{Deserialize, Serialize};

use super::{ReferenceV1, TaskIdV1};

/// carma 0.2's task spec: environment names, never values.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SpecV2 {
    pub name: String,
    pub command: Vec<String>,
    pub program: Option<String>,
    pub workdir: String,
    pub env_names: Vec<String>,
    pub export: Option<String>,
    pub output: Option<String>,
    pub error: Option<String>,
    pub mig_profile: Option<String>,
    pub gpus: u32,
    pub memory_mib: Option<u64>,
    pub model_summary: Option<String>,
    pub batch_size: Option<u32>,
    pub max_retries: u32,
    pub time_limit_ms: Option<u64>,
    pub dataset: Option<String>,
    pub policy_hint: Option<String>,
    pub reference: ReferenceV1,
    pub dependencies: Vec<DependencyV2>,
    pub keep_on_dependency_failure: bool,
    pub array: Option<ArrayMemberV2>,
    pub priority: i32,
    pub nice: i32,
    pub hold: bool,
    pub notify: Vec<String>,
    pub mail_user: Option<String>,
    pub script: Option<String>,
}

/// One dependency of [`SpecV2`]. Frozen with it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DependencyV2 {
    pub kind: DependencyKindV2,
    pub task: TaskIdV1,
}

/// Frozen with [`SpecV2`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DependencyKindV2 {
    AfterOk,
    AfterAny,
    AfterNotOk,
}

/// Array or sweep membership of [`SpecV2`]. Frozen with it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ArrayMemberV2 {
    pub id: TaskIdV1,
    pub index: u32,
    pub count: u32,
    pub running_max: Option<u32>,
    pub params: Vec<(String, String)>,
}

/// carma 0.2's GPU sample: [`SampleV1`] plus driver-reserved memory, health, per-process SM
/// utilisation, MIG profiles and the coarse SM-activity sources.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SampleV2 {
    pub uuid: String,
    pub index: u32,
    pub name: String,
    pub memory_total_mib: u64,
    pub memory_used_mib: u64,
    pub memory_free_mib: u64,
    pub memory_reserved_mib: Option<u64>,
    pub health: HealthV2,
    pub util_gpu_mean: Option<f32>,
    pub util_last_timestamp_us: Option<u64>,
    pub sm_active: Option<f32>,
    pub sm_active_source: SmSourceV2,
    pub sm_occupancy: Option<f32>,
    pub dram_active: Option<f32>,
    pub power_mw: Option<u32>,
    pub energy_mj: Option<u64>,
    pub processes: Vec<ProcessV2>,
    pub mig: MigInfoV2,
    pub unavailable: Vec<String>,
}

/// Frozen with [`SampleV2`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum HealthV2 {
    Healthy,
    Lost { detail: String },
    XidError { xid: u64, detail: String },
    Unreadable { detail: String },
}

/// Frozen with [`SampleV2`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SmSourceV2 {
    Gpm,
    File,
    Simulated,
    Unavailable,
    DeviceUtil,
    ProcessUtil,
}

/// Frozen with [`SampleV2`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProcessV2 {
    pub pid: u32,
    pub used_mib: Option<u64>,
    pub sm_util: Option<f32>,
}

/// Frozen with [`SampleV2`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MigInfoV2 {
    pub enabled: Option<bool>,
    pub instances: Vec<MigInstanceV2>,
}

/// Frozen with [`SampleV2`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MigInstanceV2 {
    pub uuid: String,
    pub index: u32,
    pub profile: Option<String>,
    pub memory_total_mib: u64,
    pub memory_used_mib: u64,
    pub processes: Vec<ProcessV2>,
}
