//! Checkpoint reports: which of the runner's observations become `Checkpointed` records.
//!
//! The runner's observe step reads, for each local active attempt, when its job last said it
//! checkpointed (`exec::checkpoint`, or the simulated machine); [`decide`] turns each new
//! report into one record dated at the report, so a preemption's `lost_ms` counts from the
//! checkpoint itself rather than from the tick that saw it. Pure: the same state, observation
//! and time give the same records.
//!
//! A report is new when it is later than the attempt's last journaled checkpoint. It is the
//! job's claim, so it is only kept within what the tick can vouch for: one record per attempt
//! per tick at most (the observation holds one time per attempt), none for an attempt that is
//! not open or has not launched, none for a time before the attempt's launch (not this
//! attempt's), and none for a time still in the future (a job cannot date its checkpoint
//! ahead to look cheaper: the report counts once its time has come).

use crate::journal::{Event, State};

use super::reconcile::Effect;
use super::runner::Observed;

/// The Checkpointed records this tick's observation implies, in task order.
pub(super) fn decide(state: &State, observed: &Observed, now_ms: u64) -> Vec<Effect> {
    let mut effects = Vec::new();
    for ((task_id, number), &reported_ms) in &observed.checkpoints {
        let Some(task) = state.tasks.get(task_id) else { continue };
        let open = task.attempts.iter().rev().find(|a| a.number == *number && a.ended_ms.is_none());
        let Some(attempt) = open else { continue };
        let Some(launched_ms) = attempt.launched_ms else { continue };
        let fresh = attempt.checkpoint_ms.is_none_or(|last| reported_ms > last);
        if fresh && reported_ms >= launched_ms && reported_ms <= now_ms {
            let event = Event::Checkpointed { task: task_id.clone(), attempt: *number };
            effects.push(Effect::RecordAt { time_ms: reported_ms, event });
        }
    }
    effects
}

#[cfg(test)]
mod tests {
    //! Goal: a report is journaled once, at its own time, and only for an open, launched
    //! attempt, between its launch and now. Method: the real fold over a few records, then
    //! the decision over hand-made observations; each guard has a case that fails without it.
    use super::*;
    use crate::id::TaskId;
    use crate::journal::{ProcessRef, Record};
    use crate::spec::TaskSpec;

    fn id() -> TaskId {
        TaskId::from_parts(1_700_000_000_000, 7)
    }

    /// A task whose attempt 1 launched at 1000, with the given extra records.
    fn state(extra: Vec<Record>) -> State {
        let task = id();
        let spec = TaskSpec { name: "t".into(), command: vec!["x".into()], gpus: 1, ..TaskSpec::default() };
        let mut records = vec![
            Record { time_ms: 10, event: Event::Submitted { task: task.clone(), submitter_uid: 0, spec } },
            Record {
                time_ms: 500,
                event: Event::Placed {
                    task: task.clone(),
                    attempt: 1,
                    gpus: vec!["GPU-0".into()],
                    exclusive: false,
                    requirement_mib: None,
                    reason: "test".into(),
                },
            },
            Record {
                time_ms: 1000,
                event: Event::Launched {
                    task: task.clone(),
                    attempt: 1,
                    supervisor: ProcessRef { pid: 1, start_time_ticks: 1, boot_id: "b".into() },
                    adopted: false,
                },
            },
        ];
        records.extend(extra);
        let mut state = State::default();
        for (seq, record) in records.iter().enumerate() {
            assert!(
                matches!(state.apply(seq as u64 + 1, record), crate::journal::Applied::Yes),
                "{record:?}"
            );
        }
        state
    }

    fn observed(at_ms: u64, attempt: u32) -> Observed {
        let mut observed = Observed::default();
        observed.checkpoints.insert((id(), attempt), at_ms);
        observed
    }

    fn times(effects: &[Effect]) -> Vec<u64> {
        effects
            .iter()
            .map(|effect| match effect {
                Effect::RecordAt { time_ms, event: Event::Checkpointed { attempt: 1, .. } } => *time_ms,
                other => panic!("unexpected effect {other:?}"),
            })
            .collect()
    }

    #[test]
    fn a_new_report_is_journaled_once_at_its_own_time() {
        let fresh = state(Vec::new());
        assert_eq!(times(&decide(&fresh, &observed(4000, 1), 5000)), [4000]);
        let seen =
            state(vec![Record { time_ms: 4000, event: Event::Checkpointed { task: id(), attempt: 1 } }]);
        assert_eq!(times(&decide(&seen, &observed(4000, 1), 9000)), [0u64; 0], "already journaled");
        assert_eq!(times(&decide(&seen, &observed(6000, 1), 9000)), [6000], "a later one");
    }

    #[test]
    fn reports_outside_the_open_attempt_or_its_time_are_not_journaled() {
        let fresh = state(Vec::new());
        assert!(decide(&fresh, &observed(900, 1), 5000).is_empty(), "before its launch");
        assert!(decide(&fresh, &observed(5001, 1), 5000).is_empty(), "in the future");
        assert!(decide(&fresh, &observed(4000, 2), 5000).is_empty(), "another attempt");
        let ended = state(vec![Record {
            time_ms: 3000,
            event: Event::Finished { task: id(), attempt: 1, exit_ms: 3000 },
        }]);
        assert!(decide(&ended, &observed(2000, 1), 5000).is_empty(), "an ended attempt");
        assert_eq!(times(&decide(&fresh, &observed(5000, 1), 5000)), [5000], "now is not the future");
    }
}
