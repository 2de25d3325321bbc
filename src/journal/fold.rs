//! The fold: how one record changes the State. Total and deterministic; records that no longer
//! fit (a crash between two commits can leave one) are ignored, and `Applied` says so.

use super::event::{Event, Record};
use super::state::{
    Attempt, End, EstimateFailure, EstimateRecord, ExceededMemory, GPU_HISTORY_MAX, GPU_HISTORY_MS, GpuPoint,
    GpuState, Phase, Preemption, REJECTIONS_KEPT, Rejection, Reservation, SlurmRef, State, Task,
    WORKLOADS_MAX, WorkloadHistory, survivors_reason,
};
use crate::gpu::GpuSample;

/// What [`State::apply`] did with a record. Replaying a journal tolerates records that no
/// longer fit (a crash between two commits can leave one), but a writer never writes one:
/// `Journal::append` debug-asserts `Yes` for every record it commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// The record changed the State.
    Yes,
    /// The record changed nothing, and why.
    Ignored(&'static str),
}

impl Applied {
    fn from_changed(changed: bool, why: &'static str) -> Applied {
        if changed { Applied::Yes } else { Applied::Ignored(why) }
    }
}

impl State {
    /// Folds one record. Records must come in seq order; out-of-place ones are ignored, and
    /// the answer says so.
    // Long on purpose: the match over events that create a task or touch no single task (the
    // Submitted arm builds a whole Task field by field); the rest goes to `apply_task_event`.
    pub fn apply(&mut self, seq: u64, record: &Record) -> Applied {
        debug_assert!(seq > self.last_seq, "fold out of order: {seq} after {}", self.last_seq);
        self.last_seq = seq;
        let time = record.time_ms;
        match &record.event {
            Event::Submitted { task, .. } if self.tasks.contains_key(task) => {
                return Applied::Ignored("a second Submitted for a task already known");
            }
            Event::Submitted { task, submitter_uid, spec } => {
                if let Some(array) = &spec.array {
                    self.array_owners.entry(array.id.clone()).or_insert(*submitter_uid);
                }
                self.tasks.entry(task.clone()).or_insert_with(|| Task {
                    id: task.clone(),
                    submit_seq: seq,
                    // The id carries the moment `carma submit` ran; the record's time is
                    // when a tick ingested it, up to one tick later.
                    submitted_ms: task.unix_ms().min(time),
                    submitter_uid: *submitter_uid,
                    spec: spec.clone(),
                    phase: Phase::submitted(spec.hold),
                    attempts: Vec::new(),
                    estimate: None,
                    estimate_failure: None,
                    recovery_requirement_mib: None,
                    oom_count: 0,
                    lost_count: 0,
                    requeue_count: 0,
                    slurm: None,
                });
            }
            Event::Rejected { task, spool_file, submitter_uid, reason } => {
                if let Some(id) = task {
                    self.rejected_ids.insert(id.clone());
                }
                self.rejections.push(Rejection {
                    seq,
                    time_ms: time,
                    task: task.clone(),
                    spool_file: spool_file.clone(),
                    submitter_uid: *submitter_uid,
                    reason: reason.clone(),
                });
                if self.rejections.len() > REJECTIONS_KEPT {
                    self.rejections.remove(0);
                }
            }
            Event::TickCompleted { rr_cursor, .. } => {
                self.rr_cursor = *rr_cursor;
                self.last_tick_ms = Some(time);
                self.ticks += 1;
            }
            Event::MetricSample { sample } => return self.apply_sample(time, sample),
            Event::GpuDiscovered { uuid, index, name, memory_total_mib } => {
                let gpu = self.gpus.entry(uuid.clone()).or_insert_with(|| GpuState {
                    uuid: uuid.clone(),
                    index: *index,
                    name: name.clone(),
                    memory_total_mib: *memory_total_mib,
                    last: None,
                    last_ms: 0,
                    history: Vec::new(),
                    running: Vec::new(),
                });
                gpu.index = *index;
                gpu.name = name.clone();
                gpu.memory_total_mib = *memory_total_mib;
            }
            Event::GpuProbeStatus { detail } => {
                self.gpu_probe_error = (!detail.is_empty()).then(|| detail.clone());
            }
            Event::Reserved { task, gpus } => {
                self.reservation = Some(Reservation { task: task.clone(), gpus: gpus.clone() });
            }
            Event::Notified { task, notice, .. } | Event::NotifyFailed { task, notice, .. } => {
                self.settle_notice(task, notice);
            }
            // Records for people: the State keeps GPU health from the samples themselves.
            Event::IngestDeferred { .. } | Event::GpuHealthChanged { .. } => {}
            Event::ReservationCreated { .. } | Event::ReservationDeleted { .. } => {
                return super::reservations::fold(&mut self.gpu_reservations, time, &record.event);
            }
            event => return self.apply_task_event(seq, time, event),
        }
        Applied::Yes
    }

