//! The redb file: the only code in carma that knows redb.
//!
//! Tables:
//! - `events`: `u64 seq -> [version][bincode Record]`, the source of truth; seqs start at 1.
//! - `meta`: `format_version` and the carma version that created the file.
//! - `snapshot`: the encoded [`State`] at some seq, a cache for fast start. It is derived
//!   data: when it is missing, stale or unreadable, [`Journal::load_state`] folds from seq 1.
//!
//! **When to snapshot.** A snapshot is the whole State, which keeps every task ever submitted,
//! so rewriting it every fixed number of events costs O(tasks) each time and O(tasks²) over a
//! journal's life. A new snapshot is therefore written only once the events since the last one
//! weigh (encoded) at least as much as that snapshot, and at least [`SNAPSHOT_EVERY`] events
//! later: total snapshot bytes stay below total event bytes, and a cold load reads at most
//! about twice the State's size.
//!
//! Every commit uses `Durability::Immediate` (one fsync), so after a crash the last committed
//! transaction is intact and nothing later is visible.
//!
//! **Damage.** Every record carries its seq and a checksum (see `event`); a fold checks that
//! seqs run without a gap up to `meta.last_seq`, which each commit updates, and the snapshot
//! carries a checksum too. redb itself may panic on a damaged file (it asserts on a truncated
//! one): every call into it runs under [`guard`](super::guard::guard), which turns a panic into an error naming the
//! file and the next step, so no damaged journal can crash carma.

use std::path::{Path, PathBuf};

use redb::{Database, Durability, ReadOnlyDatabase, ReadableDatabase, ReadableTable, TableDefinition};

use super::event::Record;
use super::fold::Applied;
use super::frame;
use super::guard::guard;
use super::state::State;

mod forensics;
use crate::error::{Error, Result};
pub use forensics::{SnapshotBytes, check_page_checksums};

const EVENTS: TableDefinition<u64, &[u8]> = TableDefinition::new("events");
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
const SNAPSHOT: TableDefinition<&str, &[u8]> = TableDefinition::new("snapshot");
const SNAPSHOT_KEY: &str = "state";
/// Version of the snapshot encoding; a mismatch just means "rebuild from events". Version 3
/// adds a CRC-32 of the payload after the version byte; each later one a change to `State`
/// (the journal's history of them is in git): 13 an attempt's `memory_exceeded`, 14 the 0.5
/// spec extras and an attempt's checkpoint and preemption, 15 the GPU reservations, 16 an
/// attempt's suspension, 17 the suspension's reason, an attempt's resume time (its held room)
/// and its withdrawn preemption, 18 where a task's time limit came from and an attempt's count and
/// time of withdrawn preemptions.
const SNAPSHOT_VERSION: u8 = 18;
/// `meta` key of the highest seq committed, to notice records missing at the end.
const META_LAST_SEQ: &str = "last_seq";
/// redb's page cache. Its default is 1 GiB, which a fold of a large journal fills with pages
/// it reads once; carma opens the file for milliseconds and reads mostly sequentially.
const CACHE_BYTES: usize = 16 * 1024 * 1024;

fn builder() -> redb::Builder {
    let mut builder = redb::Builder::new();
    builder.set_cache_size(CACHE_BYTES);
    builder
}

/// Fewest events folded on top of a snapshot before a new snapshot is written.
pub const SNAPSHOT_EVERY: u64 = 1024;

