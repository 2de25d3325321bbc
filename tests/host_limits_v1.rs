//! Host limits on a hybrid cgroup host (cgroup v2 without the memory controller, cgroup v1
//! with it), through the real tick, real supervisors and real jobs.
//!
//! Goal: a job with `--host-mem` runs inside its own v1 memory cgroup,
//! `carma.jobs/carma-task-ID-N`, holding exactly that limit with swap shut; when its
//! supervisor is SIGKILLed, the tick's reaping removes that cgroup before the retry, and a
//! cancelled attempt's cgroup is gone once it ends: no folder is left behind.
//! Method: root, `--host-mem 64M -- sleep 60` on fake GPUs, the cgroup's files read from
//! the v1 hierarchy while it runs; skipped (saying why) where carma does not use cgroup v1.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::TestHome;
use common::cluster::TWO_A100;
use common::skip::{Need, is_root, skip};

/// The v1 memory cgroup of the task's attempt, where the tick's supervisors make it (they are
/// in the test's own v1 cgroup, as the tick is).
fn attempt_cgroup(id: &str, attempt: u32) -> PathBuf {
    let own = carma::exec::cgroup::own_v1_dir("memory").expect("this process is in a v1 memory cgroup");
    own.join("carma.jobs").join(carma::exec::cgroup::cgroup_name(id, attempt))
}

/// The pid of the supervisor the journal names for the attempt.
fn supervisor_pid(home: &TestHome, id: &str, attempt: u64) -> i32 {
    let events = home.events();
    let launched = events
        .iter()
        .find(|e| e["kind"] == "Launched" && e["data"]["task"] == id && e["data"]["attempt"] == attempt)
        .unwrap_or_else(|| panic!("no Launched {attempt}: {events:?}"));
    launched["data"]["supervisor"]["pid"].as_i64().unwrap() as i32
}

/// Tick until `done` holds, at most 30 s.
fn tick_until(home: &TestHome, what: &str, done: impl Fn() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < Duration::from_secs(30), "not within 30 s: {what}");
        home.ok(&["tick"]);
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_jobs_v1_memory_cgroup_holds_its_limit_and_is_gone_after_a_killed_supervisor_and_a_cancel() {
    if !is_root() {
        return skip(Need::Root, "only a root supervisor makes a job's cgroups");
    }
    if !carma::exec::cgroup::uses_v1("memory") {
        return skip(
            Need::CgroupV1Memory,
            "cgroup v2 holds the memory controller here, or no v1 hierarchy does",
        );
    }
    let home = TestHome::with_fake_gpus(TWO_A100, "magm");
    let id = home.ok(&["submit", "--parsable", "--host-mem", "64M", "--", "sleep", "60"]).trim().to_string();
    home.ok(&["tick"]);
    let first = attempt_cgroup(&id, 1);
    let read = |file: &str| std::fs::read_to_string(first.join(file)).map(|t| t.trim().to_string());
    let started = Instant::now();
    while read("cgroup.procs").unwrap_or_default().is_empty() {
        assert!(started.elapsed() < Duration::from_secs(10), "the job never entered {}", first.display());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(read("cgroup.procs").unwrap().lines().count(), 1, "the job alone, moved in before it execs");
    assert_eq!(read("memory.limit_in_bytes").unwrap(), "67108864", "{}", first.display());
    if first.join("memory.memsw.limit_in_bytes").exists() {
        assert_eq!(read("memory.memsw.limit_in_bytes").unwrap(), "67108864", "no swap to escape to");
    }

    let supervisor = supervisor_pid(&home, &id, 1);
    // SAFETY: kill has no memory effects; the pid is the supervisor the journal names.
    assert_eq!(unsafe { libc::kill(supervisor, libc::SIGKILL) }, 0);
    tick_until(&home, "attempt 1's cgroup removed by the reaping", || !first.exists());
    let second = attempt_cgroup(&id, 2);
    tick_until(&home, "attempt 2 in its own cgroup", || second.exists());

    home.ok(&["cancel", &id]);
    tick_until(&home, "attempt 2's cgroup removed at its end", || !second.exists());
}
