//! Spec parsing and validation: every refusal is checked by its exact message.

use super::rad::{parse_rad, split_words};
use super::*;

fn validate(text: &str) -> Result<TaskSpec, String> {
    let file = parse_toml("job.toml", text)?;
    file.validate("job.toml", Path::new("/work/proj"), Limits { machine_gpus: Some(4), ..Limits::default() })
}

const GOOD: &str = r#"
name = "resnet50"
command = ["python", "train.py", "--bs", "64"]
gpus = 2
memory = "12GiB"
model_summary = "resnet50.json"
batch_size = 64
time_limit = "2h"
[env]
OMP_NUM_THREADS = "4"
"#;

#[test]
fn good_spec_validates_and_round_trips_through_canonical_toml() {
    let spec = validate(GOOD).expect("valid spec");
    assert_eq!(spec.command, ["python", "train.py", "--bs", "64"]);
    assert_eq!(spec.workdir, "/work/proj");
    assert_eq!(spec.gpus, 2);
    assert_eq!(spec.memory_mib, Some(12 * 1024));
    assert_eq!(spec.model_summary.as_deref(), Some("/work/proj/resnet50.json"));
    assert_eq!(spec.time_limit_ms, Some(2 * 3600 * 1000));
    assert_eq!(spec.max_retries, RETRIES_DEFAULT);
    let submission = Submission {
        spec: spec.clone(),
        env: BTreeMap::from([("OMP_NUM_THREADS".into(), "4".into())]),
        summary_text: None,
        script_text: None,
    };
    let canonical = toml::to_string(&submission.to_spec_file()).unwrap();
    let again = validate(&canonical).expect("canonical form validates");
    assert_eq!(again, spec);
}

#[test]
fn truncated_spec_is_refused_with_line_number() {
    let err = validate("name = \"x\"\ncommand = [\"python\", ").unwrap_err();
    assert_eq!(
        err,
        "job.toml:2: unclosed array, expected `]`; fix the spec (format: schema/task-spec.schema.json)"
    );
}

#[test]
fn unknown_field_is_refused() {
    let err = validate("name = \"x\"\ncommand = [\"a\"]\ngpu = 2\n").unwrap_err();
    assert!(err.starts_with("job.toml:3: unknown field `gpu`, expected one of"), "got: {err}");
}

#[test]
fn gpu_counts_out_of_range_are_refused() {
    let cases = [
        ("0", "job.toml: gpus = 0: a task needs at least 1 GPU"),
        ("-2", "job.toml: gpus = -2: a task needs at least 1 GPU"),
        ("5", "job.toml: gpus = 5: this machine has only 4 GPU(s); ask for at most 4"),
    ];
    for (gpus, expected) in cases {
        let err = validate(&format!("name = \"x\"\ncommand = [\"a\"]\ngpus = {gpus}\n")).unwrap_err();
        assert_eq!(err, expected);
    }
}

#[test]
fn memory_strings_parse_or_are_refused_exactly() {
    assert_eq!(parse_memory_mib("12GiB"), Ok(12288));
    assert_eq!(parse_memory_mib("500 MiB"), Ok(500));
    assert_eq!(parse_memory_mib("1.5GiB"), Ok(1536));
    assert_eq!(parse_memory_mib("8192"), Ok(8192));
    assert_eq!(parse_memory_mib("1GB"), Ok(954));
    assert_eq!(
        parse_memory_mib("lots"),
        Err("memory \"lots\" is not a size; use a number with a unit, e.g. 12GiB or 500MiB".into())
    );
    assert_eq!(
        parse_memory_mib("99999999TiB"),
        Err("memory \"99999999TiB\" is larger than any GPU (at most 1024 GiB); use a number with a unit, e.g. 12GiB or 500MiB".into())
    );
    assert_eq!(
        parse_memory_mib("1e400GiB"),
        Err("memory \"1e400GiB\" has an unknown unit \"e400GiB\"; use a number with a unit, e.g. 12GiB or 500MiB".into())
    );
    assert_eq!(
        parse_memory_mib("12 parsecs"),
        Err("memory \"12 parsecs\" has an unknown unit \"parsecs\"; use a number with a unit, e.g. 12GiB or 500MiB".into())
    );
    assert_eq!(
        parse_memory_mib("0GiB"),
        Err("memory \"0GiB\" is zero; use a number with a unit, e.g. 12GiB or 500MiB".into())
    );
}

