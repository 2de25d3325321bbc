//! After the commit: the private copies written from the bytes the tick read (one vault
//! commit, see `vault`), the users' handled files removed from their folders, refused
//! entries moved to `quarantine/`.
//!
//! Nothing here follows a name a user controls: every call is relative to a directory
//! descriptor (the user's folder as checked by the scan, or root's own `private/` and
//! `quarantine/`), and the private copies go into root's own vault, never into a user's file.

use std::ffi::OsStr;

use super::rooms::{quarantine_dir, stamped};
use super::scan::{Entry, Scan};
use super::vault::{Batch, Vault};
use super::{SPOOL_BYTES_MAX, fd};
use crate::error::Result;
use crate::home::Home;
use crate::id::TaskId;
use crate::spec::Submission;

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
    /// Root's private copies in `home`; nothing is opened until first used.
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
        crate::spec::spool_form::parse_private_copy(&format!("private copy of task {id}"), &text)
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
