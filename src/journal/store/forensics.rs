//! Inspection for `carma journal check` and `carma journal salvage`: reading a journal that may
//! be damaged, which never stops at the first problem and reports instead of failing.

use std::path::Path;

use redb::{Database, ReadableDatabase, ReadableTable};

use super::{
    EVENTS, Journal, META, META_LAST_SEQ, SNAPSHOT, SNAPSHOT_KEY, SNAPSHOT_VERSION, builder, decode_snapshot,
    journal_err, short_detail,
};
use crate::error::Result;
use crate::journal::guard::guard;
use crate::journal::state::State;

/// Keys [`Journal::walk_events`] probes one by one past a failure before giving up.
const PROBES_MAX: u32 = 1 << 16;

/// How the snapshot stored in a journal reads (for `carma journal check`).
#[derive(Debug, Clone, PartialEq)]
pub enum SnapshotBytes {
    /// No snapshot (a young journal, or one written before snapshots).
    Absent,
    /// Written by another carma in another encoding: not damage, rebuilt by the next tick.
    OtherVersion(u8),
    /// The version is this carma's but the checksum or the payload is wrong.
    Damaged,
    /// The snapshot decodes and its checksum matches: the State it holds.
    Sound(Box<State>),
}

/// Inspection for `carma journal check` and `carma journal salvage`: these read a journal
/// that may be damaged, so they never stop at the first problem, and report instead of fail.
impl Journal {
    /// `meta.last_seq`: the highest seq committed; `None` in journals older than the key.
    pub fn committed_last_seq(&self) -> Result<Option<u64>> {
        guard(&self.path, || {
            let txn = self.begin_read()?;
            let meta = txn.open_table(META).map_err(|e| journal_err(&self.path, e))?;
            let value = meta.get(META_LAST_SEQ).map_err(|e| journal_err(&self.path, e))?;
            Ok(value.and_then(|v| v.value().try_into().ok().map(u64::from_le_bytes)))
        })
    }

    /// The stored snapshot, classified.
    pub fn snapshot_bytes(&self) -> Result<SnapshotBytes> {
        guard(&self.path, || {
            let txn = self.begin_read()?;
            let table = match txn.open_table(SNAPSHOT) {
                Ok(t) => t,
                Err(redb::TableError::TableDoesNotExist(_)) => return Ok(SnapshotBytes::Absent),
                Err(e) => return Err(journal_err(&self.path, e)),
            };
            let Some(value) = table.get(SNAPSHOT_KEY).map_err(|e| journal_err(&self.path, e))? else {
                return Ok(SnapshotBytes::Absent);
            };
            let bytes = value.value();
            Ok(match bytes.first() {
                Some(&v) if v != SNAPSHOT_VERSION => SnapshotBytes::OtherVersion(v),
                _ => decode_snapshot(bytes)
                    .map_or(SnapshotBytes::Damaged, |s| SnapshotBytes::Sound(Box::new(s))),
            })
        })
    }

