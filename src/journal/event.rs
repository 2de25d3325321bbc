//! Journal records: the facts carma has learned, one per event.
//!
//! [`Event`] and [`Record`] are domain types: they change freely. Their bytes on disk are
//! `journal::frame`'s business (the frame around a record) and `journal::wire`'s (the frozen
//! shapes bincode writes), so this module imports neither.

use serde::{Deserialize, Serialize};

use crate::gpu::{GpuHealth, GpuSample};
use crate::id::TaskId;
use crate::sched::RecoveryMode;
use crate::spec::TaskSpec;

/// One journal entry: when it happened and what.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Record {
    /// Wall-clock time of the event, Unix milliseconds (virtual time in simulations).
    pub time_ms: u64,
    /// What happened.
    pub event: Event,
}

/// A running process as identified across pid reuse and reboots.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessRef {
    /// The process id when the process was seen (alone it is ambiguous after reuse); 0 for
    /// a Slurm job's stand-in.
    pub pid: u32,
    /// Start time from `/proc/PID/stat` field 22, in clock ticks since boot.
    pub start_time_ticks: u64,
    /// `/proc/sys/kernel/random/boot_id` when the process was seen.
    pub boot_id: String,
}

/// Every fact carma records. `carma events --json` shows each variant's fields as `data`, so a
/// change here is documented in schema/event.schema.json; the bytes on disk are
/// `journal::wire`'s business.
// `Submitted` carries the whole spec and outweighs the other variants; records are made and
// folded one at a time (the fold keeps `State`, not events), so boxing it would only add a
// dereference at every use.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Serialize)]
pub enum Event {
    /// A spool file was ingested; `submitter_uid` is the file owner.
    Submitted {
        /// The id ingest gave the new task (from the spool file's name).
        task: TaskId,
        /// The uid that owns the spool file: the task runs as this user.
        submitter_uid: u32,
        /// The validated submission, as the task will run.
        spec: TaskSpec,
    },
    /// A spool file failed validation at ingest; `task` is absent when even its name was bad.
    Rejected {
        /// The id the spool file's name gave, when it parsed.
        task: Option<TaskId>,
        /// The rejected spool file's name (or a placeholder such as `(more)` for a flood).
        spool_file: String,
        /// The uid that owns the spool file.
        submitter_uid: u32,
        /// Why validation failed, in words for the submitter.
        reason: String,
    },
    /// The task was cancelled by `by_uid`; a running attempt is being stopped.
    Cancelled {
        /// The cancelled task.
        task: TaskId,
        /// Who cancelled it: the caller of `carma cancel`, or the tick's own uid (a dependency
        /// that can never be met), 0 for Slurm's own cancellations.
        by_uid: u32,
        /// Why, in words, shown as the task's end.
        reason: String,
    },
    /// A memory estimate for the task (per GPU).
    Estimated {
        /// The task whose model summary was estimated.
        task: TaskId,
        /// The estimator that produced the figures.
        method: String,
        /// The estimator's central figure of the memory per GPU, MiB.
        mib: u64,
        /// The estimator's upper bound of the memory per GPU, MiB: the figure placement
        /// plans for, ahead of the task's declared memory.
        upper_mib: u64,
        /// How the estimator came to `mib`, in words for `carma show`.
        explanation: String,
    },
    /// Why the task is still waiting; recorded only when the reason changes.
    Pending {
        /// The waiting task.
        task: TaskId,
        /// The scheduler's words for why it waits.
        reason: String,
    },
    /// Intent to launch `attempt` on `gpus`; committed before the launch happens.
    Placed {
        /// The task placed.
        task: TaskId,
        /// The number of the new attempt (the first is 1).
        attempt: u32,
        /// The GPU (or MIG instance) UUIDs the attempt gets, each at most once.
        gpus: Vec<String>,
        /// True when nobody may share these GPUs while the attempt runs.
        exclusive: bool,
        /// The memory per GPU the decision assumed, MiB (the raised figure in recovery), if
        /// it assumed one.
        requirement_mib: Option<u64>,
        /// The scheduler's words for why these GPUs.
        reason: String,
    },
    /// The attempt's supervisor is running (`adopted` when found after a tick crash).
    Launched {
        /// The task launched.
        task: TaskId,
        /// The attempt launched, as numbered by its Placed record.
        attempt: u32,
        /// The attempt's supervisor process, identified across pid reuse and reboots (pid 0
        /// for a Slurm job, which carma does not supervise).
        supervisor: ProcessRef,
        /// True when a later tick found the supervisor already running (the launching tick
        /// crashed before recording it).
        adopted: bool,
    },
    /// The attempt ended with exit code 0.
    Finished {
        /// The task that finished.
        task: TaskId,
        /// The attempt that exited 0.
        attempt: u32,
        /// When the job ended, Unix ms, as its supervisor's exit record says (the record's own
        /// time is when the tick noticed).
        exit_ms: u64,
    },
    /// The attempt ended and will not be retried; `outcome` is the exit in words.
    Failed {
        /// The task that failed.
        task: TaskId,
        /// The attempt whose end failed the task.
        attempt: u32,
        /// How the attempt ended ("exit 1", "signal 9", "out of memory" ...).
        outcome: String,
        /// Why the task is not retried, shown as the task's end.
        reason: String,
    },
    /// The attempt died of GPU out-of-memory; a Requeued or Failed event follows.
    OomDetected {
        /// The task whose attempt ran out of GPU memory.
        task: TaskId,
        /// The attempt that died.
        attempt: u32,
        /// The out-of-memory message found in the attempt's log tails.
        evidence: String,
        /// The highest GPU memory the tick saw the attempt use on one GPU, MiB, if it saw any.
        peak_mib: Option<u64>,
    },
    /// The attempt vanished (dead supervisor without exit record, reboot); a Requeued or
    /// Failed event follows.
    Lost {
        /// The task whose attempt vanished.
        task: TaskId,
        /// The attempt that vanished.
        attempt: u32,
        /// How the tick knew it was gone, in words.
        reason: String,
    },
    /// The task goes back to a queue; `recovery` is true for the priority recovery queue.
    Requeued {
        /// The task queued again.
        task: TaskId,
        /// True for the priority recovery queue (after an out-of-memory death).
        recovery: bool,
        /// For a recovery, the memory per GPU the next attempt must get, MiB (the raised
        /// figure); `None` for other requeues.
        requirement_mib: Option<u64>,
        /// How the task runs again, parsed once when the record is decoded; `events --json`
        /// shows the wire's word (`""`, `"user"`, or the recovery mode's name).
        #[serde(serialize_with = "requeue_word")]
        recovery_mode: RequeueMode,
        /// Why it is queued again, in words.
        reason: String,
    },
    /// End-of-tick bookkeeping, for `carma report` and operations. `rr_cursor` is the
    /// round-robin position the decision left, journaled so replay needs no other input.
    TickCompleted {
        /// Spool files this tick turned into Submitted records.
        ingested: u32,
        /// Spool files this tick rejected.
        rejected: u32,
        /// Attempts this tick placed.
        placed: u32,
        /// How long the tick took, microseconds of wall time.
        duration_us: u64,
        /// The round-robin position between users the decision left, for the next decision.
        rr_cursor: u32,
    },
    /// One GPU's reading at this tick (memory, activity, power, energy counter, processes).
    MetricSample {
        /// The reading, as the GPU probe returned it.
        sample: GpuSample,
    },
    /// A GPU seen for the first time, or with a changed identity (index, name, memory).
    GpuDiscovered {
        /// The GPU's UUID, its identity across reboots and renumbering.
        uuid: String,
        /// The driver's index of the GPU on this machine.
        index: u32,
        /// The product name the driver reports.
        name: String,
        /// The GPU's total memory, MiB, as the driver reports it.
        memory_total_mib: u64,
    },
    /// The GPU probe failed or recovered; recorded on change only, so a machine without a
    /// driver says so once. `detail` is empty when GPUs are readable again.
    GpuProbeStatus {
        /// Why the probe failed, in words; empty when it works again.
        detail: String,
    },
    /// The attempt of a cancelled task has ended (`outcome` in words).
    Stopped {
        /// The cancelled (or requeued) task.
        task: TaskId,
        /// The attempt that was stopped.
        attempt: u32,
        /// How the attempt ended, in words ("signal 15" ...).
        outcome: String,
    },
    /// A new peak of the attempt's GPU memory (on its busiest GPU, MiB), recorded when it
    /// grows by at least 256 MiB; recovery raises the requirement to at least this.
    Usage {
        /// The running task.
        task: TaskId,
        /// The running attempt.
        attempt: u32,
        /// The attempt's new peak GPU memory on its busiest GPU, MiB.
        peak_mib: u64,
    },
    /// The task's model summary could not be read or estimated. Journaled once per version
    /// of the summary file (`summary_stamp`, from its size and modification time), so a
    /// bad file costs one record, and a fixed file is estimated again.
    EstimateFailed {
        /// The task left without an estimate.
        task: TaskId,
        /// Why no estimate, in words for the submitter.
        reason: String,
        /// Which version of the summary file failed (from its size and modification time);
        /// 0 for a summary captured at submit.
        summary_stamp: u64,
    },
    /// The tick left this many spool entries for later ticks (its per-tick bounds), so a
    /// flood is visible instead of silently slowing ingest.
    IngestDeferred {
        /// Spool entries left for later ticks.
        entries: u64,
    },
    /// Processes of an attempt whose supervisor is gone (or done) that the tick found alive
    /// and sent SIGKILL (`processes` of them), recorded before the attempt's verdict.
    /// `remaining` are pids that survived even that: the attempt stays active (its verdict
    /// and any retry wait, the task's pending reason names them) and the tick tries again
    /// every tick, recording again only when the set changes.
    Reaped {
        /// The task whose processes were killed.
        task: TaskId,
        /// The attempt the processes belonged to.
        attempt: u32,
        /// How many processes the tick sent SIGKILL.
        processes: u32,
        /// Pids still alive after SIGKILL; empty once all are gone.
        remaining: Vec<u32>,
        /// What was found and done, in words.
        detail: String,
    },
    /// A GPU's health changed: it was lost, reported an XID error, became unreadable, or reads
    /// healthy again (`Healthy`). Recorded on change only (every MetricSample carries the
    /// health too); while unhealthy the GPU and its MIG instances take no work.
    GpuHealthChanged {
        /// The GPU's UUID.
        uuid: String,
        /// The driver's index of the GPU, for people reading the record.
        index: u32,
        /// The GPU's new health.
        health: GpuHealth,
    },
    /// Slurm started the attempt as job `job_id` of `cluster` on node `node`, with `shards`
    /// shards of `shard_mib` MiB each (`None` for a job given whole GPUs); the Placed event
    /// committed with it names the GPUs. Journaled by the node's Prolog (`carma slurm
    /// prolog`). From this event on the task belongs to Slurm: the tick never places,
    /// launches, reconciles or cancels it.
    SlurmPlaced {
        /// The task Slurm started.
        task: TaskId,
        /// The attempt, as numbered by the Placed record committed with this one.
        attempt: u32,
        /// The Slurm cluster's name.
        cluster: String,
        /// The Slurm job id.
        job_id: u32,
        /// The node the job runs on.
        node: String,
        /// How many GPU shards the job was given; `None` for whole GPUs.
        shards: Option<u32>,
        /// The memory of one shard, MiB.
        shard_mib: u64,
    },
    /// A per-process SM-utilisation sample of the running attempt (its processes' sum, 0..1, on
    /// its busiest GPU), taken while that GPU's processes together used less than
    /// [`SM_SATURATED`](crate::tick::SM_SATURATED) of it, so that it measures the job's
    /// standalone SM activity. At most one per attempt per
    /// [`SM_SAMPLE_EVERY_MS`](crate::tick::SM_SAMPLE_EVERY_MS); State learns each workload's SM
    /// activity from them.
    SmObserved {
        /// The running task.
        task: TaskId,
        /// The running attempt.
        attempt: u32,
        /// The attempt's processes' SM utilisation on its busiest GPU, summed, 0..1.
        sm_util: f32,
    },
    /// The task was held by `by_uid` (`carma hold`): it waits, with reason `Held`, until
    /// released. A task submitted with `--hold` starts held without this record.
    Held {
        /// The task held.
        task: TaskId,
        /// Who ran `carma hold`.
        by_uid: u32,
    },
    /// The task was released by `by_uid` (`carma release`).
    Released {
        /// The task released.
        task: TaskId,
        /// Who ran `carma release`.
        by_uid: u32,
    },
    /// A waiting task's settings were changed by `by_uid` (`carma update`); each field that is
    /// set replaces the spec's.
    Updated {
        /// The waiting task changed.
        task: TaskId,
        /// Who ran `carma update`.
        by_uid: u32,
        /// The new priority, if changed.
        priority: Option<i32>,
        /// The new nice value, if changed.
        nice: Option<i32>,
        /// The new declared memory per GPU, MiB, if changed.
        memory_mib: Option<u64>,
        /// The new time limit of an attempt, ms, if changed.
        time_limit_ms: Option<u64>,
        /// The new number of GPUs, if changed.
        gpus: Option<u32>,
    },
    /// With backfill, the GPUs kept for the blocked head of the queue: no task behind it
    /// starts on them while it stays the head. Recorded when the reservation changes.
    Reserved {
        /// The blocked head of the queue the GPUs are kept for.
        task: TaskId,
        /// The UUIDs of the GPUs kept for it.
        gpus: Vec<String>,
    },
    /// A notice was started (`channel`: "command" or "mail"); `notice` says which
    /// ([`crate::journal::notices`]: END, BEGIN, REQUEUE, TIME_LIMIT_80, ARRAY ...; for ARRAY
    /// `task` is the array's id), `detail` how.
    Notified {
        /// The task the notice is about (the array's id for ARRAY).
        task: TaskId,
        /// How it was sent: "command" or "mail".
        channel: String,
        /// Which notice: END, BEGIN, REQUEUE, TIME_LIMIT_80, ARRAY ...
        notice: String,
        /// What the notifier reported it did, in words.
        detail: String,
    },
    /// A notice could not be started through `channel`.
    NotifyFailed {
        /// The task the notice is about (the array's id for ARRAY).
        task: TaskId,
        /// The channel that failed: "command", "mail", or "none" when the task names none.
        channel: String,
        /// Which notice, as in Notified.
        notice: String,
        /// Why it could not be started.
        reason: String,
    },
    /// `carma requeue` by `by_uid` of a placed or running task: its attempt is stopped, and
    /// its end is recorded as Stopped followed by a Requeued whose `recovery_mode` is
    /// [`RequeueMode::User`] (which uses no retry).
    RequeueRequested {
        /// The task to queue again.
        task: TaskId,
        /// Who ran `carma requeue`.
        by_uid: u32,
    },
    /// The tick saw the attempt's processes use more GPU memory than it declared plus the
    /// margin, on a GPU it shares (`sched::over_share`): the task fails with `reason` and its
    /// attempt is stopped; its end is recorded as Stopped once its processes are gone.
    MemoryExceeded {
        /// The task over its share.
        task: TaskId,
        /// Its running attempt.
        attempt: u32,
        /// The GPU (UUID) where it was over.
        gpu: String,
        /// What its processes used there, MiB.
        used_mib: u64,
        /// Its share there, MiB (0 on a GPU it was not given).
        declared_mib: u64,
        /// `used 9.8 GiB on GPU0, declared 1.0 GiB (+ 1.0 GiB margin)`, shown as the task's end.
        reason: String,
    },
    /// The scheduler takes a running attempt back for a waiting task (`[sched.preemption]`):
    /// the attempt is warned, stopped after the grace, and the task queued again as a new
    /// attempt.
    Preempted {
        /// The task preempted (it opted in with `--requeue`).
        task: TaskId,
        /// Its running attempt.
        attempt: u32,
        /// The waiting task it gives way to.
        by: TaskId,
        /// Why, in words (`blocked head waited 31m`, `priority 10 over 0`).
        reason: String,
        /// Work lost: since the attempt's last checkpoint, or its start when it reported none,
        /// ms.
        lost_ms: u64,
    },
    /// The job said it saved its state (`carma checkpointed`, or a touch of
    /// `$CARMA_CHECKPOINT_FILE`), at the record's time. A claim: it only lowers what a
    /// preemption of this attempt is counted as losing.
    Checkpointed {
        /// The running task.
        task: TaskId,
        /// Its running attempt.
        attempt: u32,
    },
    /// An administrator reserved GPUs for a window (`carma reserve create`; see
    /// journal/reservations.rs).
    ReservationCreated {
        /// Its name, which tasks give with `--reservation`.
        name: String,
        /// Start of the window, Unix ms.
        start_ms: u64,
        /// End of the window (exclusive), Unix ms.
        end_ms: u64,
        /// The uids whose tasks may run in it.
        users: Vec<u32>,
        /// How many GPUs it holds.
        gpu_count: u32,
        /// The GPUs it holds by UUID when named; empty for a count the decision picks.
        gpus: Vec<String>,
        /// The administrator who created it.
        by_uid: u32,
    },
    /// An administrator deleted a reservation (`carma reserve delete`).
    ReservationDeleted {
        /// Its name.
        name: String,
        /// The administrator who deleted it.
        by_uid: u32,
    },
    /// The tick suspended a running attempt for a waiting task (`mode = "suspend"`):
    /// `cuda-checkpoint --toggle` on each of its GPU processes, then SIGSTOP to its processes.
    /// The attempt stays open and holds no GPU memory until Resumed.
    Suspended {
        /// The running task.
        task: TaskId,
        /// Its running attempt.
        attempt: u32,
        /// The waiting task it gives way to.
        by: TaskId,
    },
    /// The tick resumed a suspended attempt on its GPUs: SIGCONT, then `cuda-checkpoint
    /// --toggle` back.
    Resumed {
        /// The task.
        task: TaskId,
        /// Its suspended attempt.
        attempt: u32,
    },
    /// A preemption called off: the victim still ran when its preemptor no longer waited
    /// (cancelled, ended, held or started elsewhere), so it is not stopped and its end goes its
    /// usual way.
    PreemptionWithdrawn {
        /// The task that was preempted.
        task: TaskId,
        /// Its attempt, still running.
        attempt: u32,
        /// Why, in words (`preemptor 065wzsb800000002 was cancelled`).
        reason: String,
    },
    /// The tick ended a suspension without resuming it: it lasted past `[sched.preemption]
    /// suspend-max`, or it could not be completed after a crash. The attempt is stopped at
    /// once and its end is Stopped + Requeued (a user requeue: no retry used), as Slurm's
    /// suspend gives way to requeue.
    SuspensionEnded {
        /// The task.
        task: TaskId,
        /// Its suspended attempt.
        attempt: u32,
        /// Why, in words (`suspended for 61 min, past [sched.preemption] suspend-max (60 min)`).
        reason: String,
    },
}

