//! Preemption in the tick: State → `sched::preempt`'s input, its choice → Preempted records,
//! and the flow that follows (`[sched.preemption] mode = "requeue"`).
//!
//! 1. **Decide.** After the placement decision, `sched::preempt` picks at most one waiting task
//!    and its victims among the running tasks that opted in; this decision's own placements
//!    count as running, so the victims' room is not taken twice. Each victim gets a Preempted
//!    record (who for, why, the work lost since its last Checkpointed record or its start),
//!    committed with the placements; right after the commit the tick asks each victim's
//!    supervisor to warn the job ([`AttemptRunner::notice_preemption`]: the job's `--signal`
//!    signal, with its `B:` meaning, or SIGTERM).
//! 2. **Keep the room.** While a victim of the preemption still runs, or for a grace after the
//!    last one ended, the preemptor is decided first and alone; the others are decided after
//!    it, with its placement counted as running, or with the victims' GPUs unavailable ("kept
//!    for TASK (preempting)") while it does not fit yet. Nobody else is preempted meanwhile.
//! 3. **Stop.** Reconcile stops a victim as cancel does once the grace has passed since its
//!    Preempted record (the job's `--signal` lead when longer): [`stop_due`].
//! 4. **Withdraw.** A victim still running when its preemptor no longer waits (cancelled,
//!    ended, held, or placed elsewhere) is not stopped: a PreemptionWithdrawn record calls the
//!    preemption off ([`withdrawal`]) and the attempt's end goes its usual way. A victim that
//!    already exited on the warning is queued again as below (as Slurm does).
//! 5. **Queue again.** A victim's end that is not a success (nor a corroborated out-of-memory)
//!    is Stopped + Requeued (user requeue: a new attempt at its place in the queue, not a
//!    retry): [`verdict`]. A victim that finished meanwhile has finished.
//!
//! With `mode = "off"` [`decide`] is `sched::decide` and nothing else: the records are those of
//! a queue without preemption, byte for byte.

use std::collections::BTreeMap;

use crate::config::Config;
use crate::exec::ExitOutcome;
use crate::id::TaskId;
use crate::journal::{Event, Record, RequeueMode, State, Task};
use crate::sched::{
    self, Decision, PreemptInput, Preemptible, Preemption, RunningTask, SchedInput, WaitingTask,
};

use super::runner::AttemptExit;

/// The placement decision with preemption's part in it.
pub(super) struct Decided {
    /// The decision (placements, reasons, reservation), with the preemption's reasons.
    pub decision: Decision,
    /// Preempted records to commit with it.
    pub records: Vec<Record>,
    /// Victims to warn once the records are committed.
    pub notices: Vec<(TaskId, u32)>,
}

/// A preemption under way: its preemptor, the victims still running, the GPUs kept.
struct Underway {
    by: String,
    running: Vec<String>,
    kept: Vec<String>,
}

/// Decides placements and, with preemption on, at most one preemption (module docs).
pub(super) fn decide(state: &State, input: &SchedInput<'_>, config: &Config, now_ms: u64) -> Decided {
    let preemption = &config.sched.preemption;
    if !preemption.enabled() {
        return Decided { decision: sched::decide(input), records: Vec::new(), notices: Vec::new() };
    }
    let mut decided = match underway(state, now_ms, preemption.grace_ms) {
        Some(underway) if input.waiting.iter().any(|t| t.id == underway.by) => {
            first_then_rest(input, &underway)
        }
        _ => choose(state, input, config, now_ms),
    };
    mark_requeued_victims(state, &mut decided.decision);
    decided
}

/// When a preempted attempt is to be stopped: the grace after its Preempted record, or the
/// job's `--signal` lead when longer; `None` for an attempt that was not preempted.
pub(super) fn stop_due(
    task: &Task,
    attempt: &crate::journal::state::Attempt,
    config: &Config,
) -> Option<u64> {
    let preempted = attempt.preempted.as_ref()?;
    let lead_ms = task
        .spec
        .signal
        .as_deref()
        .and_then(|text| crate::spec::timing::WarnSignal::parse(text).ok())
        .map_or(0, |warn| u64::from(warn.seconds) * 1000);
    Some(preempted.at_ms.saturating_add(config.sched.preemption.grace_ms.max(lead_ms)))
}

