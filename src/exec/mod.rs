//! Running one attempt of a job: the launcher the tick calls, the supervisor
//! (`carma run-task`) that owns the job process, and the files between them.
//!
//! # Why it looks like this
//! The tick is a short-lived process that must never wait for a job, and the
//! supervisor must never open the journal (one process per redb file). They
//! talk only through the attempt's run dir (see [`rundir`]):
//!
//! * the tick writes `plan.json` ([`AttemptPlan`]) atomically, then launches
//!   `carma run-task ID --attempt N` detached ([`DetachedLauncher`]);
//! * the supervisor **claims** the attempt by hard-linking a fully written
//!   temp file to `claim.json`. `link(2)` fails with `EEXIST` when the name
//!   exists, so the claim is exclusive and a reader never sees half a file.
//!   A second supervisor for the same attempt (a relaunch after a tick crash
//!   between `Placed` and `Launched`) gets [`ExecError::AlreadyClaimed`] and
//!   runs nothing: a job is never started twice;
//! * after spawning, the supervisor writes `job.json` (the job's identity,
//!   process group, user and cgroup) so Lost clean-up can find its processes;
//! * when the job ends, and every other process of the attempt has ended
//!   too ([`contain`]), it writes `exit.json` ([`ExitRecord`]) with tmp,
//!   fsync, rename, directory fsync. The tick turns it into Finished, Failed
//!   or OomDetected; a dead supervisor ([`is_alive`]) with no exit record is
//!   Lost. Either way the tick first ends whatever of the attempt is still
//!   alive ([`reap_attempt`]) and records nothing final while anything is.
//!
//! The job is spawned **without a shell**: argv is passed to `execve` as
//! given, so no quoting, globbing or `$VAR` expansion can change what runs.
//! It gets its own process group (so a cancel reaches its workers) and
//! `PR_SET_PDEATHSIG(SIGKILL)`, set *after* dropping privileges because the
//! kernel clears it on a credential change. That reaches only the job's
//! first process: the rest of an attempt is contained by its cgroup, its
//! session, the `CARMA_ATTEMPT_TAG` in its environment and the supervisor
//! being a child subreaper ([`contain`]), so a Lost attempt that is
//! requeued never runs beside a still-living first copy.
//!
//! Run-folder files are private ([`rundir`] has the modes): only root and
//! the submitter can read a task's environment values, its logs or its
//! exit record.
//!
//! `ExecError` is a public enum rather than an opaque struct because the
//! tick must match on [`ExecError::AlreadyClaimed`] and
//! [`ExecError::LaunchTimeout`].

mod atomic;
pub mod cgroup;
pub mod checkpoint;
pub mod contain;
pub mod cuda_checkpoint;
pub mod detached;
pub mod freeze;
pub mod gpu_watch;
pub mod hostlimit;
pub mod hostlimit_v1;
pub(crate) mod inherit;
pub mod interactive;
pub mod launcher;
pub mod liveness;
pub mod logcap;
pub mod mps;
pub mod oom;
pub mod output;
pub mod pause;
pub mod plan;
pub mod proctable;
pub mod prune;
pub mod readings;
pub mod record;
pub mod rundir;
pub mod seal;
mod spawn;
pub mod srun;
pub mod supervisor;

use std::path::{Path, PathBuf};

pub use atomic::{write_atomic, write_file_atomic};
pub use contain::{
    ATTEMPT_TAG_ENV, Reaping, TICK_REAP_WAIT_MS, attempt_processes, attempt_tag, reap_attempt,
};
pub use detached::{DetachedRequest, spawn_detached};
pub use gpu_watch::{GpuReadings, MemoryNow, MemorySource, OpenSource, WatchPlan};
pub use launcher::{DetachMode, DetachedLauncher, LaunchRequest, Launcher, kill_attempt, systemd_unit_name};
pub use liveness::{
    BootIdSource, ProcStat, ProcessIdentity, catches_signal, identify, is_alive, read_proc_stat,
};
pub use oom::{OomEvidence, scan_oom, scan_oom_file, scan_oom_open_file, scan_oom_open_file_from};
pub use output::expand_output_template;
pub use plan::AttemptPlan;
pub use record::{
    ClaimRecord, ExitOutcome, ExitRecord, JobRecord, read_claim, read_exit_record, read_job_record,
};
pub use rundir::{create_run_dir, run_dir};

