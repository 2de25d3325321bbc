//! After the commit: the private copies written from the bytes the tick read (one vault
//! commit, see `vault`), the users' handled files removed from their folders, refused
//! entries moved to `quarantine/`.
//!
//! Nothing here follows a name a user controls: every call is relative to a directory
//! descriptor (the user's folder as checked by the scan, or root's own `private/` and
//! `quarantine/`), and the private copies go into root's own vault, never into a user's file.

use std::ffi::{OsStr, OsString};
use std::os::fd::OwnedFd;

use super::scan::{Entry, Scan, user_folder_uid};
use super::vault::{Batch, Vault};
use super::{SPOOL_BYTES_MAX, fd};
use crate::error::{Error, Result};
use crate::home::Home;
use crate::id::TaskId;
use crate::spec::spool_form::parse_spool;
use crate::spec::{Limits, Submission};

/// What the tick does with the entries it handled, once their records are committed.
#[derive(Debug, Default)]
pub struct Settle {
    /// Accepted submissions and the bytes read from them: the private copy is made of these.
    pub accepted: Vec<(Entry, TaskId, Vec<u8>)>,
    /// Files of tasks the journal already has, in their submitter's folder (a tick died
    /// between its commit and settling): each becomes its task's private copy only where
    /// none exists.
    pub recovered: Vec<(Entry, TaskId, Vec<u8>)>,
    /// Handled and no longer needed (requests, files of tasks already known).
    pub consumed: Vec<Entry>,
    /// Refused entries, in a user's folder or at the top of `spool/`: to quarantine.
    pub rejected: Vec<Entry>,
}

/// Carries out `settle`; called only after the journal commit that recorded its entries.
/// The private copies (and the removal of `ended` tasks' copies) are one durable vault
/// commit, made before any user's file is removed, so a crash never loses a submission. One
/// entry that cannot be moved is left for the next tick, which recognises it by id; it never
/// fails the others.
pub fn settle(private: &Private, scan: &Scan, settle: &Settle, ended: &[TaskId]) -> Result<()> {
    let batch = Batch {
        put: settle.accepted.iter().map(|(_, id, bytes)| (id, bytes.as_slice())).collect(),
        recover: settle.recovered.iter().map(|(_, id, bytes)| (id, bytes.as_slice())).collect(),
        forget: ended.iter().collect(),
    };
    if !batch.is_empty() {
        private.vault()?.commit(&batch)?;
    }
    private.forget_files(ended);
    for (entry, _, _) in settle.accepted.iter().chain(&settle.recovered) {
        remove(scan, entry);
    }
    for entry in &settle.consumed {
        remove(scan, entry);
    }
    if !settle.rejected.is_empty() {
        let quarantine = quarantine_dir(private.home)?;
        for entry in &settle.rejected {
            let from = scan.folder_dir(entry).unwrap_or(&scan.spool);
            let _ = fd::rename_at(from, Scan::raw_name(entry), &quarantine, &stamped(&entry.file_name));
        }
    }
    Ok(())
}

fn remove(scan: &Scan, entry: &Entry) {
    if let Some(dir) = scan.folder_dir(entry) {
        let _ = fd::unlink_at(dir, Scan::raw_name(entry));
    }
}

/// Root's private copies for one process (a tick, a verb holding `carma.lock`): the vault,
/// opened on first use and kept open until this value is dropped.
pub struct Private<'h> {
    home: &'h Home,
    vault: std::cell::OnceCell<Vault>,
}

