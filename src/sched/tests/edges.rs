//! The GPU edge as real servers show it: driver-reserved memory, unavailable (lost) GPUs,
//! MIG instances as targets, and the SM cap applied to a coarse source. Expect tests with
//! reasons verbatim, then a property test over random mixes of all four.

use proptest::prelude::*;

use super::{Fixture, NOW_MS, check, mib};
use crate::sched::{GpuView, MigTarget, Policy, SchedConfig, SchedInput, SmBasis, WaitingTask, decide};

impl Fixture {
    /// The last GPU has `reserved_gib` of its used memory reserved by the driver.
    fn reserved_last(mut self, reserved_gib: f64) -> Self {
        self.gpus.last_mut().expect("a GPU").memory_reserved_mib = mib(reserved_gib);
        self
    }

    /// The last GPU cannot take work, for this reason.
    fn unavailable_last(mut self, why: &str) -> Self {
        self.gpus.last_mut().expect("a GPU").unavailable = Some(why.to_string());
        self
    }

    /// The last GPU's SM activity is a coarse stand-in.
    fn basis_last(mut self, basis: SmBasis) -> Self {
        self.gpus.last_mut().expect("a GPU").sm_basis = basis;
        self
    }

    /// A MIG instance of GPU `parent` in `slot`: its own UUID `MIG-parent-slot`, memory and
    /// profile; SM activity unknown, as NVML reports none per instance.
    fn mig(mut self, parent: u32, slot: u32, profile: &str, total_gib: f64, free_gib: f64) -> Self {
        self.gpus.push(GpuView {
            uuid: format!("MIG-{parent}-{slot}"),
            index: parent,
            memory_total_mib: mib(total_gib),
            memory_free_mib: mib(free_gib),
            sm_active: None,
            sm_occupancy: None,
            dram_active: None,
            sample_age_ms: 0,
            memory_reserved_mib: 0,
            sm_basis: SmBasis::Measured,
            mig: Some(MigTarget { slot, profile: Some(profile.to_string()) }),
            unavailable: None,
        });
        self
    }

    /// The last waiting task asks for this MIG profile.
    fn profile_last(mut self, profile: &str) -> Self {
        self.waiting.last_mut().expect("a task").mig_profile = Some(profile.to_string());
        self
    }
}

/// The issue's GB300 case: 1.5 GiB reserved by the driver, nothing used, exclusive policy. The
/// GPU is idle and takes the 4 GiB job; before, the reservation read as "used by other
/// processes" and the job waited for good.
#[test]
fn driver_reserved_memory_leaves_a_gpu_idle_under_exclusive() {
    let fixture = Fixture::new(Policy::Exclusive)
        .with(|c| c.backfill = false)
        .gpu(38.5, Some(0.0))
        .reserved_last(1.5)
        .gpu(36.5, Some(0.0))
        .reserved_last(1.5)
        .task("a", 1, Some(4.0))
        .task("b", 1, Some(4.0))
        .task("c", 1, Some(4.0));
    check(
        &fixture,
        r#"
place a on GPU-0 exclusive: exclusive: GPU0 idle, runs alone
wait b: exclusive: no idle GPU; Exclusive: task a runs alone on GPU0; Busy: 2.0 GiB used by other processes on GPU1
wait c: queued behind b (strict FIFO)
cursor 0
"#,
    );
}

/// Under the default policy an idle GPU with a driver reservation is taken before
/// collocating on a busy one.
#[test]
fn driver_reserved_memory_does_not_stop_exclusive_first() {
    let fixture = Fixture::new(Policy::Magm)
        .gpu(30.0, Some(0.2))
        .gpu(38.5, Some(0.0))
        .reserved_last(1.5)
        .task("a", 1, Some(4.0));
    check(
        &fixture,
        r#"
place a on GPU-1: idle: GPU1 idle (exclusive first)
cursor 0
"#,
    );
}

/// An unavailable GPU takes nothing, under every policy (round-robin included, which checks
/// neither memory nor SM activity), and waiting tasks say why.
#[test]
fn an_unavailable_gpu_takes_nothing_and_is_named() {
    let lost = "lost (NVML_ERROR_GPU_IS_LOST reading its handle)";
    for policy in [Policy::Exclusive, Policy::RoundRobin, Policy::Magm, Policy::Lug, Policy::FirstFit] {
        let fixture =
            Fixture::new(policy).gpu(40.0, Some(0.0)).unavailable_last(lost).task("a", 1, Some(4.0));
        let decision = fixture.decide();
        assert!(decision.placements.is_empty(), "{policy}: {decision:?}");
        let reason = &decision.pending[0].reason;
        assert!(reason.ends_with(&format!("GPU0 unavailable: {lost}")), "{policy}: {reason}");
    }
    let two = Fixture::new(Policy::RoundRobin)
        .gpu(40.0, Some(0.0))
        .unavailable_last(lost)
        .gpu(10.0, Some(0.9))
        .task("a", 1, Some(4.0))
        .task("b", 2, Some(4.0));
    check(
        &two,
        r#"
place a on GPU-1: round-robin: GPU1 is next in the cycle (memory and SmActive not checked)
wait b: round-robin: needs 2 available GPUs, 1 available (GPU1); GPU0 unavailable: lost (NVML_ERROR_GPU_IS_LOST reading its handle)
cursor 0
"#,
    );
}

