//! The tick's edge for running attempts: start one, ask how it is doing, stop it.
//!
//! The real [`ExecRunner`] launches detached `carma run-task` supervisors and reads their
//! files under `runs/`; the simulator supplies its own runner with virtual jobs. The tick
//! sees only [`AttemptStatus`] and [`Reaping`], so both run the same reconcile code.
//!
//! Reconcile talks to the runner twice per tick: [`AttemptRunner::observe`] once, before the
//! pure decision (`reconcile::decide`), and [`AttemptRunner::apply`] once, after the records
//! the decision implies are committed. Every call says why it failed with a [`RunnerError`],
//! whose variant the caller branches on.
//!
//! Before an attempt's end is recorded, and before a task's next attempt starts, the runner
//! ends whatever processes of earlier attempts are still alive ([`AttemptRunner::reap`],
//! [`exec::reap_attempt`]): a retry never runs beside its previous attempt.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::exec::Reaping;
use crate::exec::{self, BootIdSource, ExecError, ExitOutcome, Launcher, ProcessIdentity};
use crate::id::TaskId;
use crate::journal::ProcessRef;
use crate::journal::state::AttemptRef;

/// Why a runner could not do what the tick asked. The message is the one-line reason that
/// reaches the journal or stderr; the variant is what the caller decides on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunnerError {
    /// Worth trying again next tick: a file, process or command failed now (I/O, a
    /// supervisor slow to claim, the boot id unreadable).
    #[error("{0}")]
    Transient(String),
    /// The runner will not do it as asked, and asking again changes nothing until something
    /// else does: a process of an earlier attempt survives, an invalid id or plan, an empty
    /// notice command.
    #[error("{0}")]
    Refused(String),
    /// Another supervisor claimed the attempt first: it runs or ran, so reconcile adopts it
    /// rather than launching it again.
    #[error("{0}")]
    Claimed(String),
    /// What the call names is not there (a task the simulator's trace lacks, a GPU).
    #[error("{0}")]
    Missing(String),
}

impl From<ExecError> for RunnerError {
    fn from(error: ExecError) -> RunnerError {
        let words = error.to_string();
        match error {
            ExecError::AlreadyClaimed { .. } => RunnerError::Claimed(words),
            ExecError::InvalidTaskId { .. }
            | ExecError::InvalidPlan { .. }
            | ExecError::Corrupt { .. }
            | ExecError::UnsupportedFormat { .. } => RunnerError::Refused(words),
            _ => RunnerError::Transient(words),
        }
    }
}

/// One active attempt, as reconcile hands it to [`AttemptRunner::observe`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActiveAttempt {
    /// The task.
    pub task: TaskId,
    /// Its active attempt's number.
    pub attempt: u32,
    /// Where that attempt runs: a local supervisor, or a Slurm job (left to the node's hooks).
    pub at: AttemptRef,
}

/// What the runner saw of one attempt.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observation {
    /// Whether the attempt runs, has exited (and how), or cannot be found.
    pub status: AttemptStatus,
    /// For an attempt that exited or vanished, what was left of its processes and was killed
    /// (an end is only observed once nothing of the attempt runs); default otherwise.
    pub reaping: Reaping,
}

/// Everything reconcile decides on, gathered before it decides: one observation per local
/// active attempt, and what this tick's GPU samples say.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    /// What became of each local active attempt, by task and attempt number.
    pub attempts: BTreeMap<(TaskId, u32), Observation>,
    /// The highest GPU memory each running task was seen using this tick, MiB.
    pub peak_mib: BTreeMap<TaskId, u64>,
    /// GPUs and MIG instances that cannot hold work this tick (lost, XID error, unreadable),
    /// by UUID, with the reason.
    pub gpu_faults: BTreeMap<String, String>,
    /// GPUs on which an attempt is stopped this tick for using more memory than it declared
    /// (memory enforcement), by UUID: the task over its share and the verdict's words. A
    /// neighbour's out-of-memory there is not counted against its retries.
    pub over_share: BTreeMap<String, (TaskId, String)>,
    /// This tick's memory reading of every GPU and MIG instance, by UUID: (used MiB, total
    /// MiB); evidence for an out-of-memory message (`tick::oom_evidence`).
    pub memory_now: BTreeMap<String, (u64, u64)>,
    /// When each local active attempt last reported a checkpoint, ms since the epoch, by task
    /// and attempt number (`exec::checkpoint`); absent for one that never did. The job's claim:
    /// it moves only its own lost-work accounting.
    pub checkpoints: BTreeMap<(TaskId, u32), u64>,
}

