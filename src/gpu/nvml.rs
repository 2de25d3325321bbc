//! [`NvmlProbe`]: real GPUs through nvml-wrapper 0.13.
//!
//! nvml-wrapper loads `libnvidia-ml.so.1` at run time, so carma builds and
//! runs on machines without GPUs; there `Nvml::init()` fails and the probe
//! reports [`ProbeError::NoDriver`]. Everything NVML returns is treated as
//! external data: no `unwrap`, and every per-metric failure becomes a line in
//! `GpuSample::unavailable` instead of failing the tick.
//!
//! GPM (SM activity, SM occupancy, DRAM bandwidth) needs two samples taken a
//! short interval apart within this process. One probe call takes the first
//! GPM sample of every GPU, reads all other metrics meanwhile, sleeps only
//! what is left of one shared interval, then takes the second samples. A tick
//! with N Hopper GPUs therefore waits one interval, not N.

use std::thread;
use std::time::{Duration, Instant};

use nvml_wrapper::Device;
use nvml_wrapper::GpmSample;
use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::Sampling;
use nvml_wrapper::enums::device::{SampleValue, UsedGpuMemory};
use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::gpm::gpm_metrics_get;

use super::sample::fraction_from_percent;
use super::{
    BYTES_PER_MIB, GPUS_MAX, GpuProbe, GpuProcess, GpuSample, MigInfo, MigInstance, PROCESSES_PER_GPU_MAX,
    ProbeError, SinceMarks, SmSource,
};

/// Default time between the two GPM samples. Long enough for stable
/// readings, short enough to keep a 5 s tick responsive.
pub const GPM_INTERVAL_DEFAULT: Duration = Duration::from_millis(200);

/// Longest accepted GPM interval: the probe runs inside every tick.
pub const GPM_INTERVAL_MAX: Duration = Duration::from_secs(2);

/// `NVML_DEVICE_MIG_ENABLE` from nvml.h; nvml-wrapper does not re-export it.
const MIG_MODE_ENABLED: u32 = 1;

/// Most MIG slots examined per GPU (NVML reports at most 7 today).
const MIG_SLOTS_MAX: u32 = 16;

/// The GPM metrics read, in the order their results come back.
const GPM_METRICS: [GpmMetricId; 3] =
    [GpmMetricId::SmUtil, GpmMetricId::SmOccupancy, GpmMetricId::DramBwUtil];

/// Samples real GPUs. Holds the NVML handle so a long-lived caller (the
/// simulator's hardware mode, a future daemon) initialises the library once.
pub struct NvmlProbe {
    nvml: Nvml,
    gpm_interval: Duration,
    driver_version: Option<String>,
}

/// GPM readings of one GPU, each a fraction or `None`.
#[derive(Debug, Default)]
struct GpmReadings {
    sm_active: Option<f32>,
    sm_occupancy: Option<f32>,
    dram_active: Option<f32>,
}

impl NvmlProbe {
    /// Loads NVML. Fails with [`ProbeError::NoDriver`] when the library or
    /// the kernel driver is missing, which callers treat as "no GPUs here".
    pub fn init() -> Result<Self, ProbeError> {
        let nvml = Nvml::init().map_err(no_driver_error)?;
        let driver_version = nvml.sys_driver_version().ok();
        Ok(Self { nvml, gpm_interval: GPM_INTERVAL_DEFAULT, driver_version })
    }

    /// Changes the time between the two GPM samples (tests of the tick's
    /// latency, or a site that wants smoother readings).
    ///
    /// # Panics
    /// If `gpm_interval` exceeds [`GPM_INTERVAL_MAX`]: a config error that
    /// validation should have caught.
    pub fn with_gpm_interval(mut self, gpm_interval: Duration) -> Self {
        assert!(gpm_interval <= GPM_INTERVAL_MAX, "{gpm_interval:?}");
        self.gpm_interval = gpm_interval;
        self
    }

    /// Opens every GPU and reads its UUID; a GPU without one cannot be
    /// scheduled on, so that is the one per-device failure that is fatal.
    fn devices(&self) -> Result<Vec<(Device<'_>, String)>, ProbeError> {
        let count =
            self.nvml.device_count().map_err(|error| ProbeError::Enumerate { detail: error.to_string() })?;
        if count as usize > GPUS_MAX {
            return Err(ProbeError::Enumerate {
                detail: format!("{count} GPUs, more than the {GPUS_MAX} carma supports"),
            });
        }
        let mut devices = Vec::with_capacity(count as usize);
        for index in 0..count {
            let device_error = |error: NvmlError| ProbeError::Device { index, detail: error.to_string() };
            let device = self.nvml.device_by_index(index).map_err(device_error)?;
            let uuid = device.uuid().map_err(device_error)?;
            devices.push((device, uuid));
        }
        Ok(devices)
    }
}

