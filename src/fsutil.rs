//! Durable file writes shared by the spool, the run folders and the inventory.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::error::{Error, Result};

/// Writes `bytes` to `path` so that a reader sees either the old file or the whole new one,
/// even across a power loss: temp file in the same directory, fsync, rename, fsync of the
/// directory.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = dir.join(format!(".{name}.tmp{}", std::process::id()));
    let context = |what: &str| format!("cannot {what} {}", tmp.display());
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&tmp)
        .map_err(|e| Error::io(context("create"), e))?;
    file.write_all(bytes).map_err(|e| Error::io(context("write"), e))?;
    file.sync_all().map_err(|e| Error::io(context("fsync"), e))?;
    drop(file);
    fs::rename(&tmp, path).map_err(|e| {
        let _ = fs::remove_file(&tmp);
        Error::io(format!("cannot rename into {}", path.display()), e)
    })?;
    sync_dir(dir)
}

/// Makes a rename or unlink in `dir` durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(format!("cannot fsync directory {}", dir.display()), e))
}
