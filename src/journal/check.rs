//! `carma journal check`: verify a journal end to end without changing it, and say what is
//! wrong with which record.
//!
//! Four passes, none of which stops at the first problem:
//! 1. every record redb returns is decoded (frame, checksum, seq, payload) and seqs must run
//!    without a gap from 1 to `meta.last_seq`; the readable prefix is folded, and the snapshot
//!    must equal the fold at its seq;
//! 2. redb's own integrity check (the checksums of its pages, which also cover carma 0.1's
//!    records that have none of their own) runs on a temporary copy, since it may repair;
//! 3. the raw scan (see `inspect`) counts the frames in the file's bytes, which tells how many
//!    of the records named in a problem `carma journal salvage` can still recover;
//! 4. a file redb cannot open at all gets the raw scan only.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use super::frame::{self, DecodeError, LEGACY_FORMAT_VERSION};
use super::inspect::{self, Found, Opened};
use super::state::State;
use super::store::{Journal, SnapshotBytes};
use crate::error::Result;

/// Schema tag of `carma journal check --json` (schema/journal-check.schema.json).
pub const CHECK_SCHEMA: &str = "carma.journal-check/1";

/// How the detail of a `newer-format` problem starts.
pub const NEWER_PREFIX: &str = "written by a newer carma: ";

/// The problem a damaged snapshot is, in the check's report and in a writer's refusal. Readers
/// fold from seq 1 instead; writers refuse the file (see `verdict`).
pub const SNAPSHOT_DAMAGED: &str = "the snapshot's checksum does not match";

/// What `carma journal check` found.
#[derive(Debug, Clone, Serialize)]
pub struct CheckReport {
    /// Always [`CHECK_SCHEMA`].
    pub schema: &'static str,
    /// The journal file checked, as given.
    pub journal: String,
    /// The file's size, bytes.
    pub bytes: u64,
    /// True when no problem was found: every record reads and the fold completes.
    pub sound: bool,
    /// `read-only`, `repaired-copy` (the last writer crashed; a repaired temporary copy was
    /// read) or `unopenable`.
    pub opened: &'static str,
    /// What redb returned.
    pub records: RecordCounts,
    /// The stored snapshot of the State, against the fold.
    pub snapshot: SnapshotCheck,
    /// redb's page-checksum check on a copy: `passed`, `failed` or `not-run`.
    pub pages: &'static str,
    /// The version-2 frames found in the file's bytes without redb.
    pub raw_scan: RawScan,
    /// Every problem, whole-file ones first, then by seq.
    pub problems: Vec<Problem>,
}

/// The records redb returned, counted.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RecordCounts {
    /// Records that decode and pass their checks.
    pub readable: u64,
    /// Of those, records in carma 0.1's format (no checksum of their own).
    pub legacy: u64,
    /// The lowest readable seq, if any.
    pub first_seq: Option<u64>,
    /// The highest seq seen, if any.
    pub last_seq: Option<u64>,
    /// `meta.last_seq`, the highest seq committed, when readable.
    pub committed_last_seq: Option<u64>,
    /// Tasks in the fold, when every record was read.
    pub tasks: Option<u64>,
}

/// The stored State snapshot, compared with the fold at its seq.
#[derive(Debug, Clone, Serialize)]
pub struct SnapshotCheck {
    /// `absent`, `other-version`, `matches`, `differs`, `damaged`, `unreadable`, or
    /// `unchecked` (a record before it is unreadable).
    pub status: &'static str,
    /// The seq the snapshot was taken at, when it decodes.
    pub seq: Option<u64>,
}

/// What the raw scan of the file's bytes found (see `inspect`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct RawScan {
    /// Sound version-2 frames in the file's bytes, old copies included.
    pub frames: u64,
    /// Distinct seqs among them.
    pub seqs: u64,
    /// Places with a frame's magic but no sound frame.
    pub damaged_frames: u64,
    /// Distinct seqs found beyond `meta.last_seq`: records of a transaction that never
    /// committed (a crash in the middle of a commit). Not damage; salvage ignores them.
    pub beyond_committed: u64,
}

