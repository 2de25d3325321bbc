//! Issue 40: a stop for memory is a relaunch, not a verdict. End to end with real `carma
//! tick`s, real supervisors and real job processes on one shared fake 40 GiB GPU, whose file
//! lists the jobs' processes with their memory the way NVML lists them.
//!
//! Each job's first attempt holds on (`sleep`) while the file says it uses more than its
//! share; its next attempt exits 0. The cases are the tryout's: a job that declared 4 GiB and
//! used 12, one sized by carma's estimator from a model summary that used 6 GiB, two jobs with
//! no figure at all, `--max-retries 0`, a user's relaunch against an earlier task waiting in
//! the main queue, and an array whose waiting members learn the raised figure.
//!
//! Every test fails on the code before relaunches: a stop for memory failed the task for good
//! (and a job with no figure was never stopped at all).

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::TestHome;

/// The first attempt holds on; every later one (and every attempt of another array member
/// than index 0) exits 0.
const FIRST_ATTEMPT_HOLDS: &str =
    r#"if [ "$CARMA_ATTEMPT" = 1 ] && [ "${CARMA_ARRAY_INDEX:-0}" = 0 ]; then exec sleep 120; fi; exit 0"#;

/// One 40 GiB GPU whose file lists `processes` (pid, MiB) and `foreign_mib` used by others.
fn one_gpu(processes: &[(u64, u64)], foreign_mib: u64) -> String {
    gpu_json("GPU-fake-0000", processes, foreign_mib)
}

fn gpu_json(uuid: &str, processes: &[(u64, u64)], foreign_mib: u64) -> String {
    let used: u64 = processes.iter().map(|(_, mib)| mib).sum::<u64>() + foreign_mib;
    let listed: Vec<String> =
        processes.iter().map(|(pid, mib)| format!(r#"{{"pid": {pid}, "used_mib": {mib}}}"#)).collect();
    format!(
        r#"{{"uuid": "{uuid}", "name": "A100-SXM4-40GB", "memory_total_mib": 40960, "memory_used_mib": {used},
            "sm_active": 0.1, "processes": [{}]}}"#,
        listed.join(", ")
    )
}

fn write_gpus(home: &TestHome, gpus: &[String]) {
    std::fs::write(home.gpus_file(), format!("[{}]", gpus.join(",\n"))).expect("write fake gpus");
}

/// A home on one idle shared GPU with `extra` config lines (after `[sched]`'s policy).
fn home_with(extra: &str) -> TestHome {
    let home = TestHome::new();
    write_gpus(&home, &[one_gpu(&[], 0)]);
    home.set_config(&format!(
        "[tick]\ngpus = \"fake:{}\"\n\n[sched]\npolicy = \"magm\"\n{extra}",
        home.gpus_file().display()
    ));
    home
}

fn submit(home: &TestHome, name: &str, flags: &[&str], script: &str) -> String {
    let mut args = vec!["submit", "--parsable", "--name", name];
    args.extend(flags);
    args.extend(["--", "sh", "-c", script]);
    home.ok(&args).trim().to_string()
}

