//! A fake two-GPU machine for end-to-end tests: fake GPUs from a file, real supervisors and
//! real job processes.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::TestHome;

/// Two 40 GiB GPUs, nearly full (40000 MiB in use each): what a real out-of-memory looks like.
pub const TWO_A100_FULL: &str = r#"[
  {"uuid": "GPU-fake-0000", "name": "A100-SXM4-40GB", "memory_total_mib": 40960, "memory_used_mib": 40000, "sm_active": 0.0},
  {"uuid": "GPU-fake-0001", "name": "A100-SXM4-40GB", "memory_total_mib": 40960, "memory_used_mib": 40000, "sm_active": 0.0}
]"#;

/// Two 40 GiB GPUs, idle.
pub const TWO_A100: &str = r#"[
  {"uuid": "GPU-fake-0000", "name": "A100-SXM4-40GB", "memory_total_mib": 40960, "memory_used_mib": 0, "sm_active": 0.0},
  {"uuid": "GPU-fake-0001", "name": "A100-SXM4-40GB", "memory_total_mib": 40960, "memory_used_mib": 0, "sm_active": 0.0}
]"#;

impl TestHome {
    /// An initialised home whose tick reads `gpus_json` and uses `policy`.
    pub fn with_fake_gpus(gpus_json: &str, policy: &str) -> TestHome {
        TestHome::new().fake_gpus(gpus_json, policy)
    }

    /// [`TestHome::with_fake_gpus`] in a folder under `parent`.
    pub fn with_fake_gpus_in(parent: &Path, gpus_json: &str, policy: &str) -> TestHome {
        TestHome::new_in(parent).fake_gpus(gpus_json, policy)
    }

    fn fake_gpus(self, gpus_json: &str, policy: &str) -> TestHome {
        let file = self.gpus_file();
        std::fs::write(&file, gpus_json).expect("write fake gpus");
        self.set_config(&format!(
            "[tick]\ngpus = \"fake:{}\"\n\n[sched]\npolicy = \"{policy}\"\n",
            file.display()
        ));
        self
    }

    pub fn gpus_file(&self) -> PathBuf {
        self.path().join("gpus.json")
    }

    /// Submits `sh -c SCRIPT` with the given memory and returns the id.
    pub fn submit_sh(&self, name: &str, mem: Option<&str>, script: &str) -> String {
        let mut args = vec!["submit", "--parsable", "--name", name];
        if let Some(mem) = mem {
            args.extend(["--mem", mem]);
        }
        args.extend(["--", "sh", "-c", script]);
        self.ok(&args).trim().to_string()
    }

    /// Ticks every 200 ms until every task is finished, failed or cancelled.
    pub fn tick_until_done(&self, limit: Duration) -> serde_json::Value {
        let started = Instant::now();
        loop {
            self.ok(&["tick"]);
            let queue: serde_json::Value =
                serde_json::from_str(&self.ok(&["queue", "--all", "--json"])).unwrap();
            let done = queue["tasks"].as_array().unwrap().iter().all(|t| {
                matches!(t["state"].as_str(), Some("Finished" | "Failed" | "Timeout" | "Cancelled"))
            });
            if done {
                return queue;
            }
            assert!(started.elapsed() < limit, "tasks did not finish within {limit:?}: {queue:#}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Ticks until the tick has seen attempt `attempt` of `id` end, with the fake GPUs reading
    /// `full_json` from the moment its exit record exists until then, and `idle_json` after: an
    /// out-of-memory message needs the GPU near full near the attempt's end to earn a recovery
    /// (issue 32), and the recovery needs an idle GPU after. Returns the task's events.
    pub fn tick_oom_on_full_gpus(
        &self,
        id: &str,
        attempt: u32,
        full_json: &str,
        idle_json: &str,
    ) -> Vec<serde_json::Value> {
        let exit = self.path().join(format!("runs/{id}/{attempt}/exit.json"));
        let started = Instant::now();
        while !exit.exists() {
            assert!(started.elapsed() < Duration::from_secs(30), "no {}", exit.display());
            std::thread::sleep(Duration::from_millis(50));
        }
        std::fs::write(self.gpus_file(), full_json).expect("write fake gpus");
        let ended = |events: &[serde_json::Value]| {
            events.iter().any(|e| matches!(e["kind"].as_str(), Some("OomDetected" | "Failed")))
        };
        let mut events = Vec::new();
        while !ended(&events) {
            assert!(started.elapsed() < Duration::from_secs(30), "{id} attempt {attempt} not seen ending");
            self.ok(&["tick"]);
            events = self.task_events(id);
        }
        std::fs::write(self.gpus_file(), idle_json).expect("write fake gpus");
        events
    }

    /// The events about one task, in order.
    pub fn task_events(&self, id: &str) -> Vec<serde_json::Value> {
        self.events().into_iter().filter(|e| e["task"] == id).collect()
    }
}

/// The kinds of `events`, in order.
pub fn kinds(events: &[serde_json::Value]) -> Vec<String> {
    events.iter().map(|e| e["kind"].as_str().unwrap().to_string()).collect()
}
