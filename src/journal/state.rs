//! State: the pure fold of the journal's events.
//!
//! `State::apply` is total: any sequence of well-formed records folds without panicking,
//! including sequences a buggy or crashed writer could leave (an attempt event for an
//! unknown task, a second Submitted for one id). Such records are ignored rather than
//! trusted, so replay is always possible. The fold is the only way State changes, which is
//! what makes a snapshot provably equal to a full replay.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::event::ProcessRef;
pub use super::phase::{End, Phase, Queue, Status};
use crate::gpu::{GpuSample, SmSource};
use crate::id::TaskId;
use crate::sched::RecoveryMode;
use crate::spec::TaskSpec;

/// Recent rejections kept for `carma queue --all`; older ones stay in the journal only.
pub const REJECTIONS_KEPT: usize = 1000;

/// Everything carma knows, as of `last_seq`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct State {
    /// Seq of the last folded event (0 for an empty journal).
    pub last_seq: u64,
    /// Every submitted task, by id (ids sort by submit time).
    pub tasks: BTreeMap<TaskId, Task>,
    /// Ids that were rejected at ingest, so a re-ingest of the same file is recognised.
    pub rejected_ids: BTreeSet<TaskId>,
    /// The most recent rejections, newest last.
    pub rejections: Vec<Rejection>,
    /// Time of the last completed tick, Unix ms.
    pub last_tick_ms: Option<u64>,
    /// Completed ticks.
    pub ticks: u64,
    /// Round-robin position left by the last decision.
    pub rr_cursor: u32,
    /// Every GPU ever seen, by UUID.
    pub gpus: BTreeMap<String, GpuState>,
    /// Why the last probe failed; `None` while GPUs are readable.
    pub gpu_probe_error: Option<String>,
    /// What finished runs and SM samples taught about each workload, by
    /// [`Task::workload_key`]; at most [`WORKLOADS_MAX`], the least recently seen dropped first.
    pub workloads: BTreeMap<String, WorkloadHistory>,
    /// How much of their declared time limit finished attempts used, over all workloads.
    pub limit_use: LimitUse,
    /// The backfill reservation of the last decision that made one (the blocked head and the
    /// GPUs kept for it), so the next decision keeps the same GPUs while the head waits.
    pub reservation: Option<Reservation>,
    /// Ended tasks that asked to be told (`notify`, `mail_user`) and have not been yet, in id
    /// order; the tick works through them after it commits their end.
    pub notify_due: BTreeSet<TaskId>,
    /// Mails due that are no end (BEGIN, REQUEUE), as (task, kind), until their Notified
    /// record (see journal/notices.rs).
    #[serde(default)]
    pub mail_due: BTreeSet<(TaskId, String)>,
    /// Arrays that want one summary mail, with their members' ends so far; removed when the
    /// last member ends.
    #[serde(default)]
    pub array_mail: BTreeMap<TaskId, ArrayMail>,
    /// Arrays whose every member ended, until their summary mail's Notified record.
    #[serde(default)]
    pub array_mail_due: BTreeSet<TaskId>,
    /// Each array's owner: the submitter of its first member (see `tick::admit`).
    pub array_owners: BTreeMap<TaskId, u32>,
    /// Administrators' GPU reservations by name, until deleted (journal/reservations.rs).
    #[serde(default)]
    pub gpu_reservations: BTreeMap<String, ReservationEntry>,
}

/// An array whose summary mail is wanted, while members are still running.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArrayMail {
    /// Members ended so far, however they ended.
    pub ended: u32,
    /// How many of the ended members failed; a FAIL-only mail goes out only when some did.
    pub failed: u32,
}

/// One reservation, as journaled.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReservationEntry {
    /// Its name (also its key in [`State::gpu_reservations`]).
    pub name: String,
    /// Start of the window, Unix ms.
    pub start_ms: u64,
    /// End of the window (exclusive), Unix ms.
    pub end_ms: u64,
    /// The uids whose tasks may run in it, ascending.
    pub users: Vec<u32>,
    /// How many GPUs it holds.
    pub gpu_count: u32,
    /// The GPUs it holds by UUID, when named (`--gpu 0,1`); empty for a count.
    pub gpus: Vec<String>,
    /// Who created it.
    pub by_uid: u32,
    /// When it was journaled, Unix ms.
    pub created_ms: u64,
}

