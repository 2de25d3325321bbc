//! The verdict on a job the kernel killed at its host memory limit (`--mem`, `host_mem`):
//! Failed, with a reason that names host memory and the limit. It is never a GPU
//! out-of-memory, whatever the job's log says: the GPU recovery queue gives GPU memory, which
//! is not what the job lacked, and a retry would hit the same limit.

use crate::exec::ExitOutcome;
use crate::journal::{Event, Task};

use super::runner::AttemptExit;

/// Whether the kernel killed a process of the attempt at its host memory limit and the job
/// did not succeed anyway (a worker killed, the job exited 0: it finished).
pub(super) fn killed_at_limit(exit: &AttemptExit) -> bool {
    let failed = match exit.outcome {
        ExitOutcome::Exited { code } => code != 0,
        ExitOutcome::Signaled { .. } => true,
        _ => false,
    };
    failed && exit.host_memory.is_some_and(|end| end.oom_kills > 0)
}

/// Failed for host memory, or `None` when the kernel killed nothing at the limit.
pub(super) fn verdict(task: &Task, attempt: u32, exit: &AttemptExit, outcome: &str) -> Option<Event> {
    let end = exit.host_memory.filter(|_| killed_at_limit(exit))?;
    let counter = if end.cgroup_v1 { "memory.oom_control" } else { "memory.events" };
    Some(Event::Failed {
        task: task.id.clone(),
        attempt,
        outcome: outcome.to_string(),
        reason: format!(
            "out of host memory: the kernel killed {} process(es) at the job's host memory limit of {} MiB ({counter} oom_kill); not a GPU out-of-memory, not retried; raise --mem (host_mem) and resubmit",
            end.oom_kills, end.limit_mib
        ),
    })
}
