//! Deterministic fault injection against the real tick and real supervisors.
//!
//! Each test stops a tick at a chosen point (CARMA_FAULT), kills a supervisor, or changes
//! the boot id (CARMA_BOOT_ID_PATH), then checks the next ticks recover: no attempt runs
//! twice, a vanished attempt becomes Lost and is requeued, a reboot is noticed.

mod common;

use std::time::Duration;

use common::TestHome;
use common::cluster::{TWO_A100, kinds};

/// A job that counts its starts in `runs.log` next to the home and then sleeps briefly.
fn counting_job(home: &TestHome, seconds: u32) -> String {
    let counter = home.path().join("starts.log");
    format!("echo \"start $CARMA_ATTEMPT\" >> {}; sleep {seconds}", counter.display())
}

fn starts(home: &TestHome) -> Vec<String> {
    std::fs::read_to_string(home.path().join("starts.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

fn tick_with_fault(home: &TestHome, fault: &str) {
    let out = home.cmd().env("CARMA_FAULT", fault).arg("tick").output().unwrap();
    assert_eq!(out.status.code(), Some(86), "the injected crash happened: {}", common::stderr(&out));
}

#[test]
fn tick_killed_between_placed_and_launch_never_launches_twice() {
    let home = TestHome::with_fake_gpus(TWO_A100, "magm");
    let id = home.submit_sh("job", Some("4GiB"), &counting_job(&home, 1));
    tick_with_fault(&home, "crash-after-placed");
    assert_eq!(kinds(&home.task_events(&id)), ["Submitted", "Placed"]);
    assert!(starts(&home).is_empty(), "nothing started before the crash");
    home.tick_until_done(Duration::from_secs(30));
    assert_eq!(starts(&home), ["start 1"], "the job ran exactly once");
    let task_kinds = kinds(&home.task_events(&id));
    assert_eq!(task_kinds, ["Submitted", "Placed", "Launched", "Finished"], "relaunched as the same attempt");
}

#[test]
fn tick_killed_after_launch_adopts_the_running_supervisor() {
    let home = TestHome::with_fake_gpus(TWO_A100, "magm");
    let id = home.submit_sh("job", Some("4GiB"), &counting_job(&home, 2));
    tick_with_fault(&home, "crash-after-launch");
    assert_eq!(kinds(&home.task_events(&id)), ["Submitted", "Placed"], "Launched was never committed");
    home.ok(&["tick"]);
    let events = home.task_events(&id);
    assert_eq!(kinds(&events), ["Submitted", "Placed", "Launched"]);
    assert_eq!(events[2]["data"]["adopted"], true, "the next tick adopts the live supervisor");
    home.tick_until_done(Duration::from_secs(30));
    assert_eq!(starts(&home), ["start 1"], "the job ran exactly once");
}

#[test]
fn a_job_that_ends_before_the_tick_after_a_crash_keeps_its_start() {
    // Goal: a tick that crashed after launching leaves the attempt Placed; when the job ends
    // before the next tick, that tick records Launched, dated at the start exit.json holds,
    // then Finished: `carma show --json` gives the attempt a start and a run time. (Before:
    // Placed then Finished, "launched_ms": null; 87 of 540 tasks in the crash audit.)
    let home = TestHome::with_fake_gpus(TWO_A100, "magm");
    let id = home.submit_sh("job", Some("4GiB"), &counting_job(&home, 0));
    tick_with_fault(&home, "crash-after-launch");
    let exit_json = home.path().join("runs").join(&id).join("1").join("exit.json");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !exit_json.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let exit: serde_json::Value = serde_json::from_slice(&std::fs::read(&exit_json).unwrap()).unwrap();
    home.ok(&["tick"]);
    let events = home.task_events(&id);
    assert_eq!(kinds(&events), ["Submitted", "Placed", "Launched", "Finished"]);
    assert_eq!(events[2]["data"]["adopted"], true);
    let shown: serde_json::Value = serde_json::from_str(&home.ok(&["show", &id, "--json"])).unwrap();
    let attempt = &shown["task"]["attempts"][0];
    assert_eq!(attempt["launched_ms"], exit["started_ms"], "{attempt:#}");
    assert!(attempt["ended_ms"].as_u64() >= exit["ended_ms"].as_u64(), "{attempt:#}");
    let text = home.ok(&["show", &id]);
    assert!(!text.contains("not launched"), "{text}");
    assert!(text.contains("gpu-hours"), "the efficiency lines of a task that ran: {text}");
    assert_eq!(starts(&home), ["start 1"], "the job ran exactly once");
}

#[test]
fn a_second_supervisor_for_the_same_attempt_refuses_to_run_it() {
    // A tick that dies after launching leaves a live supervisor that no Launched records;
    // whatever starts the attempt again, the exclusive claim lets only one supervisor run it.
    let home = TestHome::with_fake_gpus(TWO_A100, "magm");
    let id = home.submit_sh("job", Some("4GiB"), &counting_job(&home, 2));
    tick_with_fault(&home, "crash-after-launch");
    let again = home.cmd().args(["run-task", &id, "--attempt", "1"]).output().unwrap();
    assert_eq!(again.status.code(), Some(1), "a second supervisor refuses a claimed attempt");
    let err = common::stderr(&again);
    assert!(err.starts_with("error: attempt already claimed ("), "{err}");
    home.tick_until_done(Duration::from_secs(30));
    assert_eq!(starts(&home), ["start 1"]);
    assert_eq!(kinds(&home.task_events(&id)), ["Submitted", "Placed", "Launched", "Finished"]);
}

#[test]
fn supervisor_gone_without_exit_record_is_lost_then_requeued() {
    let home = TestHome::with_fake_gpus(TWO_A100, "magm");
    let script = format!("{}; [ \"$CARMA_ATTEMPT\" = 2 ] || sleep 60", counting_job(&home, 0));
    let id = home.submit_sh("job", Some("4GiB"), &script);
    home.ok(&["tick"]);
    let launched = home.task_events(&id).into_iter().find(|e| e["kind"] == "Launched").unwrap();
    let supervisor = launched["data"]["supervisor"]["pid"].as_i64().unwrap() as i32;
    // Once the job has started (on a loaded machine the supervisor's set-up takes a while),
    // SIGKILL the supervisor: no exit record; pdeathsig takes the job down with it.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while starts(&home).is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(starts(&home), ["start 1"], "attempt 1 started");
    unsafe { libc::kill(supervisor, libc::SIGKILL) };
    std::thread::sleep(Duration::from_millis(300));
    home.tick_until_done(Duration::from_secs(30));
    let events = home.task_events(&id);
    let lost = events.iter().find(|e| e["kind"] == "Lost").expect("a Lost event");
    assert_eq!(
        lost["data"]["reason"],
        format!("supervisor pid {supervisor} is gone and left no exit record")
    );
    let requeued = events.iter().find(|e| e["kind"] == "Requeued").unwrap();
    assert_eq!(requeued["data"]["recovery"], false);
    assert_eq!(kinds(&events).last().map(String::as_str), Some("Finished"));
    assert_eq!(starts(&home), ["start 1", "start 2"], "attempt 2 ran after attempt 1 was lost");
}

#[test]
fn changed_boot_id_marks_running_tasks_lost_and_relaunches_them() {
    let home = TestHome::with_fake_gpus(TWO_A100, "magm");
    let boot = home.path().join("boot_id");
    std::fs::write(&boot, "boot-one\n").unwrap();
    let script = format!("{}; [ \"$CARMA_ATTEMPT\" = 2 ] || sleep 60", counting_job(&home, 0));
    let id = home.submit_sh("job", Some("4GiB"), &script);
    let tick = |home: &TestHome| {
        let out = home.cmd().env("CARMA_BOOT_ID_PATH", &boot).arg("tick").output().unwrap();
        assert!(out.status.success(), "{}", common::stderr(&out));
    };
    tick(&home);
    // The tick returns once the supervisor has claimed the attempt; job.json follows the spawn.
    let job_path = home.path().join(format!("runs/{id}/1/job.json"));
    for _ in 0..250 {
        if job_path.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let job = std::fs::read_to_string(&job_path).unwrap();
    let job: serde_json::Value = serde_json::from_str(&job).unwrap();
    // The "reboot": a new boot id. (The old processes still exist on this machine; a real
    // reboot would have ended them, so the test ends them itself afterwards.)
    std::fs::write(&boot, "boot-two\n").unwrap();
    tick(&home);
    let events = home.task_events(&id);
    let lost = events.iter().find(|e| e["kind"] == "Lost").expect("Lost after the reboot");
    assert_eq!(lost["data"]["reason"], "the machine rebooted (boot id changed) while it ran");
    let requeued = events.iter().find(|e| e["kind"] == "Requeued").expect("requeued");
    assert!(requeued["data"]["reason"].as_str().unwrap().starts_with("lost (the machine rebooted"));
    for _ in 0..50 {
        tick(&home);
        if home.task_events(&id).iter().any(|e| e["kind"] == "Finished") {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let placed: Vec<_> = home.task_events(&id).into_iter().filter(|e| e["kind"] == "Placed").collect();
    assert_eq!(placed.len(), 2, "relaunched as attempt 2");
    assert!(home.task_events(&id).iter().any(|e| e["kind"] == "Finished"));
    let pgid = job["pgid"].as_i64().unwrap() as i32;
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
}

#[test]
fn cancel_stops_a_running_task() {
    let home = TestHome::with_fake_gpus(TWO_A100, "magm");
    let id = home.submit_sh("job", Some("4GiB"), "sleep 60");
    home.ok(&["tick"]);
    let out = home.ok(&["cancel", &id]);
    assert_eq!(out, format!("cancelled task {id} (job) (its running attempt was sent SIGTERM)\n"));
    let queue = home.tick_until_done(Duration::from_secs(20));
    assert_eq!(queue["tasks"][0]["state"], "Cancelled");
    // Wait for the supervisor to write its exit record, then the tick records Stopped.
    for _ in 0..50 {
        if home.task_events(&id).iter().any(|e| e["kind"] == "Stopped") {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        home.ok(&["tick"]);
    }
    let events = home.task_events(&id);
    assert_eq!(kinds(&events), ["Submitted", "Placed", "Launched", "Cancelled", "Stopped"]);
    assert_eq!(events[4]["data"]["outcome"], "cancelled");
}

#[test]
fn cancel_requests_through_the_spool_are_checked_against_the_submitter() {
    let home = TestHome::with_fake_gpus(TWO_A100, "magm");
    let mine = home.submit_sh("mine", Some("4GiB"), "sleep 60");
    let theirs = home.submit_sh("theirs", Some("4GiB"), "sleep 60");
    home.ok(&["tick"]);
    // Both requests are filed by this user; make the second look filed by someone else.
    home.ok(&["cancel", "--request", &mine]);
    home.ok(&["cancel", "--request", &theirs]);
    let other = home.spool().join(format!("{theirs}.cancel"));
    let root = unsafe { libc::geteuid() } == 0;
    if root {
        // Filed by someone else: in their own spool folder.
        home.hand_to(&other, 4242);
    }
    home.ok(&["tick"]);
    let mine_events = home.task_events(&mine);
    let cancelled = mine_events.iter().find(|e| e["kind"] == "Cancelled").expect("mine is cancelled");
    assert!(cancelled["data"]["reason"].as_str().unwrap().ends_with("(request)"));
    if root {
        assert!(
            !home.task_events(&theirs).iter().any(|e| e["kind"] == "Cancelled"),
            "a stranger cannot cancel"
        );
        let refused =
            home.events().into_iter().find(|e| e["kind"] == "Rejected").expect("the refusal is journaled");
        assert_eq!(refused["data"]["submitter_uid"], 4242, "charged to whoever filed it");
        assert_eq!(
            refused["data"]["reason"],
            format!(
                "cancel request for task {theirs}: it belongs to uid 0; only its submitter or root may cancel it"
            )
        );
        home.ok(&["cancel", &theirs]);
    }
    home.tick_until_done(Duration::from_secs(30));
    assert!(!home.spool().join(format!("{mine}.cancel")).exists(), "requests are consumed");
    for _ in 0..100 {
        if home.task_events(&mine).iter().any(|e| e["kind"] == "Stopped") {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        home.ok(&["tick"]);
    }
    assert_eq!(
        kinds(&home.task_events(&mine)).last().map(String::as_str),
        Some("Stopped"),
        "the job was stopped"
    );
}
