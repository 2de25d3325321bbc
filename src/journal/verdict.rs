//! Whether a writer may append to a journal: one verdict, shared by `carma journal check` and
//! every write session (`session::write`, which the tick uses).
//!
//! **The rule.** A journal is sound when [`check`](super::check) finds no problem ([`check::sound`](super::check::sound));
//! a writer refuses, before it opens the file for writing, a journal that the check would call
//! damaged, with
//! [`Error::WriteRefused`] (exit 3) naming the first damaged record or else the first
//! problem. Appending to a damaged journal
//! would bury the damage under new commits (redb's copy-on-write reuses freed pages, which may
//! hold the only intact copy of a damaged record), and salvage works best on the file as the
//! damage left it.
//!
//! **Why the tick did not see it.** The tick reads the header (whose current commit slot
//! `header` checks), `meta`, the snapshot and the records after it (each with its CRC and seq),
//! through the branch pages on the way to them. Damage anywhere else was invisible to it: a
//! record before the snapshot, a snapshot whose checksum fails (the tick quietly folded from
//! seq 1) or that differs from the fold, a page of the btree the tail does not pass through,
//! and what only redb's page checksums see. Those are the copies the check flagged while the
//! tick went on appending.
//!
//! **What each session pays.** Reading every record and every page is what the check does,
//! and a tick every few seconds on a journal of hundreds of thousands of records cannot. So the
//! full check runs only when the file may have changed since it was last known sound, and a
//! small *seal* next to the journal (`carma.redb.seal`) records what carma left: the file's
//! device, inode, size, mtime and ctime and a digest of its header page, taken after each
//! session closed the file, under the lock. A session whose seal matches knows the file is the
//! one carma's last session closed, which was sound; it verifies only what it reads (the header
//! checksum, the snapshot's checksum, now a refusal too, and every tail record), through a
//! read-only handle first, so that a refusal writes nothing (redb commits its allocator state
//! when it closes a file opened for writing); the State it loaded is handed to the writable
//! open through a `StateCache`, so the State is decoded once. Anything else
//! gets the full check before the next append: a file changed by any other program (the kernel
//! sets ctime on every write and no program can set it back), a writer that died before
//! sealing (a crash: the seal then no longer matches), a new file at the path (inode), a
//! missing or unreadable seal, and a seal older than [`FULL_CHECK_EVERY_MS`].
//!
//! **Racy timestamps.** A write in the same clock tick as the seal could leave ctime equal to
//! the sealed one. The seal is therefore renamed into place only once a file written after the
//! journal closed has a later ctime than the journal's, so any later write of the journal gets
//! a later ctime too (the clock waits a few ms at most; if it does not move, no seal is left).
//!
//! **The limit.** Damage that bypasses the file system (bit rot on the disk, a write to the
//! block device) changes no ctime. If it lies outside what the tick reads, the tick sees it
//! only at the next full check, at most [`FULL_CHECK_EVERY_MS`] later, or when the damage
//! reaches a record or page it reads. A clock set backwards can also defeat the ctime test.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::check::{self, CheckReport, Problem};
use super::store::{Journal, ReadOpen, StateCache};
use crate::error::{Error, Result};

/// A full check at least this often, even of a file only carma wrote: it bounds how long damage
/// that changed no timestamp (bit rot) goes unseen by writers.
pub const FULL_CHECK_EVERY_MS: u64 = 24 * 60 * 60 * 1000;

/// First word of a seal; a seal of another version is ignored (one full check).
const SEAL_TAG: &str = "carma-seal/1";
/// Bytes of the journal's start covered by the seal's digest: redb's header page.
const HEADER_BYTES: usize = 4096;
/// Tries, 1 ms apart, for the file-system clock to move past the journal's ctime.
const RACY_TRIES: u32 = 50;

/// How a write session came to trust the journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Basis {
    /// The seal matched: the file is as carma's last session left it; `verified_ms` is when
    /// it was last checked in full.
    Sealed {
        /// When the journal was last checked in full, Unix ms, as the seal records.
        verified_ms: u64,
    },
    /// The full check ran now and found it sound.
    Checked {
        /// When this session checked it, Unix ms.
        verified_ms: u64,
    },
    /// There is no file: opening it fails as before, and nothing is sealed.
    NoFile,
}

/// The verdict before a write session opens `path` for writing: `Err(Error::WriteRefused)`
/// when the check calls it damaged, the basis of trust otherwise. Nothing is written either
/// way. When the seal vouches for the file, only what the writer reads is verified, through a
/// read-only handle, and the State it loaded is left in `cache` for the writable open;
/// otherwise the full check runs (see the module docs).
pub fn before_write(path: &Path, cache: &mut StateCache) -> Result<Basis> {
    let Some(found) = Fingerprint::of(path) else { return Ok(Basis::NoFile) };
    let now = now_ms();
    let outcome = match read_seal(path).filter(|seal| seal.vouches_for(&found, now)) {
        Some(seal) => preload(path, cache).map(|()| Basis::Sealed { verified_ms: seal.verified_ms }),
        None => full_check(path).map(|()| Basis::Checked { verified_ms: now }),
    };
    if matches!(outcome, Err(Error::WriteRefused { .. })) {
        unseal(path);
    }
    outcome
}

