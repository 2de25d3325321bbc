//! When a suspended attempt (`mode = "suspend"`) may resume: on the SAME GPUs it was
//! suspended on, once each of them has room for it again. A pure rule, as the rest of `sched`.

use crate::sched::table::in_flight_mib;
use crate::sched::{GpuView, RunningTask, SchedConfig};

/// A suspended attempt, as the resume rule needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Suspended {
    /// The task's id.
    pub id: String,
    /// The GPUs (UUIDs) it was placed on and must resume on.
    pub gpus: Vec<String>,
    /// Its memory requirement per GPU, MiB (the no-figure margin when it has none).
    pub requirement_mib: Option<u64>,
    /// Whether the task it gave way to is still waiting (then it does not resume yet: the
    /// room is that task's).
    pub preemptor_waiting: bool,
}

/// Whether `suspended` may resume now: its preemptor no longer waits, and each of its GPUs is
/// present, usable, and has free memory (the sample's, less what running tasks still
/// allocate) for its requirement plus the margin the scheduler keeps.
pub fn may_resume(
    suspended: &Suspended,
    gpus: &[GpuView],
    running: &[RunningTask],
    config: &SchedConfig,
    now_ms: u64,
) -> bool {
    if suspended.preemptor_waiting || suspended.gpus.is_empty() {
        return false;
    }
    let need_mib = match suspended.requirement_mib {
        Some(mib) => mib.saturating_add(config.margin_with_figure_mib),
        None => config.margin_without_figure_mib,
    };
    suspended.gpus.iter().all(|uuid| {
        let Some(view) = gpus.iter().find(|g| &g.uuid == uuid) else { return false };
        if view.unavailable.is_some() {
            return false;
        }
        let in_flight: u64 = running
            .iter()
            .filter(|t| t.gpus.contains(uuid))
            .map(|t| in_flight_mib(t, now_ms, config.in_flight_grace_ms, config.margin_without_figure_mib))
            .sum();
        view.memory_free_mib.saturating_sub(in_flight) >= need_mib
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::{RunningGate, SmBasis};

    fn gpu(uuid: &str, free_mib: u64) -> GpuView {
        GpuView {
            uuid: uuid.into(),
            index: 0,
            memory_total_mib: 40_960,
            memory_free_mib: free_mib,
            sm_active: None,
            sm_occupancy: None,
            dram_active: None,
            sample_age_ms: 0,
            memory_reserved_mib: 0,
            sm_basis: SmBasis::default(),
            mig: None,
            unavailable: None,
        }
    }

    fn victim(waiting: bool) -> Suspended {
        Suspended {
            id: "v".into(),
            gpus: vec!["GPU-0".into()],
            requirement_mib: Some(30_720),
            preemptor_waiting: waiting,
        }
    }

    fn running_on(uuid: &str, requirement_mib: u64, launched_ms: u64) -> RunningTask {
        RunningTask {
            id: "p".into(),
            gpus: vec![uuid.into()],
            requirement_mib: Some(requirement_mib),
            launched_ms,
            observed_mib: None,
            exclusive: false,
            gate: RunningGate { user: 1, array_id: None, time_limit_ms: None },
            sm_estimate: None,
            runtime_estimate_ms: None,
        }
    }

    #[test]
    fn resumes_on_its_own_gpu_once_it_has_room_and_the_preemptor_no_longer_waits() {
        let config = SchedConfig::default();
        let now = 1_000_000;
        // The preemptor still waits: the room is its.
        assert!(!may_resume(&victim(true), &[gpu("GPU-0", 40_960)], &[], &config, now));
        // The preemptor runs there, in flight: no room.
        let preemptor = running_on("GPU-0", 30_720, now - 1_000);
        assert!(!may_resume(&victim(false), &[gpu("GPU-0", 40_960)], &[preemptor], &config, now));
        // Room on another GPU does not count: it resumes on the same one.
        assert!(!may_resume(&victim(false), &[gpu("GPU-1", 40_960)], &[], &config, now));
        // The preemptor ended: room again.
        assert!(may_resume(&victim(false), &[gpu("GPU-0", 40_960)], &[], &config, now));
        // Free memory short of requirement plus margin: no.
        assert!(!may_resume(&victim(false), &[gpu("GPU-0", 32_000)], &[], &config, now));
    }
}
