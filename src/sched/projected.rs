//! The projected-SM gate: share a GPU only while the standalone SM activity of its tasks, the
//! new one's included, stays within `sm_projected_cap`.
//!
//! A GPU's measured SM activity is a windowed average that saturates at 1, lags behind
//! placements, and says nothing about what one more job would add: a GPU running one CNN at
//! 0.65 reads the same whether the next job is a light one at 0.1 or a transformer at 0.8.
//! The projection adds the tasks' own figures instead: each running task's standalone SM
//! activity (measured on the attempt, or learned from earlier runs of its workload), each task
//! placed earlier in the same decision, and the new task's; `sm_unknown` stands in for a task
//! nobody has measured yet. Under MPS, jobs on a GPU whose summed activity S exceeds what the
//! GPU can serve all slow down by S/η, so a cap somewhat above 1 keeps every GPU busy (the
//! estimates are noisy, and a GPU at the cap stays busy when one of its jobs ends) without
//! stretching the last jobs of a run. A GPU with no carma task always passes: a lone task is
//! never refused for its own activity, whatever the cap.

use super::precondition::{Gate, Refusal};
use super::table::GpuSlot;

/// Slack for float sums, so that e.g. 0.65 + 0.85 passes a cap of 1.5.
const SM_EPSILON: f32 = 1e-4;

/// The projected gate, for a GPU that is available.
pub(super) fn check_projected<'a>(slot: &GpuSlot<'a>, gate: &Gate) -> Result<(), Refusal<'a>> {
    assert!(gate.sm_projected_cap > 0.0, "the projected gate is on");
    if slot.tasks == 0 {
        return Ok(());
    }
    if slot.projected_sm + gate.task_sm > gate.sm_projected_cap + SM_EPSILON {
        return Err(Refusal::SmProjected {
            gpu: slot.name(),
            projected_sm: slot.projected_sm,
            task_sm: gate.task_sm,
            cap: gate.sm_projected_cap,
        });
    }
    Ok(())
}
