//! The published read model: what every user reads, without the lock and without ever
//! waiting for a tick.
//!
//! redb allows one process per file and the tick holds the journal's lock for the whole tick,
//! so readers that open the journal wait for ticks; and a journal every user could open is a
//! journal every user could lock, stopping every tick. So the journal is root's alone (0600)
//! and each writer, while it still holds the lock, *publishes* what it committed into
//! `HOME/view/`, which every user may read:
//!
//! ```text
//! view/events.log   every journal record, as the same checksummed frames, in seq order
//! view/state.bin    the State at some seq and the log offset after it (a cache)
//! view/head         where publishing stopped: seq, offsets of the last frame (the writer's)
//! ```
//!
//! The log only ever grows by appends, and a frame is checksummed, so a reader that reads
//! while the writer appends sees a prefix of complete frames and a torn tail it ignores: a
//! consistent picture of the journal at some seq, taken without any lock. `state.bin` is
//! replaced by rename, so a reader sees the old or the new one whole. The view holds no secret:
//! the journal has none since carma 0.2 (environment values stay in `private/`), and carma 0.1's
//! records are re-encoded without theirs.
//!
//! The view is derived data: the writer checks `head` against the log and the journal on every
//! publish, and rebuilds the view from the journal when they disagree (a crash between an
//! append and the head update, a salvaged journal, a deleted view). Nothing here is fsynced.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::home::Home;
use crate::journal::frame::{self, FrameError, LEGACY_FORMAT_VERSION};
use crate::journal::{Event, Journal, Record, State};

pub mod lookup;

const LOG_FILE: &str = "events.log";
const STATE_FILE: &str = "state.bin";
const HEAD_FILE: &str = "head";
/// Version of `state.bin`'s encoding; another version is ignored (the log is folded instead).
/// Version 3: State with the workflow fields (issue 12: `Task::held`, the reservation, pending
/// notices, the specs' workflow fields) beside the workload histories (issue 15). Version 4:
/// a task's life as one `Phase` (issue 22) or, on another branch, the mail types and the mails
/// due (issue 23). Version 5: both. Version 6: an attempt's `memory_exceeded` (issue 32). Version 7: its figures and share
/// source, the raised figures of workloads and arrays (issue 40).
const STATE_VERSION: u8 = 7;
/// Fewest records between two `state.bin` rewrites.
const STATE_EVERY: u64 = 1024;
/// How often a reader starts again when the view was rebuilt under it.
const READ_ATTEMPTS: u32 = 3;

/// Where publishing stopped, kept by the writer.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
struct Head {
    /// Last seq in the log (0: empty).
    seq: u64,
    /// Start of that seq's frame, and the log's length after it.
    frame_start: u64,
    end: u64,
    /// `state.bin`'s seq and encoded size, and the log bytes appended since it.
    state_seq: u64,
    state_bytes: u64,
    since_state_bytes: u64,
}

fn log_path(home: &Home) -> PathBuf {
    home.view_dir().join(LOG_FILE)
}

fn state_path(home: &Home) -> PathBuf {
    home.view_dir().join(STATE_FILE)
}

fn head_path(home: &Home) -> PathBuf {
    home.view_dir().join(HEAD_FILE)
}

/// Publishes every record of `journal` not yet in the view; `state` is the journal's fold.
/// Called by every journal writer while it holds the lock.
pub fn publish(home: &Home, journal: &Journal, state: &State) -> Result<()> {
    ensure_dir(&home.view_dir())?;
    let last = journal.last_seq()?;
    let mut head = read_head(home);
    let mut log = open_log(home)?;
    if !head_is_sound(&head, &mut log, journal)? || head.seq > last {
        head = Head::default();
        log.set_len(0).map_err(|e| io_err("truncate", &log_path(home), e))?;
        let _ = fs::remove_file(state_path(home));
    }
    log.set_len(head.end).map_err(|e| io_err("truncate", &log_path(home), e))?;
    log.seek(SeekFrom::Start(head.end)).map_err(|e| io_err("seek", &log_path(home), e))?;
    let mut out = std::io::BufWriter::new(&mut log);
    let mut position = head.end;
    let mut appended = 0u64;
    journal.for_each_frame(head.seq + 1, |seq, raw| {
        let frame = public_frame(seq, raw, journal)?;
        out.write_all(&frame).map_err(|e| io_err("write", &log_path(home), e))?;
        head.seq = seq;
        head.frame_start = position;
        position += frame.len() as u64;
        appended += frame.len() as u64;
        Ok(true)
    })?;
    out.flush().map_err(|e| io_err("write", &log_path(home), e))?;
    drop(out);
    head.end = position;
    head.since_state_bytes += appended;
    let state_due = state.last_seq == head.seq
        && state.last_seq.saturating_sub(head.state_seq) >= STATE_EVERY
        && head.since_state_bytes >= head.state_bytes;
    if state_due {
        head.state_bytes = write_state(home, state, head.end)?;
        head.state_seq = state.last_seq;
        head.since_state_bytes = 0;
    }
    write_head(home, &head)
}