/// One problem: a record or a range of records, or the whole file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Problem {
    /// `damaged`, `missing`, `unreadable`, `newer-format`, `meta`, `snapshot`, `pages`,
    /// `header` or `file`.
    pub kind: &'static str,
    /// The first seq concerned; `None` for a whole-file problem.
    pub first_seq: Option<u64>,
    /// The last seq concerned (`first_seq` for one record); `None` for a whole-file problem.
    pub last_seq: Option<u64>,
    /// The task the record concerns, when its payload still says.
    pub task: Option<String>,
    /// What is wrong, in words.
    pub detail: String,
    /// How many of the seqs in the range the raw scan found intact (salvage recovers those).
    pub in_raw_scan: u64,
}

impl Problem {
    fn file(kind: &'static str, detail: String) -> Problem {
        Problem { kind, first_seq: None, last_seq: None, task: None, detail, in_raw_scan: 0 }
    }

    fn range(kind: &'static str, first: u64, last: u64, detail: String) -> Problem {
        Problem { kind, first_seq: Some(first), last_seq: Some(last), task: None, detail, in_raw_scan: 0 }
    }

    /// A damaged record the load path found, in the check's terms.
    pub(crate) fn at(seq: u64, task: Option<String>, detail: String) -> Problem {
        Problem { task, ..Problem::range("damaged", seq, seq, detail) }
    }
}

/// Checks the journal at `path`. Errors only when the file cannot be read at all.
pub fn check(path: &Path) -> Result<CheckReport> {
    let mut report = examine(path)?;
    scan(path, &mut report)?;
    Ok(report)
}

/// Passes 1, 2 and 4: everything that decides whether the journal is sound (see
/// `journal::verdict`). The raw scan only says how much salvage could recover, so a writer
/// that needs the verdict alone skips it. `raw_scan` and `in_raw_scan` are left at zero.
pub(crate) fn examine(path: &Path) -> Result<CheckReport> {
    let bytes = inspect::readable(path)?;
    let inspected = inspect::open(path)?;
    let mut report = CheckReport {
        schema: CHECK_SCHEMA,
        journal: path.display().to_string(),
        bytes,
        sound: false,
        opened: inspected.opened.name(),
        records: RecordCounts::default(),
        snapshot: SnapshotCheck { status: "unchecked", seq: None },
        pages: "not-run",
        raw_scan: RawScan::default(),
        problems: Vec::new(),
    };
    if let Some(damage) = &inspected.header_damage {
        report.problems.push(Problem::file("header", format!("{damage}; the other commit slot was read")));
    }
    match (&inspected.journal, &inspected.opened) {
        (Some(journal), _) => check_records(journal, &mut report),
        (None, Opened::Unopenable(detail)) => {
            report.problems.push(Problem::file("file", format!("redb cannot open the file: {detail}")))
        }
        (None, _) => unreachable!("an inspected journal is open unless it is unopenable"),
    }
    drop(inspected);
    if report.opened != "unopenable" {
        check_pages(path, &mut report)?;
    }
    report.problems.sort_by_key(|p| (p.first_seq.is_some(), p.first_seq));
    report.sound = sound(&report.problems);
    Ok(report)
}

