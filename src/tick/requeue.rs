//! User requeue: a job that exits with [`REQUEUE_EXIT_CODE`], or an attempt stopped by
//! `carma requeue`, ends as Stopped and goes back to the main queue (Requeued with
//! `recovery_mode` [`RequeueMode::User`]). It is neither a failure nor a retry: the retry budget
//! for lost attempts does not count these attempts (`Task::requeue_count`).
//!
//! The administrator bounds both loops (`[limits]`):
//! - `requeues-max` (Slurm's `MaxBatchRequeue`, 5 by default): a job that asks for a requeue
//!   when its task was already requeued that many times ends Failed, "requeued 5 times;
//!   [limits] requeues-max is 5". A `carma requeue` is a person's decision and is not bounded.
//! - `retries-max`: the most retries (lost attempts, out-of-memory relaunches) any task gets,
//!   whatever its `max_retries` says ([`RetryBudget`]); `carma submit` refuses more, and a
//!   task queued before the bound was lowered is held to it, its reason naming the bound.

use crate::access::users;
use crate::config::QueueLimits;
use crate::exec::ExitOutcome;
use crate::journal::{Event, REQUEUE_EXIT_CODE, RequeueMode, Task};

use super::runner::AttemptExit;

/// The records for an attempt's end when the user asked for a requeue; `None` otherwise. A
/// job that exited 0 before the stop reached it has finished, and one whose out-of-memory
/// message is corroborated (`oom_corroborated`) goes through recovery as usual. A job that
/// asks once too often (`[limits] requeues-max`) fails instead.
pub(super) fn verdict(
    task: &Task,
    attempt: u32,
    exit: &AttemptExit,
    oom_corroborated: bool,
    outcome: &str,
    limits: &QueueLimits,
) -> Option<Vec<Event>> {
    if oom_corroborated || exit.outcome == (ExitOutcome::Exited { code: 0 }) {
        return None;
    }
    let id = task.id.clone();
    let (stopped, reason) = match task.requeue_by() {
        Some(uid) => {
            let who = users::display(uid);
            (
                format!("{outcome}: stopped for a requeue by {who}"),
                format!("requeued by {who} (carma requeue)"),
            )
        }
        None if exit.outcome == (ExitOutcome::Exited { code: REQUEUE_EXIT_CODE }) => {
            // Preemptions are requeues too (no retry), but the job did not ask for them.
            if let Some(reason) = requeues_exhausted(free_requeues(task), limits.requeues_max) {
                return Some(vec![Event::Failed { task: id, attempt, outcome: outcome.to_string(), reason }]);
            }
            (
                format!("{outcome}: requeue asked by the job"),
                format!("requeued by the job (exit {REQUEUE_EXIT_CODE}); not counted as a retry"),
            )
        }
        None => return None,
    };
    Some(vec![
        Event::Stopped { task: id.clone(), attempt, outcome: stopped },
        Event::Requeued {
            task: id,
            recovery: false,
            requirement_mib: None,
            recovery_mode: RequeueMode::User,
            reason,
        },
    ])
}

/// Requeues that used no retry and that `[limits] requeues-max` bounds: the job's own (exit 99),
/// a person's, and an out-of-memory's beside a task over its share; not preemptions, which the
/// job did not ask for.
pub(super) fn free_requeues(task: &Task) -> u32 {
    task.requeue_count.saturating_sub(super::preempt::preempted_requeues(task))
}

/// The Failed reason of a job that asks for another requeue after `requeued` of them, when
/// that reaches `requeues_max`; `None` while it may be requeued again.
pub(super) fn requeues_exhausted(requeued: u32, requeues_max: u32) -> Option<String> {
    (requeued >= requeues_max)
        .then(|| format!("requeued {requeued} times; [limits] requeues-max is {requeues_max}"))
}

/// Attempts that count against the retry budget of lost attempts: every attempt but those
/// that ended in a user requeue.
pub(super) fn retries_used(task: &Task) -> u32 {
    (task.attempts.len() as u32).saturating_sub(task.requeue_count)
}

/// The retries a task gets: its `max_retries`, held to `[limits] retries-max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RetryBudget {
    /// The retries allowed.
    pub retries_max: u32,
    /// `Some(bound)` when `[limits] retries-max` lowered the task's own `max_retries`.
    pub bounded_by: Option<u32>,
}

impl RetryBudget {
    /// The budget of `task` under `limits`.
    pub(super) fn of(task: &Task, limits: &QueueLimits) -> RetryBudget {
        let asked = task.spec.max_retries;
        let bounded_by = (asked > limits.retries_max).then_some(limits.retries_max);
        RetryBudget { retries_max: asked.min(limits.retries_max), bounded_by }
    }

    /// A give-up reason, naming the administrator's bound when it is the one that held.
    pub(super) fn name_bound(&self, reason: String) -> String {
        match self.bounded_by {
            Some(bound) => format!("{reason} ([limits] retries-max is {bound})"),
            None => reason,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: the sixth request of a job that was requeued five times fails, naming the bound;
    /// the fifth is still granted. Fails on the code before `requeues-max` (no bound at all).
    #[test]
    fn requeues_stop_at_the_bound_with_its_name() {
        assert_eq!(requeues_exhausted(4, 5), None);
        assert_eq!(requeues_exhausted(5, 5).as_deref(), Some("requeued 5 times; [limits] requeues-max is 5"));
        assert_eq!(requeues_exhausted(0, 0).as_deref(), Some("requeued 0 times; [limits] requeues-max is 0"));
    }
}
