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
pub(crate) mod tests {
    use super::*;
    use std::fs;

    /// A plain sample with only identity and memory, for other modules' tests.
    pub(crate) fn sample_minimal(uuid: &str) -> GpuSample {
        GpuSample {
            uuid: uuid.to_owned(),
            index: 0,
            name: "NVIDIA A100-SXM4-40GB".to_owned(),
            memory_total_mib: 40960,
            memory_used_mib: 0,
            memory_free_mib: 40960,
            memory_reserved_mib: None,
            health: GpuHealth::Healthy,
            util_gpu_mean: None,
            util_last_timestamp_us: None,
            sm_active: None,
            sm_active_source: SmSource::Unavailable,
            sm_occupancy: None,
            dram_active: None,
            power_mw: None,
            energy_mj: None,
            processes: Vec::new(),
            mig: MigInfo::not_supported(),
            unavailable: Vec::new(),
        }
    }

    fn repo_file(relative: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
    }

    fn write_temp(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("gpus.json");
        fs::write(&path, text).expect("write fake file");
        (dir, path)
    }

    /// The file-level error detail for `text`, which must be rejected.
    fn detail_of(text: &str) -> String {
        match parse_fake_gpus(text) {
            Ok(samples) => panic!("accepted {samples:?}"),
            Err(detail) => detail,
        }
    }

