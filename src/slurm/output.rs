//! Where each attempt's output starts (edge): a Slurm job's requeued runs write to the same
//! `--output` file, appended (`--open-mode=append`) or truncated (the default).
//!
//! At the end of every run the Epilog records, in the node's state directory
//! (`slurm-output/JOBID.marks`), each output file's size and its last [`TAIL_BYTES`] bytes.
//! At the next end, when the file is at least that long and still holds those bytes there,
//! the run appended, and the out-of-memory scan reads only what follows; otherwise the file
//! was truncated, and the scan reads it from the start. So a second run never sees the first
//! run's out-of-memory line. When the Epilog requeues a job, the run's own bytes are copied to
//! `slurm-output/JOBID.ATTEMPT.out` (owned by the job's user), so a truncating next run does
//! not lose them. Files are opened as the hooks open the output (regular, owned by the job's
//! user, no symlink followed); the marks live only under root's state directory.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::PathBuf;

use crate::home::Home;

/// Bytes before a run's end compared at the next end.
pub const TAIL_BYTES: u64 = 64;
/// Most bytes of one run copied aside.
pub const KEEP_BYTES_MAX: u64 = 64 << 20;

/// One output file's size and tail at the end of a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mark {
    /// The output file, as Slurm's `StdOut=`/`StdErr=` names it.
    pub path: String,
    /// Its length at the end of the run, bytes.
    pub size: u64,
    /// Its last [`TAIL_BYTES`] bytes (fewer when shorter).
    pub tail: Vec<u8>,
}

fn dir(home: &Home) -> PathBuf {
    home.root().join("slurm-output")
}

fn marks_path(home: &Home, job: u32) -> PathBuf {
    dir(home).join(format!("{job}.marks"))
}

/// The marks the last run of `job` on this node left (none when it ran elsewhere).
pub fn read_marks(home: &Home, job: u32) -> Vec<Mark> {
    let text = std::fs::read_to_string(marks_path(home, job)).unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, '\t');
            let size = parts.next()?.parse().ok()?;
            let tail = decode_hex(parts.next()?)?;
            let path = parts.next()?.to_string();
            Some(Mark { path, size, tail })
        })
        .collect()
}

/// The mark of `file` (at `path`) as it is now.
pub fn mark_of(path: &str, file: &File) -> Option<Mark> {
    let size = file.metadata().ok()?.len();
    Some(Mark {
        path: path.to_string(),
        size,
        tail: read_range(file, size.saturating_sub(TAIL_BYTES), size)?,
    })
}

/// Where the current run starts in `file`: after the last run's bytes when it appended.
pub fn start_of_run(marks: &[Mark], path: &str, file: &File) -> u64 {
    let Some(mark) = marks.iter().find(|m| m.path == path) else { return 0 };
    let Ok(meta) = file.metadata() else { return 0 };
    if meta.len() < mark.size {
        return 0;
    }
    let from = mark.size.saturating_sub(mark.tail.len() as u64);
    match read_range(file, from, mark.size) {
        Some(tail) if tail == mark.tail => mark.size,
        _ => 0,
    }
}

/// Records the marks for the next run's end.
pub fn write_marks(home: &Home, job: u32, marks: &[Mark]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir(home))?;
    let text: String = marks
        .iter()
        .filter(|m| !m.path.contains(['\n', '\t']))
        .map(|m| format!("{}\t{}\t{}\n", m.size, encode_hex(&m.tail), m.path))
        .collect();
    crate::exec::write_atomic(&marks_path(home, job), text.as_bytes(), 0o600).map_err(std::io::Error::other)
}

/// Copies bytes `from..` of `file` (a run's output) to `slurm-output/JOBID.ATTEMPT.out`,
/// owned by `uid`; returns its path.
pub fn keep_run(
    home: &Home,
    job: u32,
    attempt: u32,
    file: &File,
    from: u64,
    uid: u32,
) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(dir(home))?;
    let len = file.metadata()?.len();
    let to = len.min(from.saturating_add(KEEP_BYTES_MAX));
    let bytes = read_range(file, from.min(len), to).unwrap_or_default();
    let path = dir(home).join(format!("{job}.{attempt}.out"));
    let mut copy = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)?;
    copy.write_all(&bytes)?;
    std::os::unix::fs::fchown(&copy, Some(uid), None)?;
    Ok(path)
}

fn read_range(file: &File, from: u64, to: u64) -> Option<Vec<u8>> {
    let mut bytes = vec![0u8; usize::try_from(to.saturating_sub(from)).ok()?];
    let mut filled = 0;
    while filled < bytes.len() {
        match file.read_at(&mut bytes[filled..], from + filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    bytes.truncate(filled);
    Some(bytes)
}

fn encode_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn decode_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok()).collect()
}

#[cfg(test)]
mod tests {
    //! Goal: an appended run is scanned from its own start, a truncated one from zero.
    use super::*;

    #[test]
    fn appended_and_truncated_runs() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        std::fs::write(&path, "run 1\ntorch.OutOfMemoryError: CUDA out of memory.\n").unwrap();
        let name = path.to_str().unwrap();
        let mark = mark_of(name, &File::open(&path).unwrap()).unwrap();
        assert_eq!(mark.size, 50);
        let marks = vec![mark];
        // Appended: starts after the first run.
        let mut file = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(b"run 2\nValueError: bad learning rate\n").unwrap();
        let read = File::open(&path).unwrap();
        assert_eq!(start_of_run(&marks, name, &read), 50);
        let evidence = crate::exec::scan_oom_open_file_from(&read, 50, 1 << 20).unwrap();
        assert_eq!(evidence, None, "the first run's out-of-memory line was read again");
        assert!(crate::exec::scan_oom_open_file_from(&read, 0, 1 << 20).unwrap().is_some());
        // Truncated, even to a longer file: from zero.
        std::fs::write(&path, "run 2 prints more than the first run did\nok\n\n\n\n").unwrap();
        assert_eq!(start_of_run(&marks, name, &File::open(&path).unwrap()), 0);
        assert_eq!(start_of_run(&[], name, &File::open(&path).unwrap()), 0);
        assert_eq!(decode_hex(&encode_hex(b"\x00\xffab")).unwrap(), b"\x00\xffab");
    }
}
