//! Expect tests: each policy and rule on a tiny fixture, reasons verbatim.
//!
//! Fixture GPUs have 40 GiB; "busy" GPUs have foreign memory in use so that
//! exclusive-first does not take them as idle.

use super::{Fixture, check};
use crate::sched::{Policy, RecoveryMode};

/// Three busy GPUs: 10.0, 31.2 and 20.0 GiB free; SM 0.30, 0.50, 0.10.
fn three_busy(policy: Policy) -> Fixture {
    Fixture::new(policy).gpu(10.0, Some(0.3)).gpu(31.2, Some(0.5)).gpu(20.0, Some(0.1))
}

#[test]
fn magm_spreads_by_effective_free_memory() {
    let fixture =
        three_busy(Policy::Magm).task("a", 1, Some(12.0)).task("b", 1, Some(12.0)).task("c", 1, Some(12.0));
    check(
        &fixture,
        r#"
place a on GPU-1: magm: GPU1 has most free memory (31.2 GiB)
place b on GPU-2: magm: GPU2 has most free memory (20.0 GiB)
place c on GPU-1: magm: GPU1 has most free memory (19.2 GiB)
cursor 0
"#,
    );
}

#[test]
fn lug_picks_lowest_sm_active() {
    let fixture = three_busy(Policy::Lug).task("a", 1, Some(12.0)).task("b", 1, Some(12.0));
    check(
        &fixture,
        r#"
place a on GPU-2: lug: GPU2 has lowest SmActive (0.10)
place b on GPU-1: lug: GPU1 has lowest SmActive (0.50)
cursor 0
"#,
    );
}

#[test]
fn mug_picks_least_free_memory_that_fits() {
    let fixture = three_busy(Policy::Mug).task("a", 1, Some(12.0)).task("b", 1, Some(4.0));
    check(
        &fixture,
        r#"
place a on GPU-2: mug: GPU2 has least free memory that fits (20.0 GiB)
place b on GPU-2: mug: GPU2 has least free memory that fits (8.0 GiB)
cursor 0
"#,
    );
}

#[test]
fn first_fit_picks_lowest_index_that_fits() {
    let fixture = three_busy(Policy::FirstFit).task("a", 1, Some(12.0)).task("b", 1, None);
    check(
        &fixture,
        r#"
place a on GPU-1: first-fit: GPU1 is the lowest-index GPU that fits (31.2 GiB free)
place b on GPU-0: first-fit: GPU0 is the lowest-index GPU that fits (10.0 GiB free)
cursor 0
"#,
    );
}

#[test]
fn exclusive_policy_uses_idle_gpus_only() {
    let fixture = Fixture::new(Policy::Exclusive)
        .gpu(20.0, Some(0.1))
        .gpu(40.0, None)
        .task("a", 1, Some(4.0))
        .task("b", 1, Some(4.0));
    check(
        &fixture,
        r#"
place a on GPU-1 exclusive: exclusive: GPU1 idle, runs alone
wait b: exclusive: no idle GPU; Busy: 20.0 GiB used by other processes on GPU0; Exclusive: task a runs alone on GPU1
cursor 0
"#,
    );
}

#[test]
fn round_robin_cycles_from_the_cursor_ignoring_preconditions() {
    let fixture = three_busy(Policy::RoundRobin).cursor(1).task("a", 1, Some(35.0)).task("b", 1, None).task(
        "c",
        2,
        Some(1.0),
    );
    check(
        &fixture,
        r#"
place a on GPU-1: round-robin: GPU1 is next in the cycle (memory and SmActive not checked)
place b on GPU-2: round-robin: GPU2 is next in the cycle (memory and SmActive not checked)
place c on GPU-0,GPU-1: round-robin: GPU0, GPU1 are next in the cycle (memory and SmActive not checked)
cursor 2
"#,
    );
}

#[test]
fn round_robin_skips_exclusive_gpus() {
    let fixture = three_busy(Policy::RoundRobin)
        .running("x", &[0], Some(5.0), Some(5.0), 600)
        .exclusive_last()
        .task("a", 1, None)
        .task("b", 1, None);
    check(
        &fixture,
        r#"
place a on GPU-1: round-robin: GPU1 is next in the cycle (memory and SmActive not checked)
place b on GPU-2: round-robin: GPU2 is next in the cycle (memory and SmActive not checked)
cursor 0
"#,
    );
}

