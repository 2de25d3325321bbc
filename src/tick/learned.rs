//! What the tick knows about a task's SM activity and run time, from the journal alone.
//!
//! Nothing here reads a profile or asks the task: the figures are what a real server learns.
//! - **Standalone SM activity**: the mean of the attempt's own SM samples (SmObserved, taken
//!   below saturation), else the mean of every sample of earlier runs of its workload
//!   ([`Task::workload_key`]: submitter, name, command), else unknown (the scheduler assumes
//!   `sm_unknown`).
//! - **Run time**: the mean run time of the workload's finished attempts, else the declared
//!   time limit scaled by the mean fraction of their limit that finished attempts used (a
//!   limit is an upper bound users round up), else the limit itself, else unknown.
//! - **Expected run for the queue order** (`[sched.order]`): the run time above with its
//!   source, else, for a first-seen task without a limit, the mean run time of every
//!   finished attempt of tasks with as many GPUs ([`width_priors`]), else unknown.
//! - **Memory** (with `memory = "learned"`): the highest peak of the workload's finished
//!   attempts and of its running ones that have run for [`PEAK_SETTLE_MS`] or the in-flight
//!   grace (a job reaches its peak in its first iterations), plus the step below
//!   which peaks are not journaled; else the declared figure or estimate.

use std::collections::BTreeMap;

use crate::journal::state::Attempt;
use crate::journal::{State, Task};
use crate::sched::{ExpectedRun, RunSource};

use super::usage::PEAK_STEP_MIB;

/// A running attempt's peak counts once it has run this long (or the in-flight grace, if
/// longer): by then a training job has allocated what its iterations need.
pub(super) const PEAK_SETTLE_MS: u64 = 120_000;

/// The task's standalone SM activity, 0..1, when known.
pub(super) fn sm_estimate(state: &State, task: &Task, attempt: Option<&Attempt>) -> Option<f32> {
    attempt
        .and_then(Attempt::sm_util_mean)
        .or_else(|| state.workloads.get(&task.workload_key()).and_then(|h| h.sm_util_mean()))
        .filter(|sm| sm.is_finite())
}

/// The task's expected run time from launch, when known.
pub(super) fn runtime_estimate_ms(state: &State, task: &Task) -> Option<u64> {
    let learned = state.workloads.get(&task.workload_key()).and_then(|h| h.run_ms_mean());
    learned.or_else(|| {
        let limit_ms = task.spec.time_limit_ms?;
        let fraction = state.limit_use.mean().unwrap_or(1.0).clamp(0.01, 1.0);
        Some((limit_ms as f64 * fraction).round() as u64)
    })
}

/// The task's expected run time for the queue order, and where it came from: the
/// workload's history, else its scaled limit (as [`runtime_estimate_ms`]), else the prior of
/// its width from `priors` ([`width_priors`]).
pub fn expected_run(state: &State, task: &Task, priors: &BTreeMap<u32, u64>) -> Option<ExpectedRun> {
    let learned = state.workloads.get(&task.workload_key()).and_then(|h| h.run_ms_mean());
    if let Some(ms) = learned {
        return Some(ExpectedRun { ms, source: RunSource::History });
    }
    if let Some(ms) = runtime_estimate_ms(state, task) {
        return Some(ExpectedRun { ms, source: RunSource::Limit });
    }
    priors.get(&task.spec.gpus).map(|&ms| ExpectedRun { ms, source: RunSource::Width })
}

/// The mean run time (launch to end) of every attempt that finished with exit 0, by its
/// task's GPU count: what a first-seen task of that width is expected to take. One pass over
/// the tasks, made only when the size order is on.
pub fn width_priors(state: &State) -> BTreeMap<u32, u64> {
    let mut sums: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    for task in state.tasks.values() {
        for attempt in &task.attempts {
            let (Some(launched), Some(ended)) = (attempt.launched_ms, attempt.ended_ms) else { continue };
            if attempt.outcome.as_deref() != Some("exit 0") {
                continue;
            }
            let entry = sums.entry(task.spec.gpus).or_default();
            *entry = (entry.0.saturating_add(ended.saturating_sub(launched)), entry.1 + 1);
        }
    }
    sums.into_iter().map(|(gpus, (sum_ms, runs))| (gpus, sum_ms / runs)).collect()
}

/// The highest settled peak of each workload's running attempts: those launched at least
/// the in-flight grace (`grace_ms`) or [`PEAK_SETTLE_MS`], whichever is longer, before `now_ms`.
pub(super) fn running_peaks(state: &State, now_ms: u64, grace_ms: u64) -> BTreeMap<String, u64> {
    let settle_ms = grace_ms.max(PEAK_SETTLE_MS);
    let mut peaks: BTreeMap<String, u64> = BTreeMap::new();
    for task in state.tasks.values() {
        let Some(attempt) = task.active_attempt() else { continue };
        let settled = attempt.launched_ms.is_some_and(|at| now_ms >= at.saturating_add(settle_ms));
        if let (true, Some(peak_mib)) = (settled, attempt.peak_observed_mib) {
            let entry = peaks.entry(task.workload_key()).or_default();
            *entry = (*entry).max(peak_mib);
        }
    }
    peaks
}

/// The memory an earlier run of the task's workload showed, when one has: the higher of its
/// finished attempts' peak and `running` (from [`running_peaks`]), plus [`PEAK_STEP_MIB`].
pub(super) fn memory_mib(state: &State, task: &Task, running: &BTreeMap<String, u64>) -> Option<u64> {
    let key = task.workload_key();
    let finished = state.workloads.get(&key).and_then(|h| h.peak_mib);
    let peak_mib = finished.into_iter().chain(running.get(&key).copied()).max()?;
    Some(peak_mib.saturating_add(PEAK_STEP_MIB))
}
