//! A machine without an NVIDIA driver: the tick says so once, in one clear line, and keeps
//! ingesting the spool.

mod common;

use common::{TestHome, stderr};

#[test]
fn tick_without_driver_reports_once_and_keeps_ingesting() {
    if carma::gpu::NvmlProbe::init().is_ok() {
        // On a GPU machine the NVML path is exercised instead; nothing to check here.
        return common::skip::skip(common::skip::Need::NoNvml, "NVML answers on this machine");
    }
    let home = TestHome::new();
    home.set_config("[tick]\ngpus = \"nvml\"\n");
    let id = home.ok(&["submit", "--parsable", "--gpus", "2", "--", "true"]).trim().to_string();
    let first = home.run(&["tick"]);
    assert!(first.status.success());
    let line = stderr(&first);
    assert!(line.starts_with("carma: no NVIDIA driver found ("), "{line}");
    assert!(line.ends_with("carma keeps working on the spool without GPUs\n"), "{line}");
    assert_eq!(line.lines().count(), 1);
    let second = home.run(&["tick"]);
    assert_eq!(stderr(&second), "", "said once, not every tick");
    let kinds: Vec<String> = home.events().iter().map(|e| e["kind"].as_str().unwrap().to_string()).collect();
    assert_eq!(kinds, ["GpuProbeStatus", "Submitted", "Pending", "TickCompleted", "TickCompleted"]);
    let events = home.events();
    assert!(
        events[2]["data"]["reason"]
            .as_str()
            .unwrap()
            .starts_with("no GPUs available: no NVIDIA driver found ("),
        "the waiting task says why: {}",
        events[2]
    );
    let queue: serde_json::Value = serde_json::from_str(&home.ok(&["queue", "--json"])).unwrap();
    assert_eq!(
        queue["tasks"][0]["id"],
        id.as_str(),
        "a 2-GPU task is queued, not rejected, while GPUs are unknown"
    );
}

#[test]
fn unknown_gpu_source_in_config_is_a_usage_error() {
    let home = TestHome::new();
    home.set_config("[tick]\ngpus = \"cuda\"\n");
    let out = home.run(&["tick"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
}
