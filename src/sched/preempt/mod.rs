//! Preemption: which waiting task may take GPUs back from running tasks, and from which.
//!
//! Pure, like the rest of `sched`: [`preempt`] takes the decision's own input and outcome,
//! what it must know of each running task (priority, opt-in, its attempt's start and last
//! checkpoint, how often it was preempted, its owner's fair-share usage) and when each
//! waiting task entered the queue, and returns at most one [`Preemption`] per decision. The
//! tick journals it and carries it out (`tick::preempt`); `carma simulate` runs the same tick.
//!
//! # Rules
//!
//! **When.** Only with `[sched.preemption] mode` other than `off`, and only for a task the
//! decision left waiting:
//! - a waiting task that could start if running tasks at least `priority-gap` lower in priority
//!   gave way; or
//! - the blocked head of the queue (the first task tried that did not fit), once it has waited
//!   `head-wait` since it entered the queue, against tasks of its priority or lower, unless it
//!   is expected to fit within another `head-wait` anyway: `decide` places it once the running
//!   tasks expected to end by then (launch + run-time estimate) are gone.
//!
//! Candidates are tried in queue order, at most [`CANDIDATES_MAX`] of them; the first that
//! finds victims wins.
//!
//! **Fit, by every precondition.** Whether the task fits is answered by [`decide`] itself on
//! the world without the victims ([`without_victims`]): their GPUs give back the memory their
//! processes hold and their share of the measured SM activity, their memory in flight and
//! their places in the user caps go with them, and the task is the only one waiting. So memory,
//! SM activity, the risk gate, MIG profiles, exclusive holders, holds, dependencies and caps
//! are judged by the code that places tasks, not by a copy of it. A task that fits with no
//! victim at all waits for something else (the head's reservation, strict FIFO, the per-tick
//! limit) and preempts nobody. A task that is not the head may not be placed on the GPUs kept
//! for the head.
//!
//! **Who may be a victim.** A running task that opted in (`--requeue`, or the administrator's
//! `requeue-default`), whose attempt has run at least `min-run`, that was preempted fewer than
//! `max-per-task` times (every notice counts: a preemption that was later withdrawn too, and a
//! suspension), not within `withdrawn-rest` of its last withdrawn preemption, and whose
//! priority is at most the waiting task's minus the gap (the head: at most its own). Never a task already being preempted; while one is, nobody else is
//! preempted (one preemption at a time keeps the freed GPUs for the task they were freed for).
//!
//! **Which victims.** The fewest whose release makes the task fit; among sets of that size, the
//! least work lost in total (each victim's time since its last checkpoint, or since its start
//! when it never reported one), then the lowest highest priority, then the highest fair-share
//! usage, then ids. Sets are tried smallest first, at most [`SETS_TRIED_MAX`] per candidate;
//! past that the victims are taken greedily in that preference order and then thinned while
//! the task still fits.

mod config;
mod resume;

use std::collections::BTreeMap;

pub use config::{PreemptionConfig, PreemptionMode};
pub(super) use config::{de_duration, ser_duration};
pub use resume::{Suspended, held_room, may_resume};

use super::table::sm_or_unknown;
use super::{Decision, GpuView, RunningTask, SchedInput, WaitingTask, decide};

/// At most this many waiting tasks are tried as preemptors in one decision.
const CANDIDATES_MAX: usize = 8;
/// At most this many victim sets are tried for one candidate before the greedy choice.
const SETS_TRIED_MAX: usize = 256;

