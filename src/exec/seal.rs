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
//! Only root seals (a personal queue's files are its user's anyway) and only files not
//! already root's. A descriptor the submitter opened for writing before the seal keeps
//! working until closed: the seal bounds what the path lets anyone write afterwards.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use super::checkpoint::CHECKPOINT_FILE;
use super::rundir::{JOB_SCRIPT, STDERR_LOG, STDOUT_LOG};

/// The files of a run folder that belong to the submitter while the attempt runs.
const SUBMITTER_FILES: [&str; 4] = [STDOUT_LOG, STDERR_LOG, JOB_SCRIPT, CHECKPOINT_FILE];

/// What the seal did to one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sealed {
    /// Now root's, readable by its submitter, cut to the cap when over it.
    Sealed,
    /// Nothing to do: missing, already root's, or not a regular file.
    Untouched,
}

/// Seals the submitter's files in the ended attempt's `run_dir` (see the module docs);
/// logs over `log_bytes_max` are cut to it. Best effort per file: the first failure is
/// returned, as one line naming the file, after the others were tried.
pub fn seal_ended_attempt(run_dir: &Path, log_bytes_max: Option<u64>) -> Result<(), String> {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(());
    }
    let mut first_error = None;
    for name in SUBMITTER_FILES {
        // The checkpoint file says what it says by its time: its bytes are nobody's, so none
        // are kept (a job may have written into it while it ran).
        let cap = match name {
            JOB_SCRIPT => None,
            CHECKPOINT_FILE => Some(0),
            _ => log_bytes_max,
        };
        if let Err(err) = seal_file(&run_dir.join(name), cap) {
            first_error.get_or_insert(err);
        }
    }
    first_error.map_or(Ok(()), Err)
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

/// The disk bytes (`st_blocks` x 512, so a sparse file counts what it holds) of the
/// submitter's files in `run_dir`, looked at without following links; missing ones count 0.
pub fn attempt_disk_bytes(run_dir: &Path) -> u64 {
    SUBMITTER_FILES
        .iter()
        .filter_map(|name| std::fs::symlink_metadata(run_dir.join(name)).ok())
        .map(|meta| meta.blocks().saturating_mul(512))
        .fold(0, u64::saturating_add)
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
}