fn full_check(path: &Path) -> Result<()> {
    let report = check::examine(path)?;
    refusal(path, &report).map_or(Ok(()), Err)
}

/// Loads the State read-only, held to the check's standard, into `cache`. A writable open that
/// refused would already have written: redb commits its allocator state when it closes a file
/// opened for writing. A file that needs a repair (not one carma closed, so hardly one the seal
/// vouches for) is left to the writable open, whose load is held to the same standard.
fn preload(path: &Path, cache: &mut StateCache) -> Result<()> {
    let ReadOpen::Ready(mut journal) = Journal::open_read_only(path)? else { return Ok(()) };
    let loaded = journal.load_state_cached(cache);
    let state = self::loaded(&journal, loaded)?;
    journal.keep_state(state, cache);
    Ok(())
}

/// The error a writer gives for a check `report`, `None` when it is sound: it names the first
/// damaged record, or else the first problem. Records of a newer carma alone are not damage:
/// they keep their own error.
pub fn refusal(path: &Path, report: &CheckReport) -> Option<Error> {
    let first = report.problems.first()?;
    if report.problems.iter().all(|p| p.kind == "newer-format") {
        let detail = first.detail.strip_prefix(check::NEWER_PREFIX).unwrap_or(&first.detail);
        return Some(Error::NewerRecord {
            path: path.to_path_buf(),
            seq: first.first_seq.unwrap_or(0),
            detail: detail.to_string(),
        });
    }
    // A record names the damage better than a page does: redb's page check fails too when a
    // record's bytes changed.
    let named = report.problems.iter().find(|p| p.first_seq.is_some()).unwrap_or(first);
    let mut reason = describe(named);
    let more = report.problems.len() - 1;
    if more > 0 {
        reason.push_str(&format!(", and {more} more problem{}", if more == 1 { "" } else { "s" }));
    }
    Some(Error::WriteRefused { path: path.to_path_buf(), reason })
}

/// One problem as the refusal names it: the records, their task, what is wrong.
fn describe(problem: &Problem) -> String {
    let task = problem.task.as_ref().map(|t| format!(" (task {t})")).unwrap_or_default();
    match (problem.first_seq, problem.last_seq) {
        (Some(first), Some(last)) if first != last => {
            format!("records {first} to {last}{task}: {}", problem.detail)
        }
        (Some(seq), _) => format!("record {seq}{task}: {}", problem.detail),
        _ => problem.detail.clone(),
    }
}

/// The State a write session loaded, or its refusal: what the writer reads is held to the
/// check's standard (a damaged record or snapshot refuses, with the check's words).
pub fn loaded<S>(journal: &Journal, loaded: Result<S>) -> Result<S> {
    let state = loaded.map_err(|error| match error {
        Error::DamagedRecord { path, seq, task, detail } => {
            let problem = Problem::at(seq, task, detail);
            Error::WriteRefused { path, reason: describe(&problem) }
        }
        other => other,
    })?;
    if journal.snapshot_damaged() {
        return Err(Error::WriteRefused {
            path: journal.path().to_path_buf(),
            reason: check::SNAPSHOT_DAMAGED.to_string(),
        });
    }
    Ok(state)
}

/// After a write session closed `path` (still under the lock): seals the file when the session
/// succeeded, and drops the seal otherwise, so that the next writer checks in full.
pub fn after_write(path: &Path, basis: Basis, succeeded: bool) {
    let verified_ms = match basis {
        Basis::Sealed { verified_ms } | Basis::Checked { verified_ms } => verified_ms,
        Basis::NoFile => return unseal(path),
    };
    if succeeded { seal(path, verified_ms) } else { unseal(path) }
}

/// Seals a journal just created: an empty journal is sound by construction.
pub fn seal_new(path: &Path) {
    seal(path, now_ms());
}

/// Where the seal of the journal at `path` lives.
pub fn seal_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".seal");
    path.with_file_name(name)
}

/// Best effort: a seal that cannot be written costs the next writer a full check, nothing else.
fn seal(path: &Path, verified_ms: u64) {
    if write_seal(path, verified_ms).is_err() {
        unseal(path);
    }
}

fn unseal(path: &Path) {
    let _ = std::fs::remove_file(seal_path(path));
}

