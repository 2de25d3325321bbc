//! Reconcile: what happened to every placed or running attempt since the last tick, in
//! three steps, as `sched` places:
//!
//! 1. **observe** ([`AttemptRunner::observe`]): one call for every active attempt, which the
//!    runner reports Exited, Running, Vanished or Unclaimed (with the reaping of an ended
//!    one's leftovers, below);
//! 2. **decide** ([`decide`]): a pure function of the State, the observations, the config and
//!    the time, which returns [`Effect`]s: records to append, claims to take, attempts to stop
//!    or to launch again. The same input gives the same effects; nothing is read or written;
//! 3. **apply**: the tick takes the claims ([`take_claims`]), appends and commits the records,
//!    then asks the runner to stop what the decision stops ([`AttemptRunner::apply`]) and
//!    relaunches the rest with the tick's launches.
//!
//! The records: Finished, Failed, OomDetected + (Requeued | Failed), Lost + (Requeued |
//! Failed), Launched (adopting a supervisor that a crashed tick started; when that attempt has
//! already ended, dated from its run folder's start before its verdict, see
//! [`launch_seen_in_exit`]), or a relaunch of an attempt that was placed but never started.
//! Only a real out-of-memory failure goes to the recovery queue; any other non-zero exit is
//! final.
//!
//! An attempt's end is recorded only once none of its processes is alive: for every attempt
//! that exited or vanished the runner's observe first kills what is left
//! ([`AttemptRunner::reap`]) and a Reaped record, before the verdict, says what it killed.
//! Processes that survive even SIGKILL (stuck in the kernel, or not ours to signal) hold the
//! attempt: no verdict, no retry, a Reaped record naming them (again only when they change),
//! the task's pending reason naming them, and another try every tick ("lost-pending").
//!
//! An attempt on a GPU that became unavailable (lost, XID error, unreadable) is stopped, then
//! (once its processes are gone, as for any end) recorded Lost, so it retries on a healthy
//! GPU.
//!
//! One effect must happen before its record is committed: taking the claim of an attempt that
//! never started ([`Effect::Claim`]), so that no supervisor can start it once it is recorded
//! Lost. Its records are appended only when the claim was taken.

use crate::config::{Config, QueueLimits};
use crate::exec::{ExitOutcome, Reaping};
use crate::id::TaskId;
use crate::journal::state::{Attempt, AttemptRef, survivors_reason};
use crate::journal::{Event, Record, RequeueMode, State, Task};
use crate::sched::{self, OomJudgement};

use super::oom_evidence::memory_at_end;
use super::place::PlannedAttempt;
use super::runner::{
    Action, ActiveAttempt, AttemptExit, AttemptRunner, AttemptStatus, Observation, Observed,
};

/// How long an attempt may stay placed without a supervisor claiming it before the tick
/// takes the claim itself and records it Lost.
pub const LAUNCH_DEADLINE_MS: u64 = 60_000;

/// What the decision asks for, in the order it decided (the records' order in the journal).
#[derive(Debug, Clone, PartialEq)]
// An Event is large, and most effects are records; they live for one tick and move into the
// commit, so boxing them would only add an allocation each.
#[allow(clippy::large_enum_variant)]
pub enum Effect {
    /// A record to append.
    Record(Event),
    /// A record to append dated `time_ms` rather than now: a fact the tick learns late, such
    /// as the start of an attempt a crashed tick launched.
    RecordAt {
        /// When it happened, ms since the epoch.
        time_ms: u64,
        /// The record.
        event: Event,
    },
    /// Take the claim of an attempt no supervisor claimed, before the commit. When it is
    /// taken the attempt is dead for good and `then` is appended; when a supervisor claimed it
    /// first (or the claim could not be written) nothing is appended, and the attempt is
    /// stopped after the commit if `stop_otherwise`, or looked at again next tick.
    Claim {
        /// The task.
        task: TaskId,
        /// The attempt whose claim is taken.
        attempt: u32,
        /// The records to append once the claim is taken.
        then: Vec<Event>,
        /// Whether to stop the attempt after the commit when a supervisor claimed it first.
        stop_otherwise: bool,
    },
    /// After the commit: ask the attempt to stop.
    Stop {
        /// The task.
        task: TaskId,
        /// The attempt to stop.
        attempt: u32,
    },
    /// After the commit: launch an attempt that was placed but never started.
    Relaunch(PlannedAttempt),
}