    fn apply_sample(&mut self, time: u64, sample: &GpuSample) -> Applied {
        self.attribute_energy(sample);
        let Some(gpu) = self.gpus.get_mut(&sample.uuid) else {
            return Applied::Ignored("a sample of a GPU never discovered");
        };
        gpu.history.push(GpuPoint {
            time_ms: time,
            memory_total_mib: sample.memory_total_mib,
            memory_free_mib: sample.memory_free_mib,
            memory_reserved_mib: sample.memory_reserved_mib,
            sm_active: sample.sm_active,
            sm_active_source: sample.sm_active_source,
            util_gpu: sample.util_gpu_mean,
            sm_occupancy: sample.sm_occupancy,
            dram_active: sample.dram_active,
        });
        let oldest_kept = time.saturating_sub(GPU_HISTORY_MS);
        let stale = gpu.history.iter().take_while(|p| p.time_ms < oldest_kept).count();
        let excess = gpu.history.len().saturating_sub(GPU_HISTORY_MAX);
        gpu.history.drain(..stale.max(excess));
        gpu.last = Some(sample.clone());
        gpu.last_ms = time;
        Applied::Yes
    }

    /// Folds an event about one task, and marks the task due for a notice when the event ended
    /// a task that asked to be told when it ends.
    fn apply_task_event(&mut self, seq: u64, time: u64, event: &Event) -> Applied {
        let Some(before) = event.task().and_then(|id| self.tasks.get(id)).map(super::notices::Before::of)
        else {
            return Applied::Ignored("no such task");
        };
        let applied = self.fold_task_event(seq, time, event);
        self.queue_notices(before, event, applied == Applied::Yes);
        self.note_running(event, applied == Applied::Yes);
        applied
    }

