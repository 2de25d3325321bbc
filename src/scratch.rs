//! Root's own scratch files, at the bottom of the layers: the directories and copies carma
//! makes for itself (the journal check's copy, the demo's queue, the simulator's and the
//! bench's working folders) are its own, whoever else can write nearby.
//!
//! **The rule.** A scratch directory is made by one `mkdir` that fails when the name exists,
//! with an unpredictable name (`PURPOSE-PID-RANDOM`, 64 random bits from `getrandom`) and mode
//! 0700, in a parent that no other user can change: every component of its real path is a
//! directory (no link, checked on descriptors opened with `O_NOFOLLOW`) owned by root or the
//! caller and writable by no one else unless sticky (as `/tmp`). Files in it are created with
//! `O_CREAT|O_EXCL|O_NOFOLLOW`, and a copy reads its source through `O_NOFOLLOW` too, so a link
//! planted anywhere on the way is refused, never written through. A state directory's scratch
//! lives in its root-only `private/scratch/`.
//!
//! **Leftovers.** A scratch directory is removed when its [`ScratchDir`] is dropped; one left
//! by a killed process is removed by the next [`ScratchDir::new_in`] in the same parent
//! ([`sweep`]): its name carries the pid, and a directory of the caller's whose process is
//! gone, and whose `flock` no process holds (a process in another pid namespace), is stale.
//! A tick's journal check killed mid-copy leaves the journal unsealed, so the next session
//! checks it again and sweeps the copy; an administrator's `carma journal check` killed
//! mid-copy leaves its copy until the next check, at the latest the daily full check
//! (`journal::verdict::FULL_CHECK_EVERY_MS`).

use std::ffi::{CString, OsStr};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The folder of a state directory's `private/` that holds its scratch directories.
pub const PRIVATE_SCRATCH: &str = "scratch";

/// Tries at a fresh random name before giving up (a clash of 64 random bits is a planted name).
const NAME_TRIES: u32 = 8;

/// A directory only this process's user can use, removed on drop (see the module docs).
#[derive(Debug)]
pub struct ScratchDir {
    path: PathBuf,
    /// The directory, open and `flock`ed for as long as this lives: a sweep in another pid
    /// namespace (where the pid in the name means nothing) still sees it in use.
    _lock: File,
}

impl ScratchDir {
    /// Makes `PARENT/PURPOSE-PID-RANDOM`, mode 0700, after [`trusted_dir`] accepted `parent`
    /// and [`sweep`] removed the stale scratch directories of `purpose` there.
    pub fn new_in(parent: &Path, purpose: &str) -> Result<ScratchDir> {
        let parent = trusted_dir(parent)?;
        sweep(&parent, purpose);
        let path = make_unique(&parent, purpose)?;
        let lock = open_dir_nofollow(&path)
            .and_then(|dir| flock(&dir, libc::LOCK_EX | libc::LOCK_NB).map(|()| dir))
            .map_err(|e| Error::io(format!("cannot lock scratch directory {}", path.display()), e));
        match lock {
            Ok(lock) => Ok(ScratchDir { path, _lock: lock }),
            Err(e) => {
                let _ = std::fs::remove_dir(&path);
                Err(e)
            }
        }
    }

    /// Makes `PARENT/PURPOSE-PID-RANDOM` as [`ScratchDir::new_in`] does, for a directory the
    /// caller keeps (the demo's queue, left for the user to look at): never removed, never swept.
    pub fn kept_in(parent: &Path, purpose: &str) -> Result<PathBuf> {
        make_unique(&trusted_dir(parent)?, purpose)
    }

    /// A scratch directory in a state directory's root-only `private/` (its `scratch/`
    /// folder, made 0700 when missing).
    pub fn in_private(private: &Path, purpose: &str) -> Result<ScratchDir> {
        let private = trusted_dir(private)?;
        let parent = private.join(PRIVATE_SCRATCH);
        let made = match mkdir_exclusive(&parent, 0o700) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                // Root's own (private/ is trusted); kept at 0700 whoever made it first.
                open_dir_nofollow(&parent).and_then(|dir| fchmod(&dir, 0o700))
            }
            other => other,
        };
        made.map_err(|e| Error::io(format!("cannot create {}", parent.display()), e))?;
        ScratchDir::new_in(&parent, purpose)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        // remove_dir_all never follows a link inside; the parent is trusted.
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// `mkdir` of a fresh random name in the trusted `parent`, mode 0700.
fn make_unique(parent: &Path, purpose: &str) -> Result<PathBuf> {
    let mut last = None;
    for _ in 0..NAME_TRIES {
        let path = parent.join(format!("{purpose}-{}-{:016x}", std::process::id(), random_u64()?));
        match mkdir_exclusive(&path, 0o700) {
            Ok(()) => return Ok(path),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => {
                return Err(Error::io(format!("cannot create scratch directory {}", path.display()), e));
            }
        }
    }
    let e = last.unwrap_or_else(|| io::Error::from(io::ErrorKind::AlreadyExists));
    Err(Error::io(format!("cannot create a scratch directory in {}", parent.display()), e))
}