    /// Two GPUs in the file format, with `second` spliced into GPU 1.
    fn two_gpus(second: &str) -> String {
        format!(
            r#"[{{"uuid": "GPU-fake-0000", "name": "A100", "memory_total_mib": 40960,
                 "memory_used_mib": 0, "sm_active": 0.0}},
               {{"uuid": "GPU-fake-0001", "name": "A100", "memory_total_mib": 40960,
                 {second}}}]"#
        )
    }

    /// Goal: the committed example parses into exactly the expected samples.
    #[test]
    fn example_file_parses() {
        let probe = FakeProbe::open(repo_file("schema/examples/fake-gpus-2xA100.json"))
            .unwrap_or_else(|error| panic!("{error}"));
        let samples = probe.read().unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(samples.len(), 2);
        let first = &samples[0];
        assert_eq!(first.uuid, "GPU-fake-0000");
        assert_eq!(first.index, 0);
        assert_eq!(first.memory_total_mib, 40960);
        assert_eq!(first.memory_free_mib, 40960 - 1200);
        assert_eq!(first.sm_active, Some(0.35));
        assert_eq!(first.sm_active_source, SmSource::File);
        assert_eq!(first.power_mw, Some(88_500));
        assert_eq!(first.processes, [GpuProcess { pid: 4242, used_mib: Some(1100), sm_util: None }]);
        let second = &samples[1];
        assert_eq!((second.uuid.as_str(), second.index), ("GPU-fake-0001", 1));
        assert_eq!((second.power_mw, second.processes.len()), (None, 0));
        assert!(samples.iter().all(|sample| sample.check().is_ok()));
    }

    /// Goal: the schema's embedded example is the committed example file,
    /// so the two documents cannot drift apart.
    #[test]
    fn schema_example_matches_example_file() {
        let read_json = |relative: &str| -> serde_json::Value {
            let text = fs::read_to_string(repo_file(relative)).expect("read");
            serde_json::from_str(&text).expect("valid JSON")
        };
        let schema = read_json("schema/fake-gpus.schema.json");
        let example = read_json("schema/examples/fake-gpus-2xA100.json");
        assert_eq!(schema["$schema"], "https://json-schema.org/draft/2020-12/schema");
        assert_eq!(schema["examples"][0], example);
        assert_eq!(schema["examples"][1], read_json("schema/examples/fake-gpus-mig-lost.json"));
        let properties = schema["items"]["properties"].as_object().expect("item properties");
        let mut names: Vec<&str> = properties.keys().map(String::as_str).collect();
        names.sort_unstable();
        assert_eq!(
            names,
            [
                "energy_mj",
                "health",
                "memory_reserved_mib",
                "memory_total_mib",
                "memory_used_mib",
                "mig_enabled",
                "mig_instances",
                "name",
                "power_w",
                "processes",
                "sm_active",
                "sm_occupancy",
                "util_gpu",
                "uuid"
            ]
        );
    }

    /// Goal: tests can change the GPUs between ticks by editing the file.
    /// Method: sample, rewrite the file, sample again through the trait.
    #[test]
    fn sample_rereads_file_each_call() {
        let (_dir, path) = write_temp(&two_gpus(r#""memory_used_mib": 0, "sm_active": 0.1"#));
        let mut probe = FakeProbe::open(&path).unwrap_or_else(|error| panic!("{error}"));
        let before = probe.sample(&SinceMarks::new()).expect("first sample");
        assert_eq!(before[1].memory_used_mib, 0);

        fs::write(&path, two_gpus(r#""memory_used_mib": 30000, "sm_active": 0.9"#)).expect("rewrite");
        let after = probe.sample(&SinceMarks::new()).expect("second sample");
        assert_eq!(after[1].memory_used_mib, 30000);
        assert_eq!(after[1].memory_free_mib, 10960);
        assert_eq!(after[1].sm_active, Some(0.9));
        assert_eq!(probe.describe(), format!("fake:{}", path.display()));
    }

    /// Samples through the trait on another thread, so a regression that blocks (an open
    /// waiting for a FIFO's writer) fails the test after a few seconds instead of hanging it.
    fn sample_within_seconds(mut probe: FakeProbe) -> Result<Vec<GpuSample>, ProbeError> {
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || sender.send(probe.sample(&SinceMarks::new())));
        receiver.recv_timeout(std::time::Duration::from_secs(5)).expect("sample() returned within 5 s")
    }

    /// Goal: a FIFO, directory or device put where the fake file was fails the tick at once with
    /// what it is, instead of hanging it. Method: a probe opened on a good file, which is then
    /// replaced by each; `/dev/null` stands for devices.
    #[test]
    fn a_fifo_directory_or_device_is_refused_at_once() {
        let (_dir, path) = write_temp("[]");
        let probe = FakeProbe::open(&path).unwrap_or_else(|error| panic!("{error}"));
        fs::remove_file(&path).expect("remove");
        let c_path = std::ffi::CString::new(path.to_str().expect("UTF-8 temp path")).expect("no NUL");
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        let error = sample_within_seconds(probe.clone()).expect_err("a FIFO is refused");
        assert_eq!(
            error.to_string(),
            format!(
                "fake GPU file {}: a FIFO, not a regular file; point gpus = \"fake:…\" at the JSON file itself",
                path.display()
            )
        );
        fs::remove_file(&path).expect("remove FIFO");
        fs::create_dir(&path).expect("mkdir");
        let error = sample_within_seconds(probe).expect_err("a directory is refused");
        assert!(
            error.to_string().ends_with(
                ": a directory, not a regular file; point gpus = \"fake:…\" at the JSON file itself"
            ),
            "{error}"
        );
        let error = FakeProbe::open("/dev/null").expect_err("a device is refused");
        assert_eq!(
            error.to_string(),
            "fake GPU file /dev/null: a device, not a regular file; point gpus = \"fake:…\" at the JSON file itself"
        );
    }

    /// Goal: a symlink to a good fake file is refused by name, so the spec names the file the
    /// tick reads; the file itself still opens.
    #[test]
    fn a_symlink_to_the_fake_file_is_refused() {
        let (dir, path) = write_temp("[]");
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&path, &link).expect("symlink");
        let error = FakeProbe::open(&link).expect_err("a symlink is refused");
        assert_eq!(
            error.to_string(),
            format!(
                "fake GPU file {}: a symbolic link, not a regular file; point gpus = \"fake:…\" at the JSON file itself",
                link.display()
            )
        );
        assert!(FakeProbe::open(&path).is_ok());
    }

    /// Goal: a file broken between ticks fails that tick with the path.
    #[test]
    fn malformed_json_names_the_file() {
        let (_dir, path) = write_temp("[]");
        let mut probe = FakeProbe::open(&path).unwrap_or_else(|error| panic!("{error}"));
        fs::write(&path, "[{\"uuid\": ").expect("rewrite");
        let error = match probe.sample(&SinceMarks::new()) {
            Ok(samples) => panic!("accepted {samples:?}"),
            Err(error) => error,
        };
        assert!(matches!(&error, ProbeError::FakeFile { path: got, .. } if *got == path));
        assert_eq!(
            error.to_string(),
            format!(
                "fake GPU file {}: not valid fake GPU JSON: EOF while parsing a value at line 1 column 10; see schema/fake-gpus.schema.json",
                path.display()
            )
        );
    }

    #[test]
    fn unknown_field_is_rejected() {
        let text = two_gpus(r#""memory_used_mib": 0, "sm_active": 0.1, "memory_use_mib": 5"#);
        assert_eq!(
            detail_of(&text),
            "not valid fake GPU JSON: unknown field `memory_use_mib`, expected one of `uuid`, `name`, `memory_total_mib`, `memory_used_mib`, `memory_reserved_mib`, `sm_active`, `util_gpu`, `sm_occupancy`, `power_w`, `energy_mj`, `health`, `processes`, `mig_enabled`, `mig_instances` at line 4 column 73; see schema/fake-gpus.schema.json"
        );
    }

    #[test]
    fn duplicate_uuid_is_rejected() {
        let text =
            two_gpus(r#""memory_used_mib": 0, "sm_active": 0.1"#).replace("GPU-fake-0001", "GPU-fake-0000");
        assert_eq!(
            detail_of(&text),
            r#"GPU 1 ("GPU-fake-0000") repeats the uuid of GPU 0; give every GPU a unique uuid"#
        );
    }

    #[test]
    fn used_above_total_is_rejected() {
        let text = two_gpus(r#""memory_used_mib": 50000, "sm_active": 0.1"#);
        assert_eq!(
            detail_of(&text),
            r#"GPU 1 ("GPU-fake-0001") has memory_used_mib 50000 > memory_total_mib 40960; lower memory_used_mib or raise memory_total_mib"#
        );
    }

    #[test]
    fn sm_active_outside_fraction_is_rejected() {
        let text = two_gpus(r#""memory_used_mib": 0, "sm_active": 35"#);
        assert_eq!(
            detail_of(&text),
            r#"GPU 1 ("GPU-fake-0001") has sm_active 35, outside 0..=1; write a fraction such as 0.35, not a percentage"#
        );
        let text = two_gpus(r#""memory_used_mib": 0, "sm_active": -0.5"#);
        assert_eq!(
            detail_of(&text),
            r#"GPU 1 ("GPU-fake-0001") has sm_active -0.5, outside 0..=1; write a fraction such as 0.35, not a percentage"#
        );
    }

    #[test]
    fn sm_occupancy_outside_fraction_is_rejected() {
        let text = two_gpus(r#""memory_used_mib": 0, "sm_active": 0.1, "sm_occupancy": 1.5"#);
        assert_eq!(
            detail_of(&text),
            r#"GPU 1 ("GPU-fake-0001") has sm_occupancy 1.5, outside 0..=1; write a fraction such as 0.35, not a percentage"#
        );
    }

    #[test]
    fn empty_uuid_and_name_are_rejected() {
        let text = two_gpus(r#""memory_used_mib": 0, "sm_active": 0.1"#).replace("GPU-fake-0001", "");
        assert_eq!(detail_of(&text), r#"GPU 1 has an empty uuid; set a unique one such as "GPU-fake-0001""#);
        let text = r#"[{"uuid": "GPU-x", "name": "", "memory_total_mib": 1,
                        "memory_used_mib": 0, "sm_active": 0}]"#;
        assert_eq!(
            detail_of(text),
            r#"GPU 0 ("GPU-x") has an empty name; set one such as "NVIDIA A100-SXM4-40GB""#
        );
    }

    #[test]
    fn power_and_process_limits_are_enforced() {
        let text = two_gpus(r#""memory_used_mib": 0, "sm_active": 0.1, "power_w": 20000"#);
        assert_eq!(
            detail_of(&text),
            r#"GPU 1 ("GPU-fake-0001") has power_w 20000, outside 0..=10000; give the board power in watts"#
        );
        let text = two_gpus(
            r#""memory_used_mib": 0, "sm_active": 0.1, "processes": [{"pid": 7, "used_mib": 50000}]"#,
        );
        assert_eq!(
            detail_of(&text),
            r#"GPU 1 ("GPU-fake-0001") has process 7 with used_mib 50000 > memory_total_mib 40960; lower used_mib"#
        );
    }

    #[test]
    fn missing_required_field_is_rejected() {
        let text = two_gpus(r#""sm_active": 0.1"#);
        assert_eq!(
            detail_of(&text),
            "not valid fake GPU JSON: missing field `memory_used_mib` at line 4 column 34; see schema/fake-gpus.schema.json"
        );
    }

    /// Goal: the second example parses into reserved memory, MIG instances with their
    /// processes, the coarse SM fallback and the health states it describes.
    #[test]
    fn mig_lost_example_parses() {
        let probe = FakeProbe::open(repo_file("schema/examples/fake-gpus-mig-lost.json"))
            .unwrap_or_else(|error| panic!("{error}"));
        let samples = probe.read().unwrap_or_else(|error| panic!("{error}"));
        let [h100, a100, lost, xid] = samples.as_slice() else { panic!("four GPUs: {samples:?}") };
        assert_eq!(h100.memory_reserved_mib, Some(1024));
        assert_eq!(h100.memory_free_mib, 81559 - 1024);
        assert_eq!(h100.memory_used_by_processes_mib(), 0, "the reservation is no process's");
        assert!(h100.mig.is_on());
        let profiles: Vec<Option<&str>> = h100.mig.instances.iter().map(|m| m.profile.as_deref()).collect();
        assert_eq!(profiles, [Some("3g.40gb"), Some("1g.10gb")]);
        assert_eq!(h100.mig.instances[1].index, 1, "slots follow the file order");
        assert_eq!(h100.mig.instances[0].processes[0].pid, 5150);
        assert_eq!((h100.sm_active, h100.sm_active_source), (None, SmSource::Unavailable));
        assert_eq!((a100.sm_active, a100.sm_active_source), (Some(0.86), SmSource::DeviceUtil));
        assert_eq!(a100.processes[0].sm_util, Some(0.7));
        assert_eq!(lost.health, GpuHealth::Lost { detail: "fell off the bus (XID 79)".into() });
        assert_eq!(xid.health, GpuHealth::XidError { xid: 48, detail: "double-bit ECC error".into() });
        assert!(samples.iter().all(|sample| sample.check().is_ok()));
    }

    /// Goal: without sm_active or util_gpu, the processes' sm_util sum is the fallback,
    /// clamped to 1; with none of the three, SM activity is unknown.
    #[test]
    fn process_util_is_the_fallback_without_device_util() {
        let text = two_gpus(
            r#""memory_used_mib": 0, "processes": [{"pid": 1, "used_mib": 10, "sm_util": 0.7},
                {"pid": 2, "used_mib": 10, "sm_util": 0.6}, {"pid": 3, "used_mib": 10}]"#,
        );
        let samples = parse_fake_gpus(&text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((samples[1].sm_active, samples[1].sm_active_source), (Some(1.0), SmSource::ProcessUtil));
        let text = two_gpus(r#""memory_used_mib": 0, "processes": [{"pid": 1, "used_mib": 10}]"#);
        let samples = parse_fake_gpus(&text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((samples[1].sm_active, samples[1].sm_active_source), (None, SmSource::Unavailable));
    }

    #[test]
    fn reserved_and_mig_errors_name_the_gpu_and_the_fix() {
        let text = two_gpus(r#""memory_used_mib": 40000, "memory_reserved_mib": 2000"#);
        assert_eq!(
            detail_of(&text),
            r#"GPU 1 ("GPU-fake-0001") has memory_used_mib 40000 + memory_reserved_mib 2000 > memory_total_mib 40960; lower one of them"#
        );
        let text = two_gpus(
            r#""memory_used_mib": 0, "mig_enabled": false,
               "mig_instances": [{"uuid": "MIG-a", "memory_total_mib": 10, "memory_used_mib": 0}]"#,
        );
        assert_eq!(
            detail_of(&text),
            r#"GPU 1 ("GPU-fake-0001") lists mig_instances with mig_enabled false; remove them or set mig_enabled true"#
        );
        let text = two_gpus(
            r#""memory_used_mib": 0,
               "mig_instances": [{"uuid": "MIG-a", "memory_total_mib": 10, "memory_used_mib": 20}]"#,
        );
        assert_eq!(
            detail_of(&text),
            r#"GPU 1 ("GPU-fake-0001") MIG instance 0 has memory_used_mib 20 > memory_total_mib 10; lower memory_used_mib"#
        );
        let text = two_gpus(
            r#""memory_used_mib": 0,
               "mig_instances": [{"uuid": "GPU-fake-0000", "memory_total_mib": 10, "memory_used_mib": 0}]"#,
        );
        assert_eq!(
            detail_of(&text),
            r#"GPU 1 ("GPU-fake-0001") has a MIG instance whose uuid "GPU-fake-0000" is used elsewhere in the file; give every GPU and MIG instance a unique uuid"#
        );
        let text = two_gpus(r#""memory_used_mib": 0, "health": {"state": "xid"}"#);
        assert!(detail_of(&text).starts_with("not valid fake GPU JSON: missing field `xid`"), "{text}");
        let text = two_gpus(r#""memory_used_mib": 0, "util_gpu": 86"#);
        assert_eq!(
            detail_of(&text),
            r#"GPU 1 ("GPU-fake-0001") has util_gpu 86, outside 0..=1; write a fraction such as 0.35, not a percentage"#
        );
    }

    /// Goal: an empty array is a valid machine with no GPUs.
    #[test]
    fn empty_array_is_no_gpus() {
        assert_eq!(parse_fake_gpus("[]"), Ok(Vec::new()));
    }
}
