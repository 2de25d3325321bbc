//! Domain -> wire: what carma writes, always the newest shape.

use super::*;
use crate::gpu::{GpuHealth, GpuSample, SmSource};
use crate::id::TaskId;
use crate::journal::event::{Event, ProcessRef, Record};
use crate::spec::time_limit::TimeLimitSource;
use crate::spec::{DependencyKind, ReferenceMib, TaskSpec};

/// The wire form of a record.
pub fn to_wire(record: &Record) -> WireRecord {
    WireRecord { time_ms: record.time_ms, event: event_to_wire(&record.event) }
}

// Long on purpose: one arm per domain event, each naming the wire variant it is written as
// today, so a new event does not compile until it has its frozen shape.
fn event_to_wire(event: &Event) -> WireEvent {
    use WireEvent as W;
    match event.clone() {
        Event::Submitted { task, submitter_uid, spec } => {
            let timing = TimingV3 { signal: spec.signal.clone(), begin_ms: spec.begin_ms };
            let mail = MailV4 { types: spec.mail_types.render() };
            let extras = ExtrasV5 {
                host_mem_mib: spec.host_mem_mib,
                cpus: spec.cpus,
                requeue: spec.requeue,
                reservation: spec.reservation.clone(),
                interactive: spec.interactive.clone(),
            };
            let limits = LimitsV6 { time_limit_source: spec.time_limit_source.map(source_to_v6) };
            W::SubmittedV6 {
                task: task.into(),
                submitter_uid,
                spec: spec_to_v2(spec),
                timing,
                mail,
                extras,
                limits,
            }
        }
        Event::Preempted { task, attempt, by, reason, lost_ms } => {
            W::Preempted { task: task.into(), attempt, by: by.into(), reason, lost_ms }
        }
        Event::Checkpointed { task, attempt } => W::Checkpointed { task: task.into(), attempt },
        Event::RequeueRequested { task, by_uid } => W::RequeueRequested { task: task.into(), by_uid },
        Event::ReservationCreated { name, start_ms, end_ms, users, gpu_count, gpus, by_uid } => {
            W::ReservationCreated { name, start_ms, end_ms, users, gpu_count, gpus, by_uid }
        }
        Event::ReservationDeleted { name, by_uid } => W::ReservationDeleted { name, by_uid },
        Event::Suspended { task, attempt, by } => W::Suspended { task: task.into(), attempt, by: by.into() },
        Event::Resumed { task, attempt } => W::Resumed { task: task.into(), attempt },
        Event::PreemptionWithdrawn { task, attempt, reason } => {
            W::PreemptionWithdrawn { task: task.into(), attempt, reason }
        }
        Event::SuspensionEnded { task, attempt, reason } => {
            W::SuspensionEnded { task: task.into(), attempt, reason }
        }
        Event::MemoryExceeded { task, attempt, gpu, used_mib, declared_mib, reason } => {
            W::MemoryExceeded { task: task.into(), attempt, gpu, used_mib, declared_mib, reason }
        }
        Event::Rejected { task, spool_file, submitter_uid, reason } => {
            W::Rejected { task: task.map(Into::into), spool_file, submitter_uid, reason }
        }
        Event::Cancelled { task, by_uid, reason } => W::Cancelled { task: task.into(), by_uid, reason },
        Event::Estimated { task, method, mib, upper_mib, explanation } => {
            W::Estimated { task: task.into(), method, mib, upper_mib, explanation }
        }
        Event::Pending { task, reason } => W::Pending { task: task.into(), reason },
        Event::Placed { task, attempt, gpus, exclusive, requirement_mib, reason } => {
            W::Placed { task: task.into(), attempt, gpus, exclusive, requirement_mib, reason }
        }
        Event::Launched { task, attempt, supervisor, adopted } => {
            W::Launched { task: task.into(), attempt, supervisor: supervisor.into(), adopted }
        }
        Event::Finished { task, attempt, exit_ms } => W::Finished { task: task.into(), attempt, exit_ms },
        Event::Failed { task, attempt, outcome, reason } => {
            W::Failed { task: task.into(), attempt, outcome, reason }
        }
        Event::OomDetected { task, attempt, evidence, peak_mib } => {
            W::OomDetected { task: task.into(), attempt, evidence, peak_mib }
        }
        Event::Lost { task, attempt, reason } => W::Lost { task: task.into(), attempt, reason },
        Event::Requeued { task, recovery, requirement_mib, recovery_mode, reason } => {
            let recovery_mode = recovery_mode.word().to_string();
            W::Requeued { task: task.into(), recovery, requirement_mib, recovery_mode, reason }
        }
        Event::TickCompleted { ingested, rejected, placed, duration_us, rr_cursor } => {
            W::TickCompleted { ingested, rejected, placed, duration_us, rr_cursor }
        }
        Event::MetricSample { sample } => W::MetricSampleV2 { sample: sample_to_v2(sample) },
        Event::GpuDiscovered { uuid, index, name, memory_total_mib } => {
            W::GpuDiscovered { uuid, index, name, memory_total_mib }
        }
        Event::GpuProbeStatus { detail } => W::GpuProbeStatus { detail },
        Event::Stopped { task, attempt, outcome } => W::Stopped { task: task.into(), attempt, outcome },
        Event::Usage { task, attempt, peak_mib } => W::Usage { task: task.into(), attempt, peak_mib },
        Event::EstimateFailed { task, reason, summary_stamp } => {
            W::EstimateFailed { task: task.into(), reason, summary_stamp }
        }
        Event::IngestDeferred { entries } => W::IngestDeferred { entries },
        Event::Reaped { task, attempt, processes, remaining, detail } => {
            W::Reaped { task: task.into(), attempt, processes, remaining, detail }
        }
        Event::Held { task, by_uid } => W::Held { task: task.into(), by_uid },
        Event::Released { task, by_uid } => W::Released { task: task.into(), by_uid },
        Event::Updated { task, by_uid, priority, nice, memory_mib, time_limit_ms, gpus } => {
            W::Updated { task: task.into(), by_uid, priority, nice, memory_mib, time_limit_ms, gpus }
        }
        Event::Reserved { task, gpus } => W::Reserved { task: task.into(), gpus },
        Event::Notified { task, channel, notice, detail } => {
            W::NotifiedV4 { task: task.into(), channel, notice, detail }
        }
        Event::NotifyFailed { task, channel, notice, reason } => {
            W::NotifyFailedV4 { task: task.into(), channel, notice, reason }
        }
        Event::GpuHealthChanged { uuid, index, health } => {
            W::GpuHealthChanged { uuid, index, health: health_to_v2(health) }
        }
        Event::SlurmPlaced { task, attempt, cluster, job_id, node, shards, shard_mib } => {
            W::SlurmPlaced { task: task.into(), attempt, cluster, job_id, node, shards, shard_mib }
        }
        Event::SmObserved { task, attempt, sm_util } => W::SmObserved { task: task.into(), attempt, sm_util },
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
                task: d.task.into(),
            })
            .collect(),
        keep_on_dependency_failure: spec.keep_on_dependency_failure,
        array: spec.array.map(|a| ArrayMemberV2 {
            id: a.id.into(),
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

impl From<TaskId> for TaskIdV1 {
    fn from(task: TaskId) -> TaskIdV1 {
        TaskIdV1(task.into_string())
    }
}

impl From<ProcessRef> for ProcessRefV1 {
    fn from(p: ProcessRef) -> ProcessRefV1 {
        ProcessRefV1 { pid: p.pid, start_time_ticks: p.start_time_ticks, boot_id: p.boot_id }
    }
}

fn source_to_v6(source: TimeLimitSource) -> TimeLimitSourceV6 {
    match source {
        TimeLimitSource::Task => TimeLimitSourceV6::Task,
        TimeLimitSource::QueueDefault => TimeLimitSourceV6::QueueDefault,
        TimeLimitSource::QueueMax => TimeLimitSourceV6::QueueMax,
        TimeLimitSource::QueueUnlimited => TimeLimitSourceV6::QueueUnlimited,
    }
}
