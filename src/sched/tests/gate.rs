//! Property tests of the gate's rules: holds, dependencies, caps, priority and fair-share
//! order, and backfill's promise to the head. The checker re-derives each rule from the input
//! on its own.
//!
//! One decision (`decisions_keep_the_workflow_rules`):
//! 1. a held task is never placed; a task is placed only when every dependency is met
//!    (afterok: Finished, afterany: ended, afternotok: Failed or Cancelled);
//! 2. a task is cancelled exactly when a dependency ended the wrong way and it did not ask to
//!    be kept; a cancelled task is not placed; each waiting task is placed, pending or
//!    cancelled, once;
//! 3. no user ends the decision over a cap it was under (running tasks, GPUs, reserved
//!    memory) and no array over its `%N`, counting running tasks and this decision's
//!    placements;
//! 4. order, under strict FIFO: when a main-queue task is placed, every main-queue task the
//!    gate lets through that the machine could ever run and that has a higher priority is
//!    placed too, and with fair share so is every such task of equal priority whose user has
//!    less usage;
//! 5. the same input in any order gives the same decision.
//!
//! Over many decisions (a small model: tasks arrive, run for a number of ticks, free their
//! memory):
//! 6. with a bounded number of arrivals every task is eventually placed or cancelled, under
//!    fair share, priorities, caps and dependencies (`bounded_arrivals_never_starve`);
//! 7. with backfill, the blocked head starts no later than its reserved GPUs would let it with
//!    only the tasks running when it was reserved (`backfill_never_delays_the_reserved_start`).

use std::collections::{BTreeMap, HashMap, HashSet};

use proptest::prelude::*;

use crate::sched::{
    ArraySlot, Decision, Dependency, DependencyKind, DependencyState, GateInput, GpuView, Policy,
    Reservation, RunningGate, RunningTask, SchedConfig, SchedInput, TaskGate, UserLimits, UserUsage,
    WaitingTask, decayed_gpu_ms, decide,
};

const NOW_MS: u64 = 50_000_000;
const GPU_MIB: u64 = 40_960;

fn gpu(index: u32, free_mib: u64) -> GpuView {
    GpuView {
        uuid: format!("GPU-{index}"),
        index,
        memory_total_mib: GPU_MIB,
        memory_free_mib: free_mib,
        sm_active: None,
        sm_occupancy: None,
        dram_active: None,
        sample_age_ms: 0,
        memory_reserved_mib: 0,
        sm_basis: crate::sched::SmBasis::Measured,
        mig: None,
        unavailable: None,
    }
}

// ---------------------------------------------------------------------------------------
// One decision
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct Case {
    gpus: Vec<GpuView>,
    waiting: Vec<WaitingTask>,
    running: Vec<RunningTask>,
    usage: Vec<UserUsage>,
    config: SchedConfig,
}

impl Case {
    fn decide(&self) -> Decision {
        decide(&SchedInput {
            now_ms: NOW_MS,
            gpus: &self.gpus,
            waiting: &self.waiting,
            running: &self.running,
            rr_cursor: 0,
            config: &self.config,
            gate: GateInput { usage: &self.usage, reservation: None, ..Default::default() },
        })
    }
}

fn arb_dependency() -> impl Strategy<Value = (u8, u8, u8)> {
    (0u8..3, 0u8..6, 0u8..40)
}

fn dependency_of((kind, state, target): (u8, u8, u8)) -> Dependency {
    Dependency {
        task_id: format!("d{target}"),
        kind: [DependencyKind::AfterOk, DependencyKind::AfterAny, DependencyKind::AfterNotOk][kind as usize],
        state: [
            DependencyState::Unknown,
            DependencyState::Pending,
            DependencyState::Running,
            DependencyState::Finished,
            DependencyState::Failed,
            DependencyState::Cancelled,
        ][state as usize],
    }
}

type WaitingSpec = (u32, Option<u64>, u32, i64, bool, Vec<(u8, u8, u8)>, bool, Option<(u8, u32)>);

