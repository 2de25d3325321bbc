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

use std::path::{Path, PathBuf};

use redb::{Database, Durability, ReadOnlyDatabase, ReadableDatabase, ReadableTable, TableDefinition};

use super::event::{self, Record};
use super::state::State;
use crate::error::{Error, Result};

const EVENTS: TableDefinition<u64, &[u8]> = TableDefinition::new("events");
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
const SNAPSHOT: TableDefinition<&str, &[u8]> = TableDefinition::new("snapshot");
const SNAPSHOT_KEY: &str = "state";
/// Version of the snapshot encoding; a mismatch just means "rebuild from events".
const SNAPSHOT_VERSION: u8 = 2;
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
    db: Db,
    path: PathBuf,
    /// Where the snapshot stands, to decide when to write a new one.
    snapshot: SnapshotMark,
    /// Fewest events between snapshots; [`SNAPSHOT_EVERY`] unless a test lowers it.
    snapshot_every: u64,
    /// Snapshot every `snapshot_every` events regardless of size: tests use it so that short
    /// journals still exercise snapshot + tail.
    fixed_interval: bool,
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
/// then folds whatever others appended since. `carma tick` is one process per tick and never
/// has one.
#[derive(Default)]
pub struct StateCache {
    kept: Option<Kept>,
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
    Ready(Journal),
    /// The last writer crashed and redb must repair the file, which needs a writable open.
    NeedsRepair,
}

