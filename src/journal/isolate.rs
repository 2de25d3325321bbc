//! Reading a damaged journal through redb in a child process, so that redb cannot take the
//! administrator's tool down with it.
//!
//! `guard` turns redb's panics into errors, but some damage does not panic: a flipped bit in a
//! branch page's child pointer can give a page order that makes redb allocate a terabyte for
//! one page, and a failed allocation aborts the process (Rust's allocation-error handler never
//! unwinds). `carma journal check` and `salvage` walk every key of a damaged file on purpose,
//! so they run each walk in a forked child that streams the records it read through a pipe;
//! when the child dies, the parent has every record read before the damage and an error that
//! says so, and goes on past it as after any unreadable key. The child only reads (redb reads
//! with `pread`) and leaves with `_exit`, so it neither writes the file nor runs the parent's
//! destructors.

use std::io::{BufReader, Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;

use crate::error::{Error, Result};

const TAG_RECORD: u8 = 1;
const TAG_DONE: u8 = 0;
const TAG_ERROR: u8 = 2;

/// Runs `work` in a forked child; every `(seq, bytes)` it emits reaches `visit` here, in order.
/// Returns the child's own result, or an error naming the file when the child died (a signal,
/// such as the abort of a failed allocation) before it finished.
pub(crate) fn stream_records(
    path: &Path,
    work: impl FnOnce(&mut dyn FnMut(u64, &[u8])) -> Result<()>,
    visit: &mut dyn FnMut(u64, &[u8]),
) -> Result<()> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two descriptors we then own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(Error::io("cannot create a pipe to read the journal", std::io::Error::last_os_error()));
    }
    // SAFETY: both descriptors are fresh and owned only here.
    let (read_end, write_end) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: the child only runs `work` (reads) and writes the pipe, then `_exit`s.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(Error::io("cannot fork to read the journal", std::io::Error::last_os_error()));
    }
    if pid == 0 {
        drop(read_end);
        child(path, work, write_end);
    }
    drop(write_end);
    let mut reader = BufReader::new(std::fs::File::from(read_end));
    let ended = read_stream(&mut reader, visit);
    let status = wait(pid);
    match ended {
        Some(Ok(())) => Ok(()),
        Some(Err(detail)) => Err(Error::Journal { path: path.to_path_buf(), detail }),
        None => Err(Error::Journal {
            path: path.to_path_buf(),
            detail: format!(
                "the file is damaged (reading it made redb {status}, e.g. an allocation sized by a damaged page)"
            ),
        }),
    }
}

/// The child's side: never returns.
fn child(path: &Path, work: impl FnOnce(&mut dyn FnMut(u64, &[u8])) -> Result<()>, out: OwnedFd) -> ! {
    // An abort prints Rust's allocation-failure line (and maybe a backtrace): not for the
    // administrator's terminal, the parent says what happened.
    if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        // SAFETY: dup2 onto stderr of this child only.
        unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&null), libc::STDERR_FILENO) };
    }
    bound_memory();
    let mut out = std::io::BufWriter::new(std::fs::File::from(out));
    let mut broken = false;
    let outcome = super::guard::guard(path, || {
        work(&mut |seq, bytes| {
            if broken {
                return;
            }
            let header =
                [&[TAG_RECORD][..], &seq.to_le_bytes(), &(bytes.len() as u64).to_le_bytes()].concat();
            // Flushed per record: what was read before an abort must reach the parent.
            broken = out
                .write_all(&header)
                .and_then(|()| out.write_all(bytes))
                .and_then(|()| out.flush())
                .is_err();
        })
    });
    let end = match outcome {
        Ok(()) => vec![TAG_DONE],
        Err(e) => {
            // The parent names the file again.
            let text = match e {
                Error::Journal { detail, .. } => detail,
                other => other.to_string(),
            };
            [&[TAG_ERROR][..], &(text.len() as u64).to_le_bytes(), text.as_bytes()].concat()
        }
    };
    let written = !broken && out.write_all(&end).and_then(|()| out.flush()).is_ok();
    // SAFETY: _exit ends the child without running the parent's destructors or atexit hooks.
    unsafe { libc::_exit(if written { 0 } else { 1 }) }
}

