//! Preemption's decision (`sched::preempt`): examples, then properties over random worlds.
//!
//! Properties, each checked on every preemption chosen in random worlds (random GPUs, running
//! tasks with random priorities, opt-ins, ages, checkpoints and earlier preemptions, random
//! queues and policies):
//! 1. `max-per-task`: no victim was already preempted `max-per-task` times;
//! 2. `min-run`: no victim's attempt is younger than `min-run`;
//! 3. fit: the preemptor does not fit now and fits, by `decide` itself, once the victims are
//!    gone; and removing any one victim from the set leaves it not fitting (fewest victims);
//! 4. priority: no victim has a higher priority than the preemptor (nor, outside the head's
//!    rule, more than the gap below it), and every victim opted in;
//! 5. no starvation: random queues driven to completion in virtual time, with preemption on,
//!    end every task (each preempted at most `max-per-task` times).

use std::collections::BTreeMap;

use proptest::prelude::*;

use crate::sched::{
    Decision, GpuView, Policy, PreemptInput, Preemptible, Preemption, PreemptionMode, RunningTask,
    SchedConfig, SchedInput, SmBasis, WaitingTask, decide, preempt, without_victims,
};

const NOW_MS: u64 = 100_000_000;
const GIB: u64 = 1024;

fn gpu(index: u32, free_mib: u64) -> GpuView {
    GpuView {
        uuid: format!("GPU-{index}"),
        index,
        memory_total_mib: 40 * GIB,
        memory_free_mib: free_mib,
        sm_active: None,
        sm_occupancy: None,
        dram_active: None,
        sample_age_ms: 1000,
        memory_reserved_mib: 0,
        sm_basis: SmBasis::Measured,
        mig: None,
        unavailable: None,
    }
}

fn waiting(id: &str, seq: u64, gpus: u32, mib: u64, priority: i64, submitted_ms: u64) -> WaitingTask {
    let mut task = WaitingTask {
        id: id.to_string(),
        submit_seq: seq,
        gpus,
        requirement_mib: Some(mib),
        recovery: None,
        gate: Default::default(),
        mig_profile: None,
        submitted_ms,
        sm_estimate: None,
        runtime_estimate_ms: None,
        expected_run: None,
    };
    task.gate.priority = priority;
    task
}

fn running(id: &str, gpus: &[u32], mib: u64, launched_ms: u64) -> RunningTask {
    RunningTask {
        id: id.to_string(),
        gpus: gpus.iter().map(|i| format!("GPU-{i}")).collect(),
        requirement_mib: Some(mib),
        launched_ms,
        observed_mib: Some(mib),
        exclusive: false,
        gate: Default::default(),
        sm_estimate: None,
        runtime_estimate_ms: None,
    }
}

fn info(id: &str, priority: i64, requeue: bool, started_ms: u64) -> Preemptible {
    Preemptible {
        id: id.to_string(),
        attempt: 1,
        priority,
        requeue,
        started_ms,
        checkpoint_ms: None,
        preemptions: 0,
        usage_gpu_ms: 0.0,
        stopping: false,
        preemptor: false,
        withdrawn_ms: None,
    }
}

fn requeue_config() -> SchedConfig {
    let mut config = SchedConfig::default();
    config.preemption.mode = PreemptionMode::Requeue;
    config
}

/// A world, decided, then asked for a preemption.
#[derive(Debug, Clone)]
struct World {
    now_ms: u64,
    gpus: Vec<GpuView>,
    waiting: Vec<WaitingTask>,
    running: Vec<RunningTask>,
    infos: Vec<Preemptible>,
    config: SchedConfig,
    since: BTreeMap<String, u64>,
}

impl World {
    fn input(&self) -> SchedInput<'_> {
        SchedInput {
            now_ms: self.now_ms,
            gpus: &self.gpus,
            waiting: &self.waiting,
            running: &self.running,
            rr_cursor: 0,
            config: &self.config,
            gate: Default::default(),
        }
    }

    fn preempt(&self) -> (Decision, Option<Preemption>) {
        let input = self.input();
        let decision = decide(&input);
        let chosen = preempt(&PreemptInput {
            sched: &input,
            decision: &decision,
            running: &self.infos,
            queued_since_ms: &self.since,
        });
        (decision, chosen)
    }

    /// Whether `task` alone is placed once `victims` are gone, and, unless it is the blocked
    /// head of `decision`, not on the GPUs `decision` keeps for the head.
    fn fits_without(&self, decision: &Decision, task: &WaitingTask, victims: &[&str]) -> bool {
        let input = self.input();
        let (gpus, running) = without_victims(&input, victims);
        let only = std::slice::from_ref(task);
        let world = SchedInput { gpus: &gpus, running: &running, waiting: only, ..input };
        let Some(placement) = decide(&world).placements.into_iter().next() else { return false };
        let kept = decision.reservation.as_ref().filter(|_| decision.head.as_deref() != Some(&task.id));
        !kept.is_some_and(|r| placement.gpus.iter().any(|g| r.gpus.contains(g)))
    }
}

