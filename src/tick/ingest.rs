//! Spool ingest: what `intake` took from the users' folders becomes Submitted (with an
//! estimate when the submission embeds a model summary) or Rejected records, and requests
//! (cancel, hold, release, update; see `requests`) become the records those verbs write.
//! Each submission passes `admit` (the queue's own rules and defaults) first.
//!
//! Everything here reads only through `intake` (bounded per user, non-blocking, checked on
//! the open descriptor), so no spool entry can stall or abort the tick. After
//! [`intake::Bounds::refusals_per_user`] refusals of one user in a tick, the rest of that
//! user's folder is left unread for later ticks and counted in one more record: a flood costs
//! its owner's folder a bounded number of opens, moves and records per tick, nobody else's.

use std::collections::BTreeMap;

use crate::config::Config;
use crate::id::TaskId;
use crate::intake::{self, Entry, EntryKind, Read, Scan, Settle};
use crate::journal::{Event, Record, State, Task};
use crate::spec::spool_form::parse_spool;
use crate::spec::{Limits, Submission};

use super::TickReport;

/// What one ingest produced.
#[derive(Debug, Default)]
pub struct IngestOutcome {
    pub records: Vec<Record>,
    /// What to do with the spool entries once the records are committed.
    pub settle: Settle,
    /// Active attempts of tasks cancelled by request, to stop after the commit.
    pub to_stop: Vec<(TaskId, u32)>,
}

/// Refusals counted per user, so one user's junk writes a bounded number of records and costs
/// a bounded number of opens and moves: past the bound, the rest of that user's folder waits
/// for later ticks unread (`skipped`).
#[derive(Default)]
struct Refusals {
    written: BTreeMap<u32, usize>,
    skipped: BTreeMap<u32, u64>,
}

