//! Goal: `DetachedLauncher` starts a detached supervisor without a shell,
//! returns the identity from its claim, finds and signals it, refuses to
//! relaunch a claimed attempt, and reports supervisors that never claim.
//! Method: the carma binary is not available to integration tests, so
//! `carma_exe` is a small sh script standing in for `carma run-task`: it
//! claims like the real supervisor (link of a complete temp file) and then
//! `exec`s `sleep`, keeping its pid and start time.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use carma::exec::liveness::read_proc_stat;
use carma::exec::rundir::{JOB_FILE, create_run_dir};
use carma::exec::{
    BootIdSource, DetachMode, DetachedLauncher, ExecError, LaunchRequest, Launcher, ProcessIdentity,
    identify, is_alive, kill_attempt,
};

const FAKE_CARMA: &str = r#"#!/bin/sh
# Stand-in for: carma --home HOME run-task TASK --attempt N
dir="$2/runs/$4/$6"
echo $$ > "$dir/fake.pid"
[ "$FAKE_MODE" = "exit" ] && exit 3
[ "$FAKE_MODE" = "silent" ] && exec sleep 30
start=$(sed 's/.*) //' /proc/$$/stat | cut -d' ' -f20)
boot=$(cat /proc/sys/kernel/random/boot_id)
printf '{"format_version":1,"supervisor":{"pid":%s,"start_time_ticks":%s,"boot_id":"%s"}}\n' "$$" "$start" "$boot" > "$dir/.claim.tmp"
ln "$dir/.claim.tmp" "$dir/claim.json"
exec sleep 30
"#;

struct Setup {
    _home: tempfile::TempDir,
    request: LaunchRequest,
}

fn setup(mode: &str) -> Setup {
    let home = tempfile::tempdir().expect("tempdir");
    let run_dir = create_run_dir(home.path(), "01launch", 1).expect("run dir");
    // The mode is baked into each test's copy of the script, so tests
    // running in parallel share no environment variables.
    let exe = home.path().join("fake-carma");
    let script = FAKE_CARMA.replace("$FAKE_MODE", mode);
    std::fs::write(&exe, script).expect("write script");
    std::fs::set_permissions(&exe, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    let request = LaunchRequest {
        carma_exe: exe,
        home: home.path().to_path_buf(),
        task_id: "01launch".into(),
        attempt: 1,
        run_dir,
        host_limits: Default::default(),
    };
    Setup { _home: home, request }
}

fn launcher(claim_wait_ms: u64) -> DetachedLauncher {
    DetachedLauncher { boot_id: BootIdSource::default(), detach_mode: DetachMode::Setsid, claim_wait_ms }
}

fn wait_until_dead(pid: u32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while read_proc_stat(pid).is_some_and(|stat| stat.state != 'Z') && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    read_proc_stat(pid).is_none_or(|stat| stat.state == 'Z')
}

/// Launches, retrying while the fresh script is "text file busy": another test thread may
/// fork between our write and its own exec, holding a copy of the write descriptor until then
/// (the classic ETXTBSY race of multi-threaded programs that write and run a file).
fn launch(launcher: &mut DetachedLauncher, request: &LaunchRequest) -> Result<ProcessIdentity, ExecError> {
    let mut tries = 0;
    loop {
        match launcher.launch(request) {
            Err(ExecError::LaunchFailed { reason, .. }) if reason.contains("os error 26") && tries < 100 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

fn fake_pid(run_dir: &Path) -> u32 {
    std::fs::read_to_string(run_dir.join("fake.pid")).expect("fake.pid").trim().parse().expect("pid")
}

#[test]
fn launch_detaches_finds_and_signals_the_supervisor() {
    let setup = setup("claim");
    let mut launcher = launcher(3_000);
    let supervisor = launch(&mut launcher, &setup.request).expect("launch");
    let boot = BootIdSource::default();
    assert!(is_alive(&supervisor, &boot));
    let stat = read_proc_stat(supervisor.pid).expect("stat");
    assert_eq!(stat.session as u32, supervisor.pid, "supervisor must lead its own session");
    assert_eq!(launcher.find(&setup.request.run_dir), Some(supervisor.clone()));
    // Launching again adopts the live supervisor instead of starting one.
    assert_eq!(launch(&mut launcher, &setup.request).expect("adopt"), supervisor);

    assert!(launcher.signal(&setup.request.run_dir, libc::SIGTERM).expect("signal"));
    assert!(wait_until_dead(supervisor.pid), "supervisor survived SIGTERM");
    let deadline = Instant::now() + Duration::from_secs(5);
    while launcher.find(&setup.request.run_dir).is_some() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(launcher.find(&setup.request.run_dir), None);
    assert!(!launcher.signal(&setup.request.run_dir, libc::SIGTERM).expect("signal dead"));
    let relaunch = launch(&mut launcher, &setup.request);
    assert!(matches!(relaunch, Err(ExecError::AlreadyClaimed { .. })), "{relaunch:?}");
}

#[test]
fn supervisor_that_exits_without_claiming_is_a_launch_failure() {
    let setup = setup("exit");
    let started = Instant::now();
    let err = launcher(3_000).launch(&setup.request).expect_err("no claim");
    assert!(matches!(err, ExecError::LaunchFailed { .. }), "{err}");
    assert!(started.elapsed() < Duration::from_secs(2), "did not notice the exit");
}

#[test]
fn supervisor_that_never_claims_times_out() {
    let setup = setup("silent");
    let started = Instant::now();
    let err = launcher(300).launch(&setup.request).expect_err("no claim");
    assert!(matches!(err, ExecError::LaunchTimeout { waited_ms: 300, .. }), "{err}");
    assert!(started.elapsed() >= Duration::from_millis(300));
    let pid = fake_pid(&setup.request.run_dir);
    // SAFETY: kills the stand-in supervisor this test started.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
}

#[test]
fn launch_refuses_a_run_dir_outside_home() {
    let setup = setup("claim");
    let mut request = setup.request.clone();
    request.run_dir = PathBuf::from("/tmp/elsewhere");
    let err = launcher(300).launch(&request).expect_err("mismatch");
    assert!(matches!(err, ExecError::InvalidPlan { .. }), "{err}");
}

#[test]
fn kill_attempt_signals_only_a_live_recorded_group() {
    let setup = setup("claim");
    let run_dir = &setup.request.run_dir;
    let boot = BootIdSource::default();
    assert!(!kill_attempt(run_dir, libc::SIGKILL, &boot).expect("no job.json yet"));
    let mut job =
        std::process::Command::new("sleep").arg("30").process_group(0).spawn().expect("spawn sleep");
    let identity = identify(job.id(), &boot).expect("identify");
    let record = serde_json::json!({"format_version": 1, "job": identity, "pgid": job.id()});
    std::fs::write(run_dir.join(JOB_FILE), record.to_string()).expect("job.json");
    assert!(kill_attempt(run_dir, libc::SIGKILL, &boot).expect("kill"));
    let status = job.wait().expect("wait");
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(libc::SIGKILL));
    assert!(!kill_attempt(run_dir, libc::SIGKILL, &boot).expect("dead job"));
}
