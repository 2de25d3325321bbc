//! GPU memory enforcement through real ticks: real supervisors and job processes on one
//! shared fake GPU, whose file lists the jobs' processes with their memory.
//!
//! Goal: the job over its declared memory is the one stopped, with its figures in `carma
//! show`, `carma queue` and `carma events`, and its neighbour keeps running. (With retries
//! left the stop is a relaunch: `tests/relaunch.rs`; here the job asked for none, so it ends
//! Failed as every such stop did before relaunches.)
//! Method: two jobs share GPU0 (1 GiB and 4 GiB declared); the over-share job's GPU process
//! is a child that left its session (`setsid`), so only the attempt's process tree or cgroup
//! can attribute it; the fake GPU file then lists that child with 10 GiB and the neighbour's
//! job with its declared 4 GiB, and one tick decides.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::TestHome;

const ONE_A100: &str = r#"[
  {"uuid": "GPU-fake-0000", "name": "A100-SXM4-40GB", "memory_total_mib": 40960, "memory_used_mib": 0, "sm_active": 0.0}
]"#;

fn wait_for(path: &Path) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(text) = std::fs::read_to_string(path)
            && text.ends_with('\n')
        {
            return text;
        }
        assert!(Instant::now() < deadline, "{} never appeared", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn job_pid(home: &TestHome, id: &str) -> u64 {
    let job = wait_for_json(&home.path().join(format!("runs/{id}/1/job.json")));
    job["job"]["pid"].as_u64().expect("the job's pid")
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

fn state_of(home: &TestHome, id: &str) -> String {
    let queue: serde_json::Value = serde_json::from_str(&home.ok(&["queue", "--all", "--json"])).unwrap();
    let task = queue["tasks"].as_array().unwrap().iter().find(|t| t["id"] == id).expect("listed").clone();
    task["state"].as_str().unwrap().to_string()
}

fn alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z')))
}

#[test]
fn the_job_over_its_declared_memory_is_stopped_and_its_neighbour_keeps_running() {
    let home = TestHome::with_fake_gpus(ONE_A100, "magm");
    let pid_file = home.path().join("hog-worker.pid");
    let hog_script = format!("setsid sleep 120 & echo $! > {}; wait", pid_file.display());
    let args = ["submit", "--parsable", "--name", "hog", "--mem", "1GiB", "--max-retries", "0", "--"];
    let hog = home.ok(&[&args[..], &["sh", "-c", &hog_script]].concat()).trim().to_string();
    let neighbour = home.submit_sh("neighbour", Some("4GiB"), "sleep 120");
    home.ok(&["tick"]);
    assert_eq!((state_of(&home, &hog), state_of(&home, &neighbour)), ("Running".into(), "Running".into()));
    let worker: u64 = wait_for(&pid_file).trim().parse().unwrap();
    let neighbour_pid = job_pid(&home, &neighbour);

    let gpus = format!(
        r#"[{{"uuid": "GPU-fake-0000", "name": "A100-SXM4-40GB", "memory_total_mib": 40960, "memory_used_mib": 14336,
             "sm_active": 0.5, "processes": [{{"pid": {worker}, "used_mib": 10240}}, {{"pid": {neighbour_pid}, "used_mib": 4096}}]}}]"#
    );
    std::fs::write(home.gpus_file(), gpus).unwrap();
    home.ok(&["tick"]);

    let reason = "used 10.0 GiB on GPU0, declared 1.0 GiB (+ 1.0 GiB margin)";
    assert_eq!(state_of(&home, &hog), "Running", "being stopped");
    assert_eq!(state_of(&home, &neighbour), "Running", "the neighbour keeps running");
    let show = home.ok(&["show", &hog]);
    assert!(show.contains(reason), "carma show names the figures:\n{show}");
    let queue = home.ok(&["queue", "--all"]);
    assert!(queue.contains(reason), "carma queue names the figures:\n{queue}");
    let events = home.ok(&["events", "--task", &hog]);
    assert!(
        events.contains(&format!(
            "{hog} attempt 1 over its GPU memory share (declared): {reason}; stopping it to relaunch it"
        )),
        "carma events names the figures:\n{events}"
    );
    let exceeded =
        home.task_events(&hog).into_iter().find(|e| e["kind"] == "MemoryExceeded").expect("recorded");
    assert_eq!(exceeded["data"]["used_mib"], 10240);
    assert_eq!(exceeded["data"]["declared_mib"], 1024);
    assert_eq!(exceeded["data"]["gpu"], "GPU-fake-0000");

    // The stop takes the whole attempt, the worker that left its session included; the next
    // ticks record its end, and the neighbour runs on.
    std::fs::write(home.gpus_file(), ONE_A100).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while home.task_events(&hog).iter().all(|e| e["kind"] != "Failed") {
        assert!(
            Instant::now() < deadline,
            "the over-share attempt never ended: {:#?}",
            home.task_events(&hog)
        );
        std::thread::sleep(Duration::from_millis(200));
        home.ok(&["tick"]);
    }
    assert!(!alive(worker), "the worker that left its session was stopped too");
    assert_eq!(state_of(&home, &hog), "Failed");
    let show = home.ok(&["show", &hog]);
    assert!(show.contains("used 10.0 GiB on GPU0 over its 1.0 GiB share (declared)"), "{show}");
    assert!(show.contains("retry limit 0 reached"), "--max-retries 0 keeps Failed:\n{show}");
    assert_eq!(state_of(&home, &neighbour), "Running");
    assert!(alive(neighbour_pid));
    home.ok(&["cancel", &neighbour]);
    home.ok(&["tick"]);
}