/// Turns the spool's entries into records.
pub fn ingest(
    state: &State,
    scan: &mut Scan,
    limits: Limits,
    config: &Config,
    now_ms: u64,
    report: &mut TickReport,
) -> IngestOutcome {
    let mut run =
        Run { out: IngestOutcome::default(), refusals: Refusals::default(), now_ms, deferred_specs: 0 };
    // Tasks ingested in this batch, for requests that follow them and dependency cycles.
    let mut batch: super::admit::Batch = BTreeMap::new();
    let specs = std::mem::take(&mut scan.specs);
    for entry in &specs {
        if run.spent(entry) {
            continue;
        }
        run.spec(state, scan, entry, limits, config, &mut batch, report);
    }
    let odd = std::mem::take(&mut scan.odd);
    for entry in odd.iter().chain(&scan.top_odd) {
        if run.spent(entry) {
            continue;
        }
        let reason = entry.top_reason.clone().unwrap_or_else(|| {
            format!("spool file {} is not named <task-id>.toml; submit with `carma submit`", entry.file_name)
        });
        run.refuse(report, entry, None, reason);
    }
    let submitters: BTreeMap<TaskId, u32> =
        batch.iter().map(|(id, (uid, _, _))| (id.clone(), *uid)).collect();
    run.requests(state, scan, &submitters, limits, config, report);
    run.summaries();
    let deferred = scan.deferred + run.deferred_specs;
    if deferred > 0 {
        run.out.records.push(record(now_ms, Event::IngestDeferred { entries: deferred }));
    }
    if let Some(moved) = scan.top_moved {
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
}

impl Run {
    /// Cancel, hold, release, update and requeue requests, each judged against the State and
    /// the tasks ingested earlier in this batch (`submitters`).
    fn requests(
        &mut self,
        state: &State,
        scan: &mut Scan,
        submitters: &BTreeMap<TaskId, u32>,
        limits: Limits,
        config: &Config,
        report: &mut TickReport,
    ) {
        let requests = std::mem::take(&mut scan.requests);
        for entry in &requests {
            if self.spent(entry) {
                continue;
            }
            let body = match scan.read(entry, intake::REQUEST_BYTES_MAX) {
                Read::Bytes(bytes) => match String::from_utf8(bytes) {
                    Ok(body) => body,
                    Err(_) => {
                        let reason = format!("request {} is not valid UTF-8", entry.file_name);
                        self.refuse(report, entry, None, reason);
                        continue;
                    }
                },
                Read::NotReady | Read::Later | Read::Gone => continue,
                Read::Refused(reason) => {
                    self.refuse(report, entry, None, reason);
                    continue;
                }
            };
            let EntryKind::Request(verb) = entry.kind else { continue };
            let asked =
                super::requests::Filed { verb, id: entry.id.clone(), requester: entry.uid, body: &body };
            match super::requests::request(state, submitters, &asked, limits, config, &mut self.out.to_stop) {
                Ok(Some(event)) => {
                    self.out.records.push(record(self.now_ms, event));
                    self.out.settle.consumed.push(entry.clone());
                }
                Ok(None) => self.out.settle.consumed.push(entry.clone()),
                Err(reason) => self.refuse(report, entry, None, reason),
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn spec(
        &mut self,
        state: &State,
        scan: &mut Scan,
        entry: &Entry,
        limits: Limits,
        config: &Config,
        batch: &mut super::admit::Batch,
        report: &mut TickReport,
    ) {
        let Some(id) = entry.id.clone() else { return };
        if let Some(task) = state.tasks.get(&id) {
            return self.known_task_file(scan, entry, &id, task);
        }
        if state.knows(&id) {
            return self.out.settle.consumed.push(entry.clone());
        }
        let bytes = match scan.read(entry, intake::SPOOL_BYTES_MAX) {
            Read::Bytes(bytes) => bytes,
            Read::NotReady | Read::Gone => return,
            Read::Later => {
                self.deferred_specs += 1;
                return;
            }
            Read::Refused(reason) => return self.refuse(report, entry, Some(id), reason),
        };
        let mut submission = match parse(entry, &bytes, limits) {
            Ok(submission) => submission,
            Err(reason) => return self.refuse(report, entry, Some(id), reason),
        };
        if let Err(reason) = super::admit::admit(&id, entry.uid, &mut submission.spec, state, batch, config) {
            return self.refuse(report, entry, Some(id), reason);
        }
        report.ingested += 1;
        let dependencies = submission.spec.dependencies.iter().map(|d| d.task.clone()).collect();
        let array = submission.spec.array.as_ref().map(|a| a.id.clone());
        batch.insert(id.clone(), (entry.uid, dependencies, array));
        let estimate = estimate_record(&id, &submission);
        let event = Event::Submitted { task: id.clone(), submitter_uid: entry.uid, spec: submission.spec };
        self.out.records.push(record(self.now_ms, event));
        self.out.records.extend(estimate.map(|event| record(self.now_ms, event)));
        self.out.settle.accepted.push((entry.clone(), id, bytes));
    }

    /// A spool file for a task the journal already has: a tick that died between its commit
    /// and settling. It becomes the private copy if it is in the submitter's folder, the
    /// task has not ended and no copy exists (the vault checks that in its commit);
    /// otherwise it is only removed (it is in its owner's own folder).
    fn known_task_file(&mut self, scan: &mut Scan, entry: &Entry, id: &TaskId, task: &Task) {
        if entry.uid != task.submitter_uid {
            return self.out.settle.rejected.push(entry.clone());
        }
        if !task.status().is_terminal()
            && let Read::Bytes(bytes) = scan.read(entry, intake::SPOOL_BYTES_MAX)
        {
            return self.out.settle.recovered.push((entry.clone(), id.clone(), bytes));
        }
        self.out.settle.consumed.push(entry.clone());
    }

    /// Whether `entry`'s owner has had its bound of refusals this tick; if so the entry is
    /// counted and left, unread, for a later tick. Entries at the top of `spool/` are bounded
    /// by the scan instead.
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
    fn refuse(&mut self, report: &mut TickReport, entry: &Entry, task: Option<TaskId>, reason: String) {
        report.rejected += 1;
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

/// The submission in a spool file's bytes, checked like a user's spec file, and sized so
/// its Submitted record fits the journal.
fn parse(entry: &Entry, bytes: &[u8], limits: Limits) -> Result<Submission, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| {
        format!(
            "spool file {} is not valid UTF-8 and may have been tampered with; resubmit the task",
            entry.file_name
        )
    })?;
    let submission = parse_spool(&format!("spool file {}", entry.file_name), text, limits)?;
    crate::journal::check_submitted_fits(&submission.spec, entry.uid)
        .map_err(|why| format!("spool file {}: {why}", entry.file_name))?;
    Ok(submission)
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
