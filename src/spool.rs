//! The spool: how a task gets from `carma submit` to the journal without the submitter ever
//! touching the journal or waiting on a tick (the `at`/`cron` design).
//!
//! Submit writes `spool/<id>.toml` atomically: a dot-named temp file, fsync, `link()` to the
//! final name (which fails instead of overwriting if the id is taken), unlink of the temp,
//! fsync of the directory. The tick reads each file once, re-validates it (the spool is
//! writable by every user, so a file may have been tampered with), commits Submitted or
//! Rejected, and only then unlinks it. A tick killed between the commit and the unlink
//! leaves files that the next tick recognises by id and just removes.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::fsutil::sync_dir;
use crate::home::Home;
use crate::id::TaskId;
use crate::spec::{self, Limits, SPEC_BYTES_MAX, TaskSpec};

/// Temp files older than this are left by crashed submitters and are swept by the tick.
const STALE_TEMP_SECS: u64 = 3600;
/// Spool files taken per tick, so a flood cannot make one tick unbounded.
pub const INGEST_PER_TICK_MAX: usize = 10_000;

/// Writes `spec` into the spool and returns its new id.
pub fn submit(home: &Home, spec: &TaskSpec, now_ms: u64) -> Result<TaskId> {
    home.require_initialized()?;
    let dir = home.spool_dir();
    let text = spec.to_toml();
    for _ in 0..16 {
        if let Some(id) = submit_as(home, &text, TaskId::generate(now_ms))? {
            return Ok(id);
        }
    }
    Err(Error::io(
        format!("cannot find a free task id in {}", dir.display()),
        std::io::Error::other("16 collisions in a row"),
    ))
}

/// Writes `spec` into the spool under the given id; the simulator uses it so that a seed
/// gives the same ids. Fails when the id is already taken.
pub fn submit_with_id(home: &Home, spec: &TaskSpec, id: TaskId) -> Result<TaskId> {
    home.require_initialized()?;
    match submit_as(home, &spec.to_toml(), id.clone())? {
        Some(id) => Ok(id),
        None => Err(Error::io(
            format!("cannot submit {id} into {}", home.spool_dir().display()),
            std::io::Error::other("the id is already in the spool"),
        )),
    }
}

/// One try: `Ok(None)` when the id is taken.
fn submit_as(home: &Home, text: &str, id: TaskId) -> Result<Option<TaskId>> {
    let dir = home.spool_dir();
    let tmp = dir.join(format!(".{id}.{}.tmp", std::process::id()));
    write_synced(&tmp, text.as_bytes())?;
    let target = dir.join(format!("{id}.toml"));
    let linked = fs::hard_link(&tmp, &target);
    let _ = fs::remove_file(&tmp);
    match linked {
        Ok(()) => {
            sync_spool_dir(&dir)?;
            Ok(Some(id))
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(None),
        Err(e) => Err(Error::io(format!("cannot write into spool {}", dir.display()), e)),
    }
}

/// Makes the new link durable. Other users may write into a root-owned spool but not read
/// it (mode 1733), so they cannot open the directory to fsync it; for them the file's own
/// fsync must do, and the link reaches the disk with the file system's next commit. A
/// refusal here must not turn a queued task into an error for its submitter.
fn sync_spool_dir(dir: &Path) -> Result<()> {
    match sync_dir(dir) {
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::PermissionDenied => Ok(()),
        other => other,
    }
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| Error::io(format!("cannot create {}", path.display()), e))?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(|e| Error::io(format!("cannot write {}", path.display()), e))
}

/// One spool file found by the tick.
#[derive(Debug, Clone)]
pub struct SpoolEntry {
    pub path: PathBuf,
    /// File name, e.g. `01jd3k5m7n4x8z2q.toml`.
    pub file_name: String,
    /// The id encoded in the file name, if it is a valid one.
    pub id: Option<TaskId>,
    /// A cancel request (`<id>.cancel`) rather than a spec.
    pub cancel: bool,
}

/// What ingesting one spool file yields.
#[derive(Debug)]
pub enum Ingested {
    Valid {
        id: TaskId,
        submitter_uid: u32,
        spec: Box<TaskSpec>,
    },
    Invalid {
        id: Option<TaskId>,
        submitter_uid: u32,
        reason: String,
    },
    /// A submit is mid-way (its temp file is still linked); look again next tick.
    NotReady,
}

/// Lists spool files in id (= submit time) order, at most [`INGEST_PER_TICK_MAX`], and
/// sweeps stale temp files.
pub fn list(home: &Home) -> Result<Vec<SpoolEntry>> {
    let dir = home.spool_dir();
    let reader =
        fs::read_dir(&dir).map_err(|e| Error::io(format!("cannot list spool {}", dir.display()), e))?;
    let mut entries = Vec::new();
    for item in reader {
        let item = item.map_err(|e| Error::io(format!("cannot list spool {}", dir.display()), e))?;
        let Some(name) = item.file_name().to_str().map(str::to_string) else {
            entries.push(SpoolEntry {
                path: item.path(),
                file_name: item.file_name().to_string_lossy().into(),
                id: None,
                cancel: false,
            });
            continue;
        };
        if name.starts_with('.') {
            sweep_if_stale(&item.path());
            continue;
        }
        let cancel = name.ends_with(".cancel");
        let stem = name.strip_suffix(".toml").or_else(|| name.strip_suffix(".cancel"));
        let id = stem.and_then(TaskId::parse);
        entries.push(SpoolEntry { path: item.path(), file_name: name, id, cancel });
    }
    // Specs before cancel requests, so a cancel filed right after its submit finds the task.
    entries.sort_by(|a, b| (a.cancel, &a.file_name).cmp(&(b.cancel, &b.file_name)));
    entries.truncate(INGEST_PER_TICK_MAX);
    Ok(entries)
}

