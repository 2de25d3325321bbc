//! `[metrics] textfile`: each real `carma tick` writes the queue's figures for node_exporter's
//! textfile collector. Method: a queue with two fake A100s (one with 1234 MiB in use), a held,
//! a running, a finished and a cancelled task, real ticks; the file is read by
//! `prometheus-parse`, a Prometheus text-format parser, and its values compared with what the
//! queue and the fake GPUs hold.

mod common;

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::{TestHome, assert_error};
use prometheus_parse::{Scrape, Value};

const GPUS: &str = r#"[
  {"uuid": "GPU-fake-0000", "name": "A100-SXM4-40GB", "memory_total_mib": 40960, "memory_used_mib": 1234, "sm_active": 0.25, "power_w": 88.5, "energy_mj": 123456789},
  {"uuid": "GPU-fake-0001", "name": "A100-SXM4-40GB", "memory_total_mib": 40960, "memory_used_mib": 0, "sm_active": 0.0}
]"#;

fn home_with_metrics(textfile: &Path, mapping: &Path) -> TestHome {
    let home = TestHome::new();
    std::fs::write(home.gpus_file(), GPUS).unwrap();
    home.set_config(&format!(
        "[tick]\ngpus = \"fake:{}\"\n\n[metrics]\ntextfile = \"{}\"\njob-mapping-dir = \"{}\"\n",
        home.gpus_file().display(),
        textfile.display(),
        mapping.display()
    ));
    home
}

fn scrape(path: &Path) -> Scrape {
    let text = std::fs::read_to_string(path).expect("the tick wrote the metrics file");
    Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).expect("Prometheus text format")
}

/// The value of `metric` with exactly `labels` among its labels.
fn value(scrape: &Scrape, metric: &str, labels: &[(&str, &str)]) -> f64 {
    let found: Vec<f64> = scrape
        .samples
        .iter()
        .filter(|s| s.metric == metric && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match &s.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
            other => panic!("{metric} is not a single value: {other:?}"),
        })
        .collect();
    assert_eq!(found.len(), 1, "{metric} {labels:?}: {found:?}");
    found[0]
}

