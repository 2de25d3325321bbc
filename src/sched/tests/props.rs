//! Property tests: random GPUs, running tasks, queues and configs; every
//! decision must keep the invariants below. The checker re-derives effective
//! free memory, idleness and the backfill reservation from the input on its
//! own, walking the placements in the order they were made (queue order).
//!
//! Rules checked, per placement P of task T, with the GPU state before P
//! (running tasks plus the placements before P in this decision):
//! 1. memory: on every GPU of P, free − in-flight − Σ assumed(earlier
//!    placements) ≥ need, where need = requirement + margin_with_figure,
//!    margin_without_figure when T has no figure, and recovery requirement +
//!    step for a recovery task; exempt when all of P's GPUs were idle, or the
//!    policy is round-robin and T is not in recovery;
//! 2. SM: windowed sm_active ≤ sm_cap (unknown passes), and the risk gate
//!    when on; same exemptions;
//! 3. P's task is waiting, not running, placed once, with exactly its GPU
//!    count of distinct known GPUs, none held exclusively; an exclusive P
//!    is on idle GPUs; every waiting task is placed xor has one pending reason;
//!    at most placements_per_tick_max placements;
//! 4. FIFO: without backfill every eligible task ahead of a placed task is
//!    placed; with backfill no task behind the head uses a reserved GPU;
//! 5. determinism: the same input, or the queue reversed, gives the same output.
//!
//! With the projected gate on, rule 2 is: on every GPU of P that has carma tasks, the summed
//! standalone SM estimates of its running tasks and of the placements before P, plus T's,
//! stay within `sm_projected_cap` (`sm_unknown` for a task without an estimate). With the
//! size-aware order, "queue order" is the order key's. `backfill_by_time` is left off here
//! (its shadow is checked in `sharing` and by the starvation property).
//!
//! Property 6 (`queue_order_bounds_the_delay`): the main queue is FIFO without the size
//! order; with it, a task is visited after another only if it was submitted less than the
//! delay bound before it; the recovery queue always comes first.

use std::cmp::Reverse;
use std::collections::{HashMap, HashSet};

use proptest::prelude::*;

use crate::sched::{
    Decision, GpuView, Policy, Recovery, RecoveryConfig, RecoveryMode, RunningTask, SchedConfig, SchedInput,
    SmBasis, WaitingTask, decide,
};

const NOW_MS: u64 = 10_000_000;

#[derive(Debug, Clone)]
struct Case {
    gpus: Vec<GpuView>,
    waiting: Vec<WaitingTask>,
    running: Vec<RunningTask>,
    config: SchedConfig,
    rr_cursor: u32,
}

impl Case {
    fn input(&self) -> SchedInput<'_> {
        SchedInput {
            now_ms: NOW_MS,
            gpus: &self.gpus,
            waiting: &self.waiting,
            running: &self.running,
            rr_cursor: self.rr_cursor,
            config: &self.config,
            gate: Default::default(),
        }
    }

    fn decide(&self) -> Decision {
        decide(&self.input())
    }
}

type GpuSpec = (u64, u64, Option<f32>, Option<f32>, Option<f32>);
type RunningSpec = (Vec<u32>, Option<u64>, Option<u64>, u64, bool, Option<f32>);
type WaitingSpec = (u32, Option<u64>, Option<(u32, u64, bool)>, u64, (u64, Option<f32>, Option<u64>));

fn arb_gpu() -> impl Strategy<Value = GpuSpec> {
    let used_pct = prop_oneof![1 => Just(0u64), 4 => 0u64..=100];
    (
        prop::sample::select(vec![16_384u64, 40_960, 81_920]),
        used_pct,
        prop::option::of(0.0f32..1.0),
        prop::option::of(0.0f32..1.0),
        prop::option::of(0.0f32..1.0),
    )
}

fn arb_running() -> impl Strategy<Value = RunningSpec> {
    (
        prop::collection::vec(0u32..8, 1..=2),
        prop::option::of(512u64..30_000),
        prop::option::of(0u64..30_000),
        0u64..300_000,
        prop::bool::weighted(0.15),
        prop::option::of(0.0f32..1.0),
    )
}

