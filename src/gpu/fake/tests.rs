//! The fake-GPU file: parsing, validation and the no-follow, non-blocking open.

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
        error
            .to_string()
            .ends_with(": a directory, not a regular file; point gpus = \"fake:…\" at the JSON file itself"),
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
    let text =
        two_gpus(r#""memory_used_mib": 0, "sm_active": 0.1, "processes": [{"pid": 7, "used_mib": 50000}]"#);
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