impl GpuProbe for NvmlProbe {
    fn sample(&mut self, since: &SinceMarks) -> Result<Vec<GpuSample>, ProbeError> {
        let devices = self.devices()?;
        let gpm_started = Instant::now();
        let gpm_firsts: Vec<Result<GpmSample<'_>, String>> =
            devices.iter().map(|(device, _)| gpm_first_sample(device)).collect();
        let mut samples: Vec<GpuSample> = devices
            .iter()
            .zip(0u32..)
            .map(|((device, uuid), index)| read_device(device, index, uuid, since))
            .collect();
        if gpm_firsts.iter().any(Result::is_ok) {
            thread::sleep(self.gpm_interval.saturating_sub(gpm_started.elapsed()));
        }
        for (((device, _), first), sample) in devices.iter().zip(gpm_firsts).zip(&mut samples) {
            let readings = first.and_then(|first| read_gpm(&self.nvml, device, &first));
            apply_gpm(sample, readings);
        }
        debug_assert!(samples.iter().all(|sample| sample.check().is_ok()));
        Ok(samples)
    }

    fn describe(&self) -> String {
        match &self.driver_version {
            Some(version) => format!("nvml (driver {version})"),
            None => "nvml (driver version unknown)".to_owned(),
        }
    }
}

/// Maps an `Nvml::init` failure to the no-driver error with a short cause.
fn no_driver_error(error: NvmlError) -> ProbeError {
    let detail = match error {
        NvmlError::LibloadingError(_) | NvmlError::LibraryNotFound => {
            "libnvidia-ml.so.1 could not be loaded".to_owned()
        }
        NvmlError::DriverNotLoaded => "the NVIDIA kernel driver is not loaded".to_owned(),
        NvmlError::NoPermission => "no permission to open the NVIDIA devices".to_owned(),
        other => format!("NVML did not start: {other}"),
    };
    ProbeError::NoDriver { detail }
}

/// A short reason for an `unavailable` line.
fn reason(error: &NvmlError) -> String {
    match error {
        NvmlError::NotSupported => "not supported".to_owned(),
        NvmlError::NoPermission => "no permission".to_owned(),
        NvmlError::GpuLost => "GPU lost (fell off the bus)".to_owned(),
        NvmlError::FailedToLoadSymbol(_) => "driver too old for this query".to_owned(),
        other => other.to_string(),
    }
}

/// Reads everything except GPM for one GPU.
fn read_device(device: &Device<'_>, index: u32, uuid: &str, since: &SinceMarks) -> GpuSample {
    let mut unavailable = Vec::new();
    let name = device.name().unwrap_or_else(|error| {
        unavailable.push(format!("name: {}", reason(&error)));
        String::new()
    });
    let (memory_total_mib, memory_used_mib, memory_free_mib) = match device.memory_info() {
        Ok(info) => (info.total / BYTES_PER_MIB, info.used / BYTES_PER_MIB, info.free / BYTES_PER_MIB),
        Err(error) => {
            // Zero capacity means nothing fits, the safe reading when unknown.
            unavailable.push(format!("memory: {}", reason(&error)));
            (0, 0, 0)
        }
    };
    let (util_gpu_mean, util_last_timestamp_us) =
        read_util(device, since.util_last_timestamp_us(uuid), &mut unavailable);
    let power_mw = ok_or_note(device.power_usage(), "power", &mut unavailable);
    let energy_mj = ok_or_note(device.total_energy_consumption(), "energy", &mut unavailable);
    let processes = read_processes(device, &mut unavailable);
    let mig = read_mig(device, &mut unavailable);
    GpuSample {
        uuid: uuid.to_owned(),
        index,
        name,
        memory_total_mib,
        memory_used_mib: memory_used_mib.min(memory_total_mib),
        memory_free_mib: memory_free_mib.min(memory_total_mib),
        util_gpu_mean,
        util_last_timestamp_us,
        sm_active: None,
        sm_active_source: SmSource::Unavailable,
        sm_occupancy: None,
        dram_active: None,
        power_mw,
        energy_mj,
        processes,
        mig,
        unavailable,
    }
}

/// `Some(value)`, or `None` plus an `unavailable` line naming `metric`.
fn ok_or_note<T>(result: Result<T, NvmlError>, metric: &str, unavailable: &mut Vec<String>) -> Option<T> {
    result.map_err(|error| unavailable.push(format!("{metric}: {}", reason(&error)))).ok()
}

