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
//! Failed), Launched (adopting a supervisor that a crashed tick started), or a relaunch of an
//! attempt that was placed but never started. Only a real out-of-memory failure goes to the
//! recovery queue; any other non-zero exit is final.
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

use crate::config::Config;
use crate::exec::{ExitOutcome, Reaping};
use crate::id::TaskId;
use crate::journal::state::{AttemptRef, survivors_reason};
use crate::journal::{Event, Record, State, Status, Task};
use crate::sched::{self, RecoveryDecision};

use super::place::{PlannedAttempt, requirement_mib};
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
    /// Take the claim of an attempt no supervisor claimed, before the commit. When it is
    /// taken the attempt is dead for good and `then` is appended; when a supervisor claimed it
    /// first (or the claim could not be written) nothing is appended, and the attempt is
    /// stopped after the commit if `stop_otherwise`, or looked at again next tick.
    Claim { task: TaskId, attempt: u32, then: Vec<Event>, stop_otherwise: bool },
    /// After the commit: ask the attempt to stop.
    Stop { task: TaskId, attempt: u32 },
    /// After the commit: launch an attempt that was placed but never started.
    Relaunch(PlannedAttempt),
}

/// The effects once the claims are taken: records to commit, then what to do after.
#[derive(Debug, Default)]
pub struct Reconciled {
    pub records: Vec<Record>,
    pub actions: Vec<Action>,
    pub relaunch: Vec<PlannedAttempt>,
}

