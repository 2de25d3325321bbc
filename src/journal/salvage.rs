//! `carma journal salvage`: copy every readable record of a damaged journal into a fresh one,
//! and say exactly what was lost.
//!
//! **Where records come from.** First redb, record by record, skipping any that fail their
//! checks (and going on key by key past pages redb cannot read); then the raw scan of the
//! file's bytes (see `inspect`), which finds version-2 frames in pages redb no longer reaches,
//! including older copies of pages, and in files redb cannot open at all. A seq redb returned
//! soundly is taken from redb; a seq found only by the scan is taken when every intact copy
//! of it is the same record, and counted lost when copies disagree. Frames past
//! `meta.last_seq` belong to a transaction that never committed and are ignored. carma 0.1's
//! records have no frame, so they can only come through redb.
//!
//! **Seqs are renumbered.** The fold needs seqs without a gap, so the kept records get seqs
//! 1, 2, 3, ... in their original order. The report gives the lost records as ranges of
//! original seqs, with the tasks they concerned where a damaged copy still names one, and the
//! mapping of kept ranges to new seqs.
//!
//! carma 0.1's records carry neither seq nor checksum, so a damaged key of one cannot be told
//! from a sound one: records are written in the order redb returns them, and one whose key is
//! not above the previous record's is left out (and reported lost at its own seq).
//!
//! Memory: a few words per range of seqs, plus the records that only the raw scan has.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::Serialize;

use super::event::Record;
use super::frame::{self, DecodeError};
use super::inspect::{self, Found};
use super::state::State;
use super::store::Journal;
use crate::error::{Error, Result};

/// Schema tag of `carma journal salvage --json` (schema/journal-salvage.schema.json).
pub const SALVAGE_SCHEMA: &str = "carma.journal-salvage/1";
/// Records appended per transaction in the new journal.
const BATCH: usize = 4096;

/// What `carma journal salvage` kept and lost, as `--json` prints it (the field meanings are
/// schema/journal-salvage.schema.json's).
#[derive(Debug, Clone, Serialize)]
pub struct SalvageReport {
    /// Always [`SALVAGE_SCHEMA`].
    pub schema: &'static str,
    /// The damaged journal's path, as given; salvage never changes it.
    pub journal: String,
    /// The new journal's path, as given.
    pub out: String,
    /// How the damaged journal was opened (as in `carma journal check`).
    pub opened: &'static str,
    /// The highest original seq known: `meta.last_seq`, the last key, or the highest frame.
    pub original_last_seq: u64,
    /// False when redb cannot open the file: `original_last_seq` is then the highest seq the
    /// raw scan found, and records past it (and any carma 0.1 record) cannot be counted.
    pub extent_known: bool,
    /// Records written to the new journal.
    pub kept: u64,
    /// Of those, records redb returned soundly.
    pub from_redb: u64,
    /// Of those, records only the raw scan found.
    pub from_raw_scan: u64,
    /// Original seqs in `1..=original_last_seq` not kept.
    pub lost_records: u64,
    /// The lost original seqs, as ranges with one reason each.
    pub lost: Vec<LostRange>,
    /// Every task a lost record named (when its damaged copy still did), sorted.
    pub tasks_affected: Vec<String>,
    /// The renumbering: original seqs `first_seq..=last_seq` are now `new_first_seq..`.
    pub kept_ranges: Vec<KeptRange>,
    /// Distinct seqs the raw scan found past `meta.last_seq`, left out.
    pub ignored_uncommitted: u64,
    /// Whether `carma journal check` finds the new journal sound.
    pub out_sound: bool,
}

/// Consecutive original seqs lost for one reason.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LostRange {
    /// The first original seq lost.
    pub first_seq: u64,
    /// The last original seq lost (inclusive).
    pub last_seq: u64,
    /// `last_seq - first_seq + 1`.
    pub count: u64,
    /// Tasks a damaged copy of these records still names; empty when unknown.
    pub tasks: Vec<String>,
    /// Why they were not kept, in words.
    pub reason: String,
}

/// Consecutive original seqs kept, and where they now start in the new journal.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KeptRange {
    /// The first original seq of the range.
    pub first_seq: u64,
    /// The last original seq of the range (inclusive).
    pub last_seq: u64,
    /// The new seq of `first_seq`; the rest follow one by one.
    pub new_first_seq: u64,
}

/// Why a seq was not kept, when something is known about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Loss {
    Damaged,
    Newer,
    Conflict,
    NotFound,
}

