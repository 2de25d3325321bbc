//! The state directory: where it is, what it holds, and the lock that serialises writers.
//!
//! ```text
//! $CARMA_HOME/                    as root (the lab's system queue)   personal queue
//!   carma.redb    the journal      0600 root                          0600
//!   carma.lock    File::lock       0600 root: no user can hold it     0600
//!   carma.redb.seal  what the last writer left (see `journal::verdict`), umask
//!   config.toml   settings         0644                               0644
//!   spool/        submissions      1777 (sticky): anyone drops files  0700
//!   private/      vault.redb: accepted submissions' environment values, 0700 root
//!   quarantine/   odd spool entries moved out of the way, 0700 root
//!   runs/         attempts' folders, 0711 (traversable, not listable)
//!   view/         the published read model every user reads, 0755 (see `view`)
//! ```
//! Writers take the lock before opening the journal and drop it after closing it, because
//! redb refuses a second open with `DatabaseAlreadyOpen` instead of waiting. Readers never
//! take it: they read `view/`.
//!
//! **Finding the queue.** `--home`/`$CARMA_HOME` win. Otherwise the system queue: the `home`
//! named in `/etc/carma/carma.toml` (written by root's `carma init`; `$CARMA_SYSTEM_CONFIG`
//! names another file, for tests), else `/var/lib/carma` when it exists. A user without either
//! gets a personal queue under `~/.local/share/carma`, which only their own `carma tick` serves.

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// Where the system queue lives unless `/etc/carma/carma.toml` says otherwise.
pub const SYSTEM_HOME_DEFAULT: &str = "/var/lib/carma";
/// The file root's `carma init` writes so that every user finds the system queue.
pub const SYSTEM_CONFIG_DEFAULT: &str = "/etc/carma/carma.toml";
/// Environment variable naming another system config file (tests, unusual installs).
pub const SYSTEM_CONFIG_ENV: &str = "CARMA_SYSTEM_CONFIG";

/// The resolved state directory.
#[derive(Clone, Debug)]
pub struct Home {
    root: PathBuf,
    origin: Origin,
    /// Whether writers publish the read model (`view`); off for the simulator's scratch homes,
    /// whose journals nobody reads while they run.
    publishes_view: bool,
}

/// How the state directory was found; errors say which `carma init` is missing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// `--home` or `$CARMA_HOME`.
    Explicit,
    /// The system queue (from the system config or its default path).
    System,
    /// A user's personal queue (no system queue exists).
    Personal,
}

/// `/etc/carma/carma.toml`.
#[derive(Debug, Default, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
struct SystemConfig {
    /// The system queue's state directory (written by root's `carma init`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    home: Option<PathBuf>,
    /// A Slurm cluster's settings for login nodes (written by the admin).
    #[serde(default, skip_serializing_if = "SystemSlurm::is_empty")]
    slurm: SystemSlurm,
}

/// `[slurm]` of the system config.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct SystemSlurm {
    /// Where the node journals are, for `carma queue` and `carma report --merge` on a login
    /// node: directories of the nodes' state directories, state directories, journal files,
    /// or globs of those (`*` and `?` in the last component).
    #[serde(default)]
    pub journals: Vec<String>,
}

impl SystemSlurm {
    fn is_empty(&self) -> bool {
        self.journals.is_empty()
    }
}

impl Home {
    /// Resolves the directory (see the module docs).
    pub fn resolve(explicit: Option<PathBuf>) -> Home {
        if let Some(root) = explicit {
            return Home { root, origin: Origin::Explicit, publishes_view: true };
        }
        if let Some(root) = system_home() {
            return Home { root, origin: Origin::System, publishes_view: true };
        }
        let system = PathBuf::from(SYSTEM_HOME_DEFAULT);
        if is_root() || Home::at(&system).require_initialized().is_ok() {
            return Home { root: system, origin: Origin::System, publishes_view: true };
        }
        Home { root: personal_root(), origin: Origin::Personal, publishes_view: true }
    }

    /// Uses `root` as is (tests, the simulator).
    pub fn at(root: impl Into<PathBuf>) -> Home {
        Home { root: root.into(), origin: Origin::Explicit, publishes_view: true }
    }

