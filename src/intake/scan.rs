//! Finding what users left: the users' folders at the top of `spool/`, a bounded share of
//! names in each, and reading one entry on its open descriptor within the owner's budget.

use std::ffi::{OsStr, OsString};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;

use super::rooms::{folder_refusal, user_folder_uid};
use super::{BOUNDS, Bounds, HARDLINK_GRACE_SECS, STALE_TEMP_SECS, fd};
use crate::error::{Error, Result};
use crate::home::Home;
use crate::id::TaskId;

/// What a request asks the tick to do to a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// Cancel a task (`carma cancel`): stop it if it runs, and end it.
    Cancel,
    /// Keep a waiting task from starting (`carma hold`).
    Hold,
    /// Let a held task start again (`carma release`).
    Release,
    /// Change a waiting task's settings (`carma update`); the body is the changes as TOML
    /// ([`crate::spec::workflow::Changes`]).
    Update,
    /// Stop a placed or running task and queue it again (`carma requeue`).
    Requeue,
}

impl Verb {
    /// Every verb, with its file-name suffix.
    pub const ALL: [(Verb, &'static str); 5] = [
        (Verb::Cancel, "cancel"),
        (Verb::Hold, "hold"),
        (Verb::Release, "release"),
        (Verb::Update, "update"),
        (Verb::Requeue, "requeue"),
    ];

    /// The file-name suffix (`<id>.<suffix>`).
    pub fn suffix(self) -> &'static str {
        Verb::ALL.iter().find(|(v, _)| *v == self).map_or("", |(_, s)| s)
    }
}

/// What an entry is, by its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// `<id>.toml`: a submission.
    Spec,
    /// `<id>.<verb>`: a request about a task.
    Request(Verb),
    /// Anything else a user left: refused and moved to quarantine.
    Odd,
}

/// One name found in a user's folder (or, for [`Scan::top_odd`], at the top of `spool/`).
#[derive(Debug, Clone)]
pub struct Entry {
    /// Whose folder it is in: who asked. At the top of `spool/`, the entry's own owner.
    pub uid: u32,
    folder: Option<usize>,
    name: OsString,
    /// The name as shown in records (lossy for names that are not UTF-8).
    pub file_name: String,
    /// The id in the name, if it is a valid one.
    pub id: Option<TaskId>,
    /// What the name says it is.
    pub kind: EntryKind,
    /// Why a top-level entry is refused (set for [`Scan::top_odd`] only).
    pub top_reason: Option<String>,
}

/// What reading one entry gave.
#[derive(Debug)]
pub enum Read {
    /// The file's bytes, all of them (within the cap).
    Bytes(Vec<u8>),
    /// A submit is between its `link()` and the unlink of its temp name: look again next tick.
    NotReady,
    /// Over its owner's byte budget for this tick: left for the next one.
    Later,
    /// Removed by its owner since the listing.
    Gone,
    /// Not to be trusted: the reason, a sentence for its owner.
    Refused(String),
}

struct Folder {
    uid: u32,
    dir: OwnedFd,
    bytes_left: u64,
    read_any: bool,
}

/// The spool as one tick takes it.
pub struct Scan {
    pub(super) spool: OwnedFd,
    folders: Vec<Folder>,
    /// Submissions, in id (= submit time) order across every user.
    pub specs: Vec<Entry>,
    /// Requests, in id order.
    pub requests: Vec<Entry>,
    /// Odd names in users' folders.
    pub odd: Vec<Entry>,
    /// Odd entries at the top of `spool/`, at most [`Bounds::top_odd_max`].
    pub top_odd: Vec<Entry>,
    /// Names left for later ticks by the bounds (at least this many).
    pub deferred: u64,
    /// Entries moved to quarantine with the whole top level (a flood), if that happened.
    pub top_moved: Option<u64>,
    bounds: Bounds,
    /// A reader's scan (`carma queue` and friends): nothing is moved, swept or changed.
    readonly: bool,
}

/// Lists the spool within [`BOUNDS`]. Fails only when `spool/` itself cannot be opened.
pub fn scan(home: &Home) -> Result<Scan> {
    scan_within(home, BOUNDS)
}

/// [`scan`] with other bounds (tests).
pub fn scan_within(home: &Home, bounds: Bounds) -> Result<Scan> {
    let dir = home.spool_dir();
    let open =
        || fd::open_dir(&dir).map_err(|e| Error::io(format!("cannot open spool {}", dir.display()), e));
    let mut spool = open()?;
    let (mut names, mut more) = fd::list(&spool, bounds.top_names_max).map_err(|e| list_err(home, e))?;
    let mut top_moved = None;
    let odd_count = names.iter().filter(|n| user_folder_uid(n).is_none()).count();
    if more || odd_count > bounds.top_odd_max {
        top_moved = Some(super::rooms::move_top_level(home, &spool)?);
        spool = open()?;
        (names, more) = fd::list(&spool, bounds.top_names_max).map_err(|e| list_err(home, e))?;
    }
    let mut scan = Scan::empty(spool, bounds, false);
    scan.deferred = u64::from(more);
    scan.top_moved = top_moved;
    for name in names {
        scan.top_entry(name);
    }
    let share = (bounds.files_total / scan.folders.len().max(1))
        .clamp(bounds.files_per_user_min, bounds.files_per_user_max);
    for index in 0..scan.folders.len() {
        scan.list_folder(index, share);
    }
    scan.specs.sort_by(|a, b| a.id.cmp(&b.id));
    scan.requests.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(scan)
}

