//! The user's side of the spool: `carma submit` and the request verbs write into the user's
//! own folder `spool/<uid>/`, never anywhere else.
//!
//! A submission is written atomically: a dot-named temp file, fsync, `linkat()` to the final
//! name (which fails instead of overwriting if the id is taken), unlink of the temp, fsync of
//! the folder. Before writing, the record the tick would journal is sized against the
//! journal's record limit and the folder's waiting entries are counted, so a submission the
//! tick would have to refuse is refused here, at once, in one line.

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::os::fd::OwnedFd;

use super::rooms::folder_refusal;
use super::scan::{EntryKind, Verb};
use super::{SPOOL_BYTES_MAX, SPOOL_ENTRIES_PER_USER_MAX, fd};
use crate::access::{self, Action, Actor, Target};
use crate::error::{Error, Result};
use crate::home::Home;
use crate::id::TaskId;
use crate::spec::Submission;

/// Whether a request was filed or one was already waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Filed {
    /// The request was written into the requester's folder.
    Filed,
    /// The same request for the task was already waiting: nothing was written.
    AlreadyWaiting,
}

/// Writes `submission` into the submitter's spool folder and returns its new id.
pub fn submit(home: &Home, submission: &Submission, now_ms: u64) -> Result<TaskId> {
    let folder = Folder::own(home)?;
    let text = checked_text(home, submission, &folder)?;
    for _ in 0..16 {
        if let Some(id) = folder.put(&TaskId::generate(now_ms), &text)? {
            return Ok(id);
        }
    }
    Err(Error::io(
        format!("cannot find a free task id in {}", folder.shown),
        std::io::Error::other("16 collisions in a row"),
    ))
}

/// Writes `submission` under the given id; the simulator uses it so that a seed gives the
/// same ids. Fails when the id is already taken.
pub fn submit_with_id(home: &Home, submission: &Submission, id: TaskId) -> Result<TaskId> {
    let folder = Folder::own(home)?;
    put_new(&folder, &checked_text(home, submission, &folder)?, id)
}

/// As root: writes `submission` under `id` into `uid`'s folder, owned by `uid`, as if that
/// user had submitted it (the simulator's users).
pub fn submit_for(home: &Home, submission: &Submission, id: TaskId, uid: u32) -> Result<TaskId> {
    let folder = Folder::of(home, uid)?;
    put_new(&folder, &checked_text(home, submission, &folder)?, id)
}

fn put_new(folder: &Folder, text: &str, id: TaskId) -> Result<TaskId> {
    match folder.put(&id, text)? {
        Some(id) => Ok(id),
        None => Err(Error::io(
            format!("cannot submit {id} into {}", folder.shown),
            std::io::Error::other("the id is already in the spool"),
        )),
    }
}

/// The spool text of `submission`, after the checks the tick would make on its size.
fn checked_text(home: &Home, submission: &Submission, folder: &Folder) -> Result<String> {
    let text = submission.to_spool_toml();
    if text.len() as u64 > SPOOL_BYTES_MAX {
        return Err(Error::OverLimit(format!(
            "the submission is {} bytes, over the spool's {} bytes; shorten its command line and environment, or its model summary",
            text.len(),
            SPOOL_BYTES_MAX
        )));
    }
    crate::journal::check_submitted_fits(&submission.spec, folder.uid).map_err(Error::OverLimit)?;
    // The tick parses the file with this same code: what it would refuse is refused now.
    crate::spec::spool_form::parse_spool("the submission", &text, crate::spec::Limits::default())
        .map_err(Error::OverLimit)?;
    let (waiting, _) = fd::list(&folder.dir, SPOOL_ENTRIES_PER_USER_MAX)
        .map_err(|e| Error::io(format!("cannot list {}", folder.shown), e))?;
    if waiting.len() >= SPOOL_ENTRIES_PER_USER_MAX {
        return Err(Error::OverLimit(format!(
            "you already have {SPOOL_ENTRIES_PER_USER_MAX} entries waiting in {}, the most one user may have; wait for the tick to take them in (`carma queue` warns when it has stopped)",
            folder.shown
        )));
    }
    let _ = home;
    Ok(text)
}