    /// Visits every stored `(seq, bytes)` of the events table in key order, checking nothing.
    /// Where redb fails (a damaged page), the walk goes on key by key up to `upper_seq` and
    /// returns the ranges of seqs redb could not read, with redb's reason.
    pub fn walk_events(&self, upper_seq: u64, mut visit: impl FnMut(u64, &[u8])) -> Vec<(u64, u64, String)> {
        let mut unreadable: Vec<(u64, u64, String)> = Vec::new();
        let mut next = 1u64;
        loop {
            // In a child process: see `isolate` (damage can make redb abort, not just panic).
            let from = next;
            let walked = crate::journal::isolate::stream_records(
                &self.path,
                |emit| {
                    let txn = self.begin_read()?;
                    let events = txn.open_table(EVENTS).map_err(|e| journal_err(&self.path, e))?;
                    for entry in events.range(from..).map_err(|e| journal_err(&self.path, e))? {
                        let (key, value) = entry.map_err(|e| journal_err(&self.path, e))?;
                        emit(key.value(), value.value());
                    }
                    Ok(())
                },
                &mut |seq, bytes| {
                    visit(seq, bytes);
                    // A damaged key may come out of order; never walk backwards.
                    next = next.max(seq.saturating_add(1));
                },
            );
            let Err(error) = walked else { return unreadable };
            // Probe key by key until one reads, then walk on from there; a bound that damage
            // made absurd cannot turn this into a walk over billions of keys.
            let mut misses = 0u32;
            loop {
                if next > upper_seq || misses >= PROBES_MAX {
                    if next <= upper_seq {
                        unreadable.push((next, upper_seq, short_detail(&error)));
                    }
                    return unreadable;
                }
                misses += 1;
                let seq = next;
                next = next.saturating_add(1);
                let mut value = None;
                let got = crate::journal::isolate::stream_records(
                    &self.path,
                    |emit| {
                        let txn = self.begin_read()?;
                        let events = txn.open_table(EVENTS).map_err(|e| journal_err(&self.path, e))?;
                        if let Some(v) = events.get(seq).map_err(|e| journal_err(&self.path, e))? {
                            emit(seq, v.value());
                        }
                        Ok(())
                    },
                    &mut |_, bytes| value = Some(bytes.to_vec()),
                )
                .map(|()| value);
                match got {
                    Ok(Some(bytes)) => {
                        visit(seq, &bytes);
                        break;
                    }
                    Ok(None) => {}
                    Err(e) => match unreadable.last_mut() {
                        Some(last) if last.1.saturating_add(1) == seq => last.1 = seq,
                        _ => unreadable.push((seq, seq, short_detail(&e))),
                    },
                }
            }
        }
    }

    /// The highest key of the events table, when redb can read it.
    pub fn last_key(&self) -> Option<u64> {
        self.last_seq().ok()
    }
}

/// redb's integrity check on `copy`, a throw-away copy of a journal: it walks every reachable
/// page and compares it with the checksum its parent (or the file header) keeps, which catches
/// a changed byte even in carma 0.1's records that carry no checksum of their own. It may
/// repair the copy. `Err` says why the check failed.
///
/// redb's answer alone over-reports: `check_integrity` also says "repaired" when it only
/// rebuilt the allocator's free list (pages an earlier transaction freed but the file's saved
/// allocator state still counts), which a sound journal written by a tick shows. So a repair
/// counts as damage only when what the tables hold changed with it: a rollback to an older
/// commit, or a table rebuilt past a bad page.
pub fn check_page_checksums(copy: &Path) -> std::result::Result<(), String> {
    let outcome = guard(copy, || {
        let mut db = builder().open(copy).map_err(|e| journal_err(copy, e))?;
        let before = tables_digest(&db, copy)?;
        let clean = db.check_integrity().map_err(|e| journal_err(copy, e))?;
        Ok(clean || tables_digest(&db, copy)? == before)
    });
    match outcome {
        Ok(true) => Ok(()),
        Ok(false) => {
            Err("redb's page checksums do not match: a page of the file changed after it was written".into())
        }
        Err(e) => Err(format!("redb's integrity check failed: {}", short_detail(&e))),
    }
}

/// A digest of every key and value of the journal's tables (a missing table counts as empty).
fn tables_digest(db: &Database, path: &Path) -> Result<u128> {
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    let txn = db.begin_read().map_err(|e| journal_err(path, e))?;
    match txn.open_table(EVENTS) {
        Ok(events) => {
            for entry in events.iter().map_err(|e| journal_err(path, e))? {
                let (key, value) = entry.map_err(|e| journal_err(path, e))?;
                hasher.update(&key.value().to_le_bytes());
                hasher.update(&(value.value().len() as u64).to_le_bytes());
                hasher.update(value.value());
            }
        }
        Err(redb::TableError::TableDoesNotExist(_)) => {}
        Err(e) => return Err(journal_err(path, e)),
    }
    for table in [META, SNAPSHOT] {
        hasher.update(b"|");
        match txn.open_table(table) {
            Ok(rows) => {
                for entry in rows.iter().map_err(|e| journal_err(path, e))? {
                    let (key, value) = entry.map_err(|e| journal_err(path, e))?;
                    hasher.update(key.value().as_bytes());
                    hasher.update(&(value.value().len() as u64).to_le_bytes());
                    hasher.update(value.value());
                }
            }
            Err(redb::TableError::TableDoesNotExist(_)) => {}
            Err(e) => return Err(journal_err(path, e)),
        }
    }
    Ok(hasher.digest128())
}
