//! The journal's wire types: the exact shapes bincode writes to disk, apart from the domain
//! types the rest of carma uses.
//!
//! bincode is not self-describing: a record is decoded by walking the Rust type that wrote it.
//! So the types here are **frozen**. Once a journal may contain a shape it is never edited
//! again; a new shape is a new type (`SpecV2`, `SampleV2`) carried by a new [`WireEvent`]
//! variant appended at the end, and the old variant stays readable forever. The domain types
//! ([`crate::spec::TaskSpec`], [`crate::gpu::GpuSample`], [`super::Event`]) change freely; this
//! module converts between the two by hand, in one place, and carma writes only the newest
//! form.
//!
//! | wire type | written by | holds |
//! |---|---|---|
//! | [`SpecV1`], [`SampleV1`] | carma 0.1 (journal format 1) | the 0.1 task spec, the 0.1 GPU sample |
//! | [`SpecV2`] | carma 0.2 | the program resolved at submit, environment *names* only (values are private), export mode, output paths, MIG profile, dependencies, array membership, priority and nice, hold, notification, job script path |
//! | [`SampleV2`] | carma 0.2 | + driver-reserved memory, GPU health, per-process SM utilisation, MIG profiles and per-instance processes, coarse SM sources |
//! | [`TimingV3`] | carma 0.3 | beside a `SpecV2` (`SubmittedV3`): the signal before the time limit, the earliest start |
//! | [`MailV4`] | carma 0.4 | beside a `SpecV2` and a `TimingV3` (`SubmittedV4`): the mail types; `NotifiedV4`/`NotifyFailedV4` add the notice's kind |
//! | [`ExtrasV5`] | carma 0.5 | beside the 0.4 parts (`SubmittedV5`): host memory and CPUs, requeue, reservation, interactive mode |
//! | [`LimitsV6`] | carma 0.6 | beside the 0.5 parts (`SubmittedV6`): where the time limit came from (the task, or the queue's default or maximum) |
//!
//! Legacy readers may be deleted only together with support for journals of that format.
//! | [`TaskIdV1`], [`ProcessRefV1`] | every version | a task id, a supervisor process (the wire owns these, so the domain's `TaskId` and `ProcessRef` may change) |
//!
//! The rooms: `v1` and `v2` hold the frozen shapes of each generation, `encode` turns domain
//! records into the newest shapes, `decode` turns every shape ever written back into domain
//! records, and the tests in `pins` hold every variant's bytes fixed.

use serde::{Deserialize, Serialize};

mod decode;
mod encode;
#[cfg(test)]
mod pins;
mod v1;
mod v2;
mod v3;
mod v4;
mod v5;
mod v6;

pub use decode::{from_wire, legacy_env};
pub use encode::to_wire;
pub use v1::*;
pub use v2::*;
pub use v3::*;
pub use v4::*;
pub use v5::*;
pub use v6::*;

/// A task id as the journal stores it (a newtype of a string encodes as the bare string, the
/// bytes `crate::id::TaskId` wrote before the wire owned its ids). Frozen.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskIdV1(
    /// The id's text, as `TaskId::as_str` gives it; frozen.
    pub String,
);

/// A supervisor process as the journal stores it. Frozen.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessRefV1 {
    /// The supervisor's process id ([`ProcessRef`](super::ProcessRef)'s `pid`); frozen.
    pub pid: u32,
    /// The supervisor's start time, clock ticks since boot (`/proc/PID/stat` field 22); frozen.
    pub start_time_ticks: u64,
    /// The kernel's boot id when the supervisor was seen; frozen.
    pub boot_id: String,
}

/// A record as bincode writes it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WireRecord {
    /// When the event happened, Unix ms ([`Record`](super::Record)'s `time_ms`); frozen.
    pub time_ms: u64,
    /// What happened, in the shape its carma wrote; frozen.
    pub event: WireEvent,
}

