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
            terminal: task.status().is_terminal(),
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
        if !before.terminal && task.status().is_terminal() {
            if !spec.notify.is_empty() || end_mail_wanted(spec, task.status()) {
                self.notify_due.insert(id.clone());
            }
            if array_summary_wanted(spec) {
                let failed = task.status() == Status::Failed;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::TaskId;
    use crate::journal::Record;
    use crate::spec::ArrayMember;
    use crate::spec::mail::MailTypes;

    /// A state with an array of `ends.len()` members mailed with `types`, each ended as
    /// `ends` says (true: Failed, false: Cancelled).
    fn array_ended(types: &str, ends: &[bool]) -> (State, TaskId) {
        let array = TaskId::from_parts(1_700_000_000_000, 99);
        let mut state = State::default();
        let mut seq = 0;
        let mut apply = |state: &mut State, event: Event| {
            seq += 1;
            state.apply(seq, &Record { time_ms: 5, event });
        };
        for (index, failed) in ends.iter().enumerate() {
            let mut spec = crate::spec::parse_toml("t", "name = \"m\"\ncommand = [\"true\"]\n")
                .and_then(|f| f.validate("t", std::path::Path::new("/w"), Default::default()))
                .unwrap();
            spec.mail_user = Some("a@example.org".into());
            spec.mail_types = MailTypes::parse(types).unwrap();
            let count = ends.len() as u32;
            spec.array = Some(ArrayMember {
                id: array.clone(),
                index: index as u32,
                count,
                running_max: None,
                params: vec![],
            });
            let id = TaskId::from_parts(1_700_000_000_000, index as u32 + 1);
            apply(&mut state, Event::Submitted { task: id.clone(), submitter_uid: 1000, spec });
            let end = if *failed {
                Event::Failed { task: id, attempt: 1, outcome: "exit 1".into(), reason: "r".into() }
            } else {
                Event::Cancelled { task: id, by_uid: 1000, reason: "r".into() }
            };
            apply(&mut state, end);
        }
        (state, array)
    }

    /// Goal: an array's summary is due once, when its last member ends, and FAIL alone asks
    /// for one only when a member failed; members mail nothing of their own, and the summary's
    /// Notified record settles it.
    #[test]
    fn an_array_summary_is_due_when_its_last_member_ends() {
        let (mut state, array) = array_ended("END", &[false, true]);
        assert!(state.array_mail_due.contains(&array) && state.array_mail.is_empty());
        assert!(state.notify_due.is_empty() && state.mail_due.is_empty(), "no member mails of its own");
        state.apply(
            99,
            &Record {
                time_ms: 6,
                event: Event::Notified {
                    task: array.clone(),
                    channel: "mail".into(),
                    notice: ARRAY.into(),
                    detail: "d".into(),
                },
            },
        );
        assert!(state.array_mail_due.is_empty());
        let (state, array) = array_ended("FAIL", &[false, false]);
        assert!(!state.array_mail_due.contains(&array), "FAIL alone and nothing failed");
        let (state, array) = array_ended("FAIL", &[false, true]);
        assert!(state.array_mail_due.contains(&array));
        let (state, array) = array_ended("END,ARRAY_TASKS", &[false, true]);
        assert!(!state.array_mail_due.contains(&array));
        assert_eq!(state.notify_due.len(), 2, "ARRAY_TASKS: each member's own end mail");
        let (state, array) = array_ended("END", &[false]);
        assert!(state.array_mail_due.contains(&array), "a one-member array");
        let (partial, _) = array_ended("END", &[]);
        assert!(partial.array_mail_due.is_empty());
    }
}
