//! User requeue: a job that exits with [`REQUEUE_EXIT_CODE`], or an attempt stopped by
//! `carma requeue`, ends as Stopped and goes back to the main queue (Requeued with
//! `recovery_mode` [`RequeueMode::User`]). It is neither a failure nor a retry: the retry budget
//! for lost attempts does not count these attempts (`Task::requeue_count`).

use crate::access::users;
use crate::exec::ExitOutcome;
use crate::journal::{Event, REQUEUE_EXIT_CODE, RequeueMode, Task};

use super::runner::AttemptExit;

/// The records for an attempt's end when the user asked for a requeue; `None` otherwise. A
/// job that exited 0 before the stop reached it has finished, and one that ran out of GPU
/// memory goes through recovery as usual.
pub(super) fn verdict(task: &Task, attempt: u32, exit: &AttemptExit, outcome: &str) -> Option<Vec<Event>> {
    if exit.oom.is_some() || exit.outcome == (ExitOutcome::Exited { code: 0 }) {
        return None;
    }
    let (stopped, reason) = match task.requeue_by() {
        Some(uid) => {
            let who = users::display(uid);
            (
                format!("{outcome}: stopped for a requeue by {who}"),
                format!("requeued by {who} (carma requeue)"),
            )
        }
        None if exit.outcome == (ExitOutcome::Exited { code: REQUEUE_EXIT_CODE }) => (
            format!("{outcome}: requeue asked by the job"),
            format!("requeued by the job (exit {REQUEUE_EXIT_CODE}); not counted as a retry"),
        ),
        None => return None,
    };
    let id = task.id.clone();
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

/// Attempts that count against the retry budget of lost attempts: every attempt but those
/// that ended in a user requeue.
pub(super) fn retries_used(task: &Task) -> u32 {
    (task.attempts.len() as u32).saturating_sub(task.requeue_count)
}