/// Mean GPU utilisation over the samples newer than `since_us`, and the
/// newest timestamp to use next time. With no new samples the mark is
/// carried forward so the next tick does not re-read old ones.
fn read_util(
    device: &Device<'_>,
    since_us: Option<u64>,
    unavailable: &mut Vec<String>,
) -> (Option<f32>, Option<u64>) {
    match device.samples(Sampling::GpuUtilization, since_us) {
        Ok(samples) => {
            let points: Vec<(u64, f64)> =
                samples.iter().map(|sample| (sample.timestamp, sample_value(&sample.value))).collect();
            let (mean, last) = util_mean(&points, since_us);
            if mean.is_none() {
                unavailable.push("util: no new samples since the last tick".to_owned());
            }
            (mean, last)
        }
        Err(NvmlError::NotFound) => {
            unavailable.push("util: no new samples since the last tick".to_owned());
            (None, since_us)
        }
        Err(error) => {
            unavailable.push(format!("util: {}", reason(&error)));
            (None, since_us)
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

/// Pure core of [`read_util`]: `(timestamp_us, percent)` points in, mean
/// fraction and newest timestamp out. Points at or before `since_us` and
/// non-finite values are ignored.
fn util_mean(points: &[(u64, f64)], since_us: Option<u64>) -> (Option<f32>, Option<u64>) {
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

/// Running compute processes with their memory, capped at
/// [`PROCESSES_PER_GPU_MAX`].
fn read_processes(device: &Device<'_>, unavailable: &mut Vec<String>) -> Vec<GpuProcess> {
    let infos = match device.running_compute_processes() {
        Ok(infos) => infos,
        Err(error) => {
            unavailable.push(format!("processes: {}", reason(&error)));
            return Vec::new();
        }
    };
    if infos.len() > PROCESSES_PER_GPU_MAX {
        unavailable
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
        })
        .collect()
}

/// MIG mode and, when on, the MIG devices that exist.
fn read_mig(device: &Device<'_>, unavailable: &mut Vec<String>) -> MigInfo {
    match device.mig_mode() {
        Err(NvmlError::NotSupported) => MigInfo::not_supported(),
        Err(error) => {
            unavailable.push(format!("mig: {}", reason(&error)));
            MigInfo { enabled: None, instances: Vec::new() }
        }
        Ok(mode) if mode.current != MIG_MODE_ENABLED => MigInfo::not_supported(),
        Ok(_) => MigInfo { enabled: Some(true), instances: read_mig_instances(device, unavailable) },
    }
}

/// Walks the MIG slots of a GPU in MIG mode; empty slots are skipped.
fn read_mig_instances(device: &Device<'_>, unavailable: &mut Vec<String>) -> Vec<MigInstance> {
    let slot_count = match device.mig_device_count() {
        Ok(count) => count.min(MIG_SLOTS_MAX),
        Err(error) => {
            unavailable.push(format!("mig instances: {}", reason(&error)));
            return Vec::new();
        }
    };
    let mut instances = Vec::new();
    for slot in 0..slot_count {
        let read = device.mig_device_by_index(slot).and_then(|mig| Ok((mig.uuid()?, mig.memory_info()?)));
        match read {
            Ok((uuid, memory)) => instances.push(MigInstance {
                uuid,
                index: slot,
                memory_total_mib: memory.total / BYTES_PER_MIB,
                memory_used_mib: (memory.used / BYTES_PER_MIB).min(memory.total / BYTES_PER_MIB),
            }),
            // An empty slot: no MIG device was created there.
            Err(NvmlError::NotFound | NvmlError::InvalidArg) => {}
            Err(error) => unavailable.push(format!("mig instance {slot}: {}", reason(&error))),
        }
    }
    instances
}

/// Takes the first GPM sample, or says why GPM cannot be used on this GPU.
fn gpm_first_sample<'nvml>(device: &Device<'nvml>) -> Result<GpmSample<'nvml>, String> {
    match device.gpm_support() {
        Ok(true) => device.gpm_sample().map_err(|error| format!("gpm: {}", reason(&error))),
        Ok(false) | Err(NvmlError::NotSupported) => Err("gpm: not supported (pre-Hopper)".to_owned()),
        Err(error) => Err(format!("gpm: {}", reason(&error))),
    }
}

/// Takes the second GPM sample and computes the metrics between the two.
fn read_gpm<'nvml>(
    nvml: &'nvml Nvml,
    device: &Device<'nvml>,
    first: &GpmSample<'nvml>,
) -> Result<GpmReadings, String> {
    let second = device.gpm_sample().map_err(|error| format!("gpm: {}", reason(&error)))?;
    let results = gpm_metrics_get(nvml, first, &second, &GPM_METRICS)
        .map_err(|error| format!("gpm: {}", reason(&error)))?;
    let mut readings = GpmReadings::default();
    for (metric, result) in GPM_METRICS.iter().zip(results) {
        let value = result.ok().and_then(|result| fraction_from_percent(result.value));
        match metric {
            GpmMetricId::SmUtil => readings.sm_active = value,
            GpmMetricId::SmOccupancy => readings.sm_occupancy = value,
            GpmMetricId::DramBwUtil => readings.dram_active = value,
            // GPM_METRICS lists exactly the three metrics matched above.
            _ => unreachable!("unrequested GPM metric {metric:?}"),
        }
    }
    Ok(readings)
}

