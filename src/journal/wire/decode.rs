//! Wire -> domain: every shape ever written.

use super::*;
use crate::gpu::{GpuHealth, GpuProcess, GpuSample, MigInfo, MigInstance, SmSource};
use crate::id::TaskId;
use crate::journal::event::{Event, ProcessRef, Record, RequeueMode};
use crate::spec::time_limit::TimeLimitSource;
use crate::spec::{ArrayMember, Dependency, DependencyKind, ReferenceMib, TaskSpec};

/// The domain form of a decoded record.
pub fn from_wire(record: WireRecord) -> Record {
    Record { time_ms: record.time_ms, event: event_from_wire(record.event) }
}

// Long on purpose: one arm per wire variant, ever, so the compiler checks every shape
// ever written has a reader.
fn event_from_wire(event: WireEvent) -> Event {
    use WireEvent as W;
    match event {
        W::Submitted { task, submitter_uid, spec } => {
            Event::Submitted { task: task.into(), submitter_uid, spec: spec_from_v1(spec) }
        }
        W::Rejected { task, spool_file, submitter_uid, reason } => {
            Event::Rejected { task: task.map(Into::into), spool_file, submitter_uid, reason }
        }
        W::Cancelled { task, by_uid, reason } => Event::Cancelled { task: task.into(), by_uid, reason },
        W::Estimated { task, method, mib, upper_mib, explanation } => {
            Event::Estimated { task: task.into(), method, mib, upper_mib, explanation }
        }
        W::Pending { task, reason } => Event::Pending { task: task.into(), reason },
        W::Placed { task, attempt, gpus, exclusive, requirement_mib, reason } => {
            Event::Placed { task: task.into(), attempt, gpus, exclusive, requirement_mib, reason }
        }
        W::Launched { task, attempt, supervisor, adopted } => {
            Event::Launched { task: task.into(), attempt, supervisor: supervisor.into(), adopted }
        }
        W::Finished { task, attempt, exit_ms } => Event::Finished { task: task.into(), attempt, exit_ms },
        W::Failed { task, attempt, outcome, reason } => {
            Event::Failed { task: task.into(), attempt, outcome, reason }
        }
        W::OomDetected { task, attempt, evidence, peak_mib } => {
            Event::OomDetected { task: task.into(), attempt, evidence, peak_mib }
        }
        W::Lost { task, attempt, reason } => Event::Lost { task: task.into(), attempt, reason },
        W::Requeued { task, recovery, requirement_mib, recovery_mode, reason } => {
            let recovery_mode = RequeueMode::from_word(&recovery_mode);
            Event::Requeued { task: task.into(), recovery, requirement_mib, recovery_mode, reason }
        }
        W::TickCompleted { ingested, rejected, placed, duration_us, rr_cursor } => {
            Event::TickCompleted { ingested, rejected, placed, duration_us, rr_cursor }
        }
        W::MetricSample { sample } => Event::MetricSample { sample: sample_from_v1(sample) },
        W::GpuDiscovered { uuid, index, name, memory_total_mib } => {
            Event::GpuDiscovered { uuid, index, name, memory_total_mib }
        }
        W::GpuProbeStatus { detail } => Event::GpuProbeStatus { detail },
        W::Stopped { task, attempt, outcome } => Event::Stopped { task: task.into(), attempt, outcome },
        W::Usage { task, attempt, peak_mib } => Event::Usage { task: task.into(), attempt, peak_mib },
        W::EstimateFailed { task, reason, summary_stamp } => {
            Event::EstimateFailed { task: task.into(), reason, summary_stamp }
        }
        W::MetricSampleV2 { sample } => Event::MetricSample { sample: sample_from_v2(sample) },
        W::SubmittedV2 { task, submitter_uid, spec } => {
            Event::Submitted { task: task.into(), submitter_uid, spec: spec_from_v2(spec) }
        }
        W::SubmittedV3 { task, submitter_uid, spec, timing } => {
            let spec = TaskSpec { signal: timing.signal, begin_ms: timing.begin_ms, ..spec_from_v2(spec) };
            Event::Submitted { task: task.into(), submitter_uid, spec }
        }
        W::SubmittedV4 { task, submitter_uid, spec, timing, mail } => {
            // Canonical text as carma wrote it; a name a later carma added reads as none.
            let mail_types = crate::spec::mail::MailTypes::parse(&mail.types).unwrap_or_default();
            let spec = TaskSpec {
                signal: timing.signal,
                begin_ms: timing.begin_ms,
                mail_types,
                ..spec_from_v2(spec)
            };
            Event::Submitted { task: task.into(), submitter_uid, spec }
        }
        W::SubmittedV5 { task, submitter_uid, spec, timing, mail, extras } => {
            let spec = spec_from_v5(spec, timing, mail, extras);
            Event::Submitted { task: task.into(), submitter_uid, spec }
        }
        W::SubmittedV6 { task, submitter_uid, spec, timing, mail, extras, limits } => {
            let source = limits.time_limit_source.map(source_from_v6);
            let spec = TaskSpec { time_limit_source: source, ..spec_from_v5(spec, timing, mail, extras) };
            Event::Submitted { task: task.into(), submitter_uid, spec }
        }
        W::Preempted { task, attempt, by, reason, lost_ms } => {
            Event::Preempted { task: task.into(), attempt, by: by.into(), reason, lost_ms }
        }
        W::Checkpointed { task, attempt } => Event::Checkpointed { task: task.into(), attempt },
        W::RequeueRequested { task, by_uid } => Event::RequeueRequested { task: task.into(), by_uid },
        W::ReservationCreated { name, start_ms, end_ms, users, gpu_count, gpus, by_uid } => {
            Event::ReservationCreated { name, start_ms, end_ms, users, gpu_count, gpus, by_uid }
        }
        W::ReservationDeleted { name, by_uid } => Event::ReservationDeleted { name, by_uid },
        W::Suspended { task, attempt, by } => Event::Suspended { task: task.into(), attempt, by: by.into() },
        W::Resumed { task, attempt } => Event::Resumed { task: task.into(), attempt },
        W::PreemptionWithdrawn { task, attempt, reason } => {
            Event::PreemptionWithdrawn { task: task.into(), attempt, reason }
        }
        W::SuspensionEnded { task, attempt, reason } => {
            Event::SuspensionEnded { task: task.into(), attempt, reason }
        }
        W::MemoryExceeded { task, attempt, gpu, used_mib, declared_mib, reason } => {
            Event::MemoryExceeded { task: task.into(), attempt, gpu, used_mib, declared_mib, reason }
        }
        W::IngestDeferred { entries } => Event::IngestDeferred { entries },
        W::Reaped { task, attempt, processes, remaining, detail } => {
            Event::Reaped { task: task.into(), attempt, processes, remaining, detail }
        }
        W::GpuHealthChanged { uuid, index, health } => {
            Event::GpuHealthChanged { uuid, index, health: health_from_v2(health) }
        }
        W::SlurmPlaced { task, attempt, cluster, job_id, node, shards, shard_mib } => {
            Event::SlurmPlaced { task: task.into(), attempt, cluster, job_id, node, shards, shard_mib }
        }
        W::SmObserved { task, attempt, sm_util } => Event::SmObserved { task: task.into(), attempt, sm_util },
        W::Held { task, by_uid } => Event::Held { task: task.into(), by_uid },
        W::Released { task, by_uid } => Event::Released { task: task.into(), by_uid },
        W::Updated { task, by_uid, priority, nice, memory_mib, time_limit_ms, gpus } => {
            Event::Updated { task: task.into(), by_uid, priority, nice, memory_mib, time_limit_ms, gpus }
        }
        W::Reserved { task, gpus } => Event::Reserved { task: task.into(), gpus },
        // Before 0.4 every notice was sent at the end.
        W::Notified { task, channel, detail } => {
            Event::Notified { task: task.into(), channel, notice: "END".into(), detail }
        }
        W::NotifyFailed { task, channel, reason } => {
            Event::NotifyFailed { task: task.into(), channel, notice: "END".into(), reason }
        }
        W::NotifiedV4 { task, channel, notice, detail } => {
            Event::Notified { task: task.into(), channel, notice, detail }
        }
        W::NotifyFailedV4 { task, channel, notice, reason } => {
            Event::NotifyFailed { task: task.into(), channel, notice, reason }
        }
    }
}

