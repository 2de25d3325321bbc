//! The size order (`[sched.order] size = "size"`): its bound on overtaking, that a bigger
//! expected size never moves a task back and that only a task with one moves ahead, that
//! without sizes it is first come first served, and an example of the decision it changes.
//!
//! Method: random queues (priorities, submission times, GPU counts, expected runs or none,
//! running tasks, fair share on or off with one user, a clock) against `queue_order`; each
//! property restates one sentence of `order::size`'s docs. Liveness under the size order is
//! `starvation`'s property, whose configurations include it.

use proptest::prelude::*;

use super::Fixture;
use crate::sched::order::queue_order;
use crate::sched::{
    ExpectedRun, GateInput, GpuView, OrderConfig, Policy, RunSource, RunningTask, SchedConfig, SchedInput,
    SizeOrder, SmBasis, WaitingTask,
};

const NOW_MS: u64 = 100 * 3_600_000;

#[derive(Debug, Clone)]
struct Case {
    gpus: Vec<GpuView>,
    waiting: Vec<WaitingTask>,
    running: Vec<RunningTask>,
    config: SchedConfig,
}

impl Case {
    fn order(&self) -> Vec<usize> {
        let usage = Vec::new();
        let input = SchedInput {
            now_ms: NOW_MS,
            gpus: &self.gpus,
            waiting: &self.waiting,
            running: &self.running,
            rr_cursor: 0,
            config: &self.config,
            gate: GateInput { usage: &usage, reservation: None, gpu_reservations: &[] },
        };
        queue_order(&input)
    }

    /// Where the task `id` stands in the order.
    fn place_of(&self, id: &str) -> usize {
        let order = self.order();
        order.iter().position(|&i| self.waiting[i].id == id).expect("every task is ordered")
    }
}

fn gpu(index: u32) -> GpuView {
    GpuView {
        uuid: format!("GPU-{index}"),
        index,
        memory_total_mib: 40_960,
        memory_free_mib: 40_960,
        sm_active: Some(0.0),
        sm_occupancy: None,
        dram_active: None,
        sample_age_ms: 1000,
        memory_reserved_mib: 0,
        sm_basis: SmBasis::Measured,
        mig: None,
        unavailable: None,
    }
}

/// One waiting task: (priority, minutes waited, GPUs, expected run in minutes or none).
type TaskSpec = (i64, u64, u32, Option<u64>);

fn arb_case() -> impl Strategy<Value = Case> {
    let task = (
        0i64..2,
        0u64..600,
        prop_oneof![6 => Just(1u32), 2 => Just(2u32), 1 => Just(4u32)],
        prop::option::weighted(0.8, 1u64..400),
    );
    let tasks = prop::collection::vec(task, 1..24);
    let running = prop::collection::vec((1usize..3, 0usize..4), 0..10);
    let order = (any::<bool>(), 0u64..600, 0u64..240);
    (1u32..=8, tasks, running, order, any::<bool>()).prop_map(|(gpu_count, tasks, running, order, fair)| {
        let (by_size, overtake_min, head_start_min) = order;
        let mut config = SchedConfig::default();
        config.fair_share.enabled = fair;
        config.order = OrderConfig {
            size: if by_size { SizeOrder::Size } else { SizeOrder::Fifo },
            head_start_ms: head_start_min * 60_000,
            overtake_max_ms: overtake_min * 60_000,
        };
        Case {
            gpus: (0..gpu_count).map(gpu).collect(),
            waiting: waiting(&tasks),
            running: running
                .iter()
                .enumerate()
                .map(|(i, &(width, first))| running_task(i, width, first, gpu_count))
                .collect(),
            config,
        }
    })
}

/// Waiting tasks from their specs, with submission order following the time waited.
fn waiting(specs: &[TaskSpec]) -> Vec<WaitingTask> {
    let mut specs = specs.to_vec();
    // The longest waiter was submitted first.
    specs.sort_by_key(|s| std::cmp::Reverse(s.1));
    specs
        .iter()
        .enumerate()
        .map(|(i, &(priority, waited_min, gpus, run_min))| WaitingTask {
            id: format!("t{i:02}"),
            submit_seq: i as u64,
            gpus,
            requirement_mib: Some(4096),
            recovery: None,
            gate: crate::sched::TaskGate { priority, ..Default::default() },
            mig_profile: None,
            submitted_ms: NOW_MS - waited_min * 60_000,
            sm_estimate: None,
            runtime_estimate_ms: run_min.map(|m| m * 60_000),
            expected_run: run_min.map(|m| ExpectedRun { ms: m * 60_000, source: RunSource::History }),
        })
        .collect()
}