/// What the runner does after the tick's records are committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Ask the attempt to stop; its end is recorded by a later tick, once it has exited.
    Stop {
        /// The task.
        task: TaskId,
        /// The attempt to stop.
        attempt: u32,
    },
}

/// What the runner needs to start an attempt.
#[derive(Debug, Clone)]
pub struct AttemptLaunch {
    /// Everything the supervisor is told: command, credentials, GPUs, limits, files.
    pub plan: exec::AttemptPlan,
}

/// How an attempt's end is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptExit {
    /// How the job ended: its exit code or signal, or why it could not start.
    pub outcome: ExitOutcome,
    /// The OOM signature that matched, if any (never the log line: that is the job's output,
    /// private to its submitter, and the journal is read by everyone).
    pub oom: Option<String>,
    /// When it ended, ms since the epoch (the supervisor's record of it).
    pub ended_ms: u64,
    /// What the cap on the run-folder logs dropped, in words (sizes only, no output), for the
    /// task's verdict; `None` when nothing was.
    pub output_truncated: Option<String>,
    /// Who started the job and when, from its run folder, for an attempt the journal has not
    /// seen launch (a tick that crashed after launching it); `None` otherwise, or when the
    /// run folder does not say.
    pub start: Option<AttemptStart>,
    /// The host memory limit the job ran under and the kernel's kills at it; `None` when none
    /// was in force.
    pub host_memory: Option<exec::hostlimit::HostMemoryEnd>,
    /// What the attempt's supervisor read of its GPU memory to its exit (its peak and last
    /// readings, `exec::gpu_watch`); `None` when it took no readings.
    pub gpu_readings: Option<exec::GpuReadings>,
}

/// The start of an attempt as its run folder records it: the supervisor that claimed it
/// (`claim.json`) and when that supervisor spawned the job (`exit.json`'s `started_ms`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptStart {
    /// The supervisor that claimed the attempt.
    pub supervisor: ProcessRef,
    /// When the job was spawned (or its spawn tried), ms since the epoch.
    pub started_ms: u64,
}

/// Longest truncation note taken from an exit record into the journal.
const OUTPUT_NOTE_CHARS_MAX: usize = 256;

impl From<exec::ExitRecord> for AttemptExit {
    fn from(record: exec::ExitRecord) -> AttemptExit {
        AttemptExit {
            outcome: record.outcome,
            oom: record.oom.map(|o| o.signature.to_string()),
            ended_ms: record.ended_ms,
            output_truncated: record
                .output_truncated
                .map(|note| note.chars().take(OUTPUT_NOTE_CHARS_MAX).collect()),
            start: None,
            host_memory: record.host_memory,
            gpu_readings: record.gpu_readings.map(bounded_readings),
        }
    }
}

/// The supervisor's readings within the bounds it writes them in (root's own file, but a
/// damaged one must not size what the tick keeps).
fn bounded_readings(mut readings: exec::GpuReadings) -> exec::GpuReadings {
    let keep_from = readings.last.len().saturating_sub(exec::gpu_watch::LAST_READINGS_MAX);
    readings.last.drain(..keep_from);
    for reading in &mut readings.last {
        reading.gpus.truncate(exec::plan::GPU_COUNT_MAX);
    }
    readings
}

/// What the runner finds for an attempt.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum AttemptStatus {
    /// The attempt ended and left its exit record.
    Exited(AttemptExit),
    /// A live supervisor owns the attempt.
    Running(ProcessRef),
    /// The attempt was started but its supervisor is gone without an exit record.
    Vanished {
        /// Why it is taken for gone, in words for the record.
        reason: String,
    },
    /// No supervisor ever claimed the attempt (e.g. the tick died between Placed and launch).
    #[default]
    Unclaimed,
}

