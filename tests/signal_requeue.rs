//! Issue 23: the time-limit warning (`--signal`), user requeue (exit 99 and `carma requeue`)
//! and `--begin`, end to end as two real users on a root-owned queue.
//!
//! Goal: `--signal USR1@5` reaches a job with a 15 s limit about 5 s before carma stops it; a
//! job that exits 99 is queued again and runs again without using a retry; `carma requeue`
//! stops a running task and queues it again, for its owner and nobody else; a `--begin` task
//! waits with a BeginTime reason; efficiency lines follow the end; each refusal is one line
//! with its exit code.
//! Method: the real binary, real `carma tick`s, real job processes run as throw-away users
//! (`useradd`; the tests that need them print "skipped" elsewhere).

mod common;

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use common::TestHome;
use common::cluster::TWO_A100;
use common::users::{SharedQueue, ThrowawayUser, skip_without_users};
use serde_json::Value;

/// The shared queue, with the job scripts where its users can run them.
struct Lab(SharedQueue);

impl std::ops::Deref for Lab {
    type Target = SharedQueue;
    fn deref(&self) -> &SharedQueue {
        &self.0
    }
}

impl Lab {
    fn new() -> Lab {
        Lab(SharedQueue::new())
    }

    /// A job script anyone may read and run.
    fn script(&self, name: &str, text: &str) -> String {
        let path = self.home.path().join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path.to_str().unwrap().to_string()
    }

    fn task(&self, id: &str) -> Value {
        let queue = self.queue();
        queue["tasks"].as_array().unwrap().iter().find(|t| t["id"] == id).cloned().unwrap()
    }