fn arb_waiting() -> impl Strategy<Value = WaitingSpec> {
    (
        prop_oneof![8 => Just(1u32), 2 => Just(2u32), 1 => Just(3u32)],
        prop::option::weighted(0.8, 1024u64..30_000),
        0u32..4,
        prop_oneof![3 => Just(0i64), 1 => -5i64..5],
        prop::bool::weighted(0.15),
        prop::collection::vec(arb_dependency(), 0..3),
        any::<bool>(),
        prop::option::weighted(0.3, (0u8..3, 1u32..3)),
    )
}

fn arb_case() -> impl Strategy<Value = Case> {
    let gpus = prop::collection::vec(0u64..=GPU_MIB, 1..=6);
    let running = prop::collection::vec((0u32..6, 0u32..4, 1024u64..20_000, prop::option::of(0u8..3)), 0..8);
    let waiting = prop::collection::vec(arb_waiting(), 0..30);
    let usage = prop::collection::vec(0.0f64..1e7, 4);
    let limits = (0u32..4, 0u32..5, prop_oneof![Just(0u64), 10_000u64..80_000]);
    (gpus, running, waiting, usage, limits, any::<bool>(), any::<bool>()).prop_map(
        |(free, running, waiting, usage, (tasks_max, gpus_max, memory_mib_max), backfill, fair)| {
            let gpus: Vec<GpuView> = free.iter().enumerate().map(|(i, f)| gpu(i as u32, *f)).collect();
            let count = gpus.len() as u32;
            let running = running
                .into_iter()
                .enumerate()
                .map(|(i, (g, user, requirement, array))| RunningTask {
                    id: format!("r{i}"),
                    gpus: vec![format!("GPU-{}", g % count)],
                    requirement_mib: Some(requirement),
                    launched_ms: NOW_MS - 600_000,
                    observed_mib: Some(requirement),
                    exclusive: false,
                    sm_estimate: None,
                    runtime_estimate_ms: None,
                    gate: RunningGate { user, array_id: array.map(|a| format!("a{a}")), time_limit_ms: None },
                })
                .collect();
            let waiting = waiting.into_iter().enumerate().map(|(i, spec)| waiting_task(i, spec)).collect();
            let config = SchedConfig {
                backfill,
                in_flight_grace_ms: 0,
                user_limits: UserLimits { running_tasks_max: tasks_max, gpus_max, memory_mib_max },
                fair_share: crate::sched::FairShareConfig { enabled: fair, half_life_ms: 3_600_000 },
                ..SchedConfig::default()
            };
            let usage = usage
                .into_iter()
                .enumerate()
                .map(|(u, gpu_ms)| UserUsage { user: u as u32, gpu_ms })
                .collect();
            Case { gpus, waiting, running, usage, config }
        },
    )
}

fn waiting_task(i: usize, spec: WaitingSpec) -> WaitingTask {
    let (gpus, requirement_mib, user, priority, held, dependencies, keep, array) = spec;
    WaitingTask {
        id: format!("w{i:02}"),
        submit_seq: i as u64,
        gpus,
        requirement_mib,
        recovery: None,
        mig_profile: None,
        submitted_ms: NOW_MS - 3_600_000 + i as u64 * 1000,
        sm_estimate: None,
        runtime_estimate_ms: None,
        expected_run: None,
        gate: TaskGate {
            user,
            priority,
            held,
            dependencies: dependencies.into_iter().map(dependency_of).collect(),
            keep_on_dependency_failure: keep,
            array: array.map(|(a, running_max)| ArraySlot { array_id: format!("a{a}"), running_max }),
            time_limit_ms: None,
            begin_ms: None,
            reservation: None,
        },
    }
}

/// The checker's own reading of the dependencies: (all met, one can never be met).
fn dependencies_verdict(task: &WaitingTask) -> (bool, bool) {
    use DependencyState::*;
    let mut all_met = true;
    let mut never = false;
    for d in &task.gate.dependencies {
        let ended = matches!(d.state, Finished | Failed | Cancelled);
        let met = match d.kind {
            DependencyKind::AfterOk => d.state == Finished,
            DependencyKind::AfterAny => ended,
            DependencyKind::AfterNotOk => matches!(d.state, Failed | Cancelled),
        };
        all_met &= met;
        never |= ended && !met;
    }
    (all_met, never)
}

