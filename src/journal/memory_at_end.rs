//! What the journal's GPU readings and an attempt's own sampler saw of its memory near its
//! end, gathered for `sched::judge_oom`. Shared by the tick (a local attempt, its
//! supervisor's readings from `exit.json`) and the Slurm Epilog (a Slurm job, its node
//! watcher's readings), so that both gather the same readings the same way and one pure rule
//! judges them: there is no second path that believes a reading differently.
//!
//! The readings are State's: each GPU's recent history (one point per journaled sample,
//! memory in use = total − free) and, for a MIG instance, its parent's newest sample. They are
//! taken from `max(launch, exit − evidence-window-ms)` on. The caller's own latest readings
//! ([`AtEnd::readings_now`], taken before the exit was observed) count too while the exit is
//! less than the window old: a process that died a moment ago may still hold its memory in
//! them. The sampler's readings ([`AtEnd::sampler`]) give its peak and, of its last readings,
//! those taken in the same window before the exit.

use std::collections::BTreeMap;

use crate::exec::GpuReadings;
use crate::exec::gpu_watch::Reading;
use crate::sched::{GpuAtEnd, MemoryAtEnd, RecoveryConfig, SupervisorAtEnd};

use super::State;
use super::state::Attempt;

/// One target's memory in the caller's latest readings: (used MiB, total MiB).
pub type MemoryReading = (u64, u64);

/// What the caller knows of an attempt's end besides State.
#[derive(Debug, Clone, Copy)]
pub struct AtEnd<'a> {
    /// When the attempt ended, Unix ms (capped at `now_ms`).
    pub ended_ms: u64,
    /// The most the attempt's own processes were seen holding by the journal's readings, MiB.
    pub peak_mib: Option<u64>,
    /// The caller's latest reading of every GPU and MIG instance, by UUID.
    pub readings_now: &'a BTreeMap<String, MemoryReading>,
    /// The attempt's own sampler's readings (its supervisor's, or a Slurm job's watcher's).
    pub sampler: Option<&'a GpuReadings>,
    /// Now, Unix ms.
    pub now_ms: u64,
}

/// What the readings saw of `attempt`'s GPUs between `max(launch, ended − window)` and now,
/// with its observed peak and its requirement, and what its sampler read in that window.
pub fn memory_at_end(state: &State, attempt: &Attempt, end: &AtEnd<'_>, cfg: &RecoveryConfig) -> MemoryAtEnd {
    let ended_ms = end.ended_ms.min(end.now_ms);
    let started_ms = attempt.launched_ms.unwrap_or(attempt.placed_ms);
    let from_ms = ended_ms.saturating_sub(cfg.evidence_window_ms).max(started_ms);
    let now_counts = end.now_ms.saturating_sub(ended_ms) <= cfg.evidence_window_ms;
    let gpus = attempt
        .gpus
        .iter()
        .map(|uuid| {
            let (name, mut used_mib_max, mut total_mib) = journaled(state, uuid, from_ms);
            if let Some(&(used, total)) = end.readings_now.get(uuid).filter(|_| now_counts) {
                used_mib_max = used_mib_max.max(Some(used));
                total_mib = total_mib.max(total);
            }
            let supervisor_used_mib_max = end.sampler.and_then(|readings| {
                near_end(readings, from_ms, ended_ms)
                    .filter_map(|r| r.gpus.iter().find(|g| &g.uuid == uuid))
                    .map(|g| g.used_mib)
                    .max()
            });
            if total_mib == 0 {
                // A GPU the journal never described: the sampler's reading says how large it is.
                total_mib = end
                    .sampler
                    .and_then(|r| r.last.iter().flat_map(|r| &r.gpus).find(|g| &g.uuid == uuid))
                    .map_or(0, |g| g.total_mib);
            }
            GpuAtEnd { name, used_mib_max, total_mib, supervisor_used_mib_max }
        })
        .collect();
    let supervisor = end.sampler.map(|readings| SupervisorAtEnd {
        peak_mib: readings.peak_mib,
        interval_ms: readings.interval_ms,
        count: readings.count,
        last_before_exit_ms: readings.last.last().map(|r| ended_ms.saturating_sub(r.time_ms)),
    });
    MemoryAtEnd { gpus, attempt_peak_mib: end.peak_mib, requirement_mib: attempt.requirement_mib, supervisor }
}

/// The sampler's last readings taken between `from_ms` and the exit.
fn near_end(readings: &GpuReadings, from_ms: u64, ended_ms: u64) -> impl Iterator<Item = &Reading> {
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
