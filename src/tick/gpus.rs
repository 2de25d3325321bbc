//! GPU readings in the tick: sampling outside the lock, the records they become, and the
//! inventory file `carma submit` reads.

use crate::error::Result;
use crate::gpu::{GpuSample, SinceMarks};
use crate::home::Home;
use crate::inventory::{INVENTORY_SCHEMA, Inventory, InventoryGpu};
use crate::journal::{Event, Record, State};

use super::{TickContext, TickReport};

/// Samples outside the lock. The "since" marks come from the inventory the previous tick
/// wrote, so sampling never needs the journal.
pub(super) fn sample(
    ctx: &mut TickContext,
    inventory: Option<&Inventory>,
) -> std::result::Result<Vec<GpuSample>, String> {
    if let Some(error) = &ctx.probe_error {
        return Err(error.clone());
    }
    let mut marks = SinceMarks::new();
    for gpu in inventory.map(|i| i.gpus.as_slice()).unwrap_or_default() {
        if let Some(mark) = gpu.util_last_timestamp_us {
            marks.insert(&gpu.uuid, mark);
        }
        marks.insert_known(gpu.index, &gpu.uuid);
    }
    ctx.probe.sample(&marks).map_err(|e| e.to_string())
}

/// MetricSample per GPU, GpuDiscovered for new or changed GPUs, GpuProbeStatus on change.
pub fn gpu_records(
    state: &State,
    samples: &std::result::Result<Vec<GpuSample>, String>,
    now: u64,
    report: &mut TickReport,
) -> Vec<Record> {
    let mut records = Vec::new();
    let mut push = |event| records.push(Record { time_ms: now, event });
    match samples {
        Err(detail) => {
            if state.gpu_probe_error.as_deref() != Some(detail.as_str()) {
                report.probe_status_changed = Some(detail.clone());
                push(Event::GpuProbeStatus { detail: detail.clone() });
            }
        }
        Ok(samples) => {
            if state.gpu_probe_error.is_some() {
                report.probe_status_changed = Some(String::new());
                push(Event::GpuProbeStatus { detail: String::new() });
            }
            for sample in samples {
                // A reading that breaks its own invariants is a probe bug; journaling it
                // would poison every later window, so it is dropped.
                if sample.check().is_err() {
                    continue;
                }
                for event in sample_events(state, sample) {
                    push(event);
                }
            }
        }
    }
    records
}

/// What ingest holds submissions to: the GPU count and the largest GPU's memory.
pub(super) fn limits(
    state: &State,
    samples: &std::result::Result<Vec<GpuSample>, String>,
) -> crate::spec::Limits {
    let largest = match samples {
        Ok(samples) if !samples.is_empty() => samples.iter().map(|s| s.memory_total_mib).max(),
        _ => state.gpus.values().map(|g| g.memory_total_mib).max(),
    };
    crate::spec::Limits {
        machine_gpus: known_gpu_count(state, samples),
        largest_gpu_mib: largest.filter(|_| known_gpu_count(state, samples).is_some()),
        time_limit_max_ms: None,
    }
}

/// GpuDiscovered when the GPU is new or its identity changed, GpuHealthChanged when its
/// health changed, then the MetricSample. An unhealthy GPU's name and memory read empty,
/// which is no change of identity: a lost GPU is not "discovered" again as a 0 MiB one.
fn sample_events(state: &State, sample: &GpuSample) -> Vec<Event> {
    let mut events = Vec::with_capacity(3);
    let known = state.gpus.get(&sample.uuid);
    let healthy = sample.health.is_healthy();
    let changed = known.is_none_or(|g| {
        g.index != sample.index
            || (healthy && (g.name != sample.name || g.memory_total_mib != sample.memory_total_mib))
    });
    if changed {
        events.push(Event::GpuDiscovered {
            uuid: sample.uuid.clone(),
            index: sample.index,
            name: sample.name.clone(),
            memory_total_mib: sample.memory_total_mib,
        });
    }
    let health_before = known.and_then(|g| g.last.as_ref()).map(|last| &last.health);
    if health_before.map_or(!healthy, |before| *before != sample.health) {
        events.push(Event::GpuHealthChanged {
            uuid: sample.uuid.clone(),
            index: sample.index,
            health: sample.health.clone(),
        });
    }
    events.push(Event::MetricSample { sample: sample.clone() });
    events
}

