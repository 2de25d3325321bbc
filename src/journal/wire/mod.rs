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

pub use decode::{from_wire, legacy_env};
pub use encode::to_wire;
pub use v1::*;
pub use v2::*;
pub use v3::*;
pub use v4::*;

/// A task id as the journal stores it (a newtype of a string encodes as the bare string, the
/// bytes `crate::id::TaskId` wrote before the wire owned its ids). Frozen.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskIdV1(pub String);

/// A supervisor process as the journal stores it. Frozen.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessRefV1 {
    pub pid: u32,
    pub start_time_ticks: u64,
    pub boot_id: String,
}

/// A record as bincode writes it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WireRecord {
    pub time_ms: u64,
    pub event: WireEvent,
}

/// Every record shape ever written. The first 19 variants are carma 0.1's `Event`, byte for
/// byte; new variants are appended at the end only.
// The submitted spec outweighs the other variants; a wire record lives only while it is
// encoded or decoded, so the size does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum WireEvent {
    Submitted {
        task: TaskIdV1,
        submitter_uid: u32,
        spec: SpecV1,
    },
    Rejected {
        task: Option<TaskIdV1>,
        spool_file: String,
        submitter_uid: u32,
        reason: String,
    },
    Cancelled {
        task: TaskIdV1,
        by_uid: u32,
        reason: String,
    },
    Estimated {
        task: TaskIdV1,
        method: String,
        mib: u64,
        upper_mib: u64,
        explanation: String,
    },
    Pending {
        task: TaskIdV1,
        reason: String,
    },
    Placed {
        task: TaskIdV1,
        attempt: u32,
        gpus: Vec<String>,
        exclusive: bool,
        requirement_mib: Option<u64>,
        reason: String,
    },
    Launched {
        task: TaskIdV1,
        attempt: u32,
        supervisor: ProcessRefV1,
        adopted: bool,
    },
    Finished {
        task: TaskIdV1,
        attempt: u32,
        exit_ms: u64,
    },
    Failed {
        task: TaskIdV1,
        attempt: u32,
        outcome: String,
        reason: String,
    },
    OomDetected {
        task: TaskIdV1,
        attempt: u32,
        evidence: String,
        peak_mib: Option<u64>,
    },
    Lost {
        task: TaskIdV1,
        attempt: u32,
        reason: String,
    },
    Requeued {
        task: TaskIdV1,
        recovery: bool,
        requirement_mib: Option<u64>,
        recovery_mode: String,
        reason: String,
    },
    TickCompleted {
        ingested: u32,
        rejected: u32,
        placed: u32,
        duration_us: u64,
        rr_cursor: u32,
    },
    MetricSample {
        sample: SampleV1,
    },
    GpuDiscovered {
        uuid: String,
        index: u32,
        name: String,
        memory_total_mib: u64,
    },
    GpuProbeStatus {
        detail: String,
    },
    Stopped {
        task: TaskIdV1,
        attempt: u32,
        outcome: String,
    },
    Usage {
        task: TaskIdV1,
        attempt: u32,
        peak_mib: u64,
    },
    EstimateFailed {
        task: TaskIdV1,
        reason: String,
        summary_stamp: u64,
    },
    // ---- carma 0.2 ----
    /// A GPU reading with the 0.2 fields.
    MetricSampleV2 {
        sample: SampleV2,
    },
    /// A submission with the 0.2 spec (no environment values).
    SubmittedV2 {
        task: TaskIdV1,
        submitter_uid: u32,
        spec: SpecV2,
    },
    IngestDeferred {
        entries: u64,
    },
    /// Processes of an ended or lost attempt killed by the tick, and any that survive.
    Reaped {
        task: TaskIdV1,
        attempt: u32,
        processes: u32,
        remaining: Vec<u32>,
        detail: String,
    },
    /// A GPU's health changed (carma 0.2).
    GpuHealthChanged {
        uuid: String,
        index: u32,
        health: HealthV2,
    },
    /// Slurm started the attempt (carma on Slurm, 0.2).
    SlurmPlaced {
        task: TaskIdV1,
        attempt: u32,
        cluster: String,
        job_id: u32,
        node: String,
        shards: Option<u32>,
        shard_mib: u64,
    },
    /// A running attempt's standalone SM utilisation, sampled below saturation.
    SmObserved {
        task: TaskIdV1,
        attempt: u32,
        sm_util: f32,
    },
    Held {
        task: TaskIdV1,
        by_uid: u32,
    },
    Released {
        task: TaskIdV1,
        by_uid: u32,
    },
    Updated {
        task: TaskIdV1,
        by_uid: u32,
        priority: Option<i32>,
        nice: Option<i32>,
        memory_mib: Option<u64>,
        time_limit_ms: Option<u64>,
        gpus: Option<u32>,
    },
    Reserved {
        task: TaskIdV1,
        gpus: Vec<String>,
    },
    Notified {
        task: TaskIdV1,
        channel: String,
        detail: String,
    },
    NotifyFailed {
        task: TaskIdV1,
        channel: String,
        reason: String,
    },
    // ---- carma 0.3 ----
    /// A submission with the 0.2 spec and the 0.3 timing (`--signal`, `--begin`).
    SubmittedV3 {
        task: TaskIdV1,
        submitter_uid: u32,
        spec: SpecV2,
        timing: TimingV3,
    },
    /// `carma requeue` of a placed or running task: its attempt is stopped and the task
    /// queued again.
    RequeueRequested {
        task: TaskIdV1,
        by_uid: u32,
    },
    // ---- carma 0.4 ----
    /// A submission with the 0.2 spec, the 0.3 timing and the 0.4 mail types.
    SubmittedV4 {
        task: TaskIdV1,
        submitter_uid: u32,
        spec: SpecV2,
        timing: TimingV3,
        mail: MailV4,
    },
    /// A notice started, with its kind (`END`, `BEGIN`, `REQUEUE`, `TIME_LIMIT_80`, `ARRAY`
    /// ...); `Notified` is read as an `END` one.
    NotifiedV4 {
        task: TaskIdV1,
        channel: String,
        notice: String,
        detail: String,
    },
    /// A notice that could not be started, with its kind, as `NotifiedV4`.
    NotifyFailedV4 {
        task: TaskIdV1,
        channel: String,
        notice: String,
        reason: String,
    },
}
