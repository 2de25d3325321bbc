//! The supervisor: the body of `carma run-task ID --attempt N`. It claims
//! the attempt, starts the job, forwards cancellation, enforces the time
//! limit, waits, ends whatever the job left behind, looks for GPU OOM
//! evidence and writes the exit record.
//!
//! Every path after a successful claim ends in `exit.json`, including a
//! plan that cannot be read or a job that cannot start (`SpawnFailed`): the
//! tick then records Failed instead of waiting for a Lost. A supervisor that
//! loses the claim race returns [`ExecError::AlreadyClaimed`] and touches
//! nothing.
//!
//! An attempt's processes live and die together ([`super::contain`]): the
//! supervisor is a child subreaper, so double-forked orphans come back to
//! it; as root it gives the job a cgroup of its own ([`JobCgroup`]); and
//! when the job's first process ends (exit, time limit, cancel) it ends
//! every other process of the attempt (SIGTERM, grace, SIGKILL, until a
//! fresh look at `/proc` finds none) **before** writing `exit.json`: stray
//! workers would otherwise keep GPU memory that the scheduler believes is
//! free, and a retry could run beside them.
//!
//! The run-folder logs stay under `log-bytes-max` ([`super::logcap`]): the
//! wait loop trims them at every poll, and once more after the attempt's
//! processes are gone, before the OOM scan reads their tails.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use super::ExecError;
use super::atomic::{create_file_exclusive, to_versioned_json, write_json_atomic};
use super::cgroup::JobCgroup;
use super::contain::{ATTEMPT_TAG_ENV, Patience, Selector, TagRule, attempt_tag, signal_selected, terminate};
use super::gpu_watch::{GpuReadings, OpenSource, Watch};
use super::hostlimit::{HostMemoryEnd, memory_end};
use super::hostlimit_v1::V1Cgroups;
use super::interactive::attach::hold;
use super::interactive::{Session, Terminal};
use super::liveness::{BootIdSource, ProcessIdentity, identify};
use super::logcap::CappedLog;
use super::output::{JobOutputs, ScanSource, open_outputs, own_by_submitter, scan_logs_for_oom};
use super::plan::AttemptPlan;
use super::record::{ClaimRecord, ExitOutcome, ExitRecord, JobRecord};
use super::rundir::{CLAIM_FILE, EXIT_FILE, JOB_FILE, JOB_SCRIPT, STDERR_LOG, parse_run_dir};
use super::spawn::{JobCredentials, build_env, resolve_credentials, resolve_program, spawn_contained};

mod wait;

use wait::{Limit, Recording, wait_for_job, warning};

/// Time between SIGTERM and SIGKILL when cancelling or at the time limit.
pub const KILL_GRACE_MS_DEFAULT: u64 = 10_000;
/// How much of the end of each log is scanned for OOM signatures.
pub const OOM_SCAN_TAIL_BYTES: u64 = 4 * 1024 * 1024;
/// How often the supervisor checks the job, cancellation and the limit.
pub const POLL_INTERVAL_MS_DEFAULT: u64 = 50;
/// How long after the first SIGKILL the supervisor keeps killing what is
/// left before it writes the exit record anyway, naming the survivors in
/// its log; the tick then holds the attempt's verdict until they are gone.
pub const KILL_PATIENCE_MS: u64 = 30_000;

/// Set by the SIGTERM/SIGINT handler that [`supervise`] installs.
static CANCEL_REQUESTED: AtomicBool = AtomicBool::new(false);

/// The signal the tick sends a supervisor whose attempt is preempted: warn the job now.
pub const PREEMPT_NOTICE_SIGNAL: i32 = libc::SIGUSR2;

/// Set by the [`PREEMPT_NOTICE_SIGNAL`] handler that [`supervise`] installs; the wait loop
/// sends the job its `--signal` signal (or SIGTERM) once and clears it.
static PREEMPT_NOTICE: AtomicBool = AtomicBool::new(false);

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
    /// Make this process a child subreaper and reap the orphans it adopts.
    /// Only for a process that runs nothing but this attempt (`carma
    /// run-task`): every descendant then counts as the attempt's.
    pub child_subreaper: bool,
    /// Opens the GPU source the plan names for the supervisor's own memory readings.
    pub gpu_source: Option<OpenSource>,
}

