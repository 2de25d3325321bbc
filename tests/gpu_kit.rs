//! The GPU kit (`reports/gpu/run.sh`) end to end on a fake GPU, with the carma built here.
//!
//! Goal: the one command meant for a real GPU runs on any machine with `--dry-run`, and every
//! section of its report is filled from the fake hardware: carma's readings beside the
//! nvidia-smi stand-in, a queue of real jobs driven by `carma tick` (collocated, one over its
//! share, relaunched with what it used), the two recovery cases (an under-declared job beside
//! an untouched neighbour; an out-of-memory between two ticks), the MPS cap test, and the
//! labels (or the reason they were skipped: they need torch). A missing prerequisite is one
//! line and exit 2.
//!
//! A job that outgrew its memory has one right ending: Finished after a relaunch. The fake GPU
//! lists each job's own memory as NVML does and is kept current between ticks, so the tick's
//! enforcement and the supervisor's readings decide here as on a real card; the assertions read
//! carma's own records (`carma events --json` as the kit gathered them), not the kit's verdict
//! alone: a stop for memory without a relaunch, or a neighbour stopped or run twice, fails.

use std::path::Path;
use std::process::Command;

#[path = "common/skip.rs"]
mod skip;
use skip::{Need, skip};

use serde_json::Value;

const KIT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/reports/gpu/run.sh");

/// The first missing program among those the kit needs, if any.
fn missing_prerequisite() -> Option<&'static str> {
    ["bash", "python3"].into_iter().find(|program| {
        Command::new(program).arg("--version").output().map(|o| !o.status.success()).unwrap_or(true)
    })
}

fn torch_installed() -> bool {
    Command::new("python3")
        .args(["-c", "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('torch') else 1)"])
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn dry_run_fills_every_section_from_fake_hardware() {
    if let Some(program) = missing_prerequisite() {
        return skip(Need::Python3, &format!("the GPU kit needs {program}, which is not installed"));
    }
    let out = tempfile::tempdir().unwrap();
    let run = Command::new("bash")
        .args([KIT, "--dry-run", "--out"])
        .arg(out.path())
        .args(["--carma", env!("CARGO_BIN_EXE_carma")])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&run.stderr));
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("report.json")).unwrap()).unwrap();
    assert_eq!(report["dry_run"], true);
    let section = |name: &str| report["sections"][name].clone();

    let nvml = section("nvml");
    assert_eq!(nvml["status"], "ok", "{nvml}");
    assert!(nvml["samples"].as_u64().unwrap() >= 3, "{nvml}");
    for reading in ["total", "used", "reserved", "free"] {
        assert_eq!(nvml["max_abs_difference"][reading], 0.0, "{reading}: {nvml}");
    }
    let rows = nvml["rows"].as_array().unwrap();
    assert!(
        rows.iter().any(|r| r["carma_used_mib"].as_u64().unwrap() >= 4096),
        "the load held memory: {nvml}"
    );
    assert!(rows.iter().all(|r| r["carma_sm_source"] == "file"), "{nvml}");

    let queue = section("queue");
    assert_eq!(queue["status"], "ok", "{queue}");
    assert!(queue["max_running_at_once"].as_u64().unwrap() >= 3, "collocated: {queue}");
    assert!(queue["oom_stderr_line"][0].as_str().unwrap().contains("CUDA out of memory"), "{queue}");
    // The fake GPU lists the grabbing job's own memory, as NVML did on the H100: the tick stops
    // it over its declared share (or it dies of the out-of-memory first), and it is relaunched
    // at its place in the main queue with what it used; its neighbours run once.
    assert_eq!(queue["ending"], "finished after a relaunch", "{queue}");
    assert_eq!(queue["neighbours_ran_once"], true, "{queue}");
    let stopped =
        queue["memory_exceeded"].as_array().unwrap().len() as u64 + queue["oom_events"].as_u64().unwrap();
    assert!(stopped >= 1, "{queue}");
    assert!(
        queue["requeued"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r.as_str().unwrap().contains("the next attempt gets")),
        "{queue}"
    );
    let tasks = queue["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 4);
    assert!(tasks.iter().all(|t| t["state"] == "Finished"), "{queue}");
    for task in tasks {
        let attempts = if task["name"] == "grabs-too-much" { 2 } else { 1 };
        assert_eq!(task["attempts"], attempts, "{}: {queue}", task["name"]);
    }
    assert!(queue["carma_report"].as_str().unwrap().contains("relaunches 1"), "{queue}");

    relaunched_after_a_memory_end(&section("recovery"));

    let mps = section("mps");
    assert_eq!(mps["status"], "ok", "{mps}");
    assert_eq!((mps["over_cap_exit"].as_i64(), mps["within_cap_exit"].as_i64()), (Some(1), Some(0)));

    let labels = section("labels");
    if torch_installed() {
        assert_eq!(labels["status"], "ok", "{labels}");
        let csv = std::fs::read_to_string(out.path().join("labels.csv")).unwrap();
        let mut lines = csv.lines();
        let header = lines.next().unwrap();
        assert!(
            header.starts_with("model,batch_size,max_gpu_memory_mib,faketensor_after_forward_mib"),
            "{header}"
        );
        assert!(header.contains("peak_under_pressure_mib"), "{header}");
        assert!(lines.next().unwrap().starts_with("tiny,8,"), "{csv}");
        let evaluation = &labels["evaluation"];
        assert_eq!(evaluation["status"], "ok", "{labels}");
        assert_eq!(evaluation["rows"][0]["bound"], "below-spread", "{labels}");
    } else {
        assert_eq!(
            labels["status"],
            "skipped: torch is not installed (the dry run's label part needs CPU torch)"
        );
        eprintln!("note: labels skipped here (no torch); the other sections ran");
    }

    let markdown = std::fs::read_to_string(out.path().join("report.md")).unwrap();
    for heading in [
        "## 1. NVML and GPM against nvidia-smi",
        "## 2. The tick on real jobs",
        "## 3. Recovery: Finished after a relaunch",
        "## 4. MPS memory caps",
        "## 5. Labels under memory pressure",
    ] {
        assert!(markdown.contains(heading), "{heading} missing:\n{markdown}");
    }
    assert!(!markdown.contains("Status: **failed"), "{markdown}");
    for file in ["nvml.csv", "carma-report.txt", "carma-events.jsonl"] {
        assert!(out.path().join(file).metadata().unwrap().len() > 0, "{file}");
    }
    assert!(!Path::new(&out.path().join("work")).exists(), "scratch queues are removed");
}

