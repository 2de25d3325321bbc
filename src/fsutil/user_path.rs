//! Opening a path a user named (a job's `--output`, a model summary) as root, without
//! anything on the path being opened for real before it is known to be the user's regular file.
//!
//! `O_NOFOLLOW` guards only the last component, and a check after `open` is too late: opening
//! some devices has an effect (`/dev/watchdog` arms on open) and a FIFO can block the reader.
//! So the path is walked one component at a time with `openat(O_PATH|O_NOFOLLOW)`, which opens
//! nothing but a name. A link is followed only when root owns it (no user can make one); a
//! link of a user's, or anything but a directory before the last component, is refused. The
//! last component's descriptor is checked with `fstat` (a regular file, owned by the expected
//! user) and only then reopened for reading through `/proc/self/fd/N`, which is that same
//! inode, whatever happened to the path meanwhile.

use std::collections::VecDeque;
use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Component, Path};

use super::refused;

/// Links followed on one path before giving up, as the kernel's `ELOOP` limit.
const LINKS_MAX: u32 = 40;

/// Opens the regular file at the absolute `path` for reading as described in the module docs;
/// with `owner`, only a file that uid owns. A refusal is an `InvalidInput` error saying what
/// was found instead ("a FIFO, not a regular file", "/tmp/x: a symbolic link of uid 1001").
pub fn open_user_file(path: &Path, owner: Option<u32>) -> io::Result<File> {
    if !path.is_absolute() {
        return Err(refused("not an absolute path".into()));
    }
    let mut pending: VecDeque<OsString> = VecDeque::new();
    push_components(&mut pending, path);
    let mut dir = open_path(None, OsStr::new("/"))?;
    let mut links = 0;
    while let Some(name) = pending.pop_front() {
        if name == ".." || name == "." {
            dir = open_path(Some(&dir), &name)?;
            continue;
        }
        let fd = open_path(Some(&dir), &name)?;
        let stat = crate::fsutil::fstat(&fd)?;
        match stat.st_mode & libc::S_IFMT {
            libc::S_IFLNK => {
                if stat.st_uid != 0 {
                    let shown = Path::new(&name).display();
                    return Err(refused(format!("{shown}: a symbolic link of uid {}", stat.st_uid)));
                }
                links += 1;
                if links > LINKS_MAX {
                    return Err(io::Error::from_raw_os_error(libc::ELOOP));
                }
                let target = read_link(&fd)?;
                if target.is_absolute() {
                    dir = open_path(None, OsStr::new("/"))?;
                }
                let mut expanded = VecDeque::new();
                push_components(&mut expanded, &target);
                expanded.extend(pending);
                pending = expanded;
            }
            libc::S_IFDIR if !pending.is_empty() => dir = fd,
            _ if !pending.is_empty() => {
                let shown = Path::new(&name).display();
                return Err(refused(format!("{shown}: {}, not a directory", kind_words(stat.st_mode))));
            }
            libc::S_IFREG => return reopen(&fd, &stat, owner),
            _ => return Err(refused(format!("{}, not a regular file", kind_words(stat.st_mode)))),
        }
    }
    Err(refused("a directory, not a regular file".into()))
}

/// The checked descriptor, reopened for reading (non-blocking, no controlling terminal).
fn reopen(fd: &OwnedFd, stat: &libc::stat, owner: Option<u32>) -> io::Result<File> {
    if let Some(uid) = owner.filter(|uid| *uid != stat.st_uid) {
        return Err(refused(format!("owned by uid {}, not by uid {uid}", stat.st_uid)));
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(format!("/proc/self/fd/{}", fd.as_raw_fd()))?;
    let meta = file.metadata()?;
    if meta.dev() != stat.st_dev || meta.ino() != stat.st_ino || !meta.is_file() {
        return Err(refused("changed while it was opened".into()));
    }
    Ok(file)
}

fn push_components(pending: &mut VecDeque<OsString>, path: &Path) {
    for part in path.components() {
        match part {
            Component::Normal(name) => pending.push_back(name.to_os_string()),
            Component::ParentDir => pending.push_back("..".into()),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
}

/// `openat(at, name, O_PATH|O_NOFOLLOW)`: a descriptor that names the file and opens nothing.
fn open_path(at: Option<&OwnedFd>, name: &OsStr) -> io::Result<OwnedFd> {
    let c = CString::new(name.as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let at = at.map_or(libc::AT_FDCWD, AsRawFd::as_raw_fd);
    // SAFETY: a valid NUL-terminated name and descriptor; the result is checked.
    let fd = unsafe { libc::openat(at, c.as_ptr(), libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: openat returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The target of the link `link` names (an `O_PATH` descriptor of the link itself), read
/// from the descriptor so that no other link can be swapped in at the name meanwhile.
fn read_link(link: &OwnedFd) -> io::Result<std::path::PathBuf> {
    let mut buffer = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: a valid descriptor, an empty NUL-terminated name (the descriptor itself) and a
    // buffer of the length given.
    let n =
        unsafe { libc::readlinkat(link.as_raw_fd(), c"".as_ptr(), buffer.as_mut_ptr().cast(), buffer.len()) };
    let n = usize::try_from(n).map_err(|_| io::Error::last_os_error())?;
    buffer.truncate(n);
    Ok(OsString::from_vec(buffer).into())
}

fn kind_words(mode: libc::mode_t) -> &'static str {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => "a directory",
        libc::S_IFIFO => "a FIFO",
        libc::S_IFCHR | libc::S_IFBLK => "a device",
        libc::S_IFSOCK => "a socket",
        libc::S_IFLNK => "a symbolic link",
        _ => "an unknown kind of file",
    }
}

#[cfg(test)]
pub(crate) mod tests;