/// Per user: (tasks, GPUs, memory) of the running tasks.
fn held_by_users(case: &Case) -> HashMap<u32, (u32, u32, u64)> {
    let mut held: HashMap<u32, (u32, u32, u64)> = HashMap::new();
    for task in &case.running {
        let entry = held.entry(task.gate.user).or_default();
        entry.0 += 1;
        entry.1 += task.gpus.len() as u32;
        entry.2 += task.requirement_mib.unwrap_or(0) * task.gpus.len() as u64;
    }
    held
}

fn check_caps(case: &Case, decision: &Decision) -> Result<(), TestCaseError> {
    let limits = &case.config.user_limits;
    let by_id: HashMap<&str, &WaitingTask> = case.waiting.iter().map(|t| (t.id.as_str(), t)).collect();
    let mut held = held_by_users(case);
    let mut arrays: HashMap<String, u32> = HashMap::new();
    for task in &case.running {
        if let Some(a) = &task.gate.array_id {
            *arrays.entry(a.clone()).or_default() += 1;
        }
    }
    let no_figure = case.config.margin_without_figure_mib;
    for placement in &decision.placements {
        let task = by_id[placement.task_id.as_str()];
        let entry = held.entry(task.gate.user).or_default();
        entry.0 += 1;
        entry.1 += task.gpus;
        entry.2 += task.requirement_mib.unwrap_or(no_figure) * u64::from(task.gpus);
        let over = |used: u64, max: u64| max > 0 && used > max;
        prop_assert!(
            !over(u64::from(entry.0), u64::from(limits.running_tasks_max)),
            "task cap broken by {}",
            task.id
        );
        prop_assert!(!over(u64::from(entry.1), u64::from(limits.gpus_max)), "GPU cap broken by {}", task.id);
        prop_assert!(!over(entry.2, limits.memory_mib_max), "memory cap broken by {}", task.id);
        if let Some(slot) = &task.gate.array {
            let running = arrays.entry(slot.array_id.clone()).or_default();
            *running += 1;
            prop_assert!(*running <= slot.running_max, "array cap broken by {}", task.id);
        }
    }
    Ok(())
}

/// Rule 4 under strict FIFO.
fn check_order(case: &Case, decision: &Decision) -> Result<(), TestCaseError> {
    if case.config.backfill {
        return Ok(());
    }
    let placed: HashSet<&str> = decision.placements.iter().map(|p| p.task_id.as_str()).collect();
    let usage: HashMap<u32, f64> = case.usage.iter().map(|u| (u.user, u.gpu_ms)).collect();
    let usage_of = |t: &WaitingTask| usage.get(&t.gate.user).copied().unwrap_or(0.0);
    // Tasks the gate would stop whatever the order: held, dependencies not met.
    let passes =
        |t: &WaitingTask| !t.gate.held && dependencies_verdict(t).0 && t.gpus as usize <= case.gpus.len();
    for a in case.waiting.iter().filter(|t| placed.contains(t.id.as_str())) {
        for b in case.waiting.iter().filter(|t| passes(t) && !placed.contains(t.id.as_str())) {
            // b may have been stopped by a cap or the per-tick limit; those are reasons of
            // their own, so only tasks without any cap are compared.
            let capped = b.gate.array.is_some() || case.config.user_limits != UserLimits::default();
            if capped || decision.placements.len() >= case.config.placements_per_tick_max as usize {
                continue;
            }
            let ahead = b.gate.priority > a.gate.priority
                || (case.config.fair_share.enabled
                    && b.gate.priority == a.gate.priority
                    && usage_of(b) < usage_of(a));
            prop_assert!(!ahead, "{} was placed under strict FIFO while {} waited ahead of it", &a.id, &b.id);
        }
    }
    Ok(())
}