/// The recovery section's two cases, from carma's records: each job that outgrew its memory is
/// Finished after exactly one relaunch, and the neighbour ran once, untouched.
fn relaunched_after_a_memory_end(recovery: &Value) {
    assert_eq!(recovery["status"], "ok", "{recovery}");
    let task = |case: &str, name: &str| -> Value {
        let tasks =
            recovery["cases"][case]["tasks"].as_array().unwrap_or_else(|| panic!("{case}: {recovery}"));
        tasks
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("{case}/{name}: {recovery}"))
            .clone()
    };
    let count = |task: &Value, key: &str| task[key].as_array().unwrap().len();

    // (a) Under-declared beside a neighbour: stopped over its share by the tick, back to its
    // place in the main queue (the user's figure was short) with at least what it used.
    let under = task("underdeclared", "under-declared");
    assert_eq!((under["state"].as_str(), under["attempts"].as_u64()), (Some("Finished"), Some(2)), "{under}");
    assert_eq!((count(&under, "memory_exceeded"), count(&under, "oom")), (1, 0), "{under}");
    let requeued = &under["requeued"].as_array().unwrap()[..];
    assert_eq!(requeued.len(), 1, "{under}");
    assert_eq!(requeued[0]["recovery"], false, "the main queue: {under}");
    assert!(requeued[0]["reason"].as_str().unwrap().contains("over its 4.0 GiB share (declared)"), "{under}");
    // It held 30 % of the 81,559 MiB card: the next attempt gets at least that plus the margin.
    assert!(requeued[0]["requirement_mib"].as_u64().unwrap() >= 23_742 + 1024, "{under}");
    let neighbour = task("underdeclared", "neighbour");
    assert_eq!((neighbour["state"].as_str(), neighbour["attempts"].as_u64()), (Some("Finished"), Some(1)));
    for key in ["memory_exceeded", "oom", "requeued"] {
        assert_eq!(count(&neighbour, key), 0, "the neighbour is left alone: {neighbour}");
    }
    assert!(recovery["cases"]["underdeclared"]["max_running_at_once"].as_u64().unwrap() >= 2, "{recovery}");

    // (b) Out of memory 1.5 s into training, no tick while it lived: only the supervisor's
    // readings saw it hold 7,168 MiB of its 8 GiB share on the filled card. OomDetected, the
    // recovery queue (carma's miss: it stayed within its share), then Finished.
    let oom = task("oom_early", "oom-early");
    assert_eq!((oom["state"].as_str(), oom["attempts"].as_u64()), (Some("Finished"), Some(2)), "{oom}");
    assert_eq!((count(&oom, "memory_exceeded"), count(&oom, "oom")), (0, 1), "{oom}");
    assert!(oom["oom"][0]["peak_mib"].as_u64().unwrap() >= 7168, "the supervisor's peak: {oom}");
    let requeued = &oom["requeued"].as_array().unwrap()[..];
    assert_eq!(requeued.len(), 1, "{oom}");
    assert_eq!(requeued[0]["recovery"], true, "{oom}");
    assert!(requeued[0]["reason"].as_str().unwrap().contains("recovery queue, runs exclusive"), "{oom}");
    let case = &recovery["cases"]["oom_early"];
    assert!(case["first_attempt_lived_s"].as_f64().is_some_and(|s| s < 30.0), "{case}");
    assert!(case["filler_ended_at_s"].as_f64().is_some(), "{case}");
}

