//! Queue order: the recovery queue first, then the main queue by priority, fair share, size
//! and submission.
//!
//! **Recovery queue** (tasks with [`super::WaitingTask::recovery`]): by `submit_seq`, then id,
//! before every main-queue task, whatever their priorities, with one bound from fair share:
//! a recovery task passes at most one task of a user whose usage is lower than its owner's.
//! Precisely: let N be the main order below with each recovery task put where it would stand
//! as its owner's first task (rank 0). A recovery task moves up in N to just behind the
//! second-nearest task ahead of it whose user has lower usage (to the front when there is at
//! most one such task); recovery tasks that land in the same place keep `submit_seq` order.
//! So, against the order fair share alone gives, a recovery task overtakes at most one task of
//! a user who used less than its owner; all else it overtakes is of users who used as much or
//! more. Property: `sched::tests::recovery_order::recovery_passes_at_most_one_lower_usage_task`.
//! With fair share off, or equal usage (a fresh queue), every recovery task goes to the front.
//!
//! **Main queue**, by these keys in turn:
//! 1. priority (`priority − nice`), higher first;
//! 2. with fair share on, the submitter's recent GPU time (usage decayed with a half-life,
//!    like Slurm's fair-share factor), lower first, so a user who has had little of the
//!    machine lately goes ahead of one who has had much;
//! 3. with fair share on, the task's rank among its own user's waiting tasks (their first, their
//!    second, ... in their own order by keys 1, 4 and 5), so users with equal usage (all of
//!    them zero on a fresh queue) alternate instead of one user's burst of 200 submissions
//!    standing in front of another's single task;
//! 4. the size key (`[sched.order]`, module `size`): with `size = "size"`, the submission
//!    time less `head-start` per GPU-hour of expected size (GPUs × expected run time), so
//!    bigger tasks go first, except that a task that has waited `overtake-max` is *due*:
//!    due tasks go first, in submission order, so no later task passes one. With
//!    `size = "fifo"` (the default) this key is the same for every task. The deprecated
//!    `size-order-delay-ms` (D), when positive and the size order is off, is the old key:
//!    the submission time minus a bonus `D · w`, with `w = size / (size + SIZE_HALF_GPU_MS)`,
//!    so a task is only overtaken by tasks submitted less than D after it. It is kept so
//!    that an old configuration decides as it did;
//! 5. `submit_seq`, then id.
//!
//! Priority and share come before size: they are the users' and the administrator's
//! statements of whose work matters, while the size order is a throughput heuristic, so it
//! only reorders work that is otherwise equal. Usage moves only when tasks run, so the order
//! changes from tick to tick but never within a decision; with a bounded number of arrivals
//! every task eventually reaches the head (the property tests check it).

use std::cmp::Reverse;
use std::collections::HashMap;

use super::{SchedInput, WaitingTask};

mod config;
mod size;

pub use config::{HEAD_START_MS_DEFAULT, OVERTAKE_MAX_MS_DEFAULT, OrderConfig, SizeOrder};

/// What the queue order expects of a task's run time from launch, and where it came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExpectedRun {
    /// The expected run time, ms.
    pub ms: u64,
    /// Where the figure came from.
    pub source: RunSource,
}

/// Where a task's expected run time came from, in the order the tick tries them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunSource {
    /// The mean run time of earlier finished runs of the same workload.
    History,
    /// The declared time limit, scaled by the mean share of their limits finished tasks used.
    Limit,
    /// The mean run time of finished tasks with as many GPUs (a first-seen task without a
    /// limit).
    Width,
}

impl RunSource {
    /// Plain words for `carma show` and the pending reason.
    pub fn words(self) -> &'static str {
        match self {
            RunSource::History => "earlier runs of its workload",
            RunSource::Limit => "its time limit scaled by how much of their limits tasks used",
            RunSource::Width => "finished tasks with as many GPUs",
        }
    }

    /// A one-word name for JSON.
    pub fn name(self) -> &'static str {
        match self {
            RunSource::History => "history",
            RunSource::Limit => "limit",
            RunSource::Width => "width",
        }
    }
}