/// Goal: under `sharing = "mps"` the tick tells the MPS control daemon the job's limit before
/// it starts (where the job cannot unset it): the default for the next server and the limit of
/// the user's running server. Method: a stand-in `nvidia-cuda-mps-control` first on the
/// tick's PATH records its stdin and answers `get_server_list` with a pid the submitter owns
/// (this test's own).
#[test]
fn under_mps_the_control_daemon_gets_the_limit_before_the_launch() {
    use std::os::unix::fs::PermissionsExt;
    let home = TestHome::with_fake_gpus(ONE_A100, "magm");
    let config = std::fs::read_to_string(home.path().join("config.toml")).unwrap();
    home.set_config(&config.replace("[tick]\n", "[tick]\nsharing = \"mps\"\n"));
    let bin = home.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let record = home.path().join("mps-control.stdin");
    let server = std::process::id();
    let stand_in = bin.join("nvidia-cuda-mps-control");
    std::fs::write(
        &stand_in,
        format!(
            "#!/bin/sh\ninput=$(cat)\nprintf '%s\\n--\\n' \"$input\" >> {}\ncase \"$input\" in get_server_list*) echo {server};; esac\n",
            record.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&stand_in, std::fs::Permissions::from_mode(0o755)).unwrap();
    let id = home.submit_sh("capped", Some("3GiB"), "true");
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let out = home.cmd().env("PATH", &path).arg("tick").output().unwrap();
    assert!(out.status.success(), "{}", common::stderr(&out));
    assert_ne!(state_of(&home, &id), "Pending", "the job was launched");
    // 3 GiB declared + the 2 GiB margin-with-figure: 5120 MiB on device 0.
    assert_eq!(
        std::fs::read_to_string(&record).unwrap(),
        format!(
            "get_server_list\n--\nset_default_device_pinned_mem_limit 0 5120M\nset_device_pinned_mem_limit {server} 0 5120M\n--\n"
        )
    );
    home.tick_until_done(Duration::from_secs(20));
}

/// Goal: between two users, the one over her declared memory is stopped, and a process of hers
/// that names the other's attempt in its environment (`CARMA_ATTEMPT_TAG`) is still hers: the
/// other user's task keeps running. Method: throw-away users `alice` (4 GiB) and `mallory`
/// (1 GiB) on one shared fake GPU of a root-owned queue; mallory's job execs a process carrying
/// alice's attempt tag; the GPU file lists it with 10 GiB, and alice's job with 4 GiB.
#[test]
fn between_users_the_one_over_her_share_is_stopped_whatever_her_job_claims() {
    use common::users::{SharedQueue, ThrowawayUser, skip_without_users};
    if skip_without_users() {
        return;
    }
    let lab = SharedQueue::new();
    std::fs::write(lab.home.gpus_file(), ONE_A100).unwrap();
    let (alice, mallory) = (ThrowawayUser::create("ena"), ThrowawayUser::create("enm"));
    let submit = |user: &ThrowawayUser, mem: &str, script: &str| {
        let args = ["submit", "--parsable", "--name", "job", "--mem", mem, "--", "sh", "-c", script];
        lab.ok_as(user, &args).trim().to_string()
    };
    let honest = submit(&alice, "4GiB", "exec sleep 120");
    let lying = format!("exec env CARMA_ATTEMPT_TAG={honest}/1 sleep 120");
    let hog = submit(&mallory, "1GiB", &lying);
    lab.home.ok(&["tick"]);
    assert_eq!(state_of(&lab.home, &hog), "Running");
    let (honest_pid, hog_pid) = (job_pid(&lab.home, &honest), job_pid(&lab.home, &hog));
    let gpus = format!(
        r#"[{{"uuid": "GPU-fake-0000", "name": "A100-SXM4-40GB", "memory_total_mib": 40960, "memory_used_mib": 14336,
             "sm_active": 0.5, "processes": [{{"pid": {hog_pid}, "used_mib": 10240}}, {{"pid": {honest_pid}, "used_mib": 4096}}]}}]"#
    );
    std::fs::write(lab.home.gpus_file(), gpus).unwrap();
    lab.home.ok(&["tick"]);
    let exceeded = lab.home.task_events(&hog).into_iter().find(|e| e["kind"] == "MemoryExceeded");
    assert!(exceeded.is_some(), "mallory's attempt is stopped over her share");
    assert_eq!(state_of(&lab.home, &honest), "Running");
    let show = lab.ok_as(&mallory, &["show", &hog]);
    assert!(show.contains("used 10.0 GiB on GPU0, declared 1.0 GiB (+ 1.0 GiB margin)"), "{show}");
    std::fs::write(lab.home.gpus_file(), ONE_A100).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while alive(hog_pid) {
        assert!(Instant::now() < deadline, "mallory's job was never stopped");
        std::thread::sleep(Duration::from_millis(200));
        lab.home.ok(&["tick"]);
    }
    assert!(alive(honest_pid), "alice's job runs on");
    assert_eq!(state_of(&lab.home, &honest), "Running");
    // mallory's task is queued again (with what she used, at her normal place).
    lab.home.ok(&["cancel", &honest, &hog]);
    lab.home.ok(&["tick"]);
}