#[test]
fn time_limit_needs_a_unit() {
    assert_eq!(
        parse_time_limit_ms("90"),
        Err("time_limit \"90\" has no unit; write 90m for minutes (as Slurm reads a bare number) or 90s"
            .into())
    );
    assert_eq!(parse_time_limit_ms("1h 30m"), Ok(5_400_000));
    assert_eq!(parse_time_limit_ms("48:00:00"), Ok(172_800_000), "Slurm's forms");
    assert_eq!(parse_time_limit_ms("1-12:30"), Ok(131_400_000));
    let err = parse_time_limit_ms("2 fortnights").unwrap_err();
    assert!(err.starts_with("time_limit \"2 fortnights\" is not a duration (unknown time unit"), "{err}");
    assert!(err.ends_with("; use e.g. 90s, 45m, 2h or Slurm's 2:00:00"), "{err}");
}

#[test]
fn carma_owned_env_is_refused() {
    let err = validate("name = \"x\"\ncommand = [\"a\"]\n[env]\nCUDA_VISIBLE_DEVICES = \"0\"\n").unwrap_err();
    assert_eq!(err, "job.toml: env CUDA_VISIBLE_DEVICES is set by carma itself; remove it from the spec");
}

#[test]
fn non_utf8_paths_are_refused() {
    use std::os::unix::ffi::OsStrExt;
    let base = Path::new(std::ffi::OsStr::from_bytes(b"/tmp/\xffdir"));
    let file = parse_toml("job.toml", "name = \"x\"\ncommand = [\"a\"]\n").unwrap();
    let err = file.validate("job.toml", base, Limits::default()).unwrap_err();
    assert_eq!(
        err,
        "job.toml: workdir /tmp/\u{fffd}dir is not valid UTF-8; use a path with UTF-8 characters only"
    );
}

#[test]
fn rad_file_maps_to_spec_with_reference_figures() {
    let text = "# resnet on cifar\nconda activate tf # env\npython resnet.py --b 128\nmodel: resnet.txt\ndataset: cifar100\nbatch_size: 128\npolicy: collocation\ngpus: 1\n24408\n17456\n40000\n24000\n";
    let file = parse_rad("r.rad", "resnet", text).expect("rad parses");
    let spec = file.validate("r.rad", Path::new("/w"), Limits::default()).expect("valid");
    assert_eq!(
        spec.command,
        ["conda", "run", "-n", "tf", "--no-capture-output", "python", "resnet.py", "--b", "128"]
    );
    assert_eq!(spec.memory_mib, Some(24408));
    assert_eq!(spec.model_summary.as_deref(), Some("/w/resnet.txt"));
    assert_eq!(spec.batch_size, Some(128));
    assert_eq!(spec.dataset.as_deref(), Some("cifar100"));
    assert_eq!(
        spec.reference,
        ReferenceMib {
            oracle: Some(24408),
            horus: Some(17456),
            faketensor: Some(40000),
            gpumemnet: Some(24000)
        }
    );
}

#[test]
fn rad_shell_syntax_is_refused() {
    let err = parse_rad("r.rad", "x", "# c\nnone\npython a.py | tee log\n").unwrap_err();
    assert_eq!(
        err,
        "r.rad: command: shell syntax '|' is not supported (carma runs no shell); wrap the pipeline in a script"
    );
    assert_eq!(split_words("python 'a b.py' \"c\"").unwrap(), ["python", "a b.py", "c"]);
}

/// Issue 33, defect 11: `--workdir ./.` was shown as `/home/u/ex/./.`; the workdir is kept
/// without its `.` components (and `..` as written: nothing is resolved).
#[test]
fn a_workdir_is_kept_without_dot_components() {
    let file = |dir: &str| {
        parse_toml("job.toml", &format!("name = \"t\"\ncommand = [\"true\"]\nworkdir = {dir:?}\n")).unwrap()
    };
    let limits = Limits::default();
    let spec = file("./.").validate("job.toml", Path::new("/home/u/ex"), limits).unwrap();
    assert_eq!(spec.workdir, "/home/u/ex");
    let spec = file("a/./b/").validate("job.toml", Path::new("/home/u/ex/."), limits).unwrap();
    assert_eq!(spec.workdir, "/home/u/ex/a/b");
    let spec = file("../x").validate("job.toml", Path::new("/home/u/ex"), limits).unwrap();
    assert_eq!(spec.workdir, "/home/u/ex/../x");
    let spec = parse_toml("job.toml", "name = \"t\"\ncommand = [\"true\"]\n").unwrap();
    let spec = spec.validate("job.toml", Path::new("/home/u/ex/./."), limits).unwrap();
    assert_eq!(spec.workdir, "/home/u/ex");
}
