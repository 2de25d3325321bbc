//! One GPU's readings through NVML, apart from GPM: identity, memory (with the driver's
//! reservation), utilisation, power, energy, processes with their SM utilisation, MIG
//! instances, and the GPU's health.
//!
//! Every reading that fails becomes a line in `GpuSample::unavailable` with NVML's error, never
//! a silent empty value. A GPU that NVML reports lost (`NVML_ERROR_GPU_IS_LOST`) or that needs
//! a reset is marked so in `health`; one whose memory cannot be read is `Unreadable` (0 MiB
//! fits nothing, but the health says why).

use std::collections::BTreeMap;

use nvml_wrapper::Device;
use nvml_wrapper::enum_wrappers::device::Sampling;
use nvml_wrapper::enums::device::{SampleValue, UsedGpuMemory};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::struct_wrappers::device::ProcessInfo;

use super::raw;
use super::reason;
use crate::exec::MemoryNow;
use crate::gpu::sample::fraction_from_percent;
use crate::gpu::{
    BYTES_PER_MIB, GpuHealth, GpuProcess, GpuSample, MigInfo, MigInstance, PROCESSES_PER_GPU_MAX, SinceMarks,
    SmSource,
};

/// `NVML_DEVICE_MIG_ENABLE` from nvml.h; nvml-wrapper does not re-export it.
const MIG_MODE_ENABLED: u32 = 1;

/// Most MIG slots examined per GPU (NVML reports at most 7 today).
const MIG_SLOTS_MAX: u32 = 16;

/// Collects the failed readings of one GPU and what they say about its health.
#[derive(Debug, Default)]
pub(super) struct Notes {
    pub(super) unavailable: Vec<String>,
    /// The first failure that means the GPU cannot take work.
    pub(super) health: Option<GpuHealth>,
}

impl Notes {
    /// Records that `metric` could not be read; a lost GPU or one that needs a reset is
    /// unhealthy from then on.
    pub(super) fn failed(&mut self, metric: &str, error: &NvmlError) {
        self.unavailable.push(format!("{metric}: {}", reason(error)));
        if self.health.is_none() {
            self.health = health_of(metric, error);
        }
    }

    /// `Some(value)`, or `None` and a note.
    pub(super) fn ok<T>(&mut self, result: Result<T, NvmlError>, metric: &str) -> Option<T> {
        result.map_err(|error| self.failed(metric, &error)).ok()
    }
}

/// The health an NVML error implies, if it is one that takes the GPU out of service.
pub(super) fn health_of(what: &str, error: &NvmlError) -> Option<GpuHealth> {
    match error {
        NvmlError::GpuLost => {
            Some(GpuHealth::Lost { detail: format!("NVML_ERROR_GPU_IS_LOST reading {what}") })
        }
        NvmlError::ResetRequired => Some(GpuHealth::Unreadable {
            detail: format!("NVML_ERROR_RESET_REQUIRED reading {what}; the GPU needs a reset"),
        }),
        _ => None,
    }
}

