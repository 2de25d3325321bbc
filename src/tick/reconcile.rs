//! Reconcile: what happened to every placed or running attempt since the last tick.
//!
//! For each active attempt the runner reports Exited, Running, Vanished or Unclaimed, and
//! this module turns that into records: Finished, Failed, OomDetected + (Requeued | Failed),
//! Lost + (Requeued | Failed), Launched (adopting a supervisor that a crashed tick started),
//! or a relaunch of an attempt that was placed but never started. Only a real out-of-memory
//! failure goes to the recovery queue; any other non-zero exit is final.
//!
//! An attempt's end is recorded only once none of its processes is alive: for every attempt
//! that exited or vanished the runner first kills what is left ([`AttemptRunner::reap`]) and
//! a Reaped record, before the verdict, says what it killed. Processes that survive even
//! SIGKILL (stuck in the kernel, or not ours to signal) hold the attempt: no verdict, no
//! retry, a Reaped record naming them (again only when they change), the task's pending
//! reason naming them, and another try every tick ("lost-pending").
//!
//! An attempt on a GPU that became unavailable (lost, XID error, unreadable) is stopped, then
//! (once its processes are gone, as for any end) recorded Lost, so it retries on a healthy
//! GPU.

use std::collections::BTreeMap;

use crate::config::Config;
use crate::exec::{ExitOutcome, Reaping};
use crate::id::TaskId;
use crate::journal::state::survivors_reason;
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

