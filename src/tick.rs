//! One tick: the single entry point that `carma tick` (and later `carma simulate`) runs.
//!
//! Steps, in order, each inside one exclusive lock held for milliseconds:
//! ingest the spool, then commit the tick's events in one transaction. Spool files are removed only after the commit, so a
//! crash anywhere leaves either the file (re-ingested next tick) or the event plus the file
//! (recognised by id and removed), never neither.

use std::time::{Duration, Instant};

use crate::clock::Clock;
use crate::error::Result;
use crate::home::Home;
use crate::journal::{Event, Journal, Record, State, session};
use crate::spec::Limits;
use crate::spool::{self, Ingested, SpoolEntry};

/// What one tick did, for the CLI and TickCompleted.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TickReport {
    pub ingested: u32,
    pub rejected: u32,
    pub placed: u32,
    pub duration_us: u64,
}

/// Everything a tick needs from outside.
pub struct TickContext<'a> {
    pub home: &'a Home,
    pub clock: &'a dyn Clock,
    pub lock_wait: Duration,
    pub limits: Limits,
}

/// Runs one tick.
pub fn run(ctx: &TickContext) -> Result<TickReport> {
    let started = Instant::now();
    session::write(ctx.home, ctx.lock_wait, |journal, state| {
        let now = ctx.clock.now_ms();
        let entries = spool::list(ctx.home)?;
        let (mut records, consumed, mut report) = ingest(state, &entries, ctx.limits, now);
        report.duration_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        records.push(Record {
            time_ms: ctx.clock.now_ms(),
            event: Event::TickCompleted {
                ingested: report.ingested,
                rejected: report.rejected,
                placed: report.placed,
                duration_us: report.duration_us,
            },
        });
        commit(journal, state, records)?;
        spool::remove(ctx.home, &consumed)?;
        Ok(report)
    })
}

fn commit(journal: &mut Journal, state: &mut State, records: Vec<Record>) -> Result<()> {
    journal.append(&records, state)
}

/// Turns spool files into Submitted/Rejected records. Returns the records, the files to
/// remove after they are committed, and the counts.
pub fn ingest(
    state: &State,
    entries: &[SpoolEntry],
    limits: Limits,
    now_ms: u64,
) -> (Vec<Record>, Vec<SpoolEntry>, TickReport) {
    let mut records = Vec::new();
    let mut consumed = Vec::new();
    let mut report = TickReport::default();
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
                Event::Submitted { task: id, submitter_uid, spec }
            }
            Ingested::Invalid { id, submitter_uid, reason } => {
                report.rejected += 1;
                Event::Rejected { task: id, spool_file: entry.file_name.clone(), submitter_uid, reason }
            }
        };
        records.push(Record { time_ms: now_ms, event });
        consumed.push(entry.clone());
    }
    (records, consumed, report)
}
