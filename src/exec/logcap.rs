//! The cap on an attempt's run-folder logs (`[limits] log-bytes-max`, per log, per
//! attempt), so that a job's output cannot fill the state directory's filesystem: the
//! journal, the spool and every other task's logs live there.
//!
//! # Why the supervisor trims the file
//! The job keeps writing straight into its log, as before: nothing slows an ordinary job,
//! `carma logs -f` and the OOM scan keep reading a file, and a job whose supervisor dies is
//! not killed by SIGPIPE, as it would be if its output went through a pipe the supervisor
//! reads. `RLIMIT_FSIZE` is no alternative: it kills the job with SIGXFSZ and would cap its
//! checkpoints too.
//!
//! The job's descriptor is opened with `O_APPEND`, so however the file is shortened under
//! it, the job's next write lands at the new end; without it, the job's own offset would
//! leave a hole the size of what was dropped. The supervisor holds a second descriptor of
//! the same file that does not append, and at every poll of its wait loop (50 ms) and once
//! more after the attempt's processes are gone, trims a log that passed the cap to
//!
//! ```text
//! [head: the first cap/2 bytes][note line][tail: the latest bytes, at most 4 MiB]
//! ```
//!
//! The head keeps what the job printed first (its settings, the first epochs), the tail its
//! end (the traceback, the CUDA OOM message the tick looks for: Slurm users read a log from
//! the end). The note is one line, rewritten with the running count at every trim:
//! `carma: output truncated at 64 KiB (log-bytes-max): 1234 bytes dropped here`. The tail is
//! at most 4 MiB so that a trim copies little and holds little memory; after the first trim
//! the file regrows by about cap/2 before the next.
//!
//! # What is guaranteed
//! Once the attempt has ended, a log holds at most `cap` bytes, note included, and its bytes
//! after the note are exactly the last bytes the job wrote (up to the tail's size), so the
//! OOM scan, which then reads only those, sees what it would have seen uncapped. While the
//! job runs, a log may pass the cap by what the job writes in one poll interval. Bytes the
//! job writes during a trim, between its last size check and its `ftruncate` (microseconds),
//! are lost uncounted, so the dropped count is a lower bound.

use std::fs::File;
use std::io::ErrorKind;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The smallest cap accepted: room for a head, the note and a tail of useful sizes.
pub const LOG_BYTES_MAX_MIN: u64 = 16 * 1024;
/// The most of a log's end a trim keeps (and copies).
pub const TAIL_BYTES_MAX: u64 = 4 * 1024 * 1024;
/// The chunk through which bytes the job appended during a trim are moved down.
const COPY_CHUNK_BYTES: usize = 64 * 1024;
/// Room kept for the note line; the note is far shorter (numbers of at most 20 digits).
const NOTE_BYTES_MAX: u64 = 256;

// The head (cap/2) and the note leave a tail of at least a quarter of the cap.
const _: () = assert!(LOG_BYTES_MAX_MIN / 4 >= NOTE_BYTES_MAX);

/// One run-folder log under its cap, through the supervisor's own descriptor.
pub(crate) struct CappedLog {
    /// Read and write, not appending, so the note and the tail go where the head ends.
    file: File,
    path: PathBuf,
    bytes_max: u64,
    /// The length of the note in the file; 0 until the first trim.
    note_len: u64,
    /// Bytes of the job's output dropped so far.
    dropped: u64,
    /// Whether a failed trim was already named in the supervisor log.
    failure_said: bool,
    /// The tail's copy, kept between trims.
    tail: Vec<u8>,
}

