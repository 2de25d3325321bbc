//! Which notices the fold queues (`--notify`, `--mail-user` with sbatch's `--mail-type`), and
//! how a Notified record settles one. Kept apart from the fold's task arms: it only reads
//! what an event did to a task and keeps the due sets (`State::notify_due`,
//! `State::mail_due`, `State::array_mail_due`) that the tick works through.
//!
//! Each notice is due at most once per event: BEGIN at the first launch, REQUEUE at each
//! Requeued (an out-of-memory relaunch, a user's requeue, the requeue exit code), END/FAIL at
//! the end. The time-limit kinds are not events: the tick sees the run time and sends them,
//! and their Notified record marks the attempt ([`Attempt::limit_mails`]) so each is sent
//! once per attempt. An array member mails nothing of its own unless its types say
//! ARRAY_TASKS: the array gets one summary mail when its last member ends.
//!
//! [`Attempt::limit_mails`]: super::state::Attempt::limit_mails

use super::event::Event;
use super::state::{ArrayMail, State, Status, Task};
use crate::spec::TaskSpec;
use crate::spec::mail::{MailKind, TIME_LIMIT_KINDS};

/// The journaled kind of the notices sent when a task ends (its `--notify` command, its END
/// or FAIL mail).
pub const END: &str = "END";
/// The journaled kind of an array's summary mail; its record's task is the array's id.
pub const ARRAY: &str = "ARRAY";

/// Whether `spec` mails its own notices: it names an address and is no array member, or asks
/// for a mail per member (ARRAY_TASKS).
pub fn mails_per_task(spec: &TaskSpec) -> bool {
    spec.mail_user.is_some() && (spec.array.is_none() || spec.mail_types.wants(MailKind::ArrayTasks))
}

/// Whether a task that ended as `status` gets an end mail of its own.
pub fn end_mail_wanted(spec: &TaskSpec, status: Status) -> bool {
    let types = spec.mail_types;
    mails_per_task(spec)
        && (types.wants(MailKind::End) || (status == Status::Failed && types.wants(MailKind::Fail)))
}

/// Whether `spec` is a member of an array that wants one summary mail at its end.
fn array_summary_wanted(spec: &TaskSpec) -> bool {
    let types = spec.mail_types;
    spec.mail_user.is_some()
        && spec.array.is_some()
        && !types.wants(MailKind::ArrayTasks)
        && (types.wants(MailKind::End) || types.wants(MailKind::Fail))
}

/// What a task looked like before an event was folded, to see what the event did.
pub(super) struct Before {
    terminal: bool,
    launched: bool,
}

impl Before {
    pub(super) fn of(task: &Task) -> Before {
        Before {
            terminal: task.status.is_terminal(),
            launched: task.attempts.iter().any(|a| a.launched_ms.is_some()),
        }
    }
}

impl State {
    /// Queues the notices `event` made due for its task (folded; `applied`: it changed the
    /// task).
    pub(super) fn queue_notices(&mut self, before: Before, event: &Event, applied: bool) {
        let Some(task) = event.task().and_then(|id| self.tasks.get(id)) else { return };
        let spec = &task.spec;
        let id = task.id.clone();
        if !before.terminal && task.status.is_terminal() {
            if !spec.notify.is_empty() || end_mail_wanted(spec, task.status) {
                self.notify_due.insert(id.clone());
            }
            if array_summary_wanted(spec) {
                let failed = task.status == Status::Failed;
                let (wants_end, array) = (spec.mail_types.wants(MailKind::End), spec.array.clone());
                if let Some(array) = array {
                    let tally: &mut ArrayMail = self.array_mail.entry(array.id.clone()).or_default();
                    tally.ended = tally.ended.saturating_add(1);
                    tally.failed = tally.failed.saturating_add(u32::from(failed));
                    if tally.ended >= array.count {
                        let tally = self.array_mail.remove(&array.id).unwrap_or_default();
                        // FAIL alone: a summary only when a member failed.
                        if wants_end || tally.failed > 0 {
                            self.array_mail_due.insert(array.id);
                        }
                    }
                }
            }
            return;
        }
        if !applied || !mails_per_task(spec) {
            return;
        }
        let kind = match event {
            Event::Launched { .. } if !before.launched => MailKind::Begin,
            Event::Requeued { .. } => MailKind::Requeue,
            _ => return,
        };
        if spec.mail_types.wants(kind) {
            self.mail_due.insert((id, kind.name().to_string()));
        }
    }

    /// Settles the notice a Notified or NotifyFailed record of `kind` answers.
    pub(super) fn settle_notice(&mut self, task: &crate::id::TaskId, kind: &str) {
        match kind {
            END => {
                self.notify_due.remove(task);
            }
            ARRAY => {
                self.array_mail_due.remove(task);
            }
            _ => {
                self.mail_due.remove(&(task.clone(), kind.to_string()));
                let bit = TIME_LIMIT_KINDS.iter().position(|(k, _)| k.name() == kind);
                let attempt = self.tasks.get_mut(task).and_then(|t| t.attempts.last_mut());
                if let (Some(bit), Some(attempt)) = (bit, attempt) {
                    attempt.limit_mails |= 1 << bit;
                }
            }
        }
    }
}
