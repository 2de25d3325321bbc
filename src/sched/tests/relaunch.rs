//! One rule for a relaunch (issue 40): whether an attempt was stopped over its share or ran
//! out of memory, the next requirement, the queue it waits in and the give-up come from
//! `sched::relaunch`.
//!
//! Method: the tryout's cases by hand (a job that declared 4 GiB and used 12, one sized by
//! carma's estimate at 1,647 MiB that used 6 GiB, one that filled its GPU within its declared
//! 8 GiB), then properties over random inputs that re-derive each part of the rule. Each
//! fails on the code before relaunches, which had no such rule: a stop for memory failed the
//! task, and `on_oom` put every out-of-memory in the recovery queue whoever's figure it was.

use proptest::prelude::*;

use crate::sched::{
    MemoryEnd, Miss, RecoveryConfig, RecoveryMode, RelaunchDecision, RelaunchInput, RelaunchQueue,
    ShareSource, miss, relaunch,
};

const MARGIN_MIB: u64 = 1024;

fn over_share(used_mib: u64, share_mib: u64, source: ShareSource) -> RelaunchInput {
    RelaunchInput {
        end: MemoryEnd::OverShare { used_mib, gpu: "GPU0".into(), given: true },
        share_mib: Some(share_mib),
        source,
        peak_mib: Some(used_mib),
        estimate_mib: Some(share_mib),
        previous_mib: None,
        memory_ends: 1,
        retries_max: 3,
    }
}

/// Goal: the user who declared 4 GiB and used 12 goes back to the main queue with at least
/// what it used; carma's estimate of 1,647 MiB that the job outgrew to 6 GiB sends it to the
/// recovery queue; the reason says what it used, what it was given and what it gets next.
#[test]
fn the_tryouts_under_declared_and_under_estimated_jobs() {
    let cfg = RecoveryConfig::default();
    let declared = relaunch(&over_share(12_288, 4096, ShareSource::Declared), &cfg, MARGIN_MIB);
    assert_eq!(
        declared,
        RelaunchDecision::Relaunch {
            requirement_mib: 12_288 + 5120,
            queue: RelaunchQueue::Main,
            reason:
                "used 12.0 GiB on GPU0 over its 4.0 GiB share (declared); the next attempt gets 17.0 GiB \
                     = max(estimate 4.0 GiB, peak observed 12.0 GiB, share 4.0 GiB) + 5.0 GiB step; back to \
                     its place in the main queue (the user's figure was short) (retry 1 of 3)"
                    .into(),
        }
    );
    let estimated = relaunch(&over_share(6144, 1647, ShareSource::Estimate), &cfg, MARGIN_MIB);
    assert!(
        matches!(&estimated, RelaunchDecision::Relaunch { requirement_mib: 11_264, queue: RelaunchQueue::Recovery(RecoveryMode::Exclusive), reason }
            if reason.starts_with("used 6.0 GiB on GPU0 over its 1.6 GiB share (carma's estimate); the next attempt gets 11.0 GiB")),
        "{estimated:?}"
    );
    // A job that filled its GPU holding 7.5 of its declared 8 GiB: the GPU filled around it,
    // carma's placement was short: recovery.
    let filled = RelaunchInput {
        end: MemoryEnd::OutOfMemory,
        peak_mib: Some(7680),
        ..over_share(7680, 8192, ShareSource::Declared)
    };
    assert_eq!(miss(&filled), Miss::Carma);
    assert!(matches!(
        relaunch(&filled, &cfg, MARGIN_MIB),
        RelaunchDecision::Relaunch { queue: RelaunchQueue::Recovery(_), .. }
    ));
    // The same message from a job that held 30 GiB of its declared 1 GiB: the user's.
    let grab =
        RelaunchInput { end: MemoryEnd::OutOfMemory, ..over_share(30_720, 1024, ShareSource::Declared) };
    assert_eq!(miss(&grab), Miss::User);
}

/// Goal: `--max-retries 0` keeps the ending from before relaunches (a give-up, Failed), with
/// the figures in its reason; a retry limit reached gives up.
#[test]
fn no_retries_gives_up_with_the_figures() {
    let cfg = RecoveryConfig::default();
    let input = RelaunchInput { retries_max: 0, ..over_share(12_288, 4096, ShareSource::Declared) };
    assert_eq!(
        relaunch(&input, &cfg, MARGIN_MIB),
        RelaunchDecision::GiveUp {
            reason:
                "used 12.0 GiB on GPU0 over its 4.0 GiB share (declared); 1 memory end(s), retry limit 0 \
                     reached, giving up"
                    .into()
        }
    );
}