/// Where a journal's check keeps its copy: the `private/` beside it when that is a trusted
/// directory (the journal of a state directory), else the system's temporary directory, where
/// the exclusive random name alone keeps the copy carma's.
///
/// Copies an older carma left in the temporary directory under its predictable names
/// (`carma-inspect-PID-N`, the caller's, of a dead process) are swept here too: a user cannot
/// make a directory of root's, and a link is never swept.
pub fn for_journal(journal: &Path, purpose: &str) -> Result<ScratchDir> {
    let temp_purpose = format!("carma-{purpose}");
    sweep(&std::env::temp_dir(), &temp_purpose);
    let private = journal.parent().map(|dir| dir.join("private"));
    match private.filter(|private| trusted_dir(private).is_ok()) {
        Some(private) => ScratchDir::in_private(&private, purpose),
        None => ScratchDir::new_in(&std::env::temp_dir(), &temp_purpose),
    }
}

/// `path`'s real path, when every component of it is a directory owned by root or the caller
/// and writable by no one else unless sticky; each is checked on a descriptor opened with
/// `O_NOFOLLOW` from the one before, so no link can be swapped in between. The refusal is
/// [`Error::UnsafePath`].
pub fn trusted_dir(path: &Path) -> Result<PathBuf> {
    let real = path.canonicalize().map_err(|e| Error::io(format!("cannot resolve {}", path.display()), e))?;
    let me = crate::access::uid::effective();
    let mut dir = open_path(None, Path::new("/"))?;
    let mut walked = PathBuf::from("/");
    check_dir(&dir, &walked, me)?;
    for part in real.components().skip(1) {
        walked.push(part);
        dir = open_path(Some(&dir), Path::new(part.as_os_str())).map_err(|e| match e {
            Error::Io { source, .. } if source.raw_os_error() == Some(libc::ENOTDIR) => unsafe_path(
                &walked,
                "not a directory (or a link swapped in)".into(),
                "check the path and run again",
            ),
            other => other,
        })?;
        check_dir(&dir, &walked, me)?;
    }
    Ok(real)
}

/// Creates `path` for writing with `O_CREAT|O_EXCL|O_NOFOLLOW` and `mode` (set with fchmod,
/// so the umask does not change it): fails when anything, a link included, is already there.
pub fn create_file_exclusive(path: &Path, mode: u32) -> io::Result<File> {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    fchmod(&file, mode)?;
    Ok(file)
}

/// Copies the regular file `from` (its last component no link) to a new file `to`, mode 0600,
/// created by [`create_file_exclusive`]; in fixed-size steps, never sized from the source.
/// Returns the bytes copied.
pub fn copy_file_nofollow(from: &Path, to: &Path) -> io::Result<u64> {
    use std::io::{Read, Write};
    let mut source = crate::fsutil::open_regular(from, crate::fsutil::Symlinks::Refuse)?;
    let mut target = create_file_exclusive(to, 0o600)?;
    let mut buffer = vec![0u8; 1 << 20];
    let mut copied = 0u64;
    loop {
        let n = match source.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        target.write_all(&buffer[..n])?;
        copied += n as u64;
    }
    Ok(copied)
}

/// Copies the regular file `from` to `to` as [`copy_file_nofollow`] does, through a new file
/// with a random name beside `to`, synced, then renamed over `to`: whatever was at `to` (a
/// link included) is replaced, never written through.
pub fn copy_into_place(from: &Path, to: &Path) -> io::Result<()> {
    let parent = match to.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let name = to.file_name().map_or("file".into(), |n| n.to_string_lossy().into_owned());
    let random = random_u64().map_err(|e| io::Error::other(e.to_string()))?;
    let temp = parent.join(format!(".{name}.{}-{random:016x}.tmp", std::process::id()));
    let copied = copy_file_nofollow(from, &temp)
        .and_then(|_| File::open(&temp)?.sync_all())
        .and_then(|()| std::fs::rename(&temp, to));
    if copied.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    copied?;
    File::open(parent)?.sync_all()
}

/// The purposes of the scratch directories made in a state directory's `private/scratch/`.
pub const PRIVATE_PURPOSES: [&str; 1] = ["inspect"];

/// Sweeps a state directory's `private/scratch/` of what killed processes left (every tick
/// does, so a check killed mid-copy costs its copy's bytes only until the next tick).
pub fn sweep_private(private: &Path) -> u32 {
    let parent = private.join(PRIVATE_SCRATCH);
    PRIVATE_PURPOSES.iter().map(|purpose| sweep(&parent, purpose)).sum()
}

