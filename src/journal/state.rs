//! State: the pure fold of the journal's events.
//!
//! `State::apply` is total: any sequence of well-formed records folds without panicking,
//! including sequences a buggy or crashed writer could leave (an attempt event for an
//! unknown task, a second Submitted for one id). Such records are ignored rather than
//! trusted, so replay is always possible. The fold is the only way State changes, which is
//! what makes a snapshot provably equal to a full replay.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::event::{Event, ProcessRef, Record};
use crate::gpu::{GpuSample, SmSource};
use crate::id::TaskId;
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
    /// Each array's owner: the submitter of its first member (see `tick::admit`).
    pub array_owners: BTreeMap<TaskId, u32>,
}

/// GPUs kept for the blocked head of the queue (backfill).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    pub task: TaskId,
    pub gpus: Vec<String>,
}

/// Most workloads whose history State keeps.
pub const WORKLOADS_MAX: usize = 4096;

/// One workload's history: its journaled SM samples and its finished runs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkloadHistory {
    pub sm_util_sum: f64,
    pub sm_util_samples: u32,
    /// Finished attempts and their summed run time (launch to exit), ms.
    pub runs: u32,
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
    pub runs: u32,
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
    pub uuid: String,
    pub index: u32,
    pub name: String,
    pub memory_total_mib: u64,
    /// The newest sample, with its process list.
    pub last: Option<GpuSample>,
    pub last_ms: u64,
    /// Recent readings, oldest first, bounded by [`GPU_HISTORY_MAX`] and [`GPU_HISTORY_MS`].
    pub history: Vec<GpuPoint>,
}

/// One reading, reduced to what the scheduler's window needs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuPoint {
    pub time_ms: u64,
    pub memory_total_mib: u64,
    pub memory_free_mib: u64,
    /// Driver-reserved memory, when the sample had it.
    pub memory_reserved_mib: Option<u64>,
    pub sm_active: Option<f32>,
    /// What `sm_active` measures (GPM, or a coarse stand-in such as device utilisation).
    pub sm_active_source: SmSource,
    pub util_gpu: Option<f32>,
    pub sm_occupancy: Option<f32>,
    pub dram_active: Option<f32>,
}

/// A spool file that failed validation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rejection {
    pub seq: u64,
    pub time_ms: u64,
    pub task: Option<TaskId>,
    pub spool_file: String,
    pub submitter_uid: u32,
    pub reason: String,
}

/// Where a task is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Status {
    Pending,
    Placed,
    Running,
    Finished,
    Failed,
    Cancelled,
}

impl Status {
    /// Finished, Failed and Cancelled never change again.
    pub fn is_terminal(self) -> bool {
        matches!(self, Status::Finished | Status::Failed | Status::Cancelled)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "Pending",
            Status::Placed => "Placed",
            Status::Running => "Running",
            Status::Finished => "Finished",
            Status::Failed => "Failed",
            Status::Cancelled => "Cancelled",
        }
    }
}

/// One task and its history.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Task {
    pub id: TaskId,
    /// Seq of the Submitted event: the FIFO order.
    pub submit_seq: u64,
    pub submitted_ms: u64,
    pub submitter_uid: u32,
    pub spec: TaskSpec,
    pub status: Status,
    pub attempts: Vec<Attempt>,
    /// Why the task is waiting, from the last tick that considered it. While an attempt is
    /// active it is set only by a Reaped record with survivors ([`Task::held_by_survivors`]).
    pub pending_reason: Option<String>,
    pub estimate: Option<EstimateRecord>,
    /// Why the model summary gave no estimate, for the summary file's version in
    /// `summary_stamp`; the tick tries again only when the file changes.
    pub estimate_failure: Option<EstimateFailure>,
    /// True while the task sits in the priority recovery queue.
    pub in_recovery: bool,
    /// Memory requirement raised by recovery, MiB per GPU.
    pub recovery_requirement_mib: Option<u64>,
    pub recovery_mode: Option<String>,
    pub oom_count: u32,
    pub lost_count: u32,
    /// Why the task ended, for Failed and Cancelled.
    pub end_reason: Option<String>,
    pub ended_ms: Option<u64>,
    /// Set by SlurmPlaced: the task is a Slurm job, which Slurm places and runs; the tick
    /// never places, launches, reconciles or cancels it.
    pub slurm: Option<SlurmRef>,
    /// Held (`--hold`, `carma hold`): it waits until released.
    pub held: bool,
}

