//! Removing an ended task's run folder (`runs/ID/`), as the tick's retention asks, with a
//! bounded number of removals per call and without ever following a link.
//!
//! A run folder is root's, but parts of it may be a submitter's (their logs before sealing,
//! an interactive session's socket folder), and a submitter can put links and deep trees in
//! what is theirs. So every step is relative to a directory descriptor carma opened itself:
//! `openat(O_DIRECTORY|O_NOFOLLOW)` to go down, `fstatat(AT_SYMLINK_NOFOLLOW)` to look,
//! `unlinkat` to remove (a link is removed, never what it names), and nothing deeper than
//! [`DEPTH_MAX`] is entered. Work is counted in entries removed; a folder that does not fit the
//! budget is left part-removed and finished by a later call.

use std::ffi::{CStr, CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Folders below the run folder carma descends into; deeper ones are left (and said).
pub const DEPTH_MAX: u32 = 8;

/// What one removal did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Entries removed (files, links, folders).
    pub entries: u64,
    /// Whether the run folder is gone.
    pub gone: bool,
}

/// Removes `runs/<task>` (relative to the open `runs` folder), at most `budget` entries;
/// a name that is not there counts as gone. `task` must be one path component.
pub fn remove_run_folder(runs: &Path, task: &str, budget: u64) -> io::Result<Pruned> {
    assert!(
        !task.is_empty() && !task.contains('/') && task != "." && task != "..",
        "one component: {task:?}"
    );
    let runs = open_dir_at(None, runs.as_os_str())?;
    let mut entries = 0;
    let gone = remove_at(&runs, OsStr::new(task), 0, budget, &mut entries)?;
    Ok(Pruned { entries, gone })
}

/// Removes the entry `name` of `dir` and, for a folder, what is in it, within `budget`
/// entries in all (`removed` counts them). True once it is gone.
fn remove_at(dir: &OwnedFd, name: &OsStr, depth: u32, budget: u64, removed: &mut u64) -> io::Result<bool> {
    let sub = match open_dir_at(Some(dir), name) {
        Ok(sub) => sub,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(true),
        // A file, a link, a FIFO: the name itself goes.
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTDIR | libc::ELOOP)) => {
            return unlink_at(dir, name, 0, budget, removed);
        }
        Err(e) => return Err(e),
    };
    if depth >= DEPTH_MAX {
        return Err(io::Error::other(format!("more than {DEPTH_MAX} folders deep; left as it is")));
    }
    for child in names(&sub, budget.saturating_sub(*removed))? {
        if *removed >= budget {
            return Ok(false);
        }
        if !remove_at(&sub, &child, depth + 1, budget, removed)? {
            return Ok(false);
        }
    }
    drop(sub);
    unlink_at(dir, name, libc::AT_REMOVEDIR, budget, removed)
}

/// `unlinkat(dir, name, flags)` when the budget allows; a folder that is not empty yet (its
/// owner added to it meanwhile) is left for a later call.
fn unlink_at(
    dir: &OwnedFd,
    name: &OsStr,
    flags: libc::c_int,
    budget: u64,
    removed: &mut u64,
) -> io::Result<bool> {
    if *removed >= budget {
        return Ok(false);
    }
    let c_name = c_string(name)?;
    // SAFETY: a descriptor we own and a NUL-terminated name.
    if unsafe { libc::unlinkat(dir.as_raw_fd(), c_name.as_ptr(), flags) } != 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENOENT) => Ok(true),
            Some(libc::ENOTEMPTY | libc::EEXIST) => Ok(false),
            _ => Err(e),
        };
    }
    *removed += 1;
    Ok(true)
}

/// Opens the folder `name` (relative to `dir`, or a path when `dir` is `None`) without
/// following a link.
fn open_dir_at(dir: Option<&OwnedFd>, name: &OsStr) -> io::Result<OwnedFd> {
    let c_name = c_string(name)?;
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK;
    let at = dir.map_or(libc::AT_FDCWD, AsRawFd::as_raw_fd);
    // SAFETY: a valid descriptor (or AT_FDCWD) and a NUL-terminated name.
    let fd = unsafe { libc::openat(at, c_name.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Up to `max + 1` names in the folder (`.` and `..` left out): enough to use the budget,
/// never sized by the folder.
fn names(dir: &OwnedFd, max: u64) -> io::Result<Vec<std::ffi::OsString>> {
    // fdopendir takes its descriptor: give it a duplicate, closed by closedir.
    // SAFETY: duplicating a descriptor we own.
    let dup = unsafe { libc::fcntl(dir.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0) };
    if dup < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `dup` is a directory descriptor we own; on success the stream owns it.
    let stream = unsafe { libc::fdopendir(dup) };
    if stream.is_null() {
        let e = io::Error::last_os_error();
        // SAFETY: fdopendir failed, so `dup` is still ours to close.
        unsafe { libc::close(dup) };
        return Err(e);
    }
    let mut found = Vec::new();
    while (found.len() as u64) <= max {
        // SAFETY: a stream from fdopendir, not yet closed.
        let entry = unsafe { libc::readdir(stream) };
        if entry.is_null() {
            break;
        }
        // SAFETY: readdir returned an entry whose d_name is NUL-terminated.
        let name = unsafe { CStr::from_ptr((*entry).d_name.as_ptr()) };
        let bytes = name.to_bytes();
        if bytes != b"." && bytes != b".." {
            found.push(OsStr::from_bytes(bytes).to_owned());
        }
    }
    // SAFETY: closes the stream and its descriptor (the duplicate) once.
    unsafe { libc::closedir(stream) };
    Ok(found)
}

fn c_string(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

#[cfg(test)]
mod tests {
    //! Goal: a run folder goes whole within its budget, a link inside it is removed and what it
    //! names is not, and a folder past the budget is finished by the next call.
    use super::*;

    #[test]
    fn links_are_removed_never_followed_and_the_budget_holds() {
        let dir = tempfile::tempdir().unwrap();
        let runs = dir.path().join("runs");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(outside.join("keep")).unwrap();
        std::fs::write(outside.join("keep/file"), b"precious").unwrap();
        let attempt = runs.join("T1/1");
        std::fs::create_dir_all(attempt.join("sock/deeper")).unwrap();
        for i in 0..5 {
            std::fs::write(attempt.join(format!("f{i}")), b"x").unwrap();
        }
        std::os::unix::fs::symlink(&outside, attempt.join("link-to-dir")).unwrap();
        std::os::unix::fs::symlink(outside.join("keep/file"), attempt.join("sock/deeper/link-to-file"))
            .unwrap();
        let first = remove_run_folder(&runs, "T1", 4).unwrap();
        assert_eq!(first, Pruned { entries: 4, gone: false });
        assert!(runs.join("T1").exists());
        let rest = remove_run_folder(&runs, "T1", 1000).unwrap();
        assert!(rest.gone && !runs.join("T1").exists(), "{rest:?}");
        assert_eq!(first.entries + rest.entries, 11, "5 files, 2 links, deeper, sock, 1, T1");
        assert_eq!(std::fs::read(outside.join("keep/file")).unwrap(), b"precious");
        assert_eq!(remove_run_folder(&runs, "T1", 10).unwrap(), Pruned { entries: 0, gone: true });
        std::os::unix::fs::symlink(&outside, runs.join("T2")).unwrap();
        assert!(remove_run_folder(&runs, "T2", 10).unwrap().gone);
        assert!(
            outside.join("keep/file").exists() && !runs.join("T2").exists(),
            "the link went, not its target"
        );
    }
}