fn arb_waiting() -> impl Strategy<Value = WaitingSpec> {
    let gpus = prop_oneof![12 => Just(1u32), 4 => Just(2u32), 2 => Just(3u32), 1 => 0u32..=9];
    let recovery = prop::option::weighted(0.2, (1u32..4, 1024u64..45_000, any::<bool>()));
    let learned = (0u64..9_000_000, prop::option::of(0.0f32..1.0), prop::option::of(60_000u64..14_400_000));
    (gpus, prop::option::weighted(0.8, 256u64..40_000), recovery, 0u64..60, learned)
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
    let flags = (any::<bool>(), any::<bool>(), any::<bool>());
    let sizes = (0u64..4096, 0u64..8192, 0u64..200_000, 0u64..4096, 0u32..20, 0u32..10);
    let projected =
        (prop_oneof![Just(0.0f32), 0.5f32..2.5], 0.05f32..1.0, prop_oneof![Just(0u64), 0u64..14_400_000]);
    (policy, 0.3f32..1.0, flags, sizes, 1024u64..8192, projected).prop_map(
        |(policy, sm_cap, (risk_gate, exclusive_first, backfill), sizes, step_mib, projected)| {
            let (with, without, grace, idle, limit, depth) = sizes;
            let (sm_projected_cap, sm_unknown, size_order_delay_ms) = projected;
            SchedConfig {
                policy,
                sm_cap,
                margin_with_figure_mib: with,
                margin_without_figure_mib: without,
                risk_gate,
                exclusive_first,
                backfill,
                in_flight_grace_ms: grace,
                idle_used_mib_max: idle,
                placements_per_tick_max: limit,
                backfill_depth_max: depth,
                sm_projected_cap,
                sm_unknown,
                size_order_delay_ms,
                backfill_by_time: false,
                recovery: RecoveryConfig { step_mib, ..RecoveryConfig::default() },
                ..SchedConfig::default()
            }
        },
    )
}

fn arb_case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(arb_gpu(), 1..=8),
        prop::collection::vec(arb_running(), 0..=10),
        prop::collection::vec(arb_waiting(), 0..=40),
        arb_config(),
        0u32..16,
        prop::bool::weighted(0.2),
    )
        .prop_map(|(gpus, running, waiting, config, rr_cursor, steal)| {
            build(&gpus, &running, &waiting, config, rr_cursor, steal)
        })
}

fn build(
    gpus: &[GpuSpec],
    running: &[RunningSpec],
    waiting: &[WaitingSpec],
    config: SchedConfig,
    rr_cursor: u32,
    steal: bool,
) -> Case {
    let gpu_views = build_gpus(gpus);
    let gpu_count = gpu_views.len() as u32;
    let running_tasks: Vec<RunningTask> = running
        .iter()
        .enumerate()
        .map(|(i, (indices, requirement_mib, observed_mib, age_ms, exclusive, sm_estimate))| {
            let mut indices: Vec<u32> = indices.iter().map(|x| x % gpu_count).collect();
            indices.dedup();
            RunningTask {
                id: format!("r{i}"),
                gpus: indices.iter().map(|x| format!("GPU-{x}")).collect(),
                requirement_mib: *requirement_mib,
                launched_ms: NOW_MS - age_ms,
                observed_mib: *observed_mib,
                exclusive: *exclusive,
                gate: Default::default(),
                sm_estimate: *sm_estimate,
                runtime_estimate_ms: None,
            }
        })
        .collect();
    let mut waiting_tasks: Vec<WaitingTask> = waiting
        .iter()
        .enumerate()
        .map(|(i, &(gpus, requirement_mib, recovery, submit_seq, learned))| WaitingTask {
            id: format!("w{i}"),
            submit_seq,
            gpus,
            requirement_mib,
            recovery: recovery.map(|(oom_count, requirement_mib, looser)| Recovery {
                oom_count,
                requirement_mib,
                mode: if looser { RecoveryMode::Looser } else { RecoveryMode::Exclusive },
            }),
            gate: Default::default(),
            mig_profile: None,
            submitted_ms: NOW_MS - learned.0,
            sm_estimate: learned.1,
            runtime_estimate_ms: learned.2,
            expected_run: None,
        })
        .collect();
    if steal && !running_tasks.is_empty() && !waiting_tasks.is_empty() {
        waiting_tasks[0].id = running_tasks[0].id.clone();
    }
    Case { gpus: gpu_views, waiting: waiting_tasks, running: running_tasks, config, rr_cursor }
}