/// Checks every active attempt once. `faults` names the GPUs and MIG instances that cannot
/// hold work this tick (lost, XID error, unreadable) with the reason; an attempt on one of
/// them is stopped and recorded Lost (see [`on_faulty_gpu`]).
pub fn reconcile(
    state: &State,
    runner: &mut dyn AttemptRunner,
    config: &Config,
    observed: &BTreeMap<TaskId, u64>,
    faults: &BTreeMap<String, String>,
    now_ms: u64,
) -> Reconciled {
    let mut out = Reconciled::default();
    // A Slurm job's attempt has no supervisor: its node's Epilog journals how it ended.
    for task in state.tasks.values().filter(|t| t.slurm.is_none()) {
        let Some(attempt) = task.active_attempt() else { continue };
        let status = runner.status(task.id.as_str(), attempt.number, attempt.supervisor.as_ref());
        let mut push = |event| out.records.push(Record { time_ms: now_ms, event });
        let fault = attempt.gpus.iter().find_map(|uuid| faults.get(uuid));
        if let Some(why) = fault.filter(|_| task.status != Status::Cancelled) {
            // Nothing is journaled until the attempt is stopped and its processes are gone.
            if let Some(verdict) = on_faulty_gpu(task, attempt.number, status, runner, why)
                && reap_before_verdict(task, attempt.number, runner, &mut push)
            {
                verdict.into_iter().for_each(&mut push);
            }
            continue;
        }
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
                if !reap_before_verdict(task, attempt.number, runner, &mut push) {
                    continue;
                }
                let peak = attempt.peak_observed_mib.max(observed.get(&task.id).copied());
                for event in ended(task, attempt.number, &exit, peak, config) {
                    push(event);
                }
            }
            AttemptStatus::Vanished { reason } => {
                if !reap_before_verdict(task, attempt.number, runner, &mut push) {
                    continue;
                }
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

/// An attempt whose GPU became unavailable is handled like a lost attempt: Lost, then a
/// retry in the main queue within the retry budget, so it runs again on a healthy GPU. Its
/// supervisor may still be alive (the job may even keep running on a half-dead GPU), so it is
/// stopped first and its verdict waits for the next tick, when it has exited; an unclaimed
/// attempt is claimed by the tick. `None` while that is under way. A job that finished
/// cleanly meanwhile is Finished as usual.
fn on_faulty_gpu(
    task: &Task,
    attempt: u32,
    status: AttemptStatus,
    runner: &mut dyn AttemptRunner,
    why: &str,
) -> Option<Vec<Event>> {
    let id = task.id.as_str();
    let reason = match status {
        AttemptStatus::Exited(exit) if exit.outcome == ExitOutcome::Exited { code: 0 } => {
            return Some(vec![Event::Finished { task: task.id.clone(), attempt, exit_ms: exit.ended_ms }]);
        }
        // Stopped by the tick one tick earlier (its supervisor forwards the stop as a cancel).
        AttemptStatus::Exited(exit) if exit.outcome == ExitOutcome::Cancelled => {
            format!("{why}; its job was stopped")
        }
        AttemptStatus::Exited(exit) => format!("{why}; the job ended ({})", describe(&exit.outcome)),
        AttemptStatus::Vanished { reason } => format!("{why}; {reason}"),
        AttemptStatus::Running(_) => {
            let _ = runner.stop(id, attempt);
            return None;
        }
        AttemptStatus::Unclaimed => match runner.abandon(id, attempt) {
            Ok(true) => format!("{why}; it had not started"),
            // A supervisor claimed it meanwhile, or the claim failed: stop what may run.
            _ => {
                let _ = runner.stop(id, attempt);
                return None;
            }
        },
    };
    Some(lost(task, attempt, reason))
}

/// Ends what is left of an attempt that exited or vanished and records it: a Reaped record
/// when something was killed, or when survivors changed or are now gone. Returns whether the
/// attempt's verdict may be recorded now (false while processes survive).
fn reap_before_verdict(
    task: &Task,
    attempt: u32,
    runner: &mut dyn AttemptRunner,
    push: &mut dyn FnMut(Event),
) -> bool {
    let Reaping { killed, remaining, detail } = runner.reap(task.id.as_str(), attempt);
    let mut record = |remaining: Vec<u32>, detail: String| {
        push(Event::Reaped { task: task.id.clone(), attempt, processes: killed, remaining, detail });
    };
    if !remaining.is_empty() {
        if task.pending_reason.as_deref() != Some(survivors_reason(attempt, &remaining).as_str()) {
            record(remaining, detail);
        }
        return false;
    }
    if killed > 0 || task.held_by_survivors() {
        let detail =
            if detail.is_empty() { format!("the processes of attempt {attempt} are gone") } else { detail };
        record(Vec::new(), detail);
    }
    true
}

/// Records for an attempt that left an exit record, with what the log cap dropped.
fn ended(
    task: &Task,
    attempt: u32,
    exit: &AttemptExit,
    peak_mib: Option<u64>,
    config: &Config,
) -> Vec<Event> {
    let mut events = verdict(task, attempt, exit, peak_mib, config);
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

/// The verdict on an attempt that left an exit record.
fn verdict(
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
    if let Some(requeued) = super::requeue::verdict(task, attempt, exit, &outcome) {
        return requeued;
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
    let retries_used = super::requeue::retries_used(task);
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

#[cfg(test)]
mod tests {
    //! Goal: an attempt whose processes survive SIGKILL is held ("lost-pending"): no Lost,
    //! no retry, a Reaped record only when the survivors change, the pids in the task's
    //! pending reason; once they are gone, Reaped comes before the verdict. Method: a fake
    //! runner that reports a vanished or exited attempt and scripted reapings, folded into
    //! a real State.
    use std::collections::VecDeque;

    use super::*;
    use crate::journal::ProcessRef;
    use crate::tick::runner::AttemptLaunch;

    struct FakeRunner {
        status: AttemptStatus,
        reapings: VecDeque<Reaping>,
    }

    impl AttemptRunner for FakeRunner {
        fn launch(&mut self, _launch: &AttemptLaunch) -> Result<ProcessRef, String> {
            Err("not in this test".into())
        }
        fn status(&mut self, _task: &str, _attempt: u32, _recorded: Option<&ProcessRef>) -> AttemptStatus {
            self.status.clone()
        }
        fn stop(&mut self, _task: &str, _attempt: u32) -> Result<bool, String> {
            Ok(false)
        }
        fn abandon(&mut self, _task: &str, _attempt: u32) -> Result<bool, String> {
            Ok(false)
        }
        fn session_of(&self, _pid: u32) -> Option<u32> {
            None
        }
        fn reap(&mut self, _task: &str, _attempt: u32) -> Reaping {
            self.reapings.pop_front().expect("a scripted reaping")
        }
    }

    fn running_task(state: &mut State) -> TaskId {
        let id = TaskId::from_parts(1, 1);
        let spec = crate::spec::parse_toml("t", "name = \"t\"\ncommand = [\"true\"]\nmax_retries = 2\n")
            .and_then(|f| f.validate("t", std::path::Path::new("/w"), crate::spec::Limits::default()))
            .expect("spec");
        let supervisor = ProcessRef { pid: 4242, start_time_ticks: 1, boot_id: "b".into() };
        let events = [
            Event::Submitted { task: id.clone(), submitter_uid: 1000, spec },
            Event::Placed {
                task: id.clone(),
                attempt: 1,
                gpus: vec!["GPU-a".into()],
                exclusive: false,
                requirement_mib: None,
                reason: "fits".into(),
            },
            Event::Launched { task: id.clone(), attempt: 1, supervisor, adopted: false },
        ];
        for (seq, event) in events.into_iter().enumerate() {
            state.apply(seq as u64 + 1, &Record { time_ms: 1, event });
        }
        id
    }

    fn tick(state: &mut State, runner: &mut FakeRunner) -> Vec<Event> {
        let out = reconcile(state, runner, &Config::default(), &BTreeMap::new(), &BTreeMap::new(), 10);
        assert!(out.relaunch.is_empty());
        for record in &out.records {
            state.apply(state.last_seq + 1, record);
        }
        out.records.into_iter().map(|r| r.event).collect()
    }

    fn reaping(killed: u32, remaining: &[u32]) -> Reaping {
        Reaping {
            killed,
            remaining: remaining.to_vec(),
            detail: format!("killed {killed}, left {remaining:?}"),
        }
    }

    #[test]
    fn survivors_hold_a_lost_attempt_until_they_are_gone() {
        let mut state = State::default();
        let id = running_task(&mut state);
        let vanished = AttemptStatus::Vanished { reason: "supervisor pid 4242 is gone".into() };
        let scripted = [reaping(2, &[7, 8]), reaping(2, &[7, 8]), reaping(1, &[8]), reaping(0, &[])];
        let mut runner = FakeRunner { status: vanished, reapings: scripted.into_iter().collect() };

        let first = tick(&mut state, &mut runner);
        assert_eq!(
            first,
            [Event::Reaped {
                task: id.clone(),
                attempt: 1,
                processes: 2,
                remaining: vec![7, 8],
                detail: "killed 2, left [7, 8]".into(),
            }]
        );
        let task = &state.tasks[&id];
        assert_eq!(task.status, Status::Running, "no verdict while processes survive");
        assert!(task.held_by_survivors());
        assert_eq!(
            task.pending_reason.as_deref(),
            Some(
                "attempt 1 has ended but its processes 7, 8 survive SIGKILL; it is not recorded as ended or retried until they are gone"
            )
        );

        assert!(tick(&mut state, &mut runner).is_empty(), "the same survivors are not journaled again");
        let third = tick(&mut state, &mut runner);
        assert!(matches!(&third[..], [Event::Reaped { remaining, .. }] if remaining == &[8]), "{third:?}");
        assert!(
            state.tasks[&id].pending_reason.as_deref().is_some_and(|r| r.contains("processes 8 survive"))
        );

        let last = tick(&mut state, &mut runner);
        let kinds: Vec<&str> = last.iter().map(Event::kind).collect();
        assert_eq!(kinds, ["Reaped", "Lost", "Requeued"], "Reaped comes before the verdict");
        assert!(matches!(&last[0], Event::Reaped { remaining, detail, .. }
            if remaining.is_empty() && detail == "killed 0, left []"));
        let task = &state.tasks[&id];
        assert_eq!(task.status, Status::Pending);
        assert!(!task.held_by_survivors());
        assert_eq!(task.pending_reason, None);
        assert_eq!(task.lost_count, 1);
    }

    #[test]
    fn killed_leftovers_are_recorded_before_the_exit_verdict() {
        let mut state = State::default();
        let id = running_task(&mut state);
        let exit = AttemptExit {
            outcome: ExitOutcome::Exited { code: 0 },
            oom: None,
            ended_ms: 9,
            output_truncated: None,
        };
        let mut runner = FakeRunner {
            status: AttemptStatus::Exited(exit),
            reapings: [reaping(3, &[])].into_iter().collect(),
        };
        let events = tick(&mut state, &mut runner);
        let kinds: Vec<&str> = events.iter().map(Event::kind).collect();
        assert_eq!(kinds, ["Reaped", "Finished"]);
        assert_eq!(state.tasks[&id].status, Status::Finished);

        // Nothing found: no Reaped record at all.
        let mut state = State::default();
        running_task(&mut state);
        let exit = AttemptExit {
            outcome: ExitOutcome::Exited { code: 0 },
            oom: None,
            ended_ms: 9,
            output_truncated: None,
        };
        let mut runner = FakeRunner {
            status: AttemptStatus::Exited(exit),
            reapings: [reaping(0, &[])].into_iter().collect(),
        };
        let kinds: Vec<String> = tick(&mut state, &mut runner).iter().map(|e| e.kind().to_string()).collect();
        assert_eq!(kinds, ["Finished"]);
    }

    #[test]
    fn the_log_cap_note_reaches_the_failure_reason() {
        let mut state = State::default();
        let id = running_task(&mut state);
        let note = "stderr.log truncated at 64 KiB (log-bytes-max), 99 bytes dropped";
        let exit = AttemptExit {
            outcome: ExitOutcome::Exited { code: 3 },
            oom: None,
            ended_ms: 9,
            output_truncated: Some(note.into()),
        };
        let mut runner = FakeRunner {
            status: AttemptStatus::Exited(exit),
            reapings: [reaping(0, &[])].into_iter().collect(),
        };
        let events = tick(&mut state, &mut runner);
        assert!(
            matches!(&events[..], [Event::Failed { outcome, reason, .. }]
                if outcome == "exit 3" && reason.ends_with(&format!("not retried; {note}"))),
            "{events:?}"
        );
        assert_eq!(
            state.tasks[&id].end_reason.as_deref(),
            Some(format!("exit 3 without an out-of-memory message; not retried; {note}").as_str())
        );
    }
}