    /// Ticks until `done` holds for the task, at most `limit`.
    fn tick_until(&self, id: &str, limit: Duration, done: impl Fn(&Value) -> bool) -> Value {
        let started = Instant::now();
        loop {
            self.home.ok(&["tick"]);
            let task = self.task(id);
            if done(&task) {
                return task;
            }
            assert!(started.elapsed() < limit, "not done within {limit:?}: {task:#}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// `carma events` lines about the task.
    fn events(&self, id: &str) -> String {
        self.home.ok(&["events", "--task", id])
    }
}

/// The line of `show` that starts with `label`.
fn shown(home: &TestHome, id: &str, label: &str) -> String {
    let text = home.ok(&["show", id]);
    text.lines()
        .find(|l| l.starts_with(label))
        .unwrap_or_else(|| panic!("no {label} in:\n{text}"))
        .to_string()
}

const WARNED: &str = "#!/bin/sh
#CARMA --time-limit 15s --signal USR1@5 -J warned
start=$(date +%s)
trap 'echo \"USR1 after $(( $(date +%s) - start )) s\"' USR1
i=0
while [ $i -lt 400 ]; do sleep 0.1; i=$((i + 1)); done
echo never
";

const AGAIN: &str = "#!/bin/sh
#CARMA --max-retries 0 -J again
echo \"attempt $CARMA_ATTEMPT\"
if [ \"$CARMA_ATTEMPT\" = 1 ]; then exit 99; fi
";

const LONG: &str = "#!/bin/sh
#CARMA -J long
echo \"attempt $CARMA_ATTEMPT\"
if [ \"$CARMA_ATTEMPT\" = 1 ]; then exec sleep 60; fi
";

/// The job's warning signal comes about 5 s before its 15 s limit, then carma stops it at the
/// limit; a job that exits 99 runs again and finishes without using a retry (it has none).
#[test]
fn the_signal_comes_before_the_limit_and_exit_99_runs_the_task_again() {
    if skip_without_users() {
        return;
    }
    let lab = Lab::new();
    let alice = ThrowawayUser::create("sig");
    let warned = lab.script("warned.sh", WARNED);
    let again = lab.script("again.sh", AGAIN);
    let warned = lab.ok_as(&alice, &["submit", "--parsable", &warned]).trim().to_string();
    let again = lab.ok_as(&alice, &["submit", "--parsable", &again]).trim().to_string();
    lab.home.ok(&["tick"]);
    assert_eq!(shown(&lab.home, &warned, "signal"), "signal      USR1 5 s before the time limit");

    let done = |t: &Value| matches!(t["state"].as_str(), Some("Finished" | "Failed" | "Timeout"));
    let task = lab.tick_until(&again, Duration::from_secs(60), done);
    assert_eq!(task["state"], "Finished", "{task:#}");
    let events = lab.events(&again);
    assert!(events.contains("attempt 1: exit 99: requeue asked by the job"), "{events}");
    assert!(
        events.contains("to the main queue: requeued by the job (exit 99); not counted as a retry"),
        "{events}"
    );
    assert_eq!(lab.ok_as(&alice, &["logs", "--stdout", &again]), "attempt 2\n");
    assert_eq!(
        shown(&lab.home, &again, "retries"),
        "retries     0 used of 0 (oom 0, lost 0, requeued by the user 1)"
    );

    let task = lab.tick_until(&warned, Duration::from_secs(60), done);
    assert_eq!(task["state"], "Timeout", "stopped at its time limit: Slurm's TIMEOUT; {task:#}");
    let out = lab.ok_as(&alice, &["logs", "--stdout", &warned]);
    let after: u64 = out
        .strip_prefix("USR1 after ")
        .and_then(|rest| rest.strip_suffix(" s\n"))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("one warning line in the job's output: {out:?}"));
    assert!((9..=11).contains(&after), "USR1 came {after} s after the start, not about 10 s: {out:?}");
    assert_eq!(
        shown(&lab.home, &warned, "reason"),
        "reason      stopped at its time limit; raise time_limit and resubmit"
    );
    // Efficiency after the end, as seff.
    let wall = shown(&lab.home, &warned, "wall");
    assert!(wall.starts_with("wall        15s of the 15s limit (10"), "{wall}");
    assert!(shown(&lab.home, &warned, "gpu-hours").starts_with("gpu-hours   0.00"));
}

/// `carma requeue` stops a running task and queues it again, for its owner (through a
/// request) and root; another user is refused with exit 77.
#[test]
fn requeue_stops_a_running_task_and_queues_it_again_for_its_owner_only() {
    if skip_without_users() {
        return;
    }
    let lab = Lab::new();
    let (alice, bob) = (ThrowawayUser::create("rqa"), ThrowawayUser::create("rqb"));
    let long = lab.script("long.sh", LONG);
    let id = lab.ok_as(&alice, &["submit", "--parsable", &long]).trim().to_string();
    lab.tick_until(&id, Duration::from_secs(30), |t| t["state"] == "Running");
    common::assert_error(
        &lab.as_user(&bob, &["requeue", &id]),
        77,
        &format!(
            "cannot requeue task {id} (long): it belongs to {}; only its submitter or root may requeue it",
            alice.name
        ),
    );
    assert_eq!(
        lab.ok_as(&alice, &["requeue", &id]),
        format!("requeue of task {id} (long) requested; the next tick applies it\n")
    );
    let task = lab.tick_until(&id, Duration::from_secs(60), |t| t["state"] == "Finished");
    assert_eq!(task["state"], "Finished");
    let events = lab.events(&id);
    assert!(events.contains(&format!("requeue asked by {}: stopping its attempt", alice.name)), "{events}");
    assert!(
        events.contains(&format!("to the main queue: requeued by {} (carma requeue)", alice.name)),
        "{events}"
    );
    assert_eq!(lab.ok_as(&alice, &["logs", "--stdout", &id]), "attempt 2\n");
    common::assert_error(
        &lab.home.run(&["requeue", &id]),
        2,
        &format!("task {id} (long) has already ended (finished); submit it again instead"),
    );
    // Root writes the journal itself and stops the job at once.
    let id = lab.ok_as(&alice, &["submit", "--parsable", &long]).trim().to_string();
    lab.tick_until(&id, Duration::from_secs(30), |t| t["state"] == "Running");
    assert_eq!(
        lab.home.ok(&["requeue", &id]),
        format!("requeue of task {id} (long): its attempt was sent SIGTERM; the next tick queues it again\n")
    );
    lab.tick_until(&id, Duration::from_secs(60), |t| t["state"] == "Finished");
    let events = lab.events(&id);
    assert!(events.contains("to the main queue: requeued by root (carma requeue)"), "{events}");
}

/// `--begin` holds a task back with a BeginTime reason; bad `--signal` and `--begin` values
/// are refused on one line, exit 2.
#[test]
fn begin_waits_with_its_reason_and_bad_values_are_refused() {
    let home = TestHome::with_fake_gpus(TWO_A100, "magm");
    let id = home.ok(&["submit", "--parsable", "--begin", "now+1hour", "--", "true"]).trim().to_string();
    home.ok(&["tick"]);
    let reason = shown(&home, &id, "reason");
    assert!(reason.starts_with("reason      BeginTime: starts at "), "{reason}");
    assert!(reason.ends_with(" (in 60 min)"), "{reason}");
    common::assert_error(
        &home.run(&["requeue", &id]),
        2,
        &format!("task {id} (true) is waiting already; nothing to requeue"),
    );
    for (args, message) in [
        (
            &["submit", "--signal", "KILL@5", "--", "true"][..],
            "command line: signal \"KILL@5\": unknown signal \"KILL\"; use one of HUP, INT, QUIT, USR1, USR2, ALRM, TERM, CONT, URG",
        ),
        (
            &["submit", "--signal", "USR1@60", "--time-limit", "30s", "--", "true"][..],
            "command line: signal \"USR1@60\" comes 60 s before a time limit of 30s; give a time limit longer than that or fewer seconds",
        ),
        (
            &["submit", "--begin", "tomorrow", "--", "true"][..],
            "command line: begin \"tomorrow\" is not a time; use now+1hour, now+30s, 14:30, 2026-12-01T09:00 or 2026-12-01",
        ),
    ] {
        common::assert_error(&home.run(args), 2, message);
    }
}