/// GPUs kept for the blocked head of the queue (backfill).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    /// The blocked head of the queue the GPUs are kept for.
    pub task: TaskId,
    /// The UUIDs of the GPUs kept for it.
    pub gpus: Vec<String>,
}

/// Most workloads whose history State keeps.
pub const WORKLOADS_MAX: usize = 4096;

/// One workload's history: its journaled SM samples and its finished runs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkloadHistory {
    /// The sum of the workload's SmObserved samples (each 0..1), for the mean.
    pub sm_util_sum: f64,
    /// How many SmObserved samples `sm_util_sum` adds up.
    pub sm_util_samples: u32,
    /// Finished attempts (exit 0) of the workload that had launched.
    pub runs: u32,
    /// Those attempts' run times (launch to exit) summed, ms.
    pub run_ms_sum: u64,
    /// The highest memory peak (busiest GPU) of its finished attempts, MiB.
    pub peak_mib: Option<u64>,
    /// Time of the newest fact, to drop the stalest workload when the table is full.
    pub last_ms: u64,
}

impl WorkloadHistory {
    /// Mean standalone SM utilisation over every sample, if any.
    pub fn sm_util_mean(&self) -> Option<f32> {
        (self.sm_util_samples > 0).then(|| (self.sm_util_sum / f64::from(self.sm_util_samples)) as f32)
    }

    /// Mean run time of the finished attempts, if any.
    pub fn run_ms_mean(&self) -> Option<u64> {
        (self.runs > 0).then(|| self.run_ms_sum / u64::from(self.runs))
    }
}

/// The fraction of its declared time limit each finished attempt with a limit used.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LimitUse {
    /// Finished attempts whose task declared a time limit.
    pub runs: u32,
    /// The fractions of their limits those attempts used (each at most 1), summed.
    pub fraction_sum: f64,
}

impl LimitUse {
    /// The mean fraction, if any attempt with a limit finished.
    pub fn mean(&self) -> Option<f64> {
        (self.runs > 0).then(|| self.fraction_sum / f64::from(self.runs))
    }
}

/// Points of GPU history kept in State for the scheduler's window; older ones live only in
/// the journal (and in `carma report`).
pub const GPU_HISTORY_MAX: usize = 128;
/// Age after which a history point is dropped from State, in ms.
pub const GPU_HISTORY_MS: u64 = 10 * 60 * 1000;

/// What State remembers about one GPU.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuState {
    /// The GPU's UUID, its key in [`State::gpus`].
    pub uuid: String,
    /// The driver's index of the GPU, from its latest GpuDiscovered record.
    pub index: u32,
    /// The product name, from its latest GpuDiscovered record.
    pub name: String,
    /// The GPU's total memory, MiB, from its latest GpuDiscovered record.
    pub memory_total_mib: u64,
    /// The newest sample, with its process list.
    pub last: Option<GpuSample>,
    /// When the newest sample was journaled, Unix ms (0 before the first).
    pub last_ms: u64,
    /// Recent readings, oldest first, bounded by [`GPU_HISTORY_MAX`] and [`GPU_HISTORY_MS`].
    pub history: Vec<GpuPoint>,
    /// The attempts (task, number) launched on it and not seen ended at its last sample, to
    /// split its energy among (see journal/energy.rs).
    #[serde(default)]
    pub running: Vec<(TaskId, u32)>,
}