/// The effects once the claims are taken: records to commit, then what to do after.
#[derive(Debug, Default)]
pub(super) struct Reconciled {
    pub records: Vec<Record>,
    pub actions: Vec<Action>,
    pub relaunch: Vec<PlannedAttempt>,
}

/// The active attempts the runner is asked about, in task order. A Slurm job's attempt is
/// among them as such ([`AttemptRef::Slurm`]): the runner leaves it to the node's hooks.
pub(super) fn active(state: &State) -> Vec<ActiveAttempt> {
    state
        .tasks
        .values()
        .filter_map(|task| {
            let (attempt, at) = task.active_ref()?;
            Some(ActiveAttempt { task: task.id.clone(), attempt, at })
        })
        .collect()
}

/// The pure decision on every active attempt: no I/O, and the same input gives the same
/// effects. An attempt on an unavailable GPU (`observed.gpu_faults`) is stopped and recorded
/// Lost (see [`on_faulty_gpu`]). An attempt the observation does not cover (a Slurm job's)
/// gets nothing.
pub(super) fn decide(state: &State, observed: &Observed, config: &Config, now_ms: u64) -> Vec<Effect> {
    let mut effects = Vec::new();
    for task in state.tasks.values() {
        let Some((number, AttemptRef::Local(_))) = task.active_ref() else { continue };
        let Some(attempt) = task.active_attempt() else { continue };
        let Some(seen) = observed.attempts.get(&(task.id.clone(), number)) else { continue };
        effects.extend(launch_seen_in_exit(task, number, &seen.status, now_ms));
        let fault = attempt.gpus.iter().find_map(|uuid| observed.gpu_faults.get(uuid));
        if let Some(why) = fault.filter(|_| !stopping(task)) {
            effects.extend(on_faulty_gpu(task, number, seen, why, &config.limits));
            continue;
        }
        let Observation { status, reaping } = seen;
        let records = |events: Vec<Event>| events.into_iter().map(Effect::Record);
        match status {
            AttemptStatus::Running(supervisor) => {
                let withdrawn = super::preempt::withdrawal(state, task, attempt);
                let due = super::preempt::stop_due(task, attempt, config).filter(|_| withdrawn.is_none());
                effects.extend(withdrawn.map(Effect::Record));
                // An ended suspension is stopped at once (tick/suspended.rs).
                let due = due.or(attempt.suspension_ended.as_ref().map(|_| now_ms));
                if due.is_some_and(|due| now_ms >= due) {
                    effects.push(Effect::Stop { task: task.id.clone(), attempt: number });
                }
                if attempt.launched_ms.is_none() {
                    effects.push(Effect::Record(Event::Launched {
                        task: task.id.clone(),
                        attempt: number,
                        supervisor: supervisor.clone(),
                        adopted: true,
                    }));
                }
            }
            AttemptStatus::Exited(exit) => {
                let verdict = exited(state, task, attempt, exit, observed, config, now_ms);
                effects.extend(records(after_reaping(task, number, reaping, verdict)));
            }
            AttemptStatus::Vanished { reason } => {
                let verdict = (!stopping(task))
                    .then(|| super::relaunch::lost_over_share(state, task, attempt, reason, config))
                    .flatten()
                    .unwrap_or_else(|| lost(task, number, reason.clone(), &config.limits));
                effects.extend(records(after_reaping(task, number, reaping, verdict)));
            }
            AttemptStatus::Unclaimed if stopping(task) => {
                effects.push(Effect::Record(Event::Stopped {
                    task: task.id.clone(),
                    attempt: number,
                    outcome: "never started".into(),
                }));
            }
            AttemptStatus::Unclaimed if now_ms.saturating_sub(attempt.placed_ms) > LAUNCH_DEADLINE_MS => {
                let reason = format!("never started within {} s of its placement", LAUNCH_DEADLINE_MS / 1000);
                effects.push(Effect::Claim {
                    task: task.id.clone(),
                    attempt: number,
                    then: lost(task, number, reason, &config.limits),
                    // A supervisor claimed it meanwhile: look again next tick.
                    stop_otherwise: false,
                });
            }
            AttemptStatus::Unclaimed => effects.push(Effect::Relaunch(PlannedAttempt {
                task: task.id.clone(),
                attempt: number,
                gpus: attempt.gpus.clone(),
                requirement_mib: attempt.requirement_mib,
            })),
        }
    }
    effects
}