/// The frame readers get for a journal record: the record's own bytes, except carma 0.1's
/// records, which are re-encoded (their Submitted held environment values, their OomDetected
/// the job's log line).
fn public_frame(seq: u64, raw: &[u8], journal: &Journal) -> Result<Vec<u8>> {
    if raw.first() != Some(&LEGACY_FORMAT_VERSION) {
        return Ok(raw.to_vec());
    }
    let mut record = journal.decode_record(seq, raw)?;
    if let Event::OomDetected { evidence, .. } = &mut record.event {
        // 0.1 wrote "signature: line"; the line is the job's output.
        if let Some((signature, _)) = evidence.split_once(": ") {
            *evidence = signature.to_string();
        }
    }
    Ok(frame::encode(seq, &record))
}

/// Whether `head` still describes the log and the journal: the frame it names is in the log
/// where it says, and is the journal's frame for that seq.
fn head_is_sound(head: &Head, log: &mut File, journal: &Journal) -> Result<bool> {
    if head.seq == 0 {
        return Ok(head.end == 0);
    }
    let length = log.metadata().map(|m| m.len()).unwrap_or(0);
    if head.end > length || head.frame_start >= head.end {
        return Ok(false);
    }
    let mut frame = vec![0; (head.end - head.frame_start) as usize];
    if log.seek(SeekFrom::Start(head.frame_start)).is_err() || log.read_exact(&mut frame).is_err() {
        return Ok(false);
    }
    let mut in_journal = None;
    journal.for_each_frame(head.seq, |seq, raw| {
        in_journal = Some(public_frame(seq, raw, journal)?);
        Ok(false)
    })?;
    Ok(in_journal.as_deref() == Some(frame.as_slice()))
}

fn read_head(home: &Home) -> Head {
    fs::read(head_path(home)).ok().and_then(|bytes| serde_json::from_slice(&bytes).ok()).unwrap_or_default()
}

fn write_head(home: &Home, head: &Head) -> Result<()> {
    let bytes = serde_json::to_vec(head).unwrap_or_default();
    replace(&head_path(home), &bytes, 0o600)
}

fn open_log(home: &Home) -> Result<File> {
    let path = log_path(home);
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .open(&path)
        .map_err(|e| io_err("open", &path, e))
}

fn write_state(home: &Home, state: &State, offset: u64) -> Result<u64> {
    let payload = bincode::serde::encode_to_vec(state, bincode::config::standard())
        .unwrap_or_else(|e| unreachable!("encoding the state: {e}"));
    let mut bytes = Vec::with_capacity(payload.len() + 21);
    bytes.push(STATE_VERSION);
    let mut body = Vec::with_capacity(payload.len() + 16);
    body.extend_from_slice(&state.last_seq.to_le_bytes());
    body.extend_from_slice(&offset.to_le_bytes());
    body.extend_from_slice(&payload);
    bytes.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    bytes.extend_from_slice(&body);
    replace(&state_path(home), &bytes, 0o644)?;
    Ok(bytes.len() as u64)
}

/// `state.bin`'s State and the log offset after its seq, when there is a sound one.
fn read_state(home: &Home) -> Option<(State, u64)> {
    let bytes = fs::read(state_path(home)).ok()?;
    let (&version, rest) = bytes.split_first()?;
    if version != STATE_VERSION || rest.len() < 20 {
        return None;
    }
    let (crc, body) = rest.split_at(4);
    if crc32fast::hash(body).to_le_bytes() != crc {
        return None;
    }
    let seq = u64::from_le_bytes(body[..8].try_into().ok()?);
    let offset = u64::from_le_bytes(body[8..16].try_into().ok()?);
    let (state, used): (State, usize) =
        bincode::serde::decode_from_slice(&body[16..], bincode::config::standard()).ok()?;
    (used == body.len() - 16 && state.last_seq == seq).then_some((state, offset))
}

/// Writes `path` by rename, so a reader sees the old file or the new one whole.
fn replace(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    let written = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&tmp)
        .and_then(|mut f| f.write_all(bytes))
        .and_then(|()| fs::rename(&tmp, path));
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written.map_err(|e| io_err("write", path, e))
}

fn ensure_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    match fs::DirBuilder::new().mode(0o755).create(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(io_err("create", dir, e)),
    }
}

fn io_err(op: &str, path: &Path, e: std::io::Error) -> Error {
    Error::io(format!("cannot {op} {}", path.display()), e)
}

// ---------------------------------------------------------------------------------------
// Readers
// ---------------------------------------------------------------------------------------

/// Whether `home` has a published view (the simulator's scratch homes do not).
pub fn is_published(home: &Home) -> bool {
    log_path(home).exists()
}

