//! Issue 23, efficiency: energy per task, from the journal's GPU readings.
//!
//! Goal: two tasks collocated on one GPU each get half of every energy-counter delta the tick
//! journals while both run, so their energies sum to the GPU's delta; `show` prints it as
//! an efficiency line and `show --json` carries it per attempt.
//! Method: the real binary on one fake GPU whose energy counter the test raises between ticks,
//! real job processes.

mod common;

use std::time::Duration;

use common::TestHome;

fn one_gpu(energy_mj: u64) -> String {
    format!(
        r#"[{{"uuid": "GPU-fake-0000", "name": "A100-SXM4-40GB", "memory_total_mib": 40960, "memory_used_mib": 0, "sm_active": 0.0, "energy_mj": {energy_mj}}}]"#
    )
}

fn attempt_energy_mj(home: &TestHome, id: &str) -> f64 {
    let shown: serde_json::Value = serde_json::from_str(&home.ok(&["show", id, "--json"])).unwrap();
    shown["task"]["attempts"].as_array().unwrap().iter().map(|a| a["energy_mj"].as_f64().unwrap()).sum()
}

#[test]
fn collocated_tasks_share_their_gpus_energy() {
    let home = TestHome::with_fake_gpus(&one_gpu(1_000_000), "magm");
    let a = home.submit_sh("a", Some("1GiB"), "sleep 6");
    let b = home.submit_sh("b", Some("1GiB"), "sleep 6");
    home.ok(&["tick"]);
    let queue: serde_json::Value = serde_json::from_str(&home.ok(&["queue", "--json"])).unwrap();
    let running = queue["tasks"].as_array().unwrap().iter().filter(|t| t["state"] == "Running").count();
    assert_eq!(running, 2, "both launched on the one GPU: {queue:#}");
    // Two readings while both run: +600 J, then +400 J.
    std::fs::write(home.gpus_file(), one_gpu(1_600_000)).unwrap();
    home.ok(&["tick"]);
    std::fs::write(home.gpus_file(), one_gpu(2_000_000)).unwrap();
    home.ok(&["tick"]);
    home.tick_until_done(Duration::from_secs(60));
    let (ea, eb) = (attempt_energy_mj(&home, &a), attempt_energy_mj(&home, &b));
    assert!((ea + eb - 1_000_000.0).abs() < 1.0, "{ea} + {eb} is the GPU's delta while both ran");
    assert!((ea - eb).abs() < 1.0, "an equal split: {ea} vs {eb}");
    let shown = home.ok(&["show", &a]);
    let line = shown.lines().find(|l| l.starts_with("energy")).unwrap_or_else(|| panic!("{shown}"));
    assert_eq!(line, "energy      500.0 J (0.14 Wh), its equal share of each GPU it shared");
}
