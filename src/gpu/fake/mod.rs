//! [`FakeProbe`]: GPUs described by a JSON file, for tests and demonstrations.
//!
//! The file is re-read on every [`GpuProbe::sample`] call, so a test (or a
//! person trying carma on a laptop) changes what the next tick sees by
//! editing the file. The format is strict, with unknown fields rejected, so a
//! typo like `memory_use_mib` fails loudly instead of silently reading 0.
//!
//! # Format
//!
//! A JSON array with one object per GPU, in `index` order. The JSON Schema
//! is `schema/fake-gpus.schema.json`; examples are
//! `schema/examples/fake-gpus-2xA100.json` and
//! `schema/examples/fake-gpus-mig-lost.json`.
//!
//! ```json
//! [
//!   {
//!     "uuid": "GPU-fake-0000",           // required, non-empty, unique
//!     "name": "NVIDIA A100-SXM4-40GB",   // required, non-empty
//!     "memory_total_mib": 40960,         // required, MiB
//!     "memory_used_mib": 1200,           // required, MiB, used by processes
//!     "memory_reserved_mib": 512,        // optional, MiB the driver keeps
//!     "sm_active": 0.35,                 // optional, fraction 0..=1; absent: no GPM
//!     "util_gpu": 0.9,                   // optional, NVML device utilisation 0..=1
//!     "sm_occupancy": 0.2,               // optional, fraction 0..=1
//!     "power_w": 88.5,                   // optional, watts, 0..=10000
//!     "energy_mj": 123456,               // optional, cumulative millijoules
//!     "health": {"state": "lost", "detail": "fell off the bus"},  // optional
//!     "processes": [{ "pid": 4242, "used_mib": 1100, "sm_util": 0.3 }],
//!     "mig_enabled": true,               // optional; default: mig_instances given
//!     "mig_instances": [{ "uuid": "MIG-fake-0000-0", "profile": "3g.20gb",
//!                         "memory_total_mib": 19968, "memory_used_mib": 0 }]
//!   }
//! ]
//! ```
//! (Real files cannot hold the comments shown above.)
//!
//! Free memory is `total − used − reserved`. Without `sm_active` the GPU
//! reads like one without GPM: SM activity falls back to `util_gpu` (source
//! `DeviceUtil`), else to the sum of the processes' `sm_util` (`ProcessUtil`),
//! else it is unknown, exactly as the NVML probe does. `health` is
//! `{"state": "lost" | "unreadable", "detail": ...}` or
//! `{"state": "xid", "xid": 79, "detail": ...}`. A fake GPU has no
//! utilisation timestamps and no GPM DRAM reading, and `unavailable` stays
//! empty: the file states exactly what the test wants the scheduler to see.

use std::collections::{HashMap, HashSet};
use std::io::{ErrorKind, Read};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::fsutil::{Symlinks, open_regular};

use super::sample::{coarse_sm_active, is_fraction};
use super::{
    GPUS_MAX, GpuHealth, GpuProbe, GpuProcess, GpuSample, MigInfo, MigInstance, PROCESSES_PER_GPU_MAX,
    ProbeError, SinceMarks, SmSource,
};

/// Largest fake GPU file accepted; far above 64 GPUs with full process lists.
pub const FAKE_FILE_BYTES_MAX: u64 = 1024 * 1024;

/// Highest believable board power in the file, watts.
const POWER_W_MAX: f64 = 10_000.0;

/// Samples the GPUs listed in a JSON file, re-reading it on every call.
#[derive(Debug, Clone)]
pub struct FakeProbe {
    path: PathBuf,
}

/// One GPU as written in the file (input only; never journaled).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FakeGpu {
    uuid: String,
    name: String,
    memory_total_mib: u64,
    memory_used_mib: u64,
    memory_reserved_mib: Option<u64>,
    sm_active: Option<f32>,
    util_gpu: Option<f32>,
    sm_occupancy: Option<f32>,
    power_w: Option<f64>,
    energy_mj: Option<u64>,
    health: Option<FakeHealth>,
    #[serde(default)]
    processes: Vec<FakeProcess>,
    mig_enabled: Option<bool>,
    #[serde(default)]
    mig_instances: Vec<FakeMigInstance>,
}

/// One process as written in the file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FakeProcess {
    pid: u32,
    used_mib: u64,
    sm_util: Option<f32>,
}