fn running_task(i: usize, width: usize, first: usize, gpu_count: u32) -> RunningTask {
    RunningTask {
        id: format!("r{i:02}"),
        gpus: (0..width).map(|k| format!("GPU-{}", (first + k) % gpu_count as usize)).collect(),
        requirement_mib: Some(4096),
        launched_ms: NOW_MS - 600_000,
        observed_mib: None,
        exclusive: false,
        gate: Default::default(),
        sm_estimate: None,
        runtime_estimate_ms: Some(3_600_000),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// The bound: once a task has waited `overtake-max`, no task of its priority submitted
    /// after it is ahead of it (with one user, so fair share orders nobody).
    #[test]
    fn no_task_passes_one_that_waited_the_bound(case in arb_case()) {
        let order = case.order();
        let bound = case.config.order.overtake_max_ms;
        for (at, &later) in order.iter().enumerate() {
            for &earlier in &order[at + 1..] {
                let (a, b) = (&case.waiting[earlier], &case.waiting[later]);
                if a.gate.priority != b.gate.priority || a.submit_seq > b.submit_seq {
                    continue;
                }
                // `b` (submitted after `a`) is ahead of `a`: `a` must not have waited the bound.
                prop_assert!(
                    NOW_MS - a.submitted_ms < bound,
                    "{} passed {}, which waited {} min of a {} min bound",
                    &b.id, &a.id, (NOW_MS - a.submitted_ms) / 60_000, bound / 60_000
                );
                prop_assert!(case.config.order.by_size(), "FIFO passes nobody");
            }
        }
    }

    /// Only a task with an expected run moves ahead of an earlier one of its priority, and only
    /// by its head start: it was submitted less than `head-start` × its GPU-hours after it.
    #[test]
    fn only_a_sized_task_passes_and_only_by_its_head_start(case in arb_case()) {
        let order = case.order();
        for (at, &task) in order.iter().enumerate() {
            let t = &case.waiting[task];
            for &k in &order[at + 1..] {
                let earlier = &case.waiting[k];
                if earlier.submit_seq > t.submit_seq || earlier.gate.priority != t.gate.priority {
                    continue;
                }
                let run = t.expected_run.expect("only a task with an expected run moves");
                let gpu_hours = f64::from(t.gpus) * run.ms as f64 / 3_600_000.0;
                let head_start = gpu_hours * case.config.order.head_start_ms as f64;
                let later_by = (t.submitted_ms - earlier.submitted_ms) as f64;
                prop_assert!(later_by <= head_start + 1.0, "{} passed {} with a head start of {head_start} ms", &t.id, &earlier.id);
            }
        }
    }

    /// A bigger expected size never moves a task back: doubling one task's expected run
    /// leaves it where it was or further ahead.
    #[test]
    fn a_bigger_size_never_moves_a_task_back(case in arb_case(), pick in any::<prop::sample::Index>()) {
        let mut bigger = case.clone();
        let task = &mut bigger.waiting[pick.index(case.waiting.len())];
        let id = task.id.clone();
        task.expected_run = Some(match task.expected_run {
            Some(run) => ExpectedRun { ms: run.ms * 2, ..run },
            None => ExpectedRun { ms: 3_600_000, source: RunSource::Width },
        });
        prop_assert!(bigger.place_of(&id) <= case.place_of(&id), "{} moved back", id);
    }

    /// Without any expected run the size order is first come, first served (by priority).
    #[test]
    fn without_sizes_the_size_order_is_fifo(mut case in arb_case()) {
        case.config.order.size = SizeOrder::Size;
        for task in &mut case.waiting {
            task.expected_run = None;
        }
        let order = case.order();
        let mut fifo: Vec<usize> = (0..case.waiting.len()).collect();
        fifo.sort_by_key(|&i| (std::cmp::Reverse(case.waiting[i].gate.priority), i));
        prop_assert_eq!(order, fifo);
    }
}

/// Goal: the decision the size order changes, on two idle GPUs with room for one task each.
/// Three 10-minute tasks then a 2-hour one submitted 3 minutes after the last: first come
/// first served places two short ones, and the long one would end the run alone. With a head
/// start of an hour per GPU-hour the long one counts as submitted two hours earlier and
/// starts now, beside the first. With `overtake-max` below the short tasks' wait they are
/// due, and nobody passes them.
#[test]
fn size_order_starts_the_long_task_first_within_the_bound() {
    let base = Fixture::new(Policy::Magm)
        .gpu(40.0, Some(0.0))
        .gpu(40.0, Some(0.0))
        .task("s1", 1, Some(30.0))
        .expected_min(10)
        .task("s2", 1, Some(30.0))
        .expected_min(10)
        .task("s3", 1, Some(30.0))
        .expected_min(10)
        .task("long", 1, Some(30.0))
        .expected_min(120);
    let placed = |fixture: &Fixture| {
        fixture.clone().decide().placements.into_iter().map(|p| p.task_id).collect::<Vec<_>>()
    };
    assert_eq!(placed(&base), ["s1", "s2"], "FIFO");
    let by_size = base.with(|c| c.order.size = SizeOrder::Size);
    assert_eq!(placed(&by_size), ["long", "s1"], "the size order");
    let waited = by_size.clone().with(|c| c.order.overtake_max_ms = 30 * 60_000);
    assert_eq!(placed(&waited), ["s1", "s2"], "every short task has waited the 30 min bound");
}
