//! Opening a journal that may be damaged, and finding records in its raw bytes: what
//! `carma journal check` and `carma journal salvage` share. Neither ever writes the file.
//!
//! **Opening.** A read-only open is tried first. When redb says the file needs a repair (the
//! last writer crashed), the repair is made on a temporary copy, never on the file. When redb
//! cannot open the file at all, only the raw scan is left.
//!
//! **The raw scan.** Every version-2 record is a self-delimiting frame (version byte, magic,
//! seq, length, payload, CRC-32; see `event`), and redb stores a value as one contiguous run of
//! bytes, so frames can be found in the file without redb: look for the version byte and the
//! magic, check the length and the checksum. redb writes pages copy-on-write, so an older copy
//! of a page may still hold a record whose current page is damaged; the scan finds those too,
//! and the same seq may turn up several times. Version-1 records (carma 0.1) have no frame and
//! are invisible to the scan.

use std::io::Read;
use std::path::{Path, PathBuf};

use super::event::Record;
use super::frame::{self, FORMAT_VERSION, FRAME_MAGIC, FrameError, RECORD_BYTES_MAX};
use super::store::{Journal, ReadOpen};
use crate::error::{Error, Result};
use crate::id::TaskId;
use crate::scratch::ScratchDir;

/// carma 0.1's records carry no seq, so a damaged key of one reads as a sound record under a
/// wrong key. A key this far past the previous record's is taken for damage, not for a gap.
pub const LEGACY_KEY_JUMP_MAX: u64 = 1 << 16;

/// How the journal could be opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Opened {
    /// redb opened the file itself, read-only.
    ReadOnly,
    /// The last writer crashed; a repaired temporary copy was read.
    RepairedCopy,
    /// redb cannot open the file (its reason).
    Unopenable(String),
}

impl Opened {
    /// The name in `--json` output.
    pub fn name(&self) -> &'static str {
        match self {
            Opened::ReadOnly => "read-only",
            Opened::RepairedCopy => "repaired-copy",
            Opened::Unopenable(_) => "unopenable",
        }
    }
}

/// A journal opened for inspection. Fields drop in order: the journal before its copy.
pub struct Inspected {
    /// The journal as redb opened it (the file or its repaired copy); `None` when it cannot.
    pub journal: Option<Journal>,
    /// How it was opened.
    pub opened: Opened,
    /// Why the file header was refused (see `header`); the copy read then points at the other
    /// (sound) commit slot, and `meta.last_seq` may be older than the newest records.
    pub header_damage: Option<String>,
    _copy: Option<TempCopy>,
}

/// Opens `path` for inspection without ever writing it. Errors only when the file itself
/// cannot be read (missing, permission); damage is reported in [`Opened`].
pub fn open(path: &Path) -> Result<Inspected> {
    readable(path)?;
    let Err(damage) = super::header::verify(path) else { return Ok(open_file(path, None)) };
    let copy = TempCopy::of(path)?;
    let repointed = super::header::point_at_newest_sound_slot(&copy.file)
        .map_err(|e| Error::io(format!("cannot write the copy {}", copy.file.display()), e))?;
    let mut inspected = if repointed {
        let file = copy.file.clone();
        open_file(&file, Some(copy))
    } else {
        Inspected {
            journal: None,
            opened: Opened::Unopenable(damage.clone()),
            header_damage: None,
            _copy: None,
        }
    };
    inspected.header_damage = Some(damage);
    Ok(inspected)
}

/// Opens `path` read-only, or a repaired copy of it after a crashed writer. `copy` is the
/// temporary copy `path` already is, if it is one.
fn open_file(path: &Path, copy: Option<TempCopy>) -> Inspected {
    let opened = |journal, opened, copy| Inspected {
        journal: Some(journal),
        opened,
        header_damage: None,
        _copy: copy,
    };
    match Journal::open_read_only(path) {
        Ok(ReadOpen::Ready(journal)) => opened(journal, Opened::ReadOnly, copy),
        Ok(ReadOpen::NeedsRepair) => {
            let copy = match copy {
                Some(copy) => copy,
                None => match TempCopy::of(path) {
                    Ok(copy) => copy,
                    Err(e) => return unopenable(&e),
                },
            };
            match Journal::open(&copy.file) {
                Ok(journal) => opened(journal, Opened::RepairedCopy, Some(copy)),
                Err(e) => unopenable(&e),
            }
        }
        Err(e) => unopenable(&e),
    }
}