/// The active attempts the runner is asked about, in task order. A Slurm job's attempt is
/// among them as such ([`AttemptRef::Slurm`]): the runner leaves it to the node's hooks.
pub fn active(state: &State) -> Vec<ActiveAttempt> {
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
pub fn decide(state: &State, observed: &Observed, config: &Config, now_ms: u64) -> Vec<Effect> {
    let mut effects = Vec::new();
    for task in state.tasks.values() {
        let Some((number, AttemptRef::Local(_))) = task.active_ref() else { continue };
        let Some(attempt) = task.active_attempt() else { continue };
        let Some(seen) = observed.attempts.get(&(task.id.clone(), number)) else { continue };
        let fault = attempt.gpus.iter().find_map(|uuid| observed.gpu_faults.get(uuid));
        if let Some(why) = fault.filter(|_| task.status != Status::Cancelled) {
            effects.extend(on_faulty_gpu(task, number, seen, why));
            continue;
        }
        let Observation { status, reaping } = seen;
        let records = |events: Vec<Event>| events.into_iter().map(Effect::Record);
        match status {
            AttemptStatus::Running(supervisor) => {
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
                let peak = attempt.peak_observed_mib.max(observed.peak_mib.get(&task.id).copied());
                let verdict = ended(task, number, exit, peak, config);
                effects.extend(records(after_reaping(task, number, reaping, verdict)));
            }
            AttemptStatus::Vanished { reason } => {
                let verdict = lost(task, number, reason.clone());
                effects.extend(records(after_reaping(task, number, reaping, verdict)));
            }
            AttemptStatus::Unclaimed if task.status == Status::Cancelled => {
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
                    then: lost(task, number, reason),
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

/// Takes the claims the decision asked for, in order, and sorts the effects into the records
/// to commit and what to do after the commit.
pub fn take_claims(effects: Vec<Effect>, runner: &mut dyn AttemptRunner, now_ms: u64) -> Reconciled {
    let mut out = Reconciled::default();
    let push = |records: &mut Vec<Record>, event| records.push(Record { time_ms: now_ms, event });
    for effect in effects {
        match effect {
            Effect::Record(event) => push(&mut out.records, event),
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
fn on_faulty_gpu(task: &Task, attempt: u32, seen: &Observation, why: &str) -> Vec<Effect> {
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
            let lost = lost(task, attempt, format!("{why}; it had not started"));
            // Nothing of an attempt that never started is left to reap.
            let then = after_reaping(task, attempt, &Reaping::default(), lost);
            return vec![Effect::Claim { task: id, attempt, then, stop_otherwise: true }];
        }
    };
    let lost = lost(task, attempt, reason);
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
        if task.pending_reason.as_deref() != Some(survivors_reason(attempt, remaining).as_str()) {
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
    use crate::tick::runner::{AttemptLaunch, RunnerError};

    struct FakeRunner {
        status: AttemptStatus,
        reapings: VecDeque<Reaping>,
    }

    impl AttemptRunner for FakeRunner {
        fn launch(&mut self, _launch: &AttemptLaunch) -> Result<ProcessRef, RunnerError> {
            Err(RunnerError::Refused("not in this test".into()))
        }
        fn status(&mut self, _task: &str, _attempt: u32, _recorded: Option<&ProcessRef>) -> AttemptStatus {
            self.status.clone()
        }
        fn stop(&mut self, _task: &str, _attempt: u32) -> Result<bool, RunnerError> {
            Ok(false)
        }
        fn abandon(&mut self, _task: &str, _attempt: u32) -> Result<bool, RunnerError> {
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
        let observed = runner.observe(&active(state));
        let out = take_claims(decide(state, &observed, &Config::default(), 10), runner, 10);
        assert!(out.relaunch.is_empty() && out.actions.is_empty());
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

    // Goal: the decision's own invariants hold over any mix of observations: it is a pure
    // function (the same input twice gives the same effects); every active attempt gets at
    // most one end, and every record it writes is one the fold applies; an attempt whose
    // processes survive gets no verdict; a recovered out-of-memory end is always followed by
    // a requeue or a failure with its reason; an attempt the runner did not observe gets
    // nothing. Method: random States of placed or running attempts (some cancelled, some on
    // a faulty GPU) and random observations, decided with every claim taken.
    mod decide_properties {
        use proptest::prelude::*;

        use super::*;

        #[derive(Debug, Clone)]
        struct Case {
            max_retries: u32,
            launched: bool,
            cancelled: bool,
            faulty_gpu: bool,
            observed: bool,
            status: AttemptStatus,
            reaping: Reaping,
        }

        fn outcome() -> impl Strategy<Value = ExitOutcome> {
            prop_oneof![
                (0..3i32).prop_map(|code| ExitOutcome::Exited { code }),
                Just(ExitOutcome::Signaled { signal: 9 }),
                Just(ExitOutcome::TimeLimit),
                Just(ExitOutcome::Cancelled),
                Just(ExitOutcome::SpawnFailed { reason: "no such program".into() }),
            ]
        }

        fn status() -> impl Strategy<Value = AttemptStatus> {
            let exit = (outcome(), any::<bool>(), any::<bool>()).prop_map(|(outcome, oom, cut)| {
                AttemptStatus::Exited(AttemptExit {
                    outcome,
                    oom: oom.then(|| "CUDA out of memory".into()),
                    ended_ms: 50,
                    output_truncated: cut.then(|| "stderr.log truncated".into()),
                })
            });
            prop_oneof![
                Just(AttemptStatus::Running(ProcessRef { pid: 9, start_time_ticks: 1, boot_id: "b".into() })),
                exit,
                Just(AttemptStatus::Vanished { reason: "supervisor pid 9 is gone".into() }),
                Just(AttemptStatus::Unclaimed),
            ]
        }

        fn case() -> impl Strategy<Value = Case> {
            let reaping = (0..3u32, any::<bool>()).prop_map(|(killed, survivor)| Reaping {
                killed,
                remaining: if survivor { vec![77] } else { Vec::new() },
                detail: format!("killed {killed}"),
            });
            (0..3u32, any::<bool>(), any::<bool>(), any::<bool>(), 0..8u32, status(), reaping).prop_map(
                |(max_retries, launched, cancelled, faulty_gpu, observed, status, reaping)| Case {
                    max_retries,
                    launched,
                    cancelled,
                    faulty_gpu,
                    observed: observed > 0,
                    status,
                    reaping,
                },
            )
        }

        fn state_of(cases: &[Case]) -> State {
            let mut state = State::default();
            let mut seq = 0;
            let mut apply = |state: &mut State, event| {
                seq += 1;
                state.apply(seq, &Record { time_ms: 1, event });
            };
            for (n, case) in cases.iter().enumerate() {
                let id = TaskId::from_parts(1, n as u32 + 1);
                let toml =
                    format!("name = \"t\"\ncommand = [\"true\"]\nmax_retries = {}\n", case.max_retries);
                let spec = crate::spec::parse_toml("t", &toml)
                    .and_then(|f| f.validate("t", std::path::Path::new("/w"), crate::spec::Limits::default()))
                    .expect("spec");
                apply(&mut state, Event::Submitted { task: id.clone(), submitter_uid: 1000, spec });
                let gpu = if case.faulty_gpu { "GPU-sick" } else { "GPU-ok" };
                apply(
                    &mut state,
                    Event::Placed {
                        task: id.clone(),
                        attempt: 1,
                        gpus: vec![gpu.into()],
                        exclusive: false,
                        requirement_mib: Some(1024),
                        reason: "fits".into(),
                    },
                );
                if case.launched {
                    let supervisor = ProcessRef { pid: 9, start_time_ticks: 1, boot_id: "b".into() };
                    apply(
                        &mut state,
                        Event::Launched { task: id.clone(), attempt: 1, supervisor, adopted: false },
                    );
                }
                if case.cancelled {
                    apply(&mut state, Event::Cancelled { task: id, by_uid: 0, reason: "test".into() });
                }
            }
            state
        }

        fn observed_of(cases: &[Case]) -> Observed {
            let mut observed = Observed::default();
            observed.gpu_faults.insert("GPU-sick".into(), "GPU1 unavailable: lost".into());
            for (n, case) in cases.iter().enumerate().filter(|(_, c)| c.observed) {
                let id = TaskId::from_parts(1, n as u32 + 1);
                observed.peak_mib.insert(id.clone(), 2048);
                let seen = Observation { status: case.status.clone(), reaping: case.reaping.clone() };
                observed.attempts.insert((id, 1), seen);
            }
            observed
        }

        /// The events as committed when every claim is taken.
        fn events_of(effects: &[Effect]) -> Vec<Event> {
            effects
                .iter()
                .flat_map(|effect| match effect {
                    Effect::Record(event) => vec![event.clone()],
                    Effect::Claim { then, .. } => then.clone(),
                    Effect::Stop { .. } | Effect::Relaunch(_) => Vec::new(),
                })
                .collect()
        }

        fn is_end(event: &Event, previous: Option<&Event>) -> bool {
            match event {
                Event::Finished { .. }
                | Event::Stopped { .. }
                | Event::Lost { .. }
                | Event::OomDetected { .. } => true,
                // A Failed right after Lost or OomDetected is that end's consequence.
                Event::Failed { .. } => {
                    !matches!(previous, Some(Event::Lost { .. } | Event::OomDetected { .. }))
                }
                _ => false,
            }
        }

        proptest! {
            #[test]
            fn decide_keeps_its_invariants(
                cases in proptest::collection::vec(case(), 1..6),
                late in any::<bool>(),
            ) {
                let state = state_of(&cases);
                let observed = observed_of(&cases);
                let config = Config::default();
                let now = if late { 1 + LAUNCH_DEADLINE_MS + 1 } else { 10 };
                let effects = decide(&state, &observed, &config, now);
                prop_assert_eq!(&effects, &decide(&state, &observed, &config, now), "decide is pure");

                let events = events_of(&effects);
                for (n, case) in cases.iter().enumerate() {
                    let id = TaskId::from_parts(1, n as u32 + 1);
                    let mine: Vec<&Event> = events.iter().filter(|e| e.task() == Some(&id)).collect();
                    let acted = effects.iter().any(|effect| match effect {
                        Effect::Record(event) => event.task() == Some(&id),
                        Effect::Claim { task, .. } | Effect::Stop { task, .. } => task == &id,
                        Effect::Relaunch(planned) => planned.task == id,
                    });
                    if !case.observed {
                        prop_assert!(!acted, "task {} was not observed but got {:?}", n, effects);
                        continue;
                    }
                    let ends = mine
                        .iter()
                        .enumerate()
                        .filter(|(i, e)| is_end(e, i.checked_sub(1).map(|j| mine[j])))
                        .count();
                    prop_assert!(ends <= 1, "task {}: {} ends in {:?}", n, ends, mine);
                    let ended_or_vanished =
                        matches!(case.status, AttemptStatus::Exited(_) | AttemptStatus::Vanished { .. });
                    if ended_or_vanished && !case.reaping.remaining.is_empty() {
                        prop_assert!(
                            mine.iter().all(|e| matches!(e, Event::Reaped { .. })),
                            "task {}: a verdict while processes survive: {:?}", n, mine
                        );
                    }
                    for (i, event) in mine.iter().enumerate() {
                        if matches!(event, Event::OomDetected { .. }) {
                            let next = mine.get(i + 1);
                            let recorded = matches!(next, Some(Event::Requeued { recovery: true, .. }))
                                || matches!(next, Some(Event::Failed { reason, .. }) if !reason.is_empty());
                            prop_assert!(recorded, "task {}: an OOM end without its decision: {:?}", n, mine);
                        }
                    }
                }

                // Every record the decision writes changes the fold.
                let mut folded = state.clone();
                for event in events {
                    let seq = folded.last_seq + 1;
                    let applied = folded.apply(seq, &Record { time_ms: now, event: event.clone() });
                    prop_assert_eq!(applied, crate::journal::Applied::Yes, "ignored: {:?}", event);
                }
            }
        }
    }
}