/// Reads everything except GPM for one GPU.
pub(super) fn read_device(
    nvml: &nvml_wrapper::Nvml,
    device: &Device<'_>,
    index: u32,
    uuid: &str,
    since: &SinceMarks,
) -> GpuSample {
    let mut notes = Notes::default();
    let name = notes.ok(device.name(), "name").unwrap_or_default();
    let memory = notes.ok(device.memory_info(), "memory");
    let since_us = since.util_last_timestamp_us(uuid);
    let (util_gpu_mean, util_last_timestamp_us) = read_util(device, since_us, &mut notes);
    let power_mw = notes.ok(device.power_usage(), "power");
    let energy_mj = notes.ok(device.total_energy_consumption(), "energy");
    let mut processes = read_processes(nvml, device, &mut notes);
    let process_sm_sum = read_process_util(device, since_us, &mut processes, &mut notes);
    let mig = read_mig(nvml, device, &mut notes);
    let (sm_active, sm_active_source) = (None, SmSource::Unavailable);
    let mut sample = GpuSample {
        uuid: uuid.to_owned(),
        index,
        name,
        memory_total_mib: 0,
        memory_used_mib: 0,
        memory_free_mib: 0,
        memory_reserved_mib: None,
        health: GpuHealth::Healthy,
        util_gpu_mean,
        util_last_timestamp_us,
        sm_active,
        sm_active_source,
        sm_occupancy: None,
        dram_active: None,
        power_mw,
        energy_mj,
        processes,
        mig,
        unavailable: Vec::new(),
    };
    match memory {
        Some(info) => {
            let total = info.total / BYTES_PER_MIB;
            sample.memory_total_mib = total;
            sample.memory_used_mib = (info.used / BYTES_PER_MIB).min(total);
            sample.memory_free_mib = (info.free / BYTES_PER_MIB).min(total);
            sample.memory_reserved_mib = Some((info.reserved / BYTES_PER_MIB).min(total));
        }
        // Zero capacity fits nothing; the health says why.
        None if notes.health.is_none() => {
            let detail = notes.unavailable.iter().find(|n| n.starts_with("memory:")).cloned();
            notes.health = Some(GpuHealth::Unreadable { detail: detail.unwrap_or_default() });
        }
        None => {}
    }
    sample.health = notes.health.unwrap_or(GpuHealth::Healthy);
    sample.unavailable = notes.unavailable;
    // GPM, read later, replaces this when it measures SM activity. A GPU that is out of
    // service has no activity worth reporting.
    if sample.health.is_healthy() {
        (sample.sm_active, sample.sm_active_source) =
            crate::gpu::sample::coarse_sm_active(sample.util_gpu_mean, process_sm_sum);
    }
    sample
}

/// Memory only, for the supervisor's sampler ([`crate::exec::gpu_watch`]): the GPU's memory in
/// use (total − free, as the tick counts it) with its compute processes, then each MIG
/// instance's. A GPU whose memory cannot be read is left out (the sampler keeps no reading of
/// it); utilisation, power and GPM are not read at all.
pub(super) fn read_memory(nvml: &nvml_wrapper::Nvml, device: &Device<'_>, uuid: String) -> Vec<MemoryNow> {
    let mut notes = Notes::default();
    let mut gpus = Vec::new();
    if let Some(info) = notes.ok(device.memory_info(), "memory") {
        let total_mib = info.total / BYTES_PER_MIB;
        let used_mib = total_mib.saturating_sub((info.free / BYTES_PER_MIB).min(total_mib));
        let processes = pids_and_mib(&read_processes(nvml, device, &mut notes));
        gpus.push(MemoryNow { uuid, used_mib, total_mib, processes });
    }
    let instances = read_mig(nvml, device, &mut notes).instances;
    gpus.extend(instances.into_iter().map(|mig| MemoryNow {
        processes: pids_and_mib(&mig.processes),
        uuid: mig.uuid,
        used_mib: mig.memory_used_mib,
        total_mib: mig.memory_total_mib,
    }));
    gpus
}

/// (pid, MiB) of each process; one whose memory NVML does not give holds 0.
fn pids_and_mib(processes: &[GpuProcess]) -> Vec<(u32, u64)> {
    processes.iter().map(|p| (p.pid, p.used_mib.unwrap_or(0))).collect()
}