/// Starting, inspecting and stopping attempts.
pub trait AttemptRunner {
    /// Starts the attempt and returns its supervisor once it has claimed the attempt.
    fn launch(&mut self, launch: &AttemptLaunch) -> Result<ProcessRef, RunnerError>;
    /// How the attempt is doing; `recorded` is the supervisor from its Launched event.
    fn status(&mut self, task: &str, attempt: u32, recorded: Option<&ProcessRef>) -> AttemptStatus;
    /// Asks the attempt to stop (cancel): its supervisor forwards SIGTERM to the job.
    fn stop(&mut self, task: &str, attempt: u32) -> Result<bool, RunnerError>;
    /// Warns a preempted attempt (`[sched.preemption]`): its supervisor sends the job its
    /// `--signal` signal now (with `B:`, the first process only), or SIGTERM without one. The
    /// stop follows after the grace, as a cancel. Simulated runners warn nobody, nor is a
    /// supervisor warned that has no handler for the notice (one started by an older carma).
    fn notice_preemption(&mut self, _task: &str, _attempt: u32) -> Result<bool, RunnerError> {
        Ok(false)
    }
    /// Tells the attempt's supervisor that the tick has stopped its job for a suspension, so
    /// its time limit stands still meanwhile (exec/pause.rs). `Ok(false)` when no supervisor
    /// runs (simulated runners have none).
    fn notice_suspension(&self, _task: &str, _attempt: u32) -> Result<bool, RunnerError> {
        Ok(false)
    }
    /// The live processes of an attempt's job (never its supervisor), by the marks the tick
    /// trusts, to suspend or resume it (`mode = "suspend"`). Simulated runners have none to
    /// touch: `None`.
    fn job_processes(&self, _task: &str, _attempt: u32) -> Option<Vec<u32>> {
        None
    }
    /// Stops (`stop`) the attempt's job as a whole, or continues it (exec/freeze.rs: every
    /// process signalled, its cgroup frozen or thawed where it has one). Simulated runners
    /// have nothing to stop.
    fn set_job_stopped(&self, _task: &str, _attempt: u32, _stop: bool) -> Result<(), String> {
        Ok(())
    }
    /// What a suspension sees of the attempt's job (frozen, its processes' states, the tick's
    /// mark); `None` for simulated runners.
    fn job_stop(&self, _task: &str, _attempt: u32) -> Option<crate::exec::freeze::JobStop> {
        None
    }
    /// Whether the tick's mark that the attempt's suspension was applied is there (cheap:
    /// one look at the run folder). Simulated runners keep none.
    fn suspension_marked(&self, _task: &str, _attempt: u32) -> bool {
        false
    }
    /// Sets (`on`) or removes that mark.
    fn mark_suspension(&self, _task: &str, _attempt: u32, _on: bool) -> Result<(), String> {
        Ok(())
    }
    /// Makes sure an unclaimed attempt never starts: takes its claim on the tick's behalf.
    /// `Ok(true)` when the claim was taken (the attempt is dead for good), `Ok(false)` when a
    /// supervisor claimed it first (look at its status again).
    fn abandon(&mut self, task: &str, attempt: u32) -> Result<bool, RunnerError>;
    /// The session id of a process, to attribute GPU processes to attempts.
    fn session_of(&self, pid: u32) -> Option<u32>;
    /// Ends every process still alive of an attempt whose supervisor is gone or has
    /// written its exit record, and says what it killed and what survives. Simulated jobs
    /// leave nothing behind.
    fn reap(&mut self, _task: &str, _attempt: u32) -> Reaping {
        Reaping::default()
    }
    /// Starts a task's end notice ([`crate::notify`]) as its submitter and returns at once,
    /// with what was started. Simulated runners start nothing.
    fn notify(&mut self, _notice: &crate::notify::Notice) -> Result<String, RunnerError> {
        Ok("not sent: simulated".into())
    }
    /// When the attempt last reported a checkpoint, ms since the epoch; `None` when it never
    /// did. The real runner reads its run folder's checkpoint file; the simulator's, its model.
    fn checkpoint_ms(&mut self, _task: &str, _attempt: u32) -> Option<u64> {
        None
    }

