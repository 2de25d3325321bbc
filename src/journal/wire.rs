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
//!
//! Legacy readers may be deleted only together with support for journals of that format.

use serde::{Deserialize, Serialize};

use super::event::{Event, ProcessRef, Record};
use crate::gpu::{GpuHealth, GpuProcess, GpuSample, MigInfo, MigInstance, SmSource};
use crate::id::TaskId;
use crate::spec::{ArrayMember, Dependency, DependencyKind, ReferenceMib, TaskSpec};

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
        task: TaskId,
        submitter_uid: u32,
        spec: SpecV1,
    },
    Rejected {
        task: Option<TaskId>,
        spool_file: String,
        submitter_uid: u32,
        reason: String,
    },
    Cancelled {
        task: TaskId,
        by_uid: u32,
        reason: String,
    },
    Estimated {
        task: TaskId,
        method: String,
        mib: u64,
        upper_mib: u64,
        explanation: String,
    },
    Pending {
        task: TaskId,
        reason: String,
    },
    Placed {
        task: TaskId,
        attempt: u32,
        gpus: Vec<String>,
        exclusive: bool,
        requirement_mib: Option<u64>,
        reason: String,
    },
    Launched {
        task: TaskId,
        attempt: u32,
        supervisor: ProcessRef,
        adopted: bool,
    },
    Finished {
        task: TaskId,
        attempt: u32,
        exit_ms: u64,
    },
    Failed {
        task: TaskId,
        attempt: u32,
        outcome: String,
        reason: String,
    },
    OomDetected {
        task: TaskId,
        attempt: u32,
        evidence: String,
        peak_mib: Option<u64>,
    },
    Lost {
        task: TaskId,
        attempt: u32,
        reason: String,
    },
    Requeued {
        task: TaskId,
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
        task: TaskId,
        attempt: u32,
        outcome: String,
    },
    Usage {
        task: TaskId,
        attempt: u32,
        peak_mib: u64,
    },
    EstimateFailed {
        task: TaskId,
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
        task: TaskId,
        submitter_uid: u32,
        spec: SpecV2,
    },
    IngestDeferred {
        entries: u64,
    },
    /// Processes of an ended or lost attempt killed by the tick, and any that survive.
    Reaped {
        task: TaskId,
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
        task: TaskId,
        attempt: u32,
        cluster: String,
        job_id: u32,
        node: String,
        shards: Option<u32>,
        shard_mib: u64,
    },
    /// A running attempt's standalone SM utilisation, sampled below saturation.
    SmObserved {
        task: TaskId,
        attempt: u32,
        sm_util: f32,
    },
    Held {
        task: TaskId,
        by_uid: u32,
    },
    Released {
        task: TaskId,
        by_uid: u32,
    },
    Updated {
        task: TaskId,
        by_uid: u32,
        priority: Option<i32>,
        nice: Option<i32>,
        memory_mib: Option<u64>,
        time_limit_ms: Option<u64>,
        gpus: Option<u32>,
    },
    Reserved {
        task: TaskId,
        gpus: Vec<String>,
    },
    Notified {
        task: TaskId,
        channel: String,
        detail: String,
    },
    NotifyFailed {
        task: TaskId,
        channel: String,
        reason: String,
    },
}

/// carma 0.1's task spec (journal format 1). Frozen.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SpecV1 {
    pub name: String,
    pub command: Vec<String>,
    pub workdir: String,
    pub env: Vec<(String, String)>,
    pub gpus: u32,
    pub memory_mib: Option<u64>,
    pub model_summary: Option<String>,
    pub batch_size: Option<u32>,
    pub max_retries: u32,
    pub time_limit_ms: Option<u64>,
    pub dataset: Option<String>,
    pub policy_hint: Option<String>,
    pub reference: ReferenceV1,
}

