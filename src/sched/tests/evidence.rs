//! Evidence before privilege (issue 32): an out-of-memory message earns the recovery queue only
//! when the readings near the attempt's end corroborate it.
//!
//! Method: hand-made readings for each rule and its edge, then a property over random readings
//! that re-derives the verdict from the two rules.

use proptest::prelude::*;

use crate::sched::{GpuAtEnd, MemoryAtEnd, OomJudgement, RecoveryConfig, judge_oom};

fn gpu(index: u32, used_mib_max: Option<u64>, total_mib: u64) -> GpuAtEnd {
    GpuAtEnd { name: format!("GPU{index}"), used_mib_max, total_mib }
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
    let blind =
        MemoryAtEnd { gpus: vec![gpu(0, None, 40960)], attempt_peak_mib: None, requirement_mib: None };
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
    };
    assert!(matches!(judge_oom(&at(500, 0), &cfg), OomJudgement::Corroborated(_)), "50 % of the GPU");
    assert!(matches!(judge_oom(&at(499, 49), &cfg), OomJudgement::Unsupported(_)));
    assert!(matches!(judge_oom(&at(60, 50), &cfg), OomJudgement::Corroborated(_)), "50 % of the share");
    assert!(matches!(judge_oom(&at(49, 50), &cfg), OomJudgement::Unsupported(_)), "GPU below the share");
}

fn arb_at_end() -> impl Strategy<Value = MemoryAtEnd> {
    let one = (prop::option::of(0u64..90_000), prop_oneof![Just(0u64), 1u64..90_000]);
    (prop::collection::vec(one, 0..4), prop::option::of(0u64..90_000), prop::option::of(0u64..90_000))
        .prop_map(|(gpus, attempt_peak_mib, requirement_mib)| MemoryAtEnd {
            gpus: gpus.into_iter().enumerate().map(|(i, (used, total))| gpu(i as u32, used, total)).collect(),
            attempt_peak_mib,
            requirement_mib,
        })
}

proptest! {
    /// Architecture Invariant: an out-of-memory message is corroborated exactly when a GPU of
    /// the attempt was near full near its end, or the job held near its share and a GPU still
    /// held that much near the end; an unsupported one's reason names every GPU.
    #[test]
    fn corroborated_exactly_by_the_two_rules(at_end in arb_at_end(), gpu_pct in 1u32..=100, proc_pct in 1u32..=100) {
        let cfg = RecoveryConfig { evidence_gpu_percent: gpu_pct, evidence_process_percent: proc_pct, ..RecoveryConfig::default() };
        let full = at_end.gpus.iter().any(|g| {
            g.total_mib > 0 && g.used_mib_max.is_some_and(|u| u * 100 >= g.total_mib * u64::from(gpu_pct))
        });
        let share = match (at_end.requirement_mib.filter(|&r| r > 0), at_end.attempt_peak_mib) {
            (Some(requirement), Some(peak)) => {
                let threshold = (requirement * u64::from(proc_pct)).div_ceil(100);
                peak >= threshold && at_end.gpus.iter().any(|g| g.used_mib_max.is_some_and(|u| u >= threshold))
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
