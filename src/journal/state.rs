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
use crate::gpu::GpuSample;
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
    pub sm_active: Option<f32>,
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
    /// Why the task is waiting, from the last tick that considered it.
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
}

impl Attempt {
    /// Placed or running and not yet ended: it holds its GPUs.
    pub fn is_active(&self) -> bool {
        self.ended_ms.is_none()
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

    /// The number the next attempt will get.
    pub fn next_attempt_number(&self) -> u32 {
        self.attempts.last().map_or(1, |a| a.number + 1)
    }

    fn end_attempt(&mut self, number: u32, time_ms: u64, outcome: String) {
        if let Some(attempt) = self.attempt_mut(number).filter(|a| a.ended_ms.is_none()) {
            attempt.ended_ms = Some(time_ms);
            attempt.outcome = Some(outcome);
        }
    }

    /// After an attempt ends without a verdict (OOM, lost), the task waits for the
    /// Requeued or Failed event that the same tick commits with it.
    fn release_if_idle(&mut self) {
        if !self.status.is_terminal() && self.active_attempt().is_none() {
            self.status = Status::Pending;
        }
    }

    fn finish(&mut self, status: Status, time_ms: u64, reason: Option<String>) {
        if !self.status.is_terminal() {
            self.status = status;
            self.ended_ms = Some(time_ms);
            self.end_reason = reason;
            self.pending_reason = None;
            self.in_recovery = false;
        }
    }
}

impl State {
    /// Folds one record. Records must come in seq order; out-of-place ones are ignored.
    pub fn apply(&mut self, seq: u64, record: &Record) {
        debug_assert!(seq > self.last_seq, "fold out of order: {seq} after {}", self.last_seq);
        self.last_seq = seq;
        let time = record.time_ms;
        match &record.event {
            Event::Submitted { task, submitter_uid, spec } => {
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
            Event::MetricSample { sample } => self.apply_sample(time, sample),
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
            event => self.apply_task_event(seq, time, event),
        }
    }

    fn apply_sample(&mut self, time: u64, sample: &GpuSample) {
        let Some(gpu) = self.gpus.get_mut(&sample.uuid) else { return };
        gpu.history.push(GpuPoint {
            time_ms: time,
            memory_total_mib: sample.memory_total_mib,
            memory_free_mib: sample.memory_free_mib,
            sm_active: sample.sm_active,
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
    }

    fn apply_task_event(&mut self, _seq: u64, time: u64, event: &Event) {
        let Some(task) = event.task().and_then(|id| self.tasks.get_mut(id)) else {
            return;
        };
        match event {
            Event::Cancelled { reason, .. } => task.finish(Status::Cancelled, time, Some(reason.clone())),
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
                    return;
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
                });
                task.status = Status::Placed;
                task.pending_reason = None;
                task.in_recovery = false;
            }
            Event::Launched { attempt, supervisor, .. } => {
                if let Some(a) = task.attempt_mut(*attempt).filter(|a| a.ended_ms.is_none()) {
                    a.launched_ms = Some(time);
                    a.supervisor = Some(supervisor.clone());
                    if task.status == Status::Placed {
                        task.status = Status::Running;
                    }
                }
            }
            Event::Finished { attempt, .. } => {
                task.end_attempt(*attempt, time, "exit 0".into());
                task.finish(Status::Finished, time, None);
            }
            Event::Failed { attempt, outcome, reason, .. } => {
                task.end_attempt(*attempt, time, outcome.clone());
                task.finish(Status::Failed, time, Some(reason.clone()));
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
            Event::Stopped { attempt, outcome, .. } => task.end_attempt(*attempt, time, outcome.clone()),
            Event::Usage { attempt, peak_mib, .. } => {
                if let Some(a) = task.attempt_mut(*attempt) {
                    a.peak_observed_mib = Some(a.peak_observed_mib.unwrap_or(0).max(*peak_mib));
                }
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
            _ => {}
        }
    }

    /// Tasks waiting to be placed, in no particular order (the scheduler orders them).
    pub fn waiting(&self) -> impl Iterator<Item = &Task> {
        self.tasks.values().filter(|t| t.status == Status::Pending)
    }

    /// Whether `id` has ever been ingested, as a task or a rejection.
    pub fn knows(&self, id: &TaskId) -> bool {
        self.tasks.contains_key(id) || self.rejected_ids.contains(id)
    }

    /// Looks a task up by full id or by a unique prefix of at least 4 characters.
    pub fn find(&self, query: &str) -> Option<&Task> {
        if let Some(id) = TaskId::parse(query) {
            return self.tasks.get(&id);
        }
        if query.len() < 4 {
            return None;
        }
        let mut matches = self.tasks.values().filter(|t| t.id.as_str().starts_with(query));
        let first = matches.next()?;
        matches.next().is_none().then_some(first)
    }
}