/// A reader's view of the spool: every user's folder (names are public, as task ids are;
/// only the owner and root can read the files, which are 0600). Changes nothing; bounded
/// like a tick's scan.
pub fn scan_readonly(home: &Home) -> Result<Scan> {
    let dir = home.spool_dir();
    let spool =
        fd::open_dir(&dir).map_err(|e| Error::io(format!("cannot open spool {}", dir.display()), e))?;
    let names = fd::list(&spool, BOUNDS.top_names_max).map_err(|e| list_err(home, e))?.0;
    let mut scan = Scan::empty(spool, BOUNDS, true);
    for name in names {
        let Some(uid) = user_folder_uid(&name) else { continue };
        let Ok(dir) = fd::open_dir_at(&scan.spool, &name) else { continue };
        if fd::fstat(&dir).is_ok_and(|stat| folder_refusal(stat, uid, "").is_none()) {
            let bytes_left = BOUNDS.bytes_per_user;
            scan.folders.push(Folder { uid, dir, bytes_left, read_any: false });
        }
    }
    for index in 0..scan.folders.len() {
        scan.list_folder(index, BOUNDS.files_per_user_max);
    }
    scan.specs.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(scan)
}

fn list_err(home: &Home, e: std::io::Error) -> Error {
    Error::io(format!("cannot list spool {}", home.spool_dir().display()), e)
}

impl Scan {
    fn empty(spool: OwnedFd, bounds: Bounds, readonly: bool) -> Scan {
        Scan {
            spool,
            folders: Vec::new(),
            specs: Vec::new(),
            requests: Vec::new(),
            odd: Vec::new(),
            top_odd: Vec::new(),
            deferred: 0,
            top_moved: None,
            bounds,
            readonly,
        }
    }

    fn top_entry(&mut self, name: OsString) {
        let shown = name.to_string_lossy().into_owned();
        let refused = match user_folder_uid(&name) {
            Some(uid) => match fd::open_dir_at(&self.spool, &name) {
                Ok(dir) => match fd::fstat(&dir) {
                    Ok(stat) => match folder_refusal(stat, uid, &shown) {
                        None => return self.add_folder(uid, dir, stat),
                        Some(reason) => Some((stat.uid, reason)),
                    },
                    Err(e) => Some((uid, format!("spool folder {shown} cannot be read ({e})"))),
                },
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return,
                Err(_) => None,
            },
            None => None,
        };
        if self.top_odd.len() >= self.bounds.top_odd_max {
            self.deferred += 1;
            return;
        }
        let Ok(stat) = fd::lstat_at(&self.spool, &name) else { return };
        let (uid, reason) = refused.unwrap_or_else(|| (stat.uid, top_reason(&shown, stat)));
        let entry = Entry {
            uid,
            folder: None,
            id: None,
            kind: EntryKind::Odd,
            top_reason: Some(format!("{reason}; submit with `carma submit`")),
            file_name: shown,
            name,
        };
        self.top_odd.push(entry);
    }

    /// A folder others may write into could have files changed by someone other than its
    /// owner; it is its owner's, so root closes it (on the descriptor) rather than refuse.
    fn add_folder(&mut self, uid: u32, dir: OwnedFd, stat: fd::Stat) {
        if stat.mode & 0o022 != 0 {
            let _ = fd::chmod(&dir, 0o755);
        }
        let bytes_left = self.bounds.bytes_per_user;
        self.folders.push(Folder { uid, dir, bytes_left, read_any: false });
    }

    fn list_folder(&mut self, index: usize, share: usize) {
        let folder = &self.folders[index];
        let Ok((names, more)) = fd::list(&folder.dir, share) else { return };
        self.deferred += u64::from(more);
        let uid = folder.uid;
        for name in names {
            if name.as_bytes().starts_with(b".") {
                self.sweep_if_stale(index, &name);
                continue;
            }
            let (id, kind) = classify(&name);
            let file_name = name.to_string_lossy().into_owned();
            let entry = Entry { uid, folder: Some(index), name, file_name, id, kind, top_reason: None };
            match kind {
                EntryKind::Spec => self.specs.push(entry),
                EntryKind::Request(_) => self.requests.push(entry),
                EntryKind::Odd => self.odd.push(entry),
            }
        }
    }