/// What happened to the job, before OOM scanning.
struct JobRun {
    started_ms: u64,
    ended_ms: u64,
    outcome: ExitOutcome,
    job_pid: Option<u32>,
    /// The logs the OOM scan reads.
    scans: Vec<ScanSource>,
    /// The run-folder logs under a cap.
    caps: Vec<CappedLog>,
    /// The job's host memory limit and the kernel's kills at it.
    host_memory: Option<HostMemoryEnd>,
    /// What the supervisor read of the attempt's GPU memory.
    gpu_readings: Option<GpuReadings>,
}

/// Everything needed to spawn, computed before the fork.
struct Prepared {
    plan: AttemptPlan,
    program: std::path::PathBuf,
    env: std::collections::BTreeMap<String, String>,
    credentials: JobCredentials,
    outputs: JobOutputs,
}

/// Why the job cannot start, and whose stderr log to tell.
struct NotStarted {
    reason: String,
    credentials: Option<JobCredentials>,
}

/// Supervise the attempt in `run_dir` as `carma run-task` does: SIGTERM
/// and SIGINT cancel the job, and this process becomes a child subreaper.
/// Blocks until the job and everything it started have ended and
/// `exit.json` is written. Call it on the main thread of a process that
/// runs nothing else: the job's parent-death signal follows the spawning
/// thread, and every descendant is taken for the attempt's.
pub fn supervise(
    run_dir: &Path,
    boot_id: &BootIdSource,
    gpu_source: Option<OpenSource>,
) -> Result<ExitRecord, ExecError> {
    install_cancel_handlers();
    super::pause::install();
    let options = SuperviseOptions {
        cancel_requested: &CANCEL_REQUESTED,
        kill_grace_ms: KILL_GRACE_MS_DEFAULT,
        poll_interval_ms: POLL_INTERVAL_MS_DEFAULT,
        child_subreaper: true,
        gpu_source,
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
    if options.child_subreaper {
        // SAFETY: prctl with integer arguments; it only sets a flag on this process.
        if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
            eprintln!("carma run-task: cannot become a child subreaper: {}", std::io::Error::last_os_error());
        }
    }
    claim(run_dir, boot_id)?;
    let mut run = match prepare(run_dir, &task_id, attempt) {
        Ok(prepared) => run_job(run_dir, prepared, boot_id, options),
        Err(not_started) => spawn_failed(run_dir, not_started.reason, not_started.credentials.as_ref()),
    };
    // Nothing of the attempt writes any more: this trim leaves each log within its cap.
    run.caps.iter_mut().for_each(CappedLog::trim);
    let output_truncated = truncation_note(&run.caps);
    if let Some(note) = &output_truncated {
        // Also here: a Finished task's journal record has no field for it.
        eprintln!("carma run-task: {note}");
    }
    let oom = match run.job_pid {
        Some(_) => scan_logs_for_oom(&run.scans, &run.caps, OOM_SCAN_TAIL_BYTES),
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
        output_truncated,
        host_memory: run.host_memory,
        gpu_readings: run.gpu_readings,
    };
    write_json_atomic(&run_dir.join(EXIT_FILE), &record, 0o600)?;
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
    // SAFETY: getsid(0) asks about this process and cannot fail.
    let session = Some(unsafe { libc::getsid(0) });
    let bytes = to_versioned_json(&path, &ClaimRecord { supervisor, session })?;
    if create_file_exclusive(&path, &bytes, 0o600)? {
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
    let bytes = to_versioned_json(&path, &ClaimRecord { supervisor, session: None })?;
    create_file_exclusive(&path, &bytes, 0o600)
}

/// Read the plan and compute the job's user, env, program and outputs.
fn prepare(run_dir: &Path, task_id: &str, attempt: u32) -> Result<Prepared, NotStarted> {
    let no_user = |reason: String| NotStarted { reason, credentials: None };
    let plan = AttemptPlan::read(run_dir).map_err(|err| no_user(err.to_string()))?;
    if plan.task_id != task_id || plan.attempt != attempt {
        return Err(no_user(format!(
            "plan is for {} attempt {} but the run dir is for {task_id} attempt {attempt}",
            plan.task_id, plan.attempt
        )));
    }
    let mut plan = plan;
    let credentials = resolve_credentials(&plan).map_err(no_user)?;
    let failed = |reason: String| NotStarted { reason, credentials: Some(credentials.clone()) };
    if let Some(script) = plan.script.take() {
        // A job script runs as its copy, through the interpreter its #! line names.
        let copy = write_script_copy(run_dir, &script.text, &credentials).map_err(failed)?;
        let rest = plan.argv.split_off(1.min(plan.argv.len()));
        plan.argv = script.interpreter;
        plan.argv.push(copy.display().to_string());
        plan.argv.extend(rest);
    }
    let mut env = build_env(&plan, &credentials, &|key| std::env::var(key).ok());
    super::srun::put_on_path(run_dir, &mut env);
    let path_var = env.get("PATH").map(String::as_str).unwrap_or_default();
    let argv0 = plan.argv.first().ok_or_else(|| failed("argv is empty".into()))?;
    let program = resolve_program(argv0, path_var, &plan.workdir).map_err(failed)?;
    if !plan.workdir.is_dir() {
        return Err(failed(format!("workdir {} is not a directory", plan.workdir.display())));
    }
    let outputs = open_outputs(run_dir, &plan, &credentials).map_err(failed)?;
    let checkpoint = super::checkpoint::create_checkpoint_file(run_dir, &credentials).map_err(failed)?;
    let checkpoint = std::path::absolute(&checkpoint).unwrap_or(checkpoint);
    env.insert(super::checkpoint::CHECKPOINT_FILE_ENV.into(), checkpoint.display().to_string());
    Ok(Prepared { plan, program, env, credentials, outputs })
}

/// Writes the job script's copy into the run dir: exclusively, never through a link, owned
/// by the submitter, mode 0500 (readable and runnable by them only).
fn write_script_copy(
    run_dir: &Path,
    text: &str,
    credentials: &JobCredentials,
) -> Result<std::path::PathBuf, String> {
    use std::os::unix::fs::PermissionsExt;
    let path = run_dir.join(JOB_SCRIPT);
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o500)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(&path)
        .map_err(|err| format!("cannot create the job script copy {}: {err}", path.display()))?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.set_permissions(std::fs::Permissions::from_mode(0o500)))
        .map_err(|err| format!("cannot write the job script copy {}: {err}", path.display()))?;
    if credentials.switch_user {
        std::os::unix::fs::fchown(&file, Some(credentials.uid), Some(credentials.gid))
            .map_err(|err| format!("cannot chown {}: {err}", path.display()))?;
    }
    Ok(path)
}