fn wait_until_ended(home: &TestHome, id: &str) {
    for _ in 0..100 {
        let out = home.ok(&["show", id, "--json"]);
        let status = serde_json::from_str::<serde_json::Value>(&out).unwrap()["task"]["status"].clone();
        if status == "Finished" {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(home.run(&["tick"]).status.success());
    }
    panic!("{id} never finished");
}

#[test]
fn each_tick_writes_the_queue_and_gpus_in_prometheus_text() {
    let scratch = tempfile::tempdir().unwrap();
    let textfile = scratch.path().join("carma.prom");
    let mapping = scratch.path().join("map");
    std::fs::create_dir(&mapping).unwrap();
    // A link where the file goes: root replaces it, never writes through it.
    let elsewhere = scratch.path().join("elsewhere");
    std::fs::write(&elsewhere, "keep").unwrap();
    std::os::unix::fs::symlink(&elsewhere, &textfile).unwrap();
    let home = home_with_metrics(&textfile, &mapping);

    let quick = home.ok(&["submit", "--parsable", "--name", "quick", "--", "true"]).trim().to_string();
    assert!(home.run(&["tick"]).status.success());
    wait_until_ended(&home, &quick);
    let long = home.ok(&["submit", "--parsable", "--name", "long", "--mem", "4GiB", "--", "sleep", "60"]);
    let long = long.trim().to_string();
    home.ok(&["submit", "--parsable", "--hold", "--name", "held", "--", "true"]);
    let gone =
        home.ok(&["submit", "--parsable", "--hold", "--name", "gone", "--", "true"]).trim().to_string();
    home.ok(&["cancel", &gone]);
    assert!(home.run(&["tick"]).status.success());

    assert_eq!(std::fs::read_to_string(&elsewhere).unwrap(), "keep", "the link's target is untouched");
    let meta = std::fs::symlink_metadata(&textfile).unwrap();
    assert!(meta.file_type().is_file(), "the link was replaced by the file");
    assert_eq!(meta.permissions().mode() & 0o777, 0o644);

    let scrape = scrape(&textfile);
    let tasks = |state: &str| value(&scrape, "carma_tasks", &[("state", state)]);
    assert_eq!(
        [
            tasks("pending"),
            tasks("running") + tasks("placed"),
            tasks("finished"),
            tasks("cancelled"),
            tasks("failed")
        ],
        [1.0, 1.0, 1.0, 1.0, 0.0]
    );
    // SAFETY: geteuid cannot fail.
    let me = match unsafe { libc::geteuid() } {
        0 => "root".to_string(),
        uid => std::env::var("USER").unwrap_or_else(|_| uid.to_string()),
    };
    assert_eq!(value(&scrape, "carma_pending_tasks", &[("user", &me)]), 1.0);
    let gpu0 = [("gpu", "0"), ("uuid", "GPU-fake-0000")];
    assert_eq!(value(&scrape, "carma_gpu_memory_used_bytes", &gpu0), 1234.0 * 1048576.0);
    assert_eq!(value(&scrape, "carma_gpu_memory_total_bytes", &gpu0), 40960.0 * 1048576.0);
    assert_eq!(value(&scrape, "carma_gpu_sm_active_ratio", &gpu0), 0.25);
    assert_eq!(value(&scrape, "carma_gpu_power_watts", &gpu0), 88.5);
    assert_eq!(value(&scrape, "carma_gpu_energy_joules_total", &gpu0), 123456.789);
    assert_eq!(value(&scrape, "carma_placements_total", &[]), 2.0);
    assert_eq!(value(&scrape, "carma_oom_total", &[]), 0.0);
    assert!(value(&scrape, "carma_tick_duration_seconds", &[]) > 0.0);
    let wait = scrape.samples.iter().find(|s| s.metric == "carma_wait_seconds").expect("the wait histogram");
    match &wait.value {
        Value::Histogram(buckets) => {
            let inf = buckets.iter().find(|b| b.less_than.is_infinite()).expect("+Inf bucket");
            assert_eq!(inf.count, 2.0, "two tasks were placed: {buckets:?}");
        }
        other => panic!("carma_wait_seconds is a histogram: {other:?}"),
    }
    let types: HashMap<&str, usize> = ["carma_tasks", "carma_oom_total", "carma_wait_seconds"]
        .iter()
        .map(|name| {
            (*name, std::fs::read_to_string(&textfile).unwrap().matches(&format!("# TYPE {name} ")).count())
        })
        .collect();
    assert!(types.values().all(|count| *count == 1), "{types:?}");

    // dcgm-exporter's mapping: the running task on its GPU, the other GPU's file empty.
    let on_gpu: Vec<String> =
        (0..2).map(|index| std::fs::read_to_string(mapping.join(index.to_string())).unwrap()).collect();
    assert_eq!(on_gpu.iter().filter(|text| text.as_str() == format!("{long}\n")).count(), 1, "{on_gpu:?}");
    assert_eq!(on_gpu.iter().filter(|text| text.is_empty()).count(), 1, "{on_gpu:?}");
    home.ok(&["cancel", &long]);
    assert!(home.run(&["tick"]).status.success());
}

#[test]
fn a_relative_textfile_is_refused_with_the_key() {
    let home = TestHome::new();
    home.set_config("[tick]\ngpus = \"none\"\n\n[metrics]\ntextfile = \"carma.prom\"\n");
    let out = home.run(&["tick"]);
    let config = home.path().join("config.toml");
    assert_error(
        &out,
        2,
        &format!(
            "{}: [metrics] textfile \"carma.prom\" is not an absolute path; fix the file (defaults are documented in it after `carma init`)",
            config.display()
        ),
    );
}

#[test]
fn metrics_are_off_by_default() {
    let home = TestHome::new();
    let text = std::fs::read_to_string(home.path().join("config.toml")).unwrap();
    assert!(!text.contains("[metrics]"), "the test home's config is its own");
    let init = TestHome::uninitialised();
    init.ok(&["init"]);
    let written = std::fs::read_to_string(init.path().join("config.toml")).unwrap();
    assert!(written.contains("[metrics]\n# Prometheus text file"), "{written}");
    assert!(written.contains("\n# textfile = \"\"\n"), "off unless set: {written}");
}

/// A GPU with MIG on (index 0, UUID sorting last) and a plain one (index 1, UUID sorting
/// first).
const MIG_GPUS: &str = r#"[
  {"uuid": "GPU-z-h100", "name": "H100", "memory_total_mib": 81559, "memory_used_mib": 0,
   "mig_instances": [
     {"uuid": "MIG-z-h100-0", "profile": "3g.40gb", "memory_total_mib": 40192, "memory_used_mib": 0},
     {"uuid": "MIG-z-h100-1", "profile": "1g.10gb", "memory_total_mib": 9856, "memory_used_mib": 0}]},
  {"uuid": "GPU-a-a100", "name": "A100", "memory_total_mib": 40960, "memory_used_mib": 0, "sm_active": 0.0}
]"#;

/// Issue 33, defects 2 and 4: a task a real tick placed on a MIG instance is counted in that
/// instance's `carma_gpu_tasks` series (before: in none), with carma's reservation, and the
/// GPUs come by index, each instance after its GPU (before: by UUID).
#[test]
fn a_task_on_a_mig_instance_has_its_series_and_gpus_come_by_index() {
    let scratch = tempfile::tempdir().unwrap();
    let textfile = scratch.path().join("carma.prom");
    let mapping = scratch.path().join("map");
    std::fs::create_dir(&mapping).unwrap();
    let home = home_with_metrics(&textfile, &mapping);
    std::fs::write(home.gpus_file(), MIG_GPUS).unwrap();
    let id = home
        .ok(&["submit", "--parsable", "--mem", "4GiB", "--mig-profile", "1g.10gb", "--", "sleep", "60"])
        .trim()
        .to_string();
    assert!(home.run(&["tick"]).status.success());
    let scrape = scrape(&textfile);
    let instance = [("gpu", "0"), ("mig", "1"), ("uuid", "MIG-z-h100-1"), ("profile", "1g.10gb")];
    assert_eq!(value(&scrape, "carma_gpu_tasks", &instance), 1.0, "{id} is on GPU0/mig1");
    assert_eq!(value(&scrape, "carma_gpu_memory_reserved_bytes", &instance), 4.0 * 1073741824.0);
    assert_eq!(value(&scrape, "carma_gpu_tasks", &[("uuid", "GPU-z-h100")]), 0.0);
    let text = std::fs::read_to_string(&textfile).unwrap();
    let order: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("carma_gpu_tasks{"))
        .filter_map(|l| l.split("uuid=\"").nth(1)?.split('"').next())
        .collect();
    assert_eq!(order, ["GPU-z-h100", "MIG-z-h100-0", "MIG-z-h100-1", "GPU-a-a100"]);
    home.ok(&["cancel", &id]);
    assert!(home.run(&["tick"]).status.success());
}