/// What preemption must know of a running task beyond [`RunningTask`].
#[derive(Debug, Clone, PartialEq)]
pub struct Preemptible {
    /// Task id (as in [`RunningTask::id`]).
    pub id: String,
    /// The running attempt's number.
    pub attempt: u32,
    /// Its priority (`priority − nice`), as the queue order uses it.
    pub priority: i64,
    /// It may be stopped and queued again (`--requeue`, or the administrator's default).
    pub requeue: bool,
    /// When its attempt started.
    pub started_ms: u64,
    /// The attempt's last checkpoint report, if any.
    pub checkpoint_ms: Option<u64>,
    /// Times the task was preempted before.
    pub preemptions: u32,
    /// Its owner's decayed recent GPU time (fair share), GPU·ms.
    pub usage_gpu_ms: f64,
    /// It is being preempted now (signalled, not yet stopped).
    pub stopping: bool,
    /// It preempted other tasks to start: the blocked head's rule does not take it back (it
    /// would preempt the task it displaced, and back again).
    pub preemptor: bool,
    /// When a preemption of it was last withdrawn (its preemptor stopped waiting), Unix ms: it
    /// is no victim again until `withdrawn-rest` has passed since.
    pub withdrawn_ms: Option<u64>,
}

/// Everything [`preempt`] needs.
#[derive(Debug, Clone, Copy)]
pub struct PreemptInput<'a> {
    /// The decision's input.
    pub sched: &'a SchedInput<'a>,
    /// The decision made from it.
    pub decision: &'a Decision,
    /// One entry per running task that could be a victim; a running task without one never is.
    pub running: &'a [Preemptible],
    /// When each waiting task entered the queue (its submission, or its last requeue), for
    /// `head-wait`; a task not listed counts from its submission.
    pub queued_since_ms: &'a BTreeMap<String, u64>,
}

/// One preemption: the waiting task and the running tasks that give way to it.
#[derive(Debug, Clone, PartialEq)]
pub struct Preemption {
    /// The waiting task.
    pub preemptor: String,
    /// The tasks to stop, at least one.
    pub victims: Vec<Victim>,
    /// Where the preemptor fits once they are gone (the GPUs to keep for it).
    pub gpus: Vec<String>,
    /// Plain words: why it may preempt.
    pub reason: String,
}

/// One task that gives way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Victim {
    /// Task id.
    pub id: String,
    /// The attempt stopped.
    pub attempt: u32,
    /// Work lost: time since its last checkpoint, or since its start without one.
    pub lost_ms: u64,
}

/// Chooses at most one preemption for this decision (rules in the module docs); `None` with
/// preemption off, while another is under way, or when no waiting task qualifies.
pub fn preempt(input: &PreemptInput<'_>) -> Option<Preemption> {
    let config = &input.sched.config.preemption;
    if !config.enabled() || input.running.iter().any(|r| r.stopping) {
        return None;
    }
    let waiting: BTreeMap<&str, &WaitingTask> =
        input.sched.waiting.iter().map(|t| (t.id.as_str(), t)).collect();
    let candidates = input.decision.pending.iter().filter_map(|p| waiting.get(p.task_id.as_str()).copied());
    for task in candidates.take(CANDIDATES_MAX) {
        if let Some(preemption) = try_candidate(input, task) {
            assert!(!preemption.victims.is_empty(), "a preemption stops at least one task");
            return Some(preemption);
        }
    }
    None
}

/// The world of `input` with `victims` gone: the running tasks without them, each GPU given
/// back what their processes hold (at most what is in use) and their share of its measured SM
/// activity. `decide` on it, with one waiting task, says whether that task fits.
pub fn without_victims(input: &SchedInput<'_>, victims: &[&str]) -> (Vec<GpuView>, Vec<RunningTask>) {
    let config = input.config;
    let is_victim = |task: &RunningTask| victims.contains(&task.id.as_str());
    let mut gpus = input.gpus.to_vec();
    for gpu in &mut gpus {
        let on_gpu = || input.running.iter().filter(|t| t.gpus.contains(&gpu.uuid));
        let total_sm: f32 = on_gpu().map(|t| sm_or_unknown(t.sm_estimate, config.sm_unknown)).sum();
        let victims_sm: f32 =
            on_gpu().filter(|t| is_victim(t)).map(|t| sm_or_unknown(t.sm_estimate, config.sm_unknown)).sum();
        let held_mib: u64 = on_gpu().filter(|t| is_victim(t)).map(|t| t.observed_mib.unwrap_or(0)).sum();
        let used_mib = gpu.memory_total_mib.saturating_sub(gpu.memory_free_mib);
        gpu.memory_free_mib = gpu.memory_free_mib.saturating_add(held_mib.min(used_mib));
        if victims_sm > 0.0 && total_sm > 0.0 {
            let left = ((total_sm - victims_sm) / total_sm).clamp(0.0, 1.0);
            gpu.sm_active = gpu.sm_active.map(|sm| sm * left);
        }
    }
    let running = input.running.iter().filter(|t| !is_victim(t)).cloned().collect();
    (gpus, running)
}

