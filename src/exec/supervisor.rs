//! The supervisor: the body of `carma run-task ID --attempt N`. It claims
//! the attempt, starts the job, forwards cancellation, enforces the time
//! limit, waits, looks for GPU OOM evidence and writes the exit record.
//!
//! Every path after a successful claim ends in `exit.json`, including a
//! plan that cannot be read or a job that cannot start (`SpawnFailed`): the
//! tick then records Failed instead of waiting for a Lost. A supervisor that
//! loses the claim race returns [`ExecError::AlreadyClaimed`] and touches
//! nothing. When the job's leader exits, whatever is left in its process
//! group gets SIGKILL: stray workers would otherwise keep GPU memory that
//! the scheduler believes is free.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::atomic::{create_file_exclusive, to_versioned_json, write_json_atomic};
use super::liveness::{BootIdSource, ProcessIdentity, identify};
use super::oom::{OomEvidence, scan_oom_file};
use super::plan::AttemptPlan;
use super::record::{ClaimRecord, ExitOutcome, ExitRecord, JobRecord};
use super::rundir::{CLAIM_FILE, EXIT_FILE, JOB_FILE, STDERR_LOG, STDOUT_LOG, parse_run_dir};
use super::spawn::{build_env, open_log, resolve_credentials, resolve_program, spawn_job};
use super::{ExecError, spawn};

/// Time between SIGTERM and SIGKILL when cancelling or at the time limit.
pub const KILL_GRACE_MS_DEFAULT: u64 = 10_000;
/// How much of the end of each log is scanned for OOM signatures.
pub const OOM_SCAN_TAIL_BYTES: u64 = 4 * 1024 * 1024;
/// How often the supervisor checks the job, cancellation and the limit.
pub const POLL_INTERVAL_MS_DEFAULT: u64 = 50;

/// Set by the SIGTERM/SIGINT handler that [`supervise`] installs.
static CANCEL_REQUESTED: AtomicBool = AtomicBool::new(false);

/// Knobs of [`supervise_with`]; [`supervise`] uses the process-wide signal
/// flag and the defaults.
#[derive(Debug, Clone, Copy)]
pub struct SuperviseOptions<'a> {
    /// When this becomes true the job is cancelled (SIGTERM, grace, SIGKILL).
    pub cancel_requested: &'a AtomicBool,
    /// Grace between SIGTERM and SIGKILL, in ms.
    pub kill_grace_ms: u64,
    /// Poll interval of the wait loop, in ms.
    pub poll_interval_ms: u64,
}

/// Why the supervisor stopped the job itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StopReason {
    Cancelled,
    TimeLimit,
}

/// What happened to the job, before OOM scanning.
struct JobRun {
    started_ms: u64,
    ended_ms: u64,
    outcome: ExitOutcome,
    job_pid: Option<u32>,
}

/// Everything needed to spawn, computed before the fork.
struct Prepared {
    plan: AttemptPlan,
    program: std::path::PathBuf,
    env: std::collections::BTreeMap<String, String>,
    credentials: spawn::JobCredentials,
    logs: (std::fs::File, std::fs::File),
}

/// Supervise the attempt in `run_dir` with SIGTERM/SIGINT handlers
/// installed: a signal cancels the job. Blocks until the job has ended and
/// `exit.json` is written. Call it on a thread that outlives the job (the
/// main thread): the job's parent-death signal follows the spawning thread.
pub fn supervise(run_dir: &Path, boot_id: &BootIdSource) -> Result<ExitRecord, ExecError> {
    install_cancel_handlers();
    let options = SuperviseOptions {
        cancel_requested: &CANCEL_REQUESTED,
        kill_grace_ms: KILL_GRACE_MS_DEFAULT,
        poll_interval_ms: POLL_INTERVAL_MS_DEFAULT,
    };
    supervise_with(run_dir, boot_id, &options)
}

/// [`supervise`] without touching signal handlers: cancellation comes from
/// `options.cancel_requested` (tests, embedding).
pub fn supervise_with(
    run_dir: &Path,
    boot_id: &BootIdSource,
    options: &SuperviseOptions<'_>,
) -> Result<ExitRecord, ExecError> {
    let Some((task_id, attempt)) = parse_run_dir(run_dir) else {
        let reason = "not a run dir: expected HOME/runs/<task_id>/<attempt>".to_string();
        return Err(ExecError::InvalidPlan { path: run_dir.to_path_buf(), reason });
    };
    claim(run_dir, boot_id)?;
    let run = match prepare(run_dir, &task_id, attempt) {
        Ok(prepared) => run_job(run_dir, prepared, boot_id, options),
        Err(reason) => spawn_failed(run_dir, reason),
    };
    let oom = match run.job_pid {
        Some(_) => scan_logs_for_oom(run_dir),
        None => None,
    };
    let record = ExitRecord {
        task_id,
        attempt,
        started_ms: run.started_ms,
        ended_ms: run.ended_ms,
        outcome: run.outcome,
        oom,
        job_pid: run.job_pid,
    };
    write_json_atomic(&run_dir.join(EXIT_FILE), &record, 0o644)?;
    Ok(record)
}

