//! An ended attempt's files are no longer the job's to grow.
//!
//! While an attempt runs, its run-folder logs (`stdout.log`, `stderr.log`) and its script copy
//! belong to the submitter, so the job (running as them) can write them; the supervisor keeps
//! the logs under `log-bytes-max` ([`super::logcap`]). Once the attempt has ended, nothing
//! watches them any more, and a file's owner may always `chmod` it back to writable and open
//! it by its path (the run folder is traversable): the state directory's disk would be the
//! submitter's to fill. So once the tick has recorded the attempt's end, it **seals** them,
//! each through a descriptor opened with `O_NOFOLLOW | O_NONBLOCK` and checked with `fstat` to
//! be a regular file (the names were the job's to play with while it ran, if it ran as root):
//!
//! 1. `fchown` to root, which takes the `chmod` away from the submitter;
//! 2. mode `0640`, with a POSIX ACL that lets the submitter read (`user:<uid>:r--`, group
//!    nothing), so `carma logs` as the submitter keeps working; on a filesystem without ACLs
//!    the group becomes the submitter's primary group instead (a user-private group on most
//!    distributions; where that group is shared, its members can read the log too);
//! 3. a log over `log-bytes-max` cut to it (it keeps its head: the supervisor already kept the
//!    tail within the cap, so only bytes written after the attempt's end go); the checkpoint
//!    file (`$CARMA_CHECKPOINT_FILE`, which a job only touches) cut to 0.
//!
//! An entry the owner table says is removed at the end (the `attach/` folder of an
//! interactive session, which its supervisor removes itself unless it was killed, and which
//! carma before 0.6 made the submitter's) is removed through descriptors: the folder opened
//! `O_NOFOLLOW | O_DIRECTORY`, made root's and 0700 first (so nothing more is added by path),
//! its entries unlinked relative to it, at most [`REMOVED_ENTRIES_MAX`] of them and
//! [`REMOVED_DEPTH_MAX`] folders deep, no link followed.
//!
//! What is sealed, cut, removed and counted comes from the run folder's owner table,
//! [`super::rundir::RUN_FOLDER`], and nothing else.
//!
//! Only root seals (a personal queue's files are its user's anyway) and only files not
//! already root's. A descriptor the submitter opened for writing before the seal keeps
//! working until closed: the seal bounds what the path lets anyone write afterwards.

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use super::rundir::{AtEnd, RUN_FOLDER};

/// The most entries removed (or counted) in one folder tree of a run folder.
pub const REMOVED_ENTRIES_MAX: u32 = 4096;
/// The most folders deep a removal (or count) goes.
pub const REMOVED_DEPTH_MAX: u32 = 8;

/// What the seal did to one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sealed {
    /// Now root's, readable by its submitter, cut to the cap when over it.
    Sealed,
    /// Nothing to do: missing, already root's, or not a regular file.
    Untouched,
}

/// Seals the submitter's files in the ended attempt's `run_dir` and removes what is removed
/// at the end, as the owner table says (see the module docs); logs over `log_bytes_max` are
/// cut to it. Best effort per entry: the first failure is returned, as one line naming it,
/// after the others were tried.
pub fn seal_ended_attempt(run_dir: &Path, log_bytes_max: Option<u64>) -> Result<(), String> {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(());
    }
    let mut first_error = None;
    for entry in RUN_FOLDER {
        let path = run_dir.join(entry.name);
        // The checkpoint file says what it says by its time: its bytes are nobody's, so none
        // are kept (a job may have written into it while it ran).
        let done = match entry.at_end {
            AtEnd::Kept => Ok(()),
            AtEnd::Sealed => seal_file(&path, None).map(drop),
            AtEnd::SealedEmptied => seal_file(&path, Some(0)).map(drop),
            AtEnd::SealedCutToLogCap => seal_file(&path, log_bytes_max).map(drop),
            AtEnd::Removed => remove_entry(run_dir, entry.name),
        };
        if let Err(err) = done {
            first_error.get_or_insert(err);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// Removes `run_dir/name` and what it holds (module docs); one that is not there is fine, and
/// so is a run folder that is not there (an attempt that never launched, or one whose folder
/// retention already removed).
pub fn remove_entry(run_dir: &Path, name: &str) -> Result<(), String> {
    let shown = run_dir.join(name);
    let parent = match crate::scratch::open_dir_nofollow(run_dir) {
        Ok(parent) => parent,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(err) => return Err(format!("cannot open {} to remove {name}: {err}", run_dir.display())),
    };
    let mut budget = REMOVED_ENTRIES_MAX;
    remove_at(&parent, name.as_bytes(), 0, &mut budget)
        .map_err(|err| format!("cannot remove {}: {err}", shown.display()))
}

/// Unlinks `name` in the folder `parent`: a folder is first made root's and 0700, emptied
/// (depth and entries bounded), then removed; nothing is followed.
fn remove_at(parent: &File, name: &[u8], depth: u32, budget: &mut u32) -> std::io::Result<()> {
    let c_name = CString::new(name).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK;
    // SAFETY: openat relative to a descriptor we own, with a NUL-terminated name.
    let raw = unsafe { libc::openat(parent.as_raw_fd(), c_name.as_ptr(), flags) };
    if raw < 0 {
        let err = std::io::Error::last_os_error();
        return match err.raw_os_error() {
            Some(libc::ENOENT) => Ok(()),
            // Not a folder (or a link): unlinked as the name it is.
            Some(libc::ENOTDIR | libc::ELOOP) => unlink_at(parent, &c_name, 0),
            _ => Err(err),
        };
    }
    // SAFETY: `raw` is a descriptor openat just returned to us.
    let dir = unsafe { File::from_raw_fd(raw) };
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        std::os::unix::fs::fchown(&dir, Some(0), Some(0))?;
    }
    crate::scratch::fchmod(&dir, 0o700)?;
    if depth < REMOVED_DEPTH_MAX {
        let names: Vec<Vec<u8>> = std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()))?
            .flatten()
            .map(|entry| entry.file_name().as_bytes().to_vec())
            .collect();
        for child in names {
            if *budget == 0 {
                return Err(std::io::Error::other(format!("more than {REMOVED_ENTRIES_MAX} entries")));
            }
            *budget -= 1;
            remove_at(&dir, &child, depth + 1, budget)?;
        }
    }
    unlink_at(parent, &c_name, libc::AT_REMOVEDIR)
}

