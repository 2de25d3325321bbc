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

mod device;
mod raw;

use std::thread;
use std::time::{Duration, Instant};

use nvml_wrapper::Device;
use nvml_wrapper::GpmSample;
use nvml_wrapper::Nvml;
use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::gpm::gpm_metrics_get;

use super::sample::fraction_from_percent;
use super::{GPUS_MAX, GpuHealth, GpuProbe, GpuSample, MigInfo, ProbeError, SinceMarks, SmSource};

/// Default time between the two GPM samples. Long enough for stable
/// readings, short enough to keep a 5 s tick responsive.
pub const GPM_INTERVAL_DEFAULT: Duration = Duration::from_millis(200);

/// Longest accepted GPM interval: the probe runs inside every tick.
pub const GPM_INTERVAL_MAX: Duration = Duration::from_secs(2);

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

    /// Opens every GPU and reads its UUID. A GPU that cannot be opened or named (lost, or
    /// failing) is still reported, as an unhealthy sample under the UUID the previous tick
    /// saw at its index (`since`), or `unidentified-GPU<index>` on a first tick; only a
    /// failed count fails the whole call.
    fn devices(&self, since: &SinceMarks) -> Result<Vec<Opened<'_>>, ProbeError> {
        let count =
            self.nvml.device_count().map_err(|error| ProbeError::Enumerate { detail: error.to_string() })?;
        if count as usize > GPUS_MAX {
            return Err(ProbeError::Enumerate {
                detail: format!("{count} GPUs, more than the {GPUS_MAX} carma supports"),
            });
        }
        let mut devices = Vec::with_capacity(count as usize);
        for index in 0..count {
            let opened = self.nvml.device_by_index(index).and_then(|device| {
                let uuid = device.uuid()?;
                Ok((device, uuid))
            });
            devices.push(match opened {
                Ok((device, uuid)) => Opened::Device(device, uuid),
                Err(error) => Opened::Failed(Box::new(unopened_sample(index, since, &error))),
            });
        }
        Ok(devices)
    }
}

impl NvmlProbe {
    /// Every GPU's and MIG instance's memory in use and compute processes, for the
    /// supervisor's own readings ([`crate::exec::gpu_watch`]): no utilisation, power or GPM, and
    /// no sleep, so a reading costs a few NVML calls per GPU on the handle opened once.
    pub fn read_memory(&self) -> Result<Vec<crate::exec::MemoryNow>, ProbeError> {
        let devices = self.devices(&SinceMarks::new())?;
        Ok(devices
            .into_iter()
            .flat_map(|opened| match opened {
                Opened::Device(device, uuid) => device::read_memory(&self.nvml, &device, uuid),
                Opened::Failed(_) => Vec::new(),
            })
            .collect())
    }
}

/// One enumerated GPU: opened, or a sample saying why not.
enum Opened<'nvml> {
    Device(Device<'nvml>, String),
    Failed(Box<GpuSample>),
}

/// The sample of a GPU that NVML could not open or name.
fn unopened_sample(index: u32, since: &SinceMarks, error: &NvmlError) -> GpuSample {
    let uuid = since.known_uuid(index).map_or_else(|| format!("unidentified-GPU{index}"), str::to_owned);
    let health = device::health_of("its handle", error)
        .unwrap_or_else(|| GpuHealth::Unreadable { detail: format!("opening it: {}", reason(error)) });
    GpuSample {
        uuid,
        index,
        name: String::new(),
        memory_total_mib: 0,
        memory_used_mib: 0,
        memory_free_mib: 0,
        memory_reserved_mib: None,
        health,
        util_gpu_mean: None,
        util_last_timestamp_us: None,
        sm_active: None,
        sm_active_source: SmSource::Unavailable,
        sm_occupancy: None,
        dram_active: None,
        power_mw: None,
        energy_mj: None,
        processes: Vec::new(),
        mig: MigInfo { enabled: None, instances: Vec::new() },
        unavailable: vec![format!("device: {}", reason(error))],
    }
}

