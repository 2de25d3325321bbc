//! What the tick read of an attempt's GPU memory near its end, for `sched::judge_oom`.
//!
//! The readings are the journal's: each GPU's recent history in State (one point per tick,
//! memory in use = total − free) and, for a MIG instance, its parent's newest sample. They
//! are taken from `max(launch, exit − evidence-window-ms)` on. This tick's own readings (taken
//! before the exit was observed, [`memory_now`]) count too while the exit is less than the
//! window old: a process that died a moment ago may still hold its memory in them. The
//! attempt's own memory is its observed peak (Usage records, and this tick's figure).
//!
//! The attempt's supervisor's readings come from its exit record ([`AttemptExit`]'s
//! `gpu_readings`): its peak, and of its last readings those taken in the same window before
//! the exit. They are carma's own (a root process, a root-owned file), taken where the
//! out-of-memory happens, between two ticks; `sched::judge_oom` weighs them with the tick's.

use std::collections::BTreeMap;

use super::runner::AttemptExit;
use crate::gpu::GpuSample;
use crate::journal::State;
use crate::journal::memory_at_end::AtEnd;
pub(super) use crate::journal::memory_at_end::MemoryReading;
use crate::journal::state::Attempt;
use crate::sched::{MemoryAtEnd, RecoveryConfig};

/// This tick's reading of every GPU and MIG instance, by UUID.
pub(super) fn memory_now(samples: &[GpuSample]) -> BTreeMap<String, MemoryReading> {
    let mut now = BTreeMap::new();
    for sample in samples {
        let used = sample.memory_total_mib.saturating_sub(sample.memory_free_mib);
        now.insert(sample.uuid.clone(), (used, sample.memory_total_mib));
        for instance in &sample.mig.instances {
            now.insert(instance.uuid.clone(), (instance.memory_used_mib, instance.memory_total_mib));
        }
    }
    now
}

/// What the tick read of `attempt`'s GPUs between `max(launch, ended_ms − window)` and now,
/// with its observed peak and its requirement, and what its supervisor read in that window
/// (gathered by `journal::memory_at_end`, which the Slurm Epilog shares).
pub(super) fn memory_at_end(
    state: &State,
    attempt: &Attempt,
    exit: &AttemptExit,
    peak_mib: Option<u64>,
    readings_now: &BTreeMap<String, MemoryReading>,
    cfg: &RecoveryConfig,
    now_ms: u64,
) -> MemoryAtEnd {
    let end = AtEnd {
        ended_ms: exit.ended_ms,
        peak_mib,
        readings_now,
        sampler: exit.gpu_readings.as_ref(),
        now_ms,
    };
    crate::journal::memory_at_end::memory_at_end(state, attempt, &end, cfg)
}
