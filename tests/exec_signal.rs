//! Goal: `supervise` (the real entry point) turns a SIGTERM sent to the
//! supervisor process into a cancel of the job. Method: this test binary
//! holds a single test, so the process-wide handler it installs cannot
//! affect other tests; the test SIGTERMs its own process while a job runs.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use carma::exec::rundir::{JOB_FILE, create_run_dir};
use carma::exec::{AttemptPlan, BootIdSource, ExitOutcome, supervise};

#[test]
fn sigterm_to_the_supervisor_cancels_the_job() {
    let home = tempfile::tempdir().expect("tempdir");
    let run_dir = create_run_dir(home.path(), "0sig", 1).expect("run dir");
    let plan = AttemptPlan {
        task_id: "0sig".into(),
        attempt: 1,
        argv: vec!["sleep".into(), "60".into()],
        env: BTreeMap::new(),
        workdir: run_dir.clone(),
        // SAFETY: geteuid cannot fail.
        uid: unsafe { libc::geteuid() },
        gid: None,
        gpu_uuids: vec![],
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
    plan.write_atomic(&run_dir).expect("plan");
    let started = Instant::now();
    let record = std::thread::scope(|scope| {
        let supervisor = scope.spawn(|| supervise(&run_dir, &BootIdSource::default(), None));
        let deadline = Instant::now() + Duration::from_secs(5);
        while !run_dir.join(JOB_FILE).exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        // SAFETY: signals our own process, whose handler `supervise` installed.
        let sent = unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
        assert_eq!(sent, 0);
        supervisor.join().expect("thread")
    })
    .expect("supervise");
    assert_eq!(record.outcome, ExitOutcome::Cancelled);
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
}