fn unlink_at(parent: &File, name: &CString, flags: libc::c_int) -> std::io::Result<()> {
    // SAFETY: unlinkat relative to a descriptor we own, with a NUL-terminated name.
    if unsafe { libc::unlinkat(parent.as_raw_fd(), name.as_ptr(), flags) } == 0 {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::ENOENT) { Ok(()) } else { Err(err) }
}

/// Seals one file; see [`seal_ended_attempt`].
pub fn seal_file(path: &Path, bytes_max: Option<u64>) -> Result<Sealed, String> {
    let shown = path.display();
    let opened = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path);
    let file = match opened {
        Ok(file) => file,
        // Gone, or a link or a FIFO put in its place: nothing of the attempt's to seal there.
        Err(err)
            if matches!(
                err.raw_os_error(),
                Some(libc::ENOENT | libc::ELOOP | libc::ENXIO | libc::EISDIR)
            ) =>
        {
            return Ok(Sealed::Untouched);
        }
        Err(err) => return Err(format!("cannot open {shown} to seal it: {err}")),
    };
    let meta = file.metadata().map_err(|err| format!("cannot stat {shown}: {err}"))?;
    if !meta.is_file() || meta.uid() == 0 {
        return Ok(Sealed::Untouched);
    }
    let (uid, gid) = (meta.uid(), meta.gid());
    let failed = |what: &str, err: std::io::Error| format!("cannot {what} {shown} to seal it: {err}");
    std::os::unix::fs::fchown(&file, Some(0), Some(0)).map_err(|err| failed("chown", err))?;
    set_mode(&file, 0o640).map_err(|err| failed("chmod", err))?;
    if let Err(err) = set_reader_acl(&file, uid) {
        if err.raw_os_error() != Some(libc::EOPNOTSUPP) {
            return Err(failed("set the reader ACL of", err));
        }
        std::os::unix::fs::fchown(&file, None, Some(gid)).map_err(|err| failed("chgrp", err))?;
    }
    if let Some(cap) = bytes_max
        && meta.len() > cap
    {
        file.set_len(cap).map_err(|err| failed("cut", err))?;
    }
    Ok(Sealed::Sealed)
}

/// The disk bytes (`st_blocks` x 512, so a sparse file counts what it holds) of the entries
/// of `run_dir` the owner table counts as the submitter's, a folder with what it holds
/// (bounded as a removal is), looked at without following links; missing ones count 0.
pub fn attempt_disk_bytes(run_dir: &Path) -> u64 {
    let mut budget = REMOVED_ENTRIES_MAX;
    RUN_FOLDER
        .iter()
        .filter(|entry| entry.counted)
        .map(|entry| disk_bytes(&run_dir.join(entry.name), 0, &mut budget))
        .fold(0, u64::saturating_add)
}

fn disk_bytes(path: &Path, depth: u32, budget: &mut u32) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(path) else { return 0 };
    let own = meta.blocks().saturating_mul(512);
    if !meta.is_dir() || depth >= REMOVED_DEPTH_MAX {
        return own;
    }
    let mut total = own;
    for entry in std::fs::read_dir(path).into_iter().flatten().flatten() {
        if *budget == 0 {
            break;
        }
        *budget -= 1;
        total = total.saturating_add(disk_bytes(&entry.path(), depth + 1, budget));
    }
    total
}