/// Spawn the job, record it in `job.json`, wait for it, then end every
/// process the attempt left.
fn run_job(
    run_dir: &Path,
    prepared: Prepared,
    boot_id: &BootIdSource,
    options: &SuperviseOptions<'_>,
) -> JobRun {
    let Prepared { plan, program, env, credentials, outputs } = prepared;
    let JobOutputs { stdout, stderr, scans, mut caps } = outputs;
    let terminal = match Terminal::for_attempt(run_dir, &plan, &credentials, options.cancel_requested) {
        Ok(terminal) => terminal,
        Err(reason) => return spawn_failed(run_dir, reason, Some(&credentials)),
    };
    let log = terminal.as_ref().and_then(|_| stdout.try_clone().ok());
    let slave = terminal.as_ref().map(Terminal::slave);
    let (mut child, cgroup, v1) =
        match spawn_contained(&plan, &program, &env, &credentials, (stdout, stderr), slave) {
            Ok(spawned) => spawned,
            Err(reason) => return spawn_failed(run_dir, reason, Some(&credentials)),
        };
    // The attempt's run time, and its limit, count from here, when its first process exists:
    // what the supervisor does next (the allocation's socket, `job.json`'s fsync, the relay)
    // can be slow on a loaded or full disk, and must not be time the job runs unmeasured.
    let (started, started_ms) = (Instant::now(), now_ms());
    let job_pid = child.id();
    let holder = hold(run_dir, &plan, &env, &credentials, cgroup.as_ref(), v1.as_ref());
    let tag = TagRule {
        variable: format!("{ATTEMPT_TAG_ENV}={}", attempt_tag(&plan.task_id, plan.attempt)),
        owner_uid: credentials.uid,
    };
    let selector = attempt_selector(tag, cgroup, options.child_subreaper);
    // The job's pid is ours until it is reaped, so it is a safe root while it runs.
    let mut while_running = selector.clone();
    if !options.child_subreaper {
        while_running.roots.push(job_pid);
    }
    // Who the job is, read while its pid is still ours (unreaped): `job.json`'s identity.
    let record = match job_record(run_dir, job_pid, credentials.uid, selector.cgroup.as_ref(), boot_id) {
        Ok(record) => record,
        Err(err) => {
            return not_recorded(
                run_dir,
                err,
                (&mut child, &while_running, &selector),
                &credentials,
                v1,
                (scans, caps),
                options,
            );
        }
    };
    // `job.json` is written and fsynced beside the job, not before its watch: on a full or
    // slow disk the fsync can wait many seconds on the filesystem's journal, and the limit
    // is kept from the spawn all the same. A write that fails ends the job (see [`Recording`]).
    std::thread::scope(|scope| {
        let mut recording = Recording::start(scope, run_dir.join(JOB_FILE), record);
        let pgid = libc::pid_t::try_from(job_pid).unwrap_or(0);
        let session = |log| Session {
            task_id: plan.task_id.clone(),
            owner_uid: credentials.uid,
            time_limit_ms: plan.time_limit_ms,
            job_pgid: pgid,
            log,
        };
        let relay = terminal.map(|terminal| terminal.start(session(log))).transpose().unwrap_or_else(|why| {
            // Nobody could ever reach the job's terminal: end it rather than let it hold a GPU.
            eprintln!("carma run-task: {why}; ending the interactive job");
            signal_selected(&while_running, libc::SIGKILL);
            None
        });
        // A terminal's end is a hang-up: an interactive shell ignores SIGTERM but not SIGHUP.
        let stop_signal = if plan.interactive.is_some() { libc::SIGHUP } else { libc::SIGTERM };
        let limit = Limit {
            from: started,
            ms: plan.time_limit_ms,
            warn: warning(plan.signal.as_deref()),
            stop_signal,
        };
        let watch =
            Watch::start(plan.gpu_watch.as_ref(), options.gpu_source, &plan.gpu_uuids, while_running.clone());
        let (outcome, grace_left_ms) =
            wait_for_job(&mut child, &while_running, limit, &mut caps, &mut recording, options);
        let gpu_readings = watch.map(Watch::finish);
        // Read before the cgroup goes: the kernel's count of kills at the host memory limit.
        let sigkilled = matches!(outcome, ExitOutcome::Signaled { signal: libc::SIGKILL });
        let host_memory = super::hostlimit_v1::memory_end_of(v1.as_ref(), &plan.host_limits, sigkilled)
            .or_else(|| memory_end(&plan.host_limits, selector.cgroup.as_ref().map(|c| c.path.as_path())));
        end_leftovers(&selector, grace_left_ms, options);
        // The job has ended once its last process is gone; closing its terminal, its socket and
        // its cgroups is the supervisor's own time, not the attempt's.
        let ended_ms = now_ms();
        v1.iter().for_each(V1Cgroups::remove_or_say);
        if let Some(relay) = relay {
            relay.finish(&plan.task_id, &outcome, plan.time_limit_ms);
        }
        match holder {
            Some(Ok(holder)) => holder.finish(),
            Some(Err(why)) => eprintln!("carma run-task: nobody can attach to the allocation: {why}"),
            None => {}
        }
        if plan.interactive.is_some() {
            super::interactive::close(run_dir);
        }
        if let Some(err) = recording.finish() {
            let mut run = spawn_failed(
                run_dir,
                format!("job started but cannot be recorded: {err}"),
                Some(&credentials),
            );
            run.scans = scans;
            run.caps = caps;
            return run;
        }
        JobRun {
            started_ms,
            ended_ms,
            outcome,
            job_pid: Some(job_pid),
            scans,
            caps,
            host_memory,
            gpu_readings,
        }
    })
}