/// carma 0.2's task spec: environment names, never values.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SpecV2 {
    pub name: String,
    pub command: Vec<String>,
    pub program: Option<String>,
    pub workdir: String,
    pub env_names: Vec<String>,
    pub export: Option<String>,
    pub output: Option<String>,
    pub error: Option<String>,
    pub mig_profile: Option<String>,
    pub gpus: u32,
    pub memory_mib: Option<u64>,
    pub model_summary: Option<String>,
    pub batch_size: Option<u32>,
    pub max_retries: u32,
    pub time_limit_ms: Option<u64>,
    pub dataset: Option<String>,
    pub policy_hint: Option<String>,
    pub reference: ReferenceV1,
    pub dependencies: Vec<DependencyV2>,
    pub keep_on_dependency_failure: bool,
    pub array: Option<ArrayMemberV2>,
    pub priority: i32,
    pub nice: i32,
    pub hold: bool,
    pub notify: Vec<String>,
    pub mail_user: Option<String>,
    pub script: Option<String>,
}

/// One dependency of [`SpecV2`]. Frozen with it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DependencyV2 {
    pub kind: DependencyKindV2,
    pub task: TaskId,
}

/// Frozen with [`SpecV2`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DependencyKindV2 {
    AfterOk,
    AfterAny,
    AfterNotOk,
}

/// Array or sweep membership of [`SpecV2`]. Frozen with it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ArrayMemberV2 {
    pub id: TaskId,
    pub index: u32,
    pub count: u32,
    pub running_max: Option<u32>,
    pub params: Vec<(String, String)>,
}

/// The `.rad` reference figures of [`SpecV1`] and [`SpecV2`]. Frozen.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ReferenceV1 {
    pub oracle: Option<u64>,
    pub horus: Option<u64>,
    pub faketensor: Option<u64>,
    pub gpumemnet: Option<u64>,
}

/// carma 0.1's GPU sample (journal format 1). Frozen.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SampleV1 {
    pub uuid: String,
    pub index: u32,
    pub name: String,
    pub memory_total_mib: u64,
    pub memory_used_mib: u64,
    pub memory_free_mib: u64,
    pub util_gpu_mean: Option<f32>,
    pub util_last_timestamp_us: Option<u64>,
    pub sm_active: Option<f32>,
    pub sm_active_source: SmSourceV1,
    pub sm_occupancy: Option<f32>,
    pub dram_active: Option<f32>,
    pub power_mw: Option<u32>,
    pub energy_mj: Option<u64>,
    pub processes: Vec<ProcessV1>,
    pub mig: MigInfoV1,
    pub unavailable: Vec<String>,
}

/// Frozen with [`SampleV1`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SmSourceV1 {
    Gpm,
    File,
    Simulated,
    Unavailable,
}

/// Frozen with [`SampleV1`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessV1 {
    pub pid: u32,
    pub used_mib: Option<u64>,
}

/// Frozen with [`SampleV1`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigInfoV1 {
    pub enabled: Option<bool>,
    pub instances: Vec<MigInstanceV1>,
}

/// Frozen with [`SampleV1`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigInstanceV1 {
    pub uuid: String,
    pub index: u32,
    pub memory_total_mib: u64,
    pub memory_used_mib: u64,
}

/// carma 0.2's GPU sample: [`SampleV1`] plus driver-reserved memory, health, per-process SM
/// utilisation, MIG profiles and the coarse SM-activity sources.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SampleV2 {
    pub uuid: String,
    pub index: u32,
    pub name: String,
    pub memory_total_mib: u64,
    pub memory_used_mib: u64,
    pub memory_free_mib: u64,
    pub memory_reserved_mib: Option<u64>,
    pub health: HealthV2,
    pub util_gpu_mean: Option<f32>,
    pub util_last_timestamp_us: Option<u64>,
    pub sm_active: Option<f32>,
    pub sm_active_source: SmSourceV2,
    pub sm_occupancy: Option<f32>,
    pub dram_active: Option<f32>,
    pub power_mw: Option<u32>,
    pub energy_mj: Option<u64>,
    pub processes: Vec<ProcessV2>,
    pub mig: MigInfoV2,
    pub unavailable: Vec<String>,
}

/// Frozen with [`SampleV2`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum HealthV2 {
    Healthy,
    Lost { detail: String },
    XidError { xid: u64, detail: String },
    Unreadable { detail: String },
}

/// Frozen with [`SampleV2`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SmSourceV2 {
    Gpm,
    File,
    Simulated,
    Unavailable,
    DeviceUtil,
    ProcessUtil,
}