/// A spec in the 0.5 parts (`SubmittedV5`, and `SubmittedV6` before its own part).
fn spec_from_v5(spec: SpecV2, timing: TimingV3, mail: MailV4, extras: ExtrasV5) -> TaskSpec {
    // Canonical text as carma wrote it; a name a later carma added reads as none.
    let mail_types = crate::spec::mail::MailTypes::parse(&mail.types).unwrap_or_default();
    TaskSpec {
        signal: timing.signal,
        begin_ms: timing.begin_ms,
        mail_types,
        host_mem_mib: extras.host_mem_mib,
        cpus: extras.cpus,
        requeue: extras.requeue,
        reservation: extras.reservation,
        interactive: extras.interactive,
        ..spec_from_v2(spec)
    }
}

fn source_from_v6(source: TimeLimitSourceV6) -> TimeLimitSource {
    match source {
        TimeLimitSourceV6::Task => TimeLimitSource::Task,
        TimeLimitSourceV6::QueueDefault => TimeLimitSource::QueueDefault,
        TimeLimitSourceV6::QueueMax => TimeLimitSource::QueueMax,
        TimeLimitSourceV6::QueueUnlimited => TimeLimitSource::QueueUnlimited,
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
        time_limit_source: None,
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
        signal: None,
        begin_ms: None,
        mail_types: Default::default(),
        host_mem_mib: None,
        cpus: None,
        requeue: None,
        reservation: None,
        interactive: None,
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
        time_limit_source: None,
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
                task: d.task.into(),
            })
            .collect(),
        keep_on_dependency_failure: spec.keep_on_dependency_failure,
        array: spec.array.map(|a| ArrayMember {
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
        signal: None,
        begin_ms: None,
        mail_types: Default::default(),
        host_mem_mib: None,
        cpus: None,
        requeue: None,
        reservation: None,
        interactive: None,
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

impl From<TaskIdV1> for TaskId {
    fn from(task: TaskIdV1) -> TaskId {
        TaskId::from_stored(task.0)
    }
}

impl From<ProcessRefV1> for ProcessRef {
    fn from(p: ProcessRefV1) -> ProcessRef {
        ProcessRef { pid: p.pid, start_time_ticks: p.start_time_ticks, boot_id: p.boot_id }
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

fn reference_from_v1(reference: ReferenceV1) -> ReferenceMib {
    ReferenceMib {
        oracle: reference.oracle,
        horus: reference.horus,
        faketensor: reference.faketensor,
        gpumemnet: reference.gpumemnet,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::RecoveryMode;

    #[test]
    fn a_requeue_mode_is_parsed_once_and_an_unknown_one_is_exclusive() {
        assert_eq!(RequeueMode::from_word(""), RequeueMode::Main, "a main-queue retry");
        assert_eq!(RequeueMode::from_word("user"), RequeueMode::User);
        assert_eq!(RequeueMode::from_word("looser"), RequeueMode::Recovery(RecoveryMode::Looser));
        assert_eq!(RequeueMode::from_word("exclusive"), RequeueMode::Recovery(RecoveryMode::Exclusive));
        assert_eq!(RequeueMode::from_word("alone"), RequeueMode::Recovery(RecoveryMode::Exclusive));
        for mode in [RequeueMode::Main, RequeueMode::User, RequeueMode::Recovery(RecoveryMode::Looser)] {
            assert_eq!(RequeueMode::from_word(mode.word()), mode, "the word reads back");
        }
    }
}