/// The records of an attempt that left an exit record: a stop over its share is relaunched
/// (`relaunch`); a neighbour's out-of-memory beside a task over its share uses no retry;
/// otherwise the verdict, an out-of-memory message weighed by `sched::judge_oom`.
fn exited(
    state: &State,
    task: &Task,
    attempt: &Attempt,
    exit: &AttemptExit,
    observed: &Observed,
    config: &Config,
    now_ms: u64,
) -> Vec<Event> {
    let number = attempt.number;
    // The peak by the tick's readings, and with the supervisor's: what the job used, which its
    // next attempt is sized from.
    let peak = attempt.peak_observed_mib.max(observed.peak_mib.get(&task.id).copied());
    let used = peak.max(exit.gpu_readings.as_ref().and_then(|r| r.peak_mib));
    let outcome = describe(&exit.outcome);
    let over = (!stopping(task))
        .then(|| super::relaunch::over_share_end(state, task, attempt, exit, &outcome, used, config))
        .flatten();
    if let Some(mut events) = over {
        if let Some(note) = &exit.output_truncated {
            events.iter_mut().for_each(|event| add_output_note(event, note));
        }
        return events;
    }
    let gpu_oom = exit.oom.as_ref().filter(|_| !super::host_memory::killed_at_limit(exit));
    // A requeue beside a task over its share uses no retry, so it is held, with the job's own
    // requeues, to `[limits] requeues-max`; past it the out-of-memory is judged as any other.
    // Without the bound a job that only printed out-of-memory lines beside a grab of its own
    // user's was requeued free for as long as the grab stayed over its share (the adversary's
    // seed 1559: six times in three seconds).
    let free_left =
        super::requeue::requeues_exhausted(super::requeue::free_requeues(task), config.limits.requeues_max)
            .is_none();
    let beside = gpu_oom
        .filter(|_| !stopping(task) && free_left)
        .and_then(|_| super::enforce::beside_over_share(state, task, number, observed, exit.ended_ms));
    if let Some(offender) = beside {
        return super::enforce::oom_beside(task, number, &outcome, &offender);
    }
    let oom = exit.oom.as_ref().map(|_| {
        let (readings, recovery) = (&observed.memory_now, &config.sched.recovery);
        let mut at_end = memory_at_end(state, attempt, exit, peak, readings, recovery, now_ms);
        // An attempt placed without a figure is held to the default share while it shares.
        if at_end.requirement_mib.is_none() && !attempt.exclusive {
            at_end.requirement_mib = Some(super::share::attempt_share(task, attempt, config).0);
        }
        sched::judge_oom(&at_end, recovery)
    });
    ended(task, number, exit, Judged { peak_mib: used, oom }, config)
}