/// Pass 1: every record through redb, the fold and the snapshot.
fn check_records(journal: &Journal, report: &mut CheckReport) {
    let committed = match journal.committed_last_seq() {
        Ok(seq) => seq,
        Err(e) => {
            report.problems.push(Problem::file("meta", format!("meta.last_seq cannot be read: {e}")));
            None
        }
    };
    report.records.committed_last_seq = committed;
    // The walk goes as far as any key; the journal's extent is what was committed or read
    // soundly, so that one damaged key cannot claim billions of missing records.
    let walk_upper = committed.unwrap_or(0).max(journal.last_key().unwrap_or(0));
    let snapshot = match journal.snapshot_bytes() {
        Ok(s) => s,
        Err(e) => {
            report.snapshot.status = "unreadable";
            report.problems.push(Problem::file("snapshot", format!("the snapshot cannot be read: {e}")));
            SnapshotBytes::Absent
        }
    };
    let snapshot_seq = match &snapshot {
        SnapshotBytes::Sound(state) => Some(state.last_seq),
        _ => None,
    };
    let mut walk = Walk { snapshot_seq, folding: true, ..Walk::default() };
    if snapshot_seq == Some(0) {
        walk.snapshot_fold = Some(State::default());
    }
    let unreadable = journal.walk_events(walk_upper, |seq, bytes| walk.visit(seq, bytes));
    let upper = committed.unwrap_or(0).max(walk.highest_readable.unwrap_or(0));
    for (first, last, detail) in unreadable.into_iter().filter(|(first, _, _)| *first <= upper) {
        let last = last.min(upper);
        walk.note_read(first, last);
        report.problems.push(Problem::range(
            "unreadable",
            first,
            last,
            format!("redb cannot read it: {detail}"),
        ));
    }
    for (first, last) in walk.gaps(upper) {
        let detail = match committed {
            Some(c) if last == c && first > walk.last_seq.unwrap_or(0) => {
                format!("missing; meta.last_seq says {c} were committed")
            }
            _ => "missing".to_string(),
        };
        report.problems.push(Problem::range("missing", first, last, detail));
    }
    let folded_all = walk.folding && walk.last_seq == Some(upper) && report.problems.is_empty();
    report.records.readable = walk.readable;
    report.records.legacy = walk.legacy;
    report.records.first_seq = walk.first_seq;
    report.records.last_seq = walk.last_seq;
    report.records.tasks = folded_all.then_some(walk.state.tasks.len() as u64);
    report.problems.append(&mut walk.problems);
    check_snapshot(&snapshot, &walk, upper, report);
}

fn check_snapshot(snapshot: &SnapshotBytes, walk: &Walk, upper: u64, report: &mut CheckReport) {
    if report.snapshot.status == "unreadable" {
        return;
    }
    report.snapshot.status = match snapshot {
        SnapshotBytes::Absent => "absent",
        SnapshotBytes::OtherVersion(_) => "other-version",
        SnapshotBytes::Damaged => {
            report.problems.push(Problem::file("snapshot", SNAPSHOT_DAMAGED.into()));
            "damaged"
        }
        SnapshotBytes::Sound(state) => {
            report.snapshot.seq = Some(state.last_seq);
            match &walk.snapshot_fold {
                Some(fold) if fold == state.as_ref() => "matches",
                Some(_) => {
                    report.problems.push(Problem::file(
                        "snapshot",
                        format!("the snapshot differs from the fold of records 1 to {}", state.last_seq),
                    ));
                    "differs"
                }
                None if state.last_seq > upper => {
                    report.problems.push(Problem::file(
                        "snapshot",
                        format!("the snapshot is at seq {}, past the last record {upper}", state.last_seq),
                    ));
                    "differs"
                }
                None => "unchecked",
            }
        }
    };
}

/// The state of pass 1 as redb hands over records.
#[derive(Default)]
struct Walk {
    /// Seq ranges seen (read or unreadable), merged, in order.
    seen: Vec<(u64, u64)>,
    readable: u64,
    legacy: u64,
    first_seq: Option<u64>,
    last_seq: Option<u64>,
    /// The highest seq whose record decoded.
    highest_readable: Option<u64>,
    /// Folding goes on while every record so far was read, in order.
    folding: bool,
    state: State,
    snapshot_seq: Option<u64>,
    snapshot_fold: Option<State>,
    problems: Vec<Problem>,
}