    /// Observes every active attempt this runner runs, in one call before reconcile decides:
    /// its status, and for one that exited or vanished, the reaping of what is left of it.
    /// A Slurm job is not observed here: its node's hooks journal its end.
    fn observe(&mut self, active: &[ActiveAttempt]) -> Observed {
        let mut observed = Observed::default();
        for one in active {
            let AttemptRef::Local(recorded) = &one.at else { continue };
            let status = self.status(one.task.as_str(), one.attempt, recorded.as_ref());
            let reaping = match status {
                AttemptStatus::Exited(_) | AttemptStatus::Vanished { .. } => {
                    self.reap(one.task.as_str(), one.attempt)
                }
                AttemptStatus::Running(_) | AttemptStatus::Unclaimed => Reaping::default(),
            };
            if !matches!(status, AttemptStatus::Unclaimed)
                && let Some(at_ms) = self.checkpoint_ms(one.task.as_str(), one.attempt)
            {
                observed.checkpoints.insert((one.task.clone(), one.attempt), at_ms);
            }
            observed.attempts.insert((one.task.clone(), one.attempt), Observation { status, reaping });
        }
        observed
    }

    /// Carries out what reconcile decided, after its records are committed. Best effort: an
    /// attempt that could not be stopped is seen again by the next tick's observe.
    fn apply(&mut self, actions: &[Action]) {
        for action in actions {
            match action {
                Action::Stop { task, attempt } => {
                    let _ = self.stop(task.as_str(), *attempt);
                }
            }
        }
    }

    /// The Slurm job a process belongs to, as (cluster, job id, the process's uid), from its
    /// environment; `None` for any other process, or when it cannot be read.
    fn slurm_job_of(&self, _pid: u32) -> Option<(String, u32, u32)> {
        None
    }

    /// Tells the MPS control daemon (`program`) the pinned-memory limits of user `uid`'s
    /// clients before one of their jobs starts ([`exec::mps`]), and says what was set.
    /// Simulated runners set nothing.
    fn set_mps_limits(
        &mut self,
        _program: &str,
        _uid: u32,
        _limits: &[exec::mps::DeviceLimit],
    ) -> Result<String, RunnerError> {
        Ok("not set: simulated".into())
    }

    /// Which of `attempts` (carma's own, running) each of `pids` belongs to, for memory
    /// enforcement: by the attempt's process tree and cgroup, never by anything a job says
    /// about itself. The default (simulated runners) goes by [`Self::session_of`] and the
    /// supervisor each attempt's Launched record names.
    fn attempts_of(&self, pids: &[u32], attempts: &[ActiveAttempt]) -> BTreeMap<u32, (TaskId, u32)> {
        let by_supervisor: BTreeMap<u32, (TaskId, u32)> = attempts
            .iter()
            .filter_map(|one| match &one.at {
                AttemptRef::Local(Some(supervisor)) => {
                    Some((supervisor.pid, (one.task.clone(), one.attempt)))
                }
                _ => None,
            })
            .collect();
        pids.iter()
            .filter_map(|&pid| Some((pid, by_supervisor.get(&self.session_of(pid)?)?.clone())))
            .collect()
    }
}

/// The real runner: detached supervisors and their files under `HOME/runs/`.
pub struct ExecRunner {
    home: PathBuf,
    carma_exe: PathBuf,
    boot_id: BootIdSource,
    launcher: exec::DetachedLauncher,
}

impl ExecRunner {
    /// A runner for the state directory `home`, starting supervisors with `carma_exe`.
    pub fn new(home: &Path, carma_exe: PathBuf) -> ExecRunner {
        let boot_id = BootIdSource::from_env();
        ExecRunner {
            home: home.to_path_buf(),
            carma_exe,
            launcher: exec::DetachedLauncher::new(boot_id.clone()),
            boot_id,
        }
    }

    fn run_dir(&self, task: &str, attempt: u32) -> Result<PathBuf, RunnerError> {
        Ok(exec::run_dir(&self.home, task, attempt)?)
    }
}

fn to_ref(identity: ProcessIdentity) -> ProcessRef {
    ProcessRef { pid: identity.pid, start_time_ticks: identity.start_time_ticks, boot_id: identity.boot_id }
}

impl AttemptRunner for ExecRunner {
    fn launch(&mut self, launch: &AttemptLaunch) -> Result<ProcessRef, RunnerError> {
        let plan = &launch.plan;
        self.previous_attempts_are_gone(&plan.task_id, plan.attempt)?;
        let run_dir = exec::create_run_dir(&self.home, &plan.task_id, plan.attempt)?;
        plan.write_atomic(&run_dir)?;
        let request = exec::LaunchRequest {
            carma_exe: self.carma_exe.clone(),
            home: self.home.clone(),
            task_id: plan.task_id.clone(),
            attempt: plan.attempt,
            run_dir,
            host_limits: plan.host_limits,
        };
        Ok(self.launcher.launch(&request).map(to_ref)?)
    }

