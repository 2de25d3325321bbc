//! Suspended and Resumed folded into an attempt: while suspended it stays open and holds no
//! GPU memory (`mode = "suspend"`, see tick/suspend.rs).

use super::event::Event;
use super::fold::Applied;
use super::state::{Suspension, Task};

/// Folds a Suspended or Resumed record into `task`.
pub(super) fn fold(task: &mut Task, time: u64, event: &Event) -> Applied {
    match event {
        Event::Suspended { attempt, by, .. } => {
            let Some(a) = task.attempt_mut(*attempt).filter(|a| a.ended_ms.is_none()) else {
                return Applied::Ignored("Suspended for an attempt that is not open");
            };
            if a.suspended.is_some() {
                return Applied::Ignored("Suspended twice for one attempt");
            }
            a.suspended = Some(Suspension { by: by.clone(), at_ms: time });
        }
        Event::Resumed { attempt, .. } => {
            let Some(a) = task.attempt_mut(*attempt).filter(|a| a.suspended.is_some()) else {
                return Applied::Ignored("Resumed for an attempt that is not suspended");
            };
            a.suspended = None;
        }
        _ => return Applied::Ignored("not a suspend record"),
    }
    Applied::Yes
}
