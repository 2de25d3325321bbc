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
use crate::exec::GpuReadings;
use crate::gpu::GpuSample;
use crate::journal::State;
use crate::journal::state::Attempt;
use crate::sched::{GpuAtEnd, MemoryAtEnd, RecoveryConfig, SupervisorAtEnd};

/// One target's memory in this tick's readings: (used MiB, total MiB).
pub(super) type MemoryReading = (u64, u64);

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
/// with its observed peak and its requirement, and what its supervisor read in that window.
pub(super) fn memory_at_end(
    state: &State,
    attempt: &Attempt,
    exit: &AttemptExit,
    peak_mib: Option<u64>,
    readings_now: &BTreeMap<String, MemoryReading>,
    cfg: &RecoveryConfig,
    now_ms: u64,
) -> MemoryAtEnd {
    let ended_ms = exit.ended_ms.min(now_ms);
    let started_ms = attempt.launched_ms.unwrap_or(attempt.placed_ms);
    let from_ms = ended_ms.saturating_sub(cfg.evidence_window_ms).max(started_ms);
    let now_counts = now_ms.saturating_sub(ended_ms) <= cfg.evidence_window_ms;
    let gpus = attempt
        .gpus
        .iter()
        .map(|uuid| {
            let (name, mut used_mib_max, mut total_mib) = journaled(state, uuid, from_ms);
            if let Some(&(used, total)) = readings_now.get(uuid).filter(|_| now_counts) {
                used_mib_max = used_mib_max.max(Some(used));
                total_mib = total_mib.max(total);
            }
            let supervisor_used_mib_max = exit.gpu_readings.as_ref().and_then(|readings| {
                near_end(readings, from_ms, ended_ms)
                    .filter_map(|r| r.gpus.iter().find(|g| &g.uuid == uuid))
                    .map(|g| g.used_mib)
                    .max()
            });
            GpuAtEnd { name, used_mib_max, total_mib, supervisor_used_mib_max }
        })
        .collect();
    let supervisor = exit.gpu_readings.as_ref().map(|readings| SupervisorAtEnd {
        peak_mib: readings.peak_mib,
        interval_ms: readings.interval_ms,
        count: readings.count,
        last_before_exit_ms: readings.last.last().map(|r| ended_ms.saturating_sub(r.time_ms)),
    });
    MemoryAtEnd { gpus, attempt_peak_mib: peak_mib, requirement_mib: attempt.requirement_mib, supervisor }
}

/// The supervisor's last readings taken between `from_ms` and the exit.
fn near_end(
    readings: &GpuReadings,
    from_ms: u64,
    ended_ms: u64,
) -> impl Iterator<Item = &crate::exec::gpu_watch::Reading> {
    readings.last.iter().filter(move |r| (from_ms..=ended_ms).contains(&r.time_ms))
}

/// A target's name, the most memory in use among its journaled readings since `from_ms`, and
/// its total memory.
fn journaled(state: &State, uuid: &str, from_ms: u64) -> (String, Option<u64>, u64) {
    if let Some(gpu) = state.gpus.get(uuid) {
        let recent = gpu.history.iter().filter(|p| p.time_ms >= from_ms);
        let used = recent.map(|p| p.memory_total_mib.saturating_sub(p.memory_free_mib)).max();
        return (format!("GPU{}", gpu.index), used, gpu.memory_total_mib);
    }
    // A MIG instance: its parent's newest sample lists it.
    for gpu in state.gpus.values() {
        let Some(last) = &gpu.last else { continue };
        if let Some(instance) = last.mig.instances.iter().find(|m| m.uuid == uuid) {
            let used = (gpu.last_ms >= from_ms).then_some(instance.memory_used_mib);
            return (format!("GPU{}/mig{}", gpu.index, instance.index), used, instance.memory_total_mib);
        }
    }
    (uuid.to_string(), None, 0)
}