/// One 40 GiB GPU holding a 30 GiB low-priority task that opted in and ran 20 minutes; a 20 GiB
/// task of priority 5 waits.
fn one_gpu_world() -> World {
    let started = NOW_MS - 20 * 60_000;
    World {
        now_ms: NOW_MS,
        gpus: vec![gpu(0, 10 * GIB)],
        waiting: vec![waiting("urgent", 1, 1, 20 * GIB, 5, NOW_MS - 60_000)],
        running: vec![running("low", &[0], 30 * GIB, started)],
        infos: vec![info("low", 0, true, started)],
        config: requeue_config(),
        since: BTreeMap::new(),
    }
}

/// Goal: the urgent task preempts the low-priority one, losing its 20 minutes since start.
/// Fails on the code before preemption (no `preempt` at all).
#[test]
fn a_higher_priority_task_preempts_an_opted_in_lower_one() {
    let (_, chosen) = one_gpu_world().preempt();
    let chosen = chosen.expect("a preemption");
    assert_eq!(chosen.preemptor, "urgent");
    assert_eq!(chosen.victims.len(), 1);
    assert_eq!(chosen.victims[0].id, "low");
    assert_eq!(chosen.victims[0].lost_ms, 20 * 60_000);
    assert_eq!(chosen.gpus, vec!["GPU-0".to_string()]);
    assert_eq!(chosen.reason, "priority 5 preempts priority 4 or lower (priority-gap 1)");
}

/// Goal: the victim's checkpoint sets the work lost.
#[test]
fn work_lost_counts_from_the_last_checkpoint() {
    let mut world = one_gpu_world();
    world.infos[0].checkpoint_ms = Some(NOW_MS - 90_000);
    let (_, chosen) = world.preempt();
    assert_eq!(chosen.expect("a preemption").victims[0].lost_ms, 90_000);
}