#[test]
fn pending_reasons_name_each_gpu_and_fifo_blocks() {
    let fixture = Fixture::new(Policy::Magm)
        .with(|c| c.backfill = false)
        .gpu(9.1, Some(0.2))
        .gpu(30.0, Some(0.86))
        .task("a", 1, Some(12.0))
        .task("b", 1, Some(1.0));
    check(
        &fixture,
        r#"
wait a: GpuMemory: need 12.0 GiB + 2.0 GiB margin > 9.1 GiB free on GPU0; SmActive 0.86 > 0.80 on GPU1
wait b: queued behind a (strict FIFO)
cursor 0
"#,
    );
}

#[test]
fn backfill_keeps_the_heads_gpus() {
    let fixture = Fixture::new(Policy::Magm)
        .gpu(9.1, Some(0.2))
        .gpu(30.0, Some(0.86))
        .with(|c| c.backfill = true)
        .task("a", 1, Some(12.0))
        .task("b", 1, Some(1.0))
        .task("c", 1, Some(6.5));
    check(
        &fixture,
        r#"
place b on GPU-0: magm: GPU0 has most free memory (9.1 GiB)
wait a: GpuMemory: need 12.0 GiB + 2.0 GiB margin > 9.1 GiB free on GPU0; SmActive 0.86 > 0.80 on GPU1
wait c: GpuMemory: need 6.5 GiB + 2.0 GiB margin > 8.1 GiB free on GPU0; Reserved: GPU1 kept for blocked head a (backfill)
cursor 0
"#,
    );
}

#[test]
fn memory_in_flight_is_reserved_until_grace_ends() {
    let ramping = Fixture::new(Policy::Magm)
        .gpu(30.0, Some(0.2))
        .running("r", &[0], Some(20.0), Some(5.0), 10)
        .task("a", 1, Some(14.0));
    check(
        &ramping,
        r#"
wait a: GpuMemory: need 14.0 GiB + 2.0 GiB margin > 15.0 GiB free on GPU0
cursor 0
"#,
    );
    let settled = Fixture::new(Policy::Magm)
        .gpu(30.0, Some(0.2))
        .running("r", &[0], Some(20.0), Some(5.0), 200)
        .task("a", 1, Some(14.0));
    check(
        &settled,
        r#"
place a on GPU-0: magm: GPU0 has most free memory (30.0 GiB)
cursor 0
"#,
    );
}

#[test]
fn ramping_task_without_figure_reserves_the_no_figure_margin() {
    let fixture = Fixture::new(Policy::Magm)
        .gpu(8.0, Some(0.2))
        .running("r", &[0], None, Some(1.0), 10)
        .task("a", 1, Some(1.0));
    check(
        &fixture,
        r#"
place a on GPU-0: magm: GPU0 has most free memory (4.0 GiB)
cursor 0
"#,
    );
}

#[test]
fn exclusive_first_then_collocation() {
    let fixture = Fixture::new(Policy::Magm)
        .gpu(40.0, Some(0.0))
        .gpu(40.0, Some(0.0))
        .task("a", 2, Some(10.0))
        .task("b", 1, Some(4.0))
        .task("c", 1, None);
    check(
        &fixture,
        r#"
place a on GPU-0,GPU-1: idle: GPU0, GPU1 idle (exclusive first)
place b on GPU-0: magm: GPU0 has most free memory (30.0 GiB)
place c on GPU-1: magm: GPU1 has most free memory (30.0 GiB)
cursor 0
"#,
    );
}

#[test]
fn multi_gpu_shortfall_lists_passing_gpus() {
    let fixture = three_busy(Policy::Magm).task("a", 2, Some(19.0));
    check(
        &fixture,
        r#"
wait a: needs 2 GPUs, 1 pass (GPU1); GpuMemory: need 19.0 GiB + 2.0 GiB margin > 10.0 GiB free on GPU0; GpuMemory: need 19.0 GiB + 2.0 GiB margin > 20.0 GiB free on GPU2
cursor 0
"#,
    );
}

