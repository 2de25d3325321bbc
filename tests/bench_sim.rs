//! `carma bench sim` runs end to end on a tiny input. Speed is measured by the command, never
//! asserted here. Method: 20 synthetic tasks (the built-in profiles, since --shared points
//! nowhere), a 2,000-event journal for the report, one run each, JSON output.

mod common;

use common::TestHome;

#[test]
fn bench_sim_smoke() {
    let home = TestHome::new();
    // The simulated tick fsyncs three times per tick: keep the scratch in memory if possible.
    let shm = std::path::Path::new("/dev/shm");
    let scratch = if shm.is_dir() { tempfile::tempdir_in(shm) } else { tempfile::tempdir() }.unwrap();
    let missing = home.path().join("no-traces");
    let out = home.ok(&[
        "bench",
        "sim",
        "--shared",
        missing.to_str().unwrap(),
        "--tasks",
        "20",
        "--events",
        "2000",
        "--runs",
        "1",
        "--dir",
        scratch.path().to_str().unwrap(),
        "--json",
    ]);
    let result: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        result["reference_skipped"].as_str().unwrap().ends_with("workload_profiles.csv not found"),
        "{result:#}"
    );
    assert_eq!(result["synthetic"]["tasks"], 20);
    assert_eq!(result["synthetic"]["profiles"], "built-in");
    assert!(result["synthetic"]["cold_load_ms"].as_f64().unwrap() >= 0.0, "{result:#}");
    let buckets = result["synthetic"]["buckets"].as_array().unwrap();
    let ticks: u64 = buckets.iter().map(|b| b["ticks"].as_u64().unwrap()).sum();
    assert!(ticks > 0 && ticks <= result["synthetic"]["ticks"].as_u64().unwrap(), "{result:#}");
    assert!(result["report"]["events"].as_u64().unwrap() >= 2000, "{result:#}");
    let leftovers: Vec<_> = std::fs::read_dir(scratch.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("carma-bench"))
        .collect();
    assert!(leftovers.is_empty(), "scratch removed: {leftovers:?}");
}
