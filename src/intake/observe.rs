//! Observe: the one pass of a tick that reads what ingest will judge, before anything is
//! decided. Ingest's decision (`tick::ingest::decide`) then reads only what this returns.
//!
//! Entries come out in the order ingest judges them: submissions (id order across every
//! user), odd names in users' folders, odd entries at the top of `spool/`, then requests (id
//! order), so that the submissions of a tick are known before the requests that name them.
//!
//! **What is read.** The State is looked at, read-only, to skip what needs no byte: a
//! submission of a task the journal already knows is opened only when it may become that
//! task's private copy (its submitter's own file, the task not ended), as ingest has always
//! done. Everything else a user left is opened, checked and read through [`Scan::read`].
//!
//! **Parsing happens here.** A submission's bytes are parsed and validated here (UTF-8, the
//! spool form, the journal's record limit), and a request's body is checked to be UTF-8:
//! these are functions of the bytes alone, and this room is where a user's bytes become a
//! validated submission or a refusal. It is also what keeps the flood bound: observe counts
//! the refusals it can judge (a read refused, bytes that are not a submission, an odd name)
//! per user, and once a user has had [`Bounds::refusals_per_user`](super::Bounds) of them the
//! rest of that user's folder is marked [`Seen::NotRead`] without being opened. A flood of
//! junk therefore costs its owner the same opens as when reading and deciding were one pass.
//! Refusals that depend on the State (admission, a request's permission) are ingest's, so
//! a user may have more entries read than ingest then judges; the scan's per-user bounds
//! (names, bytes) still bound those reads. Ingest counts every refusal, a superset of the
//! ones counted here in the same order, so it never needs an entry this left unread.

use std::collections::BTreeMap;

use super::scan::{Entry, EntryKind, Read, Scan};
use super::{BOUNDS, REQUEST_BYTES_MAX, SPOOL_BYTES_MAX};
use crate::journal::State;
use crate::spec::spool_form::parse_spool;
use crate::spec::{Limits, Submission};

/// What observe found of one entry.
#[derive(Debug, Clone)]
pub enum Seen {
    /// Not opened because nothing in it is needed: an odd name, an entry at the top of
    /// `spool/`, a file of a task the journal already knows that cannot be its private copy.
    Unopened,
    /// A submission, parsed and checked; its bytes are kept for the private copy.
    Submission {
        /// The submission as the spool file gives it (admission fills the queue's defaults).
        submission: Box<Submission>,
        /// The file's bytes, from which the private copy is written.
        bytes: Vec<u8>,
    },
    /// The file of a task the journal already has, read to become its private copy.
    Copy(Vec<u8>),
    /// A request's body, valid UTF-8 (its meaning is judged by ingest, against the State).
    Request(String),
    /// A submit is between its `link()` and the unlink of its temp name: look next tick.
    NotReady,
    /// Over its owner's byte budget for this tick: left for the next one.
    Later,
    /// Removed by its owner since the listing.
    Gone,
    /// Refused on what it is or holds: the reason, a sentence for its owner.
    Refused(String),
    /// Left unopened for later ticks: its owner had its bound of refusals this tick.
    NotRead,
}

/// Everything one tick's ingest needs from the spool, owned: no descriptor, no I/O left.
#[derive(Debug, Default, Clone)]
pub struct Observed {
    /// Every entry of the scan, in the order ingest judges them (see the module docs).
    pub entries: Vec<(Entry, Seen)>,
    /// Names the scan left for later ticks (at least this many).
    pub deferred: u64,
    /// Entries moved to quarantine with the whole top level (a flood), if that happened.
    pub top_moved: Option<u64>,
}

/// Reads what ingest will judge, within the scan's bounds and the per-user bound of refusals
/// (see the module docs). `limits` are the ones a submission is validated against.
pub fn observe(scan: &mut Scan, state: &State, limits: Limits) -> Observed {
    let mut refusals: BTreeMap<u32, usize> = BTreeMap::new();
    let mut entries = Vec::new();
    let specs = std::mem::take(&mut scan.specs);
    let odd = std::mem::take(&mut scan.odd);
    let top_odd = std::mem::take(&mut scan.top_odd);
    let requests = std::mem::take(&mut scan.requests);
    let in_order = specs.into_iter().chain(odd).chain(top_odd).chain(requests);
    for entry in in_order {
        let top = entry.top_reason.is_some();
        let spent = !top && refusals.get(&entry.uid).is_some_and(|n| *n >= BOUNDS.refusals_per_user);
        let seen = if spent { Seen::NotRead } else { seen(scan, state, &entry, limits) };
        if refused_on_its_own(&entry, &seen, state) {
            *refusals.entry(entry.uid).or_default() += 1;
        }
        entries.push((entry, seen));
    }
    Observed { entries, deferred: scan.deferred, top_moved: scan.top_moved }
}

/// Reads one entry, if it needs reading.
fn seen(scan: &mut Scan, state: &State, entry: &Entry, limits: Limits) -> Seen {
    let Some(id) = entry.id.as_ref().filter(|_| entry.kind != EntryKind::Odd) else {
        return Seen::Unopened;
    };
    match entry.kind {
        EntryKind::Spec => {
            if let Some(task) = state.tasks.get(id) {
                if entry.uid != task.submitter_uid || task.status().is_terminal() {
                    return Seen::Unopened;
                }
                return match scan.read(entry, SPOOL_BYTES_MAX) {
                    Read::Bytes(bytes) => Seen::Copy(bytes),
                    other => waiting(other),
                };
            }
            if state.knows(id) {
                return Seen::Unopened;
            }
            match scan.read(entry, SPOOL_BYTES_MAX) {
                Read::Bytes(bytes) => match parse(entry, &bytes, limits) {
                    Ok(submission) => Seen::Submission { submission: Box::new(submission), bytes },
                    Err(reason) => Seen::Refused(reason),
                },
                other => waiting(other),
            }
        }
        EntryKind::Request(_) => match scan.read(entry, REQUEST_BYTES_MAX) {
            Read::Bytes(bytes) => match String::from_utf8(bytes) {
                Ok(body) => Seen::Request(body),
                Err(_) => Seen::Refused(format!("request {} is not valid UTF-8", entry.file_name)),
            },
            other => waiting(other),
        },
        EntryKind::Odd => Seen::Unopened,
    }
}

/// A read that gave no bytes.
fn waiting(read: Read) -> Seen {
    match read {
        Read::Bytes(_) | Read::NotReady => Seen::NotReady,
        Read::Later => Seen::Later,
        Read::Gone => Seen::Gone,
        Read::Refused(reason) => Seen::Refused(reason),
    }
}

/// Whether ingest will refuse this entry whatever the State says: a name that is no
/// submission or request, an entry at the top of `spool/`, a read refused, bytes that are not
/// a submission or a request. A known task's file is never refused (it is only removed).
fn refused_on_its_own(entry: &Entry, seen: &Seen, state: &State) -> bool {
    if entry.kind == EntryKind::Odd || entry.top_reason.is_some() {
        return true;
    }
    let known = entry.kind == EntryKind::Spec && entry.id.as_ref().is_some_and(|id| state.knows(id));
    matches!(seen, Seen::Refused(_)) && !known
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

#[cfg(test)]
mod tests;
