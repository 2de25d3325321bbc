//! Which GPU memory belongs to which running task, from this tick's process lists.
//!
//! NVML lists the processes on each GPU with their memory. Every process of an attempt runs
//! in its supervisor's session (the supervisor calls setsid), so a process whose session id
//! is an attempt's supervisor pid belongs to that attempt, whatever its children do with
//! process groups.

use std::collections::BTreeMap;

use crate::gpu::GpuSample;
use crate::id::TaskId;
use crate::journal::{Event, Record, State};

use super::runner::AttemptRunner;

/// A new peak is journaled only when it grows by at least this, to bound the records.
pub const PEAK_STEP_MIB: u64 = 256;

/// Usage records for attempts whose observed memory reached a new peak.
pub fn peak_records(state: &State, observed: &BTreeMap<TaskId, u64>, now_ms: u64) -> Vec<Record> {
    observed
        .iter()
        .filter_map(|(id, &mib)| {
            let attempt = state.tasks.get(id)?.active_attempt()?;
            let grew = attempt.peak_observed_mib.is_none_or(|peak| mib >= peak + PEAK_STEP_MIB);
            (grew && mib > 0).then(|| Record {
                time_ms: now_ms,
                event: Event::Usage { task: id.clone(), attempt: attempt.number, peak_mib: mib },
            })
        })
        .collect()
}

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