    fn status(&mut self, task: &str, attempt: u32, recorded: Option<&ProcessRef>) -> AttemptStatus {
        let run_dir = match self.run_dir(task, attempt) {
            Ok(dir) => dir,
            Err(error) => return AttemptStatus::Vanished { reason: error.to_string() },
        };
        match exec::read_exit_record(&run_dir) {
            Ok(Some(record)) => return AttemptStatus::Exited(exited(&run_dir, record, recorded)),
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
            return AttemptStatus::Exited(exited(&run_dir, record, recorded));
        }
        AttemptStatus::Vanished { reason: vanished_reason(&claim.supervisor, recorded, &self.boot_id) }
    }

    fn stop(&mut self, task: &str, attempt: u32) -> Result<bool, RunnerError> {
        let run_dir = self.run_dir(task, attempt)?;
        Ok(self.launcher.signal(&run_dir, libc::SIGTERM)?)
    }

    fn notice_preemption(&mut self, task: &str, attempt: u32) -> Result<bool, RunnerError> {
        let run_dir = self.run_dir(task, attempt)?;
        // A supervisor started by a carma from before preemption has no handler for the
        // notice, and its default action would kill it and lose the job's end: such a victim
        // is not warned, only stopped at the grace's end as a cancel stops it.
        if let Some(supervisor) = self.launcher.find(&run_dir)
            && exec::catches_signal(supervisor.pid, exec::PREEMPT_NOTICE_SIGNAL) == Some(false)
        {
            return Ok(false);
        }
        Ok(self.launcher.signal(&run_dir, exec::PREEMPT_NOTICE_SIGNAL)?)
    }

    fn notice_suspension(&self, task: &str, attempt: u32) -> Result<bool, RunnerError> {
        let run_dir = self.run_dir(task, attempt)?;
        Ok(self.launcher.signal(&run_dir, exec::SUSPEND_NOTICE_SIGNAL)?)
    }

    fn abandon(&mut self, task: &str, attempt: u32) -> Result<bool, RunnerError> {
        let run_dir = exec::create_run_dir(&self.home, task, attempt)?;
        Ok(exec::claim_abandoned(&run_dir)?)
    }

    fn checkpoint_ms(&mut self, task: &str, attempt: u32) -> Option<u64> {
        exec::checkpoint::checkpoint_ms(&self.run_dir(task, attempt).ok()?)
    }

    fn session_of(&self, pid: u32) -> Option<u32> {
        exec::read_proc_stat(pid).and_then(|stat| u32::try_from(stat.session).ok())
    }

    fn job_processes(&self, task: &str, attempt: u32) -> Option<Vec<u32>> {
        let run_dir = self.run_dir(task, attempt).ok()?;
        Some(exec::attempt_processes(&run_dir, &self.boot_id, &exec::proctable::read_table()))
    }

    fn set_job_stopped(&self, task: &str, attempt: u32, stop: bool) -> Result<(), String> {
        let run_dir = self.run_dir(task, attempt).map_err(|e| e.to_string())?;
        exec::freeze::set_stopped(&run_dir, &self.boot_id, stop).map(drop)
    }

    fn job_stop(&self, task: &str, attempt: u32) -> Option<exec::freeze::JobStop> {
        let run_dir = self.run_dir(task, attempt).ok()?;
        Some(exec::freeze::observe(&run_dir, &self.boot_id))
    }

    fn suspension_marked(&self, task: &str, attempt: u32) -> bool {
        self.run_dir(task, attempt).is_ok_and(|dir| dir.join(exec::freeze::SUSPENDED_MARK).exists())
    }

    fn mark_suspension(&self, task: &str, attempt: u32, on: bool) -> Result<(), String> {
        let run_dir = self.run_dir(task, attempt).map_err(|e| e.to_string())?;
        exec::freeze::mark(&run_dir, on)
    }

    fn reap(&mut self, task: &str, attempt: u32) -> Reaping {
        match self.run_dir(task, attempt) {
            Ok(run_dir) => exec::reap_attempt(&run_dir, &self.boot_id, exec::TICK_REAP_WAIT_MS),
            Err(_) => Reaping::default(),
        }
    }