fn arb_source() -> impl Strategy<Value = ShareSource> {
    prop_oneof![
        Just(ShareSource::Declared),
        Just(ShareSource::Estimate),
        Just(ShareSource::Learned),
        Just(ShareSource::Default),
    ]
}

fn arb_input() -> impl Strategy<Value = RelaunchInput> {
    let mib = || proptest::option::of(0u64..80_000);
    (
        (any::<bool>(), any::<bool>(), 0u64..80_000),
        mib(),
        arb_source(),
        mib(),
        mib(),
        mib(),
        (0u32..8, 0u32..8),
    )
        .prop_map(|((stop, given, used), share, source, peak, estimate, previous, (ends, retries))| {
            let end = if stop {
                MemoryEnd::OverShare { used_mib: used, gpu: "GPU0".into(), given }
            } else {
                MemoryEnd::OutOfMemory
            };
            RelaunchInput {
                end,
                share_mib: share,
                source,
                peak_mib: if stop { Some(peak.unwrap_or(0).max(used)) } else { peak },
                estimate_mib: estimate,
                previous_mib: previous,
                memory_ends: ends,
                retries_max: retries,
            }
        })
}

fn arb_cfg() -> impl Strategy<Value = RecoveryConfig> {
    (1u64..10_000, any::<bool>(), 0u32..4).prop_map(|(step_mib, looser, looser_steps_max)| RecoveryConfig {
        step_mib,
        mode: if looser { RecoveryMode::Looser } else { RecoveryMode::Exclusive },
        looser_steps_max,
        ..RecoveryConfig::default()
    })
}

proptest! {
    /// Architecture Invariant (one rule for a relaunch): the next requirement is at least the
    /// observed peak plus the margin and at least the growth figure (the largest figure plus
    /// one step), and never below a figure the task had; the main queue is exactly a user's
    /// under-declaration (a declared share the job outgrew, or a GPU it was not given); a
    /// give-up exactly past the retry limit; the reason names what it used, what it was given
    /// and what the next attempt gets.
    #[test]
    fn every_relaunch_keeps_the_rule(input in arb_input(), cfg in arb_cfg(), margin in 0u64..4096) {
        let k = input.memory_ends.max(1);
        let decision = relaunch(&input, &cfg, margin);
        let gib = |mib: u64| format!("{:.1} GiB", mib as f64 / 1024.0);
        match decision {
            RelaunchDecision::GiveUp { reason } => {
                prop_assert!(k > input.retries_max);
                let limit = format!("retry limit {} reached", input.retries_max);
                prop_assert!(reason.contains(&limit), "names the limit: {}", reason);
            }
            RelaunchDecision::Relaunch { requirement_mib, queue, reason } => {
                prop_assert!(k <= input.retries_max);
                let figures = [input.estimate_mib, input.peak_mib, input.share_mib, input.previous_mib];
                let base = figures.iter().flatten().max().copied();
                prop_assert!(requirement_mib >= base.unwrap_or(0).saturating_add(cfg.step_mib));
                if let Some(peak) = input.peak_mib {
                    prop_assert!(requirement_mib >= peak.saturating_add(margin));
                    prop_assert!(reason.contains(&gib(peak)), "names the peak: {}", reason);
                }
                let trespass = matches!(input.end, MemoryEnd::OverShare { given: false, .. });
                if let Some(share) = input.share_mib.filter(|_| !trespass) {
                    prop_assert!(reason.contains(&format!("its {} share", gib(share))), "names the share: {}", reason);
                }
                let gets = format!("the next attempt gets {}", gib(requirement_mib));
                prop_assert!(reason.contains(&gets), "names the next figure: {}", reason);
                let outgrew = match input.end {
                    MemoryEnd::OverShare { given, .. } => !given || input.source == ShareSource::Declared,
                    MemoryEnd::OutOfMemory => input.source == ShareSource::Declared
                        && matches!((input.peak_mib, input.share_mib), (Some(p), Some(s)) if p > s),
                };
                let user = outgrew && base.is_some();
                prop_assert_eq!(queue == RelaunchQueue::Main, user, "{:?}", queue);
                if let RelaunchQueue::Recovery(mode) = queue {
                    let looser = cfg.mode == RecoveryMode::Looser && k <= cfg.looser_steps_max && base.is_some();
                    prop_assert_eq!(mode == RecoveryMode::Looser, looser);
                }
            }
        }
    }

    /// The same input gives the same decision (the rule is pure).
    #[test]
    fn the_rule_is_a_function(input in arb_input(), cfg in arb_cfg()) {
        prop_assert_eq!(relaunch(&input, &cfg, MARGIN_MIB), relaunch(&input, &cfg, MARGIN_MIB));
    }
}