/// Frozen with [`SampleV2`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProcessV2 {
    pub pid: u32,
    pub used_mib: Option<u64>,
    pub sm_util: Option<f32>,
}

/// Frozen with [`SampleV2`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MigInfoV2 {
    pub enabled: Option<bool>,
    pub instances: Vec<MigInstanceV2>,
}

/// Frozen with [`SampleV2`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MigInstanceV2 {
    pub uuid: String,
    pub index: u32,
    pub profile: Option<String>,
    pub memory_total_mib: u64,
    pub memory_used_mib: u64,
    pub processes: Vec<ProcessV2>,
}

// ---------------------------------------------------------------------------------------
// Domain -> wire (what carma writes: always the newest shape)
// ---------------------------------------------------------------------------------------

/// The wire form of a record.
pub fn to_wire(record: &Record) -> WireRecord {
    WireRecord { time_ms: record.time_ms, event: event_to_wire(&record.event) }
}

fn event_to_wire(event: &Event) -> WireEvent {
    use WireEvent as W;
    match event.clone() {
        Event::Submitted { task, submitter_uid, spec } => {
            W::SubmittedV2 { task, submitter_uid, spec: spec_to_v2(spec) }
        }
        Event::Rejected { task, spool_file, submitter_uid, reason } => {
            W::Rejected { task, spool_file, submitter_uid, reason }
        }
        Event::Cancelled { task, by_uid, reason } => W::Cancelled { task, by_uid, reason },
        Event::Estimated { task, method, mib, upper_mib, explanation } => {
            W::Estimated { task, method, mib, upper_mib, explanation }
        }
        Event::Pending { task, reason } => W::Pending { task, reason },
        Event::Placed { task, attempt, gpus, exclusive, requirement_mib, reason } => {
            W::Placed { task, attempt, gpus, exclusive, requirement_mib, reason }
        }
        Event::Launched { task, attempt, supervisor, adopted } => {
            W::Launched { task, attempt, supervisor, adopted }
        }
        Event::Finished { task, attempt, exit_ms } => W::Finished { task, attempt, exit_ms },
        Event::Failed { task, attempt, outcome, reason } => W::Failed { task, attempt, outcome, reason },
        Event::OomDetected { task, attempt, evidence, peak_mib } => {
            W::OomDetected { task, attempt, evidence, peak_mib }
        }
        Event::Lost { task, attempt, reason } => W::Lost { task, attempt, reason },
        Event::Requeued { task, recovery, requirement_mib, recovery_mode, reason } => {
            W::Requeued { task, recovery, requirement_mib, recovery_mode, reason }
        }
        Event::TickCompleted { ingested, rejected, placed, duration_us, rr_cursor } => {
            W::TickCompleted { ingested, rejected, placed, duration_us, rr_cursor }
        }
        Event::MetricSample { sample } => W::MetricSampleV2 { sample: sample_to_v2(sample) },
        Event::GpuDiscovered { uuid, index, name, memory_total_mib } => {
            W::GpuDiscovered { uuid, index, name, memory_total_mib }
        }
        Event::GpuProbeStatus { detail } => W::GpuProbeStatus { detail },
        Event::Stopped { task, attempt, outcome } => W::Stopped { task, attempt, outcome },
        Event::Usage { task, attempt, peak_mib } => W::Usage { task, attempt, peak_mib },
        Event::EstimateFailed { task, reason, summary_stamp } => {
            W::EstimateFailed { task, reason, summary_stamp }
        }
        Event::IngestDeferred { entries } => W::IngestDeferred { entries },
        Event::Reaped { task, attempt, processes, remaining, detail } => {
            W::Reaped { task, attempt, processes, remaining, detail }
        }
        Event::Held { task, by_uid } => W::Held { task, by_uid },
        Event::Released { task, by_uid } => W::Released { task, by_uid },
        Event::Updated { task, by_uid, priority, nice, memory_mib, time_limit_ms, gpus } => {
            W::Updated { task, by_uid, priority, nice, memory_mib, time_limit_ms, gpus }
        }
        Event::Reserved { task, gpus } => W::Reserved { task, gpus },
        Event::Notified { task, channel, detail } => W::Notified { task, channel, detail },
        Event::NotifyFailed { task, channel, reason } => W::NotifyFailed { task, channel, reason },
        Event::GpuHealthChanged { uuid, index, health } => {
            W::GpuHealthChanged { uuid, index, health: health_to_v2(health) }
        }
        Event::SlurmPlaced { task, attempt, cluster, job_id, node, shards, shard_mib } => {
            W::SlurmPlaced { task, attempt, cluster, job_id, node, shards, shard_mib }
        }
        Event::SmObserved { task, attempt, sm_util } => W::SmObserved { task, attempt, sm_util },
    }
}

