//! Durable file writes shared by the spool, the run folders and the inventory.
//!
//! One implementation of "write atomically" lives in `exec::atomic` (temp file with the mode
//! set despite the umask, fsync, rename, directory fsync); this module adapts it to the
//! library's error type so the rest of carma does not grow a second copy.

use std::fs::File;
use std::path::Path;

use crate::error::{Error, Result};
use crate::exec::ExecError;

/// Writes `bytes` to `path` so that a reader sees either the old file or the whole new one,
/// even across a power loss.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    crate::exec::write_file_atomic(path, bytes, mode).map_err(|e| match e {
        ExecError::Io { op, path, source } => Error::io(format!("cannot {op} {}", path.display()), source),
        other => {
            Error::io(format!("cannot write {}", path.display()), std::io::Error::other(other.to_string()))
        }
    })
}

/// Makes a rename or unlink in `dir` durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(format!("cannot fsync directory {}", dir.display()), e))
}

/// Reads a regular file of at most `max_bytes`, refusing anything else without blocking on it:
/// a FIFO would hang the reader and `/dev/zero` would never end, and either may sit behind a
/// path a user controls. Symlinks are followed (the caller decides whose path it is).
pub fn read_regular(path: &Path, max_bytes: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path)?;
    let meta = file.metadata()?;
    let kind = meta.file_type();
    let not_regular = if kind.is_dir() {
        Some("a directory")
    } else if kind.is_fifo() {
        Some("a FIFO")
    } else if kind.is_char_device() || kind.is_block_device() {
        Some("a device")
    } else if kind.is_socket() {
        Some("a socket")
    } else {
        None
    };
    if let Some(what) = not_regular {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{what}, not a regular file"),
        ));
    }
    if meta.len() > max_bytes {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{} bytes, more than the {max_bytes} allowed", meta.len()),
        ));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(max_bytes + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max_bytes {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("more than the {max_bytes} bytes allowed"),
        ));
    }
    Ok(bytes)
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
}