#[test]
fn recovery_queue_goes_first_and_exclusive_needs_idle() {
    let fixture = Fixture::new(Policy::Magm)
        .with(|c| c.backfill = false)
        .gpu(30.0, Some(0.2))
        .running("r", &[0], Some(5.0), Some(5.0), 600)
        .task("a", 1, Some(1.0))
        .recovery("z", 1, 12.0, RecoveryMode::Exclusive);
    check(
        &fixture,
        r#"
wait z: recovery (exclusive): no idle GPU; Busy: 1 carma task(s) on GPU0
wait a: queued behind z (strict FIFO)
cursor 0
"#,
    );
}

#[test]
fn looser_recovery_shares_then_falls_back_to_idle() {
    let fixture = Fixture::new(Policy::Magm)
        .gpu(25.0, Some(0.2))
        .gpu(40.0, Some(0.0))
        .gpu(16.0, Some(0.2))
        .recovery("z", 1, 37.0, RecoveryMode::Looser)
        .recovery("y", 1, 12.0, RecoveryMode::Looser)
        .recovery("w", 1, 20.0, RecoveryMode::Looser);
    check(
        &fixture,
        r#"
place z on GPU-1 exclusive: recovery (looser, OOM 1): GPU1 idle, runs alone (no GPU has room for 37.0 GiB + 5.0 GiB step)
place y on GPU-0: recovery (looser, OOM 1): GPU0 has most free memory (25.0 GiB) for 12.0 GiB + 5.0 GiB step
wait w: recovery (looser): GpuMemory: need 20.0 GiB + 5.0 GiB step > 13.0 GiB free on GPU0; Exclusive: task z runs alone on GPU1; GpuMemory: need 20.0 GiB + 5.0 GiB step > 16.0 GiB free on GPU2; no idle GPU to fall back on
cursor 0
"#,
    );
}

#[test]
fn unknown_sm_active_passes_and_is_said() {
    let magm = Fixture::new(Policy::Magm).gpu(30.0, None).gpu(20.0, Some(0.1)).task("a", 1, Some(4.0));
    check(
        &magm,
        r#"
place a on GPU-0: magm: GPU0 has most free memory (30.0 GiB); SmActive unknown on GPU0
cursor 0
"#,
    );
    let lug = Fixture::new(Policy::Lug).gpu(30.0, None).gpu(20.0, Some(0.7)).task("a", 1, Some(4.0));
    check(
        &lug,
        r#"
place a on GPU-1: lug: GPU1 has lowest SmActive (0.70)
cursor 0
"#,
    );
}

#[test]
fn risk_gate_excludes_hot_gpus() {
    let mut fixture = Fixture::new(Policy::Magm)
        .gpu(30.0, Some(0.8))
        .gpu(20.0, Some(0.8))
        .with(|c| {
            c.risk_gate = true;
            c.sm_cap = 0.9;
        })
        .task("a", 1, Some(4.0));
    fixture.gpus[0].dram_active = Some(0.5);
    fixture.gpus[1].sm_occupancy = Some(0.3);
    check(
        &fixture,
        r#"
place a on GPU-1: magm: GPU1 has most free memory (20.0 GiB)
cursor 0
"#,
    );
}

#[test]
fn placement_limit_and_impossible_tasks() {
    let fixture = three_busy(Policy::Magm)
        .with(|c| c.placements_per_tick_max = 1)
        .task("huge", 4, Some(1.0))
        .task("zero", 0, Some(1.0))
        .task("a", 1, Some(1.0))
        .task("b", 1, Some(1.0));
    check(
        &fixture,
        r#"
place a on GPU-1: magm: GPU1 has most free memory (31.2 GiB)
wait huge: needs 4 GPUs, this machine has 3
wait zero: needs 0 GPUs: a task must ask for at least one GPU
wait b: placement limit per tick reached
cursor 0
"#,
    );
}

#[test]
fn exclusive_running_task_keeps_others_off() {
    let fixture = Fixture::new(Policy::Magm)
        .gpu(30.0, Some(0.1))
        .running("x", &[0], Some(5.0), Some(5.0), 600)
        .exclusive_last()
        .task("a", 1, Some(1.0));
    check(
        &fixture,
        r#"
wait a: Exclusive: task x runs alone on GPU0
cursor 0
"#,
    );
}