/// Goal: without a GPU the real run refuses at once, in one line, with exit 2; so does a
/// missing --carma binary.
#[test]
fn a_missing_prerequisite_is_one_line_and_exit_2() {
    if let Some(program) = missing_prerequisite() {
        return skip(Need::Python3, &format!("the GPU kit needs {program}, which is not installed"));
    }
    let out = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let o = Command::new("bash").arg(KIT).args(args).output().unwrap();
        (o.status.code(), String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let dir = out.path().to_str().unwrap();
    let (code, stderr) = run(&["--out", dir, "--carma", "/nonexistent/carma", "--dry-run"]);
    assert_eq!(code, Some(2));
    assert_eq!(stderr, "run.sh: /nonexistent/carma is not an executable file: pass --carma PATH\n");
    let (code, stderr) = run(&["--carma", env!("CARGO_BIN_EXE_carma")]);
    assert_eq!((code, stderr.as_str()), (Some(2), "run.sh: --out DIR is required\n"));
    let has_smi = Command::new("nvidia-smi").arg("-L").output().is_ok_and(|o| o.status.success());
    if !has_smi {
        let (code, stderr) = run(&["--out", dir, "--carma", env!("CARGO_BIN_EXE_carma")]);
        assert_eq!(code, Some(2));
        assert!(stderr.starts_with("run.sh: nvidia-smi") && stderr.lines().count() == 1, "{stderr}");
    }
}

/// Goal: one `--query-gpu` field that this `nvidia-smi` does not know must not stop the real
/// run. On the first real GPU (an H200, driver 580) `total_energy_consumption` was unknown and
/// the kit died in its first second; now each field is asked once and a missing one reads
/// "[not a field of this nvidia-smi]". The stand-in refuses that field with exit 2, as the
/// real one did.
#[test]
fn an_unknown_nvidia_smi_field_is_reported_not_fatal() {
    if let Some(program) = missing_prerequisite() {
        return skip(Need::Python3, &format!("the GPU kit needs {program}, which is not installed"));
    }
    let bin = tempfile::tempdir().unwrap();
    let smi = bin.path().join("nvidia-smi");
    std::fs::write(
        &smi,
        "#!/bin/bash\n\
         q=$(printf '%s\\n' \"$@\" | sed -n 's/^--query-gpu=//p')\n\
         case \"$q\" in *total_energy_consumption*) echo 'Field \"total_energy_consumption\" is not a valid field to query.' >&2; exit 2;; esac\n\
         printf '%s\\n' \"$q\" | tr ',' '\\n' | sed 's/.*/7/' | paste -sd, | sed 's/,/, /g'\n",
    )
    .unwrap();
    std::fs::set_permissions(&smi, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", bin.path().display(), std::env::var("PATH").unwrap_or_default());
    let script = "import hw, json; print(json.dumps(hw.Hardware(False, '/nonexistent').smi()))";
    let o = Command::new("python3")
        .args(["-c", script])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/reports/gpu"))
        .env("PATH", path)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let row: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(row["total_energy_consumption"], "[not a field of this nvidia-smi]");
    assert_eq!(row["memory.total"], "7");
    assert_eq!(row["memory.reserved"], "7");
}

/// Goal: the relabel driver (`reports/gpu/relabel.py run --fake`, the part of the H200 relabel
/// that needs no GPU) keeps every worker's lines, retries a model that ran out of memory beside
/// others from that batch size on, keeps why a worker died before its first line, honours the
/// deadline, and `labels` turns the lines into carma-train's `--remeasured` CSV with the
/// context swapped for the A100's. On the H200 both the retry and the early death happened.
#[test]
fn the_relabel_driver_retries_out_of_memory_and_keeps_every_line() {
    if let Some(program) = missing_prerequisite() {
        return skip(Need::Python3, &format!("the relabel driver needs {program}, which is not installed"));
    }
    let dir = tempfile::tempdir().unwrap();
    let worklist = dir.path().join("worklist.csv");
    let mut text = String::from("model,batch_size,file_label_mib,need_mib,tier\n");
    for model in ["m_oom", "m_crash", "m_ok"] {
        for batch in [8, 16, 32, 64] {
            text.push_str(&format!("{model},{batch},2000,3000,spiky\n"));
        }
    }
    std::fs::write(&worklist, text).unwrap();
    let out = dir.path().join("out");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/reports/gpu/relabel.py");
    let o = Command::new("python3")
        .arg(script)
        .args(["run", "--worklist", worklist.to_str().unwrap(), "--out", out.to_str().unwrap(), "--fake"])
        .args(["--deadline-minutes", "0.5", "--tail-seconds", "5", "--workers", "2"])
        .env("TMPDIR", dir.path())
        .env("RELABEL_FAKE_OOM", "m_oom")
        .env("RELABEL_FAKE_CRASH", "m_crash")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let lines: Vec<Value> = std::fs::read_to_string(out.join("relabel.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let of = |model: &str| lines.iter().filter(|l| l["model"] == model).collect::<Vec<_>>();
    // m_oom: 8 and 16 measured, out of memory at 32, then 32 and 64 again with more room.
    let oom = of("m_oom");
    let got: Vec<(u64, bool, bool)> = oom
        .iter()
        .map(|l| (l["batch"].as_u64().unwrap(), l["ok"].as_bool().unwrap(), l["alone"].as_bool().unwrap()))
        .collect();
    assert_eq!(
        got,
        vec![(8, true, false), (16, true, false), (32, false, false), (32, true, true), (64, true, true)]
    );
    let crash = of("m_crash");
    assert_eq!(crash.len(), 1);
    assert_eq!(crash[0]["error"], "worker exited 1: Traceback: ImportError: fake");
    assert_eq!(of("m_ok").len(), 4);
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("relabel-summary.json")).unwrap()).unwrap();
    assert_eq!((summary["models_done"].as_u64(), summary["retried"].as_u64()), (Some(3), Some(1)));
    let labels = dir.path().join("labels.csv");
    let o = Command::new("python3")
        .arg(script)
        .args(["labels", "--out", labels.to_str().unwrap(), out.join("relabel.jsonl").to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let csv = std::fs::read_to_string(&labels).unwrap();
    // The fake worker reports 500 MiB of context and 500 + batch in use: 1,443 + batch here.
    assert!(csv.starts_with(
        "model,batch_size,h200_used_mib,h200_context_mib,peak_reserved_mib,a100_equivalent_mib,alone\n"
    ));
    assert!(csv.contains("\nm_oom,32,532,500,32,1475,True\n"), "{csv}");
    assert!(csv.contains("\nm_ok,8,508,500,8,1451,False\n"), "{csv}");
    assert_eq!(csv.lines().count(), 1 + 4 + 4);
}