/// Refuses, in one line, a submission of `adding` entries that would pass `max`, the entries
/// all users together may have waiting in the spool (`[limits] spool-entries-max`). Counted
/// once per `carma submit`, before anything is written, so an array goes in whole or not at
/// all. Each folder counts at most [`SPOOL_ENTRIES_PER_USER_MAX`] ([`queue_weight`]): one
/// user's flood of their own folder weighs as one user at their cap, so it never refuses
/// another user's submit on its own. Folders this user cannot list are not counted.
pub fn check_queue_room(home: &Home, adding: usize, max: usize) -> Result<()> {
    home.require_initialized()?;
    let spool_path = home.spool_dir();
    let err = |e| Error::io(format!("cannot list spool {}", spool_path.display()), e);
    let spool = fd::open_dir(&spool_path).map_err(err)?;
    let (names, _) = fd::list(&spool, super::BOUNDS.top_names_max).map_err(err)?;
    let mut waiting = 0usize;
    for name in names.iter().filter(|name| super::rooms::user_folder_uid(name).is_some()) {
        let Ok(dir) = fd::open_dir_at(&spool, name) else { continue };
        let (entries, _) = fd::list(&dir, SPOOL_ENTRIES_PER_USER_MAX).unwrap_or_default();
        waiting = waiting.saturating_add(queue_weight(entries.len()));
        if waiting >= max {
            break;
        }
    }
    if waiting.saturating_add(adding) > max {
        let what = if adding == 1 { "one more".to_string() } else { format!("{adding} more") };
        return Err(Error::OverLimit(format!(
            "the spool already holds {waiting} entries waiting for the tick and takes at most {max} ([limits] spool-entries-max), so {what} cannot go in; wait for the tick to take them in (`carma queue` warns when it has stopped), or ask the queue's admin to raise the limit"
        )));
    }
    Ok(())
}

/// What one user's folder of `waiting` entries counts for against the queue-wide cap: at
/// most their own cap, so that queue-wide caps count each user at most at their own cap.
pub(crate) fn queue_weight(waiting: usize) -> usize {
    waiting.min(SPOOL_ENTRIES_PER_USER_MAX)
}

/// Files a request that the next tick apply `verb` to `id`. The tick honours it only if the
/// folder's owner may (`access::may`).
pub fn request(home: &Home, id: &TaskId, verb: Verb, body: &str) -> Result<Filed> {
    let folder = Folder::own(home)?;
    let name = OsString::from(format!("{id}.{}", verb.suffix()));
    match folder.put_named(&name, body) {
        Ok(true) => Ok(Filed::Filed),
        Ok(false) => Ok(Filed::AlreadyWaiting),
        Err(e) => Err(e),
    }
}

/// Takes back a submission no tick has taken in yet (`carma submit` when a later task of the
/// same array could not be written). False when the file is gone: a tick took it in.
pub fn withdraw(home: &Home, id: &TaskId) -> bool {
    Folder::own(home).is_ok_and(|f| fd::unlink_at(&f.dir, OsStr::new(&format!("{id}.toml"))).is_ok())
}

/// A submission still in a spool folder: who left it and, when this process may read it
/// (its owner, root), its text.
#[derive(Debug, Clone)]
pub struct Waiting {
    /// The task id its name gives.
    pub id: TaskId,
    /// Whose folder it is in: who submitted it.
    pub owner_uid: u32,
    /// Its spool text, when this process may read it; `None` otherwise.
    pub text: Option<String>,
}

/// The submissions waiting in the spool (at most a few thousand names per folder), with the
/// text of those this process may read, read like the tick reads them.
///
/// The text holds the submission's environment values, so it is read only where
/// `access::may` grants this process `ReadSecrets` on it (its submitter, root; the file's
/// `0600` says the same to everyone else).
pub fn waiting(home: &Home, known: impl Fn(&TaskId) -> bool) -> Vec<Waiting> {
    let Ok(mut scan) = super::scan::scan_readonly(home) else { return Vec::new() };
    let policy = crate::config::Config::load(home).map(|config| config.access).unwrap_or_default();
    let actor = Actor::current(&policy);
    let specs = std::mem::take(&mut scan.specs);
    specs
        .into_iter()
        .filter(|entry| entry.kind == EntryKind::Spec && !entry.id.as_ref().is_some_and(&known))
        .filter_map(|entry| {
            let target = Target::Task { owner_uid: entry.uid };
            let readable = access::may(&actor, Action::ReadSecrets, target, &policy).is_ok();
            let text = match readable.then(|| scan.read(&entry, SPOOL_BYTES_MAX)) {
                Some(super::Read::Bytes(bytes)) => String::from_utf8(bytes).ok(),
                _ => None,
            };
            Some(Waiting { id: entry.id.clone()?, owner_uid: entry.uid, text })
        })
        .collect()
}