/// GPUs unavailable for one reason are named together, after the other refusals: eight
/// GPUs with MIG on and no instance make one clause, not eight.
#[test]
fn gpus_unavailable_for_one_reason_are_named_together() {
    let mig = "MIG on but no MIG instance exists";
    let fixture = Fixture::new(Policy::Exclusive)
        .gpu(40.0, Some(0.0))
        .unavailable_last(mig)
        .gpu(30.0, Some(0.0))
        .gpu(40.0, Some(0.0))
        .unavailable_last("lost (gone)")
        .gpu(40.0, Some(0.0))
        .unavailable_last(mig)
        .task("a", 1, Some(4.0));
    check(
        &fixture,
        r#"
wait a: exclusive: no idle GPU; Busy: 10.0 GiB used by other processes on GPU1; GPU0, GPU3 unavailable: MIG on but no MIG instance exists; GPU2 unavailable: lost (gone)
cursor 0
"#,
    );
}

/// The paper's SM cap on a GPU without GPM: the device utilisation stands in, and the reason
/// says it is that coarser source.
#[test]
fn sm_cap_applies_to_a_coarse_source_and_says_so() {
    let fixture = Fixture::new(Policy::Magm)
        .gpu(20.0, Some(0.3))
        .basis_last(SmBasis::ProcessUtil)
        .gpu(30.0, Some(0.86))
        .basis_last(SmBasis::DeviceUtil)
        .task("a", 1, Some(12.0))
        .task("b", 1, Some(12.0));
    check(
        &fixture,
        r#"
place a on GPU-0: magm: GPU0 has most free memory (20.0 GiB)
wait b: GpuMemory: need 12.0 GiB + 2.0 GiB margin > 8.0 GiB free on GPU0; SmActive 0.86 (device util) > 0.80 on GPU1
cursor 0
"#,
    );
    let lug =
        Fixture::new(Policy::Lug).gpu(20.0, Some(0.3)).basis_last(SmBasis::ProcessUtil).task("a", 1, None);
    check(
        &lug,
        r#"
place a on GPU-0: lug: GPU0 has lowest SmActive (0.30 (process util))
cursor 0
"#,
    );
}

/// MIG instances are targets of their own, named GPU0/mig1; a one-GPU task without a
/// profile takes one that fits; a two-GPU task never uses MIG.
#[test]
fn mig_instances_take_one_gpu_tasks_that_fit() {
    let fixture = Fixture::new(Policy::Magm)
        .mig(0, 0, "3g.40gb", 39.25, 30.0)
        .mig(0, 1, "1g.10gb", 9.625, 9.625)
        .gpu(10.0, Some(0.1))
        .task("a", 1, Some(6.0))
        .task("two", 2, Some(1.0))
        .task("b", 1, Some(20.0));
    check(
        &fixture,
        r#"
place a on MIG-0-1: idle: GPU0/mig1 idle (exclusive first)
place b on MIG-0-0: magm: GPU0/mig0 has most free memory (30.0 GiB); SmActive unknown on GPU0/mig0
wait two: needs 2 GPUs, this machine has 1 without MIG (a MIG instance takes only one-GPU tasks)
cursor 0
"#,
    );
}

/// An idle MIG instance too small for the task is not taken as idle: instances differ in
/// size, and the task would only run out of memory there.
#[test]
fn an_idle_mig_instance_must_hold_the_task() {
    for (policy, expected) in [
        (
            Policy::Exclusive,
            "wait big: exclusive: no idle GPU; GpuMemory: need 12.0 GiB > 9.6 GiB free on GPU0/mig1",
        ),
        (Policy::Magm, "wait big: GpuMemory: need 12.0 GiB + 2.0 GiB margin > 9.6 GiB free on GPU0/mig1"),
    ] {
        let fixture = Fixture::new(policy).mig(0, 1, "1g.10gb", 9.625, 9.625).task("big", 1, Some(12.0));
        check(&fixture, &format!("{expected}\ncursor 0"));
    }
}

/// A task that names a MIG profile goes only to instances of that profile, and waits with
/// a reason when none exists.
#[test]
fn a_mig_profile_request_takes_only_that_profile() {
    let fixture = Fixture::new(Policy::Magm)
        .gpu(40.0, Some(0.0))
        .mig(1, 0, "3g.40gb", 39.25, 39.25)
        .mig(1, 1, "1g.10gb", 9.625, 2.0)
        .task("small", 1, Some(1.0))
        .profile_last("1g.10gb")
        .task("odd", 1, Some(1.0))
        .profile_last("2g.20gb");
    check(
        &fixture,
        r#"
wait small: GpuMemory: need 1.0 GiB + 2.0 GiB margin > 2.0 GiB free on GPU1/mig1
wait odd: no MIG instance of profile 2g.20gb on this machine (profiles here: 1g.10gb, 3g.40gb)
cursor 0
"#,
    );
    let fits = Fixture::new(Policy::Magm)
        .gpu(40.0, Some(0.0))
        .mig(1, 1, "1g.10gb", 9.625, 9.625)
        .task("small", 1, Some(1.0))
        .profile_last("1g.10gb");
    check(
        &fits,
        r#"
place small on MIG-1-1: idle: GPU1/mig1 idle (exclusive first)
cursor 0
"#,
    );
}

