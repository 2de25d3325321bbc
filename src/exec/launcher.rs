//! Starting supervisors from the tick, finding them again, and signalling.
//!
//! [`DetachedLauncher`] starts `carma --home HOME run-task ID --attempt N`
//! detached from the tick, never through a shell, then waits (at most 3 s)
//! for the supervisor's claim and returns the identity in it. Two ways:
//!
//! * **setsid** (default): a new session, stdin from `/dev/null`, output to
//!   `supervisor.log` in the run dir. A short-lived tick can exit at once.
//! * **systemd-run**, used when `INVOCATION_ID` is set (the tick itself is
//!   a systemd service) and `systemd-run` is on `PATH`: a oneshot service's
//!   cgroup is killed when the service exits, and setsid does not leave the
//!   cgroup, so every job would die with the tick. `systemd-run --unit
//!   carma-task-ID-N --collect` gives each supervisor its own transient
//!   unit. `KillMode=control-group`: whenever the unit stops, which includes
//!   its main process (the supervisor) exiting or being killed, systemd
//!   sends SIGTERM to every process left in the unit's cgroup at once, then
//!   SIGKILL after `TimeoutStopSec`, so nothing of the attempt outlives its
//!   supervisor. (`mixed` would SIGTERM only the main process: after a
//!   killed supervisor the job's children would live on until the stop
//!   timeout.) Cancel does not go through systemd: the tick signals the
//!   supervisor, which forwards SIGTERM to the job and escalates to SIGKILL
//!   after its own grace. On `systemctl stop` the supervisor gets SIGTERM
//!   together with the job, so it does the same and writes its exit record;
//!   `TimeoutStopSec` is set well above that grace so systemd's SIGKILL never
//!   cuts the supervisor short.

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::ExecError;
use super::atomic::io_error;
use super::liveness::{BOOT_ID_PATH_ENV, BootIdSource, ProcessIdentity, is_alive};
use super::record::{read_claim, read_job_record};
use super::rundir::{SUPERVISOR_LOG, run_dir};
use super::supervisor::{KILL_GRACE_MS_DEFAULT, signal_group};

/// Longest wait for a new supervisor's claim.
pub const CLAIM_WAIT_MS_MAX: u64 = 3_000;
/// Poll interval while waiting for the claim.
const CLAIM_POLL_MS: u64 = 10;

/// What the tick asks for: one attempt's supervisor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchRequest {
    /// The carma binary to run (`std::env::current_exe()` in the tick).
    pub carma_exe: PathBuf,
    /// carma's home (`--home`); the run dir must be inside it.
    pub home: PathBuf,
    /// The task id.
    pub task_id: String,
    /// The attempt number.
    pub attempt: u32,
    /// `HOME/runs/<task_id>/<attempt>`, holding `plan.json` already.
    pub run_dir: PathBuf,
    /// The job's host limits: a systemd unit gets them as its properties (the supervisor
    /// sets them on the job's own cgroup otherwise).
    pub host_limits: super::hostlimit::HostLimits,
}

/// The tick's edge for running attempts (real: [`DetachedLauncher`]).
pub trait Launcher {
    /// Start the supervisor for `request` and return its identity once it
    /// has claimed the attempt. If the attempt is already claimed by a live
    /// supervisor, adopt it and return that; if by a dead one, fail with
    /// [`ExecError::AlreadyClaimed`] (the attempt ran: look for exit.json).
    fn launch(&mut self, request: &LaunchRequest) -> Result<ProcessIdentity, ExecError>;
    /// The live supervisor that claimed the attempt in `run_dir`, if any.
    fn find(&self, run_dir: &Path) -> Option<ProcessIdentity>;
    /// Send `signal` to the attempt's supervisor if it is alive (SIGTERM
    /// cancels: it forwards to the job's group). `Ok(false)` if not alive.
    fn signal(&self, run_dir: &Path, signal: i32) -> Result<bool, ExecError>;
}

/// How [`DetachedLauncher`] detaches the supervisor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DetachMode {
    /// systemd-run when `INVOCATION_ID` is set and systemd-run exists, else setsid.
    Auto,
    /// Always a new session via `setsid(2)`.
    Setsid,
    /// Always a transient unit via `systemd-run`.
    SystemdRun,
}

/// The real launcher: detached `carma run-task` processes.
#[derive(Debug, Clone)]
pub struct DetachedLauncher {
    /// Boot id source for liveness checks.
    pub boot_id: BootIdSource,
    /// How to detach.
    pub detach_mode: DetachMode,
    /// How long to wait for the claim, capped at [`CLAIM_WAIT_MS_MAX`].
    pub claim_wait_ms: u64,
}

impl DetachedLauncher {
    /// Auto detach mode and the full claim wait.
    pub fn new(boot_id: BootIdSource) -> Self {
        DetachedLauncher { boot_id, detach_mode: DetachMode::Auto, claim_wait_ms: CLAIM_WAIT_MS_MAX }
    }
}

