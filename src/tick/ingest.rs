//! Spool ingest: spec files become Submitted or Rejected records, and cancel requests from
//! users who cannot write the journal become Cancelled records.

use std::collections::BTreeMap;

use crate::id::TaskId;
use crate::journal::{Event, Record, State};
use crate::spec::Limits;
use crate::spool::{self, Ingested, SpoolEntry};

use super::TickReport;

/// What one ingest produced.
#[derive(Debug, Default)]
pub struct IngestOutcome {
    pub records: Vec<Record>,
    /// Spool files to remove once the records are committed.
    pub consumed: Vec<SpoolEntry>,
    /// Active attempts of tasks cancelled by request, to stop after the commit.
    pub to_stop: Vec<(TaskId, u32)>,
}

/// Turns spool files into records.
pub fn ingest(
    state: &State,
    entries: &[SpoolEntry],
    limits: Limits,
    now_ms: u64,
    report: &mut TickReport,
) -> IngestOutcome {
    let mut out = IngestOutcome::default();
    // Submitters of tasks ingested in this batch, for cancel requests that follow them.
    let mut batch: BTreeMap<TaskId, u32> = BTreeMap::new();
    for entry in entries.iter().filter(|e| !e.cancel) {
        // Already journaled by a tick that died before removing the file.
        if entry.id.as_ref().is_some_and(|id| state.knows(id)) {
            out.consumed.push(entry.clone());
            continue;
        }
        let event = match spool::read_entry(entry, limits) {
            Ingested::NotReady => continue,
            Ingested::Valid { id, submitter_uid, spec } => {
                report.ingested += 1;
                batch.insert(id.clone(), submitter_uid);
                Event::Submitted { task: id, submitter_uid, spec: *spec }
            }
            Ingested::Invalid { id, submitter_uid, reason } => {
                report.rejected += 1;
                Event::Rejected { task: id, spool_file: entry.file_name.clone(), submitter_uid, reason }
            }
        };
        out.records.push(Record { time_ms: now_ms, event });
        out.consumed.push(entry.clone());
    }
    for entry in entries.iter().filter(|e| e.cancel) {
        if let Some(event) = cancel_request(state, &batch, entry, &mut out.to_stop) {
            out.records.push(Record { time_ms: now_ms, event });
        }
        out.consumed.push(entry.clone());
    }
    out
}

/// A cancel request: honoured for root and the task's submitter, refused (as a Rejected
/// record naming no task) for anyone else or for an unknown task.
fn cancel_request(
    state: &State,
    batch: &BTreeMap<TaskId, u32>,
    entry: &SpoolEntry,
    to_stop: &mut Vec<(TaskId, u32)>,
) -> Option<Event> {
    let refuse = |uid: u32, reason: String| {
        Some(Event::Rejected { task: None, spool_file: entry.file_name.clone(), submitter_uid: uid, reason })
    };
    let requester = match spool::read_cancel(entry) {
        Ok(Some(uid)) => uid,
        Ok(None) => return None,
        Err(reason) => return refuse(0, reason),
    };
    let Some(id) = entry.id.clone() else {
        return refuse(requester, format!("cancel request {} names no task id", entry.file_name));
    };
    let task = state.tasks.get(&id);
    let Some(submitter) = task.map(|t| t.submitter_uid).or_else(|| batch.get(&id).copied()) else {
        return refuse(requester, format!("cancel request for unknown task {id}"));
    };
    if requester != 0 && requester != submitter {
        return refuse(
            requester,
            format!("cancel request for task {id} by uid {requester} refused: it belongs to uid {submitter}"),
        );
    }
    if task.is_some_and(|t| t.status.is_terminal()) {
        return None;
    }
    if let Some(attempt) = task.and_then(|t| t.active_attempt()) {
        to_stop.push((id.clone(), attempt.number));
    }
    Some(Event::Cancelled {
        task: id,
        by_uid: requester,
        reason: format!("cancelled by uid {requester} (request)"),
    })
}