impl Loss {
    fn reason(self, legacy: bool) -> String {
        match self {
            Loss::Damaged => "damaged, and no intact copy found".into(),
            Loss::Newer => "written by a newer carma: salvage with that carma".into(),
            Loss::Conflict => "different records under this seq in the raw scan".into(),
            Loss::NotFound if legacy => "not found (carma 0.1 records are found only by redb)".into(),
            Loss::NotFound => "not found by redb or by the raw scan".into(),
        }
    }
}

/// What the first two passes learned.
#[derive(Default)]
struct Survey {
    /// Seqs redb returned soundly, as merged ranges.
    from_redb: Ranges,
    legacy: bool,
    losses: BTreeMap<u64, Loss>,
    tasks: BTreeMap<u64, BTreeSet<String>>,
    /// Records only the raw scan has; `None` when its copies disagree.
    scanned: BTreeMap<u64, Option<Record>>,
    uncommitted: BTreeSet<u64>,
    /// How far redb's keys go (the walk's bound): a damaged key may lie far beyond.
    walk_upper: u64,
    /// The original journal's extent: the last commit, or the highest seq read soundly.
    upper: u64,
}

/// Salvages `path` into a new journal at `out`, which must not exist.
pub fn salvage(path: &Path, out: &Path) -> Result<SalvageReport> {
    if out.symlink_metadata().is_ok() {
        return Err(Error::BadInput(format!(
            "{} exists; salvage never overwrites a file: give --out a new path",
            out.display()
        )));
    }
    let inspected = inspect::open(path)?;
    let mut survey = Survey::default();
    let committed = inspected.journal.as_ref().and_then(|j| j.committed_last_seq().ok().flatten());
    // With a damaged header the newest commit may be the one lost: its records lie past the
    // `meta.last_seq` read, and are kept.
    let commit_bound = committed.filter(|_| inspected.header_damage.is_none());
    if let Some(journal) = &inspected.journal {
        survey.walk_upper = committed.unwrap_or(0).max(journal.last_key().unwrap_or(0));
        survey_redb(journal, &mut survey);
    }
    survey.upper = committed.unwrap_or(0).max(survey.from_redb.last().unwrap_or(0));
    survey_raw(path, commit_bound, &mut survey)?;
    let (kept, from_redb) = write(out, inspected.journal.as_ref(), &survey)?;
    let opened = inspected.opened.name();
    drop(inspected);
    let out_sound = super::check::check(out)?.sound;
    Ok(report(path, out, opened, &survey, (kept, from_redb), out_sound))
}

/// Pass 1: which seqs redb returns soundly, and what is wrong with the others.
fn survey_redb(journal: &Journal, survey: &mut Survey) {
    let upper = survey.walk_upper;
    let mut last_sound = 0u64;
    // Seqs redb cannot read are "not found" unless the raw scan has them.
    let _unreadable = journal.walk_events(upper, |seq, bytes| match frame::decode(seq, bytes) {
        Ok(_) if bytes.first() == Some(&frame::LEGACY_FORMAT_VERSION) => {
            survey.legacy = true;
            // A damaged key of a record without a seq of its own (see `inspect`).
            if seq <= last_sound.saturating_add(inspect::LEGACY_KEY_JUMP_MAX) {
                survey.from_redb.insert(seq);
                last_sound = last_sound.max(seq);
            }
        }
        Ok(_) => {
            survey.from_redb.insert(seq);
            last_sound = last_sound.max(seq);
        }
        Err(error) => {
            let loss =
                if matches!(error, DecodeError::UnknownVersion { .. }) { Loss::Newer } else { Loss::Damaged };
            survey.losses.insert(seq, loss);
            if let Some(task) = frame::probable_task(bytes) {
                survey.tasks.entry(seq).or_default().insert(task.to_string());
            }
        }
    });
}

/// Pass 2: the raw scan, for the seqs redb did not return.
fn survey_raw(path: &Path, committed: Option<u64>, survey: &mut Survey) -> Result<()> {
    inspect::scan_frames(path, |found| match found {
        Found::Frame { seq, record, .. } => {
            if committed.is_some_and(|c| seq > c) {
                survey.uncommitted.insert(seq);
            } else if !survey.from_redb.contains(seq) {
                survey
                    .scanned
                    .entry(seq)
                    .and_modify(|kept| {
                        if kept.as_ref() != Some(record.as_ref()) {
                            *kept = None;
                        }
                    })
                    .or_insert_with(|| Some(*record));
            }
        }
        Found::Damaged { claimed_seq, task: Some(task), .. } => {
            survey.tasks.entry(claimed_seq).or_default().insert(task.to_string());
        }
        Found::Damaged { .. } => {}
    })?;
    let highest_scanned = survey.scanned.keys().next_back().copied().unwrap_or(0);
    survey.upper = survey.upper.max(if committed.is_some() { 0 } else { highest_scanned });
    for (&seq, record) in &survey.scanned {
        if record.is_none() {
            survey.losses.insert(seq, Loss::Conflict);
        }
    }
    Ok(())
}

