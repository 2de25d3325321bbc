//! From State to `sched`'s gate input and back: each task's owner, priority, hold,
//! dependencies (with where each dependency is now) and array cap; each user's decayed GPU
//! time for fair share; the previous backfill reservation; and the records a decision's
//! cancellations and reservation become.

use crate::id::TaskId;
use crate::journal::state::Reservation;
use crate::journal::{Event, Record, State, Status, Task};
use crate::sched::{self, Decision, DependencyState, SchedConfig, TaskGate, UserUsage};
use crate::spec::DependencyKind;

/// A waiting task's gate facts, with each dependency's state looked up in `state`.
pub fn task_gate(state: &State, task: &Task) -> TaskGate {
    let spec = &task.spec;
    TaskGate {
        user: task.submitter_uid,
        priority: i64::from(spec.priority) - i64::from(spec.nice),
        held: task.held(),
        dependencies: spec
            .dependencies
            .iter()
            .map(|d| sched::Dependency {
                task_id: d.task.as_str().to_owned(),
                kind: match d.kind {
                    DependencyKind::AfterOk => sched::DependencyKind::AfterOk,
                    DependencyKind::AfterAny => sched::DependencyKind::AfterAny,
                    DependencyKind::AfterNotOk => sched::DependencyKind::AfterNotOk,
                },
                state: dependency_state(state, &d.task),
            })
            .collect(),
        keep_on_dependency_failure: spec.keep_on_dependency_failure,
        array: spec.array.as_ref().and_then(|a| {
            a.running_max.map(|n| sched::ArraySlot { array_id: a.id.as_str().to_owned(), running_max: n })
        }),
        time_limit_ms: spec.time_limit_ms,
        begin_ms: spec.begin_ms,
        reservation: spec.reservation.clone(),
    }
}

/// Where the task `id` is, for a task that depends on it. A rejected submission never runs,
/// which for its dependents is the same as a cancel.
pub fn dependency_state(state: &State, id: &TaskId) -> DependencyState {
    match state.tasks.get(id).map(|t| t.status()) {
        Some(Status::Pending) => DependencyState::Pending,
        Some(Status::Placed | Status::Running) => DependencyState::Running,
        Some(Status::Finished) => DependencyState::Finished,
        Some(Status::Failed) => DependencyState::Failed,
        Some(Status::Cancelled) => DependencyState::Cancelled,
        None if state.rejected_ids.contains(id) => DependencyState::Cancelled,
        None => DependencyState::Unknown,
    }
}

/// A running task's owner and array.
pub fn running_gate(task: &Task) -> sched::RunningGate {
    sched::RunningGate {
        user: task.submitter_uid,
        array_id: task.spec.array.as_ref().map(|a| a.id.as_str().to_owned()),
        time_limit_ms: task.spec.time_limit_ms,
    }
}

/// Usage this many half-lives old weighs under 2^-40 of new usage: skipped.
const HALF_LIVES_COUNTED: u64 = 40;

/// Each user's GPU time (GPUs × time from launch to end, or to now while running), decayed
/// with the fair-share half-life; empty when fair share is off. Only attempts that launched
/// count: one placed and then lost, cancelled or refused before any supervisor started it
/// used no GPU and costs its owner nothing.
pub fn usage_by_user(state: &State, config: &SchedConfig, now_ms: u64) -> Vec<UserUsage> {
    if !config.fair_share.enabled {
        return Vec::new();
    }
    let half_life_ms = config.fair_share.half_life_ms;
    let horizon_ms = now_ms.saturating_sub(half_life_ms.saturating_mul(HALF_LIVES_COUNTED));
    let mut usage: std::collections::BTreeMap<u32, f64> = std::collections::BTreeMap::new();
    for task in state.tasks.values() {
        if half_life_ms > 0 && task.ended_ms().is_some_and(|t| t < horizon_ms) {
            continue;
        }
        for attempt in &task.attempts {
            let Some(start_ms) = attempt.launched_ms else { continue };
            let end_ms = attempt.ended_ms.unwrap_or(now_ms);
            let gpus = attempt.gpus.len() as u32;
            let used = sched::decayed_gpu_ms(gpus, start_ms, end_ms, now_ms, half_life_ms);
            *usage.entry(task.submitter_uid).or_default() += used;
        }
    }
    usage.into_iter().map(|(user, gpu_ms)| UserUsage { user, gpu_ms }).collect()
}

/// The reservation the last decision journaled, for the next one.
pub fn reservation_input(state: &State) -> Option<sched::Reservation> {
    state
        .reservation
        .as_ref()
        .map(|r| sched::Reservation { task_id: r.task.as_str().to_owned(), gpus: r.gpus.clone() })
}

/// The records a decision's gate outcome becomes: Cancelled for each task whose
/// dependency can never be met (by the tick's own uid), and Reserved when the reservation
/// differs from the journaled one.
pub fn decision_records(state: &State, decision: &Decision, now_ms: u64) -> Vec<Record> {
    let tick_uid = crate::access::uid::effective();
    let mut records = Vec::new();
    for cancellation in &decision.cancellations {
        let Some(task) = TaskId::parse(&cancellation.task_id) else {
            unreachable!("sched cancelled {} which is not a waiting task", cancellation.task_id)
        };
        let reason = cancellation.reason.clone();
        records.push(Record { time_ms: now_ms, event: Event::Cancelled { task, by_uid: tick_uid, reason } });
    }
    if let Some(reservation) = &decision.reservation
        && let Some(task) = TaskId::parse(&reservation.task_id)
    {
        let current = Reservation { task, gpus: reservation.gpus.clone() };
        if state.reservation.as_ref() != Some(&current) {
            let event = Event::Reserved { task: current.task, gpus: current.gpus };
            records.push(Record { time_ms: now_ms, event });
        }
    }
    records
}

