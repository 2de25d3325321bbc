//! Opening and syncing files, at the bottom of the layers: a regular file opened without
//! blocking or following a user's link, read with a cap; a path a user named, opened as root
//! only once it is known to be that user's regular file (`user_path`); a directory made durable.
//!
//! Writing a file atomically lives in `exec::atomic` (`exec::write_atomic` for the library's
//! error type), the one implementation of it.

use std::fs::File;
use std::path::Path;

use crate::error::{Error, Result};

mod user_path;

pub use user_path::open_user_file;
#[cfg(test)]
pub(crate) use user_path::tests::opened_during;

/// fstat of an open descriptor (an `O_PATH` one included).
pub fn fstat(fd: &impl std::os::fd::AsRawFd) -> std::io::Result<libc::stat> {
    // SAFETY: stat is plain data, filled by fstat on success.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor and a valid out-pointer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut stat) } == 0 {
        Ok(stat)
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Makes a rename or unlink in `dir` durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(format!("cannot fsync directory {}", dir.display()), e))
}

/// Whether [`open_regular`] follows a symbolic link in the path's last component.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Symlinks {
    /// Open what the link points to (the caller decides whose path it is).
    Follow,
    /// Refuse the link itself: the path must name the file.
    Refuse,
}

/// Reads a regular file of at most `max_bytes`, refusing anything else without blocking on it:
/// a FIFO would hang the reader and `/dev/zero` would never end, and either may sit behind a
/// path a user controls. Symlinks are followed (the caller decides whose path it is).
pub fn read_regular(path: &Path, max_bytes: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let file = open_regular(path, Symlinks::Follow)?;
    let len = file.metadata()?.len();
    if len > max_bytes {
        return Err(refused(format!("{len} bytes, more than the {max_bytes} allowed")));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(max_bytes + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max_bytes {
        return Err(refused(format!("more than the {max_bytes} bytes allowed")));
    }
    Ok(bytes)
}

/// Opens `path` for reading only if it is a regular file, checked on the open descriptor
/// (fstat), so nothing can be swapped in between the check and the read. `O_NONBLOCK` makes
/// opening a FIFO return at once instead of waiting for a writer, `O_NOCTTY` keeps a terminal
/// device from becoming the tick's controlling terminal, and with [`Symlinks::Refuse`]
/// `O_NOFOLLOW` refuses a link in the last component. A refusal is an `InvalidInput` error
/// saying what the path is instead ("a FIFO, not a regular file").
pub fn open_regular(path: &Path, symlinks: Symlinks) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut flags = libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC;
    if symlinks == Symlinks::Refuse {
        flags |= libc::O_NOFOLLOW;
    }
    let file = match std::fs::OpenOptions::new().read(true).custom_flags(flags).open(path) {
        Ok(file) => file,
        // ELOOP also means a loop further up the path; only a link at the end is named as one.
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) && is_symlink(path) => {
            return Err(refused("a symbolic link, not a regular file".into()));
        }
        Err(e) => return Err(e),
    };
    match not_regular(&file.metadata()?.file_type()) {
        Some(what) => Err(refused(format!("{what}, not a regular file"))),
        None => Ok(file),
    }
}

fn is_symlink(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|meta| meta.file_type().is_symlink())
}

/// What a file that is not regular is, in words; `None` for a regular file.
fn not_regular(kind: &std::fs::FileType) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_file() {
        None
    } else if kind.is_dir() {
        Some("a directory")
    } else if kind.is_fifo() {
        Some("a FIFO")
    } else if kind.is_char_device() || kind.is_block_device() {
        Some("a device")
    } else if kind.is_socket() {
        Some("a socket")
    } else {
        // fstat never reports a symlink, so no other kind is left today; do not guess.
        Some("an unknown kind of file")
    }
}

fn refused(message: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_regular_reads_files_and_refuses_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"{\"x\": 1}").unwrap();
        assert_eq!(read_regular(&file, 100).unwrap(), b"{\"x\": 1}");
        assert_eq!(read_regular(&file, 3).unwrap_err().to_string(), "8 bytes, more than the 3 allowed");
        assert_eq!(read_regular(dir.path(), 100).unwrap_err().to_string(), "a directory, not a regular file");
        assert_eq!(
            read_regular(Path::new("/dev/zero"), 100).unwrap_err().to_string(),
            "a device, not a regular file"
        );
        let fifo = dir.path().join("p");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert_eq!(read_regular(&fifo, 100).unwrap_err().to_string(), "a FIFO, not a regular file");
    }

    /// Goal: `Symlinks::Refuse` refuses a link to a good file by name, while `Follow` opens it,
    /// and a FIFO is refused at once by either (O_NONBLOCK: the open waits for no writer).
    #[test]
    fn open_regular_refuses_links_only_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        let link = dir.path().join("l");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert!(open_regular(&link, Symlinks::Follow).is_ok());
        assert!(open_regular(&file, Symlinks::Refuse).is_ok());
        let error = open_regular(&link, Symlinks::Refuse).unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput);
        assert_eq!(error.to_string(), "a symbolic link, not a regular file");
        let missing = open_regular(&dir.path().join("none"), Symlinks::Refuse).unwrap_err();
        assert_eq!(missing.kind(), std::io::ErrorKind::NotFound);
    }
}
