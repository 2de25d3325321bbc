//! Spool ingest's decision: what `intake::observe` read from the users' folders becomes
//! Submitted (with an estimate when the submission embeds a model summary) or Rejected
//! records, and requests (cancel, hold, release, update, requeue; see `requests`) become the
//! records those verbs write. Each submission passes `admit` (the queue's own rules and
//! defaults) first.
//!
//! Ingest has reconcile's shape: the tick observes (`intake::observe`, the only code that
//! opens a user's file), [`decide`]s here with no I/O (the same observation, State, limits,
//! configuration and time give the same outcome), commits the records, then applies the
//! outcome (`intake::settle`, and the stops of cancelled attempts).
//!
//! After [`intake::Bounds::refusals_per_user`] refusals of one user in a tick, the rest of
//! that user's entries are left, neither recorded nor settled, for later ticks, and counted in
//! one more record: a flood costs its owner's folder a bounded number of opens, moves and
//! records per tick, nobody else's. Observe stops reading at the same bound, counting the
//! refusals it can judge from the bytes; this counts every refusal, so it never needs what
//! observe left unread.

use std::collections::{BTreeMap, BTreeSet};

use crate::config::Config;
use crate::id::TaskId;
use crate::intake::{self, Entry, EntryKind, Observed, Seen, Settle};
use crate::journal::{Event, Record, State, Task};
use crate::spec::{Limits, Submission};

/// What one ingest decided: the records to commit, then what to do once they are.
#[derive(Debug, Default)]
pub(super) struct IngestOutcome {
    /// The records to append, in the order the entries were judged.
    pub records: Vec<Record>,
    /// What to do with the spool entries once the records are committed.
    pub settle: Settle,
    /// Active attempts of tasks cancelled by request, to stop after the commit.
    pub to_stop: Vec<(TaskId, u32)>,
    /// Submissions accepted, for the tick's report.
    pub ingested: u32,
    /// Entries refused (each with its Rejected record), for the tick's report.
    pub rejected: u32,
}

/// Refusals counted per user, so one user's junk writes a bounded number of records: past the
/// bound, the rest of that user's entries are left for later ticks (`skipped`).
#[derive(Default)]
struct Refusals {
    written: BTreeMap<u32, usize>,
    skipped: BTreeMap<u32, u64>,
}

/// The pure decision on what the spool held: no I/O, and the same input gives the same
/// outcome. Entries are judged in `observed`'s order; an entry it leaves (its owner spent,
/// or not ready, or over the byte budget) is neither recorded nor settled.
pub(super) fn decide(
    state: &State,
    observed: &Observed,
    limits: Limits,
    config: &Config,
    now_ms: u64,
) -> IngestOutcome {
    let mut run = Run {
        out: IngestOutcome::default(),
        refusals: Refusals::default(),
        now_ms,
        deferred_specs: 0,
        batch: BTreeMap::new(),
        submitters: BTreeMap::new(),
        cancelled: BTreeSet::new(),
    };
    for (entry, seen) in &observed.entries {
        if run.spent(entry) {
            continue;
        }
        if let Some(reason) = &entry.top_reason {
            run.refuse(entry, None, reason.clone());
            continue;
        }
        match entry.kind {
            EntryKind::Spec => run.spec(state, entry, seen, config),
            EntryKind::Request(verb) => run.request(state, entry, verb, seen, limits, config),
            EntryKind::Odd => {
                let reason = format!(
                    "spool file {} is not named <task-id>.toml; submit with `carma submit`",
                    entry.file_name
                );
                run.refuse(entry, None, reason);
            }
        }
    }
    run.summaries();
    let deferred = observed.deferred + run.deferred_specs;
    if deferred > 0 {
        run.out.records.push(record(now_ms, Event::IngestDeferred { entries: deferred }));
    }
    if let Some(moved) = observed.top_moved {
        let reason = format!(
            "{moved} entries at the top of the spool (not users' folders) were moved to quarantine at once; only carma submit writes there"
        );
        let event = Event::Rejected { task: None, spool_file: "spool/".into(), submitter_uid: 0, reason };
        run.out.records.push(record(now_ms, event));
    }
    run.out
}

struct Run {
    out: IngestOutcome,
    refusals: Refusals,
    now_ms: u64,
    deferred_specs: u64,
    /// Tasks ingested in this batch, for dependency cycles and arrays.
    batch: super::admit::Batch,
    /// Their submitters, for requests that follow them.
    submitters: BTreeMap<TaskId, u32>,
    /// Tasks a request of this batch cancelled: requests for them after it no longer apply
    /// (the State they are judged against still shows the task waiting).
    cancelled: BTreeSet<TaskId>,
}