impl Walk {
    fn visit(&mut self, seq: u64, bytes: &[u8]) {
        let previous = self.last_seq.unwrap_or(0);
        if bytes.first() == Some(&LEGACY_FORMAT_VERSION)
            && seq > previous.saturating_add(inspect::LEGACY_KEY_JUMP_MAX)
        {
            self.folding = false;
            let detail = format!(
                "a carma 0.1 record under key {seq}, far past the previous key {previous}: a damaged key"
            );
            self.problems.push(Problem::range("damaged", seq, seq, detail));
            return;
        }
        if self.last_seq.is_some_and(|last| seq <= last) {
            self.folding = false;
            let mut problem = Problem::range("damaged", seq, seq, "its key comes out of order".into());
            problem.task = frame::probable_task(bytes).map(|t| t.to_string());
            self.problems.push(problem);
            return;
        }
        if seq != self.last_seq.unwrap_or(0).saturating_add(1) {
            self.folding = false;
        }
        self.note_read(seq, seq);
        self.last_seq = Some(seq);
        match frame::decode(seq, bytes) {
            Ok(record) => {
                self.readable += 1;
                self.first_seq.get_or_insert(seq);
                self.highest_readable = self.highest_readable.max(Some(seq));
                if bytes.first() == Some(&LEGACY_FORMAT_VERSION) {
                    self.legacy += 1;
                }
                if self.folding {
                    self.state.apply(seq, &record);
                    if self.snapshot_seq == Some(seq) {
                        self.snapshot_fold = Some(self.state.clone());
                    }
                }
            }
            Err(error) => {
                self.folding = false;
                let kind = if error.is_damage() { "damaged" } else { "newer-format" };
                let detail = match error {
                    DecodeError::UnknownVersion { .. } => format!("{NEWER_PREFIX}{error}"),
                    _ => error.to_string(),
                };
                let mut problem = Problem::range(kind, seq, seq, detail);
                problem.task = frame::probable_task(bytes).map(|t| t.to_string());
                self.problems.push(problem);
            }
        }
    }

    fn note_read(&mut self, first: u64, last: u64) {
        match self.seen.last_mut() {
            Some(range) if range.1.saturating_add(1) >= first && last > range.1 => range.1 = last,
            Some(range) if range.1 >= last => {}
            _ => self.seen.push((first, last)),
        }
        self.seen.sort_unstable();
    }

    /// Seq ranges in `1..=upper` neither read nor reported unreadable.
    fn gaps(&self, upper: u64) -> Vec<(u64, u64)> {
        let mut gaps = Vec::new();
        let mut next = 1;
        for &(first, last) in &self.seen {
            if first > next {
                gaps.push((next, first - 1));
            }
            next = next.max(last.saturating_add(1));
        }
        if next <= upper {
            gaps.push((next, upper));
        }
        gaps
    }
}

/// Pass 2: redb's page checksums, on a copy.
fn check_pages(path: &Path, report: &mut CheckReport) -> Result<()> {
    match inspect::page_checksums(path)? {
        Ok(()) => report.pages = "passed",
        Err(detail) => {
            report.pages = "failed";
            report.problems.push(Problem::file("pages", detail));
        }
    }
    Ok(())
}

/// Pass 3: the raw scan, and how many seqs of each problem it found intact.
fn scan(path: &Path, report: &mut CheckReport) -> Result<()> {
    let mut seqs: BTreeMap<u64, ()> = BTreeMap::new();
    let mut raw = RawScan::default();
    inspect::scan_frames(path, |found| match found {
        Found::Frame { seq, .. } => {
            raw.frames += 1;
            seqs.insert(seq, ());
        }
        Found::Damaged { .. } => raw.damaged_frames += 1,
    })?;
    raw.seqs = seqs.len() as u64;
    if let Some(committed) = report.records.committed_last_seq {
        raw.beyond_committed = seqs.range(committed.saturating_add(1)..).count() as u64;
    }
    for problem in &mut report.problems {
        if let (Some(first), Some(last)) = (problem.first_seq, problem.last_seq) {
            problem.in_raw_scan = seqs.range(first..=last).count() as u64;
        }
    }
    report.raw_scan = raw;
    Ok(())
}

/// The one rule, shared by `check` and every writer (`verdict`): a journal is sound when the
/// check found no problem.
pub fn sound(problems: &[Problem]) -> bool {
    problems.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_are_the_complement_of_what_was_seen() {
        let mut walk = Walk::default();
        for seq in [1, 2, 3, 7, 8] {
            walk.note_read(seq, seq);
        }
        walk.note_read(10, 12);
        assert_eq!(walk.seen, [(1, 3), (7, 8), (10, 12)]);
        assert_eq!(walk.gaps(15), [(4, 6), (9, 9), (13, 15)]);
        assert_eq!(walk.gaps(12), [(4, 6), (9, 9)]);
    }
}