/// The file's size; a missing file is the user's mistake (exit 2), other errors are not.
pub fn readable(path: &Path) -> Result<u64> {
    match std::fs::File::open(path).and_then(|f| f.metadata()) {
        Ok(meta) if meta.is_file() => Ok(meta.len()),
        Ok(_) => Err(Error::BadInput(format!(
            "{} is not a journal file; give --journal a journal file or a state directory",
            path.display()
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(Error::BadInput(format!(
            "no journal at {}; give --journal a journal file or a state directory",
            path.display()
        ))),
        Err(e) => Err(Error::io(format!("cannot read journal {}", path.display()), e)),
    }
}

fn unopenable(error: &Error) -> Inspected {
    let detail = match error {
        Error::Journal { detail, .. } => {
            detail.split("; run `carma journal check`").next().unwrap_or(detail).to_string()
        }
        other => other.to_string(),
    };
    Inspected { journal: None, opened: Opened::Unopenable(detail), header_damage: None, _copy: None }
}

/// redb's own integrity check (the checksums of every reachable page), run on a temporary
/// copy because it repairs what it can. `Ok(Err(why))` when the check fails.
pub fn page_checksums(path: &Path) -> Result<std::result::Result<(), String>> {
    let copy = TempCopy::of(path)?;
    Ok(super::store::check_page_checksums(&copy.file))
}

/// A copy of a journal in a fresh scratch directory of its own (`scratch`: made exclusively,
/// with a random name, in the root-only `private/scratch/` of the journal's state directory),
/// removed on drop; one left by a killed check is swept by the next. The copy is made through
/// descriptors, so nothing planted on the way is written through.
struct TempCopy {
    file: PathBuf,
    // Dropped after `file`'s users: removes the directory and the copy.
    _dir: ScratchDir,
}

impl TempCopy {
    fn of(path: &Path) -> Result<TempCopy> {
        let dir = crate::scratch::for_journal(path, crate::scratch::PRIVATE_PURPOSES[0])?;
        let file = dir.path().join("carma.redb");
        crate::scratch::copy_file_nofollow(path, &file).map_err(|e| {
            Error::io(format!("cannot copy {} to {} for a repair", path.display(), file.display()), e)
        })?;
        Ok(TempCopy { file, _dir: dir })
    }
}

/// What the raw scan found at one offset.
pub enum Found {
    /// A sound frame: its checksum matches, its payload decodes.
    Frame {
        /// Where the frame starts, bytes from the start of the file.
        offset: u64,
        /// The seq in the frame's header.
        seq: u64,
        /// The record it holds.
        record: Box<Record>,
    },
    /// The version byte and magic, but no sound frame; the seq its header claims, and the task
    /// its payload names when that still decodes.
    Damaged {
        /// Where the would-be frame starts, bytes from the start of the file.
        offset: u64,
        /// The seq its header claims (0 when the header is cut off); not to be trusted.
        claimed_seq: u64,
        /// The task its payload names, when that still decodes.
        task: Option<TaskId>,
    },
}

/// Bytes read per step; frames are at most [`RECORD_BYTES_MAX`], which the steps overlap by.
const SCAN_STEP_BYTES: usize = 8 << 20;

/// Scans the file at `path` for version-2 frames, in file order, in bounded memory.
pub fn scan_frames(path: &Path, mut visit: impl FnMut(Found)) -> Result<()> {
    let io = |e| Error::io(format!("cannot read journal {}", path.display()), e);
    let mut file = std::fs::File::open(path).map_err(io)?;
    let mut buf: Vec<u8> = Vec::with_capacity(SCAN_STEP_BYTES + RECORD_BYTES_MAX);
    let mut base = 0u64;
    loop {
        let want = (SCAN_STEP_BYTES + RECORD_BYTES_MAX).saturating_sub(buf.len());
        let read = (&mut file).take(want as u64).read_to_end(&mut buf).map_err(io)?;
        let at_end = read < want;
        // A frame starting before `limit` ends inside `buf`, unless the file ends first.
        let limit = if at_end { buf.len() } else { buf.len() - RECORD_BYTES_MAX };
        scan_buffer(&buf, limit, base, &mut visit);
        if at_end {
            return Ok(());
        }
        buf.drain(..limit);
        base += limit as u64;
    }
}

fn scan_buffer(buf: &[u8], limit: usize, base: u64, visit: &mut impl FnMut(Found)) {
    let mut marker = [0u8; 5];
    marker[0] = FORMAT_VERSION;
    marker[1..].copy_from_slice(&FRAME_MAGIC);
    let mut at = 0;
    while at < limit {
        let Some(found) = buf[at..].windows(marker.len()).position(|w| w == marker) else { return };
        let start = at + found;
        if start >= limit {
            return;
        }
        let offset = base + start as u64;
        match frame::decode_frame(&buf[start..]) {
            Ok((seq, record, _)) => visit(Found::Frame { offset, seq, record: Box::new(record) }),
            Err(FrameError::Incomplete) | Err(FrameError::Invalid(_)) => {
                let claimed_seq = buf
                    .get(start + 5..start + 13)
                    .map_or(0, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
                let task = frame_task(&buf[start..]);
                visit(Found::Damaged { offset, claimed_seq, task })
            }
        }
        // Frames never overlap in a sound file, but a damaged one may hide a sound one.
        at = start + 1;
    }
}

/// The task a damaged frame's payload names, trusting its length field but not its checksum.
fn frame_task(bytes: &[u8]) -> Option<TaskId> {
    let length = u32::from_le_bytes(bytes.get(13..17)?.try_into().ok()?) as usize;
    let end = frame::FRAME_HEADER_BYTES.checked_add(length)?.checked_add(frame::FRAME_TRAILER_BYTES)?;
    frame::probable_task(bytes.get(..end)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::Event;

    fn record(n: u64) -> Record {
        Record { time_ms: n, event: Event::GpuProbeStatus { detail: format!("probe {n}") } }
    }

    /// Goal: the scan finds every sound frame whatever the step boundaries, names a damaged
    /// one with the seq its header claims, and is not fooled by the magic alone.
    #[test]
    fn scan_finds_frames_across_steps_and_flags_damage() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bytes");
        let mut bytes = vec![0u8; SCAN_STEP_BYTES - 10];
        let first = frame::encode(1, &record(1));
        bytes.extend_from_slice(&first);
        bytes.extend_from_slice(b"\x02crma garbage");
        let mut second = frame::encode(2, &record(2));
        let last = second.len() - 1;
        second[last] ^= 1;
        bytes.extend_from_slice(&second);
        bytes.extend(std::iter::repeat_n(7u8, RECORD_BYTES_MAX + 3));
        bytes.extend_from_slice(&frame::encode(3, &record(3)));
        std::fs::write(&path, &bytes).unwrap();
        let mut sound = Vec::new();
        let mut damaged = Vec::new();
        scan_frames(&path, |found| match found {
            Found::Frame { offset, seq, record } => sound.push((offset, seq, record.time_ms)),
            Found::Damaged { claimed_seq, .. } => damaged.push(claimed_seq),
        })
        .unwrap();
        assert_eq!(sound.iter().map(|s| (s.1, s.2)).collect::<Vec<_>>(), [(1, 1), (3, 3)]);
        assert_eq!(sound[0].0, (SCAN_STEP_BYTES - 10) as u64);
        assert_eq!(damaged.len(), 2, "the bare magic and the frame with a bad checksum");
        assert_eq!(damaged[1], 2);
    }
}