fn wait_for_json(path: &Path) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(value) = std::fs::read_to_string(path).ok().and_then(|t| serde_json::from_str(&t).ok()) {
            return value;
        }
        assert!(Instant::now() < deadline, "{} never appeared", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The pid of attempt `attempt`'s job of task `id`.
fn job_pid(home: &TestHome, id: &str, attempt: u32) -> u64 {
    let job = wait_for_json(&home.path().join(format!("runs/{id}/{attempt}/job.json")));
    job["job"]["pid"].as_u64().expect("the job's pid")
}

fn row(home: &TestHome, id: &str) -> serde_json::Value {
    let queue: serde_json::Value = serde_json::from_str(&home.ok(&["queue", "--all", "--json"])).unwrap();
    queue["tasks"].as_array().unwrap().iter().find(|t| t["id"] == id).expect("listed").clone()
}

fn state_of(home: &TestHome, id: &str) -> String {
    row(home, id)["state"].as_str().unwrap().to_string()
}

/// Ticks every 200 ms until `id` has an event of kind `kind` (its `nth` one, from 1).
fn tick_until(home: &TestHome, id: &str, kind: &str, nth: usize) -> Vec<serde_json::Value> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        home.ok(&["tick"]);
        let events = home.task_events(id);
        if events.iter().filter(|e| e["kind"] == kind).count() >= nth {
            return events;
        }
        assert!(Instant::now() < deadline, "no {kind} #{nth} for {id}: {events:#?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn event<'a>(events: &'a [serde_json::Value], kind: &str) -> &'a serde_json::Value {
    &events.iter().find(|e| e["kind"] == kind).unwrap_or_else(|| panic!("no {kind}: {events:#?}"))["data"]
}

/// Placed records' requirement, by attempt.
fn placed_mib(events: &[serde_json::Value]) -> Vec<Option<u64>> {
    events.iter().filter(|e| e["kind"] == "Placed").map(|e| e["data"]["requirement_mib"].as_u64()).collect()
}

/// The tryout's first case: a job that declared 4 GiB beside a neighbour (4 GiB) uses 12.
/// Returns the home, the job's and the neighbour's ids and pids, after the tick that saw it.
fn over_its_share(extra: &str, hog_flags: &[&str], hog_mib: u64) -> (TestHome, String, String, u64) {
    let home = home_with(extra);
    let hog = submit(&home, "hog", hog_flags, FIRST_ATTEMPT_HOLDS);
    let neighbour = submit(&home, "neighbour", &["--gpu-mem", "4GiB"], "exec sleep 120");
    home.ok(&["tick"]);
    assert_eq!((state_of(&home, &hog), state_of(&home, &neighbour)), ("Running".into(), "Running".into()));
    let (hog_pid, neighbour_pid) = (job_pid(&home, &hog, 1), job_pid(&home, &neighbour, 1));
    write_gpus(&home, &[one_gpu(&[(hog_pid, hog_mib), (neighbour_pid, 4096)], 0)]);
    home.ok(&["tick"]);
    // The job's memory is freed as its stop takes it; the neighbour's stays.
    write_gpus(&home, &[one_gpu(&[(neighbour_pid, 4096)], 0)]);
    (home, hog, neighbour, neighbour_pid)
}

/// The neighbour ran once and still runs; then it is cancelled.
fn neighbour_ran_once(home: &TestHome, neighbour: &str) {
    let row = row(home, neighbour);
    assert_eq!((row["state"].as_str(), row["attempts"].as_u64()), (Some("Running"), Some(1)), "{row:#}");
    assert!(
        home.task_events(neighbour).iter().all(|e| e["kind"] != "MemoryExceeded" && e["kind"] != "Stopped")
    );
    home.ok(&["cancel", neighbour]);
    home.ok(&["tick"]);
}

/// Goal: the user who declared 4 GiB and used 12 is stopped, placed again in the main queue
/// with at least what it used plus the margin, and Finished; the neighbour runs once, untouched.
#[test]
fn a_job_that_declared_4_gib_and_used_12_is_relaunched_with_what_it_used_and_finishes() {
    let (home, hog, neighbour, _) = over_its_share("", &["--gpu-mem", "4GiB"], 12_288);
    let exceeded = event(&home.task_events(&hog), "MemoryExceeded").clone();
    assert_eq!(
        (exceeded["used_mib"].as_u64(), exceeded["declared_mib"].as_u64()),
        (Some(12_288), Some(4096))
    );
    assert_eq!(exceeded["share_source"], "declared");
    let show = home.ok(&["show", &hog]);
    assert!(show.contains("Over its GPU memory share: used 12.0 GiB on GPU0, declared 4.0 GiB"), "{show}");

    let events = tick_until(&home, &hog, "Requeued", 1);
    let requeued = event(&events, "Requeued");
    assert_eq!(requeued["recovery"], false, "a user's under-declaration: the main queue");
    let raised = requeued["requirement_mib"].as_u64().unwrap();
    assert!(raised >= 12_288 + 1024, "at least what it used plus the margin: {raised}");
    let reason = requeued["reason"].as_str().unwrap();
    assert!(
        reason.starts_with(
            "used 12.0 GiB on GPU0 over its 4.0 GiB share (declared); the next attempt gets 17.0 GiB"
        ) && reason.contains("back to its place in the main queue")
            && reason.ends_with("(retry 1 of 3)"),
        "{reason}"
    );
    assert!(home.ok(&["show", &hog]).contains("17.0 GiB: raised by its relaunch"), "show names the figure");

    let events = tick_until(&home, &hog, "Finished", 1);
    assert_eq!(placed_mib(&events), [Some(4096), Some(raised)], "the next attempt got the raised figure");
    assert_eq!(state_of(&home, &hog), "Finished");
    neighbour_ran_once(&home, &neighbour);
}

/// Goal: a job sized by carma's own estimator (a model summary, no declared figure) that uses
/// 6 GiB is stopped, relaunched in the recovery queue (carma's miss) with at least what it
/// used, and Finished; the neighbour runs once.
#[test]
fn a_job_carmas_estimate_sized_too_small_is_relaunched_in_recovery_and_finishes() {
    let summary = Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/examples/model-summary.mlp.json");
    let summary = summary.display().to_string();
    let flags = ["--model-summary", summary.as_str(), "--batch-size", "64"];
    let (home, hog, neighbour, _) = over_its_share("[sched.recovery]\nmode = \"looser\"\n", &flags, 6144);
    let events = home.task_events(&hog);
    let estimate = event(&events, "Estimated")["upper_mib"].as_u64().unwrap();
    assert!(estimate + 1024 < 6144, "the estimate ({estimate} MiB) is below what the job used");
    assert_eq!(event(&events, "MemoryExceeded")["share_source"], "estimate");

    let events = tick_until(&home, &hog, "Requeued", 1);
    let requeued = event(&events, "Requeued");
    assert_eq!(requeued["recovery"], true, "carma's miss: the recovery queue");
    let raised = requeued["requirement_mib"].as_u64().unwrap();
    assert!(raised >= 6144 + 1024, "{raised}");
    assert!(requeued["reason"].as_str().unwrap().contains("share (carma's estimate)"), "{requeued:#}");
    let events = tick_until(&home, &hog, "Finished", 1);
    assert_eq!(placed_mib(&events), [Some(estimate), Some(raised)]);
    neighbour_ran_once(&home, &neighbour);
}

/// Goal: two jobs with no memory figure share one GPU; the one that grows past the queue's
/// default share (the no-figure margin, 5 GiB, + 1 GiB margin) is stopped, relaunched in the
/// recovery queue with what it used, and Finished; the other runs on. `show` names the
/// default share, and `--dry-run` says so before submit.
#[test]
fn of_two_jobs_with_no_figure_the_one_over_the_default_share_is_relaunched() {
    let home = home_with("[sched.recovery]\nmode = \"looser\"\n");
    let dry = home.ok(&["submit", "--dry-run", "--name", "x", "--", "true"]);
    assert!(
        dry.contains("GPU memory: not declared: shares a GPU, assumed 5.0 GiB; give --gpu-mem to say more"),
        "{dry}"
    );
    let grower = submit(&home, "grower", &[], FIRST_ATTEMPT_HOLDS);
    let other = submit(&home, "other", &[], "exec sleep 120");
    home.ok(&["tick"]);
    let gpus = |row: serde_json::Value| row["gpu_uuids"].clone();
    assert_eq!(gpus(row(&home, &grower)), gpus(row(&home, &other)), "both on GPU0");
    let show = home.ok(&["show", &other]);
    assert!(show.contains("5.0 GiB: the queue's default share while it shares a GPU"), "{show}");
    let (grower_pid, other_pid) = (job_pid(&home, &grower, 1), job_pid(&home, &other, 1));
    write_gpus(&home, &[one_gpu(&[(grower_pid, 8192), (other_pid, 2048)], 0)]);
    home.ok(&["tick"]);
    write_gpus(&home, &[one_gpu(&[(other_pid, 2048)], 0)]);
    let events = tick_until(&home, &grower, "Requeued", 1);
    assert_eq!(event(&events, "MemoryExceeded")["share_source"], "default");
    assert_eq!(event(&events, "MemoryExceeded")["declared_mib"], 5120);
    let requeued = event(&events, "Requeued");
    assert_eq!(requeued["recovery"], true);
    assert!(requeued["requirement_mib"].as_u64().unwrap() >= 8192 + 1024);
    tick_until(&home, &grower, "Finished", 1);
    neighbour_ran_once(&home, &other);
}

/// Goal: `--max-retries 0` keeps the ending from before relaunches: Failed, with the figures.
#[test]
fn with_no_retries_a_stop_for_memory_still_fails() {
    let flags = ["--gpu-mem", "4GiB", "--max-retries", "0"];
    let (home, hog, neighbour, _) = over_its_share("", &flags, 12_288);
    let events = tick_until(&home, &hog, "Failed", 1);
    assert!(events.iter().all(|e| e["kind"] != "Requeued"), "{events:#?}");
    assert_eq!(state_of(&home, &hog), "Failed");
    let reason = event(&events, "Failed")["reason"].as_str().unwrap().to_string();
    assert_eq!(
        reason,
        "used 12.0 GiB on GPU0 over its 4.0 GiB share (declared); 1 memory end(s), retry limit 0 reached, giving up"
    );
    neighbour_ran_once(&home, &neighbour);
}

/// Goal: a user who under-declares gains nothing: the relaunch of a declared figure waits at
/// its normal place in the main queue, behind a task submitted before it, where a recovery
/// would have gone first. Method: two GPUs, each with 10 GiB of foreign use; `early` (36 GiB)
/// is submitted first and cannot start; `hog` (4 GiB) and its neighbour start beside it on
/// GPU1; hog is stopped over its share; then GPU0 is emptied, and GPU1 filled, so that one
/// task fits, on GPU0: `early` takes it, and hog waits.
#[test]
fn a_users_relaunch_does_not_start_ahead_of_an_earlier_task() {
    let home = TestHome::new();
    write_gpus(&home, &[gpu_json("GPU-fake-0000", &[], 10_240), gpu_json("GPU-fake-0001", &[], 10_240)]);
    home.set_config(&format!(
        "[tick]\ngpus = \"fake:{}\"\n\n[sched]\npolicy = \"magm\"\n",
        home.gpus_file().display()
    ));
    let early = submit(&home, "early", &["--gpu-mem", "36GiB"], "exit 0");
    let hog = submit(&home, "hog", &["--gpu-mem", "4GiB"], FIRST_ATTEMPT_HOLDS);
    let neighbour = submit(&home, "neighbour", &["--gpu-mem", "4GiB"], "exec sleep 120");
    home.ok(&["tick"]);
    assert_eq!(state_of(&home, &early), "Pending");
    assert_eq!((state_of(&home, &hog), state_of(&home, &neighbour)), ("Running".into(), "Running".into()));
    let (hog_pid, neighbour_pid) = (job_pid(&home, &hog, 1), job_pid(&home, &neighbour, 1));
    let gpu0 = gpu_json("GPU-fake-0000", &[], 10_240);
    write_gpus(
        &home,
        &[gpu0, gpu_json("GPU-fake-0001", &[(hog_pid, 12_288), (neighbour_pid, 4096)], 10_240)],
    );
    home.ok(&["tick"]);
    let full = gpu_json("GPU-fake-0001", &[(neighbour_pid, 4096)], 30_720);
    write_gpus(&home, &[gpu_json("GPU-fake-0000", &[], 10_240), full.clone()]);
    tick_until(&home, &hog, "Requeued", 1);
    assert_eq!(state_of(&home, &hog), "Pending");
    write_gpus(&home, &[gpu_json("GPU-fake-0000", &[], 0), full]);
    home.ok(&["tick"]);
    assert_ne!(state_of(&home, &early), "Pending", "the earlier task starts first");
    assert_eq!(state_of(&home, &hog), "Pending", "the relaunch waits at its place");
    assert!(!row(&home, &hog)["in_recovery"].as_bool().unwrap());
    home.ok(&["cancel", &hog, &neighbour]);
    home.ok(&["tick"]);
}

/// Goal: siblings learn: when the first member of an array (one at a time, `%1`) is stopped
/// over its declared 4 GiB, the waiting members start with the raised figure, and `show` says
/// where it came from; only the first member is ever stopped.
#[test]
fn the_waiting_members_of_an_array_start_with_the_raised_figure() {
    let home = home_with("");
    let array = submit(&home, "arr", &["--gpu-mem", "4GiB", "--array", "0-2%1"], FIRST_ATTEMPT_HOLDS);
    let neighbour = submit(&home, "neighbour", &["--gpu-mem", "4GiB"], "exec sleep 120");
    home.ok(&["tick"]);
    let queue: serde_json::Value = serde_json::from_str(&home.ok(&["queue", "--all", "--json"])).unwrap();
    let mut members: Vec<(u64, String)> = queue["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["workflow"]["array_id"] == array.as_str())
        .map(|t| (t["workflow"]["array_index"].as_u64().unwrap(), t["id"].as_str().unwrap().to_string()))
        .collect();
    members.sort();
    let ids: Vec<&str> = members.iter().map(|(_, id)| id.as_str()).collect();
    assert_eq!(ids.len(), 3);
    let (first_pid, neighbour_pid) = (job_pid(&home, ids[0], 1), job_pid(&home, &neighbour, 1));
    write_gpus(&home, &[one_gpu(&[(first_pid, 12_288), (neighbour_pid, 4096)], 0)]);
    home.ok(&["tick"]);
    write_gpus(&home, &[one_gpu(&[(neighbour_pid, 4096)], 0)]);
    let events = tick_until(&home, ids[0], "Requeued", 1);
    let raised = event(&events, "Requeued")["requirement_mib"].as_u64().unwrap();
    let show = home.ok(&["show", ids[2]]);
    assert!(
        show.contains(&format!("17.0 GiB: learned from the relaunch of its sibling {}", ids[0])),
        "{show}"
    );
    for id in &ids {
        tick_until(&home, id, "Finished", 1);
    }
    for id in &ids[1..] {
        assert_eq!(placed_mib(&home.task_events(id)), [Some(raised)], "{id} started with the raised figure");
    }
    let stops =
        ids.iter().flat_map(|id| home.task_events(id)).filter(|e| e["kind"] == "MemoryExceeded").count();
    assert_eq!(stops, 1, "one stop for the whole array");
    neighbour_ran_once(&home, &neighbour);
}