fn sweep_if_stale(path: &Path) {
    let stale = fs::symlink_metadata(path)
        .ok()
        .and_then(|m| m.modified().ok())
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|age| age.as_secs() > STALE_TEMP_SECS);
    if stale {
        let _ = fs::remove_file(path);
    }
}

/// Files a request that the next tick cancel `id`. Used by users who cannot write the
/// journal: the tick checks that the file's owner is root or the task's submitter.
pub fn request_cancel(home: &Home, id: &TaskId) -> Result<()> {
    home.require_initialized()?;
    let dir = home.spool_dir();
    let tmp = dir.join(format!(".{id}.cancel.{}.tmp", std::process::id()));
    write_synced(&tmp, b"cancel\n")?;
    let linked = fs::hard_link(&tmp, dir.join(format!("{id}.cancel")));
    let _ = fs::remove_file(&tmp);
    match linked {
        Ok(()) => sync_spool_dir(&dir),
        // A request for this task is already waiting; one is enough.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(Error::io(format!("cannot write into spool {}", dir.display()), e)),
    }
}

/// Who filed a cancel request; `None` while its submit is mid-way, `Err` with the reason
/// when the file cannot be trusted.
pub fn read_cancel(entry: &SpoolEntry) -> Result<Option<u32>, String> {
    match open_checked(&entry.path) {
        Ok(found) => Ok(found.map(|(uid, _)| uid)),
        Err((_, reason)) => Err(reason),
    }
}

/// Reads and validates one spool file. Every refusal becomes a Rejected event, so the
/// reason must be a complete sentence for the submitter.
pub fn read_entry(entry: &SpoolEntry, limits: Limits) -> Ingested {
    let (uid, text) = match open_checked(&entry.path) {
        Ok(Some(found)) => found,
        Ok(None) => return Ingested::NotReady,
        Err((uid, reason)) => {
            return Ingested::Invalid { id: entry.id.clone(), submitter_uid: uid, reason };
        }
    };
    let invalid = |reason: String| Ingested::Invalid { id: entry.id.clone(), submitter_uid: uid, reason };
    let Some(id) = entry.id.clone() else {
        return invalid(format!(
            "spool file {} is not named <task-id>.toml; submit with `carma submit`",
            entry.file_name
        ));
    };
    let origin = format!("spool file {}", entry.file_name);
    let parsed = spec::parse_toml(&origin, &text).and_then(|file| {
        if file.workdir.is_none() {
            return Err(format!("{origin}: missing workdir; it was not written by `carma submit`"));
        }
        file.validate(&origin, Path::new("/"), limits)
    });
    match parsed {
        Ok(spec) => Ingested::Valid { id, submitter_uid: uid, spec: Box::new(spec) },
        Err(reason) => invalid(reason),
    }
}

/// Opens without following symlinks and checks the file is a private regular file: a
/// file others could write may have been changed by someone other than its owner.
/// `Ok(None)` means a submit is between its `link()` and the unlink of its temp file.
fn open_checked(path: &Path) -> Result<Option<(u32, String)>, (u32, String)> {
    let name = path.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| (0, format!("spool file {name} cannot be opened ({e}); resubmit the task")))?;
    let meta = file
        .metadata()
        .map_err(|e| (0, format!("spool file {name} cannot be read ({e}); resubmit the task")))?;
    let uid = meta.uid();
    if !meta.file_type().is_file() {
        return Err((uid, format!("spool file {name} is not a regular file; resubmit the task")));
    }
    if meta.mode() & 0o022 != 0 {
        return Err((
            uid,
            format!(
                "spool file {name} is writable by group or others (mode {:o}) and may have been tampered with; resubmit the task",
                meta.mode() & 0o7777
            ),
        ));
    }
    if meta.nlink() > 1 {
        return Ok(None);
    }
    let text = read_limited(file, &name).map_err(|reason| (uid, reason))?;
    Ok(Some((uid, text)))
}

fn read_limited(file: File, name: &str) -> Result<String, String> {
    let mut bytes = Vec::new();
    file.take(SPEC_BYTES_MAX + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("spool file {name} cannot be read ({e}); resubmit the task"))?;
    if bytes.len() as u64 > SPEC_BYTES_MAX {
        return Err(format!(
            "spool file {name} is larger than {} KiB; resubmit the task",
            SPEC_BYTES_MAX / 1024
        ));
    }
    String::from_utf8(bytes).map_err(|_| {
        format!("spool file {name} is not valid UTF-8 and may have been tampered with; resubmit the task")
    })
}

/// Removes ingested files; called only after the journal commit that recorded them.
pub fn remove(home: &Home, entries: &[SpoolEntry]) -> Result<()> {
    for entry in entries {
        match fs::remove_file(&entry.path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(Error::io(format!("cannot remove {}", entry.path.display()), e));
            }
        }
    }
    if !entries.is_empty() {
        sync_dir(&home.spool_dir())?;
    }
    Ok(())
}