/// Removes the scratch directories of `purpose` in `parent` whose process is gone: directories
/// (not links) owned by the caller, named `PURPOSE-PID-…` with a PID that no longer runs.
/// Best effort; returns how many it removed.
pub fn sweep(parent: &Path, purpose: &str) -> u32 {
    let Ok(entries) = std::fs::read_dir(parent) else { return 0 };
    let me = crate::access::uid::effective();
    let mut removed = 0;
    for entry in entries.flatten() {
        let Some(pid) = scratch_pid(&entry.file_name(), purpose) else { continue };
        let Ok(meta) = std::fs::symlink_metadata(entry.path()) else { continue };
        if !meta.is_dir() || meta.uid() != me || pid == std::process::id() || alive(pid) {
            continue;
        }
        // Its process is gone here; a live one in another pid namespace still holds the lock.
        let Ok(dir) = open_dir_nofollow(&entry.path()) else { continue };
        if flock(&dir, libc::LOCK_EX | libc::LOCK_NB).is_ok() {
            removed += u32::from(std::fs::remove_dir_all(entry.path()).is_ok());
        }
    }
    removed
}

/// The pid in a scratch directory's name `PURPOSE-PID-SUFFIX` (SUFFIX alphanumeric).
fn scratch_pid(name: &OsStr, purpose: &str) -> Option<u32> {
    let rest = name.to_str()?.strip_prefix(purpose)?.strip_prefix('-')?;
    let (pid, suffix) = rest.split_once('-')?;
    let suffix_ok = !suffix.is_empty() && suffix.bytes().all(|b| b.is_ascii_alphanumeric());
    pid.parse().ok().filter(|pid| *pid > 0 && suffix_ok)
}

/// Whether a process `pid` exists (a permission refusal means it does).
fn alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return false };
    // SAFETY: signal 0 only checks that the process exists.
    unsafe { libc::kill(pid, 0) == 0 || *libc::__errno_location() != libc::ESRCH }
}

fn random_u64() -> Result<u64> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes)
        .map_err(|e| Error::io("cannot draw a random name", io::Error::other(e.to_string())))?;
    Ok(u64::from_le_bytes(bytes))
}

/// `mkdir(path, mode)`, failing when anything is at `path`; then the mode set exactly (the
/// umask may have cleared bits), through a descriptor of the new directory opened without
/// following a link.
pub fn mkdir_exclusive(path: &Path, mode: u32) -> io::Result<()> {
    let c = c_path(path)?;
    // SAFETY: a valid NUL-terminated path.
    if unsafe { libc::mkdir(c.as_ptr(), mode) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let dir = open_dir_nofollow(path)?;
    fchmod(&dir, mode)
}

/// Opens the directory `path` for reading without following a link in its last component
/// (`O_DIRECTORY|O_NOFOLLOW`): a descriptor to fchmod or fstat, never a link's target.
pub fn open_dir_nofollow(path: &Path) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

fn flock(file: &File, operation: libc::c_int) -> io::Result<()> {
    // SAFETY: a valid open descriptor.
    if unsafe { libc::flock(file.as_raw_fd(), operation) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Sets the mode of the open file (fchmod).
pub fn fchmod(file: &File, mode: u32) -> io::Result<()> {
    // SAFETY: a valid open descriptor.
    if unsafe { libc::fchmod(file.as_raw_fd(), mode as libc::mode_t) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `openat(at, name, O_PATH|O_DIRECTORY|O_NOFOLLOW)`: a descriptor of a directory that only
/// names it (nothing is opened for reading), refused when `name` is a link or no directory.
fn open_path(at: Option<&OwnedFd>, name: &Path) -> Result<OwnedFd> {
    let c = c_path(name).map_err(|e| Error::io(format!("cannot open {}", name.display()), e))?;
    let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    let at = at.map_or(libc::AT_FDCWD, AsRawFd::as_raw_fd);
    // SAFETY: a valid NUL-terminated path and descriptor; the result is checked.
    let fd = unsafe { libc::openat(at, c.as_ptr(), flags) };
    if fd < 0 {
        return Err(Error::io(format!("cannot open {}", name.display()), io::Error::last_os_error()));
    }
    // SAFETY: openat returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Refuses a directory owned by another user, or writable by others without the sticky bit.
fn check_dir(dir: &OwnedFd, path: &Path, me: u32) -> Result<()> {
    let stat =
        crate::fsutil::fstat(dir).map_err(|e| Error::io(format!("cannot stat {}", path.display()), e))?;
    if stat.st_uid != 0 && stat.st_uid != me {
        let why = format!("owned by uid {}, not by root or you (uid {me})", stat.st_uid);
        return Err(unsafe_path(path, why, "use a directory that root or you own"));
    }
    let mode = stat.st_mode & 0o7777;
    if mode & 0o022 != 0 && mode & libc::S_ISVTX == 0 {
        let why = format!("writable by others (mode {mode:04o}) and not sticky");
        return Err(unsafe_path(path, why, "remove the group and other write bits (chmod go-w)"));
    }
    Ok(())
}

fn unsafe_path(path: &Path, why: String, fix: &str) -> Error {
    Error::UnsafePath { path: path.to_path_buf(), why, fix: fix.to_string() }
}

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

#[cfg(test)]
mod tests;