/// The Launched a crashed tick never committed, for an attempt that has since ended: the
/// tick launched it, crashed before recording so, and the job ended before the next tick
/// looked. Its run folder says who ran it (the claim) and when (the exit record's start), so
/// the task keeps a start and a run time, and is charged for them, like any adopted attempt.
/// Dated at that start (within placement and now). `None` for an attempt already recorded
/// launched, one whose run folder does not say, or one the tick itself claimed (pid 0).
fn launch_seen_in_exit(task: &Task, number: u32, status: &AttemptStatus, now_ms: u64) -> Option<Effect> {
    let AttemptStatus::Exited(exit) = status else { return None };
    let start = exit.start.as_ref().filter(|start| start.supervisor.pid != 0)?;
    let attempt = task.active_attempt().filter(|a| a.number == number && a.launched_ms.is_none())?;
    let time_ms = start.started_ms.min(now_ms).max(attempt.placed_ms);
    let event = Event::Launched {
        task: task.id.clone(),
        attempt: number,
        supervisor: start.supervisor.clone(),
        adopted: true,
    };
    Some(Effect::RecordAt { time_ms, event })
}

/// Takes the claims the decision asked for, in order, and sorts the effects into the records
/// to commit and what to do after the commit.
pub(super) fn take_claims(effects: Vec<Effect>, runner: &mut dyn AttemptRunner, now_ms: u64) -> Reconciled {
    let mut out = Reconciled::default();
    let push = |records: &mut Vec<Record>, event| records.push(Record { time_ms: now_ms, event });
    for effect in effects {
        match effect {
            Effect::Record(event) => push(&mut out.records, event),
            Effect::RecordAt { time_ms, event } => out.records.push(Record { time_ms, event }),
            Effect::Claim { task, attempt, then, stop_otherwise } => {
                match runner.abandon(task.as_str(), attempt) {
                    Ok(true) => then.into_iter().for_each(|event| push(&mut out.records, event)),
                    // Claimed by a supervisor first, or the claim failed (transient or
                    // refused alike): whatever may run is stopped or looked at next tick.
                    Ok(false) | Err(_) => {
                        if stop_otherwise {
                            out.actions.push(Action::Stop { task, attempt });
                        }
                    }
                }
            }
            Effect::Stop { task, attempt } => out.actions.push(Action::Stop { task, attempt }),
            Effect::Relaunch(planned) => out.relaunch.push(planned),
        }
    }
    out
}

/// An attempt whose GPU became unavailable is handled like a lost attempt: Lost, then a
/// retry in the main queue within the retry budget, so it runs again on a healthy GPU. Its
/// supervisor may still be alive (the job may even keep running on a half-dead GPU), so it is
/// stopped first and its verdict waits for the next tick, when it has exited; an unclaimed
/// attempt is claimed by the tick. A job that finished cleanly meanwhile is Finished as usual.
fn on_faulty_gpu(
    task: &Task,
    attempt: u32,
    seen: &Observation,
    why: &str,
    limits: &QueueLimits,
) -> Vec<Effect> {
    let id = task.id.clone();
    let reason = match &seen.status {
        AttemptStatus::Exited(exit) if exit.outcome == ExitOutcome::Exited { code: 0 } => {
            let finished = vec![Event::Finished { task: id, attempt, exit_ms: exit.ended_ms }];
            return after_reaping(task, attempt, &seen.reaping, finished)
                .into_iter()
                .map(Effect::Record)
                .collect();
        }
        // Stopped by the tick one tick earlier (its supervisor forwards the stop as a cancel).
        AttemptStatus::Exited(exit) if exit.outcome == ExitOutcome::Cancelled => {
            format!("{why}; its job was stopped")
        }
        AttemptStatus::Exited(exit) => format!("{why}; the job ended ({})", describe(&exit.outcome)),
        AttemptStatus::Vanished { reason } => format!("{why}; {reason}"),
        AttemptStatus::Running(_) => return vec![Effect::Stop { task: id, attempt }],
        AttemptStatus::Unclaimed => {
            let lost = lost(task, attempt, format!("{why}; it had not started"), limits);
            // Nothing of an attempt that never started is left to reap.
            let then = after_reaping(task, attempt, &Reaping::default(), lost);
            return vec![Effect::Claim { task: id, attempt, then, stop_otherwise: true }];
        }
    };
    let lost = lost(task, attempt, reason, limits);
    after_reaping(task, attempt, &seen.reaping, lost).into_iter().map(Effect::Record).collect()
}

