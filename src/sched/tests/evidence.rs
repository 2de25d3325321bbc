//! Evidence before privilege (issue 32): an out-of-memory message earns the recovery queue only
//! when the readings near the attempt's end corroborate it.
//!
//! Method: hand-made readings for each rule and its edge, then a property over random readings
//! that re-derives the verdict from the two rules.

use proptest::prelude::*;

use crate::sched::{GpuAtEnd, MemoryAtEnd, OomJudgement, RecoveryConfig, SupervisorAtEnd, judge_oom};

fn gpu(index: u32, used_mib_max: Option<u64>, total_mib: u64) -> GpuAtEnd {
    GpuAtEnd { name: format!("GPU{index}"), used_mib_max, total_mib, supervisor_used_mib_max: None }
}

/// Goal: a fake out-of-memory line (little memory in use, the job far below its share) is an
/// ordinary failure whose reason gives the figures; the same line with the GPU near full, or
/// the job near its share, is corroborated. Fails on the code before the evidence rule (every
/// message went to recovery).
#[test]
fn no_evidence_fails_with_the_figures_evidence_requeues() {
    let cfg = RecoveryConfig::default();
    let fake = MemoryAtEnd {
        gpus: vec![gpu(0, Some(1200), 40960)],
        attempt_peak_mib: Some(300),
        requirement_mib: Some(8192),
        supervisor: None,
    };
    assert_eq!(
        judge_oom(&fake, &cfg),
        OomJudgement::Unsupported(
            "out-of-memory message without evidence: GPU0 had 1200 of 40960 MiB used at the end (95 % of a \
             GPU would be evidence); the job's own peak was 300 of its 8192 MiB share (90 % would be); \
             not retried"
                .into()
        )
    );
    let full = MemoryAtEnd { gpus: vec![gpu(0, Some(39_000), 40960)], ..fake.clone() };
    assert_eq!(
        judge_oom(&full, &cfg),
        OomJudgement::Corroborated("GPU0 had 39000 of 40960 MiB used near the end".into())
    );
    let share = MemoryAtEnd {
        gpus: vec![gpu(1, Some(20_000), 40960)],
        attempt_peak_mib: Some(7500),
        requirement_mib: Some(8192),
        supervisor: None,
    };
    assert_eq!(
        judge_oom(&share, &cfg),
        OomJudgement::Corroborated(
            "the job held 7500 MiB of its 8192 MiB share, and GPU1 had 20000 MiB used near the end".into()
        )
    );
    // A peak long past: the GPU near the end no longer holds that much.
    let past = MemoryAtEnd { gpus: vec![gpu(1, Some(2000), 40960)], ..share.clone() };
    assert!(matches!(judge_oom(&past, &cfg), OomJudgement::Unsupported(_)));
    // No readings at all, no share: nothing corroborates.
    let blind = MemoryAtEnd {
        gpus: vec![gpu(0, None, 40960)],
        attempt_peak_mib: None,
        requirement_mib: None,
        supervisor: None,
    };
    assert_eq!(
        judge_oom(&blind, &cfg),
        OomJudgement::Unsupported(
            "out-of-memory message without evidence: GPU0 had no reading near the end (95 % of a GPU would \
             be evidence); the job had no memory share to compare with; not retried"
                .into()
        )
    );
}

/// Goal: the thresholds are inclusive and come from the config.
#[test]
fn thresholds_are_inclusive_and_configurable() {
    let cfg = RecoveryConfig {
        evidence_gpu_percent: 50,
        evidence_process_percent: 50,
        ..RecoveryConfig::default()
    };
    let at = |used, peak| MemoryAtEnd {
        gpus: vec![gpu(0, Some(used), 1000)],
        attempt_peak_mib: Some(peak),
        requirement_mib: Some(100),
        supervisor: None,
    };
    assert!(matches!(judge_oom(&at(500, 0), &cfg), OomJudgement::Corroborated(_)), "50 % of the GPU");
    assert!(matches!(judge_oom(&at(499, 49), &cfg), OomJudgement::Unsupported(_)));
    assert!(matches!(judge_oom(&at(60, 50), &cfg), OomJudgement::Corroborated(_)), "50 % of the share");
    assert!(matches!(judge_oom(&at(49, 50), &cfg), OomJudgement::Unsupported(_)), "GPU below the share");
}