/// One reading, reduced to what the scheduler's window needs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuPoint {
    /// When the sample was journaled, Unix ms.
    pub time_ms: u64,
    /// The GPU's total memory at the sample, MiB.
    pub memory_total_mib: u64,
    /// The GPU's unallocated memory at the sample, MiB.
    pub memory_free_mib: u64,
    /// Driver-reserved memory, when the sample had it.
    pub memory_reserved_mib: Option<u64>,
    /// The fraction of SMs busy, 0..1, when measured.
    pub sm_active: Option<f32>,
    /// What `sm_active` measures (GPM, or a coarse stand-in such as device utilisation).
    pub sm_active_source: SmSource,
    /// NVML's mean utilisation since the previous tick, 0..1 ("a kernel ran").
    pub util_gpu: Option<f32>,
    /// Achieved SM occupancy, 0..1, when measured.
    pub sm_occupancy: Option<f32>,
    /// DRAM bandwidth utilisation, 0..1, when measured.
    pub dram_active: Option<f32>,
}

/// A spool file that failed validation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rejection {
    /// The seq of the Rejected record.
    pub seq: u64,
    /// When the spool file was rejected, Unix ms.
    pub time_ms: u64,
    /// The id the spool file's name gave, when it parsed.
    pub task: Option<TaskId>,
    /// The rejected spool file's name.
    pub spool_file: String,
    /// The uid that owned the spool file.
    pub submitter_uid: u32,
    /// Why validation failed, in words for the submitter.
    pub reason: String,
}

/// One task and its history.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Task {
    /// The task's id, made by `carma submit`; it sorts by submit time.
    pub id: TaskId,
    /// Seq of the Submitted event: the FIFO order.
    pub submit_seq: u64,
    /// When `carma submit` ran, Unix ms (from the id, at most the ingest time).
    pub submitted_ms: u64,
    /// The uid that owned the spool file: the job runs as this user.
    pub submitter_uid: u32,
    /// The submission as validated at ingest, with any `carma update` applied.
    pub spec: TaskSpec,
    /// Where the task is in its life, with that phase's data ([`Phase`]).
    pub phase: Phase,
    /// Every attempt so far, in order; the last is the current or latest one.
    pub attempts: Vec<Attempt>,
    /// The latest memory estimate of the task's model summary, if any.
    pub estimate: Option<EstimateRecord>,
    /// Why the model summary gave no estimate, for the summary file's version in
    /// `summary_stamp`; the tick tries again only when the file changes.
    pub estimate_failure: Option<EstimateFailure>,
    /// The memory requirement the latest recovery raised, MiB per GPU. History, not phase:
    /// it outlives the recovery queue, as the floor of the next OOM's decision.
    pub recovery_requirement_mib: Option<u64>,
    /// Attempts that died of GPU out-of-memory (OomDetected records).
    pub oom_count: u32,
    /// Attempts that vanished (Lost records).
    pub lost_count: u32,
    /// Set by SlurmPlaced: the task is a Slurm job, which Slurm places and runs; the tick
    /// never places, launches, reconciles or cancels it.
    pub slurm: Option<SlurmRef>,
    /// Times the task was queued again by `carma requeue` or its job's requeue exit code;
    /// they use no retry.
    pub requeue_count: u32,
}

/// A Slurm job as of its latest attempt (from SlurmPlaced).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlurmRef {
    /// The Slurm cluster's name.
    pub cluster: String,
    /// The job's id on that cluster.
    pub job_id: u32,
    /// The node of the latest attempt.
    pub node: String,
    /// Shards granted to the latest attempt; `None` for whole GPUs.
    pub shards: Option<u32>,
    /// The memory of one shard, MiB.
    pub shard_mib: u64,
}

/// An estimate as journaled.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EstimateRecord {
    /// The estimator that produced the figures.
    pub method: String,
    /// The estimator's central figure per GPU, MiB.
    pub mib: u64,
    /// The estimator's upper bound per GPU, MiB: what placement uses.
    pub upper_mib: u64,
    /// How the estimator came to its figure, in words for `carma show`.
    pub explanation: String,
}

/// A failed estimate as journaled.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EstimateFailure {
    /// Why no estimate, in words for the submitter.
    pub reason: String,
    /// Which version of the summary file failed (size and modification time).
    pub summary_stamp: u64,
}