/// An open journal. Hold `carma.lock` (exclusive for [`Journal::open`], shared for
/// [`Journal::open_read_only`]) for as long as this value lives.
pub struct Journal {
    /// Always `Some` until drop, which closes it under [`guard`].
    db: Option<Db>,
    path: PathBuf,
    /// Where the snapshot stands, to decide when to write a new one.
    snapshot: SnapshotMark,
    /// Fewest events between snapshots; [`SNAPSHOT_EVERY`] unless a test lowers it.
    snapshot_every: u64,
    /// Snapshot every `snapshot_every` events regardless of size: tests use it so that short
    /// journals still exercise snapshot + tail.
    fixed_interval: bool,
    /// The last [`Journal::load_state`] found this carma's snapshot damaged and folded from
    /// seq 1 instead; a writer refuses such a file (see `verdict`).
    snapshot_damaged: bool,
    /// The records of the last [`Journal::append`] that the fold ignored, with why.
    ignored: Vec<(u64, &'static str)>,
}

/// The last snapshot's seq and encoded size, and the encoded size of the events after it.
#[derive(Debug, Clone, Copy, Default)]
struct SnapshotMark {
    seq: u64,
    bytes: u64,
    tail_bytes: u64,
}

/// A State kept in memory between two sessions on the same journal in one process.
///
/// A tick must start from the fold of the journal. Loading it means decoding the snapshot (the
/// whole State, every task ever submitted) and folding the tail, which grows with the number of
/// tasks; a process that ticks in a loop (the simulator) already holds that fold at the end of
/// its previous tick. [`Journal::load_state_cached`] reuses it only after checking that the
/// journal is the same file and still holds, at the cached seq, the record the cache saw there,
/// then folds whatever others appended since. `carma tick` is one process per tick: its only
/// cache is the one its write session uses to hand the State from the verdict's read-only load
/// to the writable open (see `verdict`).
#[derive(Default)]
pub struct StateCache {
    kept: Option<Kept>,
}

impl StateCache {
    /// The State kept, if any: the fold as of the last session that kept one.
    pub fn state(&self) -> Option<&State> {
        self.kept.as_ref().map(|k| &k.state)
    }
}

struct Kept {
    path: PathBuf,
    file: FileId,
    state: State,
    /// The encoded record at `state.last_seq`.
    last_record: Vec<u8>,
    snapshot: SnapshotMark,
}

/// (device, inode): tells a journal from a new one created at the same path.
type FileId = (u64, u64);

fn file_id(path: &Path) -> Option<FileId> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

enum Db {
    Write(Database),
    Read(ReadOnlyDatabase),
}

/// What a read-only open can run into besides plain errors.
pub enum ReadOpen {
    /// The journal, opened read-only.
    Ready(Journal),
    /// The last writer crashed and redb must repair the file, which needs a writable open.
    NeedsRepair,
}

impl Journal {
    fn with_db(db: Db, path: &Path) -> Journal {
        Journal {
            db: Some(db),
            path: path.to_path_buf(),
            snapshot: SnapshotMark::default(),
            snapshot_every: SNAPSHOT_EVERY,
            fixed_interval: false,
            snapshot_damaged: false,
            ignored: Vec::new(),
        }
    }