/// Pass 3: the kept records, renumbered, into a new journal; returns the kept ranges and how
/// many of the records came through redb.
fn write(out: &Path, journal: Option<&Journal>, survey: &Survey) -> Result<(Vec<KeptRange>, u64)> {
    Journal::create(out)?;
    let mut target = Journal::open(out)?;
    let mut state = target.load_state()?;
    let mut writer = Writer {
        target: &mut target,
        state: &mut state,
        batch: Vec::new(),
        kept: Vec::new(),
        from_redb: 0,
        failed: None,
    };
    let mut scanned = survey.scanned.iter().filter_map(|(s, r)| r.as_ref().map(|r| (*s, r))).peekable();
    if let Some(journal) = journal {
        let mut last = 0;
        let _unreadable_again = journal.walk_events(survey.walk_upper, |seq, bytes| {
            if seq <= last || !survey.from_redb.contains(seq) {
                return;
            }
            let Ok(record) = frame::decode(seq, bytes) else { return };
            last = seq;
            while let Some((s, r)) = scanned.next_if(|(s, _)| *s < seq) {
                writer.push(s, r.clone());
            }
            writer.push(seq, record);
            writer.from_redb += 1;
        });
    }
    for (s, r) in scanned {
        writer.push(s, r.clone());
    }
    writer.flush();
    match writer.failed {
        Some(error) => Err(error),
        None => Ok((writer.kept, writer.from_redb)),
    }
}

struct Writer<'a> {
    target: &'a mut Journal,
    state: &'a mut State,
    batch: Vec<Record>,
    kept: Vec<KeptRange>,
    from_redb: u64,
    /// The first write error; later pushes are dropped.
    failed: Option<Error>,
}

impl Writer<'_> {
    fn push(&mut self, original_seq: u64, record: Record) {
        if self.failed.is_some() {
            return;
        }
        let new_seq = self.state.last_seq + self.batch.len() as u64 + 1;
        match self.kept.last_mut() {
            Some(range) if range.last_seq.saturating_add(1) == original_seq => range.last_seq = original_seq,
            _ => self.kept.push(KeptRange {
                first_seq: original_seq,
                last_seq: original_seq,
                new_first_seq: new_seq,
            }),
        }
        self.batch.push(record);
        if self.batch.len() >= BATCH {
            self.flush();
        }
    }

    fn flush(&mut self) {
        let batch = std::mem::take(&mut self.batch);
        if self.failed.is_none()
            && let Err(e) = self.target.append(&batch, self.state)
        {
            self.failed = Some(e);
        }
    }
}

fn report(
    path: &Path,
    out: &Path,
    opened: &'static str,
    survey: &Survey,
    (kept_ranges, from_redb): (Vec<KeptRange>, u64),
    out_sound: bool,
) -> SalvageReport {
    let kept: u64 = kept_ranges.iter().map(|r| r.last_seq - r.first_seq + 1).sum();
    let lost = lost_ranges(survey, &kept_ranges);
    let tasks_affected: BTreeSet<String> = lost.iter().flat_map(|l| l.tasks.iter().cloned()).collect();
    SalvageReport {
        schema: SALVAGE_SCHEMA,
        journal: path.display().to_string(),
        out: out.display().to_string(),
        opened,
        original_last_seq: survey.upper,
        extent_known: opened != "unopenable",
        kept,
        from_redb,
        from_raw_scan: kept.saturating_sub(from_redb),
        lost_records: lost.iter().map(|l| l.count).sum(),
        lost,
        tasks_affected: tasks_affected.into_iter().collect(),
        kept_ranges,
        ignored_uncommitted: survey.uncommitted.len() as u64,
        out_sound,
    }
}

/// The seqs in `1..=upper` not kept, split where the reason changes.
fn lost_ranges(survey: &Survey, kept: &[KeptRange]) -> Vec<LostRange> {
    let mut lost: Vec<LostRange> = Vec::new();
    let mut next = 1;
    let gaps = kept
        .iter()
        .map(|k| (k.first_seq, k.last_seq))
        .chain(std::iter::once((survey.upper.saturating_add(1), 0)));
    for (first, last) in gaps {
        for seq_range in split_by_reason(survey, next, first.saturating_sub(1)) {
            lost.push(seq_range);
        }
        next = next.max(last.saturating_add(1));
    }
    lost
}

