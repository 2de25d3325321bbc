//! The size order (`[sched.order] size = "size"`): bigger tasks first, by a head start that
//! grows with their expected size, with overtaking bounded in time, separately.
//!
//! Why: in an overloaded queue a long or wide task that reaches the head late ends the run
//! alone, or drains GPUs for itself when few tasks are left to fill around it. Starting big
//! tasks earlier shortens that tail; the price is that small tasks wait behind them. The old
//! `size-order-delay-ms` tied the two together (its head start saturated at the bound, so
//! raising the bound mostly moved medium tasks ahead of small ones and left the widest ones
//! little further ahead of the medium ones); here each is a knob of its own with a meaning a
//! person can set.
//!
//! **The key.** A task's size is its GPUs × its expected run time (`expected_run`: the mean of
//! its workload's earlier runs, else its time limit scaled by how much of their limits tasks
//! used, else the mean run of finished tasks with as many GPUs). It counts as submitted
//! `head-start` earlier per GPU-hour of size: with `head-start = "1h"`, a 2-GPU task expected
//! to run 1.5 h (3 GPU-hours) goes before a one-GPU 20-minute task submitted up to 2 h 40 min
//! before it. A task with no expected run gets no head start.
//!
//! **The bound.** A task that has waited `overtake-max` (now − its submission) is *due*: due
//! tasks come first, in submission order, so no task submitted after a due task goes ahead
//! of it (among tasks of equal priority and share), however big. With a bounded number of
//! arrivals every task therefore reaches the head. Properties: `sched::tests::order_size`.

use super::super::{SchedInput, WaitingTask};

/// Key 4 of every waiting task under the size order: (not due, submission less head start).
/// Recovery tasks keep their submission; their own queue goes first anyway.
pub(super) fn keys(input: &SchedInput<'_>) -> Vec<(bool, i64)> {
    let order = &input.config.order;
    input
        .waiting
        .iter()
        .map(|task| {
            let due = input.now_ms.saturating_sub(task.submitted_ms) >= order.overtake_max_ms;
            // Unix ms, far below i64::MAX.
            let submitted = i64::try_from(task.submitted_ms).unwrap_or(i64::MAX);
            let moves = !due && task.recovery.is_none();
            let head_start = if moves { head_start_ms(task, order.head_start_ms) } else { 0 };
            (!due, submitted.saturating_sub(head_start))
        })
        .collect()
}

/// `head_start_per_gpu_hour_ms` × the task's expected GPU-hours (0 without an expected run).
pub(super) fn head_start_ms(task: &WaitingTask, head_start_per_gpu_hour_ms: u64) -> i64 {
    let Some(run) = task.expected_run else { return 0 };
    let gpu_hours = f64::from(task.gpus.max(1)) * run.ms as f64 / 3_600_000.0;
    // At most about 30 000 years: no real size comes near, and no key overflows.
    (gpu_hours * head_start_per_gpu_hour_ms as f64).clamp(0.0, 1e15) as i64
}