/// The word a Requeued record's `recovery_mode` holds on the wire for [`RequeueMode::User`].
pub const USER_REQUEUE: &str = "user";

/// How a requeued task runs again: the typed form of a Requeued record's `recovery_mode` word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequeueMode {
    /// A retry in the main queue (a lost attempt, Slurm's own requeue): the word `""`.
    Main,
    /// Asked for by the job ([`REQUEUE_EXIT_CODE`]) or its owner (`carma requeue`); it uses
    /// no retry: the word [`USER_REQUEUE`].
    User,
    /// The priority recovery queue after an out-of-memory death, placed this way.
    Recovery(RecoveryMode),
}

impl RequeueMode {
    /// The word the wire and `events --json` carry.
    pub fn word(self) -> &'static str {
        match self {
            RequeueMode::Main => "",
            RequeueMode::User => USER_REQUEUE,
            RequeueMode::Recovery(mode) => mode.name(),
        }
    }

    /// Parsed once, when a record is decoded. A word this carma does not know (a newer
    /// carma's, or a test's) is read as an exclusive recovery, the mode that never shares a
    /// GPU, so an unknown word can only make a retry more careful.
    pub fn from_word(word: &str) -> RequeueMode {
        match word {
            "" => RequeueMode::Main,
            USER_REQUEUE => RequeueMode::User,
            other => RequeueMode::Recovery(other.parse().unwrap_or(RecoveryMode::Exclusive)),
        }
    }

    /// The recovery mode, for a requeue into the recovery queue.
    pub fn recovery(self) -> Option<RecoveryMode> {
        match self {
            RequeueMode::Recovery(mode) => Some(mode),
            RequeueMode::Main | RequeueMode::User => None,
        }
    }
}
/// The exit code with which a job asks to be queued again (Slurm's users often pick 99 for
/// the same purpose); documented in `carma submit --help` and the README.
pub const REQUEUE_EXIT_CODE: i32 = 99;