fn set_mode(file: &File, mode: libc::mode_t) -> std::io::Result<()> {
    // SAFETY: fchmod on a descriptor we own.
    if unsafe { libc::fchmod(file.as_raw_fd(), mode) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The access ACL `user::rw-, user:<reader>:r--, group::---, mask::r--, other::---`.
fn set_reader_acl(file: &File, reader_uid: u32) -> std::io::Result<()> {
    let value = reader_acl(reader_uid);
    let name = c"system.posix_acl_access";
    // SAFETY: a NUL-terminated name and a buffer of `value.len()` bytes.
    let set =
        unsafe { libc::fsetxattr(file.as_raw_fd(), name.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
    if set != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The kernel's `posix_acl_xattr` encoding: a version word, then (tag, perm, id) entries in
/// tag order, little-endian.
fn reader_acl(reader_uid: u32) -> Vec<u8> {
    const VERSION: u32 = 2;
    const UNDEFINED_ID: u32 = u32::MAX;
    // (tag, permissions, id): USER_OBJ, USER, GROUP_OBJ, MASK, OTHER.
    let entries: [(u16, u16, u32); 5] = [
        (0x01, 6, UNDEFINED_ID),
        (0x02, 4, reader_uid),
        (0x04, 0, UNDEFINED_ID),
        (0x10, 4, UNDEFINED_ID),
        (0x20, 0, UNDEFINED_ID),
    ];
    let mut value = VERSION.to_le_bytes().to_vec();
    for (tag, perm, id) in entries {
        value.extend_from_slice(&tag.to_le_bytes());
        value.extend_from_slice(&perm.to_le_bytes());
        value.extend_from_slice(&id.to_le_bytes());
    }
    value
}

#[cfg(test)]
mod tests {
    //! Goal: the ACL is encoded as the kernel reads it. Method: the bytes, pinned.
    use super::*;

    #[test]
    fn reader_acl_is_the_kernels_encoding() {
        let value = reader_acl(1001);
        assert_eq!(value.len(), 4 + 5 * 8);
        assert_eq!(&value[..4], &[2, 0, 0, 0]);
        assert_eq!(&value[4..12], &[1, 0, 6, 0, 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(&value[12..20], &[2, 0, 4, 0, 0xe9, 0x03, 0, 0]);
        assert_eq!(&value[36..44], &[0x20, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]);
    }

    /// Goal: an attempt with no run folder (it never launched, or retention removed it) is
    /// sealed without a word, every tick: `carma bench faults` printed "cannot open … to remove
    /// attach" for each such attempt. A run folder that is a link is still refused.
    #[test]
    fn a_run_folder_that_is_not_there_has_nothing_to_remove() {
        let up = tempfile::tempdir().unwrap();
        assert_eq!(remove_entry(&up.path().join("runs/none/1"), "attach"), Ok(()));
        let target = up.path().join("elsewhere");
        std::fs::create_dir(&target).unwrap();
        std::os::unix::fs::symlink(&target, up.path().join("link")).unwrap();
        let refused = remove_entry(&up.path().join("link"), "attach").unwrap_err();
        assert!(refused.starts_with("cannot open ") && refused.contains("to remove attach"), "{refused}");
    }

    /// Goal: a run-folder entry the table removes at the end goes with all it holds, through
    /// descriptors: a link inside is unlinked, never followed, and what it held was counted
    /// while it lived. Method: an `attach/` folder made as carma before 0.6 left it (the
    /// submitter's, holding files, a folder and a link to a file outside), counted, then
    /// sealed.
    #[test]
    fn an_attach_folder_left_behind_is_counted_then_removed_without_following_links() {
        let run = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let kept = outside.path().join("kept");
        std::fs::write(&kept, vec![7u8; 64 * 1024]).unwrap();
        let attach = run.path().join("attach");
        std::fs::create_dir_all(attach.join("deep/er")).unwrap();
        std::fs::write(attach.join("deep/er/junk"), vec![1u8; 256 * 1024]).unwrap();
        std::os::unix::fs::symlink(&kept, attach.join("link")).unwrap();
        std::os::unix::fs::symlink(outside.path(), attach.join("dirlink")).unwrap();
        assert!(attempt_disk_bytes(run.path()) >= 256 * 1024, "its bytes count while it lives");
        remove_entry(run.path(), "attach").unwrap();
        assert!(!attach.exists() && std::fs::symlink_metadata(&attach).is_err(), "removed");
        assert_eq!(std::fs::read(&kept).unwrap().len(), 64 * 1024, "a link's target is never touched");
        assert!(outside.path().join("kept").exists());
        assert_eq!(attempt_disk_bytes(run.path()), 0);
        remove_entry(run.path(), "attach").expect("one that is gone is fine");
    }
}
