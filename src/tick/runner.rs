//! The tick's edge for running attempts: start one, ask how it is doing, stop it.
//!
//! The real [`ExecRunner`] launches detached `carma run-task` supervisors and reads their
//! files under `runs/`; the simulator supplies its own runner with virtual jobs. The tick
//! sees only [`AttemptStatus`], so both run the same reconcile code.

use std::path::{Path, PathBuf};

use crate::exec::{self, BootIdSource, ExitOutcome, Launcher, ProcessIdentity};
use crate::journal::ProcessRef;

/// What the runner needs to start an attempt.
#[derive(Debug, Clone)]
pub struct AttemptLaunch {
    pub plan: exec::AttemptPlan,
}

/// How an attempt's end is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptExit {
    pub outcome: ExitOutcome,
    /// The OOM signature and the log line it matched, if any.
    pub oom: Option<String>,
    pub ended_ms: u64,
}

/// What the runner finds for an attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptStatus {
    /// The attempt ended and left its exit record.
    Exited(AttemptExit),
    /// A live supervisor owns the attempt.
    Running(ProcessRef),
    /// The attempt was started but its supervisor is gone without an exit record.
    Vanished { reason: String },
    /// No supervisor ever claimed the attempt (e.g. the tick died between Placed and launch).
    Unclaimed,
}

/// Starting, inspecting and stopping attempts.
pub trait AttemptRunner {
    /// Starts the attempt and returns its supervisor once it has claimed the attempt.
    fn launch(&mut self, launch: &AttemptLaunch) -> Result<ProcessRef, String>;
    /// How the attempt is doing; `recorded` is the supervisor from its Launched event.
    fn status(&mut self, task: &str, attempt: u32, recorded: Option<&ProcessRef>) -> AttemptStatus;
    /// Asks the attempt to stop (cancel): its supervisor forwards SIGTERM to the job.
    fn stop(&mut self, task: &str, attempt: u32) -> Result<bool, String>;
    /// Makes sure an unclaimed attempt never starts: takes its claim on the tick's behalf.
    /// `Ok(true)` when the claim was taken (the attempt is dead for good), `Ok(false)` when a
    /// supervisor claimed it first (look at its status again).
    fn abandon(&mut self, task: &str, attempt: u32) -> Result<bool, String>;
    /// The session id of a process, to attribute GPU processes to attempts.
    fn session_of(&self, pid: u32) -> Option<u32>;
}

/// The real runner: detached supervisors and their files under `HOME/runs/`.
pub struct ExecRunner {
    home: PathBuf,
    carma_exe: PathBuf,
    boot_id: BootIdSource,
    launcher: exec::DetachedLauncher,
}

impl ExecRunner {
    pub fn new(home: &Path, carma_exe: PathBuf) -> ExecRunner {
        let boot_id = BootIdSource::from_env();
        ExecRunner {
            home: home.to_path_buf(),
            carma_exe,
            launcher: exec::DetachedLauncher::new(boot_id.clone()),
            boot_id,
        }
    }

    fn run_dir(&self, task: &str, attempt: u32) -> Result<PathBuf, String> {
        exec::run_dir(&self.home, task, attempt).map_err(|e| e.to_string())
    }
}

fn to_ref(identity: ProcessIdentity) -> ProcessRef {
    ProcessRef { pid: identity.pid, start_time_ticks: identity.start_time_ticks, boot_id: identity.boot_id }
}

impl AttemptRunner for ExecRunner {
    fn launch(&mut self, launch: &AttemptLaunch) -> Result<ProcessRef, String> {
        let plan = &launch.plan;
        let run_dir =
            exec::create_run_dir(&self.home, &plan.task_id, plan.attempt).map_err(|e| e.to_string())?;
        plan.write_atomic(&run_dir).map_err(|e| e.to_string())?;
        let request = exec::LaunchRequest {
            carma_exe: self.carma_exe.clone(),
            home: self.home.clone(),
            task_id: plan.task_id.clone(),
            attempt: plan.attempt,
            run_dir,
        };
        self.launcher.launch(&request).map(to_ref).map_err(|e| e.to_string())
    }

    fn status(&mut self, task: &str, attempt: u32, recorded: Option<&ProcessRef>) -> AttemptStatus {
        let run_dir = match self.run_dir(task, attempt) {
            Ok(dir) => dir,
            Err(reason) => return AttemptStatus::Vanished { reason },
        };
        match exec::read_exit_record(&run_dir) {
            Ok(Some(record)) => {
                return AttemptStatus::Exited(AttemptExit {
                    outcome: record.outcome,
                    oom: record.oom.map(|o| format!("{}: {}", o.signature, o.line)),
                    ended_ms: record.ended_ms,
                });
            }
            Ok(None) => {}
            Err(e) => return AttemptStatus::Vanished { reason: e.to_string() },
        }
        let claim = match exec::read_claim(&run_dir) {
            Ok(claim) => claim,
            Err(e) => return AttemptStatus::Vanished { reason: e.to_string() },
        };
        let Some(claim) = claim else {
            return match recorded {
                None => AttemptStatus::Unclaimed,
                Some(_) => AttemptStatus::Vanished { reason: "its run folder has no claim file".into() },
            };
        };
        if exec::is_alive(&claim.supervisor, &self.boot_id) {
            return AttemptStatus::Running(to_ref(claim.supervisor));
        }
        // The supervisor may have written the exit record between the two reads.
        if let Ok(Some(record)) = exec::read_exit_record(&run_dir) {
            return AttemptStatus::Exited(AttemptExit {
                outcome: record.outcome,
                oom: record.oom.map(|o| format!("{}: {}", o.signature, o.line)),
                ended_ms: record.ended_ms,
            });
        }
        let _ = exec::kill_attempt(&run_dir, libc::SIGKILL, &self.boot_id);
        AttemptStatus::Vanished { reason: vanished_reason(&claim.supervisor, recorded, &self.boot_id) }
    }

    fn stop(&mut self, task: &str, attempt: u32) -> Result<bool, String> {
        let run_dir = self.run_dir(task, attempt)?;
        self.launcher.signal(&run_dir, libc::SIGTERM).map_err(|e| e.to_string())
    }

    fn abandon(&mut self, task: &str, attempt: u32) -> Result<bool, String> {
        let run_dir = exec::create_run_dir(&self.home, task, attempt).map_err(|e| e.to_string())?;
        exec::claim_abandoned(&run_dir).map_err(|e| e.to_string())
    }

    fn session_of(&self, pid: u32) -> Option<u32> {
        exec::read_proc_stat(pid).and_then(|stat| u32::try_from(stat.session).ok())
    }
}

fn vanished_reason(
    supervisor: &ProcessIdentity,
    recorded: Option<&ProcessRef>,
    boot: &BootIdSource,
) -> String {
    let current = boot.current().unwrap_or_default();
    let boot_id = recorded.map_or(supervisor.boot_id.as_str(), |r| r.boot_id.as_str());
    if !current.is_empty() && boot_id != current {
        "the machine rebooted (boot id changed) while it ran".into()
    } else {
        format!("supervisor pid {} is gone and left no exit record", supervisor.pid)
    }
}