    /// Creates a new journal file with mode 0640 and its tables.
    pub fn create(path: &Path) -> Result<()> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o640)
            .open(path)
            .map_err(|e| Error::io(format!("cannot create journal {}", path.display()), e))?;
        guard(path, || {
            let db = builder().create_file(file).map_err(|e| journal_err(path, e))?;
            Journal::with_db(Db::Write(db), path).write_meta(frame::FORMAT_VERSION)
        })
    }

    /// Opens the journal for writing; the caller holds the exclusive lock. A journal of an
    /// older format is marked as holding the current one, since new records will be.
    pub fn open(path: &Path) -> Result<Journal> {
        verify_header(path)?;
        guard(path, || {
            let db = open_writable(path)?;
            let journal = Journal::with_db(Db::Write(db), path);
            if journal.check_meta()? != frame::FORMAT_VERSION {
                journal.write_meta(frame::FORMAT_VERSION)?;
            }
            Ok(journal)
        })
    }

    /// Opens the journal read-only; the caller holds at least the shared lock.
    pub fn open_read_only(path: &Path) -> Result<ReadOpen> {
        if let Err(e) = std::fs::File::open(path)
            && e.kind() == std::io::ErrorKind::PermissionDenied
        {
            return Err(Error::Journal {
                path: path.to_path_buf(),
                detail: "permission denied; ask an administrator to give your group read access \
                         (chgrp GROUP carma.redb; it is created mode 0640), or run as root"
                    .into(),
            });
        }
        verify_header(path)?;
        guard(path, || match builder().open_read_only(path) {
            Ok(db) => {
                let journal = Journal::with_db(Db::Read(db), path);
                journal.check_meta()?;
                Ok(ReadOpen::Ready(journal))
            }
            Err(redb::DatabaseError::RepairAborted) => Ok(ReadOpen::NeedsRepair),
            Err(e) => Err(journal_err(path, e)),
        })
    }

    /// Writes a snapshot every `events` events whatever its size; lets tests exercise
    /// snapshot + tail on small journals.
    pub fn set_snapshot_every(&mut self, events: u64) {
        assert!(events > 0, "snapshot interval must be positive");
        self.snapshot_every = events;
        self.fixed_interval = true;
    }

    /// Keeps the size rule but lowers the event floor, so tests can watch the size rule at work.
    #[doc(hidden)]
    pub fn set_snapshot_floor_for_test(&mut self, events: u64) {
        assert!(events > 0, "snapshot interval must be positive");
        self.snapshot_every = events;
        self.fixed_interval = false;
    }

    /// The seq of the newest snapshot, 0 when there is none or it is unreadable.
    pub fn snapshot_seq(&self) -> Result<u64> {
        guard(&self.path, || Ok(self.read_snapshot()?.0.map_or(0, |(state, _)| state.last_seq)))
    }

    /// The journal file's path, as it was opened.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn db(&self) -> &Db {
        self.db.as_ref().expect("the database is open until drop")
    }

    fn begin_read(&self) -> Result<redb::ReadTransaction> {
        let txn = match self.db() {
            Db::Write(db) => db.begin_read(),
            Db::Read(db) => db.begin_read(),
        };
        txn.map_err(|e| journal_err(&self.path, e))
    }

    fn writer(&self) -> Result<&Database> {
        match self.db() {
            Db::Write(db) => Ok(db),
            // Read-only handles are only given to read verbs; reaching here is a bug.
            Db::Read(_) => unreachable!("write through a read-only journal handle"),
        }
    }

    fn write_meta(&self, version: u8) -> Result<()> {
        let txn = self.begin_write()?;
        {
            let mut meta = txn.open_table(META).map_err(|e| journal_err(&self.path, e))?;
            meta.insert("format_version", [version].as_slice()).map_err(|e| journal_err(&self.path, e))?;
            if meta.get("created_by").map_err(|e| journal_err(&self.path, e))?.is_none() {
                let writer = env!("CARGO_PKG_VERSION").as_bytes();
                meta.insert("created_by", writer).map_err(|e| journal_err(&self.path, e))?;
            }
            txn.open_table(EVENTS).map_err(|e| journal_err(&self.path, e))?;
            txn.open_table(SNAPSHOT).map_err(|e| journal_err(&self.path, e))?;
        }
        txn.commit().map_err(|e| journal_err(&self.path, e))
    }

    /// The format version the file declares; an error for a version this carma cannot read.
    pub(crate) fn check_meta(&self) -> Result<u8> {
        let txn = self.begin_read()?;
        let meta = txn.open_table(META).map_err(|e| journal_err(&self.path, e))?;
        let version = meta.get("format_version").map_err(|e| journal_err(&self.path, e))?;
        let found = version.as_ref().and_then(|v| v.value().first().copied());
        match found {
            Some(v) if (frame::LEGACY_FORMAT_VERSION..=frame::FORMAT_VERSION).contains(&v) => Ok(v),
            _ => {
                let found = found.map_or("none".to_string(), |v| v.to_string());
                Err(Error::Journal {
                    path: self.path.clone(),
                    detail: format!(
                        "journal format version {found}, this carma {} reads versions {} to {}; use the carma that wrote it",
                        env!("CARGO_PKG_VERSION"),
                        frame::LEGACY_FORMAT_VERSION,
                        frame::FORMAT_VERSION
                    ),
                })
            }
        }
    }

    /// `meta.last_seq`: the highest seq committed (0 for journals older than the key).
    fn meta_last_seq(&self, txn: &redb::ReadTransaction) -> Result<u64> {
        let meta = txn.open_table(META).map_err(|e| journal_err(&self.path, e))?;
        let value = meta.get(META_LAST_SEQ).map_err(|e| journal_err(&self.path, e))?;
        Ok(value.and_then(|v| v.value().try_into().ok().map(u64::from_le_bytes)).unwrap_or(0))
    }

    fn begin_write(&self) -> Result<redb::WriteTransaction> {
        let mut txn = self.writer()?.begin_write().map_err(|e| journal_err(&self.path, e))?;
        txn.set_durability(Durability::Immediate).map_err(|e| journal_err(&self.path, e))?;
        Ok(txn)
    }

    /// The highest seq in the journal, 0 when empty.
    pub fn last_seq(&self) -> Result<u64> {
        guard(&self.path, || {
            let txn = self.begin_read()?;
            let events = txn.open_table(EVENTS).map_err(|e| journal_err(&self.path, e))?;
            let last = events.last().map_err(|e| journal_err(&self.path, e))?;
            Ok(last.map_or(0, |(k, _)| k.value()))
        })
    }

    /// Loads the current State: the snapshot if it is readable, plus every later event.
    pub fn load_state(&mut self) -> Result<State> {
        let path = self.path.clone();
        guard(&path, || {
            let (snapshot, damaged) = self.read_snapshot()?;
            self.snapshot_damaged = damaged;
            let (mut state, bytes) = snapshot.unwrap_or_default();
            let seq = state.last_seq;
            let tail_bytes = self.fold_counting(&mut state)?;
            self.snapshot = SnapshotMark { seq, bytes, tail_bytes };
            Ok(state)
        })
    }

    /// Like [`Journal::load_state`], but starts from the State `cache` kept, when it is this
    /// journal's (same file, same record at its seq), and folds only the events after it.
    /// The cache is left empty; [`Journal::keep_state`] fills it again.
    pub fn load_state_cached(&mut self, cache: &mut StateCache) -> Result<State> {
        let Some(kept) = cache.kept.take() else { return self.load_state() };
        if kept.path != self.path || file_id(&self.path) != Some(kept.file) {
            return self.load_state();
        }
        let seq = kept.state.last_seq;
        let path = self.path.clone();
        let still_there = guard(&path, || {
            let txn = self.begin_read()?;
            let events = txn.open_table(EVENTS).map_err(|e| journal_err(&self.path, e))?;
            let found = events.get(seq).map_err(|e| journal_err(&self.path, e))?;
            Ok(found.is_some_and(|v| v.value() == kept.last_record.as_slice()))
        })?;
        if !still_there {
            return self.load_state();
        }
        let mut state = kept.state;
        self.snapshot = kept.snapshot;
        let tail = guard(&path, || self.fold_counting(&mut state))?;
        self.snapshot.tail_bytes += tail;
        Ok(state)
    }

    /// Hands `state` to `cache` for the next [`Journal::load_state_cached`], if it is the
    /// fold of the whole journal as it is now; otherwise the cache stays empty.
    pub fn keep_state(&self, state: State, cache: &mut StateCache) {
        cache.kept = None;
        let Some(file) = file_id(&self.path) else { return };
        let last_record = guard(&self.path, || {
            let txn = self.begin_read()?;
            let events = txn.open_table(EVENTS).map_err(|e| journal_err(&self.path, e))?;
            let last = events.last().map_err(|e| journal_err(&self.path, e))?;
            Ok(last.filter(|(k, _)| k.value() == state.last_seq).map(|(_, v)| v.value().to_vec()))
        });
        // An empty journal has nothing to recognise it by, and costs nothing to load.
        if let Ok(Some(last_record)) = last_record {
            cache.kept =
                Some(Kept { path: self.path.clone(), file, state, last_record, snapshot: self.snapshot });
        }
    }

    /// Folds every event after `state.last_seq` into `state` and returns their encoded size.
    fn fold_counting(&self, state: &mut State) -> Result<u64> {
        let mut bytes = 0;
        self.for_each_raw(state.last_seq + 1, |seq, raw| {
            bytes += raw.len() as u64;
            let record = self.decode(seq, raw)?;
            state.apply(seq, &record);
            Ok(true)
        })?;
        Ok(bytes)
    }

    /// Calls `visit` with the stored bytes of every record with seq ≥ `from_seq` (checked for
    /// gaps, not decoded), until it returns false; the published view copies them.
    pub fn for_each_frame(&self, from_seq: u64, visit: impl FnMut(u64, &[u8]) -> Result<bool>) -> Result<()> {
        guard(&self.path, || self.for_each_raw(from_seq, visit))
    }

    /// Decodes one stored record, with the errors [`Journal::for_each`] gives.
    pub fn decode_record(&self, seq: u64, raw: &[u8]) -> Result<Record> {
        self.decode(seq, raw)
    }

    /// The environment values of a task submitted by carma 0.1, from its Submitted record at
    /// `seq`; `None` for later tasks, whose values are in `private/`.
    pub fn legacy_env(&self, seq: u64) -> Result<Option<Vec<(String, String)>>> {
        let mut env = None;
        guard(&self.path, || {
            self.for_each_raw(seq, |_, raw| {
                env = frame::legacy_env(raw);
                Ok(false)
            })
        })?;
        Ok(env)
    }

    fn decode(&self, seq: u64, raw: &[u8]) -> Result<Record> {
        frame::decode(seq, raw).map_err(|e| match e {
            frame::DecodeError::UnknownVersion { .. } => {
                Error::NewerRecord { path: self.path.clone(), seq, detail: e.to_string() }
            }
            _ => Error::DamagedRecord {
                path: self.path.clone(),
                seq,
                task: frame::probable_task(raw).map(|t| t.to_string()),
                detail: e.to_string(),
            },
        })
    }

    /// Folds every event after `state.last_seq` into `state`.
    pub fn fold_from(&self, state: &mut State) -> Result<()> {
        self.for_each(state.last_seq + 1, |seq, record| {
            state.apply(seq, &record);
            Ok(true)
        })
    }

    /// The full fold from seq 1, ignoring any snapshot (tests prove it equals `load_state`).
    pub fn fold_all(&self) -> Result<State> {
        let mut state = State::default();
        self.fold_from(&mut state)?;
        Ok(state)
    }

    /// The snapshot and its encoded size, when there is a readable one; and whether there is
    /// one of this carma's version that does not decode (damage, not just an older carma's).
    fn read_snapshot(&self) -> Result<(Option<(State, u64)>, bool)> {
        let txn = self.begin_read()?;
        let table = match txn.open_table(SNAPSHOT) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok((None, false)),
            Err(e) => return Err(journal_err(&self.path, e)),
        };
        let Some(value) = table.get(SNAPSHOT_KEY).map_err(|e| journal_err(&self.path, e))? else {
            return Ok((None, false));
        };
        let bytes = value.value();
        let decoded = decode_snapshot(bytes).map(|state| (state, bytes.len() as u64));
        // As `snapshot_bytes` classifies it for the check: empty bytes are damage too.
        let damaged = decoded.is_none() && bytes.first().is_none_or(|&v| v == SNAPSHOT_VERSION);
        Ok((decoded, damaged))
    }

    /// Whether the last [`Journal::load_state`] found this carma's snapshot damaged (it then
    /// folded from seq 1, so the State is right, but the file is not what was written).
    pub fn snapshot_damaged(&self) -> bool {
        self.snapshot_damaged
    }

    /// Calls `visit` for every record with seq ≥ `from_seq`, in order, until it returns false.
    pub fn for_each(&self, from_seq: u64, mut visit: impl FnMut(u64, Record) -> Result<bool>) -> Result<()> {
        guard(&self.path, || {
            self.for_each_raw(from_seq, |seq, raw| {
                let record = self.decode(seq, raw)?;
                visit(seq, record)
            })
        })
    }

    /// [`Journal::for_each`] on the encoded records. Seqs must run without a gap from
    /// `from_seq` (seqs start at 1) to `meta.last_seq`: a missing record is damage.
    fn for_each_raw(&self, from_seq: u64, mut visit: impl FnMut(u64, &[u8]) -> Result<bool>) -> Result<()> {
        let txn = self.begin_read()?;
        let events = txn.open_table(EVENTS).map_err(|e| journal_err(&self.path, e))?;
        let from_seq = from_seq.max(1);
        let mut expected = from_seq;
        for entry in events.range(from_seq..).map_err(|e| journal_err(&self.path, e))? {
            let (key, value) = entry.map_err(|e| journal_err(&self.path, e))?;
            let seq = key.value();
            if seq != expected {
                return Err(self.missing(expected, seq - 1));
            }
            expected += 1;
            if !visit(seq, value.value())? {
                return Ok(());
            }
        }
        let committed = self.meta_last_seq(&txn)?;
        if committed >= expected {
            return Err(self.missing(expected, committed));
        }
        Ok(())
    }

    fn missing(&self, first: u64, last: u64) -> Error {
        let detail = if first == last {
            "it is missing".to_string()
        } else {
            format!("records {first} to {last} are missing")
        };
        Error::DamagedRecord { path: self.path.clone(), seq: first, task: None, detail }
    }

    /// Appends `records` in one durable transaction and folds them into `state`, which
    /// must be this journal's current state. A snapshot is written in the same transaction
    /// when enough events have accumulated since the last one (see the module docs). On error
    /// the journal is unchanged, but `state` may be ahead of it and must be discarded.
    ///
    /// Records the fold ignores are written all the same (see [`Journal::ignored`]).
    pub fn append(&mut self, records: &[Record], state: &mut State) -> Result<()> {
        self.ignored.clear();
        if records.is_empty() {
            return Ok(());
        }
        let path = self.path.clone();
        guard(&path, || self.append_unguarded(records, state))
    }

    /// The records of the last successful [`Journal::append`] that the fold ignored (seq, why):
    /// a writer that decides what to write, such as the tick, expects none.
    pub fn ignored(&self) -> &[(u64, &'static str)] {
        &self.ignored
    }

    fn append_unguarded(&mut self, records: &[Record], state: &mut State) -> Result<()> {
        // Every frame is made and sized before anything is written: one record over the limit
        // refuses the whole batch with nothing changed, instead of a damaged journal.
        let first = state.last_seq + 1;
        let mut ignored = Vec::new();
        let frames: Vec<Vec<u8>> =
            records.iter().enumerate().map(|(offset, r)| frame::encode(first + offset as u64, r)).collect();
        if let Some((frame, record)) =
            frames.iter().zip(records).find(|(f, _)| f.len() > frame::RECORD_BYTES_MAX)
        {
            return Err(Error::Journal {
                path: self.path.clone(),
                detail: format!(
                    "a {} record of {} bytes is over the {}-byte record limit; nothing was written",
                    record.event.kind(),
                    frame.len(),
                    frame::RECORD_BYTES_MAX
                ),
            });
        }
        let txn = self.begin_write()?;
        let mut appended_bytes = 0;
        {
            let mut events = txn.open_table(EVENTS).map_err(|e| journal_err(&self.path, e))?;
            let last = events.last().map_err(|e| journal_err(&self.path, e))?.map_or(0, |(k, _)| k.value());
            assert_eq!(last, state.last_seq, "state is not the fold of this journal");
            for (offset, (record, bytes)) in records.iter().zip(&frames).enumerate() {
                let seq = last + 1 + offset as u64;
                appended_bytes += bytes.len() as u64;
                events.insert(seq, bytes.as_slice()).map_err(|e| journal_err(&self.path, e))?;
                if let Applied::Ignored(why) = state.apply(seq, record) {
                    ignored.push((seq, why));
                }
            }
            let mut meta = txn.open_table(META).map_err(|e| journal_err(&self.path, e))?;
            let last_seq = state.last_seq.to_le_bytes();
            meta.insert(META_LAST_SEQ, last_seq.as_slice()).map_err(|e| journal_err(&self.path, e))?;
        }
        let mark = self.snapshot;
        let tail_bytes = mark.tail_bytes + appended_bytes;
        let snapshot_due = state.last_seq - mark.seq >= self.snapshot_every
            && (self.fixed_interval || tail_bytes >= mark.bytes);
        let mut written = None;
        if snapshot_due {
            let mut table = txn.open_table(SNAPSHOT).map_err(|e| journal_err(&self.path, e))?;
            let bytes = encode_snapshot(state);
            table.insert(SNAPSHOT_KEY, bytes.as_slice()).map_err(|e| journal_err(&self.path, e))?;
            written = Some(bytes.len() as u64);
        }
        txn.commit().map_err(|e| journal_err(&self.path, e))?;
        self.snapshot = match written {
            Some(bytes) => SnapshotMark { seq: state.last_seq, bytes, tail_bytes: 0 },
            None => SnapshotMark { tail_bytes, ..mark },
        };
        self.ignored = ignored;
        Ok(())
    }

    /// Writes raw bytes as the next record, bypassing encoding. Only for tests that need a
    /// corrupt or foreign record in a real journal.
    #[doc(hidden)]
    pub fn append_raw_for_test(&self, bytes: &[u8]) -> Result<u64> {
        let seq = self.last_seq()? + 1;
        guard(&self.path, || {
            let txn = self.begin_write()?;
            {
                let mut events = txn.open_table(EVENTS).map_err(|e| journal_err(&self.path, e))?;
                events.insert(seq, bytes).map_err(|e| journal_err(&self.path, e))?;
            }
            txn.commit().map_err(|e| journal_err(&self.path, e))?;
            Ok(seq)
        })
    }
}

