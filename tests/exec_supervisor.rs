//! Goal: the supervisor runs real jobs correctly: outcome, logs, env, OOM
//! evidence, exactly-once claims, spawn failures, time limits, cancel, and
//! the user switch. Method: call `supervise_with` in-process on a run dir
//! under a temp home; jobs are `/bin/sh -c` snippets (the job may use a
//! shell; the supervisor never does).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use carma::exec::liveness::read_proc_stat;
use carma::exec::rundir::{CLAIM_FILE, STDERR_LOG, STDOUT_LOG, create_run_dir};
use carma::exec::{
    AttemptPlan, BootIdSource, ExecError, ExitOutcome, SuperviseOptions, read_claim, read_exit_record,
    read_job_record, supervise_with,
};

/// Each test's attempt gets a task id of its own: tests run in parallel in one process,
/// and an attempt's processes are found by its task id.
fn unique_task_id() -> String {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    format!("0sup{}x{}", std::process::id(), NEXT.fetch_add(1, Ordering::SeqCst))
}

struct Attempt {
    _home: tempfile::TempDir,
    run_dir: PathBuf,
    plan: AttemptPlan,
    task_id: String,
}

fn euid() -> u32 {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() }
}

/// A run dir with a plan running `sh -c script` as the current user.
fn attempt(script: &str) -> Attempt {
    let home = tempfile::tempdir().expect("tempdir");
    let task_id = unique_task_id();
    let run_dir = create_run_dir(home.path(), &task_id, 1).expect("run dir");
    let plan = AttemptPlan {
        task_id: task_id.clone(),
        attempt: 1,
        argv: vec!["sh".into(), "-c".into(), script.into()],
        env: BTreeMap::from([("MY_SETTING".into(), "42".into())]),
        workdir: run_dir.clone(),
        uid: euid(),
        gid: None,
        gpu_uuids: vec!["GPU-aaaa".into(), "GPU-bbbb".into()],
        mps_mem_limit_mib: None,
        time_limit_ms: None,
        stdout_path: None,
        stderr_path: None,
        script: None,
        log_bytes_max: None,
        signal: None,
        interactive: None,
        host_limits: Default::default(),
        gpu_watch: None,
    };
    Attempt { _home: home, run_dir, plan, task_id }
}

fn run(attempt: &Attempt, cancel: &AtomicBool) -> Result<carma::exec::ExitRecord, ExecError> {
    attempt.plan.write_atomic(&attempt.run_dir).expect("write plan");
    let options = SuperviseOptions {
        cancel_requested: cancel,
        kill_grace_ms: 1_000,
        poll_interval_ms: 10,
        child_subreaper: false,
        gpu_source: None,
    };
    supervise_with(&attempt.run_dir, &BootIdSource::default(), &options)
}

fn read(run_dir: &Path, name: &str) -> String {
    std::fs::read_to_string(run_dir.join(name)).unwrap_or_default()
}

#[test]
fn successful_job_logs_env_and_records() {
    let attempt = attempt("echo hello; echo oops >&2; env");
    let record = run(&attempt, &AtomicBool::new(false)).expect("supervise");
    assert_eq!(record.outcome, ExitOutcome::Exited { code: 0 });
    assert_eq!(record.oom, None);
    assert!(record.started_ms <= record.ended_ms);
    assert_eq!(read_exit_record(&attempt.run_dir).expect("read"), Some(record.clone()));
    let stdout = read(&attempt.run_dir, STDOUT_LOG);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.first(), Some(&"hello"));
    let task_id_line = format!("CARMA_TASK_ID={}", attempt.task_id);
    let tag_line = format!("CARMA_ATTEMPT_TAG={}/1", attempt.task_id);
    for expected in [
        "CARMA_ATTEMPT=1",
        task_id_line.as_str(),
        tag_line.as_str(),
        "CUDA_VISIBLE_DEVICES=GPU-aaaa,GPU-bbbb",
        "CUDA_DEVICE_ORDER=PCI_BUS_ID",
        "MY_SETTING=42",
    ] {
        assert!(lines.contains(&expected), "missing {expected} in {stdout}");
    }
    assert!(!stdout.contains("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), "no limit was planned");
    assert_eq!(read(&attempt.run_dir, STDERR_LOG), "oops\n");
    let claim = read_claim(&attempt.run_dir).expect("claim").expect("claimed");
    assert_eq!(claim.supervisor.pid, std::process::id());
    let job = read_job_record(&attempt.run_dir).expect("job").expect("job.json");
    assert_eq!(Some(job.job.pid), record.job_pid);
    assert_eq!(job.pgid as u32, job.job.pid);
    assert_eq!(job.uid, Some(euid()));
    // Private: env values, OOM lines and the logs are nobody else's business.
    for name in ["plan.json", "claim.json", "job.json", "exit.json", STDOUT_LOG, STDERR_LOG] {
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(attempt.run_dir.join(name)).expect("meta").permissions(),
        );
        assert_eq!(mode & 0o777, 0o600, "{name}");
    }
}

