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
pub fn sample(
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
                let known = state.gpus.get(&sample.uuid);
                let changed = known.is_none_or(|g| {
                    g.index != sample.index
                        || g.name != sample.name
                        || g.memory_total_mib != sample.memory_total_mib
                });
                if changed {
                    push(Event::GpuDiscovered {
                        uuid: sample.uuid.clone(),
                        index: sample.index,
                        name: sample.name.clone(),
                        memory_total_mib: sample.memory_total_mib,
                    });
                }
                push(Event::MetricSample { sample: sample.clone() });
            }
        }
    }
    records
}

/// GPUs on the machine for submit-time checks; unknown while the probe fails, so a
/// machine without a driver keeps queueing rather than rejecting every task.
pub fn known_gpu_count(state: &State, samples: &std::result::Result<Vec<GpuSample>, String>) -> Option<u32> {
    match samples {
        Ok(samples) if !samples.is_empty() => Some(samples.len() as u32),
        Ok(_) if !state.gpus.is_empty() => Some(state.gpus.len() as u32),
        _ => None,
    }
}

pub fn write_inventory(
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