    /// The same directory, with writers that do not publish the read model (the simulator).
    pub fn without_view(mut self) -> Home {
        self.publishes_view = false;
        self
    }

    /// Whether writers publish the read model.
    pub fn publishes_view(&self) -> bool {
        self.publishes_view
    }

    /// How the state directory was chosen.
    pub fn origin(&self) -> Origin {
        self.origin
    }

    /// The state directory.
    pub fn root(&self) -> &Path {
        &self.root
    }
    /// The journal, `carma.redb`.
    pub fn journal_path(&self) -> PathBuf {
        self.root.join("carma.redb")
    }
    /// The lock file writers and readers take, `carma.lock`.
    pub fn lock_path(&self) -> PathBuf {
        self.root.join("carma.lock")
    }
    /// The operator's settings, `config.toml`.
    pub fn config_path(&self) -> PathBuf {
        self.root.join("config.toml")
    }
    /// Where users leave submissions and requests, `spool/` (a folder per uid).
    pub fn spool_dir(&self) -> PathBuf {
        self.root.join("spool")
    }
    /// Each attempt's run folder, `runs/ID/N/`.
    pub fn runs_dir(&self) -> PathBuf {
        self.root.join("runs")
    }
    /// Accepted spool files, with the environment values the journal never holds.
    pub fn private_dir(&self) -> PathBuf {
        self.root.join("private")
    }
    /// Odd spool entries the tick moved out of the way.
    pub fn quarantine_dir(&self) -> PathBuf {
        self.root.join("quarantine")
    }
    /// The published read model (see `view`).
    pub fn view_dir(&self) -> PathBuf {
        self.root.join("view")
    }
    /// Written by each tick so that `carma submit` can check GPU counts without the journal.
    pub fn inventory_path(&self) -> PathBuf {
        self.root.join("inventory.json")
    }

    /// Fails with the "run carma init" error unless the directory has been initialised.
    pub fn require_initialized(&self) -> Result<()> {
        if self.spool_dir().is_dir() && self.journal_path().exists() {
            Ok(())
        } else {
            Err(Error::NotInitialized { path: self.root.clone(), hint: self.init_hint() })
        }
    }

    /// Which `carma init` creates this directory, for error messages.
    pub fn init_hint(&self) -> String {
        match self.origin {
            Origin::Explicit => format!("run `carma init --home {}`", self.root.display()),
            Origin::System if is_root() => {
                "run `carma init` (as root) to create the system queue".to_string()
            }
            Origin::System => "ask your administrator to run `sudo carma init`".to_string(),
            Origin::Personal => format!(
                "no system queue exists ({SYSTEM_CONFIG_DEFAULT} or {SYSTEM_HOME_DEFAULT}): ask your administrator to run `sudo carma init`, or run `carma init` for a personal queue that only your own `carma tick` serves"
            ),
        }
    }

    /// Creates every part that is missing (parents included) and leaves existing parts alone,
    /// so running `carma init` twice is harmless; as root it also tightens the modes an older
    /// carma created. Returns the parts it created.
    ///
    /// Nothing is followed or taken over: an existing part that is a symbolic link or not the
    /// caller's is refused ([`Error::UnsafePath`], exit 73) before anything is changed in it, as
    /// is, for root, a state directory whose parent another user could change (see `scratch`).
    /// New parts are made with `mkdir` and `O_EXCL`, and modes are set through descriptors
    /// opened with `O_NOFOLLOW`, never by path.
    pub fn init(&self, config_text: &str) -> Result<Vec<String>> {
        let shared = is_root();
        let mut created = Vec::new();
        if let Some(parent) = self.root.parent().filter(|p| !p.as_os_str().is_empty() && !p.exists()) {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(parent)
                .map_err(|e| Error::io(format!("cannot create {}", parent.display()), e))?;
            created.push(parent.display().to_string());
        }
        if shared && let Some(parent) = self.root.parent().filter(|p| !p.as_os_str().is_empty()) {
            crate::scratch::trusted_dir(parent)?;
        }
        make_dir(&self.root, 0o755, &mut created)?;
        // As root, every user must be able to drop specs into the spool but not rename or
        // delete other users' files: the sticky mode of /tmp.
        make_dir(&self.spool_dir(), if shared { 0o1777 } else { 0o700 }, &mut created)?;
        make_dir(&self.runs_dir(), if shared { 0o711 } else { 0o700 }, &mut created)?;
        make_dir(&self.private_dir(), 0o700, &mut created)?;
        make_dir(&self.view_dir(), 0o755, &mut created)?;
        make_file(&self.lock_path(), b"", 0o600, &mut created)?;
        make_file(&self.config_path(), config_text.as_bytes(), 0o644, &mut created)?;
        self.tighten_modes()?;
        Ok(created)
    }

