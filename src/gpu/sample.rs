//! The per-GPU snapshot that one tick records: [`GpuSample`] and its parts.
//!
//! These are domain types: the journal writes them through the frozen wire
//! types of `journal::wire` (`SampleV1` for carma 0.1, `SampleV2` since), so a
//! field may be added here freely as long as `journal::wire` learns it. They
//! still derive serde because `carma events --json` shows them and the State
//! snapshot (a versioned cache) stores them. A missing metric is an `Option`
//! and never a NaN.
//!
//! Every fraction lies in `0.0..=1.0` and is finite; [`GpuSample::check`]
//! states this and the other invariants so the journal can check a record
//! before `append` and again after decoding it.

use serde::{Deserialize, Serialize};

/// One GPU as seen by one probe call.
///
/// The scheduler keys everything on `uuid`, never on `index`: NVML and CUDA
/// may number the same GPU differently.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuSample {
    /// Stable GPU identity, e.g. `GPU-5f1c…`; what `CUDA_VISIBLE_DEVICES` gets.
    pub uuid: String,
    /// NVML enumeration index (or position in the fake file); for display only.
    pub index: u32,
    /// Product name, e.g. `NVIDIA A100-SXM4-40GB`.
    pub name: String,
    /// Installed framebuffer memory, MiB (2^20 bytes, rounded down).
    pub memory_total_mib: u64,
    /// Framebuffer memory held by processes, MiB (rounded down): NVML's v2
    /// `used`, which leaves the driver's reservation out.
    pub memory_used_mib: u64,
    /// Unallocated framebuffer memory, MiB (rounded down). The driver's
    /// reservation is neither used nor free, so `used + free` may be below
    /// `total` by `memory_reserved_mib`.
    pub memory_free_mib: u64,
    /// Memory the driver reserves for itself (NVML's v2 memory call), MiB;
    /// counted in `total − free` but used by no process. `None` when unknown
    /// (the v1 call, or a journal written by carma 0.1).
    pub memory_reserved_mib: Option<u64>,
    /// Whether the GPU answered normally; a lost or failing GPU still gets a
    /// sample so that the journal says what happened to it.
    pub health: GpuHealth,
    /// Mean NVML GPU utilisation over the samples taken since the previous
    /// tick, as a fraction in `0..=1`; `None` when no new sample exists.
    /// This is "a kernel was running", not how many SMs were busy.
    pub util_gpu_mean: Option<f32>,
    /// CPU timestamp in µs of the newest utilisation sample seen, to pass as
    /// "since" on the next tick (see [`crate::gpu::SinceMarks`]). Carried
    /// forward unchanged when no new sample arrived.
    pub util_last_timestamp_us: Option<u64>,
    /// Fraction of SMs busy (`0..=1`): measured over the GPM interval of this
    /// probe call, or, on a GPU without GPM, a coarser stand-in named by
    /// `sm_active_source` (device or per-process utilisation, see
    /// [`coarse_sm_active`]); `None` when neither exists.
    pub sm_active: Option<f32>,
    /// Where `sm_active` came from; `Unavailable` exactly when it is `None`.
    pub sm_active_source: SmSource,
    /// Achieved SM occupancy (resident warps / max warps), `0..=1`, from GPM
    /// or the fake file; `None` when unavailable.
    pub sm_occupancy: Option<f32>,
    /// DRAM bandwidth utilisation, `0..=1`, from GPM; `None` when unavailable.
    pub dram_active: Option<f32>,
    /// Board power draw at sampling time, milliwatts.
    pub power_mw: Option<u32>,
    /// Cumulative energy counter since the driver was loaded, millijoules.
    /// Only deltas between two samples of the same GPU are meaningful; the
    /// counter restarts when the driver reloads.
    pub energy_mj: Option<u64>,
    /// Compute processes holding a context on this GPU, at most
    /// [`PROCESSES_PER_GPU_MAX`], in the order NVML lists them.
    pub processes: Vec<GpuProcess>,
    /// MIG mode and the MIG instances that exist on this GPU.
    pub mig: MigInfo,
    /// Metrics that could not be read, as `"metric: reason"`, e.g.
    /// `"gpm: not supported (pre-Hopper)"`. Empty when everything was read.
    pub unavailable: Vec<String>,
}