/// Why each GPU or MIG instance in this tick's samples cannot hold work, by UUID: the
/// unhealthy GPUs and every MIG instance on them.
pub(super) fn unhealthy_targets(samples: &[GpuSample]) -> std::collections::BTreeMap<String, String> {
    let mut faults = std::collections::BTreeMap::new();
    for sample in samples {
        let Some(reason) = sample.health.reason() else { continue };
        let why = format!("GPU{} unavailable: {reason}", sample.index);
        for instance in &sample.mig.instances {
            faults.insert(instance.uuid.clone(), why.clone());
        }
        faults.insert(sample.uuid.clone(), why);
    }
    faults
}

/// GPUs on the machine for submit-time checks; unknown while the probe fails, so a
/// machine without a driver keeps queueing rather than rejecting every task.
pub(super) fn known_gpu_count(
    state: &State,
    samples: &std::result::Result<Vec<GpuSample>, String>,
) -> Option<u32> {
    match samples {
        Ok(samples) if !samples.is_empty() => Some(samples.len() as u32),
        Ok(_) if !state.gpus.is_empty() => Some(state.gpus.len() as u32),
        _ => None,
    }
}

pub(super) fn write_inventory(
    home: &Home,
    state: &State,
    samples: &std::result::Result<Vec<GpuSample>, String>,
    now: u64,
) -> Result<()> {
    let Ok(samples) = samples else { return Ok(()) };
    if samples.is_empty() && state.gpus.is_empty() {
        return Ok(());
    }
    let gpus = samples
        .iter()
        .map(|s| InventoryGpu {
            index: s.index,
            uuid: s.uuid.clone(),
            name: s.name.clone(),
            memory_total_mib: s.memory_total_mib,
            util_last_timestamp_us: s.util_last_timestamp_us,
        })
        .collect();
    Inventory { schema: INVENTORY_SCHEMA.into(), updated_ms: now, gpus }.store(home)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::GpuHealth;
    use crate::gpu::fake::tests::sample_minimal;

    fn kinds(events: &[Event]) -> Vec<&'static str> {
        events.iter().map(Event::kind).collect()
    }

    /// Goal: a GPU that goes lost is journaled as a health change, not rediscovered as a
    /// nameless 0 MiB GPU (the case 3); it says so once, and once more when healthy.
    #[test]
    fn a_lost_gpu_is_a_health_change_not_a_new_gpu() {
        let mut state = State::default();
        let healthy = sample_minimal("GPU-2");
        let first = sample_events(&state, &healthy);
        assert_eq!(kinds(&first), ["GpuDiscovered", "MetricSample"]);
        for (seq, event) in first.into_iter().enumerate() {
            state.apply(seq as u64 + 1, &Record { time_ms: 1, event });
        }
        let lost = GpuSample {
            name: String::new(),
            memory_total_mib: 0,
            memory_free_mib: 0,
            health: GpuHealth::Lost { detail: "NVML_ERROR_GPU_IS_LOST reading its handle".into() },
            ..sample_minimal("GPU-2")
        };
        let events = sample_events(&state, &lost);
        assert_eq!(kinds(&events), ["GpuHealthChanged", "MetricSample"]);
        for (seq, event) in events.into_iter().enumerate() {
            state.apply(seq as u64 + 3, &Record { time_ms: 2, event });
        }
        assert_eq!(kinds(&sample_events(&state, &lost)), ["MetricSample"], "said once");
        assert_eq!(kinds(&sample_events(&state, &healthy)), ["GpuHealthChanged", "MetricSample"]);
        assert_eq!(state.gpus["GPU-2"].name, "NVIDIA A100-SXM4-40GB", "the name is kept");
    }

    /// Goal: an unhealthy GPU's MIG instances are unhealthy with it.
    #[test]
    fn unhealthy_targets_cover_mig_instances() {
        let mut sick = sample_minimal("GPU-s");
        sick.index = 4;
        sick.health = GpuHealth::XidError { xid: 79, detail: "fell off the bus".into() };
        sick.mig.enabled = Some(true);
        sick.mig.instances.push(crate::gpu::MigInstance {
            uuid: "MIG-s-0".into(),
            index: 0,
            profile: None,
            memory_total_mib: 10,
            memory_used_mib: 0,
            processes: Vec::new(),
        });
        let faults = unhealthy_targets(&[sample_minimal("GPU-ok"), sick]);
        let why = "GPU4 unavailable: XID 79 error (fell off the bus)";
        assert_eq!(
            faults.into_iter().collect::<Vec<_>>(),
            [("GPU-s".into(), why.into()), ("MIG-s-0".into(), why.into())]
        );
    }
}
