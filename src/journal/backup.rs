//! `carma journal backup DEST`: a consistent copy of a queue's journal, taken while ticks run.
//!
//! Every writer changes the journal (and root's vault, `private/vault.redb`, which ingest
//! writes in the same session) only under the exclusive `carma.lock`, and each commit is
//! durable before the lock is let go. So under the shared lock the files on disk are exactly
//! the last commit: the backup takes it, copies the files byte for byte (no link followed, in
//! fixed-size steps), lets go, and only then syncs and checks the copy with `carma journal
//! check`'s own code. The lock is held for the copy alone: a tick waits at most that long.
//!
//! DEST is a new folder (0700; it holds the vault's environment values): `carma.redb`,
//! `config.toml` and `private/vault.redb` as the state directory has them. A backup never
//! overwrites anything.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use super::check::{self, CheckReport};
use crate::error::{Error, Result};
use crate::home::{Home, LockGuard, LockMode};

/// The `schema` tag of `carma journal backup --json`.
pub const BACKUP_SCHEMA: &str = "carma.journal-backup/1";

/// What `carma journal backup` did.
#[derive(Debug, Clone, Serialize)]
pub struct BackupReport {
    /// Always [`BACKUP_SCHEMA`].
    pub schema: &'static str,
    /// The backup folder.
    pub dest: String,
    /// Every file copied, relative to `dest`, in the order copied.
    pub files: Vec<String>,
    /// Bytes copied, all files together.
    pub bytes: u64,
    /// How long the shared lock was held, ms (ticks wait at most this long).
    pub lock_held_ms: u64,
    /// `carma journal check` of the copied journal.
    pub check: CheckReport,
}

/// The parts of a state directory a backup copies, relative to it, in this order; the journal
/// must be there, the others are copied when they are.
const PARTS: [&str; 3] = ["carma.redb", "config.toml", "private/vault.redb"];

/// Takes a backup of `home`'s journal into the new folder `dest` (see the module docs),
/// waiting at most `wait` for the shared lock.
pub fn backup(home: &Home, dest: &Path, wait: Duration) -> Result<BackupReport> {
    home.require_initialized()?;
    make_dest(dest)?;
    let mut files = Vec::new();
    let mut bytes = 0u64;
    let lock = LockGuard::acquire(home, LockMode::Shared, wait)?;
    let locked = std::time::Instant::now();
    for part in PARTS {
        let from = home.root().join(part);
        if part != PARTS[0] && !from.exists() {
            continue;
        }
        let to = dest.join(part);
        if let Some(parent) = to.parent().filter(|p| *p != dest) {
            crate::scratch::mkdir_exclusive(parent, 0o700)
                .map_err(|e| Error::io(format!("cannot create {}", parent.display()), e))?;
        }
        bytes += crate::scratch::copy_file_nofollow(&from, &to)
            .map_err(|e| Error::io(format!("cannot copy {} to {}", from.display(), to.display()), e))?;
        files.push(part.to_string());
    }
    let lock_held_ms = u64::try_from(locked.elapsed().as_millis()).unwrap_or(u64::MAX);
    drop(lock);
    sync_all(dest, &files)?;
    let check = check::check(&dest.join(PARTS[0]))?;
    assert_eq!(files.first().map(String::as_str), Some(PARTS[0]), "the journal is copied first");
    Ok(BackupReport {
        schema: BACKUP_SCHEMA,
        dest: dest.display().to_string(),
        files,
        bytes,
        lock_held_ms,
        check,
    })
}

/// Makes `dest` a new, empty folder of the caller's, 0700; an existing one is refused.
fn make_dest(dest: &Path) -> Result<()> {
    match crate::scratch::mkdir_exclusive(dest, 0o700) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(Error::BadInput(format!(
            "backup folder {} already exists; a backup never overwrites: give a new folder, e.g. {}",
            dest.display(),
            dated(dest).display()
        ))),
        Err(e) => Err(Error::io(
            format!("cannot create backup folder {} (its parent must exist)", dest.display()),
            e,
        )),
    }
}

/// `DEST-YYYYMMDDTHHMMSS`, the name the refusal suggests.
fn dated(dest: &Path) -> PathBuf {
    use crate::clock::Clock;
    let now = crate::clock::format_ms(crate::clock::SystemClock.now_ms());
    let stamp: String = now.chars().filter(char::is_ascii_alphanumeric).take(15).collect();
    let mut name = dest.as_os_str().to_owned();
    name.push(format!("-{stamp}"));
    PathBuf::from(name)
}

/// Every copied file, then the folders that name them, to disk.
fn sync_all(dest: &Path, files: &[String]) -> Result<()> {
    for file in files {
        let path = dest.join(file);
        std::fs::File::open(&path)
            .and_then(|f| f.sync_all())
            .map_err(|e| Error::io(format!("cannot fsync {}", path.display()), e))?;
    }
    if files.iter().any(|f| f.starts_with("private/")) {
        crate::fsutil::sync_dir(&dest.join("private"))?;
    }
    crate::fsutil::sync_dir(dest)?;
    if let Some(parent) = dest.parent().filter(|p| !p.as_os_str().is_empty()) {
        crate::fsutil::sync_dir(parent)?;
    }
    Ok(())
}
