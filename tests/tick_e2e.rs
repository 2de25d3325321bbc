//! End to end: real supervisors and real processes on two fake 40 GiB GPUs under `magm`.
//!
//! Goal: show collocation, a task that waits with its reason, an out-of-memory crash that is
//! recovered on an idle GPU, and a plain failure that is not retried, all through
//! `carma queue --json` and `carma events --json`.

mod common;

use std::time::Duration;

use common::TestHome;
use common::cluster::{TWO_A100, TWO_A100_FULL, kinds};

const OOM_ON_FIRST_ATTEMPT: &str = r#"if [ "$CARMA_ATTEMPT" = 1 ]; then
  echo 'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 39.39 GiB total capacity)' >&2
  exit 1
fi
echo "recovered on $CUDA_VISIBLE_DEVICES"
"#;

#[test]
fn collocation_waiting_oom_recovery_and_plain_failure() {
    let home = TestHome::with_fake_gpus(TWO_A100, "magm");
    let a = home.submit_sh("a", Some("10GiB"), "sleep 3");
    let b = home.submit_sh("b", Some("10GiB"), "sleep 3");
    let c = home.submit_sh("c", Some("10GiB"), "sleep 3");
    let oom = home.submit_sh("oom", Some("8GiB"), OOM_ON_FIRST_ATTEMPT);
    let fail = home.submit_sh("fail", Some("1GiB"), "echo failing >&2; exit 3");
    let big = home.submit_sh("big", Some("39GiB"), "sleep 1");

    // First tick: everything that fits is placed at once (memory in flight, no sleeps).
    home.ok(&["tick"]);
    let first: serde_json::Value = serde_json::from_str(&home.ok(&["queue", "--json"])).unwrap();
    let state_of =
        |id: &str| first["tasks"].as_array().unwrap().iter().find(|t| t["id"] == id).unwrap().clone();
    for id in [&a, &b, &c, &oom, &fail] {
        assert_eq!(state_of(id)["state"], "Running", "{id} runs after one tick: {first:#}");
    }
    let gpu_of = |id: &str| state_of(id)["gpu_uuids"][0].as_str().unwrap().to_string();
    let on_gpu0 = [&a, &b, &c].iter().filter(|id| gpu_of(id) == "GPU-fake-0000").count();
    assert!(on_gpu0 == 2 || on_gpu0 == 1, "a, b and c share the two GPUs");
    assert!(gpu_of(&a) == gpu_of(&c) || gpu_of(&b) == gpu_of(&c), "c is collocated with a or b");
    let waiting = state_of(&big);
    assert_eq!(waiting["state"], "Pending");
    let reason = waiting["reason"].as_str().unwrap();
    assert!(
        reason.contains("GpuMemory: need 39.0 GiB + 2.0 GiB margin >"),
        "big says why it waits: {reason}"
    );

    // The OOM task's first attempt ends while the GPUs read near full (its evidence).
    home.tick_oom_on_full_gpus(&oom, 1, TWO_A100_FULL, TWO_A100);
    let queue = home.tick_until_done(Duration::from_secs(60));
    let task = |id: &str| queue["tasks"].as_array().unwrap().iter().find(|t| t["id"] == id).unwrap().clone();
    for id in [&a, &b, &c, &big] {
        assert_eq!(task(id)["state"], "Finished", "{id}");
        assert_eq!(task(id)["attempts"], 1);
    }

    // The OOM task: detected, requeued in the recovery queue, relaunched alone on an idle GPU.
    assert_eq!(task(&oom)["state"], "Finished");
    assert_eq!(task(&oom)["attempts"], 2);
    let events = home.task_events(&oom);
    let oom_kinds = kinds(&events);
    let expected_prefix = ["Submitted", "Placed", "Launched", "OomDetected", "Requeued"];
    assert_eq!(&oom_kinds[..5], expected_prefix, "{oom_kinds:?}");
    assert_eq!(oom_kinds.last().map(String::as_str), Some("Finished"));
    let requeued = &events[4]["data"];
    assert_eq!(requeued["recovery"], true);
    assert_eq!(requeued["recovery_mode"], "exclusive");
    assert!(requeued["requirement_mib"].as_u64().unwrap() > 8 * 1024, "requirement raised: {requeued}");
    let second = events.iter().find(|e| e["kind"] == "Placed" && e["data"]["attempt"] == 2).unwrap();
    assert_eq!(second["data"]["exclusive"], true, "recovery runs alone: {second}");
    // The journal names the signature; the log line itself is the job's private output.
    assert_eq!(events[3]["data"]["evidence"], "torch.OutOfMemoryError");
    let log = std::fs::read_to_string(home.path().join(format!("runs/{oom}/2/stdout.log"))).unwrap();
    assert!(log.starts_with("recovered on GPU-fake-000"), "{log}");

    // The plain failure: Failed at once, never requeued.
    assert_eq!(task(&fail)["state"], "Failed");
    assert_eq!(task(&fail)["attempts"], 1);
    let fail_kinds = kinds(&home.task_events(&fail));
    assert_eq!(fail_kinds, ["Submitted", "Placed", "Launched", "Failed"]);
    let failed = home.task_events(&fail).pop().unwrap();
    assert_eq!(failed["data"]["outcome"], "exit 3");
    assert_eq!(failed["data"]["reason"], "exit 3 without an out-of-memory message; not retried");

    // Every attempt was launched exactly once.
    let all = home.events();
    for id in [&a, &b, &c, &oom, &fail, &big] {
        let launched: Vec<_> =
            all.iter().filter(|e| e["task"] == id.as_str() && e["kind"] == "Launched").collect();
        let placed: Vec<_> =
            all.iter().filter(|e| e["task"] == id.as_str() && e["kind"] == "Placed").collect();
        assert_eq!(launched.len(), placed.len(), "{id}: one launch per placement");
    }
}