/// A user's folder, opened and checked.
struct Folder {
    uid: u32,
    dir: OwnedFd,
    shown: String,
}

impl Folder {
    /// This process's own folder, made on first use.
    fn own(home: &Home) -> Result<Folder> {
        home.require_initialized()?;
        Folder::open(home, crate::access::uid::effective(), false)
    }

    /// As root, `uid`'s folder, made for them (owned by them) on first use.
    fn of(home: &Home, uid: u32) -> Result<Folder> {
        home.require_initialized()?;
        Folder::open(home, uid, true)
    }

    fn open(home: &Home, uid: u32, give: bool) -> Result<Folder> {
        let spool_path = home.spool_dir();
        let shown = spool_path.join(uid.to_string()).display().to_string();
        let err = |e| Error::io(format!("cannot open spool folder {shown}"), e);
        let spool = fd::open_dir(&spool_path).map_err(err)?;
        let name = OsString::from(uid.to_string());
        let dir = match fd::open_dir_at(&spool, &name) {
            Ok(dir) => dir,
            // 0755: others may list the names (task ids, public once taken in) but not read or
            // write the files, which are 0600.
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => match fd::make_dir_at(&spool, &name, 0o755) {
                Ok(dir) => dir,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    fd::open_dir_at(&spool, &name).map_err(err)?
                }
                Err(e) => return Err(err(e)),
            },
            Err(e) => return Err(squatted(&shown, e)),
        };
        if give {
            fd::chown(&dir, uid, u32::MAX).map_err(err)?;
        }
        let stat = fd::fstat(&dir).map_err(err)?;
        if let Some(why) = folder_refusal(stat, uid, &shown) {
            return Err(Error::BadInput(format!("{why}; the next tick moves it away, then submit again")));
        }
        Ok(Folder { uid, dir, shown })
    }

    /// Writes `text` as `<id>.toml`; `Ok(None)` when the id is taken.
    fn put(&self, id: &TaskId, text: &str) -> Result<Option<TaskId>> {
        let name = OsString::from(format!("{id}.toml"));
        Ok(self.put_named(&name, text)?.then(|| id.clone()))
    }

    /// Writes `text` as `name` atomically; `Ok(false)` when the name is taken. The temp file
    /// is removed on every path, so a failed write (a full disk) leaves nothing behind.
    fn put_named(&self, name: &OsStr, text: &str) -> Result<bool> {
        let tmp = OsString::from(format!(".{}.{}.tmp", name.to_string_lossy(), std::process::id()));
        let written = self.write_synced(&tmp, text.as_bytes());
        let linked = written.and_then(|()| fd::link_at(&self.dir, &tmp, name));
        let _ = fd::unlink_at(&self.dir, &tmp);
        match linked {
            Ok(()) => {
                let _ = fd::sync(&self.dir);
                Ok(true)
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(Error::io(format!("cannot write into spool folder {}", self.shown), e)),
        }
    }

    fn write_synced(&self, name: &OsStr, bytes: &[u8]) -> std::io::Result<()> {
        let mut file = fd::create_at(&self.dir, name, 0o600)?;
        if self.uid != crate::access::uid::effective() {
            fd::chown(&file, self.uid, u32::MAX)?;
        }
        file.write_all(bytes)?;
        file.sync_all()
    }
}

/// The folder named for this user is not a folder of theirs (a link, a file, another's).
fn squatted(shown: &str, e: std::io::Error) -> Error {
    match e.raw_os_error() {
        Some(libc::ELOOP) | Some(libc::ENOTDIR) => Error::BadInput(format!(
            "spool folder {shown} is not a folder of yours (someone left a file or link there); the next tick moves it away, then submit again"
        )),
        _ => Error::io(format!("cannot open spool folder {shown}"), e),
    }
}
