//! How a task is shown in one word and one line: its state as squeue's two-letter code, and
//! the reason beside it. Shared by `queue`, `show` and the workflow views.

use std::borrow::Cow;

use crate::journal::{Status, Task};

/// The task's state as squeue's two-letter code (`S` while suspended, as Slurm's).
pub(super) fn code(task: &Task) -> &'static str {
    if suspended(task) {
        return "S";
    }
    match task.status() {
        Status::Pending => "PD",
        Status::Placed => "CF",
        Status::Running => "R",
        Status::Finished => "CD",
        Status::Failed if task.timed_out() => "TO",
        Status::Failed => "F",
        Status::Cancelled => "CA",
    }
}

/// The task's state in one word: its status, or `Suspended` while its attempt is suspended
/// for another task (`[sched.preemption] mode = "suspend"`).
pub(super) fn state(task: &Task) -> &'static str {
    if suspended(task) {
        "Suspended"
    } else if task.timed_out() {
        "Timeout"
    } else {
        task.status().as_str()
    }
}

fn suspended(task: &Task) -> bool {
    task.active_attempt().is_some_and(|a| a.suspended.is_some())
}

/// The one-line explanation shown for a task: why it waits, where it runs, who it gave way to
/// (preempted and stopping, or suspended), or how it ended.
pub(super) fn reason(task: &Task) -> Option<Cow<'_, str>> {
    // A cancelled task whose job is still being stopped has ended: its placement is history.
    if task.status().is_terminal()
        && let Some(end) = task.end_reason()
    {
        return Some(Cow::Borrowed(end));
    }
    if task.held_by_survivors() {
        return task.pending_reason().map(Cow::Borrowed);
    }
    if let Some(attempt) = task.active_attempt() {
        if let Some(suspension) = &attempt.suspended {
            return Some(Cow::Borrowed(&suspension.reason));
        }
        // Warned and in its grace: the placement is no longer the news.
        if let Some(preempted) = &attempt.preempted {
            let at = crate::clock::format_ms(preempted.at_ms);
            return Some(Cow::Owned(format!(
                "Preempted by {}: warned at {at}, stopped after its grace and queued again ({})",
                preempted.by, preempted.reason
            )));
        }
        return Some(Cow::Borrowed(&attempt.placement_reason));
    }
    // Held since the last tick gave it a reason: say so at once.
    if task.held() && task.status() == Status::Pending {
        return Some(Cow::Borrowed("Held: waits until released (carma release)"));
    }
    task.pending_reason().or(task.end_reason()).map(Cow::Borrowed)
}