fn check_workflow(case: &Case, decision: &Decision) -> Result<(), TestCaseError> {
    let placed: HashSet<&str> = decision.placements.iter().map(|p| p.task_id.as_str()).collect();
    let cancelled: HashSet<&str> = decision.cancellations.iter().map(|c| c.task_id.as_str()).collect();
    let pending: Vec<&str> = decision.pending.iter().map(|p| p.task_id.as_str()).collect();
    prop_assert_eq!(placed.len() + cancelled.len() + pending.len(), case.waiting.len());
    for task in &case.waiting {
        let id = task.id.as_str();
        let (met, never) = dependencies_verdict(task);
        let places = [placed.contains(id), cancelled.contains(id), pending.contains(&id)];
        prop_assert_eq!(places.iter().filter(|p| **p).count(), 1, "{} is in one list", id);
        if placed.contains(id) {
            prop_assert!(!task.gate.held, "held {} placed", id);
            prop_assert!(met, "{} placed before its dependencies were met", id);
        }
        let should_cancel = !task.gate.held && never && !task.gate.keep_on_dependency_failure;
        prop_assert_eq!(cancelled.contains(id), should_cancel, "{} cancellation", id);
    }
    check_caps(case, decision)?;
    check_order(case, decision)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn decisions_keep_the_workflow_rules(case in arb_case()) {
        let decision = case.decide();
        check_workflow(&case, &decision)?;
        let mut reversed = case.clone();
        reversed.waiting.reverse();
        prop_assert_eq!(&reversed.decide(), &decision, "input order does not matter");
    }
}

// ---------------------------------------------------------------------------------------
// Many decisions: a tiny machine where placed tasks run for a while and free their memory
// ---------------------------------------------------------------------------------------

/// A task of the model: arrives at `arrival` (a tick), needs `gpus` GPUs with
/// `requirement_mib` each, runs `ticks` ticks once placed.
#[derive(Debug, Clone)]
struct ModelTask {
    arrival: u32,
    gpus: u32,
    requirement_mib: u64,
    ticks: u32,
    user: u32,
    priority: i64,
    /// (kind, earlier task) pairs; every model task finishes, so afterok/afterany are met.
    after: Vec<(DependencyKind, usize)>,
    array: Option<(u8, u32)>,
}

/// Where a model task is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    NotYet,
    Waiting,
    Running { gpu_mask: u32, until: u32, started: u32 },
    Finished { started: u32, ended: u32 },
    Cancelled { at: u32 },
}

const TICK_MS: u64 = 10_000;

struct Model {
    gpus: u32,
    tasks: Vec<ModelTask>,
    phases: Vec<Phase>,
    config: SchedConfig,
    reservation: Option<Reservation>,
    /// Tasks declare time limits equal to how long they run.
    limits: bool,
}

impl Model {
    fn new(gpus: u32, tasks: Vec<ModelTask>, config: SchedConfig, limits: bool) -> Model {
        let phases = vec![Phase::NotYet; tasks.len()];
        Model { gpus, tasks, phases, config, reservation: None, limits }
    }

    fn limit_of(&self, task: &ModelTask) -> Option<u64> {
        self.limits.then_some(u64::from(task.ticks) * TICK_MS)
    }

    fn now(tick: u32) -> u64 {
        NOW_MS + u64::from(tick) * TICK_MS
    }

    fn dependency_state(&self, i: usize) -> DependencyState {
        match self.phases[i] {
            Phase::NotYet => DependencyState::Unknown,
            Phase::Waiting => DependencyState::Pending,
            Phase::Running { .. } => DependencyState::Running,
            Phase::Finished { .. } => DependencyState::Finished,
            Phase::Cancelled { .. } => DependencyState::Cancelled,
        }
    }

    fn views(&self) -> Vec<GpuView> {
        (0..self.gpus)
            .map(|g| {
                let used: u64 = self
                    .tasks
                    .iter()
                    .zip(&self.phases)
                    .filter(|(_, p)| matches!(p, Phase::Running { gpu_mask, .. } if gpu_mask & (1 << g) != 0))
                    .map(|(t, _)| t.requirement_mib)
                    .sum();
                gpu(g, GPU_MIB.saturating_sub(used))
            })
            .collect()
    }