impl Event {
    /// The task the event is about, if any.
    pub fn task(&self) -> Option<&TaskId> {
        match self {
            Event::Submitted { task, .. }
            | Event::Cancelled { task, .. }
            | Event::Estimated { task, .. }
            | Event::Pending { task, .. }
            | Event::Placed { task, .. }
            | Event::Launched { task, .. }
            | Event::Finished { task, .. }
            | Event::Failed { task, .. }
            | Event::OomDetected { task, .. }
            | Event::Lost { task, .. }
            | Event::Requeued { task, .. }
            | Event::Stopped { task, .. }
            | Event::Usage { task, .. }
            | Event::EstimateFailed { task, .. }
            | Event::Reaped { task, .. }
            | Event::SlurmPlaced { task, .. }
            | Event::SmObserved { task, .. }
            | Event::Held { task, .. }
            | Event::Released { task, .. }
            | Event::Updated { task, .. }
            | Event::Reserved { task, .. }
            | Event::Notified { task, .. }
            | Event::NotifyFailed { task, .. }
            | Event::RequeueRequested { task, .. }
            | Event::MemoryExceeded { task, .. }
            | Event::Preempted { task, .. }
            | Event::Checkpointed { task, .. }
            | Event::Suspended { task, .. }
            | Event::Resumed { task, .. }
            | Event::PreemptionWithdrawn { task, .. }
            | Event::SuspensionEnded { task, .. } => Some(task),
            Event::Rejected { task, .. } => task.as_ref(),
            Event::TickCompleted { .. }
            | Event::MetricSample { .. }
            | Event::GpuDiscovered { .. }
            | Event::GpuProbeStatus { .. }
            | Event::IngestDeferred { .. } => None,
            Event::GpuHealthChanged { .. } => None,
            Event::ReservationCreated { .. } | Event::ReservationDeleted { .. } => None,
        }
    }