/// The preemption `task` would make, if any: by the priority rule, or else, for the blocked
/// head after `head-wait`, by the head's rule.
fn try_candidate(input: &PreemptInput<'_>, task: &WaitingTask) -> Option<Preemption> {
    let sched = input.sched;
    let config = &sched.config.preemption;
    let now = sched.now_ms;
    let priority = task.gate.priority;
    let is_head = input.decision.head.as_deref() == Some(task.id.as_str());
    let gap_bound = priority.saturating_sub(config.priority_gap);
    let by_gap = format!(
        "priority {priority} preempts priority {gap_bound} or lower (priority-gap {})",
        config.priority_gap
    );
    if let Some(preemption) = with_bound(input, task, is_head, gap_bound, false, by_gap) {
        return Some(preemption);
    }
    let since = input.queued_since_ms.get(&task.id).copied().unwrap_or(task.submitted_ms);
    let waited_ms = now.saturating_sub(since);
    let few_gpus = task.gpus < config.head_min_gpus;
    if !is_head || few_gpus || waited_ms < config.head_wait_ms {
        return None;
    }
    if config.head_expected_fit && expected_soon(input, task) {
        return None;
    }
    let by_head = format!(
        "blocked head for {} (head-wait {}); priority {priority} preempts priority {priority} or lower",
        minutes(waited_ms),
        minutes(config.head_wait_ms),
    );
    with_bound(input, task, is_head, priority, true, by_head)
}

/// The preemption of tasks of priority `bound` or lower for `task`, if any qualify and make it
/// fit. `head_rule`: a task that itself preempted to start is not taken.
fn with_bound(
    input: &PreemptInput<'_>,
    task: &WaitingTask,
    is_head: bool,
    bound: i64,
    head_rule: bool,
    reason: String,
) -> Option<Preemption> {
    let sched = input.sched;
    let config = &sched.config.preemption;
    let now = sched.now_ms;
    let running_ids: Vec<&str> = sched.running.iter().map(|t| t.id.as_str()).collect();
    let mut eligible: Vec<&Preemptible> = input
        .running
        .iter()
        .filter(|r| running_ids.contains(&r.id.as_str()))
        .filter(|r| r.requeue && r.preemptions < config.max_per_task)
        .filter(|r| now.saturating_sub(r.started_ms) >= config.min_run_ms && r.started_ms <= now)
        .filter(|r| r.withdrawn_ms.is_none_or(|at| now.saturating_sub(at) >= config.withdrawn_rest_ms))
        .filter(|r| r.priority <= bound)
        .filter(|r| !(head_rule && r.preemptor))
        .collect();
    if eligible.is_empty() {
        return None;
    }
    if head_rule && config.head_spare_longer {
        eligible.retain(|r| !runs_longer(input, task, &r.id));
    }
    let worth = |victims: &[&Preemptible]| !head_rule || worth_it(input, task, victims);
    let fits = |victims: &[&Preemptible]| fit(input, task, is_head, victims).filter(|_| worth(victims));
    if fit(input, task, is_head, &[]).is_some() || fit(input, task, is_head, &eligible).is_none() {
        return None;
    }
    eligible.sort_by(|a, b| preference(now, a, b));
    let (victims, gpus) = smallest_set(&eligible, now, &fits)?;
    let victims: Vec<Victim> = victims
        .iter()
        .map(|r| Victim { id: r.id.clone(), attempt: r.attempt, lost_ms: lost_ms(now, r) })
        .collect();
    Some(Preemption { preemptor: task.id.clone(), victims, gpus, reason })
}

