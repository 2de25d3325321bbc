//! The only system calls through which the tick touches a user's files: `openat` relative to
//! a directory descriptor the tick opened itself, never following a link and never blocking,
//! `fstat` on the open descriptor, reads with a hard cap, and `unlinkat`/`renameat` of a name
//! inside a checked directory. Decisions about what was found are made on the descriptor's
//! `fstat`, never on a path, so a name swapped between the check and the use changes nothing.

use std::ffi::{CStr, CString, OsStr, OsString};
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

/// What `fstat` says an open descriptor is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stat {
    pub uid: u32,
    pub mode: u32,
    pub nlink: u64,
    pub size: u64,
    /// Seconds since the epoch of the last status change (`ctime`): a `link()` or `chmod`.
    pub ctime_s: i64,
    /// Seconds since the epoch of the last change to the contents.
    pub mtime_s: i64,
    /// The bytes it holds on disk (`st_blocks` x 512): a sparse file's, not its length.
    pub disk_bytes: u64,
}

impl Stat {
    pub(crate) fn is_dir(self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFDIR
    }
    pub(crate) fn is_file(self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFREG
    }
    /// The kind in words, for a refusal: "a directory", "a FIFO", ...
    pub(crate) fn kind(self) -> &'static str {
        match self.mode & libc::S_IFMT {
            libc::S_IFREG => "a regular file",
            libc::S_IFDIR => "a directory",
            libc::S_IFIFO => "a FIFO",
            libc::S_IFLNK => "a symbolic link",
            libc::S_IFSOCK => "a socket",
            libc::S_IFCHR | libc::S_IFBLK => "a device",
            _ => "an unknown kind of file",
        }
    }
}

fn cstr(name: &OsStr) -> std::io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))
}

fn stat_of(raw: &libc::stat) -> Stat {
    Stat {
        uid: raw.st_uid,
        mode: raw.st_mode,
        nlink: raw.st_nlink,
        size: u64::try_from(raw.st_size).unwrap_or(0),
        ctime_s: raw.st_ctime,
        mtime_s: raw.st_mtime,
        disk_bytes: u64::try_from(raw.st_blocks).unwrap_or(0).saturating_mul(512),
    }
}