/// Refuses a file whose header would make redb read an older commit (see `header`).
fn verify_header(path: &Path) -> Result<()> {
    super::header::verify(path).map_err(|detail| Error::Journal {
        path: path.to_path_buf(),
        detail: format!(
            "the file is damaged ({detail}); run `carma journal check` and see \"Recovering a damaged journal\" in the README"
        ),
    })
}

/// An error's detail without the path and the advice that [`guard`] adds, for a report.
fn short_detail(error: &Error) -> String {
    match error {
        Error::Journal { detail, .. } => {
            detail.split("; run `carma journal check`").next().unwrap_or(detail).to_string()
        }
        other => other.to_string(),
    }
}

impl Drop for Journal {
    /// Closing a damaged file may panic inside redb too; nothing useful can be done about it
    /// here, and the caller already has its answer.
    fn drop(&mut self) {
        if let Some(db) = self.db.take() {
            let _ = guard(&self.path, move || {
                drop(db);
                Ok(())
            });
        }
    }
}

fn encode_snapshot(state: &State) -> Vec<u8> {
    let payload = bincode::serde::encode_to_vec(state, bincode::config::standard())
        .unwrap_or_else(|e| unreachable!("encoding the state snapshot: {e}"));
    let mut bytes = Vec::with_capacity(payload.len() + 5);
    bytes.push(SNAPSHOT_VERSION);
    bytes.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    bytes.extend_from_slice(&payload);
    bytes
}

