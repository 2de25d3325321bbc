//! GPU probing: the edge between carma and the GPUs it schedules on.
//!
//! This module owns the [`GpuProbe`] trait, the snapshot types the journal
//! stores ([`GpuSample`] and its parts), and the three probes a tick can use:
//! [`NvmlProbe`] (real hardware through nvml-wrapper), [`FakeProbe`] (a JSON
//! file that tests edit between ticks) and [`NoGpus`] (a machine without
//! GPUs). The simulator's `SimGpus` implements the same trait elsewhere.
//! Keeping every NVML call behind this trait is what lets `carma tick` and
//! `carma simulate` share one tick function, and lets the decision core stay
//! free of I/O: the tick samples *before* taking the journal lock, journals
//! the samples, and the core only ever sees journaled values.
//!
//! ## Decisions
//!
//! - **A coarse SM-activity fallback, labelled.** `sm_active` is SM activity
//!   proper when it was measured: by GPM on Hopper and newer, from the fake
//!   file, or by the simulator. Without GPM (an A100) the probe fills it from
//!   NVML's device utilisation, else from the sum of per-process SM
//!   utilisation, with [`SmSource::DeviceUtil`] / [`SmSource::ProcessUtil`]
//!   saying so ([`sample::coarse_sm_active`]). Both overstate SM activity, so
//!   the SM cap errs on the safe side, and reasons and reports can tell the
//!   sources apart.
//! - **Partial samples, not errors.** A metric that cannot be read is `None`
//!   plus a line in `GpuSample::unavailable` with NVML's error, never an empty
//!   value passed off as a reading. Only a missing driver or a failed
//!   enumeration fails the whole probe call.
//! - **Unhealthy GPUs are still sampled.** A GPU that NVML reports lost,
//!   that needs a reset, or whose memory cannot be read gets a sample with
//!   [`GpuHealth`] saying why, so the journal records it and the tick keeps
//!   work off it. One that cannot even be opened is reported under the UUID
//!   its index had at the previous tick ([`SinceMarks::known_uuid`]).
//! - **Memory used vs reserved.** `memory_used_mib` is what processes hold;
//!   the driver's reservation (NVML's v2 memory call) is kept apart in
//!   `memory_reserved_mib`, so a GPU with nothing running reads idle.
//! - **Utilisation since the last tick.** NVML keeps a ring buffer of
//!   utilisation samples; each tick reads those newer than the previous
//!   tick's last timestamp ([`SinceMarks`]) so the mean covers exactly the
//!   time between ticks, even though carma is a batch CLI with no daemon.

pub(crate) mod fake;
mod nvml;
pub(crate) mod sample;
mod watch;

use std::collections::BTreeMap;
use std::path::PathBuf;

pub use fake::{FAKE_FILE_BYTES_MAX, FakeProbe};
pub use nvml::{GPM_INTERVAL_DEFAULT, GPM_INTERVAL_MAX, NvmlProbe};
pub use sample::{
    BYTES_PER_MIB, GPUS_MAX, GpuHealth, GpuProcess, GpuSample, MigInfo, MigInstance, PROCESSES_PER_GPU_MAX,
    SmSource, coarse_sm_active,
};
pub use watch::{memory_of, open_memory_source};

/// A source of GPU snapshots. One call per tick; implementations may keep
/// handles open between calls but never cache readings across them.
pub trait GpuProbe {
    /// Samples every GPU once. `since` carries the previous tick's
    /// utilisation timestamps so that window-based metrics cover exactly the
    /// time since then. Per-metric failures land in `GpuSample::unavailable`.
    fn sample(&mut self, since: &SinceMarks) -> Result<Vec<GpuSample>, ProbeError>;

    /// A one-line description for logs and `carma status`, e.g.
    /// `nvml (driver 550.54.15)`.
    fn describe(&self) -> String;
}

/// What the previous tick knew that a probe call needs: per-GPU "since"
/// timestamps for windowed NVML queries, and the UUID each index had (to name
/// a GPU that NVML can no longer open, such as a lost one).
///
/// carma has no daemon, so the only memory between two ticks is on disk:
/// the tick rebuilds this from the inventory the previous tick wrote (or from
/// journaled samples, [`SinceMarks::from_samples`]) and passes it to the next
/// probe call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SinceMarks {
    util_last_timestamp_us_by_uuid: BTreeMap<String, u64>,
    uuid_by_index: BTreeMap<u32, String>,
}