#[test]
fn oom_traceback_is_evidence_and_plain_failure_is_not() {
    let script = r#"echo 'Traceback (most recent call last):' >&2
echo 'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB' >&2
exit 1"#;
    let attempt_oom = attempt(script);
    let record = run(&attempt_oom, &AtomicBool::new(false)).expect("supervise");
    assert_eq!(record.outcome, ExitOutcome::Exited { code: 1 });
    let evidence = record.oom.expect("oom evidence");
    assert_eq!(evidence.signature, "torch.OutOfMemoryError");
    assert!(evidence.line.starts_with("torch.OutOfMemoryError: CUDA out of memory"));

    let attempt_plain = attempt("echo 'ValueError: bad config' >&2; exit 3");
    let record = run(&attempt_plain, &AtomicBool::new(false)).expect("supervise");
    assert_eq!(record.outcome, ExitOutcome::Exited { code: 3 });
    assert_eq!(record.oom, None);
}

#[test]
fn racing_supervisors_run_the_job_exactly_once() {
    let attempt = attempt("echo ran >> count.txt");
    attempt.plan.write_atomic(&attempt.run_dir).expect("plan");
    let results: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                scope.spawn(|| {
                    let cancel = AtomicBool::new(false);
                    let options = SuperviseOptions {
                        cancel_requested: &cancel,
                        kill_grace_ms: 1_000,
                        poll_interval_ms: 10,
                        child_subreaper: false,
                        gpu_source: None,
                    };
                    supervise_with(&attempt.run_dir, &BootIdSource::default(), &options)
                })
            })
            .collect();
        handles.into_iter().map(|handle| handle.join().expect("thread")).collect()
    });
    let ran = results.iter().filter(|result| result.is_ok()).count();
    let refused =
        results.iter().filter(|result| matches!(result, Err(ExecError::AlreadyClaimed { .. }))).count();
    assert_eq!((ran, refused), (1, 3), "{results:?}");
    // A later relaunch is refused too, and nothing ran again.
    let again = run(&attempt, &AtomicBool::new(false));
    assert!(matches!(again, Err(ExecError::AlreadyClaimed { .. })), "{again:?}");
    assert_eq!(read(&attempt.run_dir, "count.txt"), "ran\n");
}

#[test]
fn missing_program_and_bad_workdir_are_spawn_failures() {
    let mut missing = attempt("");
    missing.plan.argv = vec!["carma-no-such-program".into(), "--flag".into()];
    let record = run(&missing, &AtomicBool::new(false)).expect("supervise");
    let ExitOutcome::SpawnFailed { reason } = &record.outcome else { panic!("{record:?}") };
    assert!(reason.contains("carma-no-such-program"), "{reason}");
    assert_eq!(record.job_pid, None);
    assert_eq!(read_exit_record(&missing.run_dir).expect("read"), Some(record));
    assert!(read(&missing.run_dir, STDERR_LOG).contains("carma-no-such-program"));

    let mut bad_workdir = attempt("true");
    bad_workdir.plan.workdir = PathBuf::from("/nonexistent/carma-workdir");
    let record = run(&bad_workdir, &AtomicBool::new(false)).expect("supervise");
    let ExitOutcome::SpawnFailed { reason } = &record.outcome else { panic!("{record:?}") };
    assert!(reason.contains("/nonexistent/carma-workdir"), "{reason}");

    let mut not_executable = attempt("true");
    not_executable.plan.argv = vec!["./plan.json".into()];
    let record = run(&not_executable, &AtomicBool::new(false)).expect("supervise");
    let ExitOutcome::SpawnFailed { reason } = &record.outcome else { panic!("{record:?}") };
    assert!(reason.contains("./plan.json"), "{reason}");
}

#[test]
fn corrupt_plan_still_ends_in_an_exit_record() {
    let attempt = attempt("true");
    std::fs::write(attempt.run_dir.join("plan.json"), b"{\"format_version\":1,").expect("write");
    let options = SuperviseOptions {
        cancel_requested: &AtomicBool::new(false),
        kill_grace_ms: 1_000,
        poll_interval_ms: 10,
        child_subreaper: false,
        gpu_source: None,
    };
    let record = supervise_with(&attempt.run_dir, &BootIdSource::default(), &options).expect("supervise");
    let ExitOutcome::SpawnFailed { reason } = &record.outcome else { panic!("{record:?}") };
    assert!(reason.contains("plan.json"), "{reason}");
    assert_eq!(record.task_id, attempt.task_id);
    assert!(attempt.run_dir.join(CLAIM_FILE).exists());
}

