//! When a suspended attempt (`mode = "suspend"`) may resume: on the SAME GPUs it was
//! suspended on, once each of them has room for it again; and the room it keeps there
//! meanwhile. Pure rules, as the rest of `sched`.
//!
//! As Slurm resumes a suspended job before it starts new work on its nodes, a suspended
//! attempt whose preemptor no longer waits (it started, ended or was cancelled) keeps its
//! requirement on its GPUs ([`held_room`]): new tasks only use what is left beyond it, so its
//! room is free again as soon as the preemptor's is, and it resumes then.

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
    /// GPU memory its own processes hold now, MiB, by the tick's attribution (`None`: none
    /// seen). A suspended job holds none; one whose processes were continued may. That memory
    /// is its own: it is counted once (in the GPU's sample, less from its held room) and never
    /// stands between it and its resume.
    pub observed_mib: Option<u64>,
}

/// The room `suspended` keeps on its GPUs, as the running task the placement decision counts
/// (`template` gives its owner, exclusivity and estimates): `None` while its preemptor still
/// waits (the room is that task's); otherwise its requirement, counted as a launching task's
/// (launched now, nothing observed: the whole requirement is in flight, see
/// `in_flight_mib`, less what its own processes hold already: that is in the sample), so new
/// tasks only use what is left beyond it. With `in-flight-grace-ms = 0` nothing is in flight
/// and no room is kept.
pub fn held_room(suspended: &Suspended, template: RunningTask, now_ms: u64) -> Option<RunningTask> {
    if suspended.preemptor_waiting {
        return None;
    }
    Some(RunningTask {
        id: suspended.id.clone(),
        gpus: suspended.gpus.clone(),
        requirement_mib: suspended.requirement_mib,
        launched_ms: now_ms,
        observed_mib: suspended.observed_mib,
        ..template
    })
}

/// Whether `suspended` may resume now: its preemptor no longer waits, and each of its GPUs is
/// present, usable, and has free memory (the sample's, plus what its own processes hold
/// there, less what running tasks still allocate) for its requirement plus the margin the
/// scheduler keeps.
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
            // Its own held room (`held_room`) is what it resumes into.
            .filter(|t| t.gpus.contains(uuid) && t.id != suspended.id)
            .map(|t| in_flight_mib(t, now_ms, config.in_flight_grace_ms, config.margin_without_figure_mib))
            .sum();
        let used_mib = view.memory_total_mib.saturating_sub(view.memory_free_mib);
        let own_mib = suspended.observed_mib.unwrap_or(0).min(used_mib);
        view.memory_free_mib.saturating_add(own_mib).saturating_sub(in_flight) >= need_mib
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
            observed_mib: None,
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
        // Its own held room does not stand in its way.
        let held = held_room(&victim(false), running_on("GPU-0", 0, 0), now).expect("held");
        assert!(may_resume(&victim(false), &[gpu("GPU-0", 40_960)], &[held], &config, now));
    }

    fn newcomer(requirement_mib: u64) -> crate::sched::WaitingTask {
        crate::sched::WaitingTask {
            id: "w".into(),
            submit_seq: 0,
            gpus: 1,
            requirement_mib: Some(requirement_mib),
            recovery: None,
            gate: Default::default(),
            mig_profile: None,
            submitted_ms: 0,
            sm_estimate: None,
            runtime_estimate_ms: None,
            expected_run: None,
        }
    }

    /// Goal: once its preemptor no longer waits, a suspended attempt keeps its requirement on
    /// its GPU: a newcomer gets only what is left beyond it (Slurm resumes a suspended job
    /// before starting new work on its nodes); while the preemptor waits, the room is the
    /// preemptor's and nothing is kept. Method: the decision core on one 40 GiB GPU whose
    /// sample shows the victim's memory released, with and without the held room.
    #[test]
    fn a_suspended_attempt_keeps_its_room_once_its_preemptor_no_longer_waits() {
        let config = SchedConfig::default();
        let now = 1_000_000;
        let gpus = [gpu("GPU-0", 40_960)];
        let decide = |running: &[RunningTask], waiting: &[crate::sched::WaitingTask]| {
            crate::sched::decide(&crate::sched::SchedInput {
                now_ms: now,
                gpus: &gpus,
                waiting,
                running,
                rr_cursor: 0,
                config: &config,
                gate: Default::default(),
            })
        };
        assert_eq!(held_room(&victim(true), running_on("GPU-0", 0, 0), now), None);
        let held = held_room(&victim(false), running_on("GPU-0", 0, 0), now).expect("held");
        assert_eq!((held.id.as_str(), held.requirement_mib, held.launched_ms), ("v", Some(30_720), now));
        // 20 GiB does not fit beside the victim's 30 GiB: it waits.
        let decision = decide(std::slice::from_ref(&held), &[newcomer(20_480)]);
        assert!(decision.placements.is_empty(), "{decision:?}");
        // 8 GiB fits in what is left beyond it (10 GiB less the 2 GiB margin).
        let decision = decide(std::slice::from_ref(&held), &[newcomer(8_192)]);
        assert_eq!(decision.placements.len(), 1, "{decision:?}");
        // Without the held room (the code before), 20 GiB took the victim's room.
        let decision = decide(&[], &[newcomer(20_480)]);
        assert_eq!(decision.placements.len(), 1, "{decision:?}");
    }

    /// Goal: a suspended attempt whose own processes hold GPU memory again (continued by
    /// someone other than carma) is neither stuck behind its own memory nor counted twice: it
    /// may resume once the rest fits, and a newcomer sees its requirement once, not its memory
    /// plus its held room. Fails on the code before (its own 30 GiB stood in its way, and a
    /// newcomer saw 30 + 30 GiB taken).
    #[test]
    fn a_suspended_attempts_own_memory_is_counted_once() {
        let config = SchedConfig::default();
        let now = 1_000_000;
        let mut own = victim(false);
        own.observed_mib = Some(30_720);
        // Its processes hold 30 GiB of the 40 GiB GPU.
        let gpus = [gpu("GPU-0", 40_960 - 30_720)];
        assert!(may_resume(&own, &gpus, &[], &config, now), "its own memory is its room");
        let held = held_room(&own, running_on("GPU-0", 0, 0), now).expect("held");
        let decide_one = |mib| {
            crate::sched::decide(&crate::sched::SchedInput {
                now_ms: now,
                gpus: &gpus,
                waiting: &[newcomer(mib)],
                running: std::slice::from_ref(&held),
                rr_cursor: 0,
                config: &config,
                gate: Default::default(),
            })
        };
        assert_eq!(decide_one(8_192).placements.len(), 1, "10 GiB are left beyond its 30 GiB");
        assert!(decide_one(12_288).placements.is_empty(), "12 GiB are not");
    }
}
