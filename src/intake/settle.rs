//! After the commit: the private copies written from the bytes the tick read, the users'
//! handled files removed from their folders, refused entries moved to `quarantine/`.
//!
//! Nothing here follows a name a user controls: every call is relative to a directory
//! descriptor (the user's folder as checked by the scan, or root's own `private/` and
//! `quarantine/`), and the private copy is a new file the tick creates with `O_EXCL`.

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::os::fd::OwnedFd;

use super::scan::{Entry, Scan, user_folder_uid};
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
    /// Handled and no longer needed (requests, files of tasks already known).
    pub consumed: Vec<Entry>,
    /// Refused entries, in a user's folder or at the top of `spool/`: to quarantine.
    pub rejected: Vec<Entry>,
}

/// Carries out `settle`; called only after the journal commit that recorded its entries. One
/// entry that cannot be moved is left for the next tick, which recognises it by id; it never
/// fails the others.
pub fn settle(home: &Home, scan: &Scan, settle: &Settle) -> Result<()> {
    if !settle.accepted.is_empty() {
        let private = private_dir(home)?;
        let mut written = Vec::with_capacity(settle.accepted.len());
        for (_, id, bytes) in &settle.accepted {
            written.push(write_private(&private, id, bytes).map_err(|e| {
                Error::io(
                    format!("cannot write the private copy of task {id} in {}", home.private_dir().display()),
                    e,
                )
            })?);
        }
        // Every copy durable before any user's file goes. Not `syncfs`: that would make the
        // tick wait for whatever any user left dirty on the same filesystem.
        sync_all_of(&written)
            .and_then(|()| fd::sync(&private))
            .map_err(|e| Error::io(format!("cannot sync {}", home.private_dir().display()), e))?;
        for (entry, _, _) in &settle.accepted {
            remove(scan, entry);
        }
    }
    for entry in &settle.consumed {
        remove(scan, entry);
    }
    if !settle.rejected.is_empty() {
        let quarantine = quarantine_dir(home)?;
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

/// Syncs the files' data on up to 256 threads at once: concurrent syncs share the
/// filesystem's journal commits. A 4,000-copy burst on ext4: 2.5x the old rename-based tick
/// with 16 threads, 1.7x with 256 (reports/burst/README.md).
fn sync_all_of(files: &[std::fs::File]) -> std::io::Result<()> {
    const THREADS: usize = 256;
    if files.len() <= 1 {
        return files.iter().try_for_each(std::fs::File::sync_data);
    }
    let chunk = files.len().div_ceil(THREADS);
    std::thread::scope(|scope| {
        let workers: Vec<_> = files
            .chunks(chunk)
            .map(|part| scope.spawn(move || part.iter().try_for_each(std::fs::File::sync_data)))
            .collect();
        workers
            .into_iter()
            .try_for_each(|w| w.join().unwrap_or_else(|_| Err(std::io::Error::other("sync thread"))))
    })
}

/// The private copy, from bytes already read: a fresh root-owned 0600 file, returned open so
/// the caller syncs the batch. A copy
/// left by a tick that died before its commit (same id, task unknown) is replaced.
fn write_private(private: &OwnedFd, id: &TaskId, bytes: &[u8]) -> std::io::Result<std::fs::File> {
    let name = OsString::from(format!("{id}.toml"));
    let mut file = match fd::create_at(private, &name, 0o600) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            fd::unlink_at(private, &name)?;
            fd::create_at(private, &name, 0o600)?
        }
        other => other?,
    };
    file.write_all(bytes)?;
    Ok(file)
}

/// The private copy of an accepted submission: its environment values and summary text.
pub fn read_private(home: &Home, id: &TaskId) -> std::result::Result<Submission, String> {
    let path = home.private_dir().join(format!("{id}.toml"));
    let unreadable =
        |why: String| format!("the private copy of task {id} ({}) cannot be read: {why}", path.display());
    let dir = fd::open_dir(&home.private_dir()).map_err(|e| unreadable(e.to_string()))?;
    let file = fd::open_at(&dir, OsStr::new(&format!("{id}.toml"))).map_err(|e| unreadable(e.to_string()))?;
    let stat = fd::fstat(&file).map_err(|e| unreadable(e.to_string()))?;
    if !stat.is_file() {
        return Err(unreadable(format!("it is {}", stat.kind())));
    }
    let bytes = fd::read_capped(&file, SPOOL_BYTES_MAX)
        .map_err(|e| unreadable(e.map_or_else(|| "too large".into(), |e| e.to_string())))?;
    let text = String::from_utf8(bytes).map_err(|_| format!("the private copy of task {id} is not UTF-8"))?;
    parse_spool(&format!("private copy of task {id}"), &text, Limits::default())
}

/// Removes the private copy of a task that has ended (nothing will launch it again).
pub fn forget_private(home: &Home, id: &TaskId) {
    if let Ok(dir) = fd::open_dir(&home.private_dir()) {
        let _ = fd::unlink_at(&dir, OsStr::new(&format!("{id}.toml")));
    }
}

fn private_dir(home: &Home) -> Result<OwnedFd> {
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
