//! The spool: how a task gets from `carma submit` to the journal without the submitter ever
//! touching the journal or waiting on a tick (the `at`/`cron` design).
//!
//! Submit writes `spool/<id>.toml` atomically: a dot-named temp file, fsync, `link()` to the
//! final name (which fails instead of overwriting if the id is taken), unlink of the temp,
//! fsync of the directory. The tick reads each file once, re-validates it (the spool is
//! writable by every user, so a file may have been tampered with), commits Submitted or
//! Rejected, and only then moves it: an accepted file into the root-only `private/` folder
//! (it holds the job's environment values, which the journal never sees), a rejected or odd
//! entry into `quarantine/`, a consumed cancel request away. A tick killed between the commit
//! and the move leaves files that the next tick recognises by id.
//!
//! **Nothing in the spool can stop a tick.** Every user can create anything here, so the tick
//! never blocks on an entry (files are opened non-blocking and checked with `fstat`: a FIFO,
//! a directory, a socket or a symlink is rejected), never reads one without bound, and never
//! lets one entry abort the others: an odd entry becomes a Rejected record naming its owner
//! and is moved out of the way. Valid submissions are taken first, in id (= submit time)
//! order, at most [`INGEST_PER_TICK_MAX`] per tick; what is left waits for the next tick and
//! the tick says so in the journal, so a flood of junk names or hard links cannot hide a
//! real submission.

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::fsutil::sync_dir;
use crate::home::Home;
use crate::id::TaskId;
use crate::spec::spool_form::{SPOOL_BYTES_MAX, parse_spool};
use crate::spec::{Limits, Submission};

/// Temp files older than this are left by crashed submitters and are swept by the tick.
const STALE_TEMP_SECS: u64 = 3600;
/// A file with more than one link is a submit between its `link()` and the unlink of its
/// temp name for a few milliseconds; one that stays linked longer was linked by someone else.
const HARDLINK_GRACE_SECS: u64 = 10;
/// Valid submissions taken per tick, so a flood cannot make one tick unbounded.
pub const INGEST_PER_TICK_MAX: usize = 5_000;
/// Odd entries (bad names, directories, FIFOs...) rejected per tick.
pub const REJECTS_PER_TICK_MAX: usize = 1_000;

/// Writes `submission` into the spool and returns its new id.
pub fn submit(home: &Home, submission: &Submission, now_ms: u64) -> Result<TaskId> {
    home.require_initialized()?;
    let dir = home.spool_dir();
    let text = submission.to_spool_toml();
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

/// Writes `submission` into the spool under the given id; the simulator uses it so that a seed
/// gives the same ids. Fails when the id is already taken.
pub fn submit_with_id(home: &Home, submission: &Submission, id: TaskId) -> Result<TaskId> {
    home.require_initialized()?;
    match submit_as(home, &submission.to_spool_toml(), id.clone())? {
        Some(id) => Ok(id),
        None => Err(Error::io(
            format!("cannot submit {id} into {}", home.spool_dir().display()),
            std::io::Error::other("the id is already in the spool"),
        )),
    }
}

/// One try: `Ok(None)` when the id is taken. The temp file is removed on every path, so a
/// failed submit (a full disk) leaves nothing behind.
fn submit_as(home: &Home, text: &str, id: TaskId) -> Result<Option<TaskId>> {
    let dir = home.spool_dir();
    let tmp = dir.join(format!(".{id}.{}.tmp", std::process::id()));
    let written = write_synced(&tmp, text.as_bytes());
    let linked = written.and_then(|()| {
        fs::hard_link(&tmp, dir.join(format!("{id}.toml")))
            .map_err(|e| Error::io(format!("cannot write into spool {}", dir.display()), e))
    });
    let _ = fs::remove_file(&tmp);
    match linked {
        Ok(()) => {
            sync_spool_dir(&dir)?;
            Ok(Some(id))
        }
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::AlreadyExists => Ok(None),
        Err(e) => Err(e),
    }
}

/// Makes the new link durable. A user who cannot open the directory (an older, write-only
/// spool) must not see a queued task turn into an error: the file's own fsync must do then.
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

/// What a spool entry is, by its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// `<id>.toml`: a submission.
    Spec,
    /// `<id>.<verb>`: a request about a task from a user who cannot write the journal.
    Request(Verb),
    /// Anything else a user left there.
    Odd,
}

/// What a request asks the tick to do to a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Cancel,
    /// Keep a waiting task from starting (`carma hold`).
    Hold,
    /// Let a held task start again (`carma release`).
    Release,
    /// Change a waiting task's settings (`carma update`); the body is the changes as TOML
    /// ([`crate::spec::workflow::Changes`]).
    Update,
}

