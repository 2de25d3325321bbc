//! The shapes carma 0.1 wrote (journal format 1), still read. Frozen.

use serde::{Deserialize, Serialize};

/// carma 0.1's task spec (journal format 1). Frozen.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SpecV1 {
    pub name: String,
    pub command: Vec<String>,
    pub workdir: String,
    pub env: Vec<(String, String)>,
    pub gpus: u32,
    pub memory_mib: Option<u64>,
    pub model_summary: Option<String>,
    pub batch_size: Option<u32>,
    pub max_retries: u32,
    pub time_limit_ms: Option<u64>,
    pub dataset: Option<String>,
    pub policy_hint: Option<String>,
    pub reference: ReferenceV1,
}

/// The `.rad` reference figures of [`SpecV1`] and [`SpecV2`](super::SpecV2). Frozen.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ReferenceV1 {
    pub oracle: Option<u64>,
    pub horus: Option<u64>,
    pub faketensor: Option<u64>,
    pub gpumemnet: Option<u64>,
}

/// carma 0.1's GPU sample (journal format 1). Frozen.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SampleV1 {
    pub uuid: String,
    pub index: u32,
    pub name: String,
    pub memory_total_mib: u64,
    pub memory_used_mib: u64,
    pub memory_free_mib: u64,
    pub util_gpu_mean: Option<f32>,
    pub util_last_timestamp_us: Option<u64>,
    pub sm_active: Option<f32>,
    pub sm_active_source: SmSourceV1,
    pub sm_occupancy: Option<f32>,
    pub dram_active: Option<f32>,
    pub power_mw: Option<u32>,
    pub energy_mj: Option<u64>,
    pub processes: Vec<ProcessV1>,
    pub mig: MigInfoV1,
    pub unavailable: Vec<String>,
}

/// Frozen with [`SampleV1`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SmSourceV1 {
    Gpm,
    File,
    Simulated,
    Unavailable,
}

/// Frozen with [`SampleV1`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessV1 {
    pub pid: u32,
    pub used_mib: Option<u64>,
}

/// Frozen with [`SampleV1`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigInfoV1 {
    pub enabled: Option<bool>,
    pub instances: Vec<MigInstanceV1>,
}

/// Frozen with [`SampleV1`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigInstanceV1 {
    pub uuid: String,
    pub index: u32,
    pub memory_total_mib: u64,
    pub memory_used_mib: u64,
}