/// `fstat` of an open descriptor.
pub(crate) fn fstat(fd: &impl AsRawFd) -> std::io::Result<Stat> {
    // SAFETY: `raw` is a plain C struct filled by fstat; the descriptor is open.
    unsafe {
        let mut raw: libc::stat = std::mem::zeroed();
        if libc::fstat(fd.as_raw_fd(), &mut raw) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(stat_of(&raw))
    }
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`: what an entry is without opening it (a link is
/// described as itself). Used only to attribute and sweep entries that are never read.
pub(crate) fn lstat_at(dir: &impl AsRawFd, name: &OsStr) -> std::io::Result<Stat> {
    let name = cstr(name)?;
    // SAFETY: as in `fstat`; `name` is NUL-terminated.
    unsafe {
        let mut raw: libc::stat = std::mem::zeroed();
        if libc::fstatat(dir.as_raw_fd(), name.as_ptr(), &mut raw, libc::AT_SYMLINK_NOFOLLOW) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(stat_of(&raw))
    }
}

fn open_raw(dir: Option<&dyn AsRawFd>, path: &CStr, flags: libc::c_int) -> std::io::Result<OwnedFd> {
    let flags = flags | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC;
    let at = dir.map_or(libc::AT_FDCWD, |d| d.as_raw_fd());
    // SAFETY: `path` is NUL-terminated; a returned descriptor is owned by us alone.
    let fd = unsafe { libc::openat(at, path.as_ptr(), flags) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is not shared.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens a directory the tick itself chose by path (the state directory's `spool/`,
/// `quarantine/`), refusing a symbolic link in its last component.
pub(crate) fn open_dir(path: &Path) -> std::io::Result<OwnedFd> {
    open_raw(None, &cstr(path.as_os_str())?, libc::O_RDONLY | libc::O_DIRECTORY)
}

/// Opens `name` inside `dir` as a directory, never following a link.
pub(crate) fn open_dir_at(dir: &impl AsRawFd, name: &OsStr) -> std::io::Result<OwnedFd> {
    open_raw(Some(dir), &cstr(name)?, libc::O_RDONLY | libc::O_DIRECTORY)
}

/// Opens `name` inside `dir` for reading, never following a link and never blocking: a FIFO
/// without a writer opens at once, a symbolic link fails with `ELOOP`. The caller checks
/// what it got with [`fstat`] before reading.
pub(crate) fn open_at(dir: &impl AsRawFd, name: &OsStr) -> std::io::Result<File> {
    open_raw(Some(dir), &cstr(name)?, libc::O_RDONLY).map(File::from)
}

/// Creates `name` inside `dir` exclusively (never an existing file or link), for writing.
pub(crate) fn create_at(dir: &impl AsRawFd, name: &OsStr, mode: u32) -> std::io::Result<File> {
    let name = cstr(name)?;
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: `name` is NUL-terminated; the descriptor is ours alone.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags, mode as libc::c_uint) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: just opened, not shared.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// Opens or creates `name` inside `dir` for reading and writing, never following a link (a
/// root-owned file of the tick's own, such as the private vault).
pub(crate) fn open_rw_at(dir: &impl AsRawFd, name: &OsStr, mode: u32) -> std::io::Result<File> {
    let name = cstr(name)?;
    let flags = libc::O_RDWR | libc::O_CREAT | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC;
    // SAFETY: `name` is NUL-terminated; the descriptor is ours alone.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags, mode as libc::c_uint) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: just opened, not shared.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// Reads at most `cap` bytes; `Err(None)` when there were more (the caller refuses the file),
/// `Err(Some(e))` on a read error.
pub(crate) fn read_capped(file: &File, cap: u64) -> Result<Vec<u8>, Option<std::io::Error>> {
    read_capped_sized(file, cap, 0)
}

/// [`read_capped`] into a buffer sized for `expected` bytes (the size `fstat` gave), so a
/// small file takes one read and one to see its end, not a doubling buffer's several.
pub(crate) fn read_capped_sized(
    mut file: &File,
    cap: u64,
    expected: u64,
) -> Result<Vec<u8>, Option<std::io::Error>> {
    let mut bytes = Vec::with_capacity(usize::try_from(expected.min(cap)).unwrap_or(0).saturating_add(1));
    (&mut file).take(cap + 1).read_to_end(&mut bytes).map_err(Some)?;
    if bytes.len() as u64 > cap {
        return Err(None);
    }
    Ok(bytes)
}

/// `unlinkat(dir, name)`: removes a name, never what a link points to.
pub(crate) fn unlink_at(dir: &impl AsRawFd, name: &OsStr) -> std::io::Result<()> {
    let name = cstr(name)?;
    // SAFETY: `name` is NUL-terminated.
    if unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// `unlinkat(dir, name, AT_REMOVEDIR)`: removes an empty directory, never through a link.
pub(crate) fn remove_dir_at(dir: &impl AsRawFd, name: &OsStr) -> std::io::Result<()> {
    let name = cstr(name)?;
    // SAFETY: `name` is NUL-terminated.
    if unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), libc::AT_REMOVEDIR) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// `renameat(from_dir, from, to_dir, to)`: moves a name (a link moves as a link).
pub(crate) fn rename_at(
    from_dir: &impl AsRawFd,
    from: &OsStr,
    to_dir: &impl AsRawFd,
    to: &OsStr,
) -> std::io::Result<()> {
    let (from, to) = (cstr(from)?, cstr(to)?);
    // SAFETY: both names are NUL-terminated.
    let rc = unsafe { libc::renameat(from_dir.as_raw_fd(), from.as_ptr(), to_dir.as_raw_fd(), to.as_ptr()) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// `linkat(dir, from, dir, to)`: a second name for a file; fails with `EEXIST` rather than
/// replace an existing name.
pub(crate) fn link_at(dir: &impl AsRawFd, from: &OsStr, to: &OsStr) -> std::io::Result<()> {
    let (from, to) = (cstr(from)?, cstr(to)?);
    // SAFETY: both names are NUL-terminated.
    let rc = unsafe { libc::linkat(dir.as_raw_fd(), from.as_ptr(), dir.as_raw_fd(), to.as_ptr(), 0) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The names in an open directory, at most `max` of them (`.` and `..` left out), and whether
/// more remained. Reading stops at `max`: a directory of a million names costs one batch.
pub(crate) fn list(dir: &impl AsRawFd, max: usize) -> std::io::Result<(Vec<OsString>, bool)> {
    let mut names = Vec::new();
    let mut more = false;
    visit(dir, |name| {
        if names.len() == max {
            more = true;
            return false;
        }
        names.push(OsString::from_vec(name.to_vec()));
        true
    })?;
    Ok((names, more))
}

/// Calls `each` with every name in an open directory (`.` and `..` left out) until it
/// returns false, holding one name at a time.
pub(crate) fn visit(dir: &impl AsRawFd, mut each: impl FnMut(&[u8]) -> bool) -> std::io::Result<()> {
    // fdopendir takes ownership of the descriptor it is given, so it gets a duplicate.
    // SAFETY: dup of an open descriptor; on failure nothing is owned.
    let dup = unsafe { libc::fcntl(dir.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0) };
    if dup < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `dup` is ours; fdopendir owns it from here (closedir closes it).
    let stream = unsafe { libc::fdopendir(dup) };
    if stream.is_null() {
        let e = std::io::Error::last_os_error();
        // SAFETY: fdopendir failed, so `dup` is still ours to close.
        unsafe { libc::close(dup) };
        return Err(e);
    }
    // The duplicate shares the offset with `dir`: start from the beginning.
    // SAFETY: `stream` is a valid directory stream.
    unsafe { libc::rewinddir(stream) };
    loop {
        // SAFETY: `stream` is valid; the entry lives until the next readdir on it.
        let entry = unsafe { libc::readdir(stream) };
        if entry.is_null() {
            break;
        }
        // SAFETY: d_name is NUL-terminated within the entry.
        let name = unsafe { CStr::from_ptr((*entry).d_name.as_ptr()) }.to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        if !each(name) {
            break;
        }
    }
    // SAFETY: `stream` is valid and closed once.
    unsafe { libc::closedir(stream) };
    Ok(())
}

/// Makes directory `name` inside `dir` with exactly `mode` (whatever the umask) and opens it.
pub(crate) fn make_dir_at(dir: &impl AsRawFd, name: &OsStr, mode: u32) -> std::io::Result<OwnedFd> {
    let c = cstr(name)?;
    // SAFETY: `c` is NUL-terminated.
    if unsafe { libc::mkdirat(dir.as_raw_fd(), c.as_ptr(), 0o700) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let made = open_dir_at(dir, name)?;
    chmod(&made, mode)?;
    Ok(made)
}

/// `fchmod` of an open descriptor.
pub(crate) fn chmod(fd: &impl AsRawFd, mode: u32) -> std::io::Result<()> {
    // SAFETY: an open descriptor.
    if unsafe { libc::fchmod(fd.as_raw_fd(), mode as libc::mode_t) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// `fchown` of an open descriptor.
pub(crate) fn chown(fd: &impl AsRawFd, uid: u32, gid: u32) -> std::io::Result<()> {
    // SAFETY: an open descriptor.
    if unsafe { libc::fchown(fd.as_raw_fd(), uid, gid) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// `fsync` of an open directory, making renames and unlinks in it durable.
pub(crate) fn sync(fd: &impl AsRawFd) -> std::io::Result<()> {
    // SAFETY: an open descriptor.
    if unsafe { libc::fsync(fd.as_raw_fd()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: a link is never followed, a FIFO never blocks, and listing stops at its bound.
    #[test]
    fn links_are_refused_fifos_do_not_block_and_listing_is_bounded() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("secret"), b"s").unwrap();
        std::os::unix::fs::symlink("secret", tmp.path().join("link")).unwrap();
        let fifo = CString::new(tmp.path().join("fifo").as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let dir = open_dir(tmp.path()).unwrap();
        let e = open_at(&dir, OsStr::new("link")).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ELOOP));
        let fifo = open_at(&dir, OsStr::new("fifo")).unwrap();
        assert_eq!(fstat(&fifo).unwrap().kind(), "a FIFO");
        assert_eq!(lstat_at(&dir, OsStr::new("link")).unwrap().kind(), "a symbolic link");
        let file = open_at(&dir, OsStr::new("secret")).unwrap();
        assert_eq!(read_capped(&file, 1).unwrap(), b"s");
        let (names, more) = list(&dir, 2).unwrap();
        assert_eq!((names.len(), more), (2, true));
        let (names, more) = list(&dir, 3).unwrap();
        assert_eq!((names.len(), more), (3, false));
        assert!(create_at(&dir, OsStr::new("link"), 0o600).is_err(), "O_EXCL never writes through a link");
    }
}