// ---------------------------------------------------------------------------------------
// Property: MIG, health and profiles never lead to a wrong target
// ---------------------------------------------------------------------------------------

/// (free %, unavailable, MIG profile index or none) per target.
type TargetSpec = (u64, bool, Option<usize>);
/// (gpus, requirement MiB, profile index or none) per task.
type TaskSpec = (u32, Option<u64>, Option<usize>);

const PROFILES: [&str; 3] = ["1g.10gb", "3g.40gb", "7g.80gb"];

fn targets(specs: &[TargetSpec]) -> Vec<GpuView> {
    specs
        .iter()
        .enumerate()
        .map(|(i, &(free_pct, unavailable, profile))| GpuView {
            uuid: format!("T-{i}"),
            // MIG instances share their parent's index.
            index: (i / 2) as u32,
            memory_total_mib: 40_960,
            memory_free_mib: 40_960 * free_pct / 100,
            sm_active: None,
            sm_occupancy: None,
            dram_active: None,
            sample_age_ms: 0,
            memory_reserved_mib: 0,
            sm_basis: SmBasis::Measured,
            mig: profile.map(|p| MigTarget { slot: i as u32, profile: Some(PROFILES[p].to_string()) }),
            unavailable: unavailable.then(|| "lost (test)".to_string()),
        })
        .collect()
}

fn tasks(specs: &[TaskSpec]) -> Vec<WaitingTask> {
    specs
        .iter()
        .enumerate()
        .map(|(i, &(gpus, requirement_mib, profile))| WaitingTask {
            id: format!("w{i}"),
            submit_seq: i as u64,
            gpus,
            requirement_mib,
            recovery: None,
            mig_profile: profile.map(|p| PROFILES[p].to_string()),
            submitted_ms: 0,
            sm_estimate: None,
            runtime_estimate_ms: None,
            expected_run: None,
            gate: Default::default(),
        })
        .collect()
}

fn arb_config() -> impl Strategy<Value = SchedConfig> {
    let policy = prop::sample::select(vec![
        Policy::Exclusive,
        Policy::RoundRobin,
        Policy::Magm,
        Policy::Lug,
        Policy::Mug,
        Policy::FirstFit,
    ]);
    (policy, any::<bool>(), any::<bool>()).prop_map(|(policy, backfill, exclusive_first)| SchedConfig {
        policy,
        backfill,
        exclusive_first,
        ..SchedConfig::default()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Never a placement on an unavailable target; a MIG instance only for a one-GPU task;
    /// a task with a profile only on instances of that profile; every task placed xor
    /// pending; the same input gives the same output.
    #[test]
    fn mig_and_unavailable_targets_are_respected(
        target_specs in prop::collection::vec((0u64..=100, prop::bool::weighted(0.25),
            prop::option::weighted(0.5, 0usize..3)), 1..8),
        task_specs in prop::collection::vec((prop_oneof![6 => Just(1u32), 2 => Just(2u32)],
            prop::option::of(256u64..30_000), prop::option::weighted(0.3, 0usize..3)), 1..10),
        config in arb_config(),
    ) {
        let gpus = targets(&target_specs);
        let waiting = tasks(&task_specs);
        let input = SchedInput { now_ms: NOW_MS, gpus: &gpus, waiting: &waiting, running: &[], rr_cursor: 0, config: &config, gate: Default::default() };
        let decision = decide(&input);
        for placement in &decision.placements {
            let task = waiting.iter().find(|t| t.id == placement.task_id).expect("a waiting task");
            prop_assert_eq!(placement.gpus.len(), task.gpus as usize);
            for uuid in &placement.gpus {
                let view = gpus.iter().find(|g| &g.uuid == uuid).expect("a known target");
                prop_assert!(view.unavailable.is_none(), "placed on unavailable {}", uuid);
                if let Some(mig) = &view.mig {
                    prop_assert_eq!(task.gpus, 1, "multi-GPU task on MIG instance {}", uuid);
                    if let Some(profile) = &task.mig_profile {
                        prop_assert_eq!(mig.profile.as_ref(), Some(profile));
                    }
                } else {
                    prop_assert!(task.mig_profile.is_none(), "profile task on non-MIG {}", uuid);
                }
            }
        }
        prop_assert_eq!(decision.placements.len() + decision.pending.len(), waiting.len());
        prop_assert_eq!(decide(&input), decision);
    }
}