/// Claim the attempt: publish `claim.json` with this process's identity,
/// exclusively. Fails with [`ExecError::AlreadyClaimed`] if it exists.
fn claim(run_dir: &Path, boot_id: &BootIdSource) -> Result<(), ExecError> {
    let path = run_dir.join(CLAIM_FILE);
    boot_id.current()?;
    let supervisor = identify(std::process::id(), boot_id).ok_or_else(|| {
        let source = std::io::Error::other("cannot identify the supervisor process");
        ExecError::Io { op: "read /proc/self/stat for", path: path.clone(), source }
    })?;
    let bytes = to_versioned_json(&path, &ClaimRecord { supervisor })?;
    if create_file_exclusive(&path, &bytes, 0o644)? {
        Ok(())
    } else {
        Err(ExecError::AlreadyClaimed { path })
    }
}

/// Takes the attempt's claim on behalf of the tick, with a tombstone identity (pid 0), so
/// that no supervisor can ever start it. `Ok(false)` when a supervisor claimed it first.
pub fn claim_abandoned(run_dir: &Path) -> Result<bool, ExecError> {
    let path = run_dir.join(CLAIM_FILE);
    let supervisor = ProcessIdentity { pid: 0, start_time_ticks: 0, boot_id: "abandoned-by-tick".into() };
    let bytes = to_versioned_json(&path, &ClaimRecord { supervisor })?;
    create_file_exclusive(&path, &bytes, 0o644)
}

/// Read the plan and compute the job's user, env, program and logs.
/// `Err` is the SpawnFailed reason.
fn prepare(run_dir: &Path, task_id: &str, attempt: u32) -> Result<Prepared, String> {
    let plan = AttemptPlan::read(run_dir).map_err(|err| err.to_string())?;
    if plan.task_id != task_id || plan.attempt != attempt {
        return Err(format!(
            "plan is for {} attempt {} but the run dir is for {task_id} attempt {attempt}",
            plan.task_id, plan.attempt
        ));
    }
    let credentials = resolve_credentials(&plan)?;
    let env = build_env(&plan, &credentials, &|key| std::env::var(key).ok());
    let path_var = env.get("PATH").map(String::as_str).unwrap_or_default();
    let argv0 = plan.argv.first().ok_or("argv is empty")?;
    let program = resolve_program(argv0, path_var, &plan.workdir)?;
    if !plan.workdir.is_dir() {
        return Err(format!("workdir {} is not a directory", plan.workdir.display()));
    }
    let stdout = open_log(&run_dir.join(STDOUT_LOG), &credentials)?;
    let stderr = open_log(&run_dir.join(STDERR_LOG), &credentials)?;
    Ok(Prepared { plan, program, env, credentials, logs: (stdout, stderr) })
}

/// Spawn the job, record it in `job.json`, and wait for it.
fn run_job(
    run_dir: &Path,
    prepared: Prepared,
    boot_id: &BootIdSource,
    options: &SuperviseOptions<'_>,
) -> JobRun {
    let started_ms = now_ms();
    let Prepared { plan, program, env, credentials, logs } = prepared;
    let mut child = match spawn_job(&plan, &program, &env, &credentials, logs) {
        Ok(child) => child,
        Err(reason) => return spawn_failed(run_dir, reason),
    };
    let job_pid = child.id();
    let pgid = i32::try_from(job_pid).unwrap_or(i32::MAX);
    if let Err(err) = write_job_record(run_dir, job_pid, pgid, boot_id) {
        // Without job.json nobody could cancel the job: do not let it run.
        let _ = signal_group(pgid, libc::SIGKILL);
        let _ = child.wait();
        return spawn_failed(run_dir, format!("job started but cannot be recorded: {err}"));
    }
    let outcome = wait_for_job(&mut child, pgid, plan.time_limit_ms, options);
    // Leftover members of the group would keep GPU memory: end them.
    let _ = signal_group(pgid, libc::SIGKILL);
    JobRun { started_ms, ended_ms: now_ms(), outcome, job_pid: Some(job_pid) }
}