    /// Folds an event about one task. Records that do not fit the task's state (a Placed for
    /// a task already placed, an Updated for one that runs) are ignored, with the reason.
    // One arm per event kind, each short; splitting the match would scatter the fold.
    fn fold_task_event(&mut self, _seq: u64, time: u64, event: &Event) -> Applied {
        let Some(task) = event.task().and_then(|id| self.tasks.get_mut(id)) else {
            return Applied::Ignored("no such task");
        };
        match event {
            Event::Cancelled { reason, .. } => {
                let ended = task.phase.finish(End::Cancelled { reason: reason.clone() }, time);
                return Applied::from_changed(ended, "Cancelled for a task already ended");
            }
            Event::Estimated { method, mib, upper_mib, explanation, .. } => {
                task.estimate = Some(EstimateRecord {
                    method: method.clone(),
                    mib: *mib,
                    upper_mib: *upper_mib,
                    explanation: explanation.clone(),
                });
                task.estimate_failure = None;
            }
            Event::EstimateFailed { reason, summary_stamp, .. } => {
                task.estimate_failure =
                    Some(EstimateFailure { reason: reason.clone(), summary_stamp: *summary_stamp });
            }
            Event::Pending { reason, .. } => {
                let Phase::Waiting { reason: waits_for, .. } = &mut task.phase else {
                    return Applied::Ignored("Pending for a task that is not waiting");
                };
                *waits_for = Some(reason.clone());
            }
            Event::Placed { attempt, gpus, exclusive, requirement_mib, reason, .. } => {
                if !matches!(task.phase, Phase::Waiting { .. }) {
                    return Applied::Ignored("Placed for a task that is not waiting");
                }
                task.attempts.push(Attempt {
                    number: *attempt,
                    placed_ms: time,
                    gpus: gpus.clone(),
                    exclusive: *exclusive,
                    requirement_mib: *requirement_mib,
                    placement_reason: reason.clone(),
                    launched_ms: None,
                    supervisor: None,
                    ended_ms: None,
                    outcome: None,
                    peak_observed_mib: None,
                    sm_util_sum: 0.0,
                    sm_util_samples: 0,
                    sm_util_last_ms: None,
                    limit_mails: 0,
                    energy_mj: 0.0,
                    memory_exceeded: None,
                    checkpoint_ms: None,
                    preempted: None,
                    suspended: None,
                    suspensions: 0,
                    resumed_ms: None,
                    withdrawn: None,
                    withdrawals: 0,
                    withdrawn_ms: None,
                    suspension_ended: None,
                });
                task.phase = Phase::Active { survivors: None, requeue_by: None };
            }
            Event::Launched { attempt, supervisor, .. } => {
                let Some(a) = task.attempt_mut(*attempt).filter(|a| a.ended_ms.is_none()) else {
                    return Applied::Ignored("Launched for an attempt that is not open");
                };
                a.launched_ms = Some(time);
                // Placed becomes Running through the attempt's launch time (`Task::status`).
                a.supervisor = Some(supervisor.clone());
            }
            Event::Finished { attempt, exit_ms, .. } => {
                let ended = task.attempt_mut(*attempt).filter(|a| a.ended_ms.is_none()).and_then(|a| {
                    let launched = a.launched_ms?;
                    Some(((*exit_ms).min(time).saturating_sub(launched), a.peak_observed_mib))
                });
                let (key, limit_ms) = (task.workload_key(), task.spec.time_limit_ms);
                let changed = task.end_attempt(*attempt, time, "exit 0".into());
                let changed = task.phase.finish(End::Finished, time) | changed;
                if let Some((run_ms, peak_mib)) = ended {
                    self.learn_run(key, run_ms, peak_mib, limit_ms, time);
                }
                return Applied::from_changed(changed, "Finished for a task already ended");
            }
            Event::Failed { attempt, outcome, reason, .. } => {
                let changed = task.end_attempt(*attempt, time, outcome.clone());
                let changed = task.phase.finish(End::Failed { reason: reason.clone() }, time) | changed;
                return Applied::from_changed(changed, "Failed for a task already ended");
            }
            Event::OomDetected { attempt, .. } => {
                task.end_attempt(*attempt, time, "out of memory".into());
                task.oom_count += 1;
            }
            Event::Lost { attempt, reason, .. } => {
                task.end_attempt(*attempt, time, format!("lost: {reason}"));
                task.lost_count += 1;
            }
            Event::Stopped { attempt, outcome, .. } => {
                let ended = task.end_attempt(*attempt, time, outcome.clone());
                return Applied::from_changed(ended, "Stopped for an attempt that is not open");
            }
            Event::Reaped { attempt, remaining, .. }
                if task.attempt_mut(*attempt).is_some_and(|a| a.ended_ms.is_none()) =>
            {
                let reason = (!remaining.is_empty()).then(|| survivors_reason(*attempt, remaining));
                // An open attempt means Active or Ended (a cancelled job being stopped).
                if let Phase::Active { survivors, .. } | Phase::Ended { survivors, .. } = &mut task.phase {
                    *survivors = reason;
                }
            }
            Event::SlurmPlaced { cluster, job_id, node, shards, shard_mib, .. } => {
                task.slurm = Some(SlurmRef {
                    cluster: cluster.clone(),
                    job_id: *job_id,
                    node: node.clone(),
                    shards: *shards,
                    shard_mib: *shard_mib,
                });
            }
            Event::SmObserved { attempt, sm_util, .. } => {
                let sm_util = f64::from(*sm_util);
                if !sm_util.is_finite() || !(0.0..=1.0).contains(&sm_util) {
                    return Applied::Ignored("an SM reading outside 0..=1");
                }
                let Some(a) = task.attempt_mut(*attempt) else {
                    return Applied::Ignored("SmObserved for an attempt never placed");
                };
                a.sm_util_sum += sm_util;
                a.sm_util_samples = a.sm_util_samples.saturating_add(1);
                a.sm_util_last_ms = Some(time);
                let key = task.workload_key();
                let history = self.workload_mut(key, time);
                history.sm_util_sum += sm_util;
                history.sm_util_samples = history.sm_util_samples.saturating_add(1);
            }
            Event::Usage { attempt, peak_mib, .. } => {
                let Some(a) = task.attempt_mut(*attempt) else {
                    return Applied::Ignored("Usage for an attempt never placed");
                };
                a.peak_observed_mib = Some(a.peak_observed_mib.unwrap_or(0).max(*peak_mib));
            }
            Event::MemoryExceeded { attempt, gpu, reason, .. } => {
                if !matches!(task.phase, Phase::Active { .. }) {
                    return Applied::Ignored("MemoryExceeded for a task that is not active");
                }
                let Some(a) = task.attempt_mut(*attempt).filter(|a| a.ended_ms.is_none()) else {
                    return Applied::Ignored("MemoryExceeded for an attempt that is not open");
                };
                a.memory_exceeded = Some(ExceededMemory { gpu: gpu.clone(), reason: reason.clone() });
                // The attempt stays open until its processes are gone (Stopped), as a cancel's.
                task.phase.finish(End::Failed { reason: reason.clone() }, time);
            }
            Event::Checkpointed { attempt, .. } => {
                let Some(a) = task.attempt_mut(*attempt).filter(|a| a.ended_ms.is_none()) else {
                    return Applied::Ignored("Checkpointed for an attempt that is not open");
                };
                a.checkpoint_ms = Some(time);
            }
            Event::Preempted { attempt, by, reason, lost_ms, .. } => {
                if !matches!(task.phase, Phase::Active { .. }) {
                    return Applied::Ignored("Preempted for a task that is not active");
                }
                let Some(a) = task.attempt_mut(*attempt).filter(|a| a.ended_ms.is_none()) else {
                    return Applied::Ignored("Preempted for an attempt that is not open");
                };
                if a.preempted.is_some() {
                    return Applied::Ignored("Preempted twice for one attempt");
                }
                let (by, reason, lost_ms) = (by.clone(), reason.clone(), *lost_ms);
                a.preempted = Some(Preemption { by, reason, lost_ms, at_ms: time });
            }
            Event::PreemptionWithdrawn { attempt, reason, .. } => {
                return super::withdrawal::fold(task, time, *attempt, reason)
                    .map_or_else(Applied::Ignored, |()| Applied::Yes);
            }
            Event::Suspended { .. } | Event::Resumed { .. } | Event::SuspensionEnded { .. } => {
                return super::suspension::fold(task, time, event)
                    .map_or_else(Applied::Ignored, |()| Applied::Yes);
            }
            Event::Held { .. }
            | Event::Released { .. }
            | Event::Updated { .. }
            | Event::RequeueRequested { .. }
            | Event::Requeued { .. } => return fold_queue_event(task, event),
            _ => return Applied::Ignored("the record does not fit the task's state"),
        }
        Applied::Yes
    }

