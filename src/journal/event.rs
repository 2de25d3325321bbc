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
    pub event: Event,
}

/// A running process as identified across pid reuse and reboots.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessRef {
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
    Submitted { task: TaskId, submitter_uid: u32, spec: TaskSpec },
    /// A spool file failed validation at ingest; `task` is absent when even its name was bad.
    Rejected { task: Option<TaskId>, spool_file: String, submitter_uid: u32, reason: String },
    /// The task was cancelled by `by_uid`; a running attempt is being stopped.
    Cancelled { task: TaskId, by_uid: u32, reason: String },
    /// A memory estimate for the task (per GPU).
    Estimated { task: TaskId, method: String, mib: u64, upper_mib: u64, explanation: String },
    /// Why the task is still waiting; recorded only when the reason changes.
    Pending { task: TaskId, reason: String },
    /// Intent to launch `attempt` on `gpus`; committed before the launch happens.
    Placed {
        task: TaskId,
        attempt: u32,
        gpus: Vec<String>,
        exclusive: bool,
        requirement_mib: Option<u64>,
        reason: String,
    },
    /// The attempt's supervisor is running (`adopted` when found after a tick crash).
    Launched { task: TaskId, attempt: u32, supervisor: ProcessRef, adopted: bool },
    /// The attempt ended with exit code 0.
    Finished { task: TaskId, attempt: u32, exit_ms: u64 },
    /// The attempt ended and will not be retried; `outcome` is the exit in words.
    Failed { task: TaskId, attempt: u32, outcome: String, reason: String },
    /// The attempt died of GPU out-of-memory; a Requeued or Failed event follows.
    OomDetected { task: TaskId, attempt: u32, evidence: String, peak_mib: Option<u64> },
    /// The attempt vanished (dead supervisor without exit record, reboot); a Requeued or
    /// Failed event follows.
    Lost { task: TaskId, attempt: u32, reason: String },
    /// The task goes back to a queue; `recovery` is true for the priority recovery queue.
    Requeued {
        task: TaskId,
        recovery: bool,
        requirement_mib: Option<u64>,
        /// How the task runs again, parsed once when the record is decoded; `events --json`
        /// shows the wire's word (`""`, `"user"`, or the recovery mode's name).
        #[serde(serialize_with = "requeue_word")]
        recovery_mode: RequeueMode,
        reason: String,
    },
    /// End-of-tick bookkeeping, for `carma report` and operations. `rr_cursor` is the
    /// round-robin position the decision left, journaled so replay needs no other input.
    TickCompleted { ingested: u32, rejected: u32, placed: u32, duration_us: u64, rr_cursor: u32 },
    /// One GPU's reading at this tick (memory, activity, power, energy counter, processes).
    MetricSample { sample: GpuSample },
    /// A GPU seen for the first time, or with a changed identity (index, name, memory).
    GpuDiscovered { uuid: String, index: u32, name: String, memory_total_mib: u64 },
    /// The GPU probe failed or recovered; recorded on change only, so a machine without a
    /// driver says so once. `detail` is empty when GPUs are readable again.
    GpuProbeStatus { detail: String },
    /// The attempt of a cancelled task has ended (`outcome` in words).
    Stopped { task: TaskId, attempt: u32, outcome: String },
    /// A new peak of the attempt's GPU memory (on its busiest GPU, MiB), recorded when it
    /// grows by at least 256 MiB; recovery raises the requirement to at least this.
    Usage { task: TaskId, attempt: u32, peak_mib: u64 },
    /// The task's model summary could not be read or estimated. Journaled once per version
    /// of the summary file (`summary_stamp`, from its size and modification time), so a
    /// bad file costs one record, and a fixed file is estimated again.
    EstimateFailed { task: TaskId, reason: String, summary_stamp: u64 },
    /// The tick left this many spool entries for later ticks (its per-tick bounds), so a
    /// flood is visible instead of silently slowing ingest.
    IngestDeferred { entries: u64 },
    /// Processes of an attempt whose supervisor is gone (or done) that the tick found alive
    /// and sent SIGKILL (`processes` of them), recorded before the attempt's verdict.
    /// `remaining` are pids that survived even that: the attempt stays active (its verdict
    /// and any retry wait, the task's pending reason names them) and the tick tries again
    /// every tick, recording again only when the set changes.
    Reaped { task: TaskId, attempt: u32, processes: u32, remaining: Vec<u32>, detail: String },
    /// A GPU's health changed: it was lost, reported an XID error, became unreadable, or reads
    /// healthy again (`Healthy`). Recorded on change only (every MetricSample carries the
    /// health too); while unhealthy the GPU and its MIG instances take no work.
    GpuHealthChanged { uuid: String, index: u32, health: GpuHealth },
    /// Slurm started the attempt as job `job_id` of `cluster` on node `node`, with `shards`
    /// shards of `shard_mib` MiB each (`None` for a job given whole GPUs); the Placed event
    /// committed with it names the GPUs. Journaled by the node's Prolog (`carma slurm
    /// prolog`). From this event on the task belongs to Slurm: the tick never places,
    /// launches, reconciles or cancels it.
    SlurmPlaced {
        task: TaskId,
        attempt: u32,
        cluster: String,
        job_id: u32,
        node: String,
        shards: Option<u32>,
        shard_mib: u64,
    },
    /// A per-process SM-utilisation sample of the running attempt (its processes' sum, 0..1, on
    /// its busiest GPU), taken while that GPU's processes together used less than
    /// [`SM_SATURATED`](crate::tick::SM_SATURATED) of it, so that it measures the job's
    /// standalone SM activity. At most one per attempt per
    /// [`SM_SAMPLE_EVERY_MS`](crate::tick::SM_SAMPLE_EVERY_MS); State learns each workload's SM
    /// activity from them.
    SmObserved { task: TaskId, attempt: u32, sm_util: f32 },
    /// The task was held by `by_uid` (`carma hold`): it waits, with reason `Held`, until
    /// released. A task submitted with `--hold` starts held without this record.
    Held { task: TaskId, by_uid: u32 },
    /// The task was released by `by_uid` (`carma release`).
    Released { task: TaskId, by_uid: u32 },
    /// A waiting task's settings were changed by `by_uid` (`carma update`); each field that is
    /// set replaces the spec's.
    Updated {
        task: TaskId,
        by_uid: u32,
        priority: Option<i32>,
        nice: Option<i32>,
        memory_mib: Option<u64>,
        time_limit_ms: Option<u64>,
        gpus: Option<u32>,
    },
    /// With backfill, the GPUs kept for the blocked head of the queue: no task behind it
    /// starts on them while it stays the head. Recorded when the reservation changes.
    Reserved { task: TaskId, gpus: Vec<String> },
    /// A notice was started (`channel`: "command" or "mail"); `notice` says which
    /// ([`crate::journal::notices`]: END, BEGIN, REQUEUE, TIME_LIMIT_80, ARRAY ...; for ARRAY
    /// `task` is the array's id), `detail` how.
    Notified { task: TaskId, channel: String, notice: String, detail: String },
    /// A notice could not be started through `channel`.
    NotifyFailed { task: TaskId, channel: String, notice: String, reason: String },
    /// `carma requeue` by `by_uid` of a placed or running task: its attempt is stopped, and
    /// its end is recorded as Stopped followed by a Requeued whose `recovery_mode` is
    /// [`RequeueMode::User`] (which uses no retry).
    RequeueRequested { task: TaskId, by_uid: u32 },
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
            | Event::RequeueRequested { task, .. } => Some(task),
            Event::Rejected { task, .. } => task.as_ref(),
            Event::TickCompleted { .. }
            | Event::MetricSample { .. }
            | Event::GpuDiscovered { .. }
            | Event::GpuProbeStatus { .. }
            | Event::IngestDeferred { .. } => None,
            Event::GpuHealthChanged { .. } => None,
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
        }
    }
}

/// `events --json` keeps the wire's word for a requeue's mode.
fn requeue_word<S: serde::Serializer>(mode: &RequeueMode, out: S) -> Result<S::Ok, S::Error> {
    out.serialize_str(mode.word())
}