/// Every record shape ever written. The first 19 variants are carma 0.1's `Event`, byte for
/// byte; new variants are appended at the end only.
// The submitted spec outweighs the other variants; a wire record lives only while it is
// encoded or decoded, so the size does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum WireEvent {
    /// [`Event::Submitted`](super::Event::Submitted) with carma 0.1's spec (environment values
    /// included).
    Submitted {
        /// The new task's id; frozen.
        task: TaskIdV1,
        /// The uid owning the spool file; frozen.
        submitter_uid: u32,
        /// The submission in carma 0.1's shape; frozen.
        spec: SpecV1,
    },
    /// [`Event::Rejected`](super::Event::Rejected).
    Rejected {
        /// The id the spool file's name gave, when it parsed; frozen.
        task: Option<TaskIdV1>,
        /// The rejected spool file's name; frozen.
        spool_file: String,
        /// The uid owning the spool file; frozen.
        submitter_uid: u32,
        /// Why validation failed, in words; frozen.
        reason: String,
    },
    /// [`Event::Cancelled`](super::Event::Cancelled).
    Cancelled {
        /// The cancelled task; frozen.
        task: TaskIdV1,
        /// Who cancelled it; frozen.
        by_uid: u32,
        /// Why, in words; frozen.
        reason: String,
    },
    /// [`Event::Estimated`](super::Event::Estimated).
    Estimated {
        /// The task estimated; frozen.
        task: TaskIdV1,
        /// The estimator's name; frozen.
        method: String,
        /// The estimator's central figure per GPU, MiB; frozen.
        mib: u64,
        /// The estimator's upper bound per GPU, MiB; frozen.
        upper_mib: u64,
        /// How the estimator came to its figure, in words; frozen.
        explanation: String,
    },
    /// [`Event::Pending`](super::Event::Pending).
    Pending {
        /// The waiting task; frozen.
        task: TaskIdV1,
        /// Why it waits, in words; frozen.
        reason: String,
    },
    /// [`Event::Placed`](super::Event::Placed).
    Placed {
        /// The task placed; frozen.
        task: TaskIdV1,
        /// The new attempt's number, from 1; frozen.
        attempt: u32,
        /// The GPU or MIG instance UUIDs the attempt gets; frozen.
        gpus: Vec<String>,
        /// True when nobody may share the GPUs; frozen.
        exclusive: bool,
        /// The memory per GPU the decision assumed, MiB; frozen.
        requirement_mib: Option<u64>,
        /// Why these GPUs, in words; frozen.
        reason: String,
    },
    /// [`Event::Launched`](super::Event::Launched).
    Launched {
        /// The task launched; frozen.
        task: TaskIdV1,
        /// The attempt launched; frozen.
        attempt: u32,
        /// The attempt's supervisor process; frozen.
        supervisor: ProcessRefV1,
        /// True when a later tick found the supervisor already running; frozen.
        adopted: bool,
    },
    /// [`Event::Finished`](super::Event::Finished).
    Finished {
        /// The task that finished; frozen.
        task: TaskIdV1,
        /// The attempt that exited 0; frozen.
        attempt: u32,
        /// When the job ended, Unix ms, from its supervisor's exit record; frozen.
        exit_ms: u64,
    },
    /// [`Event::Failed`](super::Event::Failed).
    Failed {
        /// The task that failed; frozen.
        task: TaskIdV1,
        /// The attempt whose end failed it; frozen.
        attempt: u32,
        /// How the attempt ended, in words; frozen.
        outcome: String,
        /// Why the task is not retried, in words; frozen.
        reason: String,
    },
    /// [`Event::OomDetected`](super::Event::OomDetected).
    OomDetected {
        /// The task whose attempt ran out of GPU memory; frozen.
        task: TaskIdV1,
        /// The attempt that died; frozen.
        attempt: u32,
        /// The out-of-memory message found in the attempt's logs; frozen.
        evidence: String,
        /// The attempt's highest GPU memory seen on one GPU, MiB; frozen.
        peak_mib: Option<u64>,
    },
    /// [`Event::Lost`](super::Event::Lost).
    Lost {
        /// The task whose attempt vanished; frozen.
        task: TaskIdV1,
        /// The attempt that vanished; frozen.
        attempt: u32,
        /// How the tick knew, in words; frozen.
        reason: String,
    },
    /// [`Event::Requeued`](super::Event::Requeued).
    Requeued {
        /// The task queued again; frozen.
        task: TaskIdV1,
        /// True for the priority recovery queue; frozen.
        recovery: bool,
        /// A recovery's raised memory per GPU, MiB; frozen.
        requirement_mib: Option<u64>,
        /// How the task runs again as a word: `""` main queue,
        /// [`USER_REQUEUE`](super::USER_REQUEUE), or a recovery mode's name
        /// ([`RequeueMode`](super::RequeueMode)); frozen.
        recovery_mode: String,
        /// Why, in words; frozen.
        reason: String,
    },
    /// [`Event::TickCompleted`](super::Event::TickCompleted).
    TickCompleted {
        /// Spool files the tick ingested; frozen.
        ingested: u32,
        /// Spool files the tick rejected; frozen.
        rejected: u32,
        /// Attempts the tick placed; frozen.
        placed: u32,
        /// The tick's wall time, µs; frozen.
        duration_us: u64,
        /// The round-robin position the decision left; frozen.
        rr_cursor: u32,
    },
    /// [`Event::MetricSample`](super::Event::MetricSample) with carma 0.1's sample.
    MetricSample {
        /// The GPU's reading in carma 0.1's shape; frozen.
        sample: SampleV1,
    },
    /// [`Event::GpuDiscovered`](super::Event::GpuDiscovered).
    GpuDiscovered {
        /// The GPU's UUID; frozen.
        uuid: String,
        /// The driver's index of the GPU; frozen.
        index: u32,
        /// The GPU's product name; frozen.
        name: String,
        /// The GPU's total memory, MiB; frozen.
        memory_total_mib: u64,
    },
    /// [`Event::GpuProbeStatus`](super::Event::GpuProbeStatus).
    GpuProbeStatus {
        /// Why the probe failed; empty when it works again; frozen.
        detail: String,
    },
    /// [`Event::Stopped`](super::Event::Stopped).
    Stopped {
        /// The cancelled or requeued task; frozen.
        task: TaskIdV1,
        /// The attempt stopped; frozen.
        attempt: u32,
        /// How it ended, in words; frozen.
        outcome: String,
    },
    /// [`Event::Usage`](super::Event::Usage).
    Usage {
        /// The running task; frozen.
        task: TaskIdV1,
        /// The running attempt; frozen.
        attempt: u32,
        /// The attempt's new peak on its busiest GPU, MiB; frozen.
        peak_mib: u64,
    },
    /// [`Event::EstimateFailed`](super::Event::EstimateFailed).
    EstimateFailed {
        /// The task left without an estimate; frozen.
        task: TaskIdV1,
        /// Why, in words; frozen.
        reason: String,
        /// Which version of the summary file failed (size and modification time), 0 for a captured
        /// one; frozen.
        summary_stamp: u64,
    },
    // ---- carma 0.2 ----
    /// A GPU reading with the 0.2 fields.
    MetricSampleV2 {
        /// The GPU's reading in carma 0.2's shape; frozen.
        sample: SampleV2,
    },
    /// A submission with the 0.2 spec (no environment values).
    SubmittedV2 {
        /// The new task's id; frozen.
        task: TaskIdV1,
        /// The uid owning the spool file; frozen.
        submitter_uid: u32,
        /// The submission in carma 0.2's shape; frozen.
        spec: SpecV2,
    },
    /// [`Event::IngestDeferred`](super::Event::IngestDeferred).
    IngestDeferred {
        /// Spool entries left for later ticks; frozen.
        entries: u64,
    },
    /// Processes of an ended or lost attempt killed by the tick, and any that survive.
    Reaped {
        /// The task whose processes were killed; frozen.
        task: TaskIdV1,
        /// The attempt they belonged to; frozen.
        attempt: u32,
        /// How many processes got SIGKILL; frozen.
        processes: u32,
        /// Pids still alive after SIGKILL; frozen.
        remaining: Vec<u32>,
        /// What was found and done, in words; frozen.
        detail: String,
    },
    /// A GPU's health changed (carma 0.2).
    GpuHealthChanged {
        /// The GPU's UUID; frozen.
        uuid: String,
        /// The driver's index of the GPU; frozen.
        index: u32,
        /// The GPU's new health; frozen.
        health: HealthV2,
    },
    /// Slurm started the attempt (carma on Slurm, 0.2).
    SlurmPlaced {
        /// The task Slurm started; frozen.
        task: TaskIdV1,
        /// The attempt, as its Placed record numbers it; frozen.
        attempt: u32,
        /// The Slurm cluster's name; frozen.
        cluster: String,
        /// The Slurm job id; frozen.
        job_id: u32,
        /// The node the job runs on; frozen.
        node: String,
        /// GPU shards given to the job; `None` for whole GPUs; frozen.
        shards: Option<u32>,
        /// The memory of one shard, MiB; frozen.
        shard_mib: u64,
    },
    /// A running attempt's standalone SM utilisation, sampled below saturation.
    SmObserved {
        /// The running task; frozen.
        task: TaskIdV1,
        /// The running attempt; frozen.
        attempt: u32,
        /// The attempt's summed SM utilisation on its busiest GPU, 0..1; frozen.
        sm_util: f32,
    },
    /// [`Event::Held`](super::Event::Held).
    Held {
        /// The task held; frozen.
        task: TaskIdV1,
        /// Who held it; frozen.
        by_uid: u32,
    },
    /// [`Event::Released`](super::Event::Released).
    Released {
        /// The task released; frozen.
        task: TaskIdV1,
        /// Who released it; frozen.
        by_uid: u32,
    },
    /// [`Event::Updated`](super::Event::Updated).
    Updated {
        /// The waiting task changed; frozen.
        task: TaskIdV1,
        /// Who changed it; frozen.
        by_uid: u32,
        /// The new priority, if changed; frozen.
        priority: Option<i32>,
        /// The new nice value, if changed; frozen.
        nice: Option<i32>,
        /// The new declared memory per GPU, MiB, if changed; frozen.
        memory_mib: Option<u64>,
        /// The new time limit per attempt, ms, if changed; frozen.
        time_limit_ms: Option<u64>,
        /// The new GPU count, if changed; frozen.
        gpus: Option<u32>,
    },
    /// [`Event::Reserved`](super::Event::Reserved).
    Reserved {
        /// The blocked head of the queue; frozen.
        task: TaskIdV1,
        /// The UUIDs of the GPUs kept for it; frozen.
        gpus: Vec<String>,
    },
    /// [`Event::Notified`](super::Event::Notified) as carma 0.2 wrote it, without the notice's kind
    /// (read as END).
    Notified {
        /// The task the notice is about; frozen.
        task: TaskIdV1,
        /// How it was sent: "command" or "mail"; frozen.
        channel: String,
        /// What the notifier reported, in words; frozen.
        detail: String,
    },
    /// [`Event::NotifyFailed`](super::Event::NotifyFailed) as carma 0.2 wrote it, without the
    /// notice's kind (read as END).
    NotifyFailed {
        /// The task the notice is about; frozen.
        task: TaskIdV1,
        /// The channel that failed; frozen.
        channel: String,
        /// Why the notice could not be started; frozen.
        reason: String,
    },
    // ---- carma 0.3 ----
    /// A submission with the 0.2 spec and the 0.3 timing (`--signal`, `--begin`).
    SubmittedV3 {
        /// The new task's id; frozen.
        task: TaskIdV1,
        /// The uid owning the spool file; frozen.
        submitter_uid: u32,
        /// The submission in carma 0.2's shape; frozen.
        spec: SpecV2,
        /// The submission's `--signal` and `--begin`; frozen.
        timing: TimingV3,
    },
    /// `carma requeue` of a placed or running task: its attempt is stopped and the task
    /// queued again.
    RequeueRequested {
        /// The task to queue again; frozen.
        task: TaskIdV1,
        /// Who ran `carma requeue`; frozen.
        by_uid: u32,
    },
    // ---- carma 0.4 ----
    /// A submission with the 0.2 spec, the 0.3 timing and the 0.4 mail types.
    SubmittedV4 {
        /// The new task's id; frozen.
        task: TaskIdV1,
        /// The uid owning the spool file; frozen.
        submitter_uid: u32,
        /// The submission in carma 0.2's shape; frozen.
        spec: SpecV2,
        /// The submission's `--signal` and `--begin`; frozen.
        timing: TimingV3,
        /// The submission's `--mail-type`; frozen.
        mail: MailV4,
    },
    /// A notice started, with its kind (`END`, `BEGIN`, `REQUEUE`, `TIME_LIMIT_80`, `ARRAY`
    /// ...); `Notified` is read as an `END` one.
    NotifiedV4 {
        /// The task the notice is about (the array's id for ARRAY); frozen.
        task: TaskIdV1,
        /// How it was sent: "command" or "mail"; frozen.
        channel: String,
        /// Which notice: END, BEGIN, REQUEUE, TIME_LIMIT_80, ARRAY ...; frozen.
        notice: String,
        /// What the notifier reported, in words; frozen.
        detail: String,
    },
    /// A notice that could not be started, with its kind, as `NotifiedV4`.
    NotifyFailedV4 {
        /// The task the notice is about (the array's id for ARRAY); frozen.
        task: TaskIdV1,
        /// The channel that failed; frozen.
        channel: String,
        /// Which notice, as in `NotifiedV4`; frozen.
        notice: String,
        /// Why the notice could not be started; frozen.
        reason: String,
    },
    // ---- carma 0.5 ----
    /// [`Event::MemoryExceeded`](super::Event::MemoryExceeded): an attempt over its declared
    /// GPU memory on a shared GPU, stopped by the tick.
    MemoryExceeded {
        /// The task over its share; frozen.
        task: TaskIdV1,
        /// Its running attempt; frozen.
        attempt: u32,
        /// The GPU's UUID; frozen.
        gpu: String,
        /// What it used there, MiB; frozen.
        used_mib: u64,
        /// Its share there, MiB; frozen.
        declared_mib: u64,
        /// The verdict in words; frozen.
        reason: String,
    },
    /// A submission with the 0.2 spec, the 0.3 timing, the 0.4 mail types and the 0.5 extras.
    SubmittedV5 {
        /// The new task's id; frozen.
        task: TaskIdV1,
        /// The uid owning the spool file; frozen.
        submitter_uid: u32,
        /// The submission in carma 0.2's shape; frozen.
        spec: SpecV2,
        /// The submission's `--signal` and `--begin`; frozen.
        timing: TimingV3,
        /// The submission's `--mail-type`; frozen.
        mail: MailV4,
        /// The submission's host limits, requeue, reservation and interactive mode; frozen.
        extras: ExtrasV5,
    },
    /// [`Event::Preempted`](super::Event::Preempted): a running attempt taken back for a
    /// waiting task.
    Preempted {
        /// The task preempted; frozen.
        task: TaskIdV1,
        /// Its running attempt; frozen.
        attempt: u32,
        /// The waiting task it gives way to; frozen.
        by: TaskIdV1,
        /// Why, in words; frozen.
        reason: String,
        /// Work lost since its last checkpoint (or its start), ms; frozen.
        lost_ms: u64,
    },
    /// [`Event::Checkpointed`](super::Event::Checkpointed): the job said it saved its state.
    Checkpointed {
        /// The task; frozen.
        task: TaskIdV1,
        /// Its running attempt; frozen.
        attempt: u32,
    },
    /// [`Event::ReservationCreated`](super::Event::ReservationCreated): an administrator's GPU
    /// reservation (carma 0.5).
    ReservationCreated {
        /// Its name; frozen.
        name: String,
        /// Start of the window, Unix ms; frozen.
        start_ms: u64,
        /// End of the window (exclusive), Unix ms; frozen.
        end_ms: u64,
        /// The uids whose tasks may run in it; frozen.
        users: Vec<u32>,
        /// How many GPUs it holds; frozen.
        gpu_count: u32,
        /// The named GPUs' UUIDs, empty for a count; frozen.
        gpus: Vec<String>,
        /// The administrator who created it; frozen.
        by_uid: u32,
    },
    /// [`Event::ReservationDeleted`](super::Event::ReservationDeleted) (carma 0.5).
    ReservationDeleted {
        /// Its name; frozen.
        name: String,
        /// The administrator who deleted it; frozen.
        by_uid: u32,
    },
    /// [`Event::Suspended`](super::Event::Suspended): an attempt suspended for a waiting task.
    Suspended {
        /// The task; frozen.
        task: TaskIdV1,
        /// Its running attempt; frozen.
        attempt: u32,
        /// The waiting task it gives way to; frozen.
        by: TaskIdV1,
    },
    /// [`Event::Resumed`](super::Event::Resumed): a suspended attempt resumed.
    Resumed {
        /// The task; frozen.
        task: TaskIdV1,
        /// Its attempt; frozen.
        attempt: u32,
    },
    /// [`Event::PreemptionWithdrawn`](super::Event::PreemptionWithdrawn): a preemption called
    /// off because its preemptor no longer waited.
    PreemptionWithdrawn {
        /// The task that was preempted; frozen.
        task: TaskIdV1,
        /// Its attempt; frozen.
        attempt: u32,
        /// Why, in words; frozen.
        reason: String,
    },
    /// A submission with the 0.5 parts and where its time limit came from (carma 0.6).
    SubmittedV6 {
        /// The new task's id; frozen.
        task: TaskIdV1,
        /// The uid owning the spool file; frozen.
        submitter_uid: u32,
        /// The submission in carma 0.2's shape; frozen.
        spec: SpecV2,
        /// The submission's `--signal` and `--begin`; frozen.
        timing: TimingV3,
        /// The submission's `--mail-type`; frozen.
        mail: MailV4,
        /// The submission's host limits, requeue, reservation and interactive mode; frozen.
        extras: ExtrasV5,
        /// Where its time limit came from; frozen.
        limits: LimitsV6,
    },
    /// [`Event::SuspensionEnded`](super::Event::SuspensionEnded): a suspension ended without a
    /// resume (past `suspend-max`, or not completed after a crash); the attempt is requeued.
    SuspensionEnded {
        /// The task; frozen.
        task: TaskIdV1,
        /// Its attempt; frozen.
        attempt: u32,
        /// Why, in words; frozen.
        reason: String,
    },
}