/// The State as last published. Never takes a lock and never waits; an empty State when
/// nothing was published yet.
pub fn load(home: &Home) -> Result<State> {
    home.require_initialized()?;
    for _ in 0..READ_ATTEMPTS {
        let (mut state, offset) = read_state(home).unwrap_or_default();
        let outcome = fold_log(home, offset, |seq, record, _| {
            if seq != state.last_seq + 1 {
                return Err(ReadError::Restart);
            }
            state.apply(seq, &record);
            Ok(true)
        });
        match outcome {
            Ok(()) => return Ok(state),
            // The writer rebuilt the view under us; start again from what is there now.
            Err(ReadError::Restart) => continue,
            Err(ReadError::Failed(e)) => return Err(e),
        }
    }
    Err(damaged(home, "it kept changing while being read"))
}

/// Calls `visit` for every published record with seq ≥ `from_seq`, in order, until it
/// returns false.
pub fn for_each(
    home: &Home,
    from_seq: u64,
    mut visit: impl FnMut(u64, Record) -> Result<bool>,
) -> Result<()> {
    home.require_initialized()?;
    let mut expected = 1;
    let outcome = fold_log(home, 0, |seq, record, _| {
        if seq != expected {
            return Err(ReadError::Restart);
        }
        expected += 1;
        if seq < from_seq {
            return Ok(true);
        }
        visit(seq, record).map_err(ReadError::Failed)
    });
    match outcome {
        Ok(()) => Ok(()),
        Err(ReadError::Failed(e)) => Err(e),
        Err(ReadError::Restart) => Err(damaged(home, "its records are out of order")),
    }
}

/// Where an incremental reader of the log stopped ([`read_new`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    /// The seq expected next (0: nothing read yet), and where its frame starts in the log.
    next_seq: u64,
    offset: u64,
}

/// Calls `visit` for every record published after `cursor`, in order, and moves `cursor` past
/// them: a long-running reader (`carma serve`) reads each record once, not the log from its
/// start on every refresh. Returns false, with `cursor` reset and nothing visited, when the
/// view was rebuilt since the cursor was taken: the caller drops what it derived and reads
/// again from the start.
pub fn read_new(home: &Home, cursor: &mut Cursor, mut visit: impl FnMut(u64, Record)) -> Result<bool> {
    home.require_initialized()?;
    // A log shorter than where the cursor stopped was rebuilt.
    if generation(home).is_some_and(|(length, ..)| length < cursor.offset) {
        *cursor = Cursor::default();
        return Ok(false);
    }
    let mut next = *cursor;
    let outcome = fold_log(home, cursor.offset, |seq, record, length| {
        if seq != next.next_seq.max(1) {
            return Err(ReadError::Restart);
        }
        visit(seq, record);
        next = Cursor { next_seq: seq + 1, offset: next.offset + length };
        Ok(true)
    });
    match outcome {
        Ok(()) => {
            *cursor = next;
            Ok(true)
        }
        // Records visited before the restart came from the old log: the caller drops them.
        Err(ReadError::Restart) => {
            *cursor = Cursor::default();
            Ok(false)
        }
        Err(ReadError::Failed(e)) => Err(e),
    }
}

/// Size, inode and modification time of the published log: changes whenever anything is
/// published (the log only grows, or is rebuilt), at the cost of one `stat`.
pub fn generation(home: &Home) -> Option<(u64, u64, i64, i64)> {
    use std::os::unix::fs::MetadataExt;
    let meta = fs::metadata(log_path(home)).ok()?;
    Some((meta.len(), meta.ino(), meta.mtime(), meta.mtime_nsec()))
}

/// Why a reader stopped early.
enum ReadError {
    /// The log is not what the reader expected (rebuilt, or damaged).
    Restart,
    Failed(Error),
}

/// Decodes the log's frames from `offset` to the last complete one, in chunks, until `visit`
/// returns false.
fn fold_log(
    home: &Home,
    offset: u64,
    mut visit: impl FnMut(u64, Record, u64) -> std::result::Result<bool, ReadError>,
) -> std::result::Result<(), ReadError> {
    let path = log_path(home);
    let mut file = match File::open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(ReadError::Failed(io_err("open", &path, e))),
    };
    if file.seek(SeekFrom::Start(offset)).is_err() {
        return Err(ReadError::Restart);
    }
    let mut buffer = Vec::new();
    let mut chunk = vec![0u8; 1 << 20];
    loop {
        let read = file.read(&mut chunk).map_err(|e| ReadError::Failed(io_err("read", &path, e)))?;
        buffer.extend_from_slice(&chunk[..read]);
        let mut used = 0;
        loop {
            match frame::decode_frame(&buffer[used..]) {
                Ok((seq, record, length)) => {
                    if !visit(seq, record, length as u64)? {
                        return Ok(());
                    }
                    used += length;
                }
                Err(FrameError::Incomplete) => break,
                Err(FrameError::Invalid(_)) => return Err(ReadError::Restart),
            }
        }
        buffer.drain(..used);
        if read == 0 {
            // A torn tail is a frame being appended right now: what came before is whole.
            return Ok(());
        }
    }
}

fn damaged(home: &Home, what: &str) -> Error {
    Error::Journal {
        path: home.view_dir(),
        detail: format!(
            "the published view cannot be read ({what}); it is rebuilt by the next `carma tick`, or run `carma journal check`"
        ),
    }
}