/// A job whose identity cannot be read: nobody could find it after a crash, so it does not run.
fn not_recorded(
    run_dir: &Path,
    err: ExecError,
    (child, while_running, selector): (&mut Child, &Selector, &Selector),
    credentials: &JobCredentials,
    v1: Option<V1Cgroups>,
    (scans, caps): (Vec<ScanSource>, Vec<CappedLog>),
    options: &SuperviseOptions<'_>,
) -> JobRun {
    let _ = signal_selected(while_running, libc::SIGKILL);
    let _ = child.wait();
    end_leftovers(selector, 0, options);
    v1.iter().for_each(V1Cgroups::remove_or_say);
    let mut run =
        spawn_failed(run_dir, format!("job started but cannot be recorded: {err}"), Some(credentials));
    run.scans = scans;
    run.caps = caps;
    run
}

/// The marks of this attempt's processes as its supervisor sees them.
fn attempt_selector(tag: TagRule, cgroup: Option<JobCgroup>, child_subreaper: bool) -> Selector {
    let me = std::process::id();
    // SAFETY: getsid(0) asks about this process and cannot fail.
    let session = unsafe { libc::getsid(0) };
    let leads_session = i64::from(session) == i64::from(me);
    Selector {
        // With a cgroup, environments need not be read: the cgroup is exact.
        tag: cgroup.is_none().then_some(tag),
        // Only when the launcher gave this process a session of its own.
        session: leads_session.then_some(session),
        pgrp: None,
        // A subreaper's descendants are all the attempt's, orphans included.
        roots: if child_subreaper { vec![me] } else { Vec::new() },
        cgroup,
        exclude: vec![me, 1],
    }
}