/// Whether the head is expected to fit within `head-wait` without preempting anyone: it fits
/// once the running tasks expected to end by then (launch + run-time estimate) are gone.
fn expected_soon(input: &PreemptInput<'_>, task: &WaitingTask) -> bool {
    let sched = input.sched;
    let horizon = sched.now_ms.saturating_add(sched.config.preemption.head_wait_ms);
    let ending: Vec<&str> = sched
        .running
        .iter()
        .filter(|t| t.runtime_estimate_ms.is_some_and(|ms| t.launched_ms.saturating_add(ms) <= horizon))
        .map(|t| t.id.as_str())
        .collect();
    if ending.is_empty() {
        return false;
    }
    let (gpus, running) = without_victims(sched, &ending);
    let world = SchedInput { gpus: &gpus, running: &running, waiting: std::slice::from_ref(task), ..*sched };
    !decide(&world).placements.is_empty()
}

/// Whether running task `id` is expected to run longer than the head `task` would (or either
/// has no run-time estimate): `head-spare-longer` keeps it.
fn runs_longer(input: &PreemptInput<'_>, task: &WaitingTask, id: &str) -> bool {
    let now = input.sched.now_ms;
    let Some(running) = input.sched.running.iter().find(|t| t.id == id) else {
        return true;
    };
    let remaining =
        running.runtime_estimate_ms.map(|ms| running.launched_ms.saturating_add(ms).saturating_sub(now));
    match (remaining, task.runtime_estimate_ms) {
        (Some(remaining), Some(head)) => remaining > head,
        _ => true,
    }
}

/// Whether the head's expected work is at least `head-gain` times what stopping `victims`
/// costs (each one's GPUs × (work lost + grace)); always with `head-gain = 0`.
fn worth_it(input: &PreemptInput<'_>, task: &WaitingTask, victims: &[&Preemptible]) -> bool {
    let sched = input.sched;
    let config = &sched.config.preemption;
    if config.head_gain == 0 {
        return true;
    }
    let Some(run_ms) = task.runtime_estimate_ms else {
        return false;
    };
    let gain = u128::from(task.gpus) * u128::from(run_ms);
    let cost: u128 = victims
        .iter()
        .map(|v| {
            let gpus = sched.running.iter().find(|t| t.id == v.id).map_or(1, |t| t.gpus.len().max(1));
            let lost = lost_ms(sched.now_ms, v).saturating_add(config.grace_ms);
            gpus as u128 * u128::from(lost)
        })
        .sum();
    gain >= cost.saturating_mul(u128::from(config.head_gain))
}

/// Where `task` is placed in the world without `victims`, or `None` when it does not fit (or
/// only on the head's GPUs, for a task that is not the head).
fn fit(
    input: &PreemptInput<'_>,
    task: &WaitingTask,
    is_head: bool,
    victims: &[&Preemptible],
) -> Option<Vec<String>> {
    let sched = input.sched;
    let ids: Vec<&str> = victims.iter().map(|v| v.id.as_str()).collect();
    let (gpus, running) = without_victims(sched, &ids);
    let waiting = std::slice::from_ref(task);
    let world = SchedInput { gpus: &gpus, running: &running, waiting, ..*sched };
    let decision = decide(&world);
    let placement = decision.placements.into_iter().next()?;
    let kept = input.decision.reservation.as_ref().filter(|_| !is_head);
    if kept.is_some_and(|r| placement.gpus.iter().any(|g| r.gpus.contains(g))) {
        return None;
    }
    Some(placement.gpus)
}

