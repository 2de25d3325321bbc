//! A task's GPU memory figure and where it came from; an attempt's share and whose figure it
//! was. One answer for placement (`place`), enforcement (`enforce`), the relaunch rule
//! (`relaunch`) and `carma show`.
//!
//! **The figure** placement uses for a waiting task is the highest of:
//! - its own figure: the estimate's upper bound, else its declared memory (`[tick] memory =
//!   "declared"`), or the workload's learned peak (`memory = "learned"`);
//! - the figure its own last relaunch (or out-of-memory recovery) raised;
//! - the figure a relaunch of a sibling (a member of the same array or sweep) raised;
//! - the figure a relaunch of an earlier run of the same workload raised.
//!
//! So a 100-task array whose first member is stopped for its memory is not stopped 100 times:
//! its waiting members start with what the first one used. With none of these, the task has
//! no figure: placement demands the no-figure margin for it, and while it shares a GPU its
//! attempt is held to the queue's default share (`[sched] default-share-mib`).
//!
//! **Whose figure** ([`ShareSource`]) is the origin's: the user's declaration, carma's
//! estimate, carma's learning (a learned peak, or a raised figure with no figure of the task's
//! own beneath it), or the default share. A figure raised from a declaration stays the user's,
//! so a user who under-declares keeps gaining nothing on the next try.

use std::collections::BTreeMap;

use crate::config::{Config, MemorySource};
use crate::id::TaskId;
use crate::journal::state::{Attempt, requirement_mib};
use crate::journal::{State, Task};
use crate::sched::ShareSource;

use super::learned;

/// Where a task's figure came from, for `carma show` and reasons.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FigureFrom {
    /// The user declared it.
    Declared,
    /// carma's estimate from the task's model summary.
    Estimate,
    /// The peak of earlier runs of the same workload (`memory = "learned"`).
    WorkloadPeak,
    /// The task's own last relaunch raised it.
    OwnRelaunch,
    /// A relaunch of this sibling (same array or sweep) raised it.
    Sibling(TaskId),
    /// A relaunch of this earlier run of the same workload raised it.
    Workload(TaskId),
}

/// A task's memory figure per GPU, with where it came from and whose it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Figure {
    /// MiB per GPU.
    pub mib: u64,
    /// Where the highest of the candidates came from.
    pub from: FigureFrom,
    /// Whose figure it is at its origin.
    pub origin: ShareSource,
}

/// The task's figure (see the module docs); `None` when it has none. `peaks` are the settled
/// peaks of running attempts by workload (`learned::running_peaks`), used with `memory =
/// "learned"` only.
pub(super) fn figure(
    state: &State,
    task: &Task,
    config: &Config,
    peaks: &BTreeMap<String, u64>,
) -> Option<Figure> {
    let memory = config.tick.memory;
    let learned =
        (memory == MemorySource::Learned).then(|| learned::memory_mib(state, task, peaks)).flatten();
    let own = match learned {
        Some(mib) => Some((mib, FigureFrom::WorkloadPeak, ShareSource::Learned)),
        None => requirement_mib(task, memory).map(|mib| {
            let from = if task.estimate.is_some() { FigureFrom::Estimate } else { FigureFrom::Declared };
            let origin = if task.estimate.is_some() { ShareSource::Estimate } else { ShareSource::Declared };
            (mib, from, origin)
        }),
    };
    let origin = own.as_ref().map_or(ShareSource::Learned, |(_, _, origin)| *origin);
    let mut best: Option<(u64, FigureFrom)> = own.map(|(mib, from, _)| (mib, from));
    let mut consider = |mib: u64, from: FigureFrom| {
        if best.as_ref().is_none_or(|(known, _)| mib > *known) {
            best = Some((mib, from));
        }
    };
    if let Some(mib) = task.recovery_requirement_mib {
        consider(mib, FigureFrom::OwnRelaunch);
    }
    let array = task.spec.array.as_ref().and_then(|a| state.array_raised.get(&a.id));
    if let Some(raised) = array.filter(|r| r.task != task.id) {
        consider(raised.mib, FigureFrom::Sibling(raised.task.clone()));
    }
    let workload = state.workloads.get(&task.workload_key()).and_then(|h| h.raised.as_ref());
    if let Some(raised) = workload.filter(|r| r.task != task.id) {
        consider(raised.mib, FigureFrom::Workload(raised.task.clone()));
    }
    best.map(|(mib, from)| Figure { mib, from, origin })
}

/// The share of `attempt` of `task` per GPU and whose figure it was: what its placement
/// assumed, else (placed without a figure) the queue's default share.
pub(super) fn attempt_share(task: &Task, attempt: &Attempt, config: &Config) -> (u64, ShareSource) {
    let Some(mib) = attempt.requirement_mib else {
        return (config.sched.default_share(), ShareSource::Default);
    };
    // The origin of the figure it was placed with: the task's own, else carma's learning.
    let origin = match requirement_mib(task, config.tick.memory) {
        Some(_) if task.estimate.is_some() => ShareSource::Estimate,
        Some(_) => ShareSource::Declared,
        None => ShareSource::Learned,
    };
    (mib, origin)
}

/// `carma show`'s words for a task's figure: `17.0 GiB (raised by its relaunch; declared)`,
/// `5.0 GiB: the queue's default share; give --gpu-mem to say more`.
pub fn describe(state: &State, task: &Task, config: &Config) -> String {
    let peaks = learned::running_peaks(state, u64::MAX, config.sched.in_flight_grace_ms);
    let Some(figure) = figure(state, task, config, &peaks) else {
        let mib = config.sched.default_share();
        return format!(
            "{}: the queue's default share while it shares a GPU; give --gpu-mem to say more",
            gib(mib)
        );
    };
    let from = match &figure.from {
        FigureFrom::Declared => "declared".to_string(),
        FigureFrom::Estimate => "carma's estimate".to_string(),
        FigureFrom::WorkloadPeak => "learned from earlier runs of its workload".to_string(),
        FigureFrom::OwnRelaunch => "raised by its relaunch after it ran out of its share".to_string(),
        FigureFrom::Sibling(id) => format!("learned from the relaunch of its sibling {id}"),
        FigureFrom::Workload(id) => {
            format!("learned from the relaunch of {id}, an earlier run of its workload")
        }
    };
    format!("{}: {from}", gib(figure.mib))
}

fn gib(mib: u64) -> String {
    format!("{:.1} GiB", mib as f64 / 1024.0)
}