impl Run {
    /// A cancel, hold, release, update or requeue request, judged against the State and the
    /// tasks ingested earlier in this batch (every submission comes before every request).
    fn request(
        &mut self,
        state: &State,
        entry: &Entry,
        verb: intake::Verb,
        seen: &Seen,
        limits: Limits,
        config: &Config,
    ) {
        let body = match seen {
            Seen::Request(body) => body,
            Seen::Refused(reason) => return self.refuse(entry, None, reason.clone()),
            _ => return,
        };
        if entry.id.as_ref().is_some_and(|id| self.cancelled.contains(id)) {
            return self.out.settle.consumed.push(entry.clone());
        }
        let asked = super::requests::Filed { verb, id: entry.id.clone(), requester: entry.uid, body };
        let submitters = &self.submitters;
        match super::requests::request(state, submitters, &asked, limits, config, &mut self.out.to_stop) {
            Ok(Some(event)) => {
                if let Event::Cancelled { task, .. } = &event {
                    self.cancelled.insert(task.clone());
                }
                self.out.records.push(record(self.now_ms, event));
                self.out.settle.consumed.push(entry.clone());
            }
            Ok(None) => self.out.settle.consumed.push(entry.clone()),
            Err(reason) => self.refuse(entry, None, reason),
        }
    }

    fn spec(&mut self, state: &State, entry: &Entry, seen: &Seen, config: &Config) {
        let Some(id) = entry.id.clone() else { return };
        if let Some(task) = state.tasks.get(&id) {
            return self.known_task_file(entry, seen, &id, task);
        }
        if state.knows(&id) {
            return self.out.settle.consumed.push(entry.clone());
        }
        let (submission, bytes) = match seen {
            Seen::Submission { submission, bytes } => (submission, bytes),
            Seen::Later => {
                self.deferred_specs += 1;
                return;
            }
            Seen::Refused(reason) => return self.refuse(entry, Some(id), reason.clone()),
            _ => return,
        };
        let mut submission = Submission::clone(submission);
        let admitted = super::admit::admit(&id, entry.uid, &mut submission.spec, state, &self.batch, config);
        if let Err(reason) = admitted {
            return self.refuse(entry, Some(id), reason);
        }
        self.out.ingested += 1;
        let dependencies = submission.spec.dependencies.iter().map(|d| d.task.clone()).collect();
        let array = submission.spec.array.as_ref().map(|a| a.id.clone());
        self.batch.insert(id.clone(), (entry.uid, dependencies, array));
        self.submitters.insert(id.clone(), entry.uid);
        let estimate = estimate_record(&id, &submission);
        let event = Event::Submitted { task: id.clone(), submitter_uid: entry.uid, spec: submission.spec };
        self.out.records.push(record(self.now_ms, event));
        self.out.records.extend(estimate.map(|event| record(self.now_ms, event)));
        self.out.settle.accepted.push((entry.clone(), id, bytes.clone()));
    }

    /// A spool file for a task the journal already has: a tick that died between its commit
    /// and settling. It becomes the private copy if it is in the submitter's folder, the
    /// task has not ended and no copy exists (the vault checks that in its commit);
    /// otherwise it is only removed (it is in its owner's own folder).
    fn known_task_file(&mut self, entry: &Entry, seen: &Seen, id: &TaskId, task: &Task) {
        if entry.uid != task.submitter_uid {
            return self.out.settle.rejected.push(entry.clone());
        }
        if !task.status().is_terminal()
            && let Seen::Copy(bytes) = seen
        {
            return self.out.settle.recovered.push((entry.clone(), id.clone(), bytes.clone()));
        }
        self.out.settle.consumed.push(entry.clone());
    }

    /// Whether `entry`'s owner has had its bound of refusals this tick; if so the entry is
    /// counted and left for a later tick. Entries at the top of `spool/` are bounded by the
    /// scan instead.
    fn spent(&mut self, entry: &Entry) -> bool {
        if entry.top_reason.is_some() {
            return false;
        }
        let spent =
            self.refusals.written.get(&entry.uid).is_some_and(|n| *n >= intake::BOUNDS.refusals_per_user);
        if spent {
            *self.refusals.skipped.entry(entry.uid).or_default() += 1;
        }
        spent
    }

    /// A Rejected record, and the entry to quarantine.
    fn refuse(&mut self, entry: &Entry, task: Option<TaskId>, reason: String) {
        self.out.rejected += 1;
        self.out.settle.rejected.push(entry.clone());
        let written = self.refusals.written.entry(entry.uid).or_default();
        *written += 1;
        let event =
            Event::Rejected { task, spool_file: entry.file_name.clone(), submitter_uid: entry.uid, reason };
        self.out.records.push(record(self.now_ms, event));
    }

    /// One record per user whose folder was left partly unread after the bound of refusals.
    fn summaries(&mut self) {
        for (uid, count) in std::mem::take(&mut self.refusals.skipped) {
            let reason = format!(
                "{count} more spool entries of uid {uid} were left for later ticks: after {} refusals in one tick, the rest of a user's folder waits",
                intake::BOUNDS.refusals_per_user
            );
            let event =
                Event::Rejected { task: None, spool_file: "(more)".into(), submitter_uid: uid, reason };
            self.out.records.push(record(self.now_ms, event));
        }
    }
}

fn record(time_ms: u64, event: Event) -> Record {
    Record { time_ms, event }
}

/// The Estimated (or EstimateFailed) record for a submission that embeds its model summary:
/// the summary as the submitter read it, so the tick never opens a user's file.
fn estimate_record(id: &TaskId, submission: &Submission) -> Option<Event> {
    let text = submission.summary_text.as_deref()?;
    Some(super::estimate::from_text(id, &submission.spec, text))
}

#[cfg(test)]
mod tests;