impl GpuProbe for NvmlProbe {
    fn sample(&mut self, since: &SinceMarks) -> Result<Vec<GpuSample>, ProbeError> {
        let devices = self.devices(since)?;
        let gpm_started = Instant::now();
        let gpm_firsts: Vec<Option<Result<GpmSample<'_>, String>>> = devices
            .iter()
            .map(|opened| match opened {
                Opened::Device(device, _) => Some(gpm_first_sample(device)),
                Opened::Failed(_) => None,
            })
            .collect();
        let mut samples: Vec<GpuSample> = devices
            .iter()
            .zip(0u32..)
            .map(|(opened, index)| match opened {
                Opened::Device(device, uuid) => device::read_device(&self.nvml, device, index, uuid, since),
                Opened::Failed(sample) => (**sample).clone(),
            })
            .collect();
        if gpm_firsts.iter().flatten().any(Result::is_ok) {
            thread::sleep(self.gpm_interval.saturating_sub(gpm_started.elapsed()));
        }
        for ((opened, first), sample) in devices.iter().zip(gpm_firsts).zip(&mut samples) {
            if let (Opened::Device(device, _), Some(first)) = (opened, first) {
                let readings = first.and_then(|first| read_gpm(&self.nvml, device, &first));
                apply_gpm(sample, readings);
            }
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

/// Stores GPM readings (or the reason they are missing) in a sample. Without a GPM SM
/// reading the coarse stand-in that `read_device` put there stays.
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
            if let Some(sm_active) = readings.sm_active {
                sample.sm_active = Some(sm_active);
                sample.sm_active_source = SmSource::Gpm;
            }
            sample.sm_occupancy = readings.sm_occupancy;
            sample.dram_active = readings.dram_active;
        }
        Err(note) => sample.unavailable.push(note),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: the mean covers only samples after the mark, as a fraction.
    #[test]
    fn util_mean_skips_old_samples_and_scales() {
        let points = [(100, 90.0), (200, 50.0), (300, 100.0)];
        assert_eq!(device::util_mean(&points, Some(100)), (Some(0.75), Some(300)));
        assert_eq!(device::util_mean(&points, None), (Some(0.8), Some(300)));
    }

    /// Goal: with no new samples the mark is carried forward, not lost.
    #[test]
    fn util_mean_without_new_samples_keeps_mark() {
        assert_eq!(device::util_mean(&[(100, 90.0)], Some(100)), (None, Some(100)));
        assert_eq!(device::util_mean(&[], None), (None, None));
        assert_eq!(device::util_mean(&[(200, f64::NAN)], Some(100)), (None, Some(100)));
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

    /// Goal: the profile is read off a MIG device's name, and other names give none.
    #[test]
    fn mig_profile_comes_from_the_device_name() {
        assert_eq!(device::mig_profile_of("NVIDIA A100-SXM4-40GB MIG 1g.5gb").as_deref(), Some("1g.5gb"));
        assert_eq!(
            device::mig_profile_of("NVIDIA H100 80GB HBM3 MIG 1c.3g.40gb ").as_deref(),
            Some("1c.3g.40gb")
        );
        assert_eq!(device::mig_profile_of("NVIDIA H100 80GB HBM3"), None);
    }

    /// Goal: several samples of one process are averaged, and percentages become fractions.
    #[test]
    fn process_sm_means_average_per_pid() {
        let means = device::process_sm_means(&[(7, 40.0), (7, 60.0), (8, 10.0), (9, f64::NAN)]);
        assert_eq!(means.into_iter().collect::<Vec<_>>(), [(7, 0.5), (8, 0.1)]);
    }

    /// Goal: lost and reset-required errors make a GPU unhealthy; others are only notes.
    #[test]
    fn lost_and_reset_errors_set_the_health() {
        let mut notes = device::Notes::default();
        notes.failed("power", &NvmlError::NotSupported);
        assert_eq!(notes.health, None);
        notes.failed("memory", &NvmlError::GpuLost);
        notes.failed("name", &NvmlError::ResetRequired);
        assert_eq!(
            notes.health,
            Some(GpuHealth::Lost { detail: "NVML_ERROR_GPU_IS_LOST reading memory".into() }),
            "the first failure that takes the GPU out wins"
        );
        assert_eq!(
            notes.unavailable,
            [
                "power: not supported",
                "memory: GPU lost (fell off the bus)",
                "name: device requires a reset before it can be used again"
            ]
        );
        let unopened = unopened_sample(3, &SinceMarks::new(), &NvmlError::GpuLost);
        assert_eq!(unopened.uuid, "unidentified-GPU3");
        let mut marks = SinceMarks::new();
        marks.insert_known(3, "GPU-known");
        let unopened = unopened_sample(3, &marks, &NvmlError::GpuLost);
        assert_eq!((unopened.uuid.as_str(), unopened.check()), ("GPU-known", Ok(())));
        assert_eq!(
            unopened.health.reason().as_deref(),
            Some("lost (NVML_ERROR_GPU_IS_LOST reading its handle)")
        );
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
