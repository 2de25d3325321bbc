//! `mode = "suspend"` in the tick: whether each victim of a preemption could be suspended
//! instead of requeued, said in its Preempted record.
//!
//! For each victim the tick finds the job's GPU processes (the GPU sample's processes mapped
//! to attempts by their process tree, [`AttemptRunner::attempts_of`]; on fake GPUs the fake
//! file lists pids) and asks `cuda-checkpoint --get-state` about each
//! ([`crate::exec::cuda_checkpoint::refusal`]). Suspending itself is not built yet, so every
//! victim is requeued; the reason says exactly why it was not suspended: the binary is missing,
//! a process is not running CUDA, the tool refused, or (all of them allow it) carma does not
//! suspend yet.

use std::collections::BTreeMap;

use crate::config::Config;
use crate::gpu::GpuSample;
use crate::id::TaskId;
use crate::journal::{Event, Record};
use crate::sched::PreemptionMode;

use super::runner::{ActiveAttempt, AttemptRunner};

/// Appends to each Preempted record's reason why its victim is requeued, not suspended (with
/// `mode = "suspend"`; nothing otherwise).
pub(super) fn annotate(
    records: &mut [Record],
    present: &[GpuSample],
    runner: &dyn AttemptRunner,
    active: &[ActiveAttempt],
    config: &Config,
) {
    let preemption = &config.sched.preemption;
    if preemption.mode != PreemptionMode::Suspend {
        return;
    }
    let mut victims = records.iter_mut().filter_map(|r| match &mut r.event {
        Event::Preempted { task, attempt, reason, .. } => Some((task.clone(), *attempt, reason)),
        _ => None,
    });
    let Some(first) = victims.next() else { return };
    let pids = gpu_pids(present, runner, active);
    for (task, attempt, reason) in std::iter::once(first).chain(victims) {
        let mine = pids.get(&(task, attempt)).map_or(&[][..], Vec::as_slice);
        let why = crate::exec::cuda_checkpoint::refusal(preemption.cuda_checkpoint.as_deref(), mine)
            .unwrap_or_else(|| "cuda-checkpoint allows it, but carma does not suspend jobs yet".to_string());
        reason.push_str(&format!("; suspend unavailable ({why}): requeued instead"));
    }
}

/// Each attempt's processes on the GPUs (whole GPUs and MIG instances), ascending.
fn gpu_pids(
    present: &[GpuSample],
    runner: &dyn AttemptRunner,
    active: &[ActiveAttempt],
) -> BTreeMap<(TaskId, u32), Vec<u32>> {
    let mut pids: Vec<u32> = present
        .iter()
        .flat_map(|s| s.processes.iter().chain(s.mig.instances.iter().flat_map(|m| m.processes.iter())))
        .map(|p| p.pid)
        .collect();
    pids.sort_unstable();
    pids.dedup();
    let mut by_attempt: BTreeMap<(TaskId, u32), Vec<u32>> = BTreeMap::new();
    for (pid, owner) in runner.attempts_of(&pids, active) {
        by_attempt.entry(owner).or_default().push(pid);
    }
    by_attempt
}