/// Goal: each guard alone stops the preemption: mode off, no opt-in, inside min-run, preempted
/// max-per-task times already, within the priority gap, already stopping, within withdrawn-rest
/// of a withdrawn preemption (9 min of 10 ago).
#[test]
fn every_guard_alone_prevents_it() {
    type Change = (&'static str, fn(&mut World));
    let changes: [Change; 7] = [
        ("mode off", |w| w.config.preemption.mode = PreemptionMode::Off),
        ("no opt-in", |w| w.infos[0].requeue = false),
        ("inside min-run", |w| w.infos[0].started_ms = NOW_MS - 5 * 60_000),
        ("max-per-task", |w| w.infos[0].preemptions = 3),
        ("gap", |w| w.infos[0].priority = 5),
        ("stopping", |w| w.infos[0].stopping = true),
        ("withdrawn-rest", |w| w.infos[0].withdrawn_ms = Some(NOW_MS - 9 * 60_000)),
    ];
    for (what, change) in changes {
        let mut world = one_gpu_world();
        change(&mut world);
        assert_eq!(world.preempt().1, None, "{what}");
    }
}

/// Goal: a task that would not fit even with every victim gone preempts nobody (a second task
/// that did not opt in keeps 8 GiB of the GPU).
#[test]
fn nothing_is_preempted_for_a_task_that_would_still_not_fit() {
    let mut world = one_gpu_world();
    world.gpus[0].memory_free_mib = 2 * GIB;
    world.running.push(running("kept", &[0], 8 * GIB, NOW_MS - 3_600_000));
    world.infos.push(info("kept", 0, false, NOW_MS - 3_600_000));
    world.waiting[0].requirement_mib = Some(31 * GIB);
    assert_eq!(world.preempt().1, None, "32 GiB free without the victim, 33 GiB needed");
    world.waiting[0].requirement_mib = Some(30 * GIB);
    assert!(world.preempt().1.is_some(), "32 GiB free without the victim, 32 GiB needed");
}

/// Goal: the blocked head of equal priority preempts only after head-wait, naming it, and not
/// when a running task is expected to make room within another head-wait.
#[test]
fn the_blocked_head_preempts_its_own_priority_after_head_wait() {
    let mut world = one_gpu_world();
    world.waiting[0].gate.priority = 0;
    assert_eq!(world.preempt().1, None, "waited 1 min of 30");
    world.since.insert("urgent".into(), NOW_MS - 45 * 60_000);
    let chosen = world.preempt().1.expect("the head after head-wait");
    assert_eq!(
        chosen.reason,
        "blocked head for 45 min (head-wait 30 min); priority 0 preempts priority 0 or lower"
    );
}

/// Goal: of two victims that would each do, the one with less work lost goes; of equal loss,
/// the lower priority; one victim rather than two.
#[test]
fn the_fewest_victims_with_least_work_lost() {
    let old = NOW_MS - 60 * 60_000;
    let mut world = World {
        now_ms: NOW_MS,
        gpus: vec![gpu(0, 10 * GIB), gpu(1, 10 * GIB)],
        waiting: vec![waiting("urgent", 1, 1, 25 * GIB, 5, NOW_MS)],
        running: vec![running("a", &[0], 30 * GIB, old), running("b", &[1], 30 * GIB, old)],
        infos: vec![info("a", 0, true, old), info("b", 1, true, old)],
        config: requeue_config(),
        since: BTreeMap::new(),
    };
    world.infos[1].checkpoint_ms = Some(NOW_MS - 60_000);
    let chosen = world.preempt().1.expect("a preemption");
    assert_eq!(chosen.victims.iter().map(|v| v.id.as_str()).collect::<Vec<_>>(), ["b"]);
    world.infos[1].checkpoint_ms = None;
    let chosen = world.preempt().1.expect("a preemption");
    assert_eq!(chosen.victims.iter().map(|v| v.id.as_str()).collect::<Vec<_>>(), ["a"], "lower priority");
}

/// The tail of the reference traces: a 2-GPU head that waited 3 h for two GPUs held by two
/// 1-GPU tasks, each launched 70 min ago with 20 min lost since its last checkpoint.
fn tail_world() -> World {
    let old = NOW_MS - 70 * 60_000;
    let mut world = World {
        now_ms: NOW_MS,
        gpus: vec![gpu(0, 5 * GIB), gpu(1, 5 * GIB)],
        waiting: vec![waiting("tail", 1, 2, 30 * GIB, 0, NOW_MS - 3 * 3_600_000)],
        running: vec![running("a", &[0], 35 * GIB, old), running("b", &[1], 35 * GIB, old)],
        infos: vec![info("a", 0, true, old), info("b", 0, true, old)],
        config: requeue_config(),
        since: BTreeMap::new(),
    };
    world.waiting[0].runtime_estimate_ms = Some(4 * 3_600_000);
    for (running, info) in world.running.iter_mut().zip(&mut world.infos) {
        running.runtime_estimate_ms = Some(2 * 3_600_000);
        info.checkpoint_ms = Some(NOW_MS - 20 * 60_000);
    }
    world
}

/// Goal: with `head-expected-fit = false` the head preempts even when the running tasks'
/// estimates say it would fit within another `head-wait` (here both end in 50 min, inside a
/// 1 h head-wait). Fails on the code before the knob (the head always waited then).
#[test]
fn head_expected_fit_off_preempts_despite_estimates() {
    let mut world = tail_world();
    world.config.preemption.head_wait_ms = 3_600_000;
    assert_eq!(world.preempt().1, None, "expected to fit within the hour");
    world.config.preemption.head_expected_fit = false;
    assert!(world.preempt().1.is_some(), "estimates not trusted");
}

/// Goal: `head-min-gpus` keeps the head's rule for heads of that many GPUs. Fails on the code
/// before the knob (a 2-GPU floor did not exist; a 1-GPU head preempted).
#[test]
fn head_min_gpus_keeps_the_rule_for_wide_heads() {
    let mut world = tail_world();
    world.config.preemption.head_min_gpus = 2;
    assert!(world.preempt().1.is_some(), "a 2-GPU head");
    world.config.preemption.head_min_gpus = 3;
    assert_eq!(world.preempt().1, None, "a 2-GPU head, 3 needed");
}

/// Goal: `head-spare-longer` spares a task expected to run longer than the head (and one
/// without an estimate). Fails on the code before the knob.
#[test]
fn head_spare_longer_spares_longer_victims() {
    let mut world = tail_world();
    world.config.preemption.head_spare_longer = true;
    assert!(world.preempt().1.is_some(), "50 min left each, the head runs 4 h");
    world.running[1].runtime_estimate_ms = Some(6 * 3_600_000);
    assert_eq!(world.preempt().1, None, "b has 4 h 50 min left, more than the head's 4 h");
    world.running[1].runtime_estimate_ms = None;
    assert_eq!(world.preempt().1, None, "b has no estimate");
}

/// Goal: `head-gain` preempts only when the head's expected work outweighs the victims' lost
/// work and grace that many times. Here: 2 × 240 min against 2 × 21 min, a ratio of 11.4.
/// Fails on the code before the knob.
#[test]
fn head_gain_weighs_the_heads_work_against_the_work_lost() {
    let mut world = tail_world();
    world.config.preemption.head_gain = 11;
    assert!(world.preempt().1.is_some(), "480 ≥ 11 × 42 GPU-min");
    world.config.preemption.head_gain = 12;
    assert_eq!(world.preempt().1, None, "480 < 12 × 42 GPU-min");
    world.config.preemption.head_gain = 1;
    world.waiting[0].runtime_estimate_ms = None;
    assert_eq!(world.preempt().1, None, "a head without an estimate");
}

type RunSpec = (u32, bool, u64, i64, bool, Option<u64>, u32, u64);

fn arb_running() -> impl Strategy<Value = RunSpec> {
    (
        0u32..4,
        any::<bool>(),
        4u64..36,
        0i64..4,
        any::<bool>(),
        prop::option::of(0u64..7_200_000),
        0u32..4,
        0u64..7_200_000,
    )
}

fn arb_world() -> impl Strategy<Value = World> {
    let waiting_specs = prop::collection::vec((1u32..3, 2u64..38, 0i64..5, 0u64..7_200_000), 1..6);
    let running_specs = prop::collection::vec(arb_running(), 0..7);
    let policy = prop::sample::select(vec![Policy::Magm, Policy::Exclusive, Policy::FirstFit, Policy::Mug]);
    let knobs = (0u64..3_600_000, 0u32..4, 0i64..3, 0u64..7_200_000, any::<bool>());
    (1u32..5, waiting_specs, running_specs, policy, knobs).prop_map(
        |(gpu_count, waiting_specs, running_specs, policy, knobs)| {
            let (min_run, max_per_task, gap, head_wait, backfill) = knobs;
            let mut config = requeue_config();
            config.policy = policy;
            config.backfill = backfill;
            config.preemption.min_run_ms = min_run;
            config.preemption.max_per_task = max_per_task;
            config.preemption.priority_gap = gap;
            config.preemption.head_wait_ms = head_wait;
            let mut used = vec![0u64; gpu_count as usize];
            let mut run = Vec::new();
            let mut infos = Vec::new();
            for (i, (first, two, gib, priority, requeue, checkpoint_ago, preemptions, age)) in
                running_specs.into_iter().enumerate()
            {
                let first = first % gpu_count;
                let mut on = vec![first];
                if two && gpu_count > 1 {
                    on.push((first + 1) % gpu_count);
                }
                let id = format!("r{i}");
                let started = NOW_MS - age;
                run.push(running(&id, &on, gib * GIB, started));
                for &g in &on {
                    used[g as usize] += gib * GIB;
                }
                let mut one = info(&id, priority, requeue, started);
                one.checkpoint_ms = checkpoint_ago.map(|ago| NOW_MS - ago);
                one.preemptions = preemptions;
                one.usage_gpu_ms = (i as f64) * 1000.0;
                // Every third task had a preemption withdrawn, some inside withdrawn-rest.
                one.withdrawn_ms = (i % 3 == 2).then(|| NOW_MS - age / 2);
                infos.push(one);
            }
            let gpus = (0..gpu_count).map(|i| gpu(i, (40 * GIB).saturating_sub(used[i as usize]))).collect();
            let waiting = waiting_specs
                .into_iter()
                .enumerate()
                .map(|(i, (g, gib, priority, ago))| {
                    waiting(&format!("w{i}"), i as u64, g, gib * GIB, priority, NOW_MS - ago)
                })
                .collect();
            World { now_ms: NOW_MS, gpus, waiting, running: run, infos, config, since: BTreeMap::new() }
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// Properties 1 to 4 on every preemption chosen.
    #[test]
    fn every_preemption_keeps_the_rules(world in arb_world()) {
        let (decision, chosen) = world.preempt();
        let Some(chosen) = chosen else { return Ok(()) };
        let config = &world.config.preemption;
        let task = world.waiting.iter().find(|t| t.id == chosen.preemptor).expect("a waiting preemptor");
        prop_assert!(decision.pending.iter().any(|p| p.task_id == task.id), "the preemptor was left waiting");
        prop_assert!(!chosen.victims.is_empty());
        let is_head = decision.head.as_deref() == Some(task.id.as_str());
        for victim in &chosen.victims {
            let info = world.infos.iter().find(|i| i.id == victim.id).expect("a running victim");
            prop_assert!(info.preemptions < config.max_per_task, "max-per-task: {victim:?}");
            prop_assert!(
                info.withdrawn_ms.is_none_or(|at| NOW_MS - at >= config.withdrawn_rest_ms),
                "withdrawn-rest: {victim:?}"
            );
            prop_assert!(NOW_MS - info.started_ms >= config.min_run_ms, "min-run: {victim:?}");
            prop_assert!(info.requeue, "opted in: {victim:?}");
            prop_assert!(info.priority <= task.gate.priority, "priority: {victim:?}");
            if !is_head {
                prop_assert!(info.priority <= task.gate.priority - config.priority_gap, "gap: {victim:?}");
            }
        }
        let ids: Vec<&str> = chosen.victims.iter().map(|v| v.id.as_str()).collect();
        prop_assert!(!world.fits_without(&decision, task, &[]), "it did not fit before");
        prop_assert!(world.fits_without(&decision, task, &ids), "it fits once the victims are gone");
        for skip in 0..ids.len() {
            let fewer: Vec<&str> = ids.iter().enumerate().filter(|&(i, _)| i != skip).map(|(_, id)| *id).collect();
            if !fewer.is_empty() {
                prop_assert!(!world.fits_without(&decision, task, &fewer), "fewest victims: {ids:?} minus {}", ids[skip]);
            }
        }
    }

    /// Property 5: random queues driven to completion end every task.
    #[test]
    fn no_task_starves_under_preemption(
        tasks in prop::collection::vec((1u32..3, 4u64..36, 0i64..4, any::<bool>(), 1u64..40, 0u64..30), 1..12),
        gpu_count in 1u32..4,
        max_per_task in 0u32..3,
        gap in 0i64..2,
    ) {
        let ended = drive(&tasks, gpu_count, max_per_task, gap);
        prop_assert_eq!(ended, tasks.len());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Properties of the head's bounds: a head-rule preemption is for a head of at least
    /// `head-min-gpus` GPUs; with `head-spare-longer`, no victim is expected to run longer than
    /// the head; with `head-gain`, the head's expected work is at least that many times the
    /// victims' GPUs × (work lost + grace).
    #[test]
    fn the_heads_bounds_hold(
        world in arb_world(),
        min_gpus in 1u32..3,
        spare in any::<bool>(),
        gain in 0u32..6,
        estimates in prop::collection::vec(prop::option::of(600_000u64..14_400_000), 13),
        expected_fit in any::<bool>(),
    ) {
        let mut world = world;
        world.config.preemption.head_expected_fit = expected_fit;
        world.config.preemption.head_wait_ms /= 4;
        world.config.preemption.head_min_gpus = min_gpus;
        world.config.preemption.head_spare_longer = spare;
        world.config.preemption.head_gain = gain;
        for (i, task) in world.waiting.iter_mut().enumerate() {
            task.runtime_estimate_ms = estimates[i];
        }
        for (i, task) in world.running.iter_mut().enumerate() {
            task.runtime_estimate_ms = estimates[6 + i];
        }
        let (_, chosen) = world.preempt();
        let Some(chosen) = chosen.filter(|c| c.reason.starts_with("blocked head")) else { return Ok(()) };
        let config = &world.config.preemption;
        let head = world.waiting.iter().find(|t| t.id == chosen.preemptor).expect("a waiting head");
        prop_assert!(head.gpus >= min_gpus, "head-min-gpus");
        let mut cost = 0u128;
        for victim in &chosen.victims {
            let task = world.running.iter().find(|t| t.id == victim.id).expect("a running victim");
            if spare {
                let left = task.runtime_estimate_ms.map(|ms| (task.launched_ms + ms).saturating_sub(NOW_MS));
                prop_assert!(left.zip(head.runtime_estimate_ms).is_some_and(|(l, h)| l <= h), "spared: {victim:?}");
            }
            cost += task.gpus.len() as u128 * u128::from(victim.lost_ms + config.grace_ms);
        }
        if gain > 0 {
            let work = u128::from(head.gpus) * u128::from(head.runtime_estimate_ms.expect("an estimate"));
            prop_assert!(work >= cost * u128::from(gain), "head-gain: {work} against {cost}");
        }
    }
}

/// One task of the starvation property: (gpus, GiB, priority, requeue, minutes of work, arrival
/// minute).
type SimTask = (u32, u64, i64, bool, u64, u64);

/// A small virtual-time queue: tasks arrive, are placed by `decide`, preempted by `preempt` (a
/// victim loses its work since its last checkpoint, every 5 minutes of progress, and queues
/// again), and end when their work is done. Returns how many ended within a generous bound.
fn drive(tasks: &[SimTask], gpu_count: u32, max_per_task: u32, gap: i64) -> usize {
    const STEP_MS: u64 = 60_000;
    const CHECKPOINT_MS: u64 = 5 * STEP_MS;
    let mut config = requeue_config();
    config.preemption.min_run_ms = 2 * STEP_MS;
    config.preemption.max_per_task = max_per_task;
    config.preemption.priority_gap = gap;
    config.preemption.head_wait_ms = 10 * STEP_MS;
    let mut done_ms: Vec<u64> = vec![0; tasks.len()];
    let mut preempted: Vec<u32> = vec![0; tasks.len()];
    // Running tasks: (start, GPUs).
    let mut started: BTreeMap<usize, (u64, Vec<String>)> = BTreeMap::new();
    let mut since: BTreeMap<String, u64> = BTreeMap::new();
    let mut ended = vec![false; tasks.len()];
    let work: u64 = tasks.iter().map(|t| t.4 + t.5).sum();
    let bound = work * u64::from(max_per_task + 2) + 200;
    for step in 0..bound {
        let now = step * STEP_MS;
        for (&i, (start, _)) in &started {
            if done_ms[i] + (now - start) >= tasks[i].4 * STEP_MS {
                ended[i] = true;
            }
        }
        started.retain(|&i, _| !ended[i]);
        if ended.iter().all(|&e| e) {
            break;
        }
        let mut used = vec![0u64; gpu_count as usize];
        let mut run = Vec::new();
        let mut infos = Vec::new();
        for (&i, (start, on)) in &started {
            let (_, gib, priority, requeue, ..) = tasks[i];
            for uuid in on {
                let index: usize = uuid["GPU-".len()..].parse().expect("GPU-<index>");
                used[index] += gib * GIB;
            }
            let mut task = running(&format!("t{i}"), &[], gib * GIB, *start);
            task.gpus.clone_from(on);
            run.push(task);
            let mut one = info(&format!("t{i}"), priority, requeue, *start);
            let progress = done_ms[i] + (now - start);
            let saved = (progress / CHECKPOINT_MS) * CHECKPOINT_MS;
            one.checkpoint_ms = (saved > done_ms[i]).then(|| start + (saved - done_ms[i]));
            one.preemptions = preempted[i];
            infos.push(one);
        }
        let gpus: Vec<GpuView> =
            (0..gpu_count).map(|i| gpu(i, (40 * GIB).saturating_sub(used[i as usize]))).collect();
        let waiting: Vec<WaitingTask> = (0..tasks.len())
            .filter(|&i| !ended[i] && !started.contains_key(&i) && tasks[i].5 * STEP_MS <= now)
            .map(|i| {
                let (g, gib, priority, ..) = tasks[i];
                waiting(
                    &format!("t{i}"),
                    i as u64,
                    g.min(gpu_count),
                    gib * GIB,
                    priority,
                    tasks[i].5 * STEP_MS,
                )
            })
            .collect();
        let config = config.clone();
        let world = World { now_ms: now, gpus, waiting, running: run, infos, config, since: since.clone() };
        let (decision, chosen) = world.preempt();
        for placement in &decision.placements {
            let i: usize = placement.task_id[1..].parse().expect("t<index>");
            started.insert(i, (now, placement.gpus.clone()));
        }
        for victim in chosen.iter().flat_map(|c| &c.victims) {
            let i: usize = victim.id[1..].parse().expect("t<index>");
            let (start, _) = started.remove(&i).expect("a running victim");
            let progress = done_ms[i] + (now - start);
            done_ms[i] = done_ms[i].max((progress / CHECKPOINT_MS) * CHECKPOINT_MS);
            preempted[i] += 1;
            since.insert(victim.id.clone(), now);
        }
    }
    ended.iter().filter(|&&e| e).count()
}