    /// A finished run of workload `key`: its run time and memory peak, and the fraction of
    /// its limit it used.
    fn learn_run(
        &mut self,
        key: String,
        run_ms: u64,
        peak_mib: Option<u64>,
        limit_ms: Option<u64>,
        time: u64,
    ) {
        let history = self.workload_mut(key, time);
        history.runs = history.runs.saturating_add(1);
        history.run_ms_sum = history.run_ms_sum.saturating_add(run_ms);
        if let Some(peak_mib) = peak_mib {
            history.peak_mib = Some(history.peak_mib.unwrap_or(0).max(peak_mib));
        }
        if let Some(limit_ms) = limit_ms.filter(|l| *l > 0) {
            self.limit_use.runs = self.limit_use.runs.saturating_add(1);
            self.limit_use.fraction_sum += (run_ms as f64 / limit_ms as f64).min(1.0);
        }
    }

    /// The history of workload `key`, created when new; the least recently seen workload is
    /// dropped when the table would exceed [`WORKLOADS_MAX`].
    fn workload_mut(&mut self, key: String, time: u64) -> &mut WorkloadHistory {
        if !self.workloads.contains_key(&key) && self.workloads.len() >= WORKLOADS_MAX {
            let stalest = self.workloads.iter().min_by_key(|(k, h)| (h.last_ms, *k)).map(|(k, _)| k.clone());
            if let Some(stalest) = stalest {
                self.workloads.remove(&stalest);
            }
        }
        let history = self.workloads.entry(key).or_default();
        history.last_ms = history.last_ms.max(time);
        history
    }
}