/// The fewest victims whose release makes the task fit, best by [`set_key`]; greedy past
/// [`SETS_TRIED_MAX`] sets. `eligible` is sorted by preference.
fn smallest_set<'a>(
    eligible: &[&'a Preemptible],
    now: u64,
    fits: &dyn Fn(&[&Preemptible]) -> Option<Vec<String>>,
) -> Option<(Vec<&'a Preemptible>, Vec<String>)> {
    let mut tried = 0usize;
    for size in 1..=eligible.len() {
        let mut best: Option<(SetKey, Vec<&'a Preemptible>, Vec<String>)> = None;
        let mut indices: Vec<usize> = (0..size).collect();
        loop {
            if tried >= SETS_TRIED_MAX {
                break;
            }
            tried += 1;
            let set: Vec<&'a Preemptible> = indices.iter().map(|&i| eligible[i]).collect();
            if let Some(gpus) = fits(&set) {
                let key = set_key(now, &set);
                if best.as_ref().is_none_or(|(b, _, _)| key < *b) {
                    best = Some((key, set, gpus));
                }
            }
            if !next_combination(&mut indices, eligible.len()) {
                break;
            }
        }
        if let Some((_, set, gpus)) = best {
            return Some((set, gpus));
        }
        if tried >= SETS_TRIED_MAX {
            return greedy(eligible, fits);
        }
    }
    None
}

/// Victims in preference order until the task fits, then each dropped again where the task
/// still fits without it.
fn greedy<'a>(
    eligible: &[&'a Preemptible],
    fits: &dyn Fn(&[&Preemptible]) -> Option<Vec<String>>,
) -> Option<(Vec<&'a Preemptible>, Vec<String>)> {
    let mut set: Vec<&'a Preemptible> = Vec::new();
    for victim in eligible {
        set.push(victim);
        if fits(&set).is_some() {
            break;
        }
    }
    let mut position = set.len();
    while position > 0 {
        position -= 1;
        let mut fewer = set.clone();
        fewer.remove(position);
        if !fewer.is_empty() && fits(&fewer).is_some() {
            set = fewer;
        }
    }
    let gpus = fits(&set)?;
    Some((set, gpus))
}

/// Advances `indices` to the next combination of `indices.len()` out of `n` in lexicographic
/// order; `false` after the last.
fn next_combination(indices: &mut [usize], n: usize) -> bool {
    let k = indices.len();
    let mut i = k;
    while i > 0 {
        i -= 1;
        if indices[i] < n - k + i {
            indices[i] += 1;
            for j in i + 1..k {
                indices[j] = indices[j - 1] + 1;
            }
            return true;
        }
    }
    false
}

/// (total work lost, highest priority, usage negated, ids): smaller is better.
type SetKey = (u64, i64, i64, Vec<String>);

fn set_key(now: u64, set: &[&Preemptible]) -> SetKey {
    let lost: u64 = set.iter().map(|r| lost_ms(now, r)).fold(0, u64::saturating_add);
    let priority = set.iter().map(|r| r.priority).max().unwrap_or(i64::MIN);
    let usage: f64 = set.iter().map(|r| finite(r.usage_gpu_ms)).sum();
    let mut ids: Vec<String> = set.iter().map(|r| r.id.clone()).collect();
    ids.sort();
    (lost, priority, -(usage.min(i64::MAX as f64) as i64), ids)
}

/// One victim before another: less work lost, lower priority, higher usage, then id.
fn preference(now: u64, a: &Preemptible, b: &Preemptible) -> std::cmp::Ordering {
    lost_ms(now, a)
        .cmp(&lost_ms(now, b))
        .then(a.priority.cmp(&b.priority))
        .then(finite(b.usage_gpu_ms).total_cmp(&finite(a.usage_gpu_ms)))
        .then(a.id.cmp(&b.id))
}

/// Work a victim loses if stopped at `now`: since its last checkpoint of this attempt, or its
/// start.
fn lost_ms(now: u64, running: &Preemptible) -> u64 {
    let since = running.checkpoint_ms.map_or(running.started_ms, |c| c.max(running.started_ms));
    now.saturating_sub(since)
}

fn finite(value: f64) -> f64 {
    if value.is_finite() { value.max(0.0) } else { 0.0 }
}

/// A duration for reasons, in whole minutes ("95 min"), seconds below one.
fn minutes(ms: u64) -> String {
    if ms < 60_000 { format!("{} s", ms / 1000) } else { format!("{} min", ms / 60_000) }
}