fn build_gpus(gpus: &[GpuSpec]) -> Vec<GpuView> {
    gpus.iter()
        .enumerate()
        .map(|(i, &(total, used_pct, sm_active, sm_occupancy, dram_active))| {
            let free = total - total * used_pct / 100;
            // Part of the gap between total and free is the driver's, on some GPUs.
            let reserved = if i % 2 == 1 { (total - free).min(1536) } else { 0 };
            (i, total, free, reserved, sm_active, sm_occupancy, dram_active)
        })
        .map(|(i, total, free, reserved, sm_active, sm_occupancy, dram_active)| GpuView {
            uuid: format!("GPU-{i}"),
            index: i as u32,
            memory_total_mib: total,
            memory_free_mib: free,
            sm_active,
            sm_occupancy,
            dram_active,
            sample_age_ms: 500,
            memory_reserved_mib: reserved,
            sm_basis: SmBasis::Measured,
            mig: None,
            unavailable: None,
        })
        .collect()
}

/// The checker's own view of one GPU.
#[derive(Clone, Default)]
struct Shadow {
    tasks: u32,
    in_flight_mib: u64,
    placed_mib: u64,
    exclusive: bool,
    projected_sm: f32,
}

/// A standalone SM estimate as the checker reads it: non-finite or missing is `sm_unknown`.
fn sm_of(estimate: Option<f32>, config: &SchedConfig) -> f32 {
    estimate.filter(|v| v.is_finite()).unwrap_or(config.sm_unknown).clamp(0.0, 1.0)
}

struct Checker<'a> {
    case: &'a Case,
    shadows: Vec<Shadow>,
}

impl<'a> Checker<'a> {
    fn new(case: &'a Case) -> Self {
        let mut shadows = vec![Shadow::default(); case.gpus.len()];
        let config = &case.config;
        for task in &case.running {
            let young = NOW_MS - task.launched_ms < config.in_flight_grace_ms;
            let expected = task.requirement_mib.unwrap_or(config.margin_without_figure_mib);
            let in_flight = if young { expected.saturating_sub(task.observed_mib.unwrap_or(0)) } else { 0 };
            for uuid in &task.gpus {
                let shadow = &mut shadows[gpu_position(case, uuid).expect("generated GPU")];
                shadow.tasks += 1;
                shadow.in_flight_mib += in_flight;
                shadow.exclusive |= task.exclusive;
                shadow.projected_sm += sm_of(task.sm_estimate, config);
            }
        }
        Checker { case, shadows }
    }

    fn free_effective_mib(&self, position: usize) -> u64 {
        let shadow = &self.shadows[position];
        self.case.gpus[position]
            .memory_free_mib
            .saturating_sub(shadow.in_flight_mib)
            .saturating_sub(shadow.placed_mib)
    }

    fn is_idle(&self, position: usize) -> bool {
        let gpu = &self.case.gpus[position];
        let used = gpu.memory_total_mib - gpu.memory_free_mib - gpu.memory_reserved_mib;
        self.shadows[position].tasks == 0 && used <= self.case.config.idle_used_mib_max
    }

    fn apply(&mut self, positions: &[usize], assumed_mib: u64, exclusive: bool, sm: f32) {
        for &p in positions {
            self.shadows[p].tasks += 1;
            self.shadows[p].placed_mib += assumed_mib;
            self.shadows[p].exclusive |= exclusive;
            self.shadows[p].projected_sm += sm;
        }
    }

