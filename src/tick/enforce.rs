//! GPU memory enforcement in the tick: observe, decide, apply.
//!
//! 1. **observe** ([`enforce`]): this tick's GPU samples list every process on each GPU with
//!    its memory; the runner attributes them to running attempts in one call
//!    ([`AttemptRunner::attempts_of`]: the attempt's cgroup and its supervisor's process tree,
//!    never anything the job controls alone), and each attempt's memory is summed per GPU;
//! 2. **decide**: the pure [`sched::over_share`] says which attempt is over its share plus
//!    `[enforce] margin-mib` on a GPU it shares. The share is the memory per GPU its placement
//!    assumed, or the queue's default share for an attempt placed without a figure
//!    (`tick::share`), so no two jobs share a GPU unguarded;
//! 3. **apply**: a MemoryExceeded record (the figures, and whose figure the share was) is
//!    committed with the tick's observations, then the attempt is stopped as a cancel stops
//!    one. Its end, once its processes are gone, is a relaunch with what it used
//!    (`tick::relaunch`): Stopped, then Requeued (or Failed once its retries are spent). A
//!    stop that did not take is asked for again every tick while the attempt runs.
//!
//! Its neighbours keep running. One of them that dies of out-of-memory while the offender was
//! over ([`beside_over_share`]) is queued again without using a retry ([`oom_beside`]).
//!
//! This is enforcement after the fact: a job over its share holds the memory until the next
//! tick's sample sees it (one tick, 5 s by default) and until its stop takes effect. MIG
//! instances are not checked here: the hardware partitions their memory.

use std::collections::BTreeMap;

use crate::config::Config;
use crate::gpu::GpuSample;
use crate::id::TaskId;
use crate::journal::state::AttemptRef;
use crate::journal::{Event, Record, RequeueMode, State, Task};
use crate::sched::{self, AttemptUse, GpuUse, ShareSource};

use super::runner::{Action, ActiveAttempt, AttemptRunner, AttemptStatus, Observed};

/// What enforcement decided this tick.
#[derive(Debug, Default)]
pub(super) struct Enforced {
    /// MemoryExceeded records, to commit before the stops.
    pub records: Vec<Record>,
    /// The attempts to stop after the commit.
    pub stops: Vec<Action>,
    /// The GPUs with an attempt over its share, for reconcile (see [`Observed::over_share`]).
    pub over_share: BTreeMap<String, (TaskId, String)>,
}

/// Attributes this tick's GPU processes to the running attempts `seen` reports Running, and
/// decides which are over their share (see the module docs). `earlier` are the records the
/// tick already holds for this commit: a task they cancel is left alone.
pub(super) fn enforce(
    state: &State,
    samples: &[GpuSample],
    runner: &dyn AttemptRunner,
    seen: &Observed,
    earlier: &[Record],
    config: &Config,
    now_ms: u64,
) -> Enforced {
    let mut out = Enforced::default();
    if !config.enforce.enabled || samples.is_empty() {
        return out;
    }
    let ended_now: Vec<&TaskId> = earlier
        .iter()
        .filter(|r| matches!(r.event, Event::Cancelled { .. } | Event::Failed { .. }))
        .filter_map(|r| r.event.task())
        .collect();
    let (running, stopping): (Vec<ActiveAttempt>, Vec<ActiveAttempt>) = state
        .tasks
        .values()
        .filter_map(|task| {
            let (attempt, at) = task.active_ref()?;
            Some(ActiveAttempt { task: task.id.clone(), attempt, at })
        })
        .filter(|one| matches!(one.at, AttemptRef::Local(Some(_))))
        .filter(|one| {
            let status = seen.attempts.get(&(one.task.clone(), one.attempt)).map(|o| &o.status);
            matches!(status, Some(AttemptStatus::Running(_)))
        })
        .filter(|one| state.tasks.get(&one.task).is_some_and(|t| !t.status().is_terminal()))
        .filter(|one| !ended_now.contains(&&one.task))
        .partition(|one| !already_over(state, one));
    // Stopped over its share already and still running: the stop is asked for again.
    out.stops.extend(stopping.into_iter().map(|one| Action::Stop { task: one.task, attempt: one.attempt }));
    if running.is_empty() {
        return out;
    }
    let pids: Vec<u32> = samples.iter().flat_map(|s| s.processes.iter().map(|p| p.pid)).collect();
    let owners = runner.attempts_of(&pids, &running);
    let gpus: Vec<GpuUse<(TaskId, u32)>> =
        samples.iter().map(|s| gpu_use(state, s, &owners, config)).collect();
    for verdict in sched::over_share(&gpus, config.enforce.margin_mib) {
        let (task, attempt) = verdict.key;
        if !running.iter().any(|one| one.task == task && one.attempt == attempt) {
            continue;
        }
        let Some(one) = state.tasks.get(&task) else { continue };
        let Some(placed) = one.active_attempt() else { continue };
        let (_, source) = super::share::attempt_share(one, placed, config);
        let reason = match source {
            ShareSource::Default if placed.gpus.contains(&verdict.gpu) => {
                verdict.reason.replacen("declared", "the queue's default share", 1)
            }
            _ => verdict.reason,
        };
        out.over_share.insert(verdict.gpu.clone(), (task.clone(), reason.clone()));
        out.stops.push(Action::Stop { task: task.clone(), attempt });
        let event = Event::MemoryExceeded {
            task,
            attempt,
            gpu: verdict.gpu,
            used_mib: verdict.used_mib,
            declared_mib: verdict.declared_mib,
            reason,
            share_source: Some(source),
        };
        out.records.push(Record { time_ms: now_ms, event });
    }
    out
}