/// Why a running preempted attempt's preemption is called off: its preemptor no longer waits
/// (cancelled, ended, held or placed elsewhere). `None` while the preemptor waits, or for an
/// attempt that was not preempted or has ended.
pub(super) fn withdrawal(
    state: &State,
    task: &Task,
    attempt: &crate::journal::state::Attempt,
) -> Option<Event> {
    let preempted = attempt.preempted.as_ref()?;
    if attempt.ended_ms.is_some() {
        return None;
    }
    let why = preemptor_gone(state, &preempted.by)?;
    let reason = format!("preemptor {} {why}", preempted.by.as_str());
    Some(Event::PreemptionWithdrawn { task: task.id.clone(), attempt: attempt.number, reason })
}

/// Why preemptor `by` no longer waits for its victims' GPUs, or `None` while it waits.
fn preemptor_gone(state: &State, by: &TaskId) -> Option<String> {
    let Some(preemptor) = state.tasks.get(by) else {
        return Some("is no longer in the journal".to_string());
    };
    match preemptor.status() {
        crate::journal::Status::Pending if preemptor.held() => Some("is held".to_string()),
        crate::journal::Status::Pending => None,
        crate::journal::Status::Placed | crate::journal::Status::Running => {
            Some("started elsewhere".to_string())
        }
        crate::journal::Status::Cancelled => Some("was cancelled".to_string()),
        crate::journal::Status::Finished => Some("finished".to_string()),
        crate::journal::Status::Failed => Some("failed".to_string()),
    }
}

/// The records of a preempted attempt's end: Stopped and Requeued (a user requeue, so no
/// retry is used), unless it finished (exit 0) before the preemption was journaled or ran out
/// of memory for real (`oom_corroborated`), which go their usual ways. `None` for an attempt not preempted.
pub(super) fn verdict(
    task: &Task,
    attempt: u32,
    exit: &AttemptExit,
    oom_corroborated: bool,
    outcome: &str,
) -> Option<Vec<Event>> {
    let preempted = task.attempts.iter().rev().find(|a| a.number == attempt)?.preempted.as_ref()?;
    // Exit 0 is the job's own word. As Slurm's PreemptMode=REQUEUE, an end after the
    // preemption was journaled is a requeue whatever the code (a job that saves on the warning
    // and exits 0 is not done); only an exit 0 the supervisor recorded before it finished.
    let finished_before =
        exit.outcome == (ExitOutcome::Exited { code: 0 }) && exit.ended_ms < preempted.at_ms;
    if oom_corroborated || finished_before {
        return None;
    }
    let by = preempted.by.as_str();
    let lost = crate::spec::render_ms(preempted.lost_ms);
    Some(vec![
        Event::Stopped { task: task.id.clone(), attempt, outcome: format!("{outcome}: preempted by {by}") },
        Event::Requeued {
            task: task.id.clone(),
            recovery: false,
            requirement_mib: None,
            recovery_mode: RequeueMode::User,
            reason: format!(
                "preempted by {by} ({}); {lost} of work lost; not counted as a retry",
                preempted.reason
            ),
        },
    ])
}

/// Times an attempt of `task` was stopped and queued again by a preemption (not withdrawn).
pub(super) fn preempted_requeues(task: &Task) -> u32 {
    task.attempts.iter().filter(|a| a.preempted.is_some()).count() as u32
}

/// Times `task` was warned that it is preempted: every notice counts against `max-per-task`,
/// a suspension's, and a preemption's that was withdrawn later.
pub(super) fn preemptions(task: &Task) -> u32 {
    let stopped = preempted_requeues(task);
    let other: u32 = task.attempts.iter().map(|a| a.suspensions.saturating_add(a.withdrawals)).sum();
    stopped.saturating_add(other)
}

/// The preemption under way, if any: a waiting preemptor whose victims still run, or ended
/// less than `grace_ms` ago, or are suspended for it (their processes stopped, their GPU
/// memory released: none of them still runs). The earliest, should there be several.
fn underway(state: &State, now_ms: u64, grace_ms: u64) -> Option<Underway> {
    let mut found: Option<(u64, Underway)> = None;
    for task in state.tasks.values() {
        let Some(attempt) = task.attempts.last() else { continue };
        let (by, at_ms) = match (&attempt.preempted, &attempt.suspended) {
            (Some(preempted), _) => (&preempted.by, preempted.at_ms),
            (None, Some(suspended)) => (&suspended.by, suspended.at_ms),
            (None, None) => continue,
        };
        let recent = attempt.ended_ms.is_none_or(|ended| ended.saturating_add(grace_ms) >= now_ms);
        let waiting = preemptor_gone(state, by).is_none();
        if !recent || !waiting {
            continue;
        }
        let by = by.as_str().to_string();
        let entry = match &mut found {
            Some((at, underway)) if underway.by == by => {
                *at = (*at).min(at_ms);
                underway
            }
            Some((at, _)) if *at <= at_ms => continue,
            _ => {
                found = Some((at_ms, Underway { by, running: Vec::new(), kept: Vec::new() }));
                &mut found.as_mut().expect("just set").1
            }
        };
        if attempt.ended_ms.is_none() && attempt.suspended.is_none() {
            entry.running.push(task.id.as_str().to_string());
        }
        for gpu in &attempt.gpus {
            if !entry.kept.contains(gpu) {
                entry.kept.push(gpu.clone());
            }
        }
    }
    found.map(|(_, underway)| underway)
}

