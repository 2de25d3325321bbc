//! Spool ingest: spool files become Submitted (with an estimate when the submission embeds a
//! model summary) or Rejected records, and requests from users who cannot write the journal
//! (cancel, hold, release, update; see `requests`) become the records those verbs write.
//! Each submission passes `admit` (the queue's own rules and defaults) first.
//!
//! Everything here reads only what `spool` hands it (bounded, non-blocking, type-checked), so
//! no spool entry can stall or abort the tick; see `spool`'s module docs.

use std::collections::BTreeMap;

use crate::config::Config;
use crate::id::TaskId;
use crate::journal::{Event, Record, State};
use crate::spec::{Limits, Submission};
use crate::spool::{self, Ingested, Listing, Settle, SpoolEntry};

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

/// Turns the spool's entries into records.
pub fn ingest(
    state: &State,
    listing: &Listing,
    limits: Limits,
    config: &Config,
    now_ms: u64,
    report: &mut TickReport,
) -> IngestOutcome {
    let mut out = IngestOutcome::default();
    // Tasks ingested in this batch, for requests that follow them and dependency cycles.
    let mut batch: BTreeMap<TaskId, (u32, Vec<TaskId>)> = BTreeMap::new();
    for entry in &listing.specs {
        if let Some(task) = entry.id.as_ref().and_then(|id| state.tasks.get(id)) {
            known_task_file(entry, task.submitter_uid, &mut out.settle);
            continue;
        }
        if entry.id.as_ref().is_some_and(|id| state.knows(id)) {
            out.settle.consumed.push(entry.clone());
            continue;
        }
        match spool::read_entry(entry, limits) {
            Ingested::NotReady => {}
            Ingested::Valid { id, submitter_uid, mut submission } => {
                if let Err(reason) =
                    super::admit::admit(&id, submitter_uid, &mut submission.spec, state, &batch, config)
                {
                    reject(&mut out, report, entry, Some(id), submitter_uid, reason, now_ms);
                    continue;
                }
                report.ingested += 1;
                let dependencies = submission.spec.dependencies.iter().map(|d| d.task.clone()).collect();
                batch.insert(id.clone(), (submitter_uid, dependencies));
                let estimate = estimate_record(&id, &submission);
                out.records.push(record(
                    now_ms,
                    Event::Submitted { task: id, submitter_uid, spec: submission.spec },
                ));
                out.records.extend(estimate.map(|event| record(now_ms, event)));
                out.settle.accepted.push(entry.clone());
            }
            Ingested::Invalid { id, submitter_uid, reason } => {
                reject(&mut out, report, entry, id, submitter_uid, reason, now_ms);
            }
        }
    }
    for entry in &listing.odd {
        report.rejected += 1;
        let (submitter_uid, reason) = spool::odd_entry(entry);
        let event =
            Event::Rejected { task: None, spool_file: entry.file_name.clone(), submitter_uid, reason };
        out.records.push(record(now_ms, event));
        out.settle.rejected.push(entry.clone());
    }
    let submitters: BTreeMap<TaskId, u32> = batch.iter().map(|(id, (uid, _))| (id.clone(), *uid)).collect();
    for entry in &listing.requests {
        match super::requests::request(state, &submitters, entry, limits, config, &mut out.to_stop) {
            Ok(Some(event)) => {
                out.records.push(record(now_ms, event));
                out.settle.consumed.push(entry.clone());
            }
            Ok(None) => out.settle.consumed.push(entry.clone()),
            Err(event) => {
                out.records.push(record(now_ms, *event));
                out.settle.rejected.push(entry.clone());
            }
        }
    }
    if listing.deferred > 0 {
        out.records.push(record(now_ms, Event::IngestDeferred { entries: listing.deferred as u64 }));
    }
    out
}

fn record(time_ms: u64, event: Event) -> Record {
    Record { time_ms, event }
}

/// A Rejected record for a spool file, which goes to quarantine once it is committed.
fn reject(
    out: &mut IngestOutcome,
    report: &mut TickReport,
    entry: &SpoolEntry,
    task: Option<TaskId>,
    submitter_uid: u32,
    reason: String,
    now_ms: u64,
) {
    report.rejected += 1;
    let event = Event::Rejected { task, spool_file: entry.file_name.clone(), submitter_uid, reason };
    out.records.push(record(now_ms, event));
    out.settle.rejected.push(entry.clone());
}

/// A spool file for a task the journal already has: a tick that died between its commit and
/// moving the file. It becomes the task's private copy only if its owner submitted the task
/// and no private copy exists; a file planted under someone else's id is quarantined.
fn known_task_file(entry: &SpoolEntry, submitter_uid: u32, settle: &mut Settle) {
    use std::os::unix::fs::MetadataExt;
    let owner = std::fs::symlink_metadata(&entry.path).map(|m| m.uid()).ok();
    if owner == Some(submitter_uid) {
        settle.accepted.push(entry.clone());
    } else {
        settle.rejected.push(entry.clone());
    }
}

/// The Estimated (or EstimateFailed) record for a submission that embeds its model summary:
/// the summary as the submitter read it, so the tick never opens a user's file.
fn estimate_record(id: &TaskId, submission: &Submission) -> Option<Event> {
    let text = submission.summary_text.as_deref()?;
    Some(super::estimate::from_text(id, &submission.spec, text))
}
