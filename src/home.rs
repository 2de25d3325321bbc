//! The state directory: where it is, what it holds, and the lock that serialises writers.
//!
//! ```text
//! $CARMA_HOME/
//!   carma.redb    the journal (only the lock holder opens it, for milliseconds)
//!   carma.lock    File::lock target: exclusive for writers, shared for readers
//!   config.toml   documented defaults, written by `carma init`
//!   spool/        submitted specs waiting for the next tick (sticky, writable by all when root)
//!   runs/         one folder per task attempt: plan, logs, exit record
//! ```
//! The lock is taken before the journal is opened and dropped after it is closed, because
//! redb refuses a second open with `DatabaseAlreadyOpen` instead of waiting.

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// The resolved state directory.
#[derive(Clone, Debug)]
pub struct Home {
    root: PathBuf,
}

impl Home {
    /// Resolves the directory: `--home`/`$CARMA_HOME` when given (clap merges the two), else
    /// `/var/lib/carma` for root and `$XDG_DATA_HOME/carma` or `~/.local/share/carma` otherwise.
    pub fn resolve(explicit: Option<PathBuf>) -> Home {
        let root = explicit.unwrap_or_else(default_root);
        Home { root }
    }

    /// Uses `root` as is (tests, the simulator).
    pub fn at(root: impl Into<PathBuf>) -> Home {
        Home { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }
    pub fn journal_path(&self) -> PathBuf {
        self.root.join("carma.redb")
    }
    pub fn lock_path(&self) -> PathBuf {
        self.root.join("carma.lock")
    }
    pub fn config_path(&self) -> PathBuf {
        self.root.join("config.toml")
    }
    pub fn spool_dir(&self) -> PathBuf {
        self.root.join("spool")
    }
    pub fn runs_dir(&self) -> PathBuf {
        self.root.join("runs")
    }
    /// Written by each tick so that `carma submit` can check GPU counts without the journal.
    pub fn inventory_path(&self) -> PathBuf {
        self.root.join("inventory.json")
    }

    /// Fails with the "run carma init" error unless the directory has been initialised.
    pub fn require_initialized(&self) -> Result<()> {
        if self.lock_path().exists() && self.spool_dir().is_dir() {
            Ok(())
        } else {
            Err(Error::NotInitialized { path: self.root.clone() })
        }
    }

    /// Creates every part that is missing and leaves existing parts alone, so running
    /// `carma init` twice is harmless. Returns the parts it created.
    pub fn init(&self, config_text: &str) -> Result<Vec<String>> {
        let shared = is_root();
        let mut created = Vec::new();
        make_dir(&self.root, 0o755, &mut created)?;
        // As root, every user must be able to drop specs into the spool but not list,
        // rename or delete other users' files: the sticky, write-only mode of cron's spool.
        make_dir(&self.spool_dir(), if shared { 0o1733 } else { 0o700 }, &mut created)?;
        make_dir(&self.runs_dir(), if shared { 0o755 } else { 0o700 }, &mut created)?;
        make_file(&self.lock_path(), b"", 0o644, &mut created)?;
        make_file(&self.config_path(), config_text.as_bytes(), 0o644, &mut created)?;
        if !self.journal_path().exists() {
            crate::journal::Journal::create(&self.journal_path())?;
            created.push(self.journal_path().display().to_string());
        }
        Ok(created)
    }
}

fn default_root() -> PathBuf {
    if is_root() {
        return PathBuf::from("/var/lib/carma");
    }
    if let Some(data) = std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(data).join("carma");
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
    home.join(".local/share/carma")
}

/// True when the process runs as root, which turns on multi-user behaviour.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

fn make_dir(path: &Path, mode: u32, created: &mut Vec<String>) -> Result<()> {
    if path.is_dir() {
        return Ok(());
    }
    fs::DirBuilder::new()
        .mode(mode)
        .create(path)
        .map_err(|e| Error::io(format!("cannot create {}", path.display()), e))?;
    // The umask may have cleared bits (the sticky and write bits of the spool), so set the
    // mode explicitly after creation.
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .map_err(|e| Error::io(format!("cannot set mode of {}", path.display()), e))?;
    created.push(path.display().to_string());
    Ok(())
}

fn make_file(path: &Path, content: &[u8], mode: u32, created: &mut Vec<String>) -> Result<()> {
    if path.exists() {
        return Ok(());
    }
    crate::fsutil::write_atomic(path, content, mode)?;
    created.push(path.display().to_string());
    Ok(())
}

/// Whether a lock is for reading (shared) or writing (exclusive).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockMode {
    Shared,
    Exclusive,
}

/// A held `carma.lock`; released on drop.
#[derive(Debug)]
pub struct LockGuard {
    file: File,
    pub mode: LockMode,
}

impl LockGuard {
    /// Takes the lock, polling for at most `wait`. Polling (rather than a blocking lock)
    /// bounds the wait, so a hung holder turns into exit code 75 instead of a pile of ticks.
    pub fn acquire(home: &Home, mode: LockMode, wait: Duration) -> Result<LockGuard> {
        home.require_initialized()?;
        let path = home.lock_path();
        let file = OpenOptions::new()
            .read(true)
            .mode(0o644)
            .open(&path)
            .map_err(|e| Error::io(format!("cannot open lock {}", path.display()), e))?;
        let started = Instant::now();
        let mut pause = Duration::from_millis(2);
        loop {
            let attempt = match mode {
                LockMode::Shared => file.try_lock_shared(),
                LockMode::Exclusive => file.try_lock(),
            };
            match attempt {
                Ok(()) => return Ok(LockGuard { file, mode }),
                Err(std::fs::TryLockError::WouldBlock) => {}
                Err(std::fs::TryLockError::Error(e)) => {
                    return Err(Error::io(format!("cannot lock {}", path.display()), e));
                }
            }
            if started.elapsed() >= wait {
                let waited_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
                return Err(Error::LockBusy { path, waited_ms });
            }
            std::thread::sleep(pause.min(wait.saturating_sub(started.elapsed())));
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }

    /// Trades a shared lock for an exclusive one (needed to repair a journal after a crash).
    pub fn upgrade(self, home: &Home, wait: Duration) -> Result<LockGuard> {
        drop(self);
        LockGuard::acquire(home, LockMode::Exclusive, wait)
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        // Closing the descriptor releases the lock anyway; unlocking first is just explicit.
        let _ = self.file.unlock();
    }
}