fn write_seal(path: &Path, verified_ms: u64) -> std::io::Result<()> {
    let Some(found) = Fingerprint::of(path) else { return Err(std::io::ErrorKind::NotFound.into()) };
    let text = Seal { found, verified_ms }.to_text();
    let mut tmp = seal_path(path).into_os_string();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    for _ in 0..RACY_TRIES {
        std::fs::write(&tmp, &text)?;
        // See "Racy timestamps" in the module docs.
        if ctime_ns(&std::fs::metadata(&tmp)?) > found.ctime_ns {
            return std::fs::rename(&tmp, seal_path(path));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let _ = std::fs::remove_file(&tmp);
    Err(std::io::ErrorKind::TimedOut.into())
}

/// What identifies the file carma last closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fingerprint {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
    /// XXH3-64 of the header page: the commit slots, which every commit rewrites.
    header: u64,
}

impl Fingerprint {
    fn of(path: &Path) -> Option<Fingerprint> {
        use std::io::Read;
        let file = std::fs::File::open(path).ok()?;
        let meta = file.metadata().ok()?;
        let mut header = Vec::with_capacity(HEADER_BYTES);
        file.take(HEADER_BYTES as u64).read_to_end(&mut header).ok()?;
        Some(Fingerprint {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.len(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
            ctime_ns: ctime_ns(&meta),
            header: xxhash_rust::xxh3::xxh3_64(&header),
        })
    }
}

fn ctime_ns(meta: &std::fs::Metadata) -> i128 {
    i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec())
}

/// The seal file: one line, `carma-seal/1 DEV INO SIZE MTIME_NS CTIME_NS HEADER VERIFIED_MS`.
#[derive(Debug, PartialEq, Eq)]
struct Seal {
    found: Fingerprint,
    verified_ms: u64,
}

impl Seal {
    fn to_text(&self) -> String {
        let f = &self.found;
        format!(
            "{SEAL_TAG} {} {} {} {} {} {} {}\n",
            f.dev, f.ino, f.size, f.mtime_ns, f.ctime_ns, f.header, self.verified_ms
        )
    }

    fn parse(text: &str) -> Option<Seal> {
        let mut words = text.split_whitespace();
        if words.next()? != SEAL_TAG {
            return None;
        }
        let mut next = || words.next();
        let found = Fingerprint {
            dev: next()?.parse().ok()?,
            ino: next()?.parse().ok()?,
            size: next()?.parse().ok()?,
            mtime_ns: next()?.parse().ok()?,
            ctime_ns: next()?.parse().ok()?,
            header: next()?.parse().ok()?,
        };
        let verified_ms = next()?.parse().ok()?;
        next().is_none().then_some(Seal { found, verified_ms })
    }

    /// True when the file is the one sealed and its last full check is recent enough.
    fn vouches_for(&self, found: &Fingerprint, now_ms: u64) -> bool {
        self.found == *found && now_ms.saturating_sub(self.verified_ms) < FULL_CHECK_EVERY_MS
    }
}

fn read_seal(path: &Path) -> Option<Seal> {
    Seal::parse(&std::fs::read_to_string(seal_path(path)).ok()?)
}

fn now_ms() -> u64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::home::Home;
    use crate::journal::{Event, Record};
    use crate::session;

    fn probe(n: u64) -> Record {
        Record { time_ms: n, event: Event::GpuProbeStatus { detail: format!("probe {n}") } }
    }

    /// A state directory whose journal holds 30 records and a snapshot at seq 20, sealed as a
    /// write session leaves it.
    fn home_with_snapshot() -> (tempfile::TempDir, Home) {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path().join("home")).without_view();
        crate::session::init(&home, "").unwrap();
        let mut journal = Journal::open(&home.journal_path()).unwrap();
        journal.set_snapshot_every(20);
        let mut state = journal.load_state().unwrap();
        for n in 1..=30 {
            journal.append(&[probe(n)], &mut state).unwrap();
        }
        drop(journal);
        seal(&home.journal_path(), now_ms());
        (dir, home)
    }

    fn append_one(home: &Home) -> Result<()> {
        session::write(home, Duration::from_secs(5), |journal, state| journal.append(&[probe(99)], state))
    }

    /// Flips a bit in the payload of every copy of record `seq`'s frame.
    fn damage_record(path: &Path, seq: u64) {
        let mut bytes = std::fs::read(path).unwrap();
        let mut marker = vec![super::super::frame::FORMAT_VERSION];
        marker.extend_from_slice(&super::super::frame::FRAME_MAGIC);
        marker.extend_from_slice(&seq.to_le_bytes());
        let copies: Vec<usize> = (0..bytes.len()).filter(|&at| bytes[at..].starts_with(&marker)).collect();
        assert!(!copies.is_empty());
        for at in copies {
            bytes[at + 20] ^= 0x10;
        }
        std::fs::write(path, &bytes).unwrap();
    }

    /// Goal: a journal carma sealed is trusted without the full check, and the same file after
    /// any other program wrote it gets the full check and is refused, untouched, for a record
    /// the tick never reads (before the snapshot). Before this, that write went through.
    #[test]
    fn a_changed_file_gets_the_full_check_and_a_damaged_one_is_refused_untouched() {
        let (_dir, home) = home_with_snapshot();
        let path = home.journal_path();
        assert!(matches!(before_write(&path, &mut StateCache::default()).unwrap(), Basis::Sealed { .. }));
        append_one(&home).unwrap();
        assert!(
            matches!(before_write(&path, &mut StateCache::default()).unwrap(), Basis::Sealed { .. }),
            "a session reseals"
        );
        std::fs::write(&path, std::fs::read(&path).unwrap()).unwrap();
        assert!(
            matches!(before_write(&path, &mut StateCache::default()).unwrap(), Basis::Checked { .. }),
            "same bytes, rewritten"
        );
        damage_record(&path, 5);
        let before = std::fs::read(&path).unwrap();
        let refused = append_one(&home).unwrap_err();
        assert_eq!(refused.exit_code(), crate::error::EXIT_DAMAGED);
        let message = refused.to_string();
        let expected = format!("journal {} is damaged (record 5: ", path.display());
        assert!(message.starts_with(&expected), "{message}");
        assert!(message.ends_with("; nothing was written; run `carma journal check` for details and `carma journal salvage` to recover"), "{message}");
        assert_eq!(std::fs::read(&path).unwrap(), before, "the refused journal is unchanged");
        assert!(!seal_path(&path).exists(), "no seal vouches for a damaged file");
    }

    /// Goal: what the writer reads is held to the check's standard even when the seal vouches
    /// for the file (damage that kept every timestamp: bit rot). A damaged snapshot, which the
    /// tick used to skip quietly, and a damaged tail record are refused with the check's words,
    /// and the file is left byte for byte as it was.
    #[test]
    fn a_sealed_file_with_damage_the_writer_reads_is_refused() {
        for (seq, reason) in [(20, SNAPSHOT_DAMAGED_REASON), (25, "record 25: ")] {
            let (_dir, home) = home_with_snapshot();
            let path = home.journal_path();
            if seq == 20 {
                damage_snapshot(&path);
            } else {
                damage_record(&path, seq);
            }
            seal(&path, now_ms());
            let before = std::fs::read(&path).unwrap();
            let message = append_one(&home).unwrap_err().to_string();
            let expected = format!("journal {} is damaged ({reason}", path.display());
            assert!(message.starts_with(&expected), "{message}");
            assert_eq!(std::fs::read(&path).unwrap(), before, "read-only until the verdict");
            assert!(!check::check(&path).unwrap().sound, "the check agrees");
        }
    }

    const SNAPSHOT_DAMAGED_REASON: &str = check::SNAPSHOT_DAMAGED;

    /// Flips a bit inside the snapshot's payload (found by its version byte and checksum).
    fn damage_snapshot(path: &Path) {
        let ReadOpen::Ready(journal) = Journal::open_read_only(path).unwrap() else { panic!("repair") };
        let super::super::store::SnapshotBytes::Sound(state) = journal.snapshot_bytes().unwrap() else {
            panic!("no snapshot")
        };
        drop(journal);
        let payload = bincode::serde::encode_to_vec(&*state, bincode::config::standard()).unwrap();
        let mut bytes = std::fs::read(path).unwrap();
        let at = (0..bytes.len()).find(|&at| bytes[at..].starts_with(&payload)).expect("snapshot bytes");
        bytes[at + payload.len() / 2] ^= 0x01;
        std::fs::write(path, &bytes).unwrap();
    }

    /// Goal: a seal is read back as written, and anything else (another version, a word too
    /// many or too few, garbage) vouches for nothing; nor does an old full check.
    #[test]
    fn seals_round_trip_and_nothing_else_parses() {
        let found = Fingerprint { dev: 1, ino: 2, size: 3, mtime_ns: -4, ctime_ns: 5, header: 6 };
        let seal = Seal { found, verified_ms: 7 };
        assert_eq!(Seal::parse(&seal.to_text()), Some(Seal { found, verified_ms: 7 }));
        let text = seal.to_text();
        for bad in [text.replace("/1", "/2"), format!("{text} 8"), text.replace(" 7\n", ""), "x".into()] {
            assert_eq!(Seal::parse(&bad), None, "{bad}");
        }
        assert!(seal.vouches_for(&found, 7 + FULL_CHECK_EVERY_MS - 1));
        assert!(!seal.vouches_for(&found, 7 + FULL_CHECK_EVERY_MS), "a day without a full check");
        assert!(!seal.vouches_for(&Fingerprint { ctime_ns: 6, ..found }, 7));
    }
}