/// Poll the job until it exits, stopping it on cancel or time limit: SIGTERM
/// to the group, then SIGKILL after the grace period.
fn wait_for_job(
    child: &mut Child,
    pgid: i32,
    time_limit_ms: Option<u64>,
    options: &SuperviseOptions<'_>,
) -> ExitOutcome {
    let started = Instant::now();
    let deadline = time_limit_ms.map(|ms| started + Duration::from_millis(ms));
    let mut stop: Option<StopReason> = None;
    let mut kill_at: Option<Instant> = None;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return outcome_of(status, stop),
            Ok(None) => {}
            Err(err) => {
                // try_wait on our own unreaped child cannot fail; if it does,
                // end the job so it never runs unsupervised.
                eprintln!("carma run-task: cannot wait for job {pgid}: {err}; killing it");
                let _ = signal_group(pgid, libc::SIGKILL);
                return outcome_of(child.wait().unwrap_or(ExitStatus::from_raw(libc::SIGKILL)), stop);
            }
        }
        let now = Instant::now();
        if stop.is_none() {
            let reason = if options.cancel_requested.load(Ordering::SeqCst) {
                Some(StopReason::Cancelled)
            } else if deadline.is_some_and(|deadline| now >= deadline) {
                Some(StopReason::TimeLimit)
            } else {
                None
            };
            if let Some(reason) = reason {
                stop = Some(reason);
                let _ = signal_group(pgid, libc::SIGTERM);
                kill_at = Some(now + Duration::from_millis(options.kill_grace_ms));
            }
        } else if kill_at.is_some_and(|kill_at| now >= kill_at) {
            let _ = signal_group(pgid, libc::SIGKILL);
            kill_at = None;
        }
        std::thread::sleep(Duration::from_millis(options.poll_interval_ms.max(1)));
    }
}

/// Map a wait status and the supervisor's own stop reason to an outcome.
fn outcome_of(status: ExitStatus, stop: Option<StopReason>) -> ExitOutcome {
    match (stop, status.code(), status.signal()) {
        (Some(StopReason::Cancelled), _, _) => ExitOutcome::Cancelled,
        (Some(StopReason::TimeLimit), _, _) => ExitOutcome::TimeLimit,
        (None, Some(code), _) => ExitOutcome::Exited { code },
        (None, None, Some(signal)) => ExitOutcome::Signaled { signal },
        // waitpid without WUNTRACED/WCONTINUED reports only exits and kills.
        (None, None, None) => {
            unreachable!("wait status {status:?} is neither an exit nor a signal")
        }
    }
}

/// Write `job.json` with the job's identity and process group.
fn write_job_record(
    run_dir: &Path,
    job_pid: u32,
    pgid: i32,
    boot_id: &BootIdSource,
) -> Result<(), ExecError> {
    let path = run_dir.join(JOB_FILE);
    let job = identify(job_pid, boot_id).ok_or_else(|| {
        let source = std::io::Error::other(format!("job pid {job_pid} has no /proc entry"));
        ExecError::Io { op: "identify the job for", path: path.clone(), source }
    })?;
    write_json_atomic(&path, &JobRecord { job, pgid }, 0o644)
}

/// A run that never started: the reason also goes to `stderr.log`, where
/// the user looks first.
fn spawn_failed(run_dir: &Path, reason: String) -> JobRun {
    let stderr_log = OpenOptions::new().create(true).append(true).open(run_dir.join(STDERR_LOG));
    if let Ok(mut log) = stderr_log {
        let _ = writeln!(log, "carma: the job did not start: {reason}");
    }
    let now = now_ms();
    JobRun { started_ms: now, ended_ms: now, outcome: ExitOutcome::SpawnFailed { reason }, job_pid: None }
}

/// OOM evidence from the tail of stderr, else of stdout. A log that cannot
/// be read is reported on the supervisor's stderr and treated as no evidence.
fn scan_logs_for_oom(run_dir: &Path) -> Option<OomEvidence> {
    [STDERR_LOG, STDOUT_LOG].iter().find_map(|name| {
        scan_oom_file(&run_dir.join(name), OOM_SCAN_TAIL_BYTES).unwrap_or_else(|err| {
            eprintln!("carma run-task: {err}");
            None
        })
    })
}

/// Send `signal` to process group `pgid`; a group that is already gone is
/// not an error.
pub(crate) fn signal_group(pgid: i32, signal: i32) -> Result<(), ExecError> {
    // pgid 0 is our own group and -1 would be every process we may signal.
    assert!(pgid > 1, "refusing to signal process group {pgid}");
    // SAFETY: kill has no memory effects.
    if unsafe { libc::kill(-pgid, signal) } == 0 {
        return Ok(());
    }
    let source = std::io::Error::last_os_error();
    if source.raw_os_error() == Some(libc::ESRCH) {
        return Ok(());
    }
    Err(ExecError::Signal { signal, target: format!("process group {pgid}"), source })
}

/// Install SIGTERM and SIGINT handlers that set [`CANCEL_REQUESTED`].
fn install_cancel_handlers() {
    extern "C" fn on_cancel_signal(_signal: libc::c_int) {
        CANCEL_REQUESTED.store(true, Ordering::SeqCst);
    }
    for signal in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: the handler only stores to an atomic (async-signal-safe);
        // sigaction gets a fully initialised struct.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_cancel_signal as *const () as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            let installed = libc::sigaction(signal, &action, std::ptr::null_mut());
            assert_eq!(installed, 0, "sigaction({signal}) failed with valid arguments");
        }
    }
}

/// Wall-clock ms since the Unix epoch (0 if the clock is before 1970).
fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |elapsed| elapsed.as_millis() as u64)
}