/// A GPU's health as written in the file.
#[derive(Debug, Deserialize)]
#[serde(tag = "state", rename_all = "lowercase", deny_unknown_fields)]
enum FakeHealth {
    Healthy,
    Lost {
        #[serde(default)]
        detail: String,
    },
    Xid {
        xid: u64,
        #[serde(default)]
        detail: String,
    },
    Unreadable {
        #[serde(default)]
        detail: String,
    },
}

/// One MIG instance as written in the file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FakeMigInstance {
    uuid: String,
    profile: Option<String>,
    memory_total_mib: u64,
    memory_used_mib: u64,
    #[serde(default)]
    processes: Vec<FakeProcess>,
}

impl FakeProbe {
    /// Reads and validates the file once, so a broken file is reported when
    /// the probe is built rather than on the first tick.
    pub fn open(path: impl Into<PathBuf>) -> Result<Self, ProbeError> {
        let probe = Self { path: path.into() };
        probe.read()?;
        Ok(probe)
    }

    /// The file this probe reads.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads, parses and validates the file now.
    pub fn read(&self) -> Result<Vec<GpuSample>, ProbeError> {
        let text = read_bounded(&self.path).map_err(|detail| self.error(detail))?;
        parse_fake_gpus(&text).map_err(|detail| self.error(detail))
    }

    fn error(&self, detail: String) -> ProbeError {
        ProbeError::FakeFile { path: self.path.clone(), detail }
    }
}

impl GpuProbe for FakeProbe {
    fn sample(&mut self, _since: &SinceMarks) -> Result<Vec<GpuSample>, ProbeError> {
        self.read()
    }

    fn describe(&self) -> String {
        format!("fake:{}", self.path.display())
    }
}

/// Reads at most [`FAKE_FILE_BYTES_MAX`] bytes of UTF-8 from the regular file `path` names.
/// The tick reads the file every run as root: a FIFO there would hang it (the open waits for a
/// writer) and a device would feed it forever, so the file is opened like a user's file. A
/// symlink is refused too: the probe spec should name the file the tick really reads.
fn read_bounded(path: &Path) -> Result<String, String> {
    let file = open_regular(path, Symlinks::Refuse).map_err(|error| match error.kind() {
        ErrorKind::InvalidInput => {
            format!("{error}; point gpus = \"fake:…\" at the JSON file itself")
        }
        _ => cannot_read(error),
    })?;
    let mut text = String::new();
    file.take(FAKE_FILE_BYTES_MAX + 1).read_to_string(&mut text).map_err(cannot_read)?;
    if text.len() as u64 > FAKE_FILE_BYTES_MAX {
        return Err(format!("larger than {FAKE_FILE_BYTES_MAX} bytes; list at most {GPUS_MAX} GPUs"));
    }
    Ok(text)
}

fn cannot_read(error: std::io::Error) -> String {
    format!("cannot read it ({error}); create it or fix the path in the probe spec")
}

/// Parses and validates the file's text into samples. The error is the
/// detail of a [`ProbeError::FakeFile`]: the caller adds the path.
fn parse_fake_gpus(text: &str) -> Result<Vec<GpuSample>, String> {
    let gpus: Vec<FakeGpu> = serde_json::from_str(text)
        .map_err(|error| format!("not valid fake GPU JSON: {error}; see schema/fake-gpus.schema.json"))?;
    if gpus.len() > GPUS_MAX {
        return Err(format!("lists {} GPUs, more than {GPUS_MAX}; remove some", gpus.len()));
    }
    validate_unique_uuids(&gpus)?;
    let mut samples = Vec::with_capacity(gpus.len());
    for (gpu, index) in gpus.into_iter().zip(0u32..) {
        validate_gpu(&gpu, index)?;
        samples.push(to_sample(gpu, index));
    }
    debug_assert!(samples.iter().all(|sample| sample.check().is_ok()));
    Ok(samples)
}

/// `GPU 1 ("GPU-fake-0001")`: how errors name a GPU of the file.
fn label(index: u32, uuid: &str) -> String {
    format!("GPU {index} ({uuid:?})")
}