/// The outcome journaled for an attempt stopped at its time limit (`tick::reconcile`).
pub const TIME_LIMIT_OUTCOME: &str = "time limit";
/// One try at running a task.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    /// The attempt's number, from 1.
    pub number: u32,
    /// When its Placed record was journaled, Unix ms.
    pub placed_ms: u64,
    /// The GPU (or MIG instance) UUIDs it was placed on.
    pub gpus: Vec<String>,
    /// True when nobody may share its GPUs while it runs.
    pub exclusive: bool,
    /// The memory per GPU its placement assumed, MiB, if any.
    pub requirement_mib: Option<u64>,
    /// Why these GPUs, in the scheduler's words.
    pub placement_reason: String,
    /// When its Launched record was journaled, Unix ms; `None` while only placed.
    pub launched_ms: Option<u64>,
    /// Its supervisor process, from the Launched record (pid 0 for a Slurm job, which carma
    /// does not supervise); `None` before launch.
    pub supervisor: Option<ProcessRef>,
    /// When its end was journaled, Unix ms; `None` while it holds its GPUs.
    pub ended_ms: Option<u64>,
    /// How the attempt ended, in words ("exit 0", "out of memory", "lost: ...").
    pub outcome: Option<String>,
    /// Highest GPU memory seen for the attempt on its busiest GPU, MiB.
    pub peak_observed_mib: Option<u64>,
    /// The sum of the attempt's journaled SM samples (SmObserved, each 0..1).
    pub sm_util_sum: f64,
    /// How many SmObserved samples `sm_util_sum` adds up.
    pub sm_util_samples: u32,
    /// When the newest SmObserved sample was journaled, Unix ms; the tick spaces samples by
    /// it.
    pub sm_util_last_ms: Option<u64>,
    /// The time-limit mails sent for this attempt, a bit per
    /// [`crate::spec::mail::TIME_LIMIT_KINDS`] entry, so each goes once.
    #[serde(default)]
    pub limit_mails: u8,
    /// GPU energy attributed to the attempt, millijoules: its share of each sample's energy
    /// counter delta on its GPUs (see journal/energy.rs).
    #[serde(default)]
    pub energy_mj: f64,
    /// Set when the tick stopped the attempt for using more GPU memory than it declared on a
    /// shared GPU (MemoryExceeded).
    #[serde(default)]
    pub memory_exceeded: Option<ExceededMemory>,
    /// When the job last said it saved its state (Checkpointed), Unix ms.
    #[serde(default)]
    pub checkpoint_ms: Option<u64>,
    /// Set when the scheduler took the attempt back for a waiting task (Preempted).
    #[serde(default)]
    pub preempted: Option<Preemption>,
    /// Set while the attempt is suspended (Suspended, until Resumed): it holds no GPU memory
    /// and the scheduler does not count it on its GPUs.
    #[serde(default)]
    pub suspended: Option<Suspension>,
    /// Times the attempt was suspended for another task; each counts against
    /// `[sched.preemption] max-per-task` as a preemption does.
    #[serde(default)]
    pub suspensions: u32,
    /// When it was last resumed (Resumed), Unix ms: the scheduler counts its memory in flight
    /// from then, as a launching task's.
    #[serde(default)]
    pub resumed_ms: Option<u64>,
    /// Set when a preemption of the attempt was called off (PreemptionWithdrawn): the reason,
    /// naming the preemptor and what became of it.
    #[serde(default)]
    pub withdrawn: Option<String>,
    /// Preemptions of the attempt that were called off (PreemptionWithdrawn). Each was a
    /// notice the job got, so each counts against `[sched.preemption] max-per-task`.
    #[serde(default)]
    pub withdrawals: u32,
    /// When the last of them was journaled, Unix ms: `withdrawn-rest` counts from here.
    #[serde(default)]
    pub withdrawn_ms: Option<u64>,
    /// Set when the tick ended the attempt's suspension without a resume (SuspensionEnded):
    /// why. The attempt is being stopped, and its end is a requeue.
    #[serde(default)]
    pub suspension_ended: Option<String>,
}