/// End everything left of the attempt, SIGTERM first unless the grace is
/// spent, and remove its cgroup; survivors are named in the log.
fn end_leftovers(selector: &Selector, grace_ms: u64, options: &SuperviseOptions<'_>) {
    let patience = Patience {
        term_grace_ms: grace_ms,
        kill_wait_ms: KILL_PATIENCE_MS,
        poll_ms: options.poll_interval_ms.max(1),
        reap_own_children: options.child_subreaper,
    };
    let done = terminate(selector, &patience);
    if !done.signalled.is_empty() {
        eprintln!("carma run-task: ended {} leftover process(es) of the job", done.signalled.len());
    }
    if !done.remaining.is_empty() {
        eprintln!(
            "carma run-task: processes survive SIGKILL after {} s: {}; the tick holds the attempt until they are gone",
            KILL_PATIENCE_MS / 1000,
            done.survivors()
        );
        return;
    }
    if let Some(cgroup) = &selector.cgroup
        && let Err(err) = cgroup.remove()
    {
        eprintln!("carma run-task: cannot remove {}: {err}", cgroup.path.display());
    }
}

/// `job.json`: the job's identity, group, user and cgroup.
fn job_record(
    run_dir: &Path,
    job_pid: u32,
    uid: u32,
    cgroup: Option<&JobCgroup>,
    boot_id: &BootIdSource,
) -> Result<JobRecord, ExecError> {
    let job = identify(job_pid, boot_id).ok_or_else(|| {
        let source = std::io::Error::other(format!("job pid {job_pid} has no /proc entry"));
        ExecError::Io { op: "identify the job for", path: run_dir.join(JOB_FILE), source }
    })?;
    let pgid = i32::try_from(job_pid).unwrap_or(i32::MAX);
    Ok(JobRecord { job, pgid, uid: Some(uid), cgroup: cgroup.map(|c| c.path.clone()) })
}

/// A run that never started: the reason also goes to the run folder's
/// `stderr.log` (the submitter's, mode 0600), where the user looks first.
fn spawn_failed(run_dir: &Path, reason: String, credentials: Option<&JobCredentials>) -> JobRun {
    let path = run_dir.join(STDERR_LOG);
    let stderr_log = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(&path);
    if let Ok(mut log) = stderr_log {
        if let Some(credentials) = credentials {
            let _ = own_by_submitter(&log, &path, credentials);
        }
        let _ = writeln!(log, "carma: the job did not start: {reason}");
    }
    let now = now_ms();
    let outcome = ExitOutcome::SpawnFailed { reason };
    let (scans, caps) = (Vec::new(), Vec::new());
    let (host_memory, gpu_readings) = (None, None);
    JobRun { started_ms: now, ended_ms: now, outcome, job_pid: None, scans, caps, host_memory, gpu_readings }
}

/// What the caps dropped, in one line for the exit record; `None` if nothing.
fn truncation_note(caps: &[CappedLog]) -> Option<String> {
    let parts: Vec<String> = caps.iter().filter_map(CappedLog::summary).collect();
    (!parts.is_empty()).then(|| parts.join("; "))
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

/// Install SIGTERM and SIGINT handlers that set [`CANCEL_REQUESTED`], and the
/// [`PREEMPT_NOTICE_SIGNAL`] handler that sets [`PREEMPT_NOTICE`].
fn install_cancel_handlers() {
    extern "C" fn on_cancel_signal(_signal: libc::c_int) {
        CANCEL_REQUESTED.store(true, Ordering::SeqCst);
    }
    extern "C" fn on_preempt_signal(_signal: libc::c_int) {
        PREEMPT_NOTICE.store(true, Ordering::SeqCst);
    }
    let handlers: [(i32, extern "C" fn(libc::c_int)); 3] = [
        (libc::SIGTERM, on_cancel_signal),
        (libc::SIGINT, on_cancel_signal),
        (PREEMPT_NOTICE_SIGNAL, on_preempt_signal),
    ];
    for (signal, handler) in handlers {
        // SAFETY: the handler only stores to an atomic (async-signal-safe);
        // sigaction gets a fully initialised struct.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = handler as *const () as libc::sighandler_t;
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