impl Launcher for DetachedLauncher {
    fn launch(&mut self, request: &LaunchRequest) -> Result<ProcessIdentity, ExecError> {
        let expected = run_dir(&request.home, &request.task_id, request.attempt)?;
        if request.run_dir != expected {
            let reason = format!("run dir is not {}", expected.display());
            return Err(ExecError::InvalidPlan { path: request.run_dir.clone(), reason });
        }
        if let Some(claim) = read_claim(&request.run_dir)? {
            if is_alive(&claim.supervisor, &self.boot_id) {
                return Ok(claim.supervisor);
            }
            return Err(ExecError::AlreadyClaimed { path: request.run_dir.join(super::rundir::CLAIM_FILE) });
        }
        let systemd_run = match self.detach_mode {
            DetachMode::Setsid => None,
            DetachMode::SystemdRun => {
                Some(find_in_path("systemd-run").unwrap_or_else(|| "systemd-run".into()))
            }
            DetachMode::Auto => std::env::var_os("INVOCATION_ID").and_then(|_| find_in_path("systemd-run")),
        };
        let (program, mut command) = match &systemd_run {
            Some(systemd_run) => (systemd_run.clone(), systemd_run_command(systemd_run, request)),
            None => (request.carma_exe.clone(), setsid_command(request)),
        };
        let log_path = request.run_dir.join(SUPERVISOR_LOG);
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
            .open(&log_path)
            .map_err(|source| io_error("open", &log_path, source))?;
        let log_err = log.try_clone().map_err(|source| io_error("duplicate", &log_path, source))?;
        command.stdin(Stdio::null()).stdout(log).stderr(log_err).current_dir("/");
        let mut child = command.spawn().map_err(|err| ExecError::LaunchFailed {
            program: program.clone(),
            reason: err.to_string(),
            log: log_path.clone(),
        })?;
        let claimed = self.wait_for_claim(request, &mut child, systemd_run.is_some(), &program);
        // Reap the child when it exits so a long-lived caller keeps no zombie.
        std::thread::spawn(move || child.wait());
        claimed
    }

    fn find(&self, run_dir: &Path) -> Option<ProcessIdentity> {
        let claim = read_claim(run_dir).ok().flatten()?;
        is_alive(&claim.supervisor, &self.boot_id).then_some(claim.supervisor)
    }

    fn signal(&self, run_dir: &Path, signal: i32) -> Result<bool, ExecError> {
        let Some(supervisor) = self.find(run_dir) else {
            return Ok(false);
        };
        let pid = libc::pid_t::try_from(supervisor.pid).unwrap_or(0);
        assert!(pid > 1, "claim names pid {pid}, which must never be signalled");
        // SAFETY: kill has no memory effects.
        if unsafe { libc::kill(pid, signal) } == 0 {
            return Ok(true);
        }
        let source = std::io::Error::last_os_error();
        if source.raw_os_error() == Some(libc::ESRCH) {
            return Ok(false);
        }
        Err(ExecError::Signal { signal, target: format!("pid {pid}"), source })
    }
}

impl DetachedLauncher {
    /// Poll for `claim.json` until the deadline. A setsid child that exits,
    /// or a systemd-run that fails, without a claim is a launch failure.
    fn wait_for_claim(
        &self,
        request: &LaunchRequest,
        child: &mut Child,
        via_systemd_run: bool,
        program: &Path,
    ) -> Result<ProcessIdentity, ExecError> {
        let waited_ms = self.claim_wait_ms.min(CLAIM_WAIT_MS_MAX);
        let deadline = Instant::now() + Duration::from_millis(waited_ms);
        loop {
            if let Some(claim) = read_claim(&request.run_dir)? {
                return Ok(claim.supervisor);
            }
            if let Ok(Some(status)) = child.try_wait()
                && (!via_systemd_run || !status.success())
            {
                // The supervisor may have claimed between the two checks.
                if let Some(claim) = read_claim(&request.run_dir)? {
                    return Ok(claim.supervisor);
                }
                return Err(ExecError::LaunchFailed {
                    program: program.to_path_buf(),
                    reason: format!("exited with {status} before claiming the attempt"),
                    log: request.run_dir.join(SUPERVISOR_LOG),
                });
            }
            if Instant::now() >= deadline {
                return Err(ExecError::LaunchTimeout { run_dir: request.run_dir.clone(), waited_ms });
            }
            std::thread::sleep(Duration::from_millis(CLAIM_POLL_MS));
        }
    }
}

/// Signal the job's process group recorded in `job.json`, only if the
/// recorded job leader is still the same live process (pid reuse and
/// reboots make a stale pgid dangerous). `Ok(false)` when there is nothing
/// alive to signal.
pub fn kill_attempt(run_dir: &Path, signal: i32, boot_id: &BootIdSource) -> Result<bool, ExecError> {
    let Some(record) = read_job_record(run_dir)? else {
        return Ok(false);
    };
    if !is_alive(&record.job, boot_id) {
        return Ok(false);
    }
    signal_group(record.pgid, signal)?;
    Ok(true)
}

