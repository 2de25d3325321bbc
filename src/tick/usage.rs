//! Which GPU memory belongs to which running task, from this tick's process lists.
//!
//! NVML lists the processes on each GPU with their memory. Every process of an attempt runs
//! in its supervisor's session (the supervisor calls setsid), so a process whose session id
//! is an attempt's supervisor pid belongs to that attempt, whatever its children do with
//! process groups.

use std::collections::BTreeMap;

use crate::gpu::GpuSample;
use crate::id::TaskId;
use crate::journal::State;

use super::runner::AttemptRunner;

/// Each running task's memory on its busiest GPU, in MiB (per-GPU, as `sched` expects).
pub fn observed_mib(
    state: &State,
    samples: &[GpuSample],
    runner: &dyn AttemptRunner,
) -> BTreeMap<TaskId, u64> {
    let by_supervisor: BTreeMap<u32, &TaskId> = state
        .tasks
        .values()
        .filter_map(|t| Some((t.active_attempt()?.supervisor.as_ref()?.pid, &t.id)))
        .collect();
    let mut per_gpu: BTreeMap<(&TaskId, &str), u64> = BTreeMap::new();
    if by_supervisor.is_empty() {
        return BTreeMap::new();
    }
    for sample in samples {
        for process in &sample.processes {
            let Some(session) = runner.session_of(process.pid) else { continue };
            if let Some(task) = by_supervisor.get(&session) {
                *per_gpu.entry((task, sample.uuid.as_str())).or_default() += process.used_mib.unwrap_or(0);
            }
        }
    }
    let mut observed: BTreeMap<TaskId, u64> = BTreeMap::new();
    for ((task, _), mib) in per_gpu {
        let entry = observed.entry(task.clone()).or_default();
        *entry = (*entry).max(mib);
    }
    observed
}
