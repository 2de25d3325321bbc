//! Tests of policy names and config parsing, `on_oom`, `window` and the
//! bench fixture. Each states its goal in its name; expected strings are
//! compared verbatim because they are journaled and shown to users.

use crate::sched::{
    BENCH_NOW_MS, Policy, RecoveryConfig, RecoveryDecision, RecoveryMode, SchedConfig, SchedInput, SmBasis,
    WindowSample, bench_fixture, decide, on_oom, window,
};

#[test]
fn policy_names_round_trip_and_unknown_names_list_the_valid_ones() {
    for name in ["exclusive", "round-robin", "magm", "lug", "mug", "first-fit"] {
        let policy: Policy = name.parse().expect("a valid name");
        assert_eq!(policy.to_string(), name);
    }
    let error = "best-fit".parse::<Policy>().expect_err("not a policy");
    assert_eq!(
        error.to_string(),
        "unknown policy \"best-fit\"; valid names: exclusive, round-robin, magm, lug, mug, first-fit"
    );
    assert_eq!("looser".parse::<RecoveryMode>(), Ok(RecoveryMode::Looser));
    let error = "loose".parse::<RecoveryMode>().expect_err("not a mode");
    assert_eq!(error.to_string(), "unknown recovery mode \"loose\"; valid names: exclusive, looser");
}

#[test]
fn config_reads_kebab_case_toml_with_defaults() {
    let config: SchedConfig = toml::from_str(
        "policy = \"first-fit\"\nbackfill = true\n[recovery]\nmode = \"looser\"\nstep-mib = 4096\n",
    )
    .expect("valid config");
    assert_eq!(config.policy, Policy::FirstFit);
    assert!(config.backfill);
    assert_eq!(config.recovery.mode, RecoveryMode::Looser);
    assert_eq!(config.recovery.step_mib, 4096);
    assert_eq!(config.recovery.retries_max_default, RecoveryConfig::default().retries_max_default);
    assert_eq!(config.margin_with_figure_mib, 2048);
    assert_eq!(config.sm_cap, 0.80);
    let empty: SchedConfig = toml::from_str("").expect("all defaults");
    assert_eq!(empty, SchedConfig::default());
    let typo = toml::from_str::<SchedConfig>("polcy = \"magm\"\n");
    assert!(typo.is_err(), "unknown keys are refused");
    let bad = toml::from_str::<SchedConfig>("policy = \"fastest\"\n");
    assert!(bad.is_err(), "unknown policies are refused");
}

fn looser() -> RecoveryConfig {
    RecoveryConfig { mode: RecoveryMode::Looser, looser_steps_max: 1, ..RecoveryConfig::default() }
}

#[test]
fn on_oom_raises_the_largest_figure_by_one_step() {
    let decision = on_oom(1, Some(10_240), Some(12_288), None, 3, &looser());
    assert_eq!(
        decision,
        RecoveryDecision::Requeue {
            requirement_mib: 12_288 + 5120,
            mode: RecoveryMode::Looser,
            reason: "out of memory holding 12.0 GiB against no share; the next attempt gets 17.0 GiB = \
                     max(estimate 10.0 GiB, peak observed 12.0 GiB) + 5.0 GiB step; recovery queue, runs \
                     looser (retry 1 of 3)"
                .to_string(),
        }
    );
}

#[test]
fn on_oom_falls_back_to_exclusive_after_the_looser_tries() {
    let decision = on_oom(2, Some(10_240), None, Some(17_408), 3, &looser());
    assert_eq!(
        decision,
        RecoveryDecision::Requeue {
            requirement_mib: 17_408 + 5120,
            mode: RecoveryMode::Exclusive,
            reason: "out of memory, never seen holding memory, against no share; the next attempt gets \
                     22.0 GiB = max(estimate 10.0 GiB, previous requirement 17.0 GiB) + 5.0 GiB step; \
                     recovery queue, runs exclusive (looser tries used up after 1) (retry 2 of 3)"
                .to_string(),
        }
    );
}

#[test]
fn on_oom_gives_up_past_the_retry_limit_and_without_figures_runs_exclusive() {
    let give_up = on_oom(4, Some(1024), None, None, 3, &looser());
    let reason = "out of memory, never seen holding memory, against no share; 4 memory end(s), retry \
                  limit 3 reached, giving up"
        .to_string();
    assert_eq!(give_up, RecoveryDecision::GiveUp { reason });
    let never = on_oom(1, Some(1024), None, None, 0, &RecoveryConfig::default());
    assert!(matches!(never, RecoveryDecision::GiveUp { .. }), "retries_max 0 never retries");
    let blind = on_oom(1, None, None, None, 3, &looser());
    assert_eq!(
        blind,
        RecoveryDecision::Requeue {
            requirement_mib: 5120,
            mode: RecoveryMode::Exclusive,
            reason: "out of memory, never seen holding memory, against no share; no memory figure, the \
                     next attempt gets 5.0 GiB and runs exclusive in the recovery queue (retry 1 of 3)"
                .to_string(),
        }
    );
}

fn sample(at_ms: u64, free_mib: u64, sm_active: Option<f32>) -> WindowSample {
    WindowSample {
        uuid: "GPU-a".to_string(),
        index: 3,
        at_ms,
        memory_total_mib: 40_960,
        memory_free_mib: free_mib,
        memory_reserved_mib: None,
        sm_active,
        sm_basis: SmBasis::Measured,
        sm_occupancy: None,
        dram_active: Some(f32::NAN),
    }
}

#[test]
fn window_means_activity_inside_the_window_and_takes_newest_memory() {
    assert_eq!(window(&[], 1000, 90_000), None);
    let samples = [
        sample(10_000, 1000, Some(1.0)), // outside (now − window = 20 000)
        sample(30_000, 2000, Some(0.2)),
        sample(90_000, 3000, None),
        sample(95_000, 4000, Some(0.6)),
    ];
    let view = window(&samples, 110_000, 90_000).expect("samples");
    assert_eq!(view.uuid, "GPU-a");
    assert_eq!(view.index, 3);
    assert_eq!(view.memory_free_mib, 4000);
    assert_eq!(view.sample_age_ms, 15_000);
    let sm_active = view.sm_active.expect("two values in the window");
    assert!((sm_active - 0.4).abs() < 1e-6, "mean of 0.2 and 0.6, got {sm_active}");
    assert_eq!(view.sm_occupancy, None, "never measured");
    assert_eq!(view.dram_active, None, "NaN is not a value");
}

#[test]
fn bench_fixture_is_deterministic_and_decide_scales() {
    let (gpus, waiting, running, config) = bench_fixture(1000, 100, 8);
    assert_eq!((gpus.len(), waiting.len(), running.len()), (8, 1000, 100));
    assert_eq!(bench_fixture(1000, 100, 8).1, waiting, "same sizes, same fixture");
    for backfill in [false, true] {
        let config = SchedConfig { backfill, ..config.clone() };
        let (gpus, waiting, running, _) = bench_fixture(10_000, 100, 8);
        let input = SchedInput {
            now_ms: BENCH_NOW_MS,
            gpus: &gpus,
            waiting: &waiting,
            running: &running,
            rr_cursor: 0,
            config: &config,
            gate: Default::default(),
        };
        let decision = decide(&input);
        assert_eq!(decision.placements.len() + decision.pending.len(), 10_000);
    }
}