/// What the pending reason adds under the size order: the task's expected size and where it
/// came from, or that nothing is known, so a user sees why the order put the task where it is.
pub fn size_note(task: &WaitingTask) -> String {
    match task.expected_run {
        Some(run) => {
            let gpu_h = f64::from(task.gpus.max(1)) * run.ms as f64 / 3_600_000.0;
            format!(
                "expected size {gpu_h:.2} GPU-h ({} GPU x {:.2} h, from {})",
                task.gpus.max(1),
                run.ms as f64 / 3_600_000.0,
                run.source.words()
            )
        }
        None => "expected size unknown (no earlier run, no time limit, no finished task as wide)".to_string(),
    }
}

/// The size at which a task gets half the bonus: one GPU-hour.
pub(super) const SIZE_HALF_GPU_MS: f64 = 3_600_000.0;

/// Positions in `input.waiting`, in the order the decision walks them.
pub fn queue_order(input: &SchedInput<'_>) -> Vec<usize> {
    let waiting = input.waiting;
    let fair = input.config.fair_share.enabled;
    let usage: HashMap<u32, f64> = if fair {
        input.gate.usage.iter().map(|u| (u.user, sanitize(u.gpu_ms))).collect()
    } else {
        HashMap::new()
    };
    let size_key = size_keys(input);
    // Each task's rank among its user's main-queue tasks, in their own order.
    let mut rank = vec![0u32; waiting.len()];
    if fair {
        let mut by_user: Vec<usize> = (0..waiting.len()).filter(|&i| waiting[i].recovery.is_none()).collect();
        by_user.sort_by_key(|&i| {
            let t = &waiting[i];
            (t.gate.user, Reverse(t.gate.priority), size_key[i], t.submit_seq, t.id.as_str())
        });
        for pair in 0..by_user.len() {
            let (i, previous) = (by_user[pair], pair.checked_sub(1).map(|p| by_user[p]));
            rank[i] = match previous {
                Some(p) if waiting[p].gate.user == waiting[i].gate.user => rank[p] + 1,
                _ => 0,
            };
        }
    }
    let usage_of = |i: usize| usage.get(&waiting[i].gate.user).copied().unwrap_or(0.0);
    // N: every task by the main keys, a recovery task as its owner's first (rank 0).
    let mut natural: Vec<usize> = (0..waiting.len()).collect();
    natural.sort_by(|&a, &b| {
        let (ta, tb) = (&waiting[a], &waiting[b]);
        Reverse(ta.gate.priority)
            .cmp(&Reverse(tb.gate.priority))
            .then_with(|| usage_of(a).total_cmp(&usage_of(b)))
            .then_with(|| rank[a].cmp(&rank[b]))
            .then_with(|| size_key[a].cmp(&size_key[b]))
            .then_with(|| (ta.submit_seq, &ta.id).cmp(&(tb.submit_seq, &tb.id)))
    });
    // Each task's slot: its place in N, or for a recovery task the place just behind the
    // second-nearest lower-usage task ahead of it. Recovery tasks go before the main-queue task
    // of their slot, among themselves by submission.
    let slot = |at: usize| -> usize {
        let task = natural[at];
        if waiting[task].recovery.is_none() {
            return at;
        }
        let mut lower = (0..at).rev().filter(|&k| usage_of(natural[k]) < usage_of(task));
        lower.nth(1).map_or(0, |second| second + 1)
    };
    let mut keyed: Vec<(usize, bool, u64, &str, usize)> = (0..natural.len())
        .map(|at| {
            let task = &waiting[natural[at]];
            (slot(at), task.recovery.is_none(), task.submit_seq, task.id.as_str(), natural[at])
        })
        .collect();
    // The last field (the task's position) only breaks ties that unique ids never leave.
    keyed.sort_unstable();
    keyed.into_iter().map(|(.., task)| task).collect()
}