fn health_to_v2(health: GpuHealth) -> HealthV2 {
    match health {
        GpuHealth::Healthy => HealthV2::Healthy,
        GpuHealth::Lost { detail } => HealthV2::Lost { detail },
        GpuHealth::XidError { xid, detail } => HealthV2::XidError { xid, detail },
        GpuHealth::Unreadable { detail } => HealthV2::Unreadable { detail },
    }
}

fn health_from_v2(health: HealthV2) -> GpuHealth {
    match health {
        HealthV2::Healthy => GpuHealth::Healthy,
        HealthV2::Lost { detail } => GpuHealth::Lost { detail },
        HealthV2::XidError { xid, detail } => GpuHealth::XidError { xid, detail },
        HealthV2::Unreadable { detail } => GpuHealth::Unreadable { detail },
    }
}

fn spec_to_v2(spec: TaskSpec) -> SpecV2 {
    SpecV2 {
        name: spec.name,
        command: spec.command,
        program: spec.program,
        workdir: spec.workdir,
        env_names: spec.env_names,
        export: spec.export,
        output: spec.output,
        error: spec.error,
        mig_profile: spec.mig_profile,
        gpus: spec.gpus,
        memory_mib: spec.memory_mib,
        model_summary: spec.model_summary,
        batch_size: spec.batch_size,
        max_retries: spec.max_retries,
        time_limit_ms: spec.time_limit_ms,
        dataset: spec.dataset,
        policy_hint: spec.policy_hint,
        reference: reference_to_v1(spec.reference),
        dependencies: spec
            .dependencies
            .into_iter()
            .map(|d| DependencyV2 {
                kind: match d.kind {
                    DependencyKind::AfterOk => DependencyKindV2::AfterOk,
                    DependencyKind::AfterAny => DependencyKindV2::AfterAny,
                    DependencyKind::AfterNotOk => DependencyKindV2::AfterNotOk,
                },
                task: d.task,
            })
            .collect(),
        keep_on_dependency_failure: spec.keep_on_dependency_failure,
        array: spec.array.map(|a| ArrayMemberV2 {
            id: a.id,
            index: a.index,
            count: a.count,
            running_max: a.running_max,
            params: a.params,
        }),
        priority: spec.priority,
        nice: spec.nice,
        hold: spec.hold,
        notify: spec.notify,
        mail_user: spec.mail_user,
        script: spec.script,
    }
}

fn reference_to_v1(reference: ReferenceMib) -> ReferenceV1 {
    ReferenceV1 {
        oracle: reference.oracle,
        horus: reference.horus,
        faketensor: reference.faketensor,
        gpumemnet: reference.gpumemnet,
    }
}

fn reference_from_v1(reference: ReferenceV1) -> ReferenceMib {
    ReferenceMib {
        oracle: reference.oracle,
        horus: reference.horus,
        faketensor: reference.faketensor,
        gpumemnet: reference.gpumemnet,
    }
}