/// A Slurm job as of its latest attempt (from SlurmPlaced).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlurmRef {
    pub cluster: String,
    pub job_id: u32,
    /// The node of the latest attempt.
    pub node: String,
    /// Shards granted to the latest attempt; `None` for whole GPUs.
    pub shards: Option<u32>,
    pub shard_mib: u64,
}

/// An estimate as journaled.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EstimateRecord {
    pub method: String,
    pub mib: u64,
    pub upper_mib: u64,
    pub explanation: String,
}

/// A failed estimate as journaled.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EstimateFailure {
    pub reason: String,
    pub summary_stamp: u64,
}

/// One try at running a task.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    pub number: u32,
    pub placed_ms: u64,
    pub gpus: Vec<String>,
    pub exclusive: bool,
    pub requirement_mib: Option<u64>,
    pub placement_reason: String,
    pub launched_ms: Option<u64>,
    pub supervisor: Option<ProcessRef>,
    pub ended_ms: Option<u64>,
    /// How the attempt ended, in words ("exit 0", "out of memory", "lost: ...").
    pub outcome: Option<String>,
    /// Highest GPU memory seen for the attempt on its busiest GPU, MiB.
    pub peak_observed_mib: Option<u64>,
    /// The attempt's journaled SM samples (SmObserved): sum, count and the newest one's time.
    pub sm_util_sum: f64,
    pub sm_util_samples: u32,
    pub sm_util_last_ms: Option<u64>,
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

impl Task {
    /// The attempt that is placed or running, if any.
    pub fn active_attempt(&self) -> Option<&Attempt> {
        self.attempts.last().filter(|a| a.is_active())
    }

    fn attempt_mut(&mut self, number: u32) -> Option<&mut Attempt> {
        self.attempts.iter_mut().rev().find(|a| a.number == number)
    }

    /// True while the active attempt has ended (or lost its supervisor) but some of its
    /// processes survive SIGKILL: its verdict and any retry wait, and `pending_reason` names
    /// the pids ("lost-pending").
    pub fn held_by_survivors(&self) -> bool {
        self.active_attempt().is_some() && self.pending_reason.is_some()
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

    /// Ends attempt `number` if it is open; whether it was.
    fn end_attempt(&mut self, number: u32, time_ms: u64, outcome: String) -> bool {
        let Some(attempt) = self.attempt_mut(number).filter(|a| a.ended_ms.is_none()) else { return false };
        attempt.ended_ms = Some(time_ms);
        attempt.outcome = Some(outcome);
        true
    }

    /// After an attempt ends without a verdict (OOM, lost), the task waits for the
    /// Requeued or Failed event that the same tick commits with it.
    fn release_if_idle(&mut self) {
        if !self.status.is_terminal() && self.active_attempt().is_none() {
            self.status = Status::Pending;
        }
    }

    /// Ends the task unless it has ended; whether it had not.
    fn finish(&mut self, status: Status, time_ms: u64, reason: Option<String>) -> bool {
        if self.status.is_terminal() {
            return false;
        }
        self.status = status;
        self.ended_ms = Some(time_ms);
        self.end_reason = reason;
        self.pending_reason = None;
        self.in_recovery = false;
        true
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

/// What [`State::apply`] did with a record. Replaying a journal tolerates records that no
/// longer fit (a crash between two commits can leave one), but a writer never writes one:
/// `Journal::append` debug-asserts `Yes` for every record it commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
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
                    status: Status::Pending,
                    attempts: Vec::new(),
                    pending_reason: None,
                    estimate: None,
                    estimate_failure: None,
                    in_recovery: false,
                    recovery_requirement_mib: None,
                    recovery_mode: None,
                    oom_count: 0,
                    lost_count: 0,
                    end_reason: None,
                    ended_ms: None,
                    slurm: None,
                    held: spec.hold,
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
            Event::Notified { task, .. } | Event::NotifyFailed { task, .. } => {
                self.notify_due.remove(task);
            }
            Event::IngestDeferred { .. } => {}
            event => return self.apply_task_event(seq, time, event),
        }
        Applied::Yes
    }

