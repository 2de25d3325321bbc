//! A job's checkpoint reports: the file `$CARMA_CHECKPOINT_FILE` in its run folder.
//!
//! The supervisor creates `HOME/runs/ID/N/checkpoint` before the job starts: exclusively,
//! never through a link, owned by the submitter, mode 0600, with its modification time set to
//! the epoch (0), which means "no checkpoint yet". A job reports a checkpoint by touching it
//! (`touch "$CARMA_CHECKPOINT_FILE"`, or `carma checkpointed`, which does the same through a
//! descriptor): the new modification time is the report. The tick reads it each time it
//! observes the attempt ([`checkpoint_ms`]) and journals `Checkpointed` when it is later than
//! the attempt's last one.
//!
//! # What a report is worth
//! It is the job's claim, and it moves nothing but that job's own lost-work accounting (how
//! much a preemption of it costs, which makes it a likelier victim). So the tick only makes
//! sure reading it cannot be turned against root: the run folder is root's (0711, see
//! [`super::rundir`]), so the submitter cannot swap the file for a link, and the tick still
//! opens it `O_PATH|O_NOFOLLOW` (which opens nothing: no FIFO blocks, no device answers) and
//! takes the time from `fstat` of that descriptor, of a regular file only. A time in the
//! future is taken as now by the tick's decision; one report per attempt per tick is
//! journaled however often the job touches the file.

use std::fs::{File, OpenOptions};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::spawn::JobCredentials;

pub use super::rundir::CHECKPOINT_FILE;

/// The job's environment variable naming [`CHECKPOINT_FILE`]'s absolute path.
pub const CHECKPOINT_FILE_ENV: &str = "CARMA_CHECKPOINT_FILE";

/// Creates the attempt's checkpoint file (see the module docs) and returns its path, for
/// [`CHECKPOINT_FILE_ENV`]. `Err` is a one-line reason the job is not started for.
pub(crate) fn create_checkpoint_file(
    run_dir: &Path,
    credentials: &JobCredentials,
) -> Result<PathBuf, String> {
    let path = run_dir.join(CHECKPOINT_FILE);
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(&path)
        .map_err(|err| format!("cannot create {}: {err}", path.display()))?;
    // Before the chown: once the submitter owns it, the job could race the reset.
    file.set_modified(std::time::UNIX_EPOCH)
        .map_err(|err| format!("cannot reset the time of {}: {err}", path.display()))?;
    super::output::own_by_submitter(&file, &path, credentials)?;
    Ok(path)
}

/// When the attempt in `run_dir` last reported a checkpoint (its checkpoint file's
/// modification time), ms since the epoch; `None` when it never did, when the file is not
/// there (an attempt of an older carma) or is not a regular file.
pub fn checkpoint_ms(run_dir: &Path) -> Option<u64> {
    let path = run_dir.join(CHECKPOINT_FILE);
    let name = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: a valid NUL-terminated path; O_PATH opens nothing, O_NOFOLLOW refuses a link.
    let fd = unsafe { libc::open(name.as_ptr(), libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    // SAFETY: `fd` was just opened and is owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let stat = crate::fsutil::fstat(&fd).ok()?;
    if stat.st_mode & libc::S_IFMT != libc::S_IFREG {
        return None;
    }
    let ms = u64::try_from(stat.st_mtime).ok()?.saturating_mul(1000)
        + u64::try_from(stat.st_mtime_nsec).unwrap_or(0) / 1_000_000;
    (ms > 0).then_some(ms)
}

/// Why `carma checkpointed` could not report.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// Not run from inside a job: the variable is unset or empty.
    #[error(
        "not inside a carma job: {CHECKPOINT_FILE_ENV} is not set\nhint: run carma checkpointed from the job itself, once its checkpoint is written"
    )]
    NotInJob,
    /// The named file could not be opened or touched.
    #[error(
        "cannot report a checkpoint through {path}: {reason}\nhint: {CHECKPOINT_FILE_ENV} must name the file carma made for this attempt"
    )]
    Touch {
        /// The path the variable names.
        path: String,
        /// What went wrong.
        reason: String,
    },
}

/// `carma checkpointed`: touches the file `value` (the job's [`CHECKPOINT_FILE_ENV`]) through
/// a descriptor opened without following a link, after checking it is a regular file.
pub fn report_checkpoint(value: Option<&std::ffi::OsStr>) -> Result<PathBuf, ReportError> {
    let path = PathBuf::from(value.filter(|v| !v.is_empty()).ok_or(ReportError::NotInJob)?);
    let fail = |reason: String| ReportError::Touch { path: path.display().to_string(), reason };
    let file: File = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(&path)
        .map_err(|err| fail(err.to_string()))?;
    let stat = crate::fsutil::fstat(&file).map_err(|err| fail(err.to_string()))?;
    if stat.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(fail("not a regular file".into()));
    }
    file.set_modified(std::time::SystemTime::now()).map_err(|err| fail(err.to_string()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    //! Goal: a fresh checkpoint file means "none yet", a touch is read back as its time, and
    //! neither the tick's read nor the job's report goes through a link.
    use super::*;

    fn credentials() -> JobCredentials {
        JobCredentials { uid: 0, gid: 0, groups: Vec::new(), switch_user: false, user_home: None }
    }

    #[test]
    fn a_fresh_file_is_no_checkpoint_and_a_touch_is_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(checkpoint_ms(dir.path()), None, "no file: no checkpoint");
        let path = create_checkpoint_file(dir.path(), &credentials()).expect("created");
        assert_eq!(path, dir.path().join(CHECKPOINT_FILE));
        assert_eq!(checkpoint_ms(dir.path()), None, "created at the epoch: none yet");
        let before = crate::clock::Clock::now_ms(&crate::clock::SystemClock);
        report_checkpoint(Some(path.as_os_str())).expect("touched");
        let at = checkpoint_ms(dir.path()).expect("a checkpoint");
        assert!(at + 1000 >= before, "{at} vs {before}");
        let again = create_checkpoint_file(dir.path(), &credentials()).expect_err("exclusive");
        assert!(again.starts_with("cannot create "), "{again}");
    }

    #[test]
    fn links_are_neither_read_nor_touched() {
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, b"").expect("target");
        std::os::unix::fs::symlink(&target, dir.path().join(CHECKPOINT_FILE)).expect("link");
        assert_eq!(checkpoint_ms(dir.path()), None, "a link is not read");
        let link = dir.path().join(CHECKPOINT_FILE);
        let error = report_checkpoint(Some(link.as_os_str())).expect_err("refused");
        assert!(error.to_string().starts_with("cannot report a checkpoint through "), "{error}");
        assert!(create_checkpoint_file(dir.path(), &credentials()).is_err(), "not created through it");
    }

    #[test]
    fn outside_a_job_the_report_says_so() {
        let error = report_checkpoint(None).expect_err("no variable");
        assert_eq!(
            error.to_string(),
            "not inside a carma job: CARMA_CHECKPOINT_FILE is not set\nhint: run carma checkpointed from the job itself, once its checkpoint is written"
        );
        assert!(matches!(report_checkpoint(Some("".as_ref())), Err(ReportError::NotInJob)));
    }
}