/// The preemptor first, alone; then the others, around its placement or the kept GPUs.
fn first_then_rest(input: &SchedInput<'_>, underway: &Underway) -> Decided {
    let Some(preemptor) = input.waiting.iter().find(|t| t.id == underway.by) else {
        unreachable!("first_then_rest is called with the preemptor waiting")
    };
    let mut first = sched::decide(&SchedInput { waiting: std::slice::from_ref(preemptor), ..*input });
    let others: Vec<WaitingTask> = input.waiting.iter().filter(|t| t.id != underway.by).cloned().collect();
    let mut running = input.running.to_vec();
    let mut gpus = input.gpus.to_vec();
    match first.placements.first() {
        Some(placement) => running.push(as_running(preemptor, placement, input.now_ms)),
        None => {
            let why = format!("kept for {} (preempting)", underway.by);
            for gpu in gpus.iter_mut().filter(|g| underway.kept.contains(&g.uuid)) {
                gpu.unavailable.get_or_insert_with(|| why.clone());
            }
        }
    }
    // The per-tick limit holds for both decisions together.
    let mut config = input.config.clone();
    config.placements_per_tick_max =
        config.placements_per_tick_max.saturating_sub(first.placements.len() as u32);
    let rest = SchedInput { gpus: &gpus, running: &running, waiting: &others, config: &config, ..*input };
    let mut decision = sched::decide(&rest);
    if first.placements.is_empty() && !underway.running.is_empty() {
        for pending in &mut first.pending {
            pending.reason = format!("Preempting: waiting for {} to stop", underway.running.join(", "));
        }
    }
    decision.placements.splice(0..0, first.placements);
    decision.pending.splice(0..0, first.pending);
    decision.cancellations.splice(0..0, first.cancellations);
    Decided { decision, records: Vec::new(), notices: Vec::new() }
}

/// The ordinary decision, then at most one new preemption.
fn choose(state: &State, input: &SchedInput<'_>, config: &Config, now_ms: u64) -> Decided {
    let mut decision = sched::decide(input);
    // This decision's placements hold their room as running tasks do.
    let mut running = input.running.to_vec();
    for placement in &decision.placements {
        if let Some(task) = input.waiting.iter().find(|t| t.id == placement.task_id) {
            running.push(as_running(task, placement, now_ms));
        }
    }
    let world = SchedInput { running: &running, ..*input };
    let infos = preemptible(state, input, config, now_ms);
    let queued_since_ms = queued_since(state, input.waiting);
    let chosen = sched::preempt(&PreemptInput {
        sched: &world,
        decision: &decision,
        running: &infos,
        queued_since_ms: &queued_since_ms,
    });
    let Some(chosen) = chosen else {
        return Decided { decision, records: Vec::new(), notices: Vec::new() };
    };
    let (records, notices) = preempted_records(&chosen, now_ms);
    let victims: Vec<&str> = chosen.victims.iter().map(|v| v.id.as_str()).collect();
    for pending in decision.pending.iter_mut().filter(|p| p.task_id == chosen.preemptor) {
        pending.reason = format!("Preempting: waiting for {} to stop", victims.join(", "));
    }
    Decided { decision, records, notices }
}

/// One Preempted record per victim, and who to warn after the commit. With `mode = "suspend"`
/// the tick adds why the victim is requeued instead (`super::suspend::annotate`).
fn preempted_records(chosen: &Preemption, now_ms: u64) -> (Vec<Record>, Vec<(TaskId, u32)>) {
    let Some(by) = TaskId::parse(&chosen.preemptor) else {
        unreachable!("sched chose {} which is not a waiting task", chosen.preemptor)
    };
    let reason = chosen.reason.clone();
    let mut records = Vec::new();
    let mut notices = Vec::new();
    for victim in &chosen.victims {
        let Some(task) = TaskId::parse(&victim.id) else {
            unreachable!("sched chose {} which is not a running task", victim.id)
        };
        notices.push((task.clone(), victim.attempt));
        let event = Event::Preempted {
            task,
            attempt: victim.attempt,
            by: by.clone(),
            reason: reason.clone(),
            lost_ms: victim.lost_ms,
        };
        records.push(Record { time_ms: now_ms, event });
    }
    (records, notices)
}