impl<'h> Private<'h> {
    pub fn new(home: &'h Home) -> Private<'h> {
        Private { home, vault: std::cell::OnceCell::new() }
    }

    fn vault(&self) -> Result<&Vault> {
        if let Some(vault) = self.vault.get() {
            return Ok(vault);
        }
        let vault = Vault::open(self.home)?;
        Ok(self.vault.get_or_init(|| vault))
    }

    /// The private copy of an accepted submission: its environment values and summary text.
    pub fn read(&self, id: &TaskId) -> std::result::Result<Submission, String> {
        let bytes = match self.vault().and_then(|vault| vault.get(id)) {
            Ok(Some(bytes)) => bytes,
            Ok(None) => read_file(self.home, id)?,
            Err(e) => return Err(format!("the private copy of task {id} cannot be read: {e}")),
        };
        let text =
            String::from_utf8(bytes).map_err(|_| format!("the private copy of task {id} is not UTF-8"))?;
        parse_spool(&format!("private copy of task {id}"), &text, Limits::default())
    }

    /// Removes the private copies of tasks that have ended (nothing will launch them again).
    /// Best effort: a copy left behind is never read again.
    pub fn forget(&self, ids: &[TaskId]) {
        if ids.is_empty() {
            return;
        }
        if let Ok(vault) = self.vault() {
            let _ = vault.commit(&Batch { forget: ids.iter().collect(), ..Batch::default() });
        }
        self.forget_files(ids);
    }

    /// Removes copies kept as files by carma before the vault.
    fn forget_files(&self, ids: &[TaskId]) {
        if ids.is_empty() {
            return;
        }
        if let Ok(dir) = fd::open_dir(&self.home.private_dir()) {
            for id in ids {
                let _ = fd::unlink_at(&dir, OsStr::new(&format!("{id}.toml")));
            }
        }
    }
}

/// A private copy kept as a file by carma before the vault (`private/<id>.toml`).
fn read_file(home: &Home, id: &TaskId) -> std::result::Result<Vec<u8>, String> {
    let path = home.private_dir().join(format!("{id}.toml"));
    let unreadable =
        |why: String| format!("the private copy of task {id} ({}) cannot be read: {why}", path.display());
    let dir = fd::open_dir(&home.private_dir()).map_err(|e| unreadable(e.to_string()))?;
    let file = fd::open_at(&dir, OsStr::new(&format!("{id}.toml"))).map_err(|e| unreadable(e.to_string()))?;
    let stat = fd::fstat(&file).map_err(|e| unreadable(e.to_string()))?;
    if !stat.is_file() {
        return Err(unreadable(format!("it is {}", stat.kind())));
    }
    fd::read_capped(&file, SPOOL_BYTES_MAX)
        .map_err(|e| unreadable(e.map_or_else(|| "too large".into(), |e| e.to_string())))
}

pub(super) fn private_dir(home: &Home) -> Result<OwnedFd> {
    own_dir(home, "private")
}

fn quarantine_dir(home: &Home) -> Result<OwnedFd> {
    own_dir(home, "quarantine")
}

/// One of root's own folders in the state directory, made 0700 if missing.
fn own_dir(home: &Home, name: &str) -> Result<OwnedFd> {
    let path = home.root().join(name);
    let err = |e| Error::io(format!("cannot open {}", path.display()), e);
    let root = fd::open_dir(home.root()).map_err(err)?;
    match fd::open_dir_at(&root, OsStr::new(name)) {
        Ok(dir) => Ok(dir),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
            fd::make_dir_at(&root, OsStr::new(name), 0o700).map_err(err)
        }
        Err(e) => Err(err(e)),
    }
}

/// A unique name in quarantine for `name`, printable and bounded.
fn stamped(name: &str) -> OsString {
    let stamp =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let safe: String =
        name.chars().map(|c| if c.is_ascii_graphic() && c != '/' { c } else { '_' }).take(100).collect();
    OsString::from(format!("{stamp}-{safe}"))
}

/// A flood at the top of `spool/`: the whole top level goes to `quarantine/` in one rename
/// and a fresh `spool/` takes its place; the users' folders (checked on their descriptors)
/// are moved back into it. Costs one pass over the flood, once, instead of every tick.
/// Returns how many entries stayed in quarantine.
pub(super) fn move_top_level(home: &Home, spool: &OwnedFd) -> Result<u64> {
    let err = |what: &str, e| Error::io(format!("cannot {what} {}", home.spool_dir().display()), e);
    let stat = fd::fstat(spool).map_err(|e| err("read", e))?;
    let root = fd::open_dir(home.root()).map_err(|e| err("open the folder of", e))?;
    let quarantine = quarantine_dir(home)?;
    let parked = stamped("spool");
    fd::rename_at(&root, OsStr::new("spool"), &quarantine, &parked).map_err(|e| err("move", e))?;
    let fresh =
        fd::make_dir_at(&root, OsStr::new("spool"), stat.mode & 0o7777).map_err(|e| err("recreate", e))?;
    let _ = fd::chown(&fresh, stat.uid, u32::MAX);
    let old = fd::open_dir_at(&quarantine, &parked).map_err(|e| err("reopen", e))?;
    let mut kept = Vec::new();
    let mut left = 0u64;
    fd::visit(&old, |name| {
        let name = <OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(name);
        let folder = user_folder_uid(name).and_then(|uid| {
            let dir = fd::open_dir_at(&old, name).ok()?;
            let stat = fd::fstat(&dir).ok()?;
            super::scan::folder_refusal(stat, uid, "").is_none().then_some(())
        });
        match folder {
            Some(()) => kept.push(name.to_os_string()),
            None => left += 1,
        }
        true
    })
    .map_err(|e| err("list", e))?;
    for name in kept {
        let _ = fd::rename_at(&old, &name, &fresh, &name);
    }
    Ok(left)
}