/// `carma-task-<task_id>-<attempt>`: the transient unit of one attempt.
pub fn systemd_unit_name(task_id: &str, attempt: u32) -> String {
    format!("carma-task-{task_id}-{attempt}")
}

/// The supervisor's own arguments after the program name.
fn run_task_args(request: &LaunchRequest) -> Vec<std::ffi::OsString> {
    vec![
        "--home".into(),
        request.home.clone().into_os_string(),
        "run-task".into(),
        request.task_id.clone().into(),
        "--attempt".into(),
        request.attempt.to_string().into(),
    ]
}

/// `carma_exe run-task …` in a new session, inheriting nothing of the tick's but what it is
/// given ([`super::inherit`]).
fn setsid_command(request: &LaunchRequest) -> Command {
    let mut command = Command::new(&request.carma_exe);
    command.args(run_task_args(request));
    // SAFETY: setsid is async-signal-safe; the child is a fresh process,
    // not a group leader, so it cannot fail with EPERM.
    unsafe {
        command.pre_exec(|| {
            if libc::setsid() == -1 {
                return Err(std::io::Error::last_os_error());
            }
            super::inherit::scrub_in_child();
            Ok(())
        });
    }
    command
}

/// `systemd-run --unit carma-task-ID-N --collect --quiet
/// --property=KillMode=control-group --property=TimeoutStopSec=40s [host limits] [--user]
/// -- carma_exe run-task …`.
fn systemd_run_command(systemd_run: &Path, request: &LaunchRequest) -> Command {
    let mut command = Command::new(systemd_run);
    command.arg("--unit").arg(systemd_unit_name(&request.task_id, request.attempt));
    command.args(["--collect", "--quiet", "--property=KillMode=control-group"]);
    command.arg(format!("--property=TimeoutStopSec={}s", systemd_stop_timeout_s()));
    command.args(request.host_limits.systemd_properties().iter().map(|p| format!("--property={p}")));
    if crate::access::uid::effective() != 0 {
        // A non-root tick runs under the user's service manager.
        command.arg("--user");
    }
    if let Some(path) = std::env::var_os(BOOT_ID_PATH_ENV) {
        // Units do not inherit the caller's environment.
        let mut setting = std::ffi::OsString::from(format!("--setenv={BOOT_ID_PATH_ENV}="));
        setting.push(path);
        command.arg(setting);
    }
    command.arg("--").arg(&request.carma_exe).args(run_task_args(request));
    // SAFETY: the scrub is async-signal-safe and touches only the child's descriptors and
    // signal dispositions.
    unsafe {
        command.pre_exec(|| {
            super::inherit::scrub_in_child();
            Ok(())
        });
    }
    command
}

/// systemd's stop timeout for a supervisor's unit: the supervisor's own
/// SIGTERM grace plus a margin for its clean-up and exit record.
fn systemd_stop_timeout_s() -> u64 {
    KILL_GRACE_MS_DEFAULT / 1000 + 30
}

/// The first executable `name` in `$PATH`.
fn find_in_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(name)).find(|candidate| candidate.is_file())
}

#[cfg(test)]
mod tests {
    //! Goal: the systemd-run command line is exactly as documented.
    use super::*;

    #[test]
    fn systemd_run_command_line() {
        let request = LaunchRequest {
            carma_exe: "/usr/bin/carma".into(),
            home: "/var/lib/carma".into(),
            task_id: "01jd3k5m7n4x8z2q".into(),
            attempt: 2,
            run_dir: "/var/lib/carma/runs/01jd3k5m7n4x8z2q/2".into(),
            host_limits: super::super::hostlimit::HostLimits { mem_mib: Some(2048), cpus: Some(4) },
        };
        let command = systemd_run_command(Path::new("/usr/bin/systemd-run"), &request);
        let args: Vec<String> = command.get_args().map(|arg| arg.to_string_lossy().into_owned()).collect();
        let start = [
            "--unit",
            "carma-task-01jd3k5m7n4x8z2q-2",
            "--collect",
            "--quiet",
            "--property=KillMode=control-group",
            "--property=TimeoutStopSec=40s",
            "--property=MemoryMax=2048M",
            "--property=MemorySwapMax=0",
            "--property=OOMPolicy=continue",
            "--property=CPUQuota=400%",
        ];
        assert_eq!(&args[..start.len()], start);
        let dashes = args.iter().position(|arg| arg == "--").expect("--");
        let tail =
            ["/usr/bin/carma", "--home", "/var/lib/carma", "run-task", "01jd3k5m7n4x8z2q", "--attempt", "2"];
        assert_eq!(&args[dashes + 1..], tail);
    }
}