/// The records of an attempt that exited or vanished, given what observe found of its
/// processes: a Reaped record when something was killed, or when survivors changed or are now
/// gone; then the `verdict`, only once no process survives. While some do, at most the
/// Reaped record (when the survivors changed).
fn after_reaping(task: &Task, attempt: u32, reaping: &Reaping, verdict: Vec<Event>) -> Vec<Event> {
    let Reaping { killed, remaining, detail } = reaping;
    let reaped = |remaining: Vec<u32>, detail: String| Event::Reaped {
        task: task.id.clone(),
        attempt,
        processes: *killed,
        remaining,
        detail,
    };
    if !remaining.is_empty() {
        if task.pending_reason() != Some(survivors_reason(attempt, remaining).as_str()) {
            return vec![reaped(remaining.clone(), detail.clone())];
        }
        return Vec::new();
    }
    let mut events = Vec::with_capacity(verdict.len() + 1);
    if *killed > 0 || task.held_by_survivors() {
        let detail = if detail.is_empty() {
            format!("the processes of attempt {attempt} are gone")
        } else {
            detail.clone()
        };
        events.push(reaped(Vec::new(), detail));
    }
    events.extend(verdict);
    events
}

/// What the tick made of an exited attempt's memory: its observed peak, and the judgement
/// of its out-of-memory message (`None` without one).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Judged {
    peak_mib: Option<u64>,
    oom: Option<OomJudgement>,
}

/// Records for an attempt that left an exit record, with what the log cap dropped.
fn ended(task: &Task, attempt: u32, exit: &AttemptExit, judged: Judged, config: &Config) -> Vec<Event> {
    let mut events = verdict(task, attempt, exit, judged, config);
    if let Some(note) = &exit.output_truncated {
        events.iter_mut().for_each(|event| add_output_note(event, note));
    }
    events
}

/// Puts the log cap's note into the verdict's words, where `carma show` shows them: a
/// failure's reason, a requeue's reason, a stopped attempt's outcome. Finished has no field
/// for it (the journal's format stays as it is): the note is then only in the log itself and
/// the supervisor's log. A Failed's `outcome` stays the bare exit, which reports read.
fn add_output_note(event: &mut Event, note: &str) {
    match event {
        Event::Failed { reason: words, .. }
        | Event::Requeued { reason: words, .. }
        | Event::Stopped { outcome: words, .. } => {
            words.push_str("; ");
            words.push_str(note);
        }
        _ => {}
    }
}