/// Mean GPU utilisation over the samples newer than `since_us`, and the newest timestamp to
/// use next time. With no new samples the mark is carried forward so the next tick does not
/// re-read old ones. When the driver keeps no samples (`nvmlDeviceGetSamples` unsupported,
/// as in NVIDIA's mock), the current utilisation rate stands in, and a note says so.
fn read_util(device: &Device<'_>, since_us: Option<u64>, notes: &mut Notes) -> (Option<f32>, Option<u64>) {
    match device.samples(Sampling::GpuUtilization, since_us) {
        Ok(samples) => {
            let points: Vec<(u64, f64)> =
                samples.iter().map(|sample| (sample.timestamp, sample_value(&sample.value))).collect();
            let (mean, last) = util_mean(&points, since_us);
            if mean.is_none() {
                notes.unavailable.push("util: no new samples since the last tick".to_owned());
            }
            (mean, last)
        }
        Err(NvmlError::NotFound) => {
            notes.unavailable.push("util: no new samples since the last tick".to_owned());
            (None, since_us)
        }
        Err(error) => {
            notes.failed("util samples", &error);
            let rate = notes.ok(device.utilization_rates(), "util rate");
            let mean = rate.and_then(|rate| fraction_from_percent(f64::from(rate.gpu)));
            if mean.is_some() {
                notes
                    .unavailable
                    .push("util: the current utilisation rate stands in for the samples".to_owned());
            }
            (mean, since_us)
        }
    }
}

/// A sample value as a float, whatever type the driver chose.
fn sample_value(value: &SampleValue) -> f64 {
    match *value {
        SampleValue::F64(value) => value,
        SampleValue::U32(value) => f64::from(value),
        // Utilisation percentages are tiny; precision loss is impossible here.
        SampleValue::U64(value) => value as f64,
        SampleValue::I64(value) => value as f64,
    }
}

/// Pure core of [`read_util`]: `(timestamp_us, percent)` points in, mean fraction and newest
/// timestamp out. Points at or before `since_us` and non-finite values are ignored.
pub(super) fn util_mean(points: &[(u64, f64)], since_us: Option<u64>) -> (Option<f32>, Option<u64>) {
    let fresh: Vec<&(u64, f64)> = points
        .iter()
        .filter(|(timestamp, value)| since_us.is_none_or(|since| *timestamp > since) && value.is_finite())
        .collect();
    let last = fresh.iter().map(|(timestamp, _)| *timestamp).max().or(since_us);
    if fresh.is_empty() {
        return (None, last);
    }
    let sum: f64 = fresh.iter().map(|(_, value)| *value).sum();
    let mean = fraction_from_percent(sum / fresh.len() as f64);
    (mean, last)
}

/// Running compute processes with their memory, capped at [`PROCESSES_PER_GPU_MAX`].
fn read_processes(nvml: &nvml_wrapper::Nvml, device: &Device<'_>, notes: &mut Notes) -> Vec<GpuProcess> {
    let infos = match raw::compute_processes(nvml, device) {
        Ok((infos, note)) => {
            notes.unavailable.extend(note);
            infos
        }
        Err(error) => {
            notes.failed("processes", &error);
            return Vec::new();
        }
    };
    to_processes(&infos, notes)
}

fn to_processes(infos: &[ProcessInfo], notes: &mut Notes) -> Vec<GpuProcess> {
    if infos.len() > PROCESSES_PER_GPU_MAX {
        notes
            .unavailable
            .push(format!("processes: {} listed, kept the first {PROCESSES_PER_GPU_MAX}", infos.len()));
    }
    infos
        .iter()
        .take(PROCESSES_PER_GPU_MAX)
        .map(|info| GpuProcess {
            pid: info.pid,
            used_mib: match info.used_gpu_memory {
                UsedGpuMemory::Used(bytes) => Some(bytes.div_ceil(BYTES_PER_MIB)),
                UsedGpuMemory::Unavailable => None,
            },
            sm_util: None,
        })
        .collect()
}

/// Fills each process's SM utilisation from `nvmlDeviceGetProcessUtilization` and returns
/// the sum over every process NVML sampled (`None` when the call failed). NVML lists only
/// processes that were busy in the period, so a listed compute process without a sample
/// was idle: 0.
fn read_process_util(
    device: &Device<'_>,
    since_us: Option<u64>,
    processes: &mut [GpuProcess],
    notes: &mut Notes,
) -> Option<f32> {
    let samples = match device.process_utilization_stats(since_us) {
        Ok(samples) => samples,
        Err(NvmlError::NotFound) => Vec::new(),
        Err(error) => {
            notes.failed("process util", &error);
            return None;
        }
    };
    let points: Vec<(u32, f64)> = samples.iter().map(|s| (s.pid, f64::from(s.sm_util))).collect();
    let by_pid = process_sm_means(&points);
    for process in processes.iter_mut() {
        process.sm_util = Some(by_pid.get(&process.pid).copied().unwrap_or(0.0));
    }
    // Not `sum()`: an empty float sum is -0.0.
    Some(by_pid.values().fold(0.0, |sum, value| sum + value))
}