/// Who an attempt is suspended for, since when (Suspended).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Suspension {
    /// The waiting task it gave way to.
    pub by: TaskId,
    /// When the Suspended record was journaled, Unix ms.
    pub at_ms: u64,
    /// What `queue` and `show` say of it: who it gave way to, and when it resumes.
    #[serde(default)]
    pub reason: String,
}

/// Who took an attempt back, why, and what it lost (Preempted).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Preemption {
    /// The waiting task it gave way to.
    pub by: TaskId,
    /// Why, in the scheduler's words.
    pub reason: String,
    /// Work lost since its last checkpoint (or its start), ms.
    pub lost_ms: u64,
    /// When the Preempted record was journaled, Unix ms: the grace counts from here.
    pub at_ms: u64,
}

/// Where and why an attempt was over its share of a GPU's memory (MemoryExceeded).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExceededMemory {
    /// The GPU's UUID.
    pub gpu: String,
    /// The verdict in words: `used 9.8 GiB on GPU0, declared 1.0 GiB (+ 1.0 GiB margin)`.
    pub reason: String,
}

impl Attempt {
    /// Placed or running and not yet ended: it holds its GPUs.
    pub fn is_active(&self) -> bool {
        self.ended_ms.is_none()
    }

    /// Mean of the attempt's own SM samples, if any.
    pub fn sm_util_mean(&self) -> Option<f32> {
        (self.sm_util_samples > 0).then(|| (self.sm_util_sum / f64::from(self.sm_util_samples)) as f32)
    }
}

/// Where an active attempt runs, so that each runner observes only its own (the tick's
/// supervisors, or Slurm's jobs) and the tick branches on the kind, not on loose fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptRef {
    /// A detached supervisor on this machine: the one its Launched record names, `None`
    /// while none is journaled (placed, or a crashed tick's launch not yet adopted).
    Local(Option<ProcessRef>),
    /// A Slurm job: its node's hooks journal its start and end, the tick never does.
    Slurm {
        /// The Slurm cluster's name.
        cluster: String,
        /// The job's id on that cluster.
        job_id: u32,
    },
}

/// The memory figure placement uses for a task, per GPU: its estimate's upper bound, else
/// its declared memory; none when placement ignores memory.
pub fn requirement_mib(task: &Task, source: crate::config::MemorySource) -> Option<u64> {
    use crate::config::MemorySource;
    match source {
        MemorySource::None => None,
        MemorySource::Declared | MemorySource::Learned => {
            task.estimate.as_ref().map(|e| e.upper_mib).or(task.spec.memory_mib)
        }
    }
}

impl Task {
    /// The attempt that is placed or running, if any.
    pub fn active_attempt(&self) -> Option<&Attempt> {
        self.attempts.last().filter(|a| a.is_active())
    }

    /// The active attempt's number and where it runs.
    pub fn active_ref(&self) -> Option<(u32, AttemptRef)> {
        let attempt = self.active_attempt()?;
        let at = match &self.slurm {
            Some(slurm) => AttemptRef::Slurm { cluster: slurm.cluster.clone(), job_id: slurm.job_id },
            None => AttemptRef::Local(attempt.supervisor.clone()),
        };
        Some((attempt.number, at))
    }

    pub(super) fn attempt_mut(&mut self, number: u32) -> Option<&mut Attempt> {
        self.attempts.iter_mut().rev().find(|a| a.number == number)
    }

    /// Where the task is in its life, coarsely.
    pub fn status(&self) -> Status {
        self.phase.status(self.active_attempt().is_some_and(|a| a.launched_ms.is_some()))
    }

    /// Why the task waits; while an attempt is open, which of its processes survive SIGKILL.
    pub fn pending_reason(&self) -> Option<&str> {
        self.phase.pending_reason()
    }

    /// True while the task waits in the recovery queue.
    pub fn in_recovery(&self) -> bool {
        self.phase.recovery_mode().is_some()
    }

    /// How the recovery retry is placed, while the task waits in the recovery queue.
    pub fn recovery_mode(&self) -> Option<RecoveryMode> {
        self.phase.recovery_mode()
    }

    /// Held: it waits until released.
    pub fn held(&self) -> bool {
        self.phase.held()
    }

