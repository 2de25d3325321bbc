//! How a task is shown in one word and one line: its state as squeue's two-letter code, and
//! the reason beside it. Shared by `queue`, `show` and the workflow views.

use crate::journal::{Status, Task};

/// The task's state as squeue's two-letter code.
pub(super) fn code(task: &Task) -> &'static str {
    match task.status() {
        Status::Pending => "PD",
        Status::Placed => "CF",
        Status::Running => "R",
        Status::Finished => "CD",
        Status::Failed => "F",
        Status::Cancelled => "CA",
    }
}

/// The one-line explanation shown for a task: why it waits, where it runs, or how it ended.
pub(super) fn reason(task: &Task) -> Option<&str> {
    // A cancelled task whose job is still being stopped has ended: its placement is history.
    if task.status().is_terminal()
        && let Some(end) = task.end_reason()
    {
        return Some(end);
    }
    if task.held_by_survivors() {
        return task.pending_reason();
    }
    if let Some(attempt) = task.active_attempt() {
        return Some(&attempt.placement_reason);
    }
    // Held since the last tick gave it a reason: say so at once.
    if task.held() && task.status() == Status::Pending {
        return Some("Held: waits until released (carma release)");
    }
    task.pending_reason().or(task.end_reason())
}