fn sample_to_v2(sample: GpuSample) -> SampleV2 {
    SampleV2 {
        uuid: sample.uuid,
        index: sample.index,
        name: sample.name,
        memory_total_mib: sample.memory_total_mib,
        memory_used_mib: sample.memory_used_mib,
        memory_free_mib: sample.memory_free_mib,
        memory_reserved_mib: sample.memory_reserved_mib,
        health: health_to_v2(sample.health),
        util_gpu_mean: sample.util_gpu_mean,
        util_last_timestamp_us: sample.util_last_timestamp_us,
        sm_active: sample.sm_active,
        sm_active_source: match sample.sm_active_source {
            SmSource::Gpm => SmSourceV2::Gpm,
            SmSource::File => SmSourceV2::File,
            SmSource::Simulated => SmSourceV2::Simulated,
            SmSource::Unavailable => SmSourceV2::Unavailable,
            SmSource::DeviceUtil => SmSourceV2::DeviceUtil,
            SmSource::ProcessUtil => SmSourceV2::ProcessUtil,
        },
        sm_occupancy: sample.sm_occupancy,
        dram_active: sample.dram_active,
        power_mw: sample.power_mw,
        energy_mj: sample.energy_mj,
        processes: sample
            .processes
            .into_iter()
            .map(|p| ProcessV2 { pid: p.pid, used_mib: p.used_mib, sm_util: p.sm_util })
            .collect(),
        mig: MigInfoV2 {
            enabled: sample.mig.enabled,
            instances: sample
                .mig
                .instances
                .into_iter()
                .map(|m| MigInstanceV2 {
                    uuid: m.uuid,
                    index: m.index,
                    profile: m.profile,
                    memory_total_mib: m.memory_total_mib,
                    memory_used_mib: m.memory_used_mib,
                    processes: m
                        .processes
                        .into_iter()
                        .map(|p| ProcessV2 { pid: p.pid, used_mib: p.used_mib, sm_util: p.sm_util })
                        .collect(),
                })
                .collect(),
        },
        unavailable: sample.unavailable,
    }
}

// ---------------------------------------------------------------------------------------
// Wire -> domain (every shape ever written)
// ---------------------------------------------------------------------------------------

/// The domain form of a decoded record.
pub fn from_wire(record: WireRecord) -> Record {
    Record { time_ms: record.time_ms, event: event_from_wire(record.event) }
}

fn event_from_wire(event: WireEvent) -> Event {
    use WireEvent as W;
    match event {
        W::Submitted { task, submitter_uid, spec } => {
            Event::Submitted { task, submitter_uid, spec: spec_from_v1(spec) }
        }
        W::Rejected { task, spool_file, submitter_uid, reason } => {
            Event::Rejected { task, spool_file, submitter_uid, reason }
        }
        W::Cancelled { task, by_uid, reason } => Event::Cancelled { task, by_uid, reason },
        W::Estimated { task, method, mib, upper_mib, explanation } => {
            Event::Estimated { task, method, mib, upper_mib, explanation }
        }
        W::Pending { task, reason } => Event::Pending { task, reason },
        W::Placed { task, attempt, gpus, exclusive, requirement_mib, reason } => {
            Event::Placed { task, attempt, gpus, exclusive, requirement_mib, reason }
        }
        W::Launched { task, attempt, supervisor, adopted } => {
            Event::Launched { task, attempt, supervisor, adopted }
        }
        W::Finished { task, attempt, exit_ms } => Event::Finished { task, attempt, exit_ms },
        W::Failed { task, attempt, outcome, reason } => Event::Failed { task, attempt, outcome, reason },
        W::OomDetected { task, attempt, evidence, peak_mib } => {
            Event::OomDetected { task, attempt, evidence, peak_mib }
        }
        W::Lost { task, attempt, reason } => Event::Lost { task, attempt, reason },
        W::Requeued { task, recovery, requirement_mib, recovery_mode, reason } => {
            Event::Requeued { task, recovery, requirement_mib, recovery_mode, reason }
        }
        W::TickCompleted { ingested, rejected, placed, duration_us, rr_cursor } => {
            Event::TickCompleted { ingested, rejected, placed, duration_us, rr_cursor }
        }
        W::MetricSample { sample } => Event::MetricSample { sample: sample_from_v1(sample) },
        W::GpuDiscovered { uuid, index, name, memory_total_mib } => {
            Event::GpuDiscovered { uuid, index, name, memory_total_mib }
        }
        W::GpuProbeStatus { detail } => Event::GpuProbeStatus { detail },
        W::Stopped { task, attempt, outcome } => Event::Stopped { task, attempt, outcome },
        W::Usage { task, attempt, peak_mib } => Event::Usage { task, attempt, peak_mib },
        W::EstimateFailed { task, reason, summary_stamp } => {
            Event::EstimateFailed { task, reason, summary_stamp }
        }
        W::MetricSampleV2 { sample } => Event::MetricSample { sample: sample_from_v2(sample) },
        W::SubmittedV2 { task, submitter_uid, spec } => {
            Event::Submitted { task, submitter_uid, spec: spec_from_v2(spec) }
        }
        W::IngestDeferred { entries } => Event::IngestDeferred { entries },
        W::Reaped { task, attempt, processes, remaining, detail } => {
            Event::Reaped { task, attempt, processes, remaining, detail }
        }
        W::GpuHealthChanged { uuid, index, health } => {
            Event::GpuHealthChanged { uuid, index, health: health_from_v2(health) }
        }
        W::SlurmPlaced { task, attempt, cluster, job_id, node, shards, shard_mib } => {
            Event::SlurmPlaced { task, attempt, cluster, job_id, node, shards, shard_mib }
        }
        W::SmObserved { task, attempt, sm_util } => Event::SmObserved { task, attempt, sm_util },
        W::Held { task, by_uid } => Event::Held { task, by_uid },
        W::Released { task, by_uid } => Event::Released { task, by_uid },
        W::Updated { task, by_uid, priority, nice, memory_mib, time_limit_ms, gpus } => {
            Event::Updated { task, by_uid, priority, nice, memory_mib, time_limit_ms, gpus }
        }
        W::Reserved { task, gpus } => Event::Reserved { task, gpus },
        W::Notified { task, channel, detail } => Event::Notified { task, channel, detail },
        W::NotifyFailed { task, channel, reason } => Event::NotifyFailed { task, channel, reason },
    }
}