#[test]
fn time_limit_stops_the_job_and_escalates_to_sigkill() {
    let mut polite = attempt("exec sleep 60");
    polite.plan.time_limit_ms = Some(300);
    let started = Instant::now();
    let record = run(&polite, &AtomicBool::new(false)).expect("supervise");
    assert_eq!(record.outcome, ExitOutcome::TimeLimit);
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());

    // A job that ignores SIGTERM is killed after the grace period (1 s).
    let mut stubborn = attempt("trap '' TERM; while :; do sleep 1; done");
    stubborn.plan.time_limit_ms = Some(200);
    let started = Instant::now();
    let record = run(&stubborn, &AtomicBool::new(false)).expect("supervise");
    assert_eq!(record.outcome, ExitOutcome::TimeLimit);
    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_millis(1_100), "killed before the grace: {elapsed:?}");
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
}

/// True while `pid` is a running (not zombie) process.
fn running(pid: u32) -> bool {
    read_proc_stat(pid).is_some_and(|stat| stat.state != 'Z')
}

fn wait_until_gone(pid: u32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(3);
    while running(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    !running(pid)
}

#[test]
fn cancel_reaches_the_whole_group() {
    let attempt = attempt("sleep 60 & echo $! > bg.pid; wait");
    let cancel = AtomicBool::new(false);
    let record = std::thread::scope(|scope| {
        let supervisor = scope.spawn(|| run(&attempt, &cancel));
        let deadline = Instant::now() + Duration::from_secs(5);
        while read(&attempt.run_dir, "bg.pid").trim().is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        cancel.store(true, Ordering::SeqCst);
        supervisor.join().expect("thread")
    })
    .expect("supervise");
    assert_eq!(record.outcome, ExitOutcome::Cancelled);
    let background: u32 = read(&attempt.run_dir, "bg.pid").trim().parse().expect("bg pid");
    assert!(wait_until_gone(background), "background worker {background} survived cancel");
}

#[test]
fn cancel_reaches_a_double_forked_child_that_left_the_group() {
    // The orphan leaves the job's session and group and loses its parent: only the
    // attempt's cgroup (as root) or its CARMA_ATTEMPT_TAG finds it.
    let attempt = attempt("(setsid sleep 60 & echo $! > orphan.pid); sleep 60");
    let cancel = AtomicBool::new(false);
    let record = std::thread::scope(|scope| {
        let supervisor = scope.spawn(|| run(&attempt, &cancel));
        let deadline = Instant::now() + Duration::from_secs(5);
        while !read(&attempt.run_dir, "orphan.pid").ends_with('\n') && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        cancel.store(true, Ordering::SeqCst);
        supervisor.join().expect("thread")
    })
    .expect("supervise");
    assert_eq!(record.outcome, ExitOutcome::Cancelled);
    let orphan: u32 = read(&attempt.run_dir, "orphan.pid").trim().parse().expect("orphan pid");
    assert!(wait_until_gone(orphan), "double-forked child {orphan} survived cancel");
}

#[test]
fn leftover_group_members_are_killed_after_a_normal_exit() {
    let attempt = attempt("sleep 60 & echo $! > bg.pid; exit 0");
    let record = run(&attempt, &AtomicBool::new(false)).expect("supervise");
    assert_eq!(record.outcome, ExitOutcome::Exited { code: 0 });
    let background: u32 = read(&attempt.run_dir, "bg.pid").trim().parse().expect("bg pid");
    assert!(wait_until_gone(background), "background worker {background} outlived the job");
}

#[test]
fn job_runs_as_the_submitter() {
    // As root the job must become nobody; otherwise any other uid must be
    // refused.
    let target_uid = if euid() == 0 { 65534 } else { euid() + 1 };
    let mut attempt = attempt("id -u; id -g; echo HOME=$HOME");
    attempt.plan.uid = target_uid;
    attempt.plan.workdir = PathBuf::from("/");
    let record = run(&attempt, &AtomicBool::new(false)).expect("supervise");
    if euid() == 0 {
        assert_eq!(record.outcome, ExitOutcome::Exited { code: 0 }, "{}", read(&attempt.run_dir, STDERR_LOG));
        let stdout = read(&attempt.run_dir, STDOUT_LOG);
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(lines.first(), Some(&"65534"), "{stdout}");
        let owner = std::os::unix::fs::MetadataExt::uid(
            &std::fs::metadata(attempt.run_dir.join(STDOUT_LOG)).expect("meta"),
        );
        assert_eq!(owner, 65534, "log must belong to the submitter");
        assert!(!stdout.contains("HOME=/root"), "root's HOME leaked: {stdout}");
    } else {
        // A non-root supervisor cannot switch user: it must refuse, not run.
        let ExitOutcome::SpawnFailed { reason } = &record.outcome else { panic!("{record:?}") };
        assert!(reason.contains(&format!("refusing to run the job as uid {target_uid}")), "{reason}");
        assert_eq!(read(&attempt.run_dir, STDOUT_LOG), "");
    }
}

#[test]
fn mps_limit_is_exported_per_visible_device() {
    let mut attempt = attempt("echo $CUDA_MPS_PINNED_DEVICE_MEM_LIMIT");
    attempt.plan.mps_mem_limit_mib = Some(12000);
    let record = run(&attempt, &AtomicBool::new(false)).expect("supervise");
    assert_eq!(record.outcome, ExitOutcome::Exited { code: 0 });
    assert_eq!(read(&attempt.run_dir, STDOUT_LOG), "0=12000M,1=12000M\n");
}

/// Goal: `--signal` reaches the job before its time limit: `B:USR1@1` only the job's first
/// process (it stands in for Slurm's batch shell), `USR1@1` every process of the job.
/// Method: a shell that traps USR1 and waits for a `sleep` child; with `B:` the child
/// survives the warning, without it the warning ends the child too; both stop at the limit.
#[test]
fn the_warning_signal_comes_before_the_limit_to_the_first_process_or_to_all() {
    // The first `wait` returns when the trap runs; the second one returns at once only when
    // the warning ended the child too (with `B:` it waits until the limit stops them all).
    let script = "trap 'echo warned' USR1; sleep 5 & child=$!; wait $child; \
                  wait $child; echo child ended; sleep 5";
    for (signal, expected) in [("B:USR1@1", "warned\n"), ("USR1@1", "warned\nchild ended\n")] {
        let mut warned = attempt(script);
        warned.plan.time_limit_ms = Some(2_500);
        warned.plan.signal = Some(signal.into());
        let record = run(&warned, &AtomicBool::new(false)).expect("supervise");
        assert_eq!(record.outcome, ExitOutcome::TimeLimit, "{signal}");
        assert_eq!(read(&warned.run_dir, STDOUT_LOG), expected, "{signal}");
    }
}

/// Goal: nothing a job does to its own run-folder logs ends its supervisor: sizes that jump
/// between 2 GiB and 4 TiB (sparse) while the supervisor trims, then the log's name replaced
/// by a FIFO and the other's by a link to a root-owned file. Before the fix a trim sized a
/// buffer from the length it saw grow during the trim and aborted on 4 TiB. The supervisor
/// must write exit.json, leave the log (reached through a hard link the job made) under
/// its cap ending with the job's last line, and leave the link's target untouched.
#[test]
fn log_size_games_and_replaced_logs_do_not_end_the_supervisor() {
    let target_dir = tempfile::tempdir().expect("tempdir");
    let target = target_dir.path().join("shadow");
    std::fs::write(&target, "root:secret:0:0\n").expect("target");
    let script = format!(
        r#"head -c 200000 /dev/zero | tr '\0' a
perl -e 'use Time::HiRes qw(time); my $t = time + 1.5; while (time < $t) {{ truncate(STDOUT, 2 << 30); truncate(STDOUT, 4 << 40) }}'
echo last line
ln stdout.log kept.log
rm stdout.log && mkfifo stdout.log
rm stderr.log && ln -s {} stderr.log
echo 'torch.OutOfMemoryError: CUDA out of memory.' >&2"#,
        target.display()
    );
    let mut games = attempt(&script);
    games.plan.log_bytes_max = Some(64 * 1024);
    let record = run(&games, &AtomicBool::new(false)).expect("supervise");
    assert_eq!(record.outcome, ExitOutcome::Exited { code: 0 });
    assert_eq!(read_exit_record(&games.run_dir).expect("read"), Some(record.clone()));
    let note = record.output_truncated.expect("a truncation note");
    assert!(note.starts_with("stdout.log truncated at 64 KiB (log-bytes-max), "), "{note}");
    let kept = std::fs::metadata(games.run_dir.join("kept.log")).expect("kept");
    assert!(kept.len() <= 64 * 1024, "the log holds {} bytes", kept.len());
    let text = std::fs::read(games.run_dir.join("kept.log")).expect("read kept");
    assert!(text.ends_with(b"last line\n"), "the job's last line is kept");
    assert_eq!(std::fs::read_to_string(&target).expect("target"), "root:secret:0:0\n");
    assert_eq!(record.oom.map(|evidence| evidence.signature), Some("torch.OutOfMemoryError".into()));
}