    fn notify(&mut self, notice: &crate::notify::Notice) -> Result<String, RunnerError> {
        let program = Path::new(
            notice.argv.first().ok_or_else(|| RunnerError::Refused("the notify command is empty".into()))?,
        );
        let pid = exec::spawn_detached(exec::DetachedRequest {
            uid: notice.uid,
            program,
            argv: &notice.argv,
            env: &notice.env,
            workdir: Path::new(&notice.workdir),
            stdin: notice.stdin.clone(),
        })
        .map_err(RunnerError::Transient)?;
        Ok(format!("{} (pid {pid})", notice.detail))
    }
    fn set_mps_limits(
        &mut self,
        program: &str,
        uid: u32,
        limits: &[exec::mps::DeviceLimit],
    ) -> Result<String, RunnerError> {
        let mut control = exec::mps::ControlProgram { program: program.to_string() };
        let owner_of = |pid: u32| {
            use std::os::unix::fs::MetadataExt;
            std::fs::symlink_metadata(format!("/proc/{pid}")).ok().map(|meta| meta.uid())
        };
        exec::mps::set_limits(&mut control, uid, limits, &owner_of).map_err(RunnerError::Transient)
    }

    fn attempts_of(&self, pids: &[u32], attempts: &[ActiveAttempt]) -> BTreeMap<u32, (TaskId, u32)> {
        let wanted: std::collections::BTreeSet<u32> = pids.iter().copied().collect();
        let mut owners = BTreeMap::new();
        if wanted.is_empty() {
            return owners;
        }
        let table = exec::proctable::read_table();
        for one in attempts.iter().filter(|one| matches!(one.at, AttemptRef::Local(Some(_)))) {
            let Ok(run_dir) = self.run_dir(one.task.as_str(), one.attempt) else { continue };
            for pid in exec::attempt_processes(&run_dir, &self.boot_id, &table) {
                if wanted.contains(&pid) {
                    owners.entry(pid).or_insert_with(|| (one.task.clone(), one.attempt));
                }
            }
        }
        owners
    }

    fn slurm_job_of(&self, pid: u32) -> Option<(String, u32, u32)> {
        use std::io::Read;
        use std::os::unix::fs::MetadataExt;
        if pid == 0 {
            return None;
        }
        let file = std::fs::File::open(format!("/proc/{pid}/environ")).ok()?;
        let uid = file.metadata().ok()?.uid();
        let mut environ = Vec::new();
        file.take(crate::exec::proctable::SLURM_ENVIRON_BYTES_MAX).read_to_end(&mut environ).ok()?;
        let (cluster, job_id) = crate::exec::proctable::slurm_job_in_environ(&environ)?;
        Some((cluster, job_id, uid))
    }
}

impl ExecRunner {
    /// The check before any attempt after the first: no process of an earlier attempt of the
    /// task may be alive. Reconcile has already reaped them before recording their end, so
    /// anything found here escaped that; it is killed, said on stderr, and a survivor stops
    /// the launch (the attempt stays placed and the next tick tries again).
    fn previous_attempts_are_gone(&mut self, task: &str, attempt: u32) -> Result<(), RunnerError> {
        for earlier in 1..attempt {
            let Ok(run_dir) = self.run_dir(task, earlier) else { continue };
            if !run_dir.is_dir() {
                continue;
            }
            let reaping = exec::reap_attempt(&run_dir, &self.boot_id, exec::TICK_REAP_WAIT_MS);
            if reaping.killed > 0 {
                eprintln!("carma tick: task {task}: before attempt {attempt}: {}", reaping.detail);
            }
            if !reaping.remaining.is_empty() {
                let words = format!("task {task} attempt {attempt} not started: {}", reaping.detail);
                return Err(RunnerError::Refused(words));
            }
        }
        Ok(())
    }
}

/// An exit record as the tick sees it; for an attempt without a recorded supervisor (its
/// Launched never committed), with its start from the claim and the exit record.
fn exited(run_dir: &Path, record: exec::ExitRecord, recorded: Option<&ProcessRef>) -> AttemptExit {
    let started_ms = record.started_ms;
    let mut exit = AttemptExit::from(record);
    if recorded.is_none()
        && let Ok(Some(claim)) = exec::read_claim(run_dir)
    {
        exit.start = Some(AttemptStart { supervisor: to_ref(claim.supervisor), started_ms });
    }
    exit
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