/// The origin of [`GpuSample::sm_active`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SmSource {
    /// Measured by NVML GPU Performance Monitoring (Hopper and newer).
    Gpm,
    /// Read from a fake GPU file (tests and demonstrations).
    File,
    /// Produced by the simulator's interference model.
    Simulated,
    /// Not measured; `sm_active` is `None`.
    Unavailable,
    /// NVML's device utilisation ("a kernel was running"), a coarser stand-in
    /// for SM activity on GPUs without GPM.
    DeviceUtil,
    /// The sum of NVML's per-process SM utilisation, a coarser stand-in for SM
    /// activity on GPUs without GPM.
    ProcessUtil,
}

/// Whether a GPU can take work, as the probe saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum GpuHealth {
    /// Readable and reporting no error.
    Healthy,
    /// NVML reports the GPU lost (fallen off the bus).
    Lost {
        /// The NVML error and the reading it came from.
        detail: String,
    },
    /// The driver reported an XID error that needs a reset.
    XidError {
        /// The XID number the driver reported.
        xid: u64,
        /// What was reported with it.
        detail: String,
    },
    /// Basic readings (memory) failed.
    Unreadable {
        /// Which reading failed and why (NVML's error, or that a reset is needed).
        detail: String,
    },
}

impl GpuHealth {
    /// True when the GPU may be given work.
    pub fn is_healthy(&self) -> bool {
        matches!(self, GpuHealth::Healthy)
    }

    /// The state in a word or two, as `carma gpus` shows it: `ok`, `lost`,
    /// `xid 79`, `unreadable`.
    pub fn label(&self) -> String {
        match self {
            GpuHealth::Healthy => "ok".to_owned(),
            GpuHealth::Lost { .. } => "lost".to_owned(),
            GpuHealth::XidError { xid, .. } => format!("xid {xid}"),
            GpuHealth::Unreadable { .. } => "unreadable".to_owned(),
        }
    }

    /// Why the GPU takes no work, for pending reasons and journal lines:
    /// `lost (NVML_ERROR_GPU_IS_LOST reading memory)`; `None` when healthy.
    pub fn reason(&self) -> Option<String> {
        let with_detail = |what: String, detail: &str| {
            if detail.is_empty() { what } else { format!("{what} ({detail})") }
        };
        match self {
            GpuHealth::Healthy => None,
            GpuHealth::Lost { detail } => Some(with_detail("lost".to_owned(), detail)),
            GpuHealth::XidError { xid, detail } => Some(with_detail(format!("XID {xid} error"), detail)),
            GpuHealth::Unreadable { detail } => Some(with_detail("unreadable".to_owned(), detail)),
        }
    }
}

/// One compute process on a GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuProcess {
    /// Operating-system process id (in the host pid namespace).
    pub pid: u32,
    /// GPU memory the process holds, MiB (rounded up, so a small context
    /// never reads as 0); `None` when NVML hides it (e.g. under WDDM or
    /// in a container without permission).
    pub used_mib: Option<u64>,
    /// The process's SM utilisation since the previous sample, `0..=1`
    /// (`nvmlDeviceGetProcessUtilization`); `None` when not measured.
    pub sm_util: Option<f32>,
}

/// MIG state of a physical GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MigInfo {
    /// Whether MIG mode is currently on; `Some(false)` for GPUs without MIG
    /// support, `None` when the mode could not be read.
    pub enabled: Option<bool>,
    /// The MIG devices that exist now, empty when MIG is off. Each is placed
    /// on as a small, exclusive GPU.
    pub instances: Vec<MigInstance>,
}