/// What preemption knows of each running task: local, launched, batch tasks only.
fn preemptible(state: &State, input: &SchedInput<'_>, config: &Config, now_ms: u64) -> Vec<Preemptible> {
    let preemption = &config.sched.preemption;
    let usage = super::gate::usage_by_user(state, &config.sched, now_ms);
    let preemptors: std::collections::BTreeSet<&TaskId> = state
        .tasks
        .values()
        .flat_map(|t| t.attempts.iter().filter_map(|a| a.preempted.as_ref().map(|p| &p.by)))
        .collect();
    let mut infos = Vec::new();
    for running in input.running {
        let Some(task) = TaskId::parse(&running.id).and_then(|id| state.tasks.get(&id)) else { continue };
        // A suspended attempt's held room (tick/place.rs `held_rooms`) is no victim.
        let Some(attempt) = task.active_attempt().filter(|a| a.suspended.is_none()) else { continue };
        let Some(started_ms) = attempt.launched_ms else { continue };
        if task.slurm.is_some() || task.spec.interactive.is_some() || task.requeue_by().is_some() {
            continue;
        }
        let gate = super::gate::task_gate(state, task);
        infos.push(Preemptible {
            id: running.id.clone(),
            attempt: attempt.number,
            priority: gate.priority,
            requeue: task.spec.requeue.unwrap_or(preemption.requeue_default),
            started_ms,
            checkpoint_ms: attempt.checkpoint_ms,
            preemptions: preemptions(task),
            usage_gpu_ms: usage.iter().find(|u| u.user == task.submitter_uid).map_or(0.0, |u| u.gpu_ms),
            stopping: attempt.preempted.is_some() || attempt.suspension_ended.is_some(),
            preemptor: preemptors.contains(&task.id),
            withdrawn_ms: task.attempts.iter().filter_map(|a| a.withdrawn_ms).max(),
        });
    }
    infos
}

/// When each waiting task entered the queue: the end of its last attempt, or its submission.
fn queued_since(state: &State, waiting: &[WaitingTask]) -> BTreeMap<String, u64> {
    waiting
        .iter()
        .filter_map(|w| {
            let task = TaskId::parse(&w.id).and_then(|id| state.tasks.get(&id))?;
            let ended = task.attempts.last().and_then(|a| a.ended_ms)?;
            Some((w.id.clone(), ended))
        })
        .collect()
}

/// A task placed in this decision, as the running task it is about to be.
fn as_running(task: &WaitingTask, placement: &sched::Placement, now_ms: u64) -> RunningTask {
    RunningTask {
        id: task.id.clone(),
        gpus: placement.gpus.clone(),
        requirement_mib: placement.requirement_mib,
        launched_ms: now_ms,
        observed_mib: None,
        exclusive: placement.exclusive,
        gate: sched::RunningGate {
            user: task.gate.user,
            array_id: task.gate.array.as_ref().map(|a| a.array_id.clone()),
            time_limit_ms: task.gate.time_limit_ms,
        },
        sm_estimate: task.sm_estimate,
        runtime_estimate_ms: task.runtime_estimate_ms,
    }
}

/// A waiting task whose last attempt was preempted says so before its reason.
fn mark_requeued_victims(state: &State, decision: &mut Decision) {
    for pending in &mut decision.pending {
        let Some(task) = TaskId::parse(&pending.task_id).and_then(|id| state.tasks.get(&id)) else {
            continue;
        };
        if let Some(preempted) = task.attempts.last().and_then(|a| a.preempted.as_ref()) {
            pending.reason =
                format!("Requeued after preemption by {}: {}", preempted.by.as_str(), pending.reason);
        }
    }
}

#[cfg(test)]
mod tests {
    //! Goal: a preemption whose preemptor no longer waits is withdrawn while its victim runs,
    //! and the victim's end then goes its usual way (exit 0 finishes, not requeued). Method:
    //! records folded into a real State, then `withdrawal`, `stop_due` and `verdict`.
    use super::*;
    use crate::journal::ProcessRef;

    fn spec(name: &str) -> crate::spec::TaskSpec {
        let text = format!("name = \"{name}\"\ncommand = [\"true\"]\nrequeue = true\n");
        crate::spec::parse_toml(name, &text)
            .and_then(|f| f.validate(name, std::path::Path::new("/w"), crate::spec::Limits::default()))
            .expect("spec")
    }