    /// Who asked for the active attempt to be stopped and the task queued again.
    pub fn requeue_by(&self) -> Option<u32> {
        self.phase.requeue_by()
    }

    /// When the task ended.
    pub fn ended_ms(&self) -> Option<u64> {
        self.phase.ended_ms()
    }

    /// Why the task ended, for Failed and Cancelled.
    pub fn end_reason(&self) -> Option<&str> {
        self.phase.end_reason()
    }

    /// Failed because its last attempt reached its time limit: Slurm's TIMEOUT, told apart
    /// from other failures by that attempt's journaled outcome (old journals' too).
    pub fn timed_out(&self) -> bool {
        self.status() == Status::Failed
            && self.attempts.last().and_then(|a| a.outcome.as_deref()) == Some(TIME_LIMIT_OUTCOME)
    }

    /// Ends attempt `number` if it is open, and moves the phase on; whether it was open. The
    /// one place an attempt ends, so the phase and the attempts stay in step.
    pub(super) fn end_attempt(&mut self, number: u32, time_ms: u64, outcome: String) -> bool {
        let Some(attempt) = self.attempt_mut(number).filter(|a| a.ended_ms.is_none()) else { return false };
        attempt.ended_ms = Some(time_ms);
        attempt.outcome = Some(outcome);
        self.phase.attempt_closed();
        true
    }

    /// True while the active attempt has ended (or lost its supervisor) but some of its
    /// processes survive SIGKILL: its verdict and any retry wait, and `pending_reason` names
    /// the pids ("lost-pending").
    pub fn held_by_survivors(&self) -> bool {
        self.active_attempt().is_some() && self.pending_reason().is_some()
    }

    /// The number the next attempt will get.
    pub fn next_attempt_number(&self) -> u32 {
        self.attempts.last().map_or(1, |a| a.number + 1)
    }

    /// What makes two tasks the same workload, whose history one can learn from for the
    /// other: the submitter, the task name and the command line.
    pub fn workload_key(&self) -> String {
        format!("{}\u{1f}{}\u{1f}{}", self.submitter_uid, self.spec.name, self.spec.command.join("\u{1f}"))
    }
}

/// The pending reason of a task whose attempt `attempt` has processes `remaining` that
/// survive SIGKILL. The tick compares it with the task's to record a change only.
pub fn survivors_reason(attempt: u32, remaining: &[u32]) -> String {
    const LISTED: usize = 10;
    let mut pids = remaining.iter().take(LISTED).map(u32::to_string).collect::<Vec<_>>().join(", ");
    if remaining.len() > LISTED {
        pids.push_str(&format!(" and {} more", remaining.len() - LISTED));
    }
    format!(
        "attempt {attempt} has ended but its processes {pids} survive SIGKILL; it is not recorded as ended or retried until they are gone"
    )
}

impl State {
    /// Tasks waiting for the tick to place them, in no particular order (the scheduler
    /// orders them). A Slurm job waiting for Slurm to start it again is not among them.
    pub fn waiting(&self) -> impl Iterator<Item = &Task> {
        self.tasks.values().filter(|t| t.status() == Status::Pending && t.slurm.is_none())
    }

    /// The newest unfinished task of Slurm job `job_id` of `cluster`, if any: how the node's
    /// hooks find a job again after a requeue changed its submit time.
    pub fn slurm_task(&self, cluster: &str, job_id: u32) -> Option<&Task> {
        self.tasks.values().rev().find(|t| {
            !t.status().is_terminal()
                && t.slurm.as_ref().is_some_and(|s| s.job_id == job_id && s.cluster == cluster)
        })
    }

    /// The owner of array `array`, once a member is journaled.
    pub fn array_owner(&self, array: &TaskId) -> Option<u32> {
        self.array_owners.get(array).copied()
    }

    /// Whether `id` has ever been ingested, as a task or a rejection.
    pub fn knows(&self, id: &TaskId) -> bool {
        self.tasks.contains_key(id) || self.rejected_ids.contains(id)
    }
}