/// The verdict on an attempt that left an exit record. An out-of-memory message goes to
/// recovery only when the readings corroborate it (`sched::judge_oom`); otherwise the attempt
/// failed like any other, with the readings in its reason.
fn verdict(task: &Task, attempt: u32, exit: &AttemptExit, judged: Judged, config: &Config) -> Vec<Event> {
    let id = task.id.clone();
    let outcome = describe(&exit.outcome);
    if stopping(task) {
        return vec![Event::Stopped { task: id, attempt, outcome }];
    }
    if let Some(failed) = super::host_memory::verdict(task, attempt, exit, &outcome) {
        return vec![failed];
    }
    let corroborated = matches!(judged.oom, Some(OomJudgement::Corroborated(_)));
    if let Some(requeued) = super::suspended::verdict(task, attempt, &outcome) {
        return requeued;
    }
    if let Some(requeued) = super::preempt::verdict(task, attempt, exit, corroborated, &outcome) {
        return requeued;
    }
    if let Some(requeued) =
        super::requeue::verdict(task, attempt, exit, corroborated, &outcome, &config.limits)
    {
        return requeued;
    }
    let peak_mib = judged.peak_mib;
    match (&exit.outcome, &exit.oom, judged.oom) {
        (ExitOutcome::Exited { code: 0 }, _, _) => {
            vec![Event::Finished { task: id, attempt, exit_ms: exit.ended_ms }]
        }
        (
            ExitOutcome::Exited { .. } | ExitOutcome::Signaled { .. },
            Some(evidence),
            Some(OomJudgement::Corroborated(_)),
        ) => {
            let mut events =
                vec![Event::OomDetected { task: id.clone(), attempt, evidence: evidence.clone(), peak_mib }];
            let Some(ended) = task.attempts.iter().find(|a| a.number == attempt) else {
                unreachable!("a verdict is only made on an attempt of the task")
            };
            events.push(super::relaunch::after_oom(task, ended, peak_mib, config));
            events
        }
        (
            ExitOutcome::Exited { .. } | ExitOutcome::Signaled { .. },
            Some(_),
            Some(OomJudgement::Unsupported(reason)),
        ) => {
            vec![Event::Failed { task: id, attempt, outcome, reason }]
        }
        (ExitOutcome::TimeLimit, _, _) => vec![Event::Failed {
            task: id,
            attempt,
            outcome,
            reason: "stopped at its time limit; raise time_limit and resubmit".into(),
        }],
        (ExitOutcome::SpawnFailed { reason }, _, _) => {
            vec![Event::Failed { task: id, attempt, outcome: "not started".into(), reason: reason.clone() }]
        }
        (ExitOutcome::Cancelled, _, _) => vec![Event::Failed {
            task: id,
            attempt,
            outcome,
            reason: "its supervisor was stopped from outside carma".into(),
        }],
        _ => vec![Event::Failed {
            task: id,
            attempt,
            reason: format!("{outcome} without an out-of-memory message; not retried"),
            outcome,
        }],
    }
}

/// Lost, then a retry in the main queue (at its original FIFO position) while the retry
/// budget lasts.
fn lost(task: &Task, attempt: u32, reason: String, limits: &QueueLimits) -> Vec<Event> {
    let id: TaskId = task.id.clone();
    let mut events = vec![Event::Lost { task: id.clone(), attempt, reason: reason.clone() }];
    if stopping(task) {
        return events;
    }
    let retries_used = super::requeue::retries_used(task);
    let budget = super::requeue::RetryBudget::of(task, limits);
    if task.spec.requeue == Some(false) {
        // Slurm's --no-requeue: never requeued, a node failure (here: a lost attempt) included.
        let reason = format!("lost ({reason}); not retried: the task asked for --no-requeue");
        events.push(Event::Failed { task: id, attempt, outcome: "lost".into(), reason });
        return events;
    }
    if retries_used <= budget.retries_max {
        events.push(Event::Requeued {
            task: id,
            recovery: false,
            requirement_mib: None,
            recovery_mode: RequeueMode::Main,
            reason: format!("lost ({reason}); retry {retries_used} of {}", budget.retries_max),
        });
    } else {
        let failed = format!(
            "lost {} time(s), max_retries {} reached: {reason}",
            task.lost_count + 1,
            budget.retries_max
        );
        events.push(Event::Failed {
            task: id,
            attempt,
            outcome: "lost".into(),
            reason: budget.name_bound(failed),
        });
    }
    events
}

/// An ended task whose attempt is still open: cancelled, or (in journals from before
/// relaunches) failed for its GPU memory. Its attempt's end is recorded as Stopped, never
/// retried.
fn stopping(task: &Task) -> bool {
    task.status().is_terminal()
}

/// An exit in words, as journaled and shown by `carma show`.
pub fn describe(outcome: &ExitOutcome) -> String {
    match outcome {
        ExitOutcome::Exited { code } => format!("exit {code}"),
        ExitOutcome::Signaled { signal } => format!("killed by signal {signal}"),
        ExitOutcome::TimeLimit => crate::journal::state::TIME_LIMIT_OUTCOME.into(),
        ExitOutcome::SpawnFailed { reason } => format!("not started: {reason}"),
        ExitOutcome::Cancelled => "cancelled".into(),
    }
}

#[cfg(test)]
mod tests;