/// carma 0.1's spec, without its environment values: the journal's readers must not see
/// them. The tick takes them from the record itself when it launches such a task
/// ([`legacy_env`]).
fn spec_from_v1(spec: SpecV1) -> TaskSpec {
    TaskSpec {
        name: spec.name,
        command: spec.command,
        program: None,
        workdir: spec.workdir,
        env_names: spec.env.into_iter().map(|(name, _)| name).collect(),
        export: None,
        output: None,
        error: None,
        mig_profile: None,
        gpus: spec.gpus,
        memory_mib: spec.memory_mib,
        model_summary: spec.model_summary,
        batch_size: spec.batch_size,
        max_retries: spec.max_retries,
        time_limit_ms: spec.time_limit_ms,
        dataset: spec.dataset,
        policy_hint: spec.policy_hint,
        reference: reference_from_v1(spec.reference),
        // carma 0.1 had no workflow fields.
        dependencies: Vec::new(),
        keep_on_dependency_failure: false,
        array: None,
        priority: 0,
        nice: 0,
        hold: false,
        notify: Vec::new(),
        mail_user: None,
        script: None,
    }
}

fn spec_from_v2(spec: SpecV2) -> TaskSpec {
    TaskSpec {
        name: spec.name,
        command: spec.command,
        program: spec.program,
        workdir: spec.workdir,
        env_names: spec.env_names,
        export: spec.export,
        output: spec.output,
        error: spec.error,
        mig_profile: spec.mig_profile,
        gpus: spec.gpus,
        memory_mib: spec.memory_mib,
        model_summary: spec.model_summary,
        batch_size: spec.batch_size,
        max_retries: spec.max_retries,
        time_limit_ms: spec.time_limit_ms,
        dataset: spec.dataset,
        policy_hint: spec.policy_hint,
        reference: reference_from_v1(spec.reference),
        dependencies: spec
            .dependencies
            .into_iter()
            .map(|d| Dependency {
                kind: match d.kind {
                    DependencyKindV2::AfterOk => DependencyKind::AfterOk,
                    DependencyKindV2::AfterAny => DependencyKind::AfterAny,
                    DependencyKindV2::AfterNotOk => DependencyKind::AfterNotOk,
                },
                task: d.task,
            })
            .collect(),
        keep_on_dependency_failure: spec.keep_on_dependency_failure,
        array: spec.array.map(|a| ArrayMember {
            id: a.id,
            index: a.index,
            count: a.count,
            running_max: a.running_max,
            params: a.params,
        }),
        priority: spec.priority,
        nice: spec.nice,
        hold: spec.hold,
        notify: spec.notify,
        mail_user: spec.mail_user,
        script: spec.script,
    }
}

