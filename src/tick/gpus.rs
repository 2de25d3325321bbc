//! GPU readings in the tick: sampling outside the lock, the records they become, and the
//! inventory file `carma submit` reads.

use crate::error::Result;
use crate::gpu::{GpuSample, SinceMarks};
use crate::home::Home;
use crate::inventory::{INVENTORY_SCHEMA, Inventory, InventoryGpu};
use crate::journal::{Record, State, readings};

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

/// The records this tick's readings become ([`crate::journal::readings::gpu_records`]); a
/// change of the probe's status is also put in the report, for the CLI.
pub fn gpu_records(
    state: &State,
    samples: &std::result::Result<Vec<GpuSample>, String>,
    now: u64,
    report: &mut TickReport,
) -> Vec<Record> {
    let (records, probe_status_changed) = readings::gpu_records(state, samples, now);
    if probe_status_changed.is_some() {
        report.probe_status_changed = probe_status_changed;
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
        retries_max: None,
        machine_host: (None, None),
    }
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