/// Stores GPM readings (or the reason they are missing) in a sample.
fn apply_gpm(sample: &mut GpuSample, readings: Result<GpmReadings, String>) {
    match readings {
        Ok(readings) => {
            let missing = [
                ("gpm sm_active", readings.sm_active.is_none()),
                ("gpm sm_occupancy", readings.sm_occupancy.is_none()),
                ("gpm dram_active", readings.dram_active.is_none()),
            ];
            for (metric, is_missing) in missing {
                if is_missing {
                    sample.unavailable.push(format!("{metric}: metric not returned"));
                }
            }
            sample.sm_active = readings.sm_active;
            sample.sm_occupancy = readings.sm_occupancy;
            sample.dram_active = readings.dram_active;
        }
        Err(note) => sample.unavailable.push(note),
    }
    sample.sm_active_source = match sample.sm_active {
        Some(_) => SmSource::Gpm,
        None => SmSource::Unavailable,
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: the mean covers only samples after the mark, as a fraction.
    #[test]
    fn util_mean_skips_old_samples_and_scales() {
        let points = [(100, 90.0), (200, 50.0), (300, 100.0)];
        assert_eq!(util_mean(&points, Some(100)), (Some(0.75), Some(300)));
        assert_eq!(util_mean(&points, None), (Some(0.8), Some(300)));
    }

    /// Goal: with no new samples the mark is carried forward, not lost.
    #[test]
    fn util_mean_without_new_samples_keeps_mark() {
        assert_eq!(util_mean(&[(100, 90.0)], Some(100)), (None, Some(100)));
        assert_eq!(util_mean(&[], None), (None, None));
        assert_eq!(util_mean(&[(200, f64::NAN)], Some(100)), (None, Some(100)));
    }

    /// Goal: GPM readings set the source, and missing ones are explained.
    #[test]
    fn apply_gpm_sets_source_and_notes() {
        let mut sample = crate::gpu::fake::tests::sample_minimal("GPU-a");
        let readings = GpmReadings { sm_active: Some(0.5), sm_occupancy: None, dram_active: Some(0.25) };
        apply_gpm(&mut sample, Ok(readings));
        assert_eq!(sample.sm_active_source, SmSource::Gpm);
        assert_eq!(sample.unavailable, ["gpm sm_occupancy: metric not returned"]);

        let mut sample = crate::gpu::fake::tests::sample_minimal("GPU-b");
        apply_gpm(&mut sample, Err("gpm: not supported (pre-Hopper)".to_owned()));
        assert_eq!(sample.sm_active, None);
        assert_eq!(sample.sm_active_source, SmSource::Unavailable);
        assert_eq!(sample.unavailable, ["gpm: not supported (pre-Hopper)"]);
    }

    /// Goal: a failed library load reads as the documented one-liner.
    #[test]
    fn no_driver_message_for_missing_library() {
        let error = no_driver_error(NvmlError::LibraryNotFound);
        assert!(matches!(error, ProbeError::NoDriver { .. }));
        assert_eq!(
            error.to_string(),
            "no NVIDIA driver found (libnvidia-ml.so.1 could not be loaded); carma keeps working on the spool without GPUs"
        );
    }

    /// Goal: on this driverless machine `NvmlProbe::init` is NoDriver, and
    /// the detail names the library that failed to load.
    #[test]
    fn init_without_driver_is_no_driver() {
        match NvmlProbe::init() {
            Err(ProbeError::NoDriver { detail }) => {
                assert_eq!(detail, "libnvidia-ml.so.1 could not be loaded");
            }
            Err(other) => panic!("expected NoDriver, got {other:?}"),
            Ok(probe) => assert!(probe.describe().starts_with("nvml (driver")),
        }
    }
}
