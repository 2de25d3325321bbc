//! Spool ingest: spool files become Submitted or Rejected records.

use crate::journal::{Event, Record, State};
use crate::spec::Limits;
use crate::spool::{self, Ingested, SpoolEntry};

use super::TickReport;

/// Turns spool files into Submitted/Rejected records. Returns the records and the files to
/// remove once they are committed.
pub fn ingest(
    state: &State,
    entries: &[SpoolEntry],
    limits: Limits,
    now_ms: u64,
    report: &mut TickReport,
) -> (Vec<Record>, Vec<SpoolEntry>) {
    let mut records = Vec::new();
    let mut consumed = Vec::new();
    for entry in entries {
        // Already journaled by a tick that died before removing the file.
        if entry.id.as_ref().is_some_and(|id| state.knows(id)) {
            consumed.push(entry.clone());
            continue;
        }
        let event = match spool::read_entry(entry, limits) {
            Ingested::NotReady => continue,
            Ingested::Valid { id, submitter_uid, spec } => {
                report.ingested += 1;
                Event::Submitted { task: id, submitter_uid, spec: *spec }
            }
            Ingested::Invalid { id, submitter_uid, reason } => {
                report.rejected += 1;
                Event::Rejected { task: id, spool_file: entry.file_name.clone(), submitter_uid, reason }
            }
        };
        records.push(Record { time_ms: now_ms, event });
        consumed.push(entry.clone());
    }
    (records, consumed)
}