impl CappedLog {
    /// `file` must be a descriptor of `path` that does not append; `bytes_max` is at least
    /// [`LOG_BYTES_MAX_MIN`] (the config refuses less).
    pub(crate) fn new(file: File, path: PathBuf, bytes_max: u64) -> CappedLog {
        let bytes_max = bytes_max.max(LOG_BYTES_MAX_MIN);
        CappedLog { file, path, bytes_max, note_len: 0, dropped: 0, failure_said: false, tail: Vec::new() }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Trims the log if it passed the cap. A failed trim is said once in the supervisor log
    /// and falls back to cutting the file at the head, which needs no free space.
    pub(crate) fn trim(&mut self) {
        let Err(err) = self.try_trim() else { return };
        if !self.failure_said {
            self.failure_said = true;
            eprintln!(
                "carma run-task: cannot keep the tail of {} under log-bytes-max ({err}); cutting it at its first {} instead",
                self.path.display(),
                crate::text::bytes(self.head_bytes())
            );
        }
        if let Ok(meta) = self.file.metadata() {
            self.dropped += meta.len().saturating_sub(self.head_bytes() + self.note_len);
        }
        let _ = self.file.set_len(self.head_bytes());
        self.note_len = 0;
    }

    /// How much of the log's end is the job's own latest output, once it was trimmed: the
    /// OOM scan reads no further back (the note and the head are not the end of the output).
    /// `None` when it was never trimmed.
    pub(crate) fn tail_len(&self) -> Option<u64> {
        if self.note_len == 0 {
            return None;
        }
        let len = self.file.metadata().map(|meta| meta.len()).unwrap_or(0);
        Some(len.saturating_sub(self.head_bytes() + self.note_len))
    }

    /// For the task's record: what was dropped, if anything.
    pub(crate) fn summary(&self) -> Option<String> {
        let name = self
            .path
            .file_name()
            .map_or_else(|| self.path.display().to_string(), |n| n.to_string_lossy().into_owned());
        (self.dropped > 0).then(|| {
            format!(
                "{name} truncated at {} (log-bytes-max), {} bytes dropped",
                crate::text::bytes(self.bytes_max),
                self.dropped
            )
        })
    }

    fn head_bytes(&self) -> u64 {
        self.bytes_max / 2
    }

    fn tail_bytes_max(&self) -> u64 {
        (self.bytes_max - self.head_bytes() - NOTE_BYTES_MAX).min(TAIL_BYTES_MAX)
    }

    /// Rewrites `[head][note][tail]` when the log is over the cap. Order matters: the tail is
    /// copied before anything is overwritten, the note and tail are written over dropped
    /// bytes, and the file is cut last, so a reader never sees a shortened file without
    /// the note.
    fn try_trim(&mut self) -> std::io::Result<()> {
        let size = self.file.metadata()?.len();
        if size <= self.bytes_max {
            return Ok(());
        }
        let head = self.head_bytes();
        // size > cap >= head + NOTE_BYTES_MAX + tail: the tail starts after the old note.
        let tail_start = size - self.tail_bytes_max();
        assert!(tail_start >= head + self.note_len, "the tail overlaps the head or the note");
        self.tail.resize(usize::try_from(self.tail_bytes_max()).unwrap_or(0), 0);
        let read = read_full_at(&self.file, &mut self.tail, tail_start)?;
        self.tail.truncate(read);
        let mut last = [0u8; 1];
        let head_ends_line = read_full_at(&self.file, &mut last, head - 1)? == 1 && last[0] == b'\n';
        self.dropped += tail_start - head - self.note_len;
        let note = note_line(self.bytes_max, self.dropped, head_ends_line);
        assert!(note.len() as u64 <= NOTE_BYTES_MAX, "the note outgrew its room");
        self.file.write_all_at(note.as_bytes(), head)?;
        let note_len = note.len() as u64;
        self.file.write_all_at(&self.tail, head + note_len)?;
        // What the job appended while the tail was copied moves down after it instead of
        // being cut: it is the job's latest output (often its last line, an OOM message the
        // scan must find). Each round copies only what arrived during the one before; the
        // region written always lies below the bytes not yet copied (it ends under the cap,
        // they start past `size`, which was over it). The job controls its file's length
        // (it may make it sparse and terabytes long between two looks), so no buffer is sized
        // from it: the copy goes through one fixed chunk, and of what arrived only the latest
        // bytes that fit under the cap are kept, the rest counted as dropped.
        let mut end = head + note_len + self.tail.len() as u64;
        let mut copied_to = size;
        for _ in 0..4 {
            let now = self.file.metadata()?.len();
            if now <= copied_to {
                break;
            }
            let room = self.bytes_max.saturating_sub(end);
            let skipped = (now - copied_to).saturating_sub(room);
            self.dropped += skipped;
            let wanted = now - copied_to - skipped;
            let got = copy_down(&self.file, copied_to + skipped, now, end)?;
            end += got;
            copied_to = now;
            if got < wanted {
                break; // the file shrank meanwhile: nothing more to follow
            }
        }
        self.file.set_len(end)?;
        self.note_len = note_len;
        Ok(())
    }
}

/// The note put where output was dropped; it starts a line of its own.
fn note_line(bytes_max: u64, dropped: u64, head_ends_line: bool) -> String {
    let newline = if head_ends_line { "" } else { "\n" };
    format!(
        "{newline}carma: output truncated at {} (log-bytes-max): {dropped} bytes dropped here\n",
        crate::text::bytes(bytes_max)
    )
}

/// Copies the bytes `[from, to)` of `file` to `dest` (`dest <= from`) through one fixed
/// chunk, front to back, so a region overlapping its source is copied right; stops early
/// where the file ends. Returns how many bytes were copied.
fn copy_down(file: &File, from: u64, to: u64, dest: u64) -> std::io::Result<u64> {
    assert!(dest <= from, "copy_down moves bytes towards the start only");
    let mut chunk = [0u8; COPY_CHUNK_BYTES];
    let mut done = 0u64;
    while from + done < to {
        let want =
            usize::try_from((to - from - done).min(COPY_CHUNK_BYTES as u64)).unwrap_or(COPY_CHUNK_BYTES);
        let got = read_full_at(file, &mut chunk[..want], from + done)?;
        if got == 0 {
            break;
        }
        file.write_all_at(&chunk[..got], dest + done)?;
        done += got as u64;
    }
    Ok(done)
}

/// Reads until `buf` is full or the file ends; returns how much was read.
fn read_full_at(file: &File, buf: &mut [u8], mut offset: u64) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read_at(&mut buf[filled..], offset) {
            Ok(0) => break,
            Ok(read) => {
                filled += read;
                offset += read as u64;
            }
            Err(err) if err.kind() == ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    //! Goal: a trimmed log keeps its head, one note with the exact count of dropped bytes,
    //! and its latest bytes; trims add up; a log under the cap is never touched. Method: a
    //! real file written through an appending descriptor, as the job's is.
    use std::io::Write;

    use super::*;

    const CAP: u64 = 32 * 1024;

    fn numbered(from: usize, count: usize) -> Vec<u8> {
        (from..from + count).flat_map(|n| format!("line {n:07}\n").into_bytes()).collect()
    }

    fn log() -> (tempfile::TempDir, File, CappedLog) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("stdout.log");
        let mine =
            std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&path).expect("create");
        let job = std::fs::OpenOptions::new().append(true).open(&path).expect("append");
        (dir, job, CappedLog::new(mine, path, CAP))
    }

    #[test]
    fn trimmed_log_keeps_head_note_and_tail() {
        let (_dir, mut job, mut capped) = log();
        let small = numbered(0, 100);
        job.write_all(&small).expect("write");
        capped.trim();
        assert_eq!(std::fs::read(capped.path()).expect("read"), small, "under the cap: untouched");
        assert_eq!((capped.summary(), capped.tail_len()), (None, None));

        let first = numbered(100, 10_000); // 13 bytes a line
        job.write_all(&first).expect("write");
        let written: Vec<u8> = [small.clone(), first].concat();
        capped.trim();
        let text = std::fs::read(capped.path()).expect("read");
        assert!(text.len() as u64 <= CAP, "{} bytes", text.len());
        let head = (CAP / 2) as usize;
        let tail = (CAP / 2 - NOTE_BYTES_MAX) as usize;
        let dropped = written.len() - head - tail;
        assert_eq!(&text[..head], &written[..head]);
        let note =
            format!("\ncarma: output truncated at 32 KiB (log-bytes-max): {dropped} bytes dropped here\n");
        assert_eq!(&text[head..head + note.len()], note.as_bytes());
        assert_eq!(&text[head + note.len()..], &written[written.len() - tail..]);
        assert_eq!(capped.tail_len(), Some(tail as u64));

        // The job goes on appending at the new end; the next trim counts from there.
        let second = numbered(20_000, 5_000);
        job.write_all(&second).expect("write");
        let before = std::fs::metadata(capped.path()).expect("meta").len() as usize;
        capped.trim();
        let text = std::fs::read(capped.path()).expect("read");
        let dropped_now = dropped + (before - head - note.len() - tail);
        let note = format!(
            "\ncarma: output truncated at 32 KiB (log-bytes-max): {dropped_now} bytes dropped here\n"
        );
        assert_eq!(&text[head..head + note.len()], note.as_bytes());
        assert!(text.ends_with(&second[second.len() - tail..]), "the latest bytes are kept");
        assert_eq!(
            capped.summary().as_deref(),
            Some(
                format!("stdout.log truncated at 32 KiB (log-bytes-max), {dropped_now} bytes dropped")
                    .as_str()
            )
        );
    }
}