/// Goal: the recovery requirement is max(declared, observed peak) + step, where the peak is
/// what the GPU reported for the attempt's processes. Method: while attempt 1 runs, the fake
/// GPU file lists the job's pid using 20,000 MiB; then the job dies of OOM.
#[test]
fn recovery_requirement_uses_the_observed_peak() {
    let home = TestHome::with_fake_gpus(TWO_A100, "magm");
    let script = r#"if [ "$CARMA_ATTEMPT" = 1 ]; then
  sleep 2; echo 'RuntimeError: CUDA error: out of memory' >&2; exit 1
fi"#;
    let id = home.submit_sh("peaky", Some("8GiB"), script);
    home.ok(&["tick"]);
    // The tick returns once the supervisor has claimed the attempt; job.json follows the spawn.
    let job_path = home.path().join(format!("runs/{id}/1/job.json"));
    for _ in 0..250 {
        if job_path.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let job = std::fs::read_to_string(&job_path).unwrap();
    let pid = serde_json::from_str::<serde_json::Value>(&job).unwrap()["job"]["pid"].as_u64().unwrap();
    let gpus = format!(
        r#"[{{"uuid": "GPU-fake-0000", "name": "A100", "memory_total_mib": 40960, "memory_used_mib": 20000, "sm_active": 0.5,
             "processes": [{{"pid": {pid}, "used_mib": 20000}}]}},
           {{"uuid": "GPU-fake-0001", "name": "A100", "memory_total_mib": 40960, "memory_used_mib": 0, "sm_active": 0.0}}]"#
    );
    std::fs::write(home.gpus_file(), gpus).unwrap();
    home.ok(&["tick"]);
    std::fs::write(home.gpus_file(), TWO_A100).unwrap();
    home.tick_until_done(Duration::from_secs(30));
    let events = home.task_events(&id);
    let usage = events.iter().find(|e| e["kind"] == "Usage").expect("a Usage event");
    assert_eq!(usage["data"]["peak_mib"], 20000);
    let oom = events.iter().find(|e| e["kind"] == "OomDetected").unwrap();
    assert_eq!(oom["data"]["peak_mib"], 20000);
    let requeued = events.iter().find(|e| e["kind"] == "Requeued").unwrap();
    assert_eq!(
        requeued["data"]["requirement_mib"],
        20000 + 5120,
        "max(8192 declared, 20000 peak) + 5120 step"
    );
    assert_eq!(kinds(&events).last().map(String::as_str), Some("Finished"));
}

#[test]
fn a_job_inherits_no_descriptor_of_the_tick() {
    // Goal: a descriptor left open without close-on-exec by whatever started the tick (here
    // this test, as systemd, cron or a shell could) reaches neither the supervisor nor the
    // job. Method: fd 200+ on a file, without FD_CLOEXEC, in this process; real ticks run a
    // job that lists its /proc/self/fd and its supervisor's. Before the fix both held it.
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let file = std::fs::File::open("/etc/hostname").or_else(|_| std::fs::File::open("/")).unwrap();
    // SAFETY: F_DUPFD gives a new descriptor without FD_CLOEXEC, owned below.
    let fd = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_DUPFD, 200) };
    assert!(fd >= 200, "dup: {}", std::io::Error::last_os_error());
    // SAFETY: fd is a fresh descriptor this test owns.
    let leaked = unsafe { OwnedFd::from_raw_fd(fd) };
    let home = TestHome::with_fake_gpus(TWO_A100, "magm");
    let listing = home.path().join("fds");
    // `ls` opens the directory it lists: 3 is that; $PPID is the supervisor.
    let script = format!("ls /proc/self/fd > {0}.job; ls /proc/$PPID/fd > {0}.supervisor", listing.display());
    let id = home.submit_sh("fds", Some("1GiB"), &script);
    home.tick_until_done(Duration::from_secs(30));
    assert_eq!(kinds(&home.task_events(&id)).last().map(String::as_str), Some("Finished"));
    let numbers = |who: &str| -> Vec<u32> {
        let text = std::fs::read_to_string(format!("{}.{who}", listing.display())).unwrap();
        let mut fds: Vec<u32> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
        fds.sort_unstable();
        fds
    };
    assert_eq!(numbers("job"), [0, 1, 2, 3], "the job's descriptors");
    let supervisor = numbers("supervisor");
    assert!(
        !supervisor.contains(&(leaked.as_raw_fd() as u32)),
        "the supervisor holds fd {fd}: {supervisor:?}"
    );
}
