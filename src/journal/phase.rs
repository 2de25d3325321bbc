//! A task's life as one value: waiting in a queue, active on its latest attempt, or ended.
//! Each phase holds only the facts that mean something in it, so a held task that runs, an
//! end time on a waiting task or a recovery queue on an ended one cannot be written.
//!
//! What a phase promises about the task's attempts (`State::check`, property-tested in
//! `journal::tests::phase_agrees_with_attempts`):
//! - `Waiting`: no attempt is open;
//! - `Active`: the latest attempt is open, and it is the only open one;
//! - `Ended`: at most the latest attempt is open (a cancelled task whose job is still being
//!   stopped), and `survivors` is set only while it is.
//!
//! The coarse [`Status`] that most readers need is derived ([`Task::status`]): Placed and
//! Running differ only by whether the open attempt launched.

use serde::{Deserialize, Serialize};

use super::state::{Status, Task};
use crate::sched::RecoveryMode;

/// Where a task is in its life, with that phase's data.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    /// Waiting to be placed: by the tick, or by Slurm for a Slurm job.
    Waiting {
        queue: Queue,
        /// Why it waits, from the last tick that considered it (or, until then, the survivors
        /// of the attempt that ended last).
        reason: Option<String>,
        /// Held (`--hold`, `carma hold`): it waits until released.
        held: bool,
    },
    /// Its latest attempt is placed or running.
    Active {
        /// Set by a Reaped record with survivors ([`survivors_reason`](super::state::survivors_reason)):
        /// the attempt's processes outlive SIGKILL, and its verdict waits for them.
        survivors: Option<String>,
        /// `carma requeue` by this uid: the attempt is being stopped, and its end queues the
        /// task again instead of ending it.
        requeue_by: Option<u32>,
    },
    /// Finished, failed or cancelled; never changes again.
    Ended {
        how: End,
        at_ms: u64,
        /// As in `Active`, for a cancelled task whose attempt is still being stopped.
        survivors: Option<String>,
    },
}

/// The queue a waiting task is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Queue {
    Main,
    /// The priority queue of tasks that ran out of GPU memory, and how the retry is placed
    /// (decoded once, from the Requeued record).
    Recovery(RecoveryMode),
}

/// How a task ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum End {
    Finished,
    Failed { reason: String },
    Cancelled { reason: String },
}

impl Phase {
    /// A new task's phase: waiting in the main queue, held if it was submitted so.
    pub fn submitted(held: bool) -> Phase {
        Phase::Waiting { queue: Queue::Main, reason: None, held }
    }
}

impl Task {
    /// Where the task is in its life, coarsely.
    pub fn status(&self) -> Status {
        match &self.phase {
            Phase::Waiting { .. } => Status::Pending,
            Phase::Active { .. } if self.active_attempt().is_some_and(|a| a.launched_ms.is_some()) => {
                Status::Running
            }
            Phase::Active { .. } => Status::Placed,
            Phase::Ended { how: End::Finished, .. } => Status::Finished,
            Phase::Ended { how: End::Failed { .. }, .. } => Status::Failed,
            Phase::Ended { how: End::Cancelled { .. }, .. } => Status::Cancelled,
        }
    }

    /// Why the task waits; while an attempt is open, which of its processes survive SIGKILL.
    pub fn pending_reason(&self) -> Option<&str> {
        match &self.phase {
            Phase::Waiting { reason, .. } => reason.as_deref(),
            Phase::Active { survivors, .. } | Phase::Ended { survivors, .. } => survivors.as_deref(),
        }
    }

    /// True while the task waits in the recovery queue.
    pub fn in_recovery(&self) -> bool {
        self.recovery_mode().is_some()
    }

    /// How the recovery retry is placed, while the task waits in the recovery queue.
    pub fn recovery_mode(&self) -> Option<RecoveryMode> {
        match self.phase {
            Phase::Waiting { queue: Queue::Recovery(mode), .. } => Some(mode),
            _ => None,
        }
    }

    /// Held: it waits until released.
    pub fn held(&self) -> bool {
        matches!(self.phase, Phase::Waiting { held: true, .. })
    }

    /// Who asked for the active attempt to be stopped and the task queued again.
    pub fn requeue_by(&self) -> Option<u32> {
        match self.phase {
            Phase::Active { requeue_by, .. } => requeue_by,
            _ => None,
        }
    }

    /// When the task ended.
    pub fn ended_ms(&self) -> Option<u64> {
        match self.phase {
            Phase::Ended { at_ms, .. } => Some(at_ms),
            _ => None,
        }
    }

    /// Why the task ended, for Failed and Cancelled.
    pub fn end_reason(&self) -> Option<&str> {
        match &self.phase {
            Phase::Ended { how: End::Failed { reason } | End::Cancelled { reason }, .. } => Some(reason),
            _ => None,
        }
    }

    /// Ends the task unless it has ended; whether it had not. An open attempt stays open (a
    /// cancelled job is stopped afterwards).
    pub(super) fn finish(&mut self, how: End, time_ms: u64) -> bool {
        if matches!(self.phase, Phase::Ended { .. }) {
            return false;
        }
        self.phase = Phase::Ended { how, at_ms: time_ms, survivors: None };
        true
    }

    /// Ends attempt `number` if it is open, and moves the phase on; whether it was open.
    pub(super) fn end_attempt(&mut self, number: u32, time_ms: u64, outcome: String) -> bool {
        let Some(attempt) = self.attempt_mut(number).filter(|a| a.ended_ms.is_none()) else { return false };
        attempt.ended_ms = Some(time_ms);
        attempt.outcome = Some(outcome);
        self.release_if_idle();
        true
    }

    /// After the open attempt ended: an active task waits in the main queue for the verdict
    /// (Requeued, or Finished or Failed) that the same tick commits with the end, keeping the
    /// survivors' words as its reason; an ended one forgets its survivors.
    fn release_if_idle(&mut self) {
        if self.active_attempt().is_some() {
            return;
        }
        match &mut self.phase {
            Phase::Active { survivors, .. } => {
                self.phase = Phase::Waiting { queue: Queue::Main, reason: survivors.take(), held: false };
            }
            Phase::Ended { survivors, .. } => *survivors = None,
            Phase::Waiting { .. } => {}
        }
    }

    /// Queues the task again after its attempt ended (Requeued): in the recovery queue with
    /// `recovery`, else in the main one. Whether it was waiting for that.
    pub(super) fn requeue(&mut self, recovery: Option<RecoveryMode>) -> bool {
        let Phase::Waiting { queue, .. } = &mut self.phase else { return false };
        *queue = recovery.map_or(Queue::Main, Queue::Recovery);
        true
    }
}
