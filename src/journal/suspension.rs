//! Suspended, Resumed and SuspensionEnded folded into an attempt: while suspended it stays
//! open and holds no GPU memory (`mode = "suspend"`, see tick/suspend.rs); a suspension that
//! ends without a resume leaves the attempt open until it is stopped, its end a requeue
//! (tick/suspended.rs).

use super::event::Event;
use super::state::{Suspension, Task};

/// Folds a Suspended or Resumed record into `task`, or says why it does not fit.
pub(super) fn fold(task: &mut Task, time: u64, event: &Event) -> Result<(), &'static str> {
    match event {
        Event::Suspended { attempt, by, .. } => {
            let Some(a) = task.attempt_mut(*attempt).filter(|a| a.ended_ms.is_none()) else {
                return Err("Suspended for an attempt that is not open");
            };
            if a.suspended.is_some() {
                return Err("Suspended twice for one attempt");
            }
            let reason = format!("Suspended: gave way to {by}; resumes on its GPUs once they have room");
            a.suspended = Some(Suspension { by: by.clone(), at_ms: time, reason });
            a.suspensions = a.suspensions.saturating_add(1);
        }
        Event::Resumed { attempt, .. } => {
            let Some(a) = task.attempt_mut(*attempt).filter(|a| a.suspended.is_some()) else {
                return Err("Resumed for an attempt that is not suspended");
            };
            a.suspended = None;
            a.resumed_ms = Some(time);
        }
        Event::SuspensionEnded { attempt, reason, .. } => {
            let Some(a) = task.attempt_mut(*attempt).filter(|a| a.suspended.is_some()) else {
                return Err("SuspensionEnded for an attempt that is not suspended");
            };
            a.suspended = None;
            a.suspension_ended = Some(reason.clone());
        }
        _ => return Err("not a suspend record"),
    }
    Ok(())
}
