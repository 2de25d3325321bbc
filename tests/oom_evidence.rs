//! Issue 32: a job's word is a claim. End to end with real `carma tick`s, real supervisors and
//! real job processes on a fake GPU whose file says how much memory is in use.
//!
//! - An out-of-memory line with little GPU memory in use is an ordinary failure, whose reason
//!   gives the readings; the same line with the GPU near full earns the recovery queue.
//! - A job that asks to be requeued (exit 99) forever stops at `[limits] requeues-max`.
//! - `carma submit` refuses more retries than `[limits] retries-max`.
//!
//! Each test fails on the code before issue 32: the first went to recovery, the loop never
//! ended, the submission was taken.

mod common;

use std::time::{Duration, Instant};

use common::TestHome;
use common::cluster::kinds;

/// One 40 GiB GPU with `used_mib` in use.
fn one_gpu(used_mib: u64) -> String {
    format!(
        r#"[{{"uuid": "GPU-fake-0000", "name": "A100-SXM4-40GB", "memory_total_mib": 40960, "memory_used_mib": {used_mib}, "sm_active": 0.0}}]"#
    )
}

/// A home on [`one_gpu`] with `used_mib` in use, the magm policy and `extra` config.
fn home_with(used_mib: u64, extra: &str) -> TestHome {
    let home = TestHome::new();
    std::fs::write(home.gpus_file(), one_gpu(used_mib)).expect("write fake gpus");
    home.set_config(&format!(
        "[tick]\ngpus = \"fake:{}\"\n\n[sched]\npolicy = \"magm\"\n{extra}",
        home.gpus_file().display()
    ));
    home
}

/// Ticks every 200 ms until `id` has an event of one of `kinds_wanted`.
fn tick_until_event(
    home: &TestHome,
    id: &str,
    kinds_wanted: &[&str],
    limit: Duration,
) -> Vec<serde_json::Value> {
    let started = Instant::now();
    loop {
        home.ok(&["tick"]);
        let events = home.task_events(id);
        if events.iter().any(|e| kinds_wanted.contains(&e["kind"].as_str().unwrap_or(""))) {
            return events;
        }
        assert!(started.elapsed() < limit, "no {kinds_wanted:?} for {id} within {limit:?}: {events:#?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

const FAKE_OOM: &str =
    "echo 'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB' >&2; exit 1";

/// Goal: an out-of-memory line printed while the GPU holds 1200 of 40960 MiB, by a job that
/// declared 8 GiB and was never seen using GPU memory, is an ordinary failure: Failed at once,
/// no OomDetected, no recovery, with the readings in the reason.
#[test]
fn an_oom_line_without_evidence_fails_with_the_readings() {
    let home = home_with(1200, "");
    let id = home.submit_sh("fake-oom", Some("8GiB"), FAKE_OOM);
    let queue = home.tick_until_done(Duration::from_secs(30));
    let task = queue["tasks"].as_array().unwrap().iter().find(|t| t["id"] == id.as_str()).unwrap();
    assert_eq!(task["state"], "Failed");
    assert_eq!(task["attempts"], 1);
    let events = home.task_events(&id);
    assert_eq!(kinds(&events), ["Submitted", "Placed", "Launched", "Failed"]);
    let failed = &events[3]["data"];
    assert_eq!(failed["outcome"], "exit 1");
    assert_eq!(
        failed["reason"],
        "out-of-memory message without evidence: GPU0 had 1200 of 40960 MiB used at the end (95 % of a GPU \
         would be evidence); the job's own memory was never seen, against its 8192 MiB share (90 % would be); \
         not retried"
    );
}

/// Goal: the same line while the GPU was near full (40000 of 40960 MiB) near the attempt's
/// end is corroborated: OomDetected, Requeued into the recovery queue, and the retry runs
/// alone once the GPU is free again.
#[test]
fn an_oom_line_with_the_gpu_near_full_goes_to_recovery() {
    let home = home_with(0, "");
    let script = format!("if [ \"$CARMA_ATTEMPT\" = 1 ]; then sleep 1; {FAKE_OOM}; fi; echo recovered");
    let id = home.submit_sh("real-oom", Some("8GiB"), &script);
    home.ok(&["tick"]);
    assert_eq!(kinds(&home.task_events(&id)), ["Submitted", "Placed", "Launched"]);
    // The GPU fills up while attempt 1 runs, until the tick has seen its end.
    std::fs::write(home.gpus_file(), one_gpu(40_000)).unwrap();
    let events = tick_until_event(&home, &id, &["OomDetected", "Failed"], Duration::from_secs(30));
    std::fs::write(home.gpus_file(), one_gpu(0)).unwrap();
    assert_eq!(kinds(&events)[3..5], ["OomDetected", "Requeued"], "{events:#?}");
    let requeued = &events[4]["data"];
    assert_eq!(requeued["recovery"], true);
    assert_eq!(requeued["recovery_mode"], "exclusive");
    let queue = home.tick_until_done(Duration::from_secs(30));
    let task = queue["tasks"].as_array().unwrap().iter().find(|t| t["id"] == id.as_str()).unwrap();
    assert_eq!(task["state"], "Finished");
    assert_eq!(task["attempts"], 2);
}

/// Goal: a job that always exits 99 is requeued `requeues-max` times (2 here), then its task
/// fails with a reason naming the bound, instead of running forever.
#[test]
fn a_requeue_loop_stops_at_requeues_max() {
    let home = home_with(0, "\n[limits]\nrequeues-max = 2\n");
    let id = home.submit_sh("loop", None, "exit 99");
    let queue = home.tick_until_done(Duration::from_secs(30));
    let task = queue["tasks"].as_array().unwrap().iter().find(|t| t["id"] == id.as_str()).unwrap();
    assert_eq!(task["state"], "Failed");
    assert_eq!(task["attempts"], 3);
    let events = home.task_events(&id);
    assert_eq!(events.iter().filter(|e| e["kind"] == "Requeued").count(), 2, "{events:#?}");
    let failed = events.last().unwrap();
    assert_eq!(failed["kind"], "Failed");
    assert_eq!(failed["data"]["outcome"], "exit 99");
    assert_eq!(failed["data"]["reason"], "requeued 2 times; [limits] requeues-max is 2");
}

/// Goal: `carma submit` refuses more retries than the administrator allows, in one line with
/// exit code 2, and takes the bound itself.
#[test]
fn submit_refuses_more_retries_than_retries_max() {
    let home = home_with(0, "\n[limits]\nretries-max = 4\n");
    common::assert_error(
        &home.run(&["submit", "--max-retries", "5", "--", "true"]),
        2,
        "command line: max_retries = 5 is more than this queue allows ([limits] retries-max is 4); ask for at \
         most 4",
    );
    home.ok(&["submit", "--max-retries", "4", "--", "true"]);
}