impl Journal {
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
        let db = builder().create_file(file).map_err(|e| journal_err(path, e))?;
        let journal = Journal {
            db: Db::Write(db),
            path: path.to_path_buf(),
            snapshot: SnapshotMark::default(),
            snapshot_every: SNAPSHOT_EVERY,
            fixed_interval: false,
        };
        journal.write_meta()
    }

    /// Opens the journal for writing; the caller holds the exclusive lock.
    pub fn open(path: &Path) -> Result<Journal> {
        let db = builder().open(path).map_err(|e| journal_err(path, e))?;
        let journal = Journal {
            db: Db::Write(db),
            path: path.to_path_buf(),
            snapshot: SnapshotMark::default(),
            snapshot_every: SNAPSHOT_EVERY,
            fixed_interval: false,
        };
        journal.check_meta()?;
        Ok(journal)
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
        match builder().open_read_only(path) {
            Ok(db) => {
                let journal = Journal {
                    db: Db::Read(db),
                    path: path.to_path_buf(),
                    snapshot: SnapshotMark::default(),
                    snapshot_every: SNAPSHOT_EVERY,
                    fixed_interval: false,
                };
                journal.check_meta()?;
                Ok(ReadOpen::Ready(journal))
            }
            Err(redb::DatabaseError::RepairAborted) => Ok(ReadOpen::NeedsRepair),
            Err(e) => Err(journal_err(path, e)),
        }
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
        Ok(self.read_snapshot()?.map_or(0, |(state, _)| state.last_seq))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn begin_read(&self) -> Result<redb::ReadTransaction> {
        let txn = match &self.db {
            Db::Write(db) => db.begin_read(),
            Db::Read(db) => db.begin_read(),
        };
        txn.map_err(|e| journal_err(&self.path, e))
    }

    fn writer(&self) -> Result<&Database> {
        match &self.db {
            Db::Write(db) => Ok(db),
            // Read-only handles are only given to read verbs; reaching here is a bug.
            Db::Read(_) => unreachable!("write through a read-only journal handle"),
        }
    }

    fn write_meta(&self) -> Result<()> {
        let txn = self.begin_write()?;
        {
            let mut meta = txn.open_table(META).map_err(|e| journal_err(&self.path, e))?;
            let version = [event::FORMAT_VERSION];
            meta.insert("format_version", version.as_slice()).map_err(|e| journal_err(&self.path, e))?;
            let writer = env!("CARGO_PKG_VERSION").as_bytes();
            meta.insert("created_by", writer).map_err(|e| journal_err(&self.path, e))?;
            txn.open_table(EVENTS).map_err(|e| journal_err(&self.path, e))?;
            txn.open_table(SNAPSHOT).map_err(|e| journal_err(&self.path, e))?;
        }
        txn.commit().map_err(|e| journal_err(&self.path, e))
    }

    fn check_meta(&self) -> Result<()> {
        let txn = self.begin_read()?;
        let meta = txn.open_table(META).map_err(|e| journal_err(&self.path, e))?;
        let version = meta.get("format_version").map_err(|e| journal_err(&self.path, e))?;
        let found = version.as_ref().and_then(|v| v.value().first().copied());
        if found != Some(event::FORMAT_VERSION) {
            let found = found.map_or("none".to_string(), |v| v.to_string());
            return Err(Error::Journal {
                path: self.path.clone(),
                detail: format!(
                    "journal format version {found}, this carma {} reads version {}; use the carma that wrote it",
                    env!("CARGO_PKG_VERSION"),
                    event::FORMAT_VERSION
                ),
            });
        }
        Ok(())
    }

    fn begin_write(&self) -> Result<redb::WriteTransaction> {
        let mut txn = self.writer()?.begin_write().map_err(|e| journal_err(&self.path, e))?;
        txn.set_durability(Durability::Immediate).map_err(|e| journal_err(&self.path, e))?;
        Ok(txn)
    }

    /// The highest seq in the journal, 0 when empty.
    pub fn last_seq(&self) -> Result<u64> {
        let txn = self.begin_read()?;
        let events = txn.open_table(EVENTS).map_err(|e| journal_err(&self.path, e))?;
        let last = events.last().map_err(|e| journal_err(&self.path, e))?;
        Ok(last.map_or(0, |(k, _)| k.value()))
    }

    /// Loads the current State: the snapshot if it is readable, plus every later event.
    pub fn load_state(&mut self) -> Result<State> {
        let (mut state, bytes) = self.read_snapshot()?.unwrap_or_default();
        let seq = state.last_seq;
        let tail_bytes = self.fold_counting(&mut state)?;
        self.snapshot = SnapshotMark { seq, bytes, tail_bytes };
        Ok(state)
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
        let still_there = {
            let txn = self.begin_read()?;
            let events = txn.open_table(EVENTS).map_err(|e| journal_err(&self.path, e))?;
            let found = events.get(seq).map_err(|e| journal_err(&self.path, e))?;
            found.is_some_and(|v| v.value() == kept.last_record.as_slice())
        };
        if !still_there {
            return self.load_state();
        }
        let mut state = kept.state;
        self.snapshot = kept.snapshot;
        self.snapshot.tail_bytes += self.fold_counting(&mut state)?;
        Ok(state)
    }

    /// Hands `state` to `cache` for the next [`Journal::load_state_cached`], if it is the
    /// fold of the whole journal as it is now; otherwise the cache stays empty.
    pub fn keep_state(&self, state: State, cache: &mut StateCache) {
        cache.kept = None;
        let Some(file) = file_id(&self.path) else { return };
        let last_record = (|| -> Result<Option<Vec<u8>>> {
            let txn = self.begin_read()?;
            let events = txn.open_table(EVENTS).map_err(|e| journal_err(&self.path, e))?;
            let last = events.last().map_err(|e| journal_err(&self.path, e))?;
            Ok(last.filter(|(k, _)| k.value() == state.last_seq).map(|(_, v)| v.value().to_vec()))
        })();
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
            let record =
                event::decode(raw).map_err(|e| Error::CorruptRecord { seq, detail: e.to_string() })?;
            state.apply(seq, &record);
            Ok(true)
        })?;
        Ok(bytes)
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

    /// The snapshot and its encoded size, when there is a readable one.
    fn read_snapshot(&self) -> Result<Option<(State, u64)>> {
        let txn = self.begin_read()?;
        let table = match txn.open_table(SNAPSHOT) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(journal_err(&self.path, e)),
        };
        let Some(value) = table.get(SNAPSHOT_KEY).map_err(|e| journal_err(&self.path, e))? else {
            return Ok(None);
        };
        let bytes = value.value();
        Ok(decode_snapshot(bytes).map(|state| (state, bytes.len() as u64)))
    }

    /// Calls `visit` for every record with seq ≥ `from_seq`, in order, until it returns false.
    pub fn for_each(&self, from_seq: u64, mut visit: impl FnMut(u64, Record) -> Result<bool>) -> Result<()> {
        self.for_each_raw(from_seq, |seq, raw| {
            let record =
                event::decode(raw).map_err(|e| Error::CorruptRecord { seq, detail: e.to_string() })?;
            visit(seq, record)
        })
    }

    /// [`Journal::for_each`] on the encoded records.
    fn for_each_raw(&self, from_seq: u64, mut visit: impl FnMut(u64, &[u8]) -> Result<bool>) -> Result<()> {
        let txn = self.begin_read()?;
        let events = txn.open_table(EVENTS).map_err(|e| journal_err(&self.path, e))?;
        for entry in events.range(from_seq..).map_err(|e| journal_err(&self.path, e))? {
            let (key, value) = entry.map_err(|e| journal_err(&self.path, e))?;
            if !visit(key.value(), value.value())? {
                break;
            }
        }
        Ok(())
    }

    /// Appends `records` in one durable transaction and folds them into `state`, which
    /// must be this journal's current state. A snapshot is written in the same transaction
    /// when enough events have accumulated since the last one (see the module docs). On error
    /// the journal is unchanged, but `state` may be ahead of it and must be discarded.
    pub fn append(&mut self, records: &[Record], state: &mut State) -> Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        let txn = self.begin_write()?;
        let mut appended_bytes = 0;
        {
            let mut events = txn.open_table(EVENTS).map_err(|e| journal_err(&self.path, e))?;
            let last = events.last().map_err(|e| journal_err(&self.path, e))?.map_or(0, |(k, _)| k.value());
            assert_eq!(last, state.last_seq, "state is not the fold of this journal");
            for (offset, record) in records.iter().enumerate() {
                let seq = last + 1 + offset as u64;
                let bytes = event::encode(record);
                appended_bytes += bytes.len() as u64;
                events.insert(seq, bytes.as_slice()).map_err(|e| journal_err(&self.path, e))?;
                state.apply(seq, record);
            }
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
        Ok(())
    }

    /// Writes raw bytes as the next record, bypassing encoding. Only for tests that need a
    /// corrupt or foreign record in a real journal.
    #[doc(hidden)]
    pub fn append_raw_for_test(&self, bytes: &[u8]) -> Result<u64> {
        let seq = self.last_seq()? + 1;
        let txn = self.begin_write()?;
        {
            let mut events = txn.open_table(EVENTS).map_err(|e| journal_err(&self.path, e))?;
            events.insert(seq, bytes).map_err(|e| journal_err(&self.path, e))?;
        }
        txn.commit().map_err(|e| journal_err(&self.path, e))?;
        Ok(seq)
    }
}

fn encode_snapshot(state: &State) -> Vec<u8> {
    let mut bytes = vec![SNAPSHOT_VERSION];
    let payload = bincode::serde::encode_to_vec(state, bincode::config::standard())
        .unwrap_or_else(|e| unreachable!("encoding the state snapshot: {e}"));
    bytes.extend_from_slice(&payload);
    bytes
}

fn decode_snapshot(bytes: &[u8]) -> Option<State> {
    let (&version, payload) = bytes.split_first()?;
    if version != SNAPSHOT_VERSION {
        return None;
    }
    let decoded = bincode::serde::decode_from_slice::<State, _>(payload, bincode::config::standard());
    decoded.ok().filter(|(_, used)| *used == payload.len()).map(|(state, _)| state)
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