/// The environment values of a task submitted by carma 0.1, from its Submitted record's
/// payload (`None` for any other record): only the tick, which may read the journal, uses it.
pub fn legacy_env(wire: &WireRecord) -> Option<Vec<(String, String)>> {
    match &wire.event {
        WireEvent::Submitted { spec, .. } => Some(spec.env.clone()),
        _ => None,
    }
}

fn sample_from_v1(sample: SampleV1) -> GpuSample {
    GpuSample {
        uuid: sample.uuid,
        index: sample.index,
        name: sample.name,
        memory_total_mib: sample.memory_total_mib,
        memory_used_mib: sample.memory_used_mib,
        memory_free_mib: sample.memory_free_mib,
        // 0.1 did not read the v2 memory call: the reservation is unknown.
        memory_reserved_mib: None,
        health: GpuHealth::Healthy,
        util_gpu_mean: sample.util_gpu_mean,
        util_last_timestamp_us: sample.util_last_timestamp_us,
        sm_active: sample.sm_active,
        sm_active_source: match sample.sm_active_source {
            SmSourceV1::Gpm => SmSource::Gpm,
            SmSourceV1::File => SmSource::File,
            SmSourceV1::Simulated => SmSource::Simulated,
            SmSourceV1::Unavailable => SmSource::Unavailable,
        },
        sm_occupancy: sample.sm_occupancy,
        dram_active: sample.dram_active,
        power_mw: sample.power_mw,
        energy_mj: sample.energy_mj,
        processes: sample
            .processes
            .into_iter()
            .map(|p| GpuProcess { pid: p.pid, used_mib: p.used_mib, sm_util: None })
            .collect(),
        mig: MigInfo {
            enabled: sample.mig.enabled,
            instances: sample
                .mig
                .instances
                .into_iter()
                .map(|m| MigInstance {
                    uuid: m.uuid,
                    index: m.index,
                    profile: None,
                    memory_total_mib: m.memory_total_mib,
                    memory_used_mib: m.memory_used_mib,
                    processes: Vec::new(),
                })
                .collect(),
        },
        unavailable: sample.unavailable,
    }
}

fn sample_from_v2(sample: SampleV2) -> GpuSample {
    GpuSample {
        uuid: sample.uuid,
        index: sample.index,
        name: sample.name,
        memory_total_mib: sample.memory_total_mib,
        memory_used_mib: sample.memory_used_mib,
        memory_free_mib: sample.memory_free_mib,
        memory_reserved_mib: sample.memory_reserved_mib,
        health: health_from_v2(sample.health),
        util_gpu_mean: sample.util_gpu_mean,
        util_last_timestamp_us: sample.util_last_timestamp_us,
        sm_active: sample.sm_active,
        sm_active_source: match sample.sm_active_source {
            SmSourceV2::Gpm => SmSource::Gpm,
            SmSourceV2::File => SmSource::File,
            SmSourceV2::Simulated => SmSource::Simulated,
            SmSourceV2::Unavailable => SmSource::Unavailable,
            SmSourceV2::DeviceUtil => SmSource::DeviceUtil,
            SmSourceV2::ProcessUtil => SmSource::ProcessUtil,
        },
        sm_occupancy: sample.sm_occupancy,
        dram_active: sample.dram_active,
        power_mw: sample.power_mw,
        energy_mj: sample.energy_mj,
        processes: sample
            .processes
            .into_iter()
            .map(|p| GpuProcess { pid: p.pid, used_mib: p.used_mib, sm_util: p.sm_util })
            .collect(),
        mig: MigInfo {
            enabled: sample.mig.enabled,
            instances: sample
                .mig
                .instances
                .into_iter()
                .map(|m| MigInstance {
                    uuid: m.uuid,
                    index: m.index,
                    profile: m.profile,
                    memory_total_mib: m.memory_total_mib,
                    memory_used_mib: m.memory_used_mib,
                    processes: m
                        .processes
                        .into_iter()
                        .map(|p| GpuProcess { pid: p.pid, used_mib: p.used_mib, sm_util: p.sm_util })
                        .collect(),
                })
                .collect(),
        },
        unavailable: sample.unavailable,
    }
}