    /// The modes the permission model needs (module docs), applied to a directory an older
    /// carma initialised: no user may lock, read the journal or list the runs. Each part is
    /// opened with `O_NOFOLLOW` and checked on its descriptor (the caller's, of the right kind)
    /// before `fchmod`; a link or another user's part is refused ([`Error::UnsafePath`]).
    pub fn tighten_modes(&self) -> Result<()> {
        self.tighten_modes_saying().map(drop)
    }

    /// [`Home::tighten_modes`], returning what it changed (`carma.redb: mode 644 → 600`).
    pub fn tighten_modes_saying(&self) -> Result<Vec<String>> {
        let shared = is_root();
        let mut changed = Vec::new();
        let modes = [
            (self.lock_path(), 0o600, false),
            (self.journal_path(), 0o600, false),
            (self.spool_dir(), if shared { 0o1777 } else { 0o700 }, true),
            (self.runs_dir(), if shared { 0o711 } else { 0o700 }, true),
        ];
        for (path, mode, is_dir) in modes {
            let Some(file) = open_own(&path, is_dir)? else { continue };
            let stat = crate::fsutil::fstat(&file)
                .map_err(|e| Error::io(format!("cannot stat {}", path.display()), e))?;
            if stat.st_mode & 0o7777 != mode {
                crate::scratch::fchmod(&file, mode)
                    .map_err(|e| Error::io(format!("cannot set mode of {}", path.display()), e))?;
                changed.push(format!("{}: mode {:o} → {mode:o}", path.display(), stat.st_mode & 0o7777));
            }
        }
        Ok(changed)
    }

    /// Registers this directory as the machine's system queue in the system config file, so
    /// that every user finds it without flags. Returns the file written, if it changed.
    pub fn register_system(&self) -> Result<Option<PathBuf>> {
        let path = system_config_path();
        let root = self.root.canonicalize().unwrap_or_else(|_| self.root.clone());
        if system_home().as_deref() == Some(root.as_path()) {
            return Ok(None);
        }
        if let Some(parent) = path.parent() {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(parent)
                .map_err(|e| Error::io(format!("cannot create {}", parent.display()), e))?;
        }
        // Keep what the admin wrote beside `home` (the `[slurm]` section).
        let slurm = read_system_config().ok().flatten().map(|c| c.slurm).unwrap_or_default();
        let text = format!(
            "# Written by `carma init`: the state directory of this machine's carma queue.
{}",
            toml::to_string(&SystemConfig { home: Some(root), slurm }).unwrap_or_default()
        );
        crate::exec::write_atomic(&path, text.as_bytes(), 0o644)?;
        Ok(Some(path))
    }
}

/// The system config file's path: `$CARMA_SYSTEM_CONFIG`, else `/etc/carma/carma.toml`.
pub fn system_config_path() -> PathBuf {
    std::env::var_os(SYSTEM_CONFIG_ENV)
        .filter(|p| !p.is_empty())
        .map_or_else(|| PathBuf::from(SYSTEM_CONFIG_DEFAULT), PathBuf::from)
}

/// The home the system config names, when the file exists and is sound.
fn system_home() -> Option<PathBuf> {
    read_system_config().ok()??.home.filter(|home| home.is_absolute())
}

/// The system config's `[slurm]` section: empty when the file does not exist; a file that
/// cannot be read or parsed is an error (`Error::BadConfig`) naming it.
pub fn system_slurm() -> Result<SystemSlurm> {
    Ok(read_system_config()?.map(|c| c.slurm).unwrap_or_default())
}

