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