/// One MIG device (a GPU instance with its compute instance).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MigInstance {
    /// MIG device UUID, e.g. `MIG-…`; usable in `CUDA_VISIBLE_DEVICES`.
    pub uuid: String,
    /// Slot index on the parent GPU (`nvmlDeviceGetMigDeviceHandleByIndex`).
    pub index: u32,
    /// The GPU instance profile, e.g. `1g.10gb`; `None` when unknown.
    pub profile: Option<String>,
    /// Memory of this MIG device, MiB (rounded down).
    pub memory_total_mib: u64,
    /// Allocated memory of this MIG device, MiB (rounded down).
    pub memory_used_mib: u64,
    /// Compute processes on this MIG device, at most
    /// [`PROCESSES_PER_GPU_MAX`]; what attributes its memory to tasks.
    pub processes: Vec<GpuProcess>,
}

/// Most processes recorded per GPU; keeps a journal record bounded even if
/// something spawns contexts in a loop. The rest are dropped and noted in
/// [`GpuSample::unavailable`].
pub const PROCESSES_PER_GPU_MAX: usize = 256;

/// Most GPUs one probe call may report; a bigger count is a probe error.
pub const GPUS_MAX: usize = 64;

/// Bytes per MiB, the unit of every memory field.
pub const BYTES_PER_MIB: u64 = 1024 * 1024;

impl MigInfo {
    /// The state of a GPU that has no MIG support at all.
    pub fn not_supported() -> Self {
        Self { enabled: Some(false), instances: Vec::new() }
    }

    /// True when MIG mode is on: the GPU is then never placed on whole, only
    /// its instances are.
    pub fn is_on(&self) -> bool {
        self.enabled == Some(true)
    }
}

/// The stand-in for SM activity on a GPU without a direct measurement (no
/// GPM): NVML's device utilisation when there is one, else the sum of the
/// per-process SM utilisation (`process_sm_util`, `None` when that could not
/// be read), clamped to 1. Both overstate SM activity (a single small kernel
/// counts as busy), so an SM cap applied to them errs on the safe side.
pub fn coarse_sm_active(util_gpu_mean: Option<f32>, process_sm_util: Option<f32>) -> (Option<f32>, SmSource) {
    match (util_gpu_mean.filter(|&v| is_fraction(v)), process_sm_util) {
        (Some(util), _) => (Some(util), SmSource::DeviceUtil),
        (None, Some(sum)) if sum.is_finite() => (Some(sum.clamp(0.0, 1.0)), SmSource::ProcessUtil),
        _ => (None, SmSource::Unavailable),
    }
}

impl SmSource {
    /// True for the coarse stand-ins (device or process utilisation).
    pub fn is_coarse(self) -> bool {
        matches!(self, SmSource::DeviceUtil | SmSource::ProcessUtil)
    }

    /// How `carma gpus` and reasons name the source.
    pub fn label(self) -> &'static str {
        match self {
            SmSource::Gpm => "gpm",
            SmSource::File => "file",
            SmSource::Simulated => "simulated",
            SmSource::Unavailable => "unavailable",
            SmSource::DeviceUtil => "device util",
            SmSource::ProcessUtil => "process util",
        }
    }
}

impl GpuSample {
    /// Why a healthy GPU takes no whole-GPU work: its MIG mode, in `carma gpus`'s words (the
    /// dashboard's cards say the same).
    pub fn mig_reason(&self) -> Option<String> {
        match self.mig.enabled {
            None => Some("MIG mode unreadable".to_string()),
            Some(true) if self.mig.instances.is_empty() => {
                Some("MIG on but no MIG instance exists".to_string())
            }
            Some(true) => Some("MIG on: its instances take the work".to_string()),
            Some(false) => None,
        }
    }

    /// The GPU's state in a word, as `carma gpus` and the dashboard show it: `lost`,
    /// `xid 79`, `error` (unreadable), `MIG` (on: its instances take the work), `MIG?` (MIG
    /// mode unreadable), `ok`. A GPU the last probe did not see is `absent` (the caller's).
    pub fn state_word(&self) -> String {
        match (&self.health, self.mig.enabled) {
            (GpuHealth::XidError { xid, .. }, _) => format!("xid {xid}"),
            (GpuHealth::Lost { .. }, _) => "lost".to_owned(),
            (GpuHealth::Unreadable { .. }, _) => "error".to_owned(),
            (GpuHealth::Healthy, Some(true)) => "MIG".to_owned(),
            (GpuHealth::Healthy, None) => "MIG?".to_owned(),
            (GpuHealth::Healthy, Some(false)) => "ok".to_owned(),
        }
    }

