//! Reconcile: what happened to every placed or running attempt since the last tick.
//!
//! For each active attempt the runner reports Exited, Running, Vanished or Unclaimed, and
//! this module turns that into records: Finished, Failed, OomDetected + (Requeued | Failed),
//! Lost + (Requeued | Failed), Launched (adopting a supervisor that a crashed tick started),
//! or a relaunch of an attempt that was placed but never started. Only a real out-of-memory
//! failure goes to the recovery queue; any other non-zero exit is final.

use std::collections::BTreeMap;

use crate::config::Config;
use crate::exec::ExitOutcome;
use crate::id::TaskId;
use crate::journal::{Event, Record, State, Status, Task};
use crate::sched::{self, RecoveryDecision};

use super::place::{PlannedAttempt, requirement_mib};
use super::runner::{AttemptExit, AttemptRunner, AttemptStatus};

/// How long an attempt may stay placed without a supervisor claiming it before the tick
/// takes the claim itself and records it Lost.
pub const LAUNCH_DEADLINE_MS: u64 = 60_000;

/// Records to commit, and attempts to (re)launch after the commit.
#[derive(Debug, Default)]
pub struct Reconciled {
    pub records: Vec<Record>,
    pub relaunch: Vec<PlannedAttempt>,
}

/// Checks every active attempt once.
pub fn reconcile(
    state: &State,
    runner: &mut dyn AttemptRunner,
    config: &Config,
    observed: &BTreeMap<TaskId, u64>,
    now_ms: u64,
) -> Reconciled {
    let mut out = Reconciled::default();
    for task in state.tasks.values() {
        let Some(attempt) = task.active_attempt() else { continue };
        let status = runner.status(task.id.as_str(), attempt.number, attempt.supervisor.as_ref());
        let mut push = |event| out.records.push(Record { time_ms: now_ms, event });
        match status {
            AttemptStatus::Running(supervisor) => {
                if attempt.launched_ms.is_none() {
                    push(Event::Launched {
                        task: task.id.clone(),
                        attempt: attempt.number,
                        supervisor,
                        adopted: true,
                    });
                }
            }
            AttemptStatus::Exited(exit) => {
                let peak = attempt.peak_observed_mib.max(observed.get(&task.id).copied());
                for event in ended(task, attempt.number, &exit, peak, config) {
                    push(event);
                }
            }
            AttemptStatus::Vanished { reason } => {
                for event in lost(task, attempt.number, reason) {
                    push(event);
                }
            }
            AttemptStatus::Unclaimed if task.status == Status::Cancelled => {
                push(Event::Stopped {
                    task: task.id.clone(),
                    attempt: attempt.number,
                    outcome: "never started".into(),
                });
            }
            AttemptStatus::Unclaimed if now_ms.saturating_sub(attempt.placed_ms) > LAUNCH_DEADLINE_MS => {
                // If a supervisor claimed it meanwhile, or the claim could not be written,
                // look again next tick.
                if let Ok(true) = runner.abandon(task.id.as_str(), attempt.number) {
                    let reason =
                        format!("never started within {} s of its placement", LAUNCH_DEADLINE_MS / 1000);
                    for event in lost(task, attempt.number, reason) {
                        push(event);
                    }
                }
            }
            AttemptStatus::Unclaimed => out.relaunch.push(PlannedAttempt {
                task: task.id.clone(),
                attempt: attempt.number,
                gpus: attempt.gpus.clone(),
                requirement_mib: attempt.requirement_mib,
            }),
        }
    }
    out
}

/// Records for an attempt that left an exit record.
fn ended(
    task: &Task,
    attempt: u32,
    exit: &AttemptExit,
    peak_mib: Option<u64>,
    config: &Config,
) -> Vec<Event> {
    let id = task.id.clone();
    let outcome = describe(&exit.outcome);
    if task.status == Status::Cancelled {
        return vec![Event::Stopped { task: id, attempt, outcome }];
    }
    match (&exit.outcome, &exit.oom) {
        (ExitOutcome::Exited { code: 0 }, _) => {
            vec![Event::Finished { task: id, attempt, exit_ms: exit.ended_ms }]
        }
        (ExitOutcome::Exited { .. } | ExitOutcome::Signaled { .. }, Some(evidence)) => {
            let mut events =
                vec![Event::OomDetected { task: id.clone(), attempt, evidence: evidence.clone(), peak_mib }];
            events.push(after_oom(task, peak_mib, config));
            events
        }
        (ExitOutcome::TimeLimit, _) => vec![Event::Failed {
            task: id,
            attempt,
            outcome,
            reason: "stopped at its time limit; raise time_limit and resubmit".into(),
        }],
        (ExitOutcome::SpawnFailed { reason }, _) => {
            vec![Event::Failed { task: id, attempt, outcome: "not started".into(), reason: reason.clone() }]
        }
        (ExitOutcome::Cancelled, _) => vec![Event::Failed {
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

/// The recovery decision after an OOM, journaled with its reason.
fn after_oom(task: &Task, peak_mib: Option<u64>, config: &Config) -> Event {
    let oom_count = task.oom_count + 1;
    let previous = task.active_attempt().and_then(|a| a.requirement_mib).or(task.recovery_requirement_mib);
    let estimate = requirement_mib(task, config.tick.memory);
    match sched::on_oom(
        oom_count,
        estimate,
        peak_mib,
        previous,
        task.spec.max_retries,
        &config.sched.recovery,
    ) {
        RecoveryDecision::Requeue { requirement_mib, mode, reason } => Event::Requeued {
            task: task.id.clone(),
            recovery: true,
            requirement_mib: Some(requirement_mib),
            recovery_mode: mode.to_string(),
            reason,
        },
        RecoveryDecision::GiveUp { reason } => Event::Failed {
            task: task.id.clone(),
            attempt: task.active_attempt().map_or(0, |a| a.number),
            outcome: "out of memory".into(),
            reason,
        },
    }
}

/// Lost, then a retry in the main queue (at its original FIFO position) while the retry
/// budget lasts.
fn lost(task: &Task, attempt: u32, reason: String) -> Vec<Event> {
    let id: TaskId = task.id.clone();
    let mut events = vec![Event::Lost { task: id.clone(), attempt, reason: reason.clone() }];
    if task.status == Status::Cancelled {
        return events;
    }
    let retries_used = task.attempts.len() as u32;
    if retries_used <= task.spec.max_retries {
        events.push(Event::Requeued {
            task: id,
            recovery: false,
            requirement_mib: None,
            recovery_mode: String::new(),
            reason: format!("lost ({reason}); retry {retries_used} of {}", task.spec.max_retries),
        });
    } else {
        events.push(Event::Failed {
            task: id,
            attempt,
            outcome: "lost".into(),
            reason: format!(
                "lost {} time(s), max_retries {} reached: {reason}",
                task.lost_count + 1,
                task.spec.max_retries
            ),
        });
    }
    events
}

/// An exit in words, as journaled and shown by `carma show`.
pub fn describe(outcome: &ExitOutcome) -> String {
    match outcome {
        ExitOutcome::Exited { code } => format!("exit {code}"),
        ExitOutcome::Signaled { signal } => format!("killed by signal {signal}"),
        ExitOutcome::TimeLimit => "time limit".into(),
        ExitOutcome::SpawnFailed { reason } => format!("not started: {reason}"),
        ExitOutcome::Cancelled => "cancelled".into(),
    }
}