/// Address space a child may add to what it inherited: a damaged page order can also ask for
/// hundreds of MiB that the machine has, zero-filled and read for nothing (a record is at most
/// a few MiB).
const CHILD_EXTRA_BYTES: u64 = 128 << 20;

/// Caps the child's address space, so that an absurd page size fails (and aborts) at once.
fn bound_memory() {
    let page = 4096u64;
    let size_pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|n| n.parse::<u64>().ok()));
    if let Some(pages) = size_pages {
        let limit = pages.saturating_mul(page).saturating_add(CHILD_EXTRA_BYTES);
        let rlimit = libc::rlimit { rlim_cur: limit, rlim_max: limit };
        // SAFETY: setrlimit on this child only.
        unsafe { libc::setrlimit(libc::RLIMIT_AS, &rlimit) };
    }
}

/// Reads records until the end marker: `None` when the stream stopped before it.
fn read_stream(
    reader: &mut impl Read,
    visit: &mut dyn FnMut(u64, &[u8]),
) -> Option<std::result::Result<(), String>> {
    let mut buf = Vec::new();
    loop {
        let mut tag = [0u8];
        reader.read_exact(&mut tag).ok()?;
        match tag[0] {
            TAG_RECORD => {
                let seq = read_u64(reader)?;
                read_bytes(reader, &mut buf)?;
                visit(seq, &buf);
            }
            TAG_DONE => return Some(Ok(())),
            TAG_ERROR => {
                read_bytes(reader, &mut buf)?;
                return Some(Err(String::from_utf8_lossy(&buf).into_owned()));
            }
            _ => return None,
        }
    }
}

fn read_u64(reader: &mut impl Read) -> Option<u64> {
    let mut bytes = [0u8; 8];
    reader.read_exact(&mut bytes).ok()?;
    Some(u64::from_le_bytes(bytes))
}

/// A length-prefixed byte string into `buf` (the child wrote the length it had in memory).
fn read_bytes(reader: &mut impl Read, buf: &mut Vec<u8>) -> Option<()> {
    let len = usize::try_from(read_u64(reader)?).ok()?;
    buf.clear();
    reader.take(len as u64).read_to_end(buf).ok()?;
    (buf.len() == len).then_some(())
}

/// Waits for the child; how it ended, in words.
fn wait(pid: libc::pid_t) -> String {
    let mut status = 0;
    loop {
        // SAFETY: waits for our own child.
        let got = unsafe { libc::waitpid(pid, &mut status, 0) };
        if got == pid {
            break;
        }
        if got < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return "stop in a way carma could not see".into();
        }
    }
    if libc::WIFSIGNALED(status) {
        format!("abort (signal {})", libc::WTERMSIG(status))
    } else {
        format!("stop (exit {})", libc::WEXITSTATUS(status))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_cross_the_pipe_and_a_dead_child_is_an_error_after_them() {
        let path = Path::new("/nonexistent/carma.redb");
        let mut seen = Vec::new();
        let ok = stream_records(
            path,
            |emit| {
                emit(1, b"one");
                emit(2, &[0u8; 100_000]);
                Ok(())
            },
            &mut |seq, bytes| seen.push((seq, bytes.len())),
        );
        assert!(ok.is_ok());
        assert_eq!(seen, [(1, 3), (2, 100_000)]);

        seen.clear();
        let died = stream_records(
            path,
            |emit| {
                emit(7, b"seven");
                std::process::abort()
            },
            &mut |seq, bytes| seen.push((seq, bytes.len())),
        );
        assert_eq!(seen, [(7, 5)], "what was read before the abort arrives");
        let message = died.unwrap_err().to_string();
        assert!(message.contains("reading it made redb abort (signal 6"), "{message}");

        let failed = stream_records(path, |_| Err(Error::BadInput("no".into())), &mut |_, _| {});
        assert_eq!(
            failed.unwrap_err().to_string(),
            Error::Journal { path: path.into(), detail: "no".into() }.to_string()
        );
    }
}