    fn usage(&self, now_ms: u64) -> Vec<UserUsage> {
        let mut usage: BTreeMap<u32, f64> = BTreeMap::new();
        for (task, phase) in self.tasks.iter().zip(&self.phases) {
            let (start, end) = match *phase {
                Phase::Running { started, .. } => (Model::now(started), now_ms),
                Phase::Finished { started, ended } => (Model::now(started), Model::now(ended)),
                _ => continue,
            };
            let half_life = self.config.fair_share.half_life_ms;
            *usage.entry(task.user).or_default() += decayed_gpu_ms(task.gpus, start, end, now_ms, half_life);
        }
        usage.into_iter().map(|(user, gpu_ms)| UserUsage { user, gpu_ms }).collect()
    }

    fn input_tasks(&self) -> (Vec<WaitingTask>, Vec<RunningTask>) {
        let mut waiting = Vec::new();
        let mut running = Vec::new();
        for (i, (task, phase)) in self.tasks.iter().zip(&self.phases).enumerate() {
            let array = task.array.map(|(a, n)| ArraySlot { array_id: format!("a{a}"), running_max: n });
            match *phase {
                Phase::Waiting => waiting.push(WaitingTask {
                    id: format!("t{i:03}"),
                    submit_seq: i as u64,
                    gpus: task.gpus,
                    requirement_mib: Some(task.requirement_mib),
                    recovery: None,
                    mig_profile: None,
                    submitted_ms: u64::from(task.arrival) * TICK_MS,
                    sm_estimate: None,
                    runtime_estimate_ms: None,
                    expected_run: None,
                    gate: TaskGate {
                        user: task.user,
                        priority: task.priority,
                        held: false,
                        dependencies: task
                            .after
                            .iter()
                            .map(|&(kind, d)| Dependency {
                                task_id: format!("t{d:03}"),
                                kind,
                                state: self.dependency_state(d),
                            })
                            .collect(),
                        keep_on_dependency_failure: false,
                        array,
                        time_limit_ms: self.limit_of(task),
                        begin_ms: None,
                        reservation: None,
                    },
                }),
                Phase::Running { gpu_mask, started, .. } => running.push(RunningTask {
                    id: format!("t{i:03}"),
                    gpus: (0..self.gpus)
                        .filter(|g| gpu_mask & (1 << g) != 0)
                        .map(|g| format!("GPU-{g}"))
                        .collect(),
                    requirement_mib: Some(task.requirement_mib),
                    launched_ms: Model::now(started),
                    observed_mib: Some(task.requirement_mib),
                    exclusive: false,
                    sm_estimate: None,
                    runtime_estimate_ms: None,
                    gate: RunningGate {
                        user: task.user,
                        array_id: array.map(|a| a.array_id),
                        time_limit_ms: self.limit_of(task),
                    },
                }),
                _ => {}
            }
        }
        (waiting, running)
    }

    /// One tick: ends, arrivals, a decision applied. Returns the decision.
    fn step(&mut self, tick: u32) -> Decision {
        for phase in &mut self.phases {
            if let Phase::Running { until, started, .. } = *phase
                && until <= tick
            {
                *phase = Phase::Finished { started, ended: tick };
            }
        }
        for (task, phase) in self.tasks.iter().zip(&mut self.phases) {
            if *phase == Phase::NotYet && task.arrival <= tick {
                *phase = Phase::Waiting;
            }
        }
        let now_ms = Model::now(tick);
        let gpus = self.views();
        let (waiting, running) = self.input_tasks();
        let usage = self.usage(now_ms);
        let decision = decide(&SchedInput {
            now_ms,
            gpus: &gpus,
            waiting: &waiting,
            running: &running,
            rr_cursor: 0,
            config: &self.config,
            gate: GateInput { usage: &usage, reservation: self.reservation.as_ref(), ..Default::default() },
        });
        for placement in &decision.placements {
            let i: usize = placement.task_id[1..].parse().expect("model id");
            let gpu_mask = placement.gpus.iter().map(|u| 1u32 << u[4..].parse::<u32>().expect("GPU-n")).sum();
            self.phases[i] = Phase::Running { gpu_mask, until: tick + self.tasks[i].ticks, started: tick };
        }
        for cancellation in &decision.cancellations {
            let i: usize = cancellation.task_id[1..].parse().expect("model id");
            self.phases[i] = Phase::Cancelled { at: tick };
        }
        if decision.reservation.is_some() {
            self.reservation = decision.reservation.clone();
        }
        decision
    }