    /// Rules 1–3 for one placement, then records it.
    fn placement(
        &mut self,
        task: &WaitingTask,
        placement: &crate::sched::Placement,
    ) -> Result<(), TestCaseError> {
        let config = &self.case.config;
        let positions: Vec<usize> =
            placement.gpus.iter().map(|u| gpu_position(self.case, u).expect("known GPU")).collect();
        prop_assert_eq!(positions.len(), task.gpus as usize);
        let distinct: HashSet<usize> = positions.iter().copied().collect();
        prop_assert_eq!(distinct.len(), positions.len(), "a GPU listed twice");
        for &p in &positions {
            prop_assert!(!self.shadows[p].exclusive, "placed on an exclusive GPU");
        }
        let all_idle = positions.iter().all(|&p| self.is_idle(p));
        prop_assert!(!placement.exclusive || all_idle, "exclusive placement on a busy GPU");
        let requirement = task.recovery.as_ref().map(|r| r.requirement_mib).or(task.requirement_mib);
        prop_assert_eq!(placement.requirement_mib, requirement);
        let round_robin = task.recovery.is_none() && config.policy == Policy::RoundRobin;
        if !(all_idle || round_robin) {
            let need = match &task.recovery {
                Some(r) => {
                    prop_assert_eq!(r.mode, RecoveryMode::Looser, "exclusive recovery shared a GPU");
                    r.requirement_mib + config.recovery.step_mib
                }
                None => match task.requirement_mib {
                    Some(mib) => mib + config.margin_with_figure_mib,
                    None => config.margin_without_figure_mib,
                },
            };
            for &p in &positions {
                prop_assert!(self.free_effective_mib(p) >= need, "memory gate broken on GPU{}", p);
                let gpu = &self.case.gpus[p];
                let sm = gpu.sm_active.unwrap_or(0.0);
                if config.sm_projected_cap > 0.0 {
                    let projected = self.shadows[p].projected_sm;
                    let task_sm = sm_of(task.sm_estimate, config);
                    let ok =
                        self.shadows[p].tasks == 0 || projected + task_sm <= config.sm_projected_cap + 1e-3;
                    prop_assert!(ok, "projected SM cap broken on GPU{}: {} + {}", p, projected, task_sm);
                } else {
                    prop_assert!(sm <= config.sm_cap, "SM cap broken on GPU{}", p);
                }
                let risky = sm >= 0.8
                    && (gpu.sm_occupancy.unwrap_or(0.0) >= 0.45 || gpu.dram_active.unwrap_or(0.0) >= 0.4);
                prop_assert!(!(config.risk_gate && risky), "risk gate broken on GPU{}", p);
            }
        }
        let assumed = requirement.unwrap_or(config.margin_without_figure_mib);
        self.apply(&positions, assumed, placement.exclusive, sm_of(task.sm_estimate, config));
        Ok(())
    }

    /// The backfill reservation of `head` in the current shadow state.
    fn reservation(&self, head: &WaitingTask) -> HashSet<usize> {
        let config = &self.case.config;
        // A figure that fits the memory of fewer GPUs than the head needs, even empty, waits
        // for idle GPUs too.
        let whole = head.requirement_mib.is_some_and(|mib| {
            let need = mib + config.margin_with_figure_mib;
            self.case.gpus.iter().filter(|g| g.memory_total_mib >= need).count() < head.gpus as usize
        });
        let needs_idle = match &head.recovery {
            Some(r) => r.mode == RecoveryMode::Exclusive,
            None => config.policy == Policy::Exclusive || (config.policy != Policy::RoundRobin && whole),
        };
        let mut positions: Vec<usize> =
            (0..self.case.gpus.len()).filter(|&p| !self.shadows[p].exclusive).collect();
        if needs_idle {
            let gpus = &self.case.gpus;
            positions.sort_by_key(|&p| {
                (
                    self.shadows[p].tasks,
                    gpus[p].memory_total_mib - gpus[p].memory_free_mib - gpus[p].memory_reserved_mib,
                    p,
                )
            });
        } else {
            positions.sort_by_key(|&p| (Reverse(self.free_effective_mib(p)), p));
        }
        positions.into_iter().take(head.gpus as usize).collect()
    }
}

fn gpu_position(case: &Case, uuid: &str) -> Option<usize> {
    case.gpus.iter().position(|g| g.uuid == uuid)
}

/// Recovery first by `submit_seq`; the main queue by the order key (submission time less the
/// size bonus; FIFO when the delay is 0), then `submit_seq`, then id.
fn queue_order(waiting: &[WaitingTask], delay_ms: u64) -> Vec<&WaitingTask> {
    let key = |t: &WaitingTask| {
        if t.recovery.is_some() || delay_ms == 0 { 0 } else { crate::sched::order::order_key_ms(t, delay_ms) }
    };
    let mut order: Vec<&WaitingTask> = waiting.iter().collect();
    order.sort_by(|a, b| {
        (a.recovery.is_none(), key(a), a.submit_seq, &a.id).cmp(&(
            b.recovery.is_none(),
            key(b),
            b.submit_seq,
            &b.id,
        ))
    });
    order
}