fn validate_unique_uuids(gpus: &[FakeGpu]) -> Result<(), String> {
    let mut first_index_by_uuid: HashMap<&str, u32> = HashMap::new();
    for (gpu, index) in gpus.iter().zip(0u32..) {
        if let Some(first) = first_index_by_uuid.insert(&gpu.uuid, index) {
            return Err(format!(
                "{} repeats the uuid of GPU {first}; give every GPU a unique uuid",
                label(index, &gpu.uuid)
            ));
        }
    }
    let mut seen: HashSet<&str> = first_index_by_uuid.keys().copied().collect();
    for (gpu, index) in gpus.iter().zip(0u32..) {
        for instance in gpu.mig_instances.iter().filter(|m| !m.uuid.is_empty()) {
            if !seen.insert(&instance.uuid) {
                return Err(format!(
                    "{} has a MIG instance whose uuid {:?} is used elsewhere in the file; give every GPU and MIG instance a unique uuid",
                    label(index, &gpu.uuid),
                    instance.uuid
                ));
            }
        }
    }
    Ok(())
}

fn validate_gpu(gpu: &FakeGpu, index: u32) -> Result<(), String> {
    let gpu_label = label(index, &gpu.uuid);
    if gpu.uuid.is_empty() {
        return Err(format!(
            "GPU {index} has an empty uuid; set a unique one such as \"GPU-fake-{index:04}\""
        ));
    }
    if gpu.name.is_empty() {
        return Err(format!("{gpu_label} has an empty name; set one such as \"NVIDIA A100-SXM4-40GB\""));
    }
    if gpu.memory_used_mib > gpu.memory_total_mib {
        return Err(format!(
            "{gpu_label} has memory_used_mib {} > memory_total_mib {}; lower memory_used_mib or raise memory_total_mib",
            gpu.memory_used_mib, gpu.memory_total_mib
        ));
    }
    let reserved_mib = gpu.memory_reserved_mib.unwrap_or(0);
    if gpu.memory_used_mib.saturating_add(reserved_mib) > gpu.memory_total_mib {
        return Err(format!(
            "{gpu_label} has memory_used_mib {} + memory_reserved_mib {reserved_mib} > memory_total_mib {}; lower one of them",
            gpu.memory_used_mib, gpu.memory_total_mib
        ));
    }
    validate_fraction(&gpu_label, "sm_active", gpu.sm_active)?;
    validate_fraction(&gpu_label, "util_gpu", gpu.util_gpu)?;
    validate_fraction(&gpu_label, "sm_occupancy", gpu.sm_occupancy)?;
    if let Some(power_w) = gpu.power_w
        && !(0.0..=POWER_W_MAX).contains(&power_w)
    {
        return Err(format!(
            "{gpu_label} has power_w {power_w}, outside 0..={POWER_W_MAX}; give the board power in watts"
        ));
    }
    validate_processes(&gpu_label, &gpu.processes, gpu.memory_total_mib)?;
    validate_mig(gpu, &gpu_label)
}

fn validate_fraction(gpu_label: &str, field: &str, value: Option<f32>) -> Result<(), String> {
    match value {
        Some(value) if !is_fraction(value) => Err(format!(
            "{gpu_label} has {field} {value}, outside 0..=1; write a fraction such as 0.35, not a percentage"
        )),
        _ => Ok(()),
    }
}

fn validate_processes(gpu_label: &str, processes: &[FakeProcess], total_mib: u64) -> Result<(), String> {
    if processes.len() > PROCESSES_PER_GPU_MAX {
        return Err(format!(
            "{gpu_label} lists {} processes, more than {PROCESSES_PER_GPU_MAX}; remove some",
            processes.len()
        ));
    }
    for process in processes {
        if process.used_mib > total_mib {
            return Err(format!(
                "{gpu_label} has process {} with used_mib {} > memory_total_mib {total_mib}; lower used_mib",
                process.pid, process.used_mib
            ));
        }
        validate_fraction(gpu_label, &format!("process {} sm_util", process.pid), process.sm_util)?;
    }
    Ok(())
}