#[cfg(test)]
mod tests {
    //! Goal: fair share charges an attempt only from its launch, and an out-of-memory relaunch
    //! like any run. Method: States folded from records, each at its time.
    use super::*;
    use crate::journal::{ProcessRef, RequeueMode};

    const HOUR_MS: u64 = 3_600_000;

    fn placed(task: &TaskId) -> Event {
        Event::Placed {
            task: task.clone(),
            attempt: 1,
            gpus: vec!["GPU-a".into()],
            exclusive: false,
            requirement_mib: None,
            reason: "fits".into(),
        }
    }

    /// The State after `events`, each at its time.
    fn state_of(events: Vec<(u64, Event)>) -> State {
        let mut state = State::default();
        for (seq, (time_ms, event)) in events.into_iter().enumerate() {
            state.apply(seq as u64 + 1, &Record { time_ms, event });
        }
        state
    }

    fn submitted(task: &TaskId, uid: u32) -> Event {
        let spec = crate::spec::parse_toml("t", "name = \"t\"\ncommand = [\"true\"]\n")
            .and_then(|f| f.validate("t", std::path::Path::new("/w"), crate::spec::Limits::default()))
            .unwrap();
        Event::Submitted { task: task.clone(), submitter_uid: uid, spec }
    }

    /// One user's attempts are placed and then lost or cancelled without a launch, another's
    /// runs for an hour; before, the first was charged from its placement to its end (two
    /// GPU-hours here).
    #[test]
    fn attempts_that_never_launched_cost_nothing() {
        let (lost, cancelled, ran) =
            (TaskId::from_parts(1, 1), TaskId::from_parts(1, 2), TaskId::from_parts(1, 3));
        let supervisor = ProcessRef { pid: 100, start_time_ticks: 1, boot_id: "b".into() };
        let state = state_of(vec![
            (0, submitted(&lost, 1001)),
            (0, submitted(&cancelled, 1001)),
            (0, submitted(&ran, 1002)),
            (0, placed(&lost)),
            (0, placed(&cancelled)),
            (0, placed(&ran)),
            (0, Event::Launched { task: ran.clone(), attempt: 1, supervisor, adopted: false }),
            (HOUR_MS, Event::Lost { task: lost.clone(), attempt: 1, reason: "never started".into() }),
            (HOUR_MS, Event::Cancelled { task: cancelled.clone(), by_uid: 1001, reason: "cancelled".into() }),
            (
                HOUR_MS,
                Event::Stopped { task: cancelled.clone(), attempt: 1, outcome: "never started".into() },
            ),
            (HOUR_MS, Event::Finished { task: ran.clone(), attempt: 1, exit_ms: HOUR_MS }),
        ]);
        let mut config = SchedConfig::default();
        config.fair_share.enabled = true;
        config.fair_share.half_life_ms = 0;
        let usage: std::collections::BTreeMap<u32, f64> =
            usage_by_user(&state, &config, 2 * HOUR_MS).into_iter().map(|u| (u.user, u.gpu_ms)).collect();
        assert_eq!(usage.get(&1001).copied().unwrap_or(0.0), 0.0, "{usage:?}");
        assert_eq!(usage.get(&1002).copied(), Some(HOUR_MS as f64), "{usage:?}");
    }

    /// Goal (issue 32): an out-of-memory relaunch is charged to its owner's fair share like any
    /// run: both attempts count, the recovery one with its GPU from launch to now.
    #[test]
    fn an_oom_relaunch_is_charged_like_any_run() {
        let id = TaskId::from_parts(1, 1);
        let supervisor = ProcessRef { pid: 4242, start_time_ticks: 1, boot_id: "b".into() };
        let placed = |attempt, exclusive| Event::Placed {
            task: id.clone(),
            attempt,
            gpus: vec!["GPU-a".into()],
            exclusive,
            requirement_mib: None,
            reason: "fits".into(),
        };
        let launched = |attempt| Event::Launched {
            task: id.clone(),
            attempt,
            supervisor: supervisor.clone(),
            adopted: false,
        };
        let state = state_of(vec![
            (0, submitted(&id, 1000)),
            (1000, placed(1, false)),
            (1000, launched(1)),
            (
                2000,
                Event::OomDetected {
                    task: id.clone(),
                    attempt: 1,
                    evidence: "CUDA out of memory".into(),
                    peak_mib: None,
                },
            ),
            (
                2000,
                Event::Requeued {
                    task: id.clone(),
                    recovery: true,
                    requirement_mib: Some(5120),
                    recovery_mode: RequeueMode::Recovery(crate::sched::RecoveryMode::Exclusive),
                    reason: "out of memory".into(),
                },
            ),
            (3000, placed(2, true)),
            (3000, launched(2)),
        ]);
        assert_eq!(state.tasks[&id].attempts.len(), 2, "the relaunch is attempt 2");
        let mut config = SchedConfig::default();
        config.fair_share.half_life_ms = 0;
        let usage = usage_by_user(&state, &config, 5000);
        assert_eq!(usage, [UserUsage { user: 1000, gpu_ms: 1000.0 + 2000.0 }]);
    }
}