/// Rule 3's bookkeeping: ids placed once, pending once, nothing running placed.
fn check_accounting(case: &Case, decision: &Decision) -> Result<(), TestCaseError> {
    let running: HashSet<&str> = case.running.iter().map(|t| t.id.as_str()).collect();
    let mut placed = HashSet::new();
    for placement in &decision.placements {
        prop_assert!(placed.insert(placement.task_id.as_str()), "task placed twice");
        prop_assert!(!running.contains(placement.task_id.as_str()), "running task placed");
    }
    let mut pending_count: HashMap<&str, u32> = HashMap::new();
    for pending in &decision.pending {
        *pending_count.entry(pending.task_id.as_str()).or_default() += 1;
        prop_assert!(!pending.reason.is_empty());
    }
    for task in &case.waiting {
        let pending = pending_count.get(task.id.as_str()).copied().unwrap_or(0);
        let expected = if placed.contains(task.id.as_str()) { 0 } else { 1 };
        prop_assert_eq!(pending, expected, "task {} pending count", &task.id);
    }
    prop_assert!(decision.placements.len() <= case.config.placements_per_tick_max as usize);
    Ok(())
}

/// Rules 1–4 over the whole decision.
fn check_decision(case: &Case, decision: &Decision) -> Result<(), TestCaseError> {
    check_accounting(case, decision)?;
    let order = queue_order(&case.waiting, case.config.size_order_delay_ms);
    let running: HashSet<&str> = case.running.iter().map(|t| t.id.as_str()).collect();
    let eligible = |t: &WaitingTask| {
        !running.contains(t.id.as_str()) && t.gpus >= 1 && t.gpus as usize <= case.gpus.len()
    };
    let placed: HashMap<&str, &crate::sched::Placement> =
        decision.placements.iter().map(|p| (p.task_id.as_str(), p)).collect();
    let head = order.iter().position(|t| eligible(t) && !placed.contains_key(t.id.as_str()));
    let mut checker = Checker::new(case);
    let mut reserved: Option<HashSet<usize>> = None;
    let mut next_placement = 0;
    for (position, task) in order.iter().enumerate() {
        if head == Some(position) && case.config.backfill {
            reserved = Some(checker.reservation(task));
        }
        let Some(placement) = placed.get(task.id.as_str()) else {
            continue;
        };
        prop_assert_eq!(
            &decision.placements[next_placement].task_id,
            &task.id,
            "placements follow queue order"
        );
        next_placement += 1;
        if let Some(head) = head.filter(|&h| h < position) {
            prop_assert!(
                case.config.backfill,
                "{} overtook head {} under strict FIFO",
                &task.id,
                &order[head].id
            );
            let reserved = reserved.as_ref().expect("reservation computed at the head");
            for uuid in &placement.gpus {
                let p = gpu_position(case, uuid).expect("known GPU");
                prop_assert!(!reserved.contains(&p), "backfilled {} on reserved GPU{}", &task.id, p);
            }
        }
        checker.placement(task, placement)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn queue_order_bounds_the_delay(case in arb_case()) {
        let delay_ms = case.config.size_order_delay_ms;
        let order = crate::sched::order::queue_order(&case.input());
        prop_assert_eq!(order.len(), case.waiting.len());
        let tasks: Vec<&WaitingTask> = order.iter().map(|&i| &case.waiting[i]).collect();
        let first_main = tasks.iter().position(|t| t.recovery.is_none()).unwrap_or(tasks.len());
        prop_assert!(tasks[first_main..].iter().all(|t| t.recovery.is_none()), "recovery queue first");
        let main = &tasks[first_main..];
        for (i, earlier) in main.iter().enumerate() {
            for later in &main[i + 1..] {
                if delay_ms == 0 {
                    prop_assert!(earlier.submit_seq <= later.submit_seq, "FIFO without the size order");
                } else {
                    // `earlier` may overtake `later` only if submitted less than the bound after it.
                    prop_assert!(
                        earlier.submitted_ms < later.submitted_ms.saturating_add(delay_ms),
                        "{} overtook {} by more than {} ms", &earlier.id, &later.id, delay_ms
                    );
                }
            }
        }
    }

    #[test]
    fn decisions_keep_the_invariants(case in arb_case()) {
        let decision = case.decide();
        check_decision(&case, &decision)?;
        prop_assert_eq!(&case.decide(), &decision, "same input, same output");
        let mut reversed = case.clone();
        reversed.waiting.reverse();
        prop_assert_eq!(&reversed.decide(), &decision, "input order does not matter");
    }
}