    /// A running victim (attempt 1 on GPU-a) preempted at time 100 by a waiting preemptor.
    fn preempted() -> (State, TaskId, TaskId) {
        let (victim, by) = (TaskId::from_parts(1, 1), TaskId::from_parts(2, 2));
        let supervisor = ProcessRef { pid: 4242, start_time_ticks: 1, boot_id: "b".into() };
        let events = [
            Event::Submitted { task: victim.clone(), submitter_uid: 1000, spec: spec("v") },
            Event::Placed {
                task: victim.clone(),
                attempt: 1,
                gpus: vec!["GPU-a".into()],
                exclusive: false,
                requirement_mib: None,
                reason: "fits".into(),
            },
            Event::Launched { task: victim.clone(), attempt: 1, supervisor, adopted: false },
            Event::Submitted { task: by.clone(), submitter_uid: 1001, spec: spec("p") },
            Event::Preempted {
                task: victim.clone(),
                attempt: 1,
                by: by.clone(),
                reason: "priority 10 over 0".into(),
                lost_ms: 50,
            },
        ];
        let mut state = State::default();
        for (seq, event) in events.into_iter().enumerate() {
            state.apply(seq as u64 + 1, &Record { time_ms: 100, event });
        }
        (state, victim, by)
    }

    fn withdrawn(state: &State, victim: &TaskId) -> Option<Event> {
        let task = &state.tasks[victim];
        withdrawal(state, task, task.attempts.last().expect("attempt"))
    }

    fn exit_zero() -> AttemptExit {
        AttemptExit {
            outcome: ExitOutcome::Exited { code: 0 },
            oom: None,
            ended_ms: 200,
            output_truncated: None,
            start: None,
            host_memory: None,
            gpu_readings: None,
        }
    }

    #[test]
    fn a_preemption_stands_while_its_preemptor_waits() {
        let (state, victim, _) = preempted();
        assert_eq!(withdrawn(&state, &victim), None);
        let task = &state.tasks[&victim];
        assert!(
            verdict(task, 1, &exit_zero(), false, "exited 0").is_some(),
            "an end after Preempted is a requeue"
        );
    }

    #[test]
    fn a_cancelled_preemptor_withdraws_the_preemption_and_the_victim_finishes() {
        let (mut state, victim, by) = preempted();
        let cancel = Event::Cancelled { task: by.clone(), by_uid: 1001, reason: "cancelled by u".into() };
        state.apply(6, &Record { time_ms: 110, event: cancel });
        let event = withdrawn(&state, &victim).expect("withdrawn");
        let reason = format!("preemptor {} was cancelled", by.as_str());
        assert_eq!(
            event,
            Event::PreemptionWithdrawn { task: victim.clone(), attempt: 1, reason: reason.clone() }
        );
        state.apply(7, &Record { time_ms: 120, event });
        let task = &state.tasks[&victim];
        let attempt = task.attempts.last().expect("attempt");
        assert_eq!(attempt.withdrawn.as_deref(), Some(reason.as_str()));
        assert_eq!(stop_due(task, attempt, &Config::default()), None, "not stopped at the grace");
        assert_eq!(verdict(task, 1, &exit_zero(), false, "exited 0"), None, "exit 0 goes its usual way");
        assert_eq!(withdrawn(&state, &victim), None, "withdrawn once");
    }

    #[test]
    fn a_held_preemptor_withdraws_the_preemption() {
        let (mut state, victim, by) = preempted();
        state.apply(6, &Record { time_ms: 110, event: Event::Held { task: by.clone(), by_uid: 1001 } });
        let reason = format!("preemptor {} is held", by.as_str());
        assert_eq!(
            withdrawn(&state, &victim),
            Some(Event::PreemptionWithdrawn { task: victim, attempt: 1, reason })
        );
    }

    /// Goal (issue 41, 3): a withdrawn preemption still counts against `max-per-task`, and the
    /// victim rests for `withdrawn-rest` from it. Method: the record folded, then what
    /// preemption is told of the victim. Fails on the code before (0 preemptions, no rest).
    #[test]
    fn a_withdrawn_preemption_counts_and_its_victim_rests() {
        let (mut state, victim, by) = preempted();
        state.apply(6, &Record { time_ms: 110, event: Event::Held { task: by, by_uid: 1001 } });
        let event = withdrawn(&state, &victim).expect("withdrawn");
        state.apply(7, &Record { time_ms: 120, event });
        let task = &state.tasks[&victim];
        assert_eq!(preemptions(task), 1, "the notice counts");
        assert_eq!(preempted_requeues(task), 0, "it was not requeued");
        let attempt = task.attempts.last().expect("attempt");
        assert_eq!((attempt.withdrawals, attempt.withdrawn_ms), (1, Some(120)));
    }
}