    /// Memory held by processes: `total − free − reserved`. The driver's
    /// reservation sits in the gap between total and free but belongs to no
    /// process; NVML's v1 call and carma 0.1 journals have no reservation,
    /// and then this is `total − free`.
    pub fn memory_used_by_processes_mib(&self) -> u64 {
        self.memory_total_mib
            .saturating_sub(self.memory_free_mib)
            .saturating_sub(self.memory_reserved_mib.unwrap_or(0))
    }

    /// Checks the invariants every producer must uphold, so a bad record is
    /// caught before it reaches the journal and again after replay decodes
    /// it. Returns the first broken invariant in words.
    pub fn check(&self) -> Result<(), String> {
        if self.uuid.is_empty() {
            return Err(format!("GPU {}: empty uuid", self.index));
        }
        if self.memory_used_mib > self.memory_total_mib {
            return Err(format!(
                "GPU {}: memory_used_mib {} > memory_total_mib {}",
                self.uuid, self.memory_used_mib, self.memory_total_mib
            ));
        }
        if self.memory_free_mib > self.memory_total_mib {
            return Err(format!(
                "GPU {}: memory_free_mib {} > memory_total_mib {}",
                self.uuid, self.memory_free_mib, self.memory_total_mib
            ));
        }
        if self.sm_active.is_none() != (self.sm_active_source == SmSource::Unavailable) {
            return Err(format!(
                "GPU {}: sm_active {:?} does not match source {:?}",
                self.uuid, self.sm_active, self.sm_active_source
            ));
        }
        if let Some(reserved) = self.memory_reserved_mib.filter(|&r| r > self.memory_total_mib) {
            return Err(format!(
                "GPU {}: memory_reserved_mib {reserved} > memory_total_mib {}",
                self.uuid, self.memory_total_mib
            ));
        }
        if self.processes.len() > PROCESSES_PER_GPU_MAX {
            return Err(format!(
                "GPU {}: {} processes > {PROCESSES_PER_GPU_MAX}",
                self.uuid,
                self.processes.len()
            ));
        }
        self.check_mig()?;
        self.check_fractions()
    }

    fn check_mig(&self) -> Result<(), String> {
        if !self.mig.instances.is_empty() && !self.mig.is_on() {
            return Err(format!("GPU {}: MIG instances listed while MIG is not on", self.uuid));
        }
        for instance in &self.mig.instances {
            if instance.uuid.is_empty() || instance.uuid == self.uuid {
                return Err(format!("GPU {}: MIG instance {} needs its own uuid", self.uuid, instance.index));
            }
            if instance.memory_used_mib > instance.memory_total_mib {
                return Err(format!(
                    "GPU {}: MIG instance {} memory_used_mib {} > memory_total_mib {}",
                    self.uuid, instance.uuid, instance.memory_used_mib, instance.memory_total_mib
                ));
            }
            if instance.processes.len() > PROCESSES_PER_GPU_MAX {
                return Err(format!(
                    "GPU {}: MIG instance {}: {} processes > {PROCESSES_PER_GPU_MAX}",
                    self.uuid,
                    instance.uuid,
                    instance.processes.len()
                ));
            }
        }
        Ok(())
    }

    fn check_fractions(&self) -> Result<(), String> {
        let fractions = [
            ("util_gpu_mean", self.util_gpu_mean),
            ("sm_active", self.sm_active),
            ("sm_occupancy", self.sm_occupancy),
            ("dram_active", self.dram_active),
        ];
        for (field, value) in fractions {
            if let Some(value) = value
                && !is_fraction(value)
            {
                return Err(format!("GPU {}: {field} {value} is not in 0..=1", self.uuid));
            }
        }
        let mig_processes = self.mig.instances.iter().flat_map(|m| &m.processes);
        for process in self.processes.iter().chain(mig_processes) {
            if let Some(value) = process.sm_util
                && !is_fraction(value)
            {
                return Err(format!(
                    "GPU {}: process {} sm_util {value} is not in 0..=1",
                    self.uuid, process.pid
                ));
            }
        }
        Ok(())
    }
}

