//! The records GPU readings become: shared by the tick and the Slurm node hooks, which both
//! journal what the probe saw, so it lives below both.

use crate::gpu::GpuSample;

use super::{Event, Record, State};

/// MetricSample per GPU, GpuDiscovered for new or changed GPUs, GpuProbeStatus on change;
/// with the probe's new status (the message, or empty when it recovered) when it changed.
pub fn gpu_records(
    state: &State,
    samples: &std::result::Result<Vec<GpuSample>, String>,
    now: u64,
) -> (Vec<Record>, Option<String>) {
    let mut records = Vec::new();
    let mut probe_status_changed = None;
    let mut push = |event| records.push(Record { time_ms: now, event });
    match samples {
        Err(detail) => {
            if state.gpu_probe_error.as_deref() != Some(detail.as_str()) {
                probe_status_changed = Some(detail.clone());
                push(Event::GpuProbeStatus { detail: detail.clone() });
            }
        }
        Ok(samples) => {
            if state.gpu_probe_error.is_some() {
                probe_status_changed = Some(String::new());
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
    (records, probe_status_changed)
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
}
