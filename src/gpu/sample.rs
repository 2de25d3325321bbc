//! The per-GPU snapshot that one tick records: [`GpuSample`] and its parts.
//!
//! These types are stored verbatim in the journal's `MetricSample` events
//! (bincode 2, which is not self-describing). That is why they avoid every
//! serde attribute that changes the wire shape (`skip*`, `flatten`, `tag`,
//! `untagged`), why a missing metric is an `Option` and never a NaN, and why
//! enum variants may only ever be appended: bincode writes the variant index.
//! A change to any field's type or order is a journal format change.
//!
//! Every fraction lies in `0.0..=1.0` and is finite; [`GpuSample::check`]
//! states this and the other invariants so the journal can check a record
//! before `append` and again after decoding it.

use serde::{Deserialize, Serialize};

/// One GPU as seen by one probe call.
///
/// Journal format 1. The scheduler keys everything on `uuid`, never on
/// `index`: NVML and CUDA may number the same GPU differently.
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
    /// Allocated framebuffer memory, MiB (rounded down).
    pub memory_used_mib: u64,
    /// Unallocated framebuffer memory, MiB (rounded down). NVML also keeps a
    /// driver reservation, so `used + free` may be a little below `total`.
    pub memory_free_mib: u64,
    /// Mean NVML GPU utilisation over the samples taken since the previous
    /// tick, as a fraction in `0..=1`; `None` when no new sample exists.
    /// This is "a kernel was running", not how many SMs were busy.
    pub util_gpu_mean: Option<f32>,
    /// CPU timestamp in µs of the newest utilisation sample seen, to pass as
    /// "since" on the next tick (see [`crate::gpu::SinceMarks`]). Carried
    /// forward unchanged when no new sample arrived.
    pub util_last_timestamp_us: Option<u64>,
    /// Fraction of SMs busy (`0..=1`), measured over the GPM interval of this
    /// probe call. `None` unless measured directly: there is no fallback to
    /// `util_gpu_mean` here; the scheduler makes that choice itself.
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
///
/// Journal format 1. Append new variants at the end only.
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
}

/// One compute process on a GPU.
///
/// Journal format 1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuProcess {
    /// Operating-system process id (in the host pid namespace).
    pub pid: u32,
    /// GPU memory the process holds, MiB (rounded up, so a small context
    /// never reads as 0); `None` when NVML hides it (e.g. under WDDM or
    /// in a container without permission).
    pub used_mib: Option<u64>,
}

/// MIG state of a physical GPU.
///
/// Journal format 1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigInfo {
    /// Whether MIG mode is currently on; `Some(false)` for GPUs without MIG
    /// support, `None` when the mode could not be read.
    pub enabled: Option<bool>,
    /// The MIG devices that exist now, empty when MIG is off. Each is placed
    /// on as a small, exclusive GPU.
    pub instances: Vec<MigInstance>,
}

/// One MIG device (a GPU instance with its compute instance).
///
/// Journal format 1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigInstance {
    /// MIG device UUID, e.g. `MIG-…`; usable in `CUDA_VISIBLE_DEVICES`.
    pub uuid: String,
    /// Slot index on the parent GPU (`nvmlDeviceGetMigDeviceHandleByIndex`).
    pub index: u32,
    /// Memory of this MIG device, MiB (rounded down).
    pub memory_total_mib: u64,
    /// Allocated memory of this MIG device, MiB (rounded down).
    pub memory_used_mib: u64,
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
}

impl GpuSample {
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
        if self.processes.len() > PROCESSES_PER_GPU_MAX {
            return Err(format!(
                "GPU {}: {} processes > {PROCESSES_PER_GPU_MAX}",
                self.uuid,
                self.processes.len()
            ));
        }
        self.check_fractions()
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
            util_gpu_mean: Some(0.75),
            util_last_timestamp_us: Some(1_700_000_000_123_456),
            sm_active: Some(0.5),
            sm_active_source: SmSource::Gpm,
            sm_occupancy: Some(0.25),
            dram_active: Some(0.125),
            power_mw: Some(312_000),
            energy_mj: Some(9_876_543_210),
            processes: vec![
                GpuProcess { pid: 4242, used_mib: Some(11000) },
                GpuProcess { pid: 4243, used_mib: None },
            ],
            mig: MigInfo {
                enabled: Some(true),
                instances: vec![MigInstance {
                    uuid: "MIG-fake-0000-0".to_owned(),
                    index: 0,
                    memory_total_mib: 9856,
                    memory_used_mib: 13,
                }],
            },
            unavailable: vec!["power: not supported".to_owned()],
        }
    }

    /// Goal: a sample survives the journal's encoding unchanged.
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

    /// Goal: the wire shape does not drift silently. Method: pin the
    /// encoded length and the leading bytes of a fixed sample; a change here
    /// is a journal format change and needs a new format version.
    #[test]
    fn bincode_encoding_is_pinned() {
        let config = bincode::config::standard();
        let bytes = bincode::serde::encode_to_vec(sample_sparse(), config).expect("encode");
        let hex: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
        // Length-prefixed strings, varint integers, one byte per `None`,
        // the `SmSource` variant index (03 = Unavailable) after `sm_active`.
        let expected = concat!(
            "0d4750552d66616b652d30303030",                 // uuid
            "00",                                           // index
            "154e5649444941204831303020383047422048424d33", // name
            "fc973e0100fbe02efc880d0100",                   // memory total/used/free
            "000000",                                       // util mean, util ts, sm_active
            "03",                                           // sm_active_source
            "00000000",                                     // occupancy, dram, power, energy
            "00",                                           // processes
            "0000",                                         // mig enabled, instances
            "0114706f7765723a206e6f7420737570706f72746564", // unavailable
        );
        assert_eq!(hex, expected);
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

    #[test]
    fn percent_conversion_clamps_and_rejects_nan() {
        assert_eq!(fraction_from_percent(50.0), Some(0.5));
        assert_eq!(fraction_from_percent(100.4), Some(1.0));
        assert_eq!(fraction_from_percent(-0.1), Some(0.0));
        assert_eq!(fraction_from_percent(f64::NAN), None);
        assert_eq!(fraction_from_percent(f64::INFINITY), None);
    }
}
