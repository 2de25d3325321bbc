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
//! is `schema/fake-gpus.schema.json`; an example is
//! `schema/examples/fake-gpus-2xA100.json`.
//!
//! ```json
//! [
//!   {
//!     "uuid": "GPU-fake-0000",           // required, non-empty, unique
//!     "name": "NVIDIA A100-SXM4-40GB",   // required, non-empty
//!     "memory_total_mib": 40960,         // required, MiB
//!     "memory_used_mib": 1200,           // required, MiB, <= memory_total_mib
//!     "sm_active": 0.35,                 // required, fraction 0..=1
//!     "sm_occupancy": 0.2,               // optional, fraction 0..=1
//!     "power_w": 88.5,                   // optional, watts, 0..=10000
//!     "energy_mj": 123456,               // optional, cumulative millijoules
//!     "processes": [{ "pid": 4242, "used_mib": 1100 }]  // optional
//!   }
//! ]
//! ```
//! (Real files cannot hold the comments shown above.)
//!
//! A fake GPU has no utilisation samples, no GPM DRAM reading and no MIG, so
//! those fields are `None` (MIG `Some(false)`) and `unavailable` stays empty:
//! the file states exactly what the test wants the scheduler to see.

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::sample::is_fraction;
use super::{
    GPUS_MAX, GpuProbe, GpuProcess, GpuSample, MigInfo, PROCESSES_PER_GPU_MAX, ProbeError, SinceMarks,
    SmSource,
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
    sm_active: f32,
    sm_occupancy: Option<f32>,
    power_w: Option<f64>,
    energy_mj: Option<u64>,
    #[serde(default)]
    processes: Vec<FakeProcess>,
}

/// One process as written in the file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FakeProcess {
    pid: u32,
    used_mib: u64,
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

/// Reads at most [`FAKE_FILE_BYTES_MAX`] bytes of UTF-8.
fn read_bounded(path: &Path) -> Result<String, String> {
    let cannot_read = |error: std::io::Error| {
        format!("cannot read it ({error}); create it or fix the path in the probe spec")
    };
    let file = File::open(path).map_err(cannot_read)?;
    let mut text = String::new();
    file.take(FAKE_FILE_BYTES_MAX + 1).read_to_string(&mut text).map_err(cannot_read)?;
    if text.len() as u64 > FAKE_FILE_BYTES_MAX {
        return Err(format!("larger than {FAKE_FILE_BYTES_MAX} bytes; list at most {GPUS_MAX} GPUs"));
    }
    Ok(text)
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
    validate_fraction(&gpu_label, "sm_active", Some(gpu.sm_active))?;
    validate_fraction(&gpu_label, "sm_occupancy", gpu.sm_occupancy)?;
    if let Some(power_w) = gpu.power_w
        && !(0.0..=POWER_W_MAX).contains(&power_w)
    {
        return Err(format!(
            "{gpu_label} has power_w {power_w}, outside 0..={POWER_W_MAX}; give the board power in watts"
        ));
    }
    validate_processes(gpu, &gpu_label)
}

fn validate_fraction(gpu_label: &str, field: &str, value: Option<f32>) -> Result<(), String> {
    match value {
        Some(value) if !is_fraction(value) => Err(format!(
            "{gpu_label} has {field} {value}, outside 0..=1; write a fraction such as 0.35, not a percentage"
        )),
        _ => Ok(()),
    }
}

fn validate_processes(gpu: &FakeGpu, gpu_label: &str) -> Result<(), String> {
    if gpu.processes.len() > PROCESSES_PER_GPU_MAX {
        return Err(format!(
            "{gpu_label} lists {} processes, more than {PROCESSES_PER_GPU_MAX}; remove some",
            gpu.processes.len()
        ));
    }
    for process in &gpu.processes {
        if process.used_mib > gpu.memory_total_mib {
            return Err(format!(
                "{gpu_label} has process {} with used_mib {} > memory_total_mib {}; lower used_mib",
                process.pid, process.used_mib, gpu.memory_total_mib
            ));
        }
    }
    Ok(())
}

/// Converts a validated file entry into the journaled form.
fn to_sample(gpu: FakeGpu, index: u32) -> GpuSample {
    GpuSample {
        uuid: gpu.uuid,
        index,
        name: gpu.name,
        memory_total_mib: gpu.memory_total_mib,
        memory_used_mib: gpu.memory_used_mib,
        memory_free_mib: gpu.memory_total_mib - gpu.memory_used_mib,
        util_gpu_mean: None,
        util_last_timestamp_us: None,
        sm_active: Some(gpu.sm_active),
        sm_active_source: SmSource::File,
        sm_occupancy: gpu.sm_occupancy,
        dram_active: None,
        // Validated to 0..=10 000 W, so the product fits u32 milliwatts.
        power_mw: gpu.power_w.map(|power_w| (power_w * 1000.0).round() as u32),
        energy_mj: gpu.energy_mj,
        processes: gpu
            .processes
            .into_iter()
            .map(|process| GpuProcess { pid: process.pid, used_mib: Some(process.used_mib) })
            .collect(),
        mig: MigInfo::not_supported(),
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
        assert_eq!(first.processes, [GpuProcess { pid: 4242, used_mib: Some(1100) }]);
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
        let properties = schema["items"]["properties"].as_object().expect("item properties");
        let mut names: Vec<&str> = properties.keys().map(String::as_str).collect();
        names.sort_unstable();
        assert_eq!(
            names,
            [
                "energy_mj",
                "memory_total_mib",
                "memory_used_mib",
                "name",
                "power_w",
                "processes",
                "sm_active",
                "sm_occupancy",
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
            "not valid fake GPU JSON: unknown field `memory_use_mib`, expected one of `uuid`, `name`, `memory_total_mib`, `memory_used_mib`, `sm_active`, `sm_occupancy`, `power_w`, `energy_mj`, `processes` at line 4 column 73; see schema/fake-gpus.schema.json"
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
        let text = two_gpus(r#""memory_used_mib": 0"#);
        assert_eq!(
            detail_of(&text),
            "not valid fake GPU JSON: missing field `sm_active` at line 4 column 38; see schema/fake-gpus.schema.json"
        );
    }

    /// Goal: an empty array is a valid machine with no GPUs.
    #[test]
    fn empty_array_is_no_gpus() {
        assert_eq!(parse_fake_gpus("[]"), Ok(Vec::new()));
    }
}
