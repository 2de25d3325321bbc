//! The redb file: the only code in carma that knows redb.
//!
//! Tables:
//! - `events`: `u64 seq -> [version][bincode Record]`, the source of truth; seqs start at 1.
//! - `meta`: `format_version` and the carma version that created the file.
//! - `snapshot`: the encoded [`State`] at some seq, a cache for fast start. It is derived
//!   data: when it is missing, stale or unreadable, [`Journal::load_state`] folds from seq 1.
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
const SNAPSHOT_VERSION: u8 = 1;
/// redb's page cache. Its default is 1 GiB, which a fold of a large journal fills with pages
/// it reads once; carma opens the file for milliseconds and reads mostly sequentially.
const CACHE_BYTES: usize = 16 * 1024 * 1024;

fn builder() -> redb::Builder {
    let mut builder = redb::Builder::new();
    builder.set_cache_size(CACHE_BYTES);
    builder
}

/// Events folded on top of a snapshot before a new snapshot is written.
pub const SNAPSHOT_EVERY: u64 = 1024;

/// An open journal. Hold `carma.lock` (exclusive for [`Journal::open`], shared for
/// [`Journal::open_read_only`]) for as long as this value lives.
pub struct Journal {
    db: Db,
    path: PathBuf,
    /// Seq of the snapshot found by the last `load_state`, to decide when to write a new one.
    snapshot_seq: u64,
    /// Events between snapshots; [`SNAPSHOT_EVERY`] unless a test lowers it.
    snapshot_every: u64,
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
            snapshot_seq: 0,
            snapshot_every: SNAPSHOT_EVERY,
        };
        journal.write_meta()
    }

    /// Opens the journal for writing; the caller holds the exclusive lock.
    pub fn open(path: &Path) -> Result<Journal> {
        let db = builder().open(path).map_err(|e| journal_err(path, e))?;
        let journal = Journal {
            db: Db::Write(db),
            path: path.to_path_buf(),
            snapshot_seq: 0,
            snapshot_every: SNAPSHOT_EVERY,
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
                    snapshot_seq: 0,
                    snapshot_every: SNAPSHOT_EVERY,
                };
                journal.check_meta()?;
                Ok(ReadOpen::Ready(journal))
            }
            Err(redb::DatabaseError::RepairAborted) => Ok(ReadOpen::NeedsRepair),
            Err(e) => Err(journal_err(path, e)),
        }
    }

    /// Writes snapshots more often; lets tests exercise snapshot + tail on small journals.
    pub fn set_snapshot_every(&mut self, events: u64) {
        assert!(events > 0, "snapshot interval must be positive");
        self.snapshot_every = events;
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
        let mut state = self.read_snapshot()?.unwrap_or_default();
        self.snapshot_seq = state.last_seq;
        self.fold_from(&mut state)?;
        Ok(state)
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

    fn read_snapshot(&self) -> Result<Option<State>> {
        let txn = self.begin_read()?;
        let table = match txn.open_table(SNAPSHOT) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(journal_err(&self.path, e)),
        };
        let Some(value) = table.get(SNAPSHOT_KEY).map_err(|e| journal_err(&self.path, e))? else {
            return Ok(None);
        };
        Ok(decode_snapshot(value.value()))
    }

    /// Calls `visit` for every record with seq ≥ `from_seq`, in order, until it returns false.
    pub fn for_each(&self, from_seq: u64, mut visit: impl FnMut(u64, Record) -> Result<bool>) -> Result<()> {
        let txn = self.begin_read()?;
        let events = txn.open_table(EVENTS).map_err(|e| journal_err(&self.path, e))?;
        for entry in events.range(from_seq..).map_err(|e| journal_err(&self.path, e))? {
            let (key, value) = entry.map_err(|e| journal_err(&self.path, e))?;
            let seq = key.value();
            let record = event::decode(value.value())
                .map_err(|e| Error::CorruptRecord { seq, detail: e.to_string() })?;
            if !visit(seq, record)? {
                break;
            }
        }
        Ok(())
    }

    /// Appends `records` in one durable transaction and folds them into `state`, which
    /// must be this journal's current state. A snapshot is written in the same transaction
    /// when enough events have accumulated since the last one. On error the journal is
    /// unchanged, but `state` may be ahead of it and must be discarded.
    pub fn append(&mut self, records: &[Record], state: &mut State) -> Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        let txn = self.begin_write()?;
        {
            let mut events = txn.open_table(EVENTS).map_err(|e| journal_err(&self.path, e))?;
            let last = events.last().map_err(|e| journal_err(&self.path, e))?.map_or(0, |(k, _)| k.value());
            assert_eq!(last, state.last_seq, "state is not the fold of this journal");
            for (offset, record) in records.iter().enumerate() {
                let seq = last + 1 + offset as u64;
                let bytes = event::encode(record);
                events.insert(seq, bytes.as_slice()).map_err(|e| journal_err(&self.path, e))?;
                state.apply(seq, record);
            }
        }
        let snapshot_due = state.last_seq - self.snapshot_seq >= self.snapshot_every;
        if snapshot_due {
            let mut table = txn.open_table(SNAPSHOT).map_err(|e| journal_err(&self.path, e))?;
            let bytes = encode_snapshot(state);
            table.insert(SNAPSHOT_KEY, bytes.as_slice()).map_err(|e| journal_err(&self.path, e))?;
        }
        txn.commit().map_err(|e| journal_err(&self.path, e))?;
        if snapshot_due {
            self.snapshot_seq = state.last_seq;
        }
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