impl Verb {
    /// Every verb, with its file-name suffix.
    pub const ALL: [(Verb, &'static str); 4] = [
        (Verb::Cancel, "cancel"),
        (Verb::Hold, "hold"),
        (Verb::Release, "release"),
        (Verb::Update, "update"),
    ];

    /// The file-name suffix (`<id>.<suffix>`).
    pub fn suffix(self) -> &'static str {
        Verb::ALL.iter().find(|(v, _)| *v == self).map_or("", |(_, s)| s)
    }
}

/// One spool entry found by the tick.
#[derive(Debug, Clone)]
pub struct SpoolEntry {
    pub path: PathBuf,
    /// File name as shown in records (lossy for names that are not UTF-8).
    pub file_name: String,
    /// The id encoded in the file name, if it is a valid one.
    pub id: Option<TaskId>,
    pub kind: EntryKind,
}

/// The spool as one tick takes it: bounded batches, valid submissions first.
#[derive(Debug, Default)]
pub struct Listing {
    /// Submissions in id order, at most [`INGEST_PER_TICK_MAX`].
    pub specs: Vec<SpoolEntry>,
    /// Requests in id order.
    pub requests: Vec<SpoolEntry>,
    /// Odd entries, at most [`REJECTS_PER_TICK_MAX`].
    pub odd: Vec<SpoolEntry>,
    /// Entries left for later ticks by the bounds.
    pub deferred: usize,
}

/// What ingesting one spool file yields.
#[derive(Debug)]
pub enum Ingested {
    Valid {
        id: TaskId,
        submitter_uid: u32,
        submission: Box<Submission>,
    },
    Invalid {
        id: Option<TaskId>,
        submitter_uid: u32,
        reason: String,
    },
    /// A submit is mid-way (its temp file is still linked); look again next tick.
    NotReady,
}

/// Lists the spool and sweeps stale temp files. Never fails on one entry.
pub fn list(home: &Home) -> Result<Listing> {
    let dir = home.spool_dir();
    let reader =
        fs::read_dir(&dir).map_err(|e| Error::io(format!("cannot list spool {}", dir.display()), e))?;
    let mut listing = Listing::default();
    for item in reader {
        let Ok(item) = item else { continue };
        let name = item.file_name();
        if name.as_encoded_bytes().starts_with(b".") {
            sweep_if_stale(home, &item.path(), &name);
            continue;
        }
        let entry = classify(item.path(), &name);
        match entry.kind {
            EntryKind::Spec => listing.specs.push(entry),
            EntryKind::Request(_) => listing.requests.push(entry),
            EntryKind::Odd => listing.odd.push(entry),
        }
    }
    listing.specs.sort_by(|a, b| a.id.cmp(&b.id));
    listing.requests.sort_by(|a, b| a.id.cmp(&b.id));
    listing.odd.sort_by(|a, b| a.file_name.cmp(&b.file_name));
    listing.deferred = listing.specs.len().saturating_sub(INGEST_PER_TICK_MAX)
        + listing.odd.len().saturating_sub(REJECTS_PER_TICK_MAX);
    listing.specs.truncate(INGEST_PER_TICK_MAX);
    listing.odd.truncate(REJECTS_PER_TICK_MAX);
    Ok(listing)
}

fn classify(path: PathBuf, name: &OsString) -> SpoolEntry {
    let file_name = name.to_string_lossy().into_owned();
    let parsed = name.to_str().and_then(|name| {
        let (stem, suffix) = name.split_once('.')?;
        let kind = match suffix {
            "toml" => EntryKind::Spec,
            _ => EntryKind::Request(Verb::ALL.iter().find(|(_, s)| *s == suffix)?.0),
        };
        TaskId::parse(stem).map(|id| (id, kind))
    });
    match parsed {
        Some((id, kind)) => SpoolEntry { path, file_name, id: Some(id), kind },
        None => SpoolEntry { path, file_name, id: None, kind: EntryKind::Odd },
    }
}

/// A dot entry is a submit's temp file for milliseconds; after an hour it is litter. Anything
/// that is not a plain file goes to quarantine instead of being deleted.
fn sweep_if_stale(home: &Home, path: &Path, name: &OsString) {
    let Ok(meta) = fs::symlink_metadata(path) else { return };
    let stale =
        meta.modified().ok().and_then(|t| t.elapsed().ok()).is_some_and(|a| a.as_secs() > STALE_TEMP_SECS);
    if !stale {
        return;
    }
    if meta.file_type().is_file() {
        let _ = fs::remove_file(path);
    } else {
        let _ = quarantine(home, path, &name.to_string_lossy());
    }
}