/// Key 4 of every waiting task: the size order's key, the deprecated delay's, or the same for
/// all.
fn size_keys(input: &SchedInput<'_>) -> Vec<(bool, i64)> {
    let delay_ms = input.config.size_order_delay_ms;
    if input.config.order.by_size() {
        size::keys(input)
    } else if delay_ms > 0 {
        // Submission times are Unix ms, far below i64::MAX.
        input
            .waiting
            .iter()
            .map(|t| (false, i64::try_from(order_key_ms(t, delay_ms)).unwrap_or(i64::MAX)))
            .collect()
    } else {
        vec![(false, 0); input.waiting.len()]
    }
}

/// Submission time minus the task's size bonus (see the module docs).
pub(super) fn order_key_ms(task: &WaitingTask, delay_ms: u64) -> u64 {
    task.submitted_ms.saturating_sub(bonus_ms(task, delay_ms))
}

/// `D · size / (size + SIZE_HALF_GPU_MS)`, strictly below D.
pub(super) fn bonus_ms(task: &WaitingTask, delay_ms: u64) -> u64 {
    let Some(runtime_ms) = task.runtime_estimate_ms else { return 0 };
    let size = f64::from(task.gpus.max(1)) * runtime_ms as f64;
    let weight = size / (size + SIZE_HALF_GPU_MS);
    // Huge sizes round the weight up to 1: keep the bonus strictly below D.
    let bonus = ((delay_ms as f64 * weight).floor() as u64).min(delay_ms.saturating_sub(1));
    assert!(delay_ms == 0 || bonus < delay_ms, "the bonus stays below the delay bound");
    bonus
}

/// Usage as a finite, non-negative number (a NaN would make the sort inconsistent).
fn sanitize(gpu_ms: f64) -> f64 {
    if gpu_ms.is_finite() && gpu_ms > 0.0 { gpu_ms } else { 0.0 }
}

/// GPU time of `gpus` GPUs held from `start_ms` to `end_ms`, as seen at `now_ms`, each moment
/// weighted by `2^(-age / half_life)`: the integral of `gpus · 2^(-(now - t) / H)` over the
/// interval, in GPU-milliseconds. A half-life of 0 means no decay. Times after `now_ms` are
/// cut off.
pub fn decayed_gpu_ms(gpus: u32, start_ms: u64, end_ms: u64, now_ms: u64, half_life_ms: u64) -> f64 {
    let end = end_ms.min(now_ms);
    let start = start_ms.min(end);
    let gpus = f64::from(gpus);
    if half_life_ms == 0 {
        return gpus * (end - start) as f64;
    }
    let h = half_life_ms as f64;
    let weight = |t: u64| (-((now_ms - t) as f64) / h * std::f64::consts::LN_2).exp();
    gpus * h / std::f64::consts::LN_2 * (weight(end) - weight(start))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decay_halves_usage_every_half_life() {
        let hour = 3_600_000;
        let fresh = decayed_gpu_ms(2, 0, hour, hour, 0);
        assert_eq!(fresh, 2.0 * hour as f64, "no decay: plain GPU-ms");
        let recent = decayed_gpu_ms(1, 10 * hour, 10 * hour + 1000, 10 * hour + 1000, hour);
        let old = decayed_gpu_ms(1, 9 * hour, 9 * hour + 1000, 10 * hour + 1000, hour);
        assert!((old / recent - 0.5).abs() < 1e-9, "{old} vs {recent}");
        assert_eq!(decayed_gpu_ms(1, 5, 10, 3, hour), 0.0, "nothing after now");
        let whole = decayed_gpu_ms(1, 0, 40 * hour, 40 * hour, hour);
        let limit = hour as f64 / std::f64::consts::LN_2;
        assert!((whole - limit).abs() / limit < 1e-6, "a long run tends to H/ln2: {whole}");
    }
}