pub use pause::SUSPEND_NOTICE_SIGNAL;
pub use spawn::pinned_mem_limit;
pub use supervisor::{PREEMPT_NOTICE_SIGNAL, SuperviseOptions, claim_abandoned, supervise, supervise_with};

/// Everything that can go wrong in `exec`. Messages are one line: what
/// failed, on which object, then what to do.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// A file system operation failed on `path`.
    #[error("cannot {op} {}: {source}; check that the path exists, its permissions and free disk space", path.display())]
    Io {
        /// What was being done, e.g. "write" or "create directory".
        op: &'static str,
        /// The file or directory involved.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A file written by carma could not be decoded.
    #[error("{} is corrupt: {detail}; move it aside and run `carma tick` to mark the attempt Lost", path.display())]
    Corrupt {
        /// The file that failed to decode.
        path: PathBuf,
        /// The decoder's message.
        detail: String,
    },
    /// A file carries a `format_version` this carma does not know.
    #[error("{} has format_version {found}, this carma reads {supported}; run the carma version that wrote it", path.display())]
    UnsupportedFormat {
        /// The file.
        path: PathBuf,
        /// The version found in it.
        found: u32,
        /// The version this build reads and writes.
        supported: u32,
    },
    /// The plan is not runnable (empty argv, relative workdir, mismatch).
    #[error("invalid plan {}: {reason}; fix the task spec and resubmit", path.display())]
    InvalidPlan {
        /// The plan file (or run dir) involved.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A task id that is not lowercase base32 (it becomes a path component).
    #[error(
        "invalid task id {task_id:?}: expected 1 to 64 characters of [0-9a-z]; use the id printed by `carma submit`"
    )]
    InvalidTaskId {
        /// The rejected id.
        task_id: String,
    },
    /// Another supervisor has claimed this attempt: it ran or is running.
    #[error("attempt already claimed ({} exists); do not relaunch it, check its supervisor with `carma status`", path.display())]
    AlreadyClaimed {
        /// The existing claim file.
        path: PathBuf,
    },
    /// The boot id could not be read.
    #[error("cannot read boot id from {}: {source}; set CARMA_BOOT_ID_PATH to a readable file", path.display())]
    BootId {
        /// The boot id file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The supervisor process could not be started.
    #[error("cannot launch supervisor {}: {reason}; see {}", program.display(), log.display())]
    LaunchFailed {
        /// The program that was executed (carma or systemd-run).
        program: PathBuf,
        /// What went wrong.
        reason: String,
        /// Where the supervisor's own output goes.
        log: PathBuf,
    },
    /// The supervisor started but did not claim the attempt in time.
    #[error("supervisor for {} did not claim the attempt within {waited_ms} ms; the next tick retries adoption", run_dir.display())]
    LaunchTimeout {
        /// The attempt's run dir.
        run_dir: PathBuf,
        /// How long the launcher waited.
        waited_ms: u64,
    },
    /// A signal could not be delivered.
    #[error(
        "cannot send signal {signal} to {target}: {source}; check that carma runs as root or as the job's owner"
    )]
    Signal {
        /// The signal number.
        signal: i32,
        /// "pid N" or "process group N".
        target: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// The body of `carma run-task TASK --attempt N`: resolve the run dir under
/// `home` and supervise the attempt, with SIGTERM/SIGINT forwarded to the job; `gpus` opens
/// the GPU source its plan names for the supervisor's own memory readings ([`gpu_watch`]).
pub fn run_task_main(
    home: &Path,
    task_id: &str,
    attempt: u32,
    gpus: Option<OpenSource>,
) -> Result<ExitRecord, ExecError> {
    let run_dir = rundir::run_dir(home, task_id, attempt)?;
    let boot_id = BootIdSource::from_env();
    supervise(&run_dir, &boot_id, gpus)
}