/// True for a finite value in `0.0..=1.0` (NaN is not).
pub(crate) fn is_fraction(value: f32) -> bool {
    (0.0..=1.0).contains(&value)
}

/// Converts a percentage reading into a fraction, or `None` when the driver
/// returned something that is not a number. Readings slightly outside
/// 0..=100 (GPM rounding) are clamped rather than rejected.
pub(crate) fn fraction_from_percent(percent: f64) -> Option<f32> {
    if !percent.is_finite() {
        return None;
    }
    // The cast cannot produce NaN or infinity: the input is finite and clamped.
    Some((percent / 100.0).clamp(0.0, 1.0) as f32)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fully populated sample, so the round trip covers every field.
    fn sample_full() -> GpuSample {
        GpuSample {
            uuid: "GPU-fake-0000".to_owned(),
            index: 0,
            name: "NVIDIA H100 80GB HBM3".to_owned(),
            memory_total_mib: 81559,
            memory_used_mib: 12000,
            memory_free_mib: 69000,
            memory_reserved_mib: Some(559),
            health: GpuHealth::Healthy,
            util_gpu_mean: Some(0.75),
            util_last_timestamp_us: Some(1_700_000_000_123_456),
            sm_active: Some(0.5),
            sm_active_source: SmSource::Gpm,
            sm_occupancy: Some(0.25),
            dram_active: Some(0.125),
            power_mw: Some(312_000),
            energy_mj: Some(9_876_543_210),
            processes: vec![
                GpuProcess { pid: 4242, used_mib: Some(11000), sm_util: Some(0.5) },
                GpuProcess { pid: 4243, used_mib: None, sm_util: None },
            ],
            mig: MigInfo {
                enabled: Some(true),
                instances: vec![MigInstance {
                    uuid: "MIG-fake-0000-0".to_owned(),
                    index: 0,
                    profile: Some("1g.10gb".to_owned()),
                    memory_total_mib: 9856,
                    memory_used_mib: 13,
                    processes: vec![GpuProcess { pid: 4300, used_mib: Some(13), sm_util: None }],
                }],
            },
            unavailable: vec!["power: not supported".to_owned()],
        }
    }

    /// Goal: a sample survives the snapshot's encoding unchanged (the journal's own
    /// wire form is pinned in `journal::tests`).
    /// Method: bincode 2 standard config, encode then decode, compare.
    #[test]
    fn bincode_round_trip_is_lossless() {
        let config = bincode::config::standard();
        for sample in [sample_full(), sample_sparse()] {
            let bytes = bincode::serde::encode_to_vec(&sample, config).expect("encode");
            let (decoded, read): (GpuSample, usize) =
                bincode::serde::decode_from_slice(&bytes, config).expect("decode");
            assert_eq!(decoded, sample);
            assert_eq!(read, bytes.len());
            assert_eq!(decoded.check(), Ok(()));
        }
    }

    fn sample_sparse() -> GpuSample {
        GpuSample {
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
            ..sample_full()
        }
    }

    /// Goal: `check` rejects each broken invariant with a message naming it.
    #[test]
    fn check_rejects_broken_invariants() {
        let mut sample = sample_full();
        sample.memory_used_mib = sample.memory_total_mib + 1;
        assert_eq!(
            sample.check(),
            Err("GPU GPU-fake-0000: memory_used_mib 81560 > memory_total_mib 81559".to_owned())
        );

        let mut sample = sample_full();
        sample.sm_active_source = SmSource::Unavailable;
        assert_eq!(
            sample.check(),
            Err("GPU GPU-fake-0000: sm_active Some(0.5) does not match source Unavailable".to_owned())
        );

        let mut sample = sample_full();
        sample.dram_active = Some(f32::NAN);
        assert_eq!(sample.check(), Err("GPU GPU-fake-0000: dram_active NaN is not in 0..=1".to_owned()));
    }

    /// Goal: the coarse fallback prefers device utilisation, then the process sum (clamped),
    /// and says which; nothing readable leaves SM activity unknown.
    #[test]
    fn coarse_sm_active_prefers_device_util_then_process_sum() {
        assert_eq!(coarse_sm_active(Some(0.9), Some(0.2)), (Some(0.9), SmSource::DeviceUtil));
        assert_eq!(coarse_sm_active(None, Some(1.7)), (Some(1.0), SmSource::ProcessUtil));
        assert_eq!(coarse_sm_active(Some(f32::NAN), Some(0.3)), (Some(0.3), SmSource::ProcessUtil));
        assert_eq!(coarse_sm_active(None, None), (None, SmSource::Unavailable));
        assert!(SmSource::DeviceUtil.is_coarse() && !SmSource::Gpm.is_coarse());
    }

    /// Goal: health reads as the words reasons use, and memory used by processes leaves
    /// the driver's reservation out.
    #[test]
    fn health_words_and_memory_used_by_processes() {
        assert_eq!(GpuHealth::Healthy.reason(), None);
        let lost = GpuHealth::Lost { detail: "NVML_ERROR_GPU_IS_LOST reading memory".into() };
        assert_eq!(lost.reason().as_deref(), Some("lost (NVML_ERROR_GPU_IS_LOST reading memory)"));
        let xid = GpuHealth::XidError { xid: 79, detail: String::new() };
        assert_eq!((xid.reason().as_deref(), xid.label().as_str()), (Some("XID 79 error"), "xid 79"));
        let sample = sample_full();
        assert_eq!(sample.memory_used_by_processes_mib(), 81559 - 69000 - 559);
        let old = GpuSample { memory_reserved_mib: None, ..sample_full() };
        assert_eq!(old.memory_used_by_processes_mib(), 81559 - 69000);
    }

    /// The one set of state words `carma gpus` and the dashboard's cards show.
    #[test]
    fn state_words_are_carma_gpus_words() {
        let mut sample = sample_full();
        let mut word = |health: GpuHealth, mig: Option<bool>| {
            sample.health = health;
            sample.mig.enabled = mig;
            sample.state_word()
        };
        assert_eq!(word(GpuHealth::Healthy, Some(false)), "ok");
        assert_eq!(word(GpuHealth::Healthy, Some(true)), "MIG");
        assert_eq!(word(GpuHealth::Healthy, None), "MIG?");
        assert_eq!(word(GpuHealth::Lost { detail: String::new() }, Some(true)), "lost");
        assert_eq!(word(GpuHealth::XidError { xid: 79, detail: String::new() }, Some(false)), "xid 79");
        assert_eq!(word(GpuHealth::Unreadable { detail: String::new() }, Some(false)), "error");
    }

    /// Goal: MIG instances must be consistent with the mode and their own memory.
    #[test]
    fn check_rejects_inconsistent_mig() {
        let mut sample = sample_full();
        sample.mig.enabled = Some(false);
        assert_eq!(
            sample.check(),
            Err("GPU GPU-fake-0000: MIG instances listed while MIG is not on".to_owned())
        );
        let mut sample = sample_full();
        sample.mig.instances[0].memory_used_mib = 10_000;
        assert_eq!(
            sample.check(),
            Err("GPU GPU-fake-0000: MIG instance MIG-fake-0000-0 memory_used_mib 10000 > memory_total_mib 9856"
                .to_owned())
        );
        let mut sample = sample_full();
        sample.mig.instances[0].processes[0].sm_util = Some(2.0);
        assert_eq!(
            sample.check(),
            Err("GPU GPU-fake-0000: process 4300 sm_util 2 is not in 0..=1".to_owned())
        );
    }

    #[test]
    fn percent_conversion_clamps_and_rejects_nan() {
        assert_eq!(fraction_from_percent(50.0), Some(0.5));
        assert_eq!(fraction_from_percent(100.4), Some(1.0));
        assert_eq!(fraction_from_percent(-0.1), Some(0.0));
        assert_eq!(fraction_from_percent(f64::NAN), None);
        assert_eq!(fraction_from_percent(f64::INFINITY), None);
    }
}