/// Whether a request was filed or one was already waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Filed {
    Filed,
    AlreadyWaiting,
}

/// Files a request (`body`, at most a few KiB) that the next tick apply `verb` to `id`. Used
/// by users who cannot write the journal: the tick checks the file's owner against the task.
pub fn request(home: &Home, id: &TaskId, verb: Verb, body: &str) -> Result<Filed> {
    home.require_initialized()?;
    let dir = home.spool_dir();
    let suffix = verb.suffix();
    let tmp = dir.join(format!(".{id}.{suffix}.{}.tmp", std::process::id()));
    let written = write_synced(&tmp, body.as_bytes());
    let linked = written.and_then(|()| {
        fs::hard_link(&tmp, dir.join(format!("{id}.{suffix}")))
            .map_err(|e| Error::io(format!("cannot write into spool {}", dir.display()), e))
    });
    let _ = fs::remove_file(&tmp);
    match linked {
        Ok(()) => sync_spool_dir(&dir).map(|()| Filed::Filed),
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::AlreadyExists => {
            Ok(Filed::AlreadyWaiting)
        }
        Err(e) => Err(e),
    }
}

/// Largest request body.
pub const REQUEST_BYTES_MAX: u64 = 64 * 1024;

/// Who filed a request and its body; `None` while its write is mid-way, `Err` with the owner
/// and the reason when the file cannot be trusted.
pub fn read_request(entry: &SpoolEntry) -> Result<Option<(u32, String)>, (u32, String)> {
    open_checked(&entry.path, REQUEST_BYTES_MAX)
}

/// Reads and validates one spool file. Every refusal becomes a Rejected event, so the
/// reason must be a complete sentence for the submitter.
pub fn read_entry(entry: &SpoolEntry, limits: Limits) -> Ingested {
    let (uid, text) = match open_checked(&entry.path, SPOOL_BYTES_MAX) {
        Ok(Some(found)) => found,
        Ok(None) => return Ingested::NotReady,
        Err((uid, reason)) => {
            return Ingested::Invalid { id: entry.id.clone(), submitter_uid: uid, reason };
        }
    };
    let invalid = |reason: String| Ingested::Invalid { id: entry.id.clone(), submitter_uid: uid, reason };
    let Some(id) = entry.id.clone().filter(|_| entry.kind == EntryKind::Spec) else {
        return invalid(format!(
            "spool file {} is not named <task-id>.toml; submit with `carma submit`",
            entry.file_name
        ));
    };
    match parse_spool(&format!("spool file {}", entry.file_name), &text, limits) {
        Ok(submission) => Ingested::Valid { id, submitter_uid: uid, submission: Box::new(submission) },
        Err(reason) => invalid(reason),
    }
}

/// The reason an odd entry is refused, with its owner (from `lstat`, so a symlink or a socket
/// is charged to whoever made it).
pub fn odd_entry(entry: &SpoolEntry) -> (u32, String) {
    let owner = fs::symlink_metadata(&entry.path).map_or(0, |m| m.uid());
    match open_checked(&entry.path, SPOOL_BYTES_MAX) {
        Err(refused) => refused,
        Ok(_) => (
            owner,
            format!("spool file {} is not named <task-id>.toml; submit with `carma submit`", entry.file_name),
        ),
    }
}

/// Opens without following symlinks and without blocking, and checks the entry is a private
/// regular file of at most `max_bytes`: a file others could write may have been changed by
/// someone other than its owner. `Ok(None)` means a submit is between its `link()` and the
/// unlink of its temp file.
fn open_checked(path: &Path, max_bytes: u64) -> Result<Option<(u32, String)>, (u32, String)> {
    let name = path.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let owner = || fs::symlink_metadata(path).map_or(0, |m| m.uid());
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| {
            let what = match e.raw_os_error() {
                Some(libc::ELOOP) => "is a symbolic link".to_string(),
                Some(libc::ENXIO) => "is a socket or device".to_string(),
                _ => format!("cannot be opened ({e})"),
            };
            (owner(), format!("spool file {name} {what}; resubmit the task with `carma submit`"))
        })?;
    let meta = file
        .metadata()
        .map_err(|e| (owner(), format!("spool file {name} cannot be read ({e}); resubmit the task")))?;
    let uid = meta.uid();
    if !meta.file_type().is_file() {
        let kind = if meta.is_dir() { "a directory" } else { "not a regular file" };
        return Err((uid, format!("spool file {name} is {kind}; resubmit the task with `carma submit`")));
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
        let age_secs = meta.ctime().max(0) as u64;
        let now_secs =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        if now_secs.saturating_sub(age_secs) <= HARDLINK_GRACE_SECS {
            return Ok(None);
        }
        return Err((
            uid,
            format!(
                "spool file {name} has {} hard links and may be changed through another name; resubmit the task",
                meta.nlink()
            ),
        ));
    }
    let text = read_limited(file, &name, max_bytes).map_err(|reason| (uid, reason))?;
    Ok(Some((uid, text)))
}