/// `first..=last` (all lost) as ranges of one reason each, with their tasks.
fn split_by_reason(survey: &Survey, first: u64, last: u64) -> Vec<LostRange> {
    let mut out: Vec<LostRange> = Vec::new();
    if first > last {
        return out;
    }
    // Seqs with something known, then the stretches between them are "not found".
    let mut cursor = first;
    let known = survey.losses.range(first..=last).map(|(s, l)| (*s, *l));
    for (seq, loss) in known.chain(std::iter::once((last.saturating_add(1), Loss::NotFound))) {
        if seq > cursor {
            extend(&mut out, survey, cursor, seq - 1, Loss::NotFound);
        }
        if seq <= last {
            extend(&mut out, survey, seq, seq, loss);
        }
        cursor = seq.saturating_add(1);
    }
    out
}

fn extend(out: &mut Vec<LostRange>, survey: &Survey, first: u64, last: u64, loss: Loss) {
    let reason = loss.reason(survey.legacy);
    let tasks: BTreeSet<String> =
        survey.tasks.range(first..=last).flat_map(|(_, t)| t.iter().cloned()).collect();
    match out.last_mut() {
        Some(prev) if prev.reason == reason && prev.last_seq.saturating_add(1) == first => {
            prev.last_seq = last;
            prev.count += last - first + 1;
            let merged: BTreeSet<String> = prev.tasks.iter().cloned().chain(tasks).collect();
            prev.tasks = merged.into_iter().collect();
        }
        _ => out.push(LostRange {
            first_seq: first,
            last_seq: last,
            count: last - first + 1,
            tasks: tasks.into_iter().collect(),
            reason,
        }),
    }
}

/// Merged, sorted ranges of seqs; appends in increasing order are O(1).
#[derive(Default)]
struct Ranges(Vec<(u64, u64)>);

impl Ranges {
    fn insert(&mut self, seq: u64) {
        if self.contains(seq) {
            return;
        }
        match self.0.last_mut() {
            Some(last) if last.1.saturating_add(1) == seq => last.1 = seq,
            Some(last) if last.1 < seq => self.0.push((seq, seq)),
            None => self.0.push((seq, seq)),
            Some(_) => {
                let at = self.0.partition_point(|r| r.1 < seq);
                self.0.insert(at, (seq, seq));
                self.normalize();
            }
        }
    }

    fn last(&self) -> Option<u64> {
        self.0.last().map(|r| r.1)
    }

    fn contains(&self, seq: u64) -> bool {
        let at = self.0.partition_point(|r| r.1 < seq);
        self.0.get(at).is_some_and(|r| r.0 <= seq)
    }

    fn normalize(&mut self) {
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(self.0.len());
        for &(a, b) in &self.0 {
            match merged.last_mut() {
                Some(last) if last.1.saturating_add(1) >= a => last.1 = last.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        self.0 = merged;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_merge_and_answer_membership() {
        let mut r = Ranges::default();
        for s in [1, 2, 3, 7, 5, 6, 10] {
            r.insert(s);
        }
        assert_eq!(r.0, [(1, 3), (5, 7), (10, 10)]);
        r.insert(4);
        assert_eq!(r.0, [(1, 7), (10, 10)]);
        assert!(r.contains(7) && !r.contains(8) && r.contains(10));
    }

    #[test]
    fn lost_ranges_split_by_reason_and_name_tasks() {
        let mut survey = Survey { upper: 12, ..Survey::default() };
        survey.losses.insert(4, Loss::Damaged);
        survey.losses.insert(5, Loss::Damaged);
        survey.tasks.entry(5).or_default().insert("t5".into());
        survey.tasks.entry(20).or_default().insert("beyond".into());
        let kept = [
            KeptRange { first_seq: 1, last_seq: 3, new_first_seq: 1 },
            KeptRange { first_seq: 8, last_seq: 10, new_first_seq: 4 },
        ];
        let lost = lost_ranges(&survey, &kept);
        let summary: Vec<_> =
            lost.iter().map(|l| (l.first_seq, l.last_seq, l.count, l.tasks.clone())).collect();
        assert_eq!(
            summary,
            [(4, 5, 2, vec!["t5".to_string()]), (6, 7, 2, vec![]), (11, 12, 2, vec![])],
            "{lost:?}"
        );
        assert!(lost[0].reason.starts_with("damaged"));
        assert!(lost[1].reason.starts_with("not found"));
    }
}