/// MIG instances need MIG on, their own uuid, and memory within their own total.
fn validate_mig(gpu: &FakeGpu, gpu_label: &str) -> Result<(), String> {
    if gpu.mig_enabled == Some(false) && !gpu.mig_instances.is_empty() {
        return Err(format!(
            "{gpu_label} lists mig_instances with mig_enabled false; remove them or set mig_enabled true"
        ));
    }
    if gpu.mig_instances.len() > MIG_INSTANCES_MAX {
        return Err(format!(
            "{gpu_label} lists {} MIG instances, more than {MIG_INSTANCES_MAX}; remove some",
            gpu.mig_instances.len()
        ));
    }
    for (instance, slot) in gpu.mig_instances.iter().zip(0u32..) {
        let mig_label = format!("{gpu_label} MIG instance {slot}");
        if instance.uuid.is_empty() || instance.uuid == gpu.uuid {
            return Err(format!(
                "{mig_label} needs its own uuid; set one such as \"MIG-{}-{slot}\"",
                gpu.uuid.trim_start_matches("GPU-")
            ));
        }
        if instance.profile.as_deref().is_some_and(str::is_empty) {
            return Err(format!(
                "{mig_label} has an empty profile; write one such as \"1g.10gb\" or leave it out"
            ));
        }
        if instance.memory_used_mib > instance.memory_total_mib {
            return Err(format!(
                "{mig_label} has memory_used_mib {} > memory_total_mib {}; lower memory_used_mib",
                instance.memory_used_mib, instance.memory_total_mib
            ));
        }
        validate_processes(&mig_label, &instance.processes, instance.memory_total_mib)?;
    }
    Ok(())
}

/// Most MIG instances per fake GPU (NVML creates at most 7 today).
const MIG_INSTANCES_MAX: usize = 16;

fn to_processes(processes: Vec<FakeProcess>) -> Vec<GpuProcess> {
    processes
        .into_iter()
        .map(|p| GpuProcess { pid: p.pid, used_mib: Some(p.used_mib), sm_util: p.sm_util })
        .collect()
}

fn to_health(health: Option<FakeHealth>) -> GpuHealth {
    match health {
        None | Some(FakeHealth::Healthy) => GpuHealth::Healthy,
        Some(FakeHealth::Lost { detail }) => GpuHealth::Lost { detail },
        Some(FakeHealth::Xid { xid, detail }) => GpuHealth::XidError { xid, detail },
        Some(FakeHealth::Unreadable { detail }) => GpuHealth::Unreadable { detail },
    }
}

/// Converts a validated file entry into the journaled form.
fn to_sample(gpu: FakeGpu, index: u32) -> GpuSample {
    let processes = to_processes(gpu.processes);
    // Without `sm_active` the GPU reads like one without GPM (see the module docs).
    let (sm_active, sm_active_source) = match gpu.sm_active {
        Some(value) => (Some(value), SmSource::File),
        None => {
            let sm_utils = processes.iter().filter_map(|p| p.sm_util);
            let process_sum =
                processes.iter().any(|p| p.sm_util.is_some()).then(|| sm_utils.fold(0.0, |sum, v| sum + v));
            coarse_sm_active(gpu.util_gpu, process_sum)
        }
    };
    let mig_enabled = gpu.mig_enabled.unwrap_or(!gpu.mig_instances.is_empty());
    let instances = gpu
        .mig_instances
        .into_iter()
        .zip(0u32..)
        .map(|(m, slot)| MigInstance {
            uuid: m.uuid,
            index: slot,
            profile: m.profile,
            memory_total_mib: m.memory_total_mib,
            memory_used_mib: m.memory_used_mib,
            processes: to_processes(m.processes),
        })
        .collect();
    let reserved_mib = gpu.memory_reserved_mib.unwrap_or(0);
    GpuSample {
        uuid: gpu.uuid,
        index,
        name: gpu.name,
        memory_total_mib: gpu.memory_total_mib,
        memory_used_mib: gpu.memory_used_mib,
        memory_free_mib: gpu.memory_total_mib - gpu.memory_used_mib - reserved_mib,
        memory_reserved_mib: gpu.memory_reserved_mib,
        health: to_health(gpu.health),
        util_gpu_mean: gpu.util_gpu,
        util_last_timestamp_us: None,
        sm_active,
        sm_active_source,
        sm_occupancy: gpu.sm_occupancy,
        dram_active: None,
        // Validated to 0..=10 000 W, so the product fits u32 milliwatts.
        power_mw: gpu.power_w.map(|power_w| (power_w * 1000.0).round() as u32),
        energy_mj: gpu.energy_mj,
        processes,
        mig: MigInfo { enabled: Some(mig_enabled), instances },
        unavailable: Vec::new(),
    }
}

#[cfg(test)]
pub(crate) mod tests;