fn read_limited(file: File, name: &str, max_bytes: u64) -> Result<String, String> {
    let mut bytes = Vec::new();
    file.take(max_bytes + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("spool file {name} cannot be read ({e}); resubmit the task"))?;
    if bytes.len() as u64 > max_bytes {
        return Err(format!("spool file {name} is larger than {} KiB; resubmit the task", max_bytes / 1024));
    }
    String::from_utf8(bytes).map_err(|_| {
        format!("spool file {name} is not valid UTF-8 and may have been tampered with; resubmit the task")
    })
}

/// What the tick does with the entries it handled, once their records are committed.
#[derive(Debug, Default)]
pub struct Settle {
    /// Accepted submissions: moved to `private/<id>.toml`.
    pub accepted: Vec<SpoolEntry>,
    /// Handled and no longer needed (cancel requests, files of known tasks already moved).
    pub consumed: Vec<SpoolEntry>,
    /// Refused entries: moved to `quarantine/`.
    pub rejected: Vec<SpoolEntry>,
}

/// Moves the handled entries out of the spool; called only after the journal commit that
/// recorded them. One entry that cannot be moved is left for the next tick, which recognises
/// it by id; it never fails the others.
pub fn settle(home: &Home, settle: &Settle) -> Result<()> {
    if !settle.accepted.is_empty() {
        ensure_private_dir(&home.private_dir())?;
    }
    for entry in &settle.accepted {
        if let Some(id) = &entry.id {
            let _ = fs::rename(&entry.path, home.private_dir().join(format!("{id}.toml")));
        }
    }
    for entry in &settle.consumed {
        let _ = fs::remove_file(&entry.path);
    }
    for entry in &settle.rejected {
        let _ = quarantine(home, &entry.path, &entry.file_name);
    }
    if settle.accepted.len() + settle.consumed.len() + settle.rejected.len() > 0 {
        sync_dir(&home.spool_dir())?;
    }
    if !settle.accepted.is_empty() {
        sync_dir(&home.private_dir())?;
    }
    Ok(())
}

fn ensure_private_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    match fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(Error::io(format!("cannot create {}", dir.display()), e)),
    }
}

/// Moves an odd entry into `quarantine/`, where no tick looks at it again.
fn quarantine(home: &Home, path: &Path, name: &str) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = home.quarantine_dir();
    match fs::DirBuilder::new().mode(0o700).create(&dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    let stamp =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let safe: String =
        name.chars().map(|c| if c.is_ascii_graphic() && c != '/' { c } else { '_' }).take(100).collect();
    fs::rename(path, dir.join(format!("{stamp}-{safe}")))
}

/// The private copy of an accepted submission: its environment values and summary text.
pub fn read_private(home: &Home, id: &TaskId) -> std::result::Result<Submission, String> {
    let path = home.private_dir().join(format!("{id}.toml"));
    let bytes = crate::fsutil::read_regular(&path, SPOOL_BYTES_MAX)
        .map_err(|e| format!("the private copy of task {id} ({}) cannot be read: {e}", path.display()))?;
    let text = String::from_utf8(bytes).map_err(|_| format!("the private copy of task {id} is not UTF-8"))?;
    parse_spool(&format!("private copy of task {id}"), &text, Limits::default())
}

/// Removes the private copy of a task that has ended (nothing will launch it again).
pub fn forget_private(home: &Home, id: &TaskId) {
    let _ = fs::remove_file(home.private_dir().join(format!("{id}.toml")));
}

/// Takes back a submission no tick has taken in yet (`carma submit` when a later task of the
/// same array could not be written). False when the file is gone: a tick took it in.
pub fn withdraw(home: &Home, id: &TaskId) -> bool {
    fs::remove_file(home.spool_dir().join(format!("{id}.toml"))).is_ok()
}