/// Folds a record that moves a task between waiting and held, changes a waiting task's spec,
/// or asks for or makes a requeue: each fits one phase only.
fn fold_queue_event(task: &mut Task, event: &Event) -> Applied {
    match event {
        Event::Held { .. } => {
            let Phase::Waiting { held, .. } = &mut task.phase else {
                return Applied::Ignored("Held for a task that is not waiting");
            };
            *held = true;
        }
        // Applied whatever the phase, as before the phase was one value: only a waiting
        // task can be held, and releasing any other leaves it as it is.
        Event::Released { .. } => {
            if let Phase::Waiting { held, .. } = &mut task.phase {
                *held = false;
            }
        }
        Event::Updated { priority, nice, memory_mib, time_limit_ms, gpus, .. }
            if matches!(task.phase, Phase::Waiting { .. }) =>
        {
            let spec = &mut task.spec;
            spec.priority = priority.unwrap_or(spec.priority);
            spec.nice = nice.unwrap_or(spec.nice);
            spec.memory_mib = memory_mib.or(spec.memory_mib);
            if time_limit_ms.is_some() {
                spec.time_limit_ms = *time_limit_ms;
                spec.time_limit_source = Some(crate::spec::time_limit::TimeLimitSource::Task);
            }
            spec.gpus = gpus.unwrap_or(spec.gpus);
        }
        Event::RequeueRequested { by_uid, .. } => {
            let Phase::Active { requeue_by, .. } = &mut task.phase else {
                return Applied::Ignored("RequeueRequested for a task that is not active");
            };
            *requeue_by = Some(*by_uid);
        }
        Event::Requeued { recovery, requirement_mib, recovery_mode, .. } => {
            // A recovery without a mode is the default, exclusive (the paper's).
            let queue = recovery.then(|| recovery_mode.recovery().unwrap_or_default());
            if !task.phase.requeue(queue) {
                return Applied::Ignored("Requeued for a task that is not waiting");
            }
            if *recovery_mode == super::event::RequeueMode::User {
                task.requeue_count = task.requeue_count.saturating_add(1);
            }
            if *recovery {
                task.recovery_requirement_mib = *requirement_mib;
            }
        }
        _ => return Applied::Ignored("the record does not fit the task's state"),
    }
    Applied::Yes
}