    /// A dot entry is a submit's temp file for milliseconds; after an hour it is litter.
    fn sweep_if_stale(&self, index: usize, name: &OsStr) {
        if self.readonly {
            return;
        }
        let dir = &self.folders[index].dir;
        let Ok(stat) = fd::lstat_at(dir, name) else { return };
        if now_s().saturating_sub(stat.mtime_s) > STALE_TEMP_SECS {
            let _ = fd::unlink_at(dir, name);
        }
    }

    /// Opens and reads one entry of a user's folder, at most `cap` bytes, checking on the
    /// open descriptor that it is a private regular file of the folder's owner with one link.
    pub fn read(&mut self, entry: &Entry, cap: u64) -> Read {
        let Some(index) = entry.folder else { return Read::Refused("not in a user's folder".into()) };
        let name = &entry.file_name;
        let refuse = |what: String| {
            Read::Refused(format!("spool file {name} {what}; resubmit the task with `carma submit`"))
        };
        let folder = &mut self.folders[index];
        let file = match fd::open_at(&folder.dir, &entry.name) {
            Ok(file) => file,
            Err(e) => {
                return match e.raw_os_error() {
                    Some(libc::ENOENT) => Read::Gone,
                    Some(libc::ELOOP) => refuse("is a symbolic link".into()),
                    Some(libc::ENXIO) => refuse("is a socket or device".into()),
                    _ => refuse(format!("cannot be opened ({e})")),
                };
            }
        };
        let stat = match fd::fstat(&file) {
            Ok(stat) => stat,
            Err(e) => return refuse(format!("cannot be read ({e})")),
        };
        if let Some(why) = file_refusal(stat, folder.uid, cap) {
            return refuse(why);
        }
        if stat.nlink > 1 {
            if now_s().saturating_sub(stat.ctime_s) <= HARDLINK_GRACE_SECS {
                return Read::NotReady;
            }
            return refuse(format!("has {} hard links and may be changed through another name", stat.nlink));
        }
        if folder.read_any && stat.size > folder.bytes_left {
            return Read::Later;
        }
        match fd::read_capped_sized(&file, cap, stat.size) {
            Ok(bytes) => {
                folder.read_any = true;
                folder.bytes_left = folder.bytes_left.saturating_sub(bytes.len() as u64);
                Read::Bytes(bytes)
            }
            Err(None) => refuse(format!("grew past {} while it was read", crate::text::bytes(cap))),
            Err(Some(e)) => refuse(format!("cannot be read ({e})")),
        }
    }

    /// The folder descriptor of an entry's owner (for settling).
    pub(super) fn folder_dir(&self, entry: &Entry) -> Option<&OwnedFd> {
        entry.folder.map(|index| &self.folders[index].dir)
    }

    pub(super) fn raw_name(entry: &Entry) -> &OsStr {
        &entry.name
    }
}

#[cfg(test)]
impl Entry {
    /// An entry as the scan lists it in `uid`'s folder, for tests of ingest's decision.
    pub(crate) fn listed(uid: u32, name: &str) -> Entry {
        let name = OsString::from(name);
        let (id, kind) = classify(&name);
        let file_name = name.to_string_lossy().into_owned();
        Entry { uid, folder: Some(0), name, file_name, id, kind, top_reason: None }
    }
}

/// Why an open file cannot be trusted as its folder owner's submission, if it cannot.
fn file_refusal(stat: fd::Stat, owner: u32, cap: u64) -> Option<String> {
    if !stat.is_file() {
        return Some(format!("is {}", stat.kind()));
    }
    if stat.uid != owner {
        return Some(format!("belongs to uid {}, not to uid {owner} whose folder it is in", stat.uid));
    }
    if stat.mode & 0o022 != 0 {
        return Some(format!(
            "is writable by group or others (mode {:o}) and may have been tampered with",
            stat.mode & 0o7777
        ));
    }
    if stat.size > cap {
        return Some(format!(
            "is {}, over the {} limit",
            crate::text::bytes(stat.size),
            crate::text::bytes(cap)
        ));
    }
    None
}

fn top_reason(shown: &str, stat: fd::Stat) -> String {
    if shown.ends_with(".toml") || Verb::ALL.iter().any(|(_, s)| shown.ends_with(&format!(".{s}"))) {
        return format!(
            "spool file {shown} is in the layout of an older carma (files now go in spool/<uid>/)"
        );
    }
    format!("spool entry {shown} ({}) is not a user's spool folder", stat.kind())
}

fn classify(name: &OsStr) -> (Option<TaskId>, EntryKind) {
    let parsed = name.to_str().and_then(|name| {
        let (stem, suffix) = name.split_once('.')?;
        let kind = match suffix {
            "toml" => EntryKind::Spec,
            _ => EntryKind::Request(Verb::ALL.iter().find(|(_, s)| *s == suffix)?.0),
        };
        TaskId::parse(stem).map(|id| (id, kind))
    });
    match parsed {
        Some((id, kind)) => (Some(id), kind),
        None => (None, EntryKind::Odd),
    }
}

pub(super) fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}