/// Goal: an out-of-memory between two ticks, which only the attempt's supervisor saw, is
/// corroborated by the same two rules: the GPU near full in its last readings (the tryout:
/// 40000 of 40960 MiB, the tick's own readings before and after showing little), or the job
/// near its share by its readings (7680 of 8192 MiB on an otherwise idle GPU). A printed line
/// with nothing seen by either reader stays an ordinary failure, whose reason says what the
/// supervisor read. Fails on the code before the supervisor's readings (no such input: the
/// tick's readings alone were judged, and the first two were Unsupported).
#[test]
fn the_supervisors_readings_corroborate_what_the_tick_missed() {
    let cfg = RecoveryConfig::default();
    let seen = |used: Option<u64>, peak: Option<u64>| MemoryAtEnd {
        gpus: vec![GpuAtEnd { supervisor_used_mib_max: used, ..gpu(0, Some(1200), 40960) }],
        attempt_peak_mib: None,
        requirement_mib: Some(8192),
        supervisor: Some(SupervisorAtEnd {
            peak_mib: peak,
            interval_ms: 500,
            count: 4,
            last_before_exit_ms: Some(300),
        }),
    };
    assert_eq!(
        judge_oom(&seen(Some(40_000), Some(7680)), &cfg),
        OomJudgement::Corroborated(
            "GPU0 had 40000 of 40960 MiB used in its supervisor's readings before the exit".into()
        )
    );
    assert_eq!(
        judge_oom(&seen(Some(7680), Some(7680)), &cfg),
        OomJudgement::Corroborated(
            "the job held 7680 MiB of its 8192 MiB share, and GPU0 had 7680 MiB used in its supervisor's \
             readings before the exit"
                .into()
        )
    );
    assert_eq!(
        judge_oom(&seen(Some(1200), None), &cfg),
        OomJudgement::Unsupported(
            "out-of-memory message without evidence: GPU0 had 1200 of 40960 MiB used at the end (95 % of a \
             GPU would be evidence); the job's own memory was never seen, against its 8192 MiB share (90 % \
             would be); its supervisor read its GPUs 4 time(s), every 500 ms, the last 0.3 s before the exit; \
             not retried"
                .into()
        )
    );
    let none_taken = MemoryAtEnd {
        supervisor: Some(SupervisorAtEnd {
            peak_mib: None,
            interval_ms: 500,
            count: 0,
            last_before_exit_ms: None,
        }),
        ..seen(None, None)
    };
    let OomJudgement::Unsupported(reason) = judge_oom(&none_taken, &cfg) else { panic!("no evidence") };
    assert!(reason.ends_with("; its supervisor took no reading of its GPUs; not retried"), "{reason}");
}

fn arb_at_end() -> impl Strategy<Value = MemoryAtEnd> {
    let used = || prop::option::of(0u64..90_000);
    let one = (used(), prop_oneof![Just(0u64), 1u64..90_000], used());
    let supervisor = prop::option::of((used(), 1u64..1000, 0u64..20, prop::option::of(0u64..30_000)));
    (prop::collection::vec(one, 0..4), used(), used(), supervisor).prop_map(
        |(gpus, attempt_peak_mib, requirement_mib, supervisor)| MemoryAtEnd {
            gpus: gpus
                .into_iter()
                .enumerate()
                .map(|(i, (used, total, seen))| GpuAtEnd {
                    supervisor_used_mib_max: seen,
                    ..gpu(i as u32, used, total)
                })
                .collect(),
            attempt_peak_mib,
            requirement_mib,
            supervisor: supervisor.map(|(peak_mib, interval_ms, count, last_before_exit_ms)| {
                SupervisorAtEnd { peak_mib, interval_ms, count, last_before_exit_ms }
            }),
        },
    )
}

proptest! {
    /// Architecture Invariant: an out-of-memory message is corroborated exactly when a GPU of
    /// the attempt was near full near its end, or the job held near its share and a GPU still
    /// held that much near the end, by the tick's readings or its supervisor's alike (one rule,
    /// both readers); an unsupported one's reason names every GPU.
    #[test]
    fn corroborated_exactly_by_the_two_rules(at_end in arb_at_end(), gpu_pct in 1u32..=100, proc_pct in 1u32..=100) {
        let cfg = RecoveryConfig { evidence_gpu_percent: gpu_pct, evidence_process_percent: proc_pct, ..RecoveryConfig::default() };
        let used = |g: &GpuAtEnd| g.used_mib_max.max(g.supervisor_used_mib_max);
        let full = at_end.gpus.iter().any(|g| {
            g.total_mib > 0 && used(g).is_some_and(|u| u * 100 >= g.total_mib * u64::from(gpu_pct))
        });
        let peak = at_end.attempt_peak_mib.max(at_end.supervisor.as_ref().and_then(|s| s.peak_mib));
        let share = match (at_end.requirement_mib.filter(|&r| r > 0), peak) {
            (Some(requirement), Some(peak)) => {
                let threshold = (requirement * u64::from(proc_pct)).div_ceil(100);
                peak >= threshold && at_end.gpus.iter().any(|g| used(g).is_some_and(|u| u >= threshold))
            }
            _ => false,
        };
        match judge_oom(&at_end, &cfg) {
            OomJudgement::Corroborated(_) => prop_assert!(full || share),
            OomJudgement::Unsupported(reason) => {
                prop_assert!(!full && !share);
                prop_assert!(reason.starts_with("out-of-memory message without evidence: "));
                for g in &at_end.gpus {
                    prop_assert!(reason.contains(&g.name));
                }
            }
        }
    }
}