/// The attempt was found over its share on an earlier tick: it is being stopped.
fn already_over(state: &State, one: &ActiveAttempt) -> bool {
    let attempt = state.tasks.get(&one.task).and_then(|t| t.active_attempt());
    attempt.is_some_and(|a| a.number == one.attempt && a.memory_exceeded.is_some())
}

/// One GPU's attempts: every active attempt placed on it (used 0 until its processes are
/// seen) and every attempt whose processes hold memory on it, with what they hold.
fn gpu_use(
    state: &State,
    sample: &GpuSample,
    owners: &BTreeMap<u32, (TaskId, u32)>,
    config: &Config,
) -> GpuUse<(TaskId, u32)> {
    let mut used: BTreeMap<(TaskId, u32), u64> = BTreeMap::new();
    for process in &sample.processes {
        if let Some(owner) = owners.get(&process.pid) {
            *used.entry(owner.clone()).or_default() += process.used_mib.unwrap_or(0);
        }
    }
    let mut attempts = Vec::new();
    for task in state.tasks.values() {
        let Some(attempt) = task.active_attempt().filter(|a| a.gpus.contains(&sample.uuid)) else { continue };
        let key = (task.id.clone(), attempt.number);
        attempts.push(AttemptUse {
            used_mib: used.remove(&key).unwrap_or(0),
            key,
            placed_here: true,
            exclusive: attempt.exclusive,
            // Placed without a figure: the default share (`tick::share`).
            declared_mib: Some(super::share::attempt_share(task, attempt, config).0),
        });
    }
    for (key, used_mib) in used {
        let exclusive = state.tasks.get(&key.0).and_then(|t| t.active_attempt()).is_some_and(|a| a.exclusive);
        attempts.push(AttemptUse { key, placed_here: false, exclusive, declared_mib: None, used_mib });
    }
    GpuUse { uuid: sample.uuid.clone(), label: format!("GPU{}", sample.index), attempts }
}

/// The task over its share, and its verdict, when `task`'s attempt `number` ended (at
/// `ended_ms`) on a GPU where another task's attempt was over its share while both ran: this
/// tick's verdicts, or a MemoryExceeded of an attempt that had started and not yet ended.
pub(super) fn beside_over_share(
    state: &State,
    task: &Task,
    number: u32,
    observed: &Observed,
    ended_ms: u64,
) -> Option<(TaskId, String)> {
    let attempt = task.attempts.iter().find(|a| a.number == number)?;
    let mut now = attempt.gpus.iter().filter_map(|gpu| observed.over_share.get(gpu));
    if let Some(found) = now.find(|(offender, _)| *offender != task.id) {
        return Some(found.clone());
    }
    state.tasks.values().filter(|other| other.id != task.id).find_map(|other| {
        other.attempts.iter().find_map(|a| {
            let over = a.memory_exceeded.as_ref()?;
            let overlapped = a.launched_ms.is_some_and(|start| start <= ended_ms)
                && a.ended_ms.is_none_or(|end| ended_ms <= end);
            (overlapped && attempt.gpus.contains(&over.gpu)).then(|| (other.id.clone(), over.reason.clone()))
        })
    })
}

/// The records of a neighbour's out-of-memory end (`outcome`, in words) beside a task over its
/// share: Stopped, then queued again in the main queue without using a retry (a user requeue's
/// mode, which `max_retries` does not count, held with the job's own requeues to `[limits]
/// requeues-max` by the caller).
pub(super) fn oom_beside(
    task: &Task,
    attempt: u32,
    outcome: &str,
    offender: &(TaskId, String),
) -> Vec<Event> {
    let (offender, reason) = offender;
    vec![
        Event::Stopped {
            task: task.id.clone(),
            attempt,
            outcome: format!("{outcome}: out of GPU memory beside task {offender}, over its share"),
        },
        Event::Requeued {
            task: task.id.clone(),
            recovery: false,
            requirement_mib: None,
            recovery_mode: RequeueMode::User,
            reason: format!(
                "out of GPU memory while task {offender} was over its share ({reason}); not counted against its retries"
            ),
        },
    ]
}

#[cfg(test)]
mod tests;