    fn done(&self) -> bool {
        self.phases.iter().all(|p| matches!(p, Phase::Finished { .. } | Phase::Cancelled { .. }))
    }
}

fn arb_model_task(count: usize) -> impl Strategy<Value = ModelTask> {
    (
        0u32..30,
        prop_oneof![4 => Just(1u32), 1 => Just(2u32)],
        1024u64..38_000,
        1u32..8,
        0u32..3,
        prop_oneof![3 => Just(0i64), 1 => -3i64..3],
        prop::collection::vec((0u8..3, 0usize..count.max(1)), 0..2),
        prop::option::weighted(0.2, (0u8..2, 1u32..3)),
    )
        .prop_map(|(arrival, gpus, requirement_mib, ticks, user, priority, after, array)| ModelTask {
            arrival,
            gpus,
            requirement_mib,
            ticks,
            user,
            priority,
            after: after
                .into_iter()
                .map(|(k, d)| {
                    (
                        [DependencyKind::AfterOk, DependencyKind::AfterAny, DependencyKind::AfterNotOk]
                            [k as usize],
                        d,
                    )
                })
                .collect(),
            array,
        })
}

fn arb_model() -> impl Strategy<Value = (u32, Vec<ModelTask>, SchedConfig)> {
    let tasks = prop::collection::vec(arb_model_task(20), 1..20);
    let config = (
        any::<bool>(),
        any::<bool>(),
        0u32..3,
        prop::sample::select(vec![Policy::Magm, Policy::Mug, Policy::Lug, Policy::FirstFit]),
    );
    (2u32..5, tasks, config).prop_map(|(gpus, mut tasks, (backfill, fair, gpus_max, policy))| {
        // Dependencies point at earlier tasks only, as `carma submit` guarantees.
        for (i, task) in tasks.iter_mut().enumerate() {
            task.after.retain(|&(_, d)| d < i);
        }
        let config = SchedConfig {
            policy,
            backfill,
            in_flight_grace_ms: 0,
            margin_with_figure_mib: 1024,
            // A cap every task fits under (2 GPUs), or none.
            user_limits: UserLimits {
                gpus_max: if gpus_max == 0 { 0 } else { 2 + gpus_max },
                ..UserLimits::default()
            },
            fair_share: crate::sched::FairShareConfig { enabled: fair, half_life_ms: 60_000 },
            ..SchedConfig::default()
        };
        (gpus, tasks, config)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Rule 6: every task fits an empty machine, so with bounded arrivals each one is placed
    /// (or cancelled, for an afternotok on a task that finished) within the time it takes to
    /// run everything one after the other.
    #[test]
    fn bounded_arrivals_never_starve((gpus, tasks, config) in arb_model(), limits in any::<bool>()) {
        let bound = tasks.iter().map(|t| t.arrival).max().unwrap_or(0)
            + tasks.iter().map(|t| t.ticks + 1).sum::<u32>()
            + 5;
        let mut model = Model::new(gpus, tasks, config, limits);
        let mut tick = 0;
        while !model.done() {
            prop_assert!(tick <= bound, "not done after {} ticks: {:?}", tick, model.phases);
            model.step(tick);
            tick += 1;
        }
        // Dependencies were honoured along the way: afterok started after its dependency ended.
        for (task, phase) in model.tasks.iter().zip(&model.phases) {
            let Phase::Finished { started, .. } = *phase else { continue };
            for &(kind, d) in &task.after {
                let ended = match model.phases[d] {
                    Phase::Finished { ended, .. } => ended,
                    Phase::Cancelled { at } => at,
                    _ => u32::MAX,
                };
                prop_assert!(kind == DependencyKind::AfterNotOk || ended <= started, "started before its dependency ended");
            }
        }
    }

    /// Rule 7: the head `H` (a big task) is blocked by tasks already running; a stream of
    /// smaller tasks behind it is backfilled. Without time limits, `H` starts no later than the
    /// first tick at which its reserved GPUs, holding only what ran on them when they were
    /// reserved, fit it. With time limits (here: exactly each task's run time) tasks that end
    /// before the head's shadow time may use the reserved GPUs, and `H` starts no later than
    /// that shadow time: when everything on its GPUs has ended by its limit.
    #[test]
    fn backfill_never_delays_the_reserved_start(
        limits in any::<bool>(),
        gpus in 2u32..5,
        initial in prop::collection::vec((1024u64..30_000, 1u32..12), 2..6),
        head_mib in 20_000u64..38_000,
        behind in prop::collection::vec(arb_model_task(1), 0..25),
        policy in prop::sample::select(vec![Policy::Magm, Policy::Mug, Policy::Lug, Policy::FirstFit]),
    ) {
        let config = SchedConfig {
            policy,
            backfill: true,
            in_flight_grace_ms: 0,
            margin_with_figure_mib: 1024,
            exclusive_first: false,
            fair_share: crate::sched::FairShareConfig { enabled: false, half_life_ms: 0 },
            ..SchedConfig::default()
        };
        // Tick 0: the initial tasks start, one per GPU in turn (they fit: < 40 GiB each).
        let mut tasks: Vec<ModelTask> = initial
            .iter()
            .map(|&(requirement_mib, ticks)| ModelTask {
                arrival: 0, gpus: 1, requirement_mib, ticks, user: 0, priority: 10, after: vec![], array: None,
            })
            .collect();
        let head = tasks.len();
        tasks.push(ModelTask { arrival: 1, gpus: 1, requirement_mib: head_mib, ticks: 3, user: 0, priority: 5, after: vec![], array: None });
        for mut task in behind {
            task.arrival += 1;
            task.priority = 0;
            task.after.clear();
            task.gpus = 1;
            tasks.push(task);
        }
        let mut model = Model::new(gpus, tasks, config, limits);
        model.step(0);
        let decision = model.step(1);
        if model.phases[..head].contains(&Phase::Waiting) || model.phases[head] != Phase::Waiting {
            // An initial task is still ahead of it, or it fit at once: not the case studied.
            return Ok(());
        }
        let reservation = decision.reservation.clone().expect("the blocked head gets a reservation");
        prop_assert_eq!(&reservation.task_id, &format!("t{head:03}"));
        // The reserved start: the first tick at which, with only the tasks running at tick 1,
        // every reserved GPU has room for the head.
        let reserved: Vec<u32> = reservation.gpus.iter().map(|u| u[4..].parse().expect("GPU-n")).collect();
        let running_then: Vec<(u32, u64, u32)> = model
            .tasks
            .iter()
            .zip(&model.phases)
            .filter_map(|(t, p)| match *p {
                Phase::Running { gpu_mask, until, .. } => Some((gpu_mask, t.requirement_mib, until)),
                _ => None,
            })
            .collect();
        let fits_at = |tick: u32| {
            reserved.iter().all(|&g| {
                let used: u64 = running_then
                    .iter()
                    .filter(|(mask, _, until)| mask & (1 << g) != 0 && *until > tick)
                    .map(|(_, mib, _)| mib)
                    .sum();
                GPU_MIB - used >= head_mib + 1024
            })
        };
        let reserved_start = if limits {
            // The shadow time: the last end of what runs on the reserved GPUs.
            let on_reserved = running_then.iter().filter(|(mask, _, _)| reserved.iter().any(|g| mask & (1 << g) != 0));
            on_reserved.map(|(_, _, until)| *until).max().unwrap_or(1)
        } else {
            (1..200).find(|&t| fits_at(t)).expect("the initial tasks end")
        };
        let mut tick = 2;
        while model.phases[head] == Phase::Waiting {
            prop_assert!(tick <= reserved_start, "the head waits past its reserved start {}", reserved_start);
            model.step(tick);
            tick += 1;
        }
    }
}

/// The issue's case: on two GPUs, a 2-GPU head waits for GPU0; a short task behind it may use
/// the idle GPU1 only when its time limit ends before the head's reserved start.
#[test]
fn a_short_task_uses_a_reserved_gpu_when_it_ends_before_the_heads_start() {
    use super::{Fixture, check};
    let limit = |mut fixture: Fixture, minutes: Option<u64>| {
        let task = fixture.waiting.last_mut().expect("a task");
        task.gate.time_limit_ms = minutes.map(|m| m * 60_000);
        fixture
    };
    let mut fixture = Fixture::new(Policy::Magm).gpu(30.0, Some(0.2)).gpu(40.0, Some(0.0));
    fixture = fixture.running("x", &[0], Some(10.0), Some(10.0), 600);
    fixture.running[0].gate.time_limit_ms = Some(3_600_000);
    fixture = fixture.task("head", 2, Some(35.0));
    fixture = limit(fixture.task("short", 1, Some(2.0)), Some(30));
    fixture = limit(fixture.task("long", 1, Some(2.0)), Some(120));
    fixture = limit(fixture.task("unlimited", 1, Some(2.0)), None);
    check(
        &fixture,
        r#"
place short on GPU-1: idle: GPU1 idle (exclusive first)
wait head: needs 2 GPUs, 1 pass (GPU1); GpuMemory: need 35.0 GiB + 2.0 GiB margin > 30.0 GiB free on GPU0
wait long: Reserved: GPU0 kept for blocked head head (backfill); Reserved: GPU1 kept for blocked head head (backfill)
wait unlimited: Reserved: GPU0 kept for blocked head head (backfill); Reserved: GPU1 kept for blocked head head (backfill)
cursor 0
"#,
    );
}

/// A task placed earlier in the same decision counts toward the head's reserved start: one
/// without a time limit on a reserved GPU leaves the start unknown, so no task may backfill
/// onto the reserved GPUs, however short; with a limit inside the shadow, the short one may.
#[test]
fn a_placement_earlier_in_the_decision_counts_toward_the_heads_start() {
    use super::{Fixture, check};
    let fixture = |first_limit_ms: Option<u64>| {
        let mut fixture = Fixture::new(Policy::Magm).gpu(30.0, Some(0.2)).gpu(40.0, Some(0.0));
        fixture = fixture.running("x", &[0], Some(10.0), Some(10.0), 600);
        fixture.running[0].gate.time_limit_ms = Some(3_600_000);
        fixture = fixture.task("first", 1, Some(2.0)).task("head", 2, Some(35.0)).task("short", 1, Some(2.0));
        fixture.waiting[0].gate.time_limit_ms = first_limit_ms;
        fixture.waiting[2].gate.time_limit_ms = Some(60_000);
        fixture
    };
    check(
        &fixture(None),
        r#"
place first on GPU-1: idle: GPU1 idle (exclusive first)
wait head: needs 2 GPUs, 1 pass (GPU1); GpuMemory: need 35.0 GiB + 2.0 GiB margin > 30.0 GiB free on GPU0
wait short: Reserved: GPU0 kept for blocked head head (backfill); Reserved: GPU1 kept for blocked head head (backfill)
cursor 0
"#,
    );
    check(
        &fixture(Some(1_800_000)),
        r#"
place first on GPU-1: idle: GPU1 idle (exclusive first)
place short on GPU-1: magm: GPU1 has most free memory (38.0 GiB)
wait head: needs 2 GPUs, 1 pass (GPU1); GpuMemory: need 35.0 GiB + 2.0 GiB margin > 30.0 GiB free on GPU0
cursor 0
"#,
    );
}
