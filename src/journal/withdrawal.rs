//! PreemptionWithdrawn folded into an attempt: the preemption is called off, so the attempt is
//! no longer stopped at the end of the grace and its end goes its usual way (tick/preempt.rs).
//! The notice the job got still counts: `withdrawals` and `withdrawn_ms` feed `max-per-task`
//! and `withdrawn-rest`.

use super::state::Task;

/// Folds a PreemptionWithdrawn record for `attempt` into `task`, or says why it does not fit.
pub(super) fn fold(task: &mut Task, time: u64, attempt: u32, reason: &str) -> Result<(), &'static str> {
    let Some(a) = task.attempt_mut(attempt).filter(|a| a.ended_ms.is_none()) else {
        return Err("PreemptionWithdrawn for an attempt that is not open");
    };
    if a.preempted.take().is_none() {
        return Err("PreemptionWithdrawn for an attempt that was not preempted");
    }
    a.withdrawn = Some(reason.to_string());
    a.withdrawals = a.withdrawals.saturating_add(1);
    a.withdrawn_ms = Some(time);
    Ok(())
}