/// The snapshot's State, or `None` when it is of another version, damaged or undecodable:
/// it is only a cache, so the caller folds from the events instead.
fn decode_snapshot(bytes: &[u8]) -> Option<State> {
    let (&version, rest) = bytes.split_first()?;
    if version != SNAPSHOT_VERSION || rest.len() < 4 {
        return None;
    }
    let (crc, payload) = rest.split_at(4);
    if crc32fast::hash(payload).to_le_bytes() != crc {
        return None;
    }
    let decoded = bincode::serde::decode_from_slice::<State, _>(payload, bincode::config::standard());
    decoded.ok().filter(|(_, used)| *used == payload.len()).map(|(state, _)| state)
}

/// Opens the file for writing. The caller holds `carma.lock`, so a redb lock (`flock`) held by
/// someone else can only be a forked reader of this very process (`journal::isolate`, checking
/// another journal for another thread): a fork shares every open file, and with it the lock
/// of any journal another thread had open at that moment, until the reader exits. `carma tick`
/// has no such threads; benches and tests that run simulations side by side do. So the open
/// is retried for a bounded while (10 s, a check's length) before it is an error.
fn open_writable(path: &Path) -> Result<Database> {
    let mut waited_ms = 0;
    loop {
        match builder().open(path) {
            Ok(db) => return Ok(db),
            Err(redb::DatabaseError::DatabaseAlreadyOpen) if waited_ms < 10_000 => {
                std::thread::sleep(std::time::Duration::from_millis(5));
                waited_ms += 5;
            }
            Err(e) => return Err(journal_err(path, e)),
        }
    }
}

fn journal_err(path: &Path, e: impl std::fmt::Display) -> Error {
    let detail = e.to_string();
    let hint = if detail.contains("already open") {
        "; another process has it open without holding carma.lock"
    } else {
        ""
    };
    Error::Journal { path: path.to_path_buf(), detail: format!("{detail}{hint}") }
}