    /// The variant's name, as shown by `carma events`.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::Submitted { .. } => "Submitted",
            Event::Rejected { .. } => "Rejected",
            Event::Cancelled { .. } => "Cancelled",
            Event::Estimated { .. } => "Estimated",
            Event::Pending { .. } => "Pending",
            Event::Placed { .. } => "Placed",
            Event::Launched { .. } => "Launched",
            Event::Finished { .. } => "Finished",
            Event::Failed { .. } => "Failed",
            Event::OomDetected { .. } => "OomDetected",
            Event::Lost { .. } => "Lost",
            Event::Requeued { .. } => "Requeued",
            Event::TickCompleted { .. } => "TickCompleted",
            Event::MetricSample { .. } => "MetricSample",
            Event::GpuDiscovered { .. } => "GpuDiscovered",
            Event::GpuProbeStatus { .. } => "GpuProbeStatus",
            Event::Stopped { .. } => "Stopped",
            Event::Usage { .. } => "Usage",
            Event::EstimateFailed { .. } => "EstimateFailed",
            Event::IngestDeferred { .. } => "IngestDeferred",
            Event::Reaped { .. } => "Reaped",
            Event::GpuHealthChanged { .. } => "GpuHealthChanged",
            Event::SlurmPlaced { .. } => "SlurmPlaced",
            Event::SmObserved { .. } => "SmObserved",
            Event::Held { .. } => "Held",
            Event::Released { .. } => "Released",
            Event::Updated { .. } => "Updated",
            Event::Reserved { .. } => "Reserved",
            Event::Notified { .. } => "Notified",
            Event::NotifyFailed { .. } => "NotifyFailed",
            Event::RequeueRequested { .. } => "RequeueRequested",
            Event::MemoryExceeded { .. } => "MemoryExceeded",
            Event::Preempted { .. } => "Preempted",
            Event::Checkpointed { .. } => "Checkpointed",
            Event::ReservationCreated { .. } => "ReservationCreated",
            Event::ReservationDeleted { .. } => "ReservationDeleted",
            Event::Suspended { .. } => "Suspended",
            Event::Resumed { .. } => "Resumed",
            Event::PreemptionWithdrawn { .. } => "PreemptionWithdrawn",
            Event::SuspensionEnded { .. } => "SuspensionEnded",
        }
    }
}

/// `events --json` keeps the wire's word for a requeue's mode.
fn requeue_word<S: serde::Serializer>(mode: &RequeueMode, out: S) -> Result<S::Ok, S::Error> {
    out.serialize_str(mode.word())
}
