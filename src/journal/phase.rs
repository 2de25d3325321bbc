//! A task's life as one value: waiting in a queue, active on its latest attempt, or ended.
//! Each phase holds only the facts that mean something in it, so a held task that runs, an
//! end time on a waiting task or a recovery queue on an ended one cannot be written.
//!
//! What a phase promises about the task's attempts (`State::check`, property-tested in
//! `journal::tests::phase_agrees_with_attempts`):
//! - `Waiting`: no attempt is open;
//! - `Active`: the latest attempt is open, and it is the only open one;
//! - `Ended`: at most the latest attempt is open (a cancelled task, or one that failed for
//!   using more GPU memory than it declared, whose job is still being stopped), and
//!   `survivors` is set only while it is.
//!
//! The coarse [`Status`] that most readers need is derived (`Task::status`): Placed and
//! Running differ only by whether the open attempt launched. This module knows nothing of
//! tasks or attempts; `state` keeps the two in step (`Task::end_attempt`).

use serde::{Deserialize, Serialize};

use crate::sched::RecoveryMode;

/// Where a task is in its life, coarsely.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Status {
    /// Waiting in a queue (held or not).
    Pending,
    /// Its latest attempt is placed on GPUs and not yet launched.
    Placed,
    /// Its latest attempt's supervisor (or Slurm job) runs.
    Running,
    /// Its last attempt exited 0.
    Finished,
    /// It ended without success and will not be retried.
    Failed,
    /// Cancelled: by a user, by Slurm, or by the tick for a dependency that can never be met.
    Cancelled,
}

impl Status {
    /// Finished, Failed and Cancelled never change again.
    pub fn is_terminal(self) -> bool {
        matches!(self, Status::Finished | Status::Failed | Status::Cancelled)
    }

    /// The status's name (`Pending` ...), for messages, metrics and the web page.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "Pending",
            Status::Placed => "Placed",
            Status::Running => "Running",
            Status::Finished => "Finished",
            Status::Failed => "Failed",
            Status::Cancelled => "Cancelled",
        }
    }
}

/// Where a task is in its life, with that phase's data.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    /// Waiting to be placed: by the tick, or by Slurm for a Slurm job.
    Waiting {
        /// The queue it waits in.
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
        /// How it ended, with the reason for a failure or cancellation.
        how: End,
        /// When its ending record was journaled, Unix ms.
        at_ms: u64,
        /// As in `Active`, for a cancelled task whose attempt is still being stopped.
        survivors: Option<String>,
    },
}

/// The queue a waiting task is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Queue {
    /// The main queue, where new tasks and ordinary retries wait.
    Main,
    /// The priority queue of tasks that ran out of GPU memory, and how the retry is placed
    /// (decoded once, from the Requeued record).
    Recovery(RecoveryMode),
}

/// How a task ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum End {
    /// Its last attempt exited 0.
    Finished,
    /// It failed and will not be retried.
    Failed {
        /// Why, from the Failed record.
        reason: String,
    },
    /// It was cancelled.
    Cancelled {
        /// Why, from the Cancelled record.
        reason: String,
    },
}

impl Phase {
    /// A new task's phase: waiting in the main queue, held if it was submitted so.
    pub fn submitted(held: bool) -> Phase {
        Phase::Waiting { queue: Queue::Main, reason: None, held }
    }

    /// The coarse status; `launched` says whether the open attempt has launched.
    pub fn status(&self, launched: bool) -> Status {
        match self {
            Phase::Waiting { .. } => Status::Pending,
            Phase::Active { .. } if launched => Status::Running,
            Phase::Active { .. } => Status::Placed,
            Phase::Ended { how: End::Finished, .. } => Status::Finished,
            Phase::Ended { how: End::Failed { .. }, .. } => Status::Failed,
            Phase::Ended { how: End::Cancelled { .. }, .. } => Status::Cancelled,
        }
    }

    /// Why the task waits; while an attempt is open, which of its processes survive SIGKILL.
    pub fn pending_reason(&self) -> Option<&str> {
        match self {
            Phase::Waiting { reason, .. } => reason.as_deref(),
            Phase::Active { survivors, .. } | Phase::Ended { survivors, .. } => survivors.as_deref(),
        }
    }

    /// How the recovery retry is placed, while the task waits in the recovery queue.
    pub fn recovery_mode(&self) -> Option<RecoveryMode> {
        match self {
            Phase::Waiting { queue: Queue::Recovery(mode), .. } => Some(*mode),
            _ => None,
        }
    }

    /// Held: it waits until released.
    pub fn held(&self) -> bool {
        matches!(self, Phase::Waiting { held: true, .. })
    }

    /// Who asked for the active attempt to be stopped and the task queued again.
    pub fn requeue_by(&self) -> Option<u32> {
        match self {
            Phase::Active { requeue_by, .. } => *requeue_by,
            _ => None,
        }
    }

    /// When the task ended.
    pub fn ended_ms(&self) -> Option<u64> {
        match self {
            Phase::Ended { at_ms, .. } => Some(*at_ms),
            _ => None,
        }
    }

    /// Why the task ended, for Failed and Cancelled.
    pub fn end_reason(&self) -> Option<&str> {
        match self {
            Phase::Ended { how: End::Failed { reason } | End::Cancelled { reason }, .. } => Some(reason),
            _ => None,
        }
    }

    /// Ends the task unless it has ended; whether it had not. An open attempt stays open (a
    /// cancelled job is stopped afterwards).
    pub fn finish(&mut self, how: End, time_ms: u64) -> bool {
        if matches!(self, Phase::Ended { .. }) {
            return false;
        }
        *self = Phase::Ended { how, at_ms: time_ms, survivors: None };
        true
    }

    /// The task's open attempt ended (`Task::end_attempt`): an active task waits in the main
    /// queue for the verdict (Requeued, or Finished or Failed) that the same tick commits with
    /// the end, keeping the survivors' words as its reason; an ended one forgets its survivors.
    pub fn attempt_closed(&mut self) {
        match self {
            Phase::Active { survivors, .. } => {
                *self = Phase::Waiting { queue: Queue::Main, reason: survivors.take(), held: false };
            }
            Phase::Ended { survivors, .. } => *survivors = None,
            Phase::Waiting { .. } => {}
        }
    }

    /// Queues the task again after its attempt ended (Requeued): in the recovery queue with
    /// `recovery`, else in the main one. Whether it was waiting for that.
    pub fn requeue(&mut self, recovery: Option<RecoveryMode>) -> bool {
        let Phase::Waiting { queue, .. } = self else { return false };
        *queue = recovery.map_or(Queue::Main, Queue::Recovery);
        true
    }
}