/// The system config, `None` when the file does not exist.
fn read_system_config() -> Result<Option<SystemConfig>> {
    let path = system_config_path();
    let bad = |what: String| Error::BadConfig(format!("{}: {what}", path.display()));
    let bytes = match crate::fsutil::read_regular(&path, 64 * 1024) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(bad(format!("cannot read it ({e}); fix its permissions or remove it"))),
    };
    let text = std::str::from_utf8(&bytes).map_err(|_| bad("not UTF-8 text; rewrite it".into()))?;
    let config: SystemConfig = toml::from_str(text).map_err(|e| {
        let message = e.message().replace('\n', " ");
        bad(format!("{message}; it holds `home = \"DIR\"` and `[slurm] journals = [\"DIR\", ...]`"))
    })?;
    Ok(Some(config))
}

fn personal_root() -> PathBuf {
    if let Some(data) = std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(data).join("carma");
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
    home.join(".local/share/carma")
}

/// True when the process runs as root, which turns on multi-user behaviour.
pub fn is_root() -> bool {
    crate::access::uid::effective() == 0
}

/// What to do about a part of the state directory that is not safely the caller's.
const UNSAFE_PART_FIX: &str = "remove it, or give `carma init --home` a new directory";

/// Makes the directory `path` with exactly `mode`, or accepts it when it is already the
/// caller's own directory (no link); see [`Home::init`].
fn make_dir(path: &Path, mode: u32, created: &mut Vec<String>) -> Result<()> {
    match crate::scratch::mkdir_exclusive(path, mode) {
        Ok(()) => {
            created.push(path.display().to_string());
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => open_own(path, true).map(drop),
        Err(e) => Err(Error::io(format!("cannot create {}", path.display()), e)),
    }
}

fn make_file(path: &Path, content: &[u8], mode: u32, created: &mut Vec<String>) -> Result<()> {
    if open_own(path, false)?.is_some() {
        return Ok(());
    }
    // A temp file made with O_EXCL, renamed over the name: nothing at the path is followed.
    crate::exec::write_atomic(path, content, mode)?;
    created.push(path.display().to_string());
    Ok(())
}

/// Opens an existing part of the state directory without following a link (`O_NOFOLLOW`,
/// `O_NONBLOCK`: a FIFO or device is never waited on) and checks it on the descriptor: the
/// caller's own, a directory when `is_dir`, else a regular file. `None` when nothing is there.
fn open_own(path: &Path, is_dir: bool) -> Result<Option<File>> {
    let refuse =
        |why: String| Error::UnsafePath { path: path.to_path_buf(), why, fix: UNSAFE_PART_FIX.into() };
    let opened = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path);
    let file = match opened {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Err(refuse("a symbolic link".into())),
        Err(e) => return Err(Error::io(format!("cannot open {}", path.display()), e)),
    };
    let stat =
        crate::fsutil::fstat(&file).map_err(|e| Error::io(format!("cannot stat {}", path.display()), e))?;
    let me = crate::access::uid::effective();
    if stat.st_uid != me {
        return Err(refuse(format!("owned by uid {}, not by you (uid {me})", stat.st_uid)));
    }
    let kind = stat.st_mode & libc::S_IFMT;
    match (is_dir, kind == libc::S_IFDIR, kind == libc::S_IFREG) {
        (true, true, _) | (false, _, true) => Ok(Some(file)),
        (true, false, _) => Err(refuse("not a directory".into())),
        (false, _, false) => Err(refuse("not a regular file".into())),
    }
}

/// Whether a lock is for reading (shared) or writing (exclusive).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockMode {
    /// Readers: any number at once, no writer meanwhile.
    Shared,
    /// A writer: alone.
    Exclusive,
}

/// A held `carma.lock`; released on drop.
#[derive(Debug)]
pub struct LockGuard {
    file: File,
    /// How the lock is held.
    pub mode: LockMode,
}

impl LockGuard {
    /// Takes the lock, polling for at most `wait`. Polling (rather than a blocking lock)
    /// bounds the wait, so a hung holder turns into exit code 75 instead of a pile of ticks.
    pub fn acquire(home: &Home, mode: LockMode, wait: Duration) -> Result<LockGuard> {
        home.require_initialized()?;
        let path = home.lock_path();
        // A missing lock file (removed by hand) is recreated: the journal is what matters.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
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