/// Why a probe call produced no samples at all. Each message is one line
/// that names the failing object and says what to do next.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// `libnvidia-ml.so.1` could not be loaded or NVML refused to start.
    /// Expected on machines without GPUs: print once and go on without GPUs.
    #[error("no NVIDIA driver found ({detail}); carma keeps working on the spool without GPUs")]
    NoDriver {
        /// What NVML reported, in words.
        detail: String,
    },
    /// NVML started but could not count the GPUs, or found more than
    /// [`GPUS_MAX`].
    #[error("could not list GPUs through NVML ({detail}); check that `nvidia-smi` works")]
    Enumerate {
        /// What NVML reported, in words.
        detail: String,
    },
    /// The fake GPU file is missing, unreadable, not valid JSON, or breaks a
    /// rule of the format; `detail` names the GPU and the fix.
    #[error("fake GPU file {path}: {detail}")]
    FakeFile {
        /// The file as given in the probe spec.
        path: PathBuf,
        /// What is wrong and how to fix it.
        detail: String,
    },
    /// The probe spec string is none of the accepted forms.
    #[error("unknown GPU probe `{spec}`; use `nvml`, `none` or `fake:/path/to/gpus.json`")]
    UnknownSpec {
        /// The spec as given.
        spec: String,
    },
}

/// The probe for a machine without GPUs: every call returns no samples.
/// The tick then keeps ingesting the spool and reporting; nothing is placed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NoGpus;

/// Builds the probe named by a config or command-line spec: `nvml`,
/// `none`, or `fake:PATH` (PATH relative to the working directory).
///
/// Construction does the expensive and fallible part once, so a bad spec or
/// a missing driver is reported at startup: `nvml` initialises NVML (a
/// missing driver gives [`ProbeError::NoDriver`]) and `fake:` reads and
/// validates the file once.
pub fn probe_from_spec(spec: &str) -> Result<Box<dyn GpuProbe>, ProbeError> {
    match spec {
        "nvml" => Ok(Box::new(NvmlProbe::init()?)),
        "none" => Ok(Box::new(NoGpus)),
        _ => match spec.strip_prefix("fake:") {
            Some(path) if !path.is_empty() => Ok(Box::new(FakeProbe::open(path)?)),
            _ => Err(ProbeError::UnknownSpec { spec: spec.to_owned() }),
        },
    }
}

impl SinceMarks {
    /// No marks: the first probe call reads NVML's whole sample buffer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Marks taken from the previous tick's samples, one per GPU that had a
    /// utilisation timestamp. Later samples of the same uuid win, so passing
    /// a journal's samples oldest first gives the newest marks.
    pub fn from_samples<'a>(samples: impl IntoIterator<Item = &'a GpuSample>) -> Self {
        let mut marks = Self::new();
        for sample in samples {
            if let Some(timestamp_us) = sample.util_last_timestamp_us {
                marks.insert(&sample.uuid, timestamp_us);
            }
            marks.insert_known(sample.index, &sample.uuid);
        }
        marks
    }

    /// Records the newest utilisation timestamp seen for one GPU.
    pub fn insert(&mut self, uuid: &str, util_last_timestamp_us: u64) {
        self.util_last_timestamp_us_by_uuid.insert(uuid.to_owned(), util_last_timestamp_us);
    }

    /// The timestamp to pass as NVML's `last_seen_timestamp` for this GPU.
    pub fn util_last_timestamp_us(&self, uuid: &str) -> Option<u64> {
        self.util_last_timestamp_us_by_uuid.get(uuid).copied()
    }

    /// Records that GPU `index` had `uuid` at the previous tick.
    pub fn insert_known(&mut self, index: u32, uuid: &str) {
        self.uuid_by_index.insert(index, uuid.to_owned());
    }

    /// The UUID GPU `index` had at the previous tick, if known.
    pub fn known_uuid(&self, index: u32) -> Option<&str> {
        self.uuid_by_index.get(&index).map(String::as_str)
    }

    /// How many GPUs have a mark.
    pub fn len(&self) -> usize {
        self.util_last_timestamp_us_by_uuid.len()
    }

    /// True when no GPU has a mark (the first tick).
    pub fn is_empty(&self) -> bool {
        self.util_last_timestamp_us_by_uuid.is_empty()
    }
}