/// Mean SM utilisation per pid, as fractions, from `(pid, percent)` samples (NVML may return
/// several samples of one process).
pub(super) fn process_sm_means(points: &[(u32, f64)]) -> BTreeMap<u32, f32> {
    let mut sums: BTreeMap<u32, (f64, u32)> = BTreeMap::new();
    for &(pid, percent) in points.iter().filter(|(_, percent)| percent.is_finite()) {
        let entry = sums.entry(pid).or_default();
        entry.0 += percent;
        entry.1 += 1;
    }
    sums.into_iter()
        .filter_map(|(pid, (sum, count))| Some((pid, fraction_from_percent(sum / f64::from(count))?)))
        .collect()
}

/// MIG mode and, when on, the MIG devices that exist.
fn read_mig(nvml: &nvml_wrapper::Nvml, device: &Device<'_>, notes: &mut Notes) -> MigInfo {
    match device.mig_mode() {
        Err(NvmlError::NotSupported) => MigInfo::not_supported(),
        Err(error) => {
            notes.failed("mig", &error);
            MigInfo { enabled: None, instances: Vec::new() }
        }
        Ok(mode) if mode.current != MIG_MODE_ENABLED => MigInfo::not_supported(),
        Ok(_) => MigInfo { enabled: Some(true), instances: read_mig_instances(nvml, device, notes) },
    }
}

/// Walks the MIG slots of a GPU in MIG mode; empty slots are skipped.
fn read_mig_instances(nvml: &nvml_wrapper::Nvml, device: &Device<'_>, notes: &mut Notes) -> Vec<MigInstance> {
    let slot_count = match device.mig_device_count() {
        Ok(count) => count.min(MIG_SLOTS_MAX),
        Err(error) => {
            notes.failed("mig instances", &error);
            return Vec::new();
        }
    };
    let mut instances = Vec::new();
    for slot in 0..slot_count {
        let read =
            device.mig_device_by_index(slot).and_then(|mig| Ok((mig.uuid()?, mig.memory_info()?, mig)));
        match read {
            Ok((uuid, memory, mig)) => {
                let total = memory.total / BYTES_PER_MIB;
                // The MIG device's name ends with its profile: "NVIDIA A100-SXM4-40GB MIG 1g.5gb".
                let profile = mig.name().ok().and_then(|name| mig_profile_of(&name));
                let metric = format!("mig instance {slot} processes");
                let processes = match raw::compute_processes(nvml, &mig) {
                    Ok((infos, note)) => {
                        notes.unavailable.extend(note);
                        to_processes(&infos, notes)
                    }
                    Err(error) => {
                        notes.failed(&metric, &error);
                        Vec::new()
                    }
                };
                instances.push(MigInstance {
                    uuid,
                    index: slot,
                    profile,
                    memory_total_mib: total,
                    memory_used_mib: (memory.used / BYTES_PER_MIB).min(total),
                    processes,
                });
            }
            // An empty slot: no MIG device was created there.
            Err(NvmlError::NotFound | NvmlError::InvalidArg) => {}
            Err(error) => notes.failed(&format!("mig instance {slot}"), &error),
        }
    }
    instances
}

/// The GPU instance profile at the end of a MIG device's name (`... MIG 1g.10gb`).
pub(super) fn mig_profile_of(name: &str) -> Option<String> {
    let (_, profile) = name.rsplit_once("MIG ")?;
    let profile = profile.trim();
    (!profile.is_empty() && !profile.contains(' ')).then(|| profile.to_owned())
}