    fn apply_sample(&mut self, time: u64, sample: &GpuSample) -> Applied {
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
        let Some(was_terminal) =
            event.task().and_then(|id| self.tasks.get(id)).map(|t| t.status.is_terminal())
        else {
            return Applied::Ignored("no such task");
        };
        let applied = self.fold_task_event(seq, time, event);
        if let Some(task) = event.task().and_then(|id| self.tasks.get(id)) {
            let wants_notice = !task.spec.notify.is_empty() || task.spec.mail_user.is_some();
            if !was_terminal && task.status.is_terminal() && wants_notice {
                self.notify_due.insert(task.id.clone());
            }
        }
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
                let ended = task.finish(Status::Cancelled, time, Some(reason.clone()));
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
            Event::Pending { reason, .. } if task.status == Status::Pending => {
                task.pending_reason = Some(reason.clone());
            }
            Event::Placed { attempt, gpus, exclusive, requirement_mib, reason, .. } => {
                if task.status != Status::Pending || task.active_attempt().is_some() {
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
                });
                task.status = Status::Placed;
                task.pending_reason = None;
                task.in_recovery = false;
            }
            Event::Launched { attempt, supervisor, .. } => {
                let Some(a) = task.attempt_mut(*attempt).filter(|a| a.ended_ms.is_none()) else {
                    return Applied::Ignored("Launched for an attempt that is not open");
                };
                a.launched_ms = Some(time);
                a.supervisor = Some(supervisor.clone());
                if task.status == Status::Placed {
                    task.status = Status::Running;
                }
            }
            Event::Finished { attempt, exit_ms, .. } => {
                let ended = task.attempt_mut(*attempt).filter(|a| a.ended_ms.is_none()).and_then(|a| {
                    let launched = a.launched_ms?;
                    Some(((*exit_ms).min(time).saturating_sub(launched), a.peak_observed_mib))
                });
                let (key, limit_ms) = (task.workload_key(), task.spec.time_limit_ms);
                let changed = task.end_attempt(*attempt, time, "exit 0".into());
                let changed = task.finish(Status::Finished, time, None) | changed;
                if let Some((run_ms, peak_mib)) = ended {
                    self.learn_run(key, run_ms, peak_mib, limit_ms, time);
                }
                return Applied::from_changed(changed, "Finished for a task already ended");
            }
            Event::Failed { attempt, outcome, reason, .. } => {
                let changed = task.end_attempt(*attempt, time, outcome.clone());
                let changed = task.finish(Status::Failed, time, Some(reason.clone())) | changed;
                return Applied::from_changed(changed, "Failed for a task already ended");
            }
            Event::OomDetected { attempt, .. } => {
                task.end_attempt(*attempt, time, "out of memory".into());
                task.oom_count += 1;
                task.release_if_idle();
            }
            Event::Lost { attempt, reason, .. } => {
                task.end_attempt(*attempt, time, format!("lost: {reason}"));
                task.lost_count += 1;
                task.release_if_idle();
            }
            Event::Stopped { attempt, outcome, .. } => {
                let ended = task.end_attempt(*attempt, time, outcome.clone());
                return Applied::from_changed(ended, "Stopped for an attempt that is not open");
            }
            Event::Reaped { attempt, remaining, .. }
                if task.attempt_mut(*attempt).is_some_and(|a| a.ended_ms.is_none()) =>
            {
                task.pending_reason = (!remaining.is_empty()).then(|| survivors_reason(*attempt, remaining));
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
            Event::Held { .. } if task.status == Status::Pending && task.active_attempt().is_none() => {
                task.held = true;
            }
            Event::Released { .. } => task.held = false,
            Event::Updated { priority, nice, memory_mib, time_limit_ms, gpus, .. }
                if task.status == Status::Pending && task.active_attempt().is_none() =>
            {
                let spec = &mut task.spec;
                spec.priority = priority.unwrap_or(spec.priority);
                spec.nice = nice.unwrap_or(spec.nice);
                spec.memory_mib = memory_mib.or(spec.memory_mib);
                spec.time_limit_ms = time_limit_ms.or(spec.time_limit_ms);
                spec.gpus = gpus.unwrap_or(spec.gpus);
            }
            Event::Requeued { recovery, requirement_mib, recovery_mode, .. }
                if !task.status.is_terminal() && task.active_attempt().is_none() =>
            {
                task.status = Status::Pending;
                task.in_recovery = *recovery;
                if *recovery {
                    task.recovery_requirement_mib = *requirement_mib;
                    task.recovery_mode = Some(recovery_mode.clone());
                }
            }
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

    /// Tasks waiting for the tick to place them, in no particular order (the scheduler
    /// orders them). A Slurm job waiting for Slurm to start it again is not among them.
    pub fn waiting(&self) -> impl Iterator<Item = &Task> {
        self.tasks.values().filter(|t| t.status == Status::Pending && t.slurm.is_none())
    }

    /// The newest unfinished task of Slurm job `job_id` of `cluster`, if any: how the node's
    /// hooks find a job again after a requeue changed its submit time.
    pub fn slurm_task(&self, cluster: &str, job_id: u32) -> Option<&Task> {
        self.tasks.values().rev().find(|t| {
            !t.status.is_terminal()
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