impl GpuProbe for NoGpus {
    fn sample(&mut self, _since: &SinceMarks) -> Result<Vec<GpuSample>, ProbeError> {
        Ok(Vec::new())
    }

    fn describe(&self) -> String {
        "none (no GPUs)".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error_of(spec: &str) -> ProbeError {
        match probe_from_spec(spec) {
            Ok(probe) => panic!("spec {spec:?} unexpectedly gave probe {}", probe.describe()),
            Err(error) => error,
        }
    }

    /// Goal: a typo in the spec is reported with the accepted forms.
    /// Method: several near-misses, each checked by exact message.
    #[test]
    fn probe_from_spec_rejects_unknown_forms() {
        for spec in ["", "NVML", "nvml ", "fake", "fake:", "file:/tmp/x.json", "none:"] {
            let error = error_of(spec);
            assert!(matches!(&error, ProbeError::UnknownSpec { spec: got } if got == spec), "{error:?}");
            assert_eq!(
                error.to_string(),
                format!("unknown GPU probe `{spec}`; use `nvml`, `none` or `fake:/path/to/gpus.json`")
            );
        }
    }

    /// Goal: `none` works everywhere and yields no GPUs.
    #[test]
    fn probe_from_spec_none_gives_no_gpus() {
        let mut probe = match probe_from_spec("none") {
            Ok(probe) => probe,
            Err(error) => panic!("{error}"),
        };
        assert_eq!(probe.sample(&SinceMarks::new()).ok(), Some(Vec::new()));
        assert_eq!(probe.describe(), "none (no GPUs)");
    }

    /// Goal: a missing fake file is a FakeFile error naming the file.
    #[test]
    fn probe_from_spec_fake_missing_file_names_it() {
        let error = error_of("fake:/nonexistent/carma-gpus.json");
        assert!(matches!(error, ProbeError::FakeFile { .. }), "{error:?}");
        assert_eq!(
            error.to_string(),
            "fake GPU file /nonexistent/carma-gpus.json: cannot read it (No such file or directory (os error 2)); create it or fix the path in the probe spec"
        );
    }

    /// Goal: this machine has no NVIDIA driver, and `nvml` must say so with
    /// the NoDriver variant (the caller matches on it), not some other error.
    /// A machine with a driver skips the assertion, since hardware tests sit
    /// behind a feature flag.
    #[test]
    fn probe_from_spec_nvml_without_driver_is_no_driver() {
        match probe_from_spec("nvml") {
            Err(ProbeError::NoDriver { detail }) => {
                let message = ProbeError::NoDriver { detail }.to_string();
                assert!(message.starts_with("no NVIDIA driver found ("), "{message}");
                assert!(message.ends_with("); carma keeps working on the spool without GPUs"), "{message}");
            }
            Err(other) => panic!("expected NoDriver, got {other:?}"),
            Ok(probe) => assert!(probe.describe().starts_with("nvml"), "{}", probe.describe()),
        }
    }

    /// Goal: marks rebuilt from journaled samples keep the newest timestamp
    /// per GPU and skip GPUs that never had one.
    #[test]
    fn since_marks_from_samples_keeps_latest() {
        let mut first = crate::gpu::fake::tests::sample_minimal("GPU-a");
        first.util_last_timestamp_us = Some(10);
        let mut second = first.clone();
        second.util_last_timestamp_us = Some(20);
        let without = crate::gpu::fake::tests::sample_minimal("GPU-b");
        let marks = SinceMarks::from_samples([&first, &second, &without]);
        assert_eq!(marks.util_last_timestamp_us("GPU-a"), Some(20));
        assert_eq!(marks.util_last_timestamp_us("GPU-b"), None);
        assert_eq!(marks.len(), 1);
    }
}
