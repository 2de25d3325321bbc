//! Paths of an attempt's run dir, the only place the tick and the supervisor
//! exchange data. Every entry of a run folder is in one table, [`RUN_FOLDER`]: what it is,
//! whose it is while the attempt runs, whose once it has ended, and what the end does to it.
//! Sealing ([`super::seal`]) and the count of each user's bytes (tick/userbytes.rs) read that
//! table, so an entry cannot be added and forgotten by either (and the interactive and
//! suspend tests check that every entry a real attempt leaves is in it):
//!
//! ```text
//! HOME/runs/<task_id>/<attempt>/plan.json       tick, before launch (atomic)
//!                               claim.json      supervisor, exclusive (link)
//!                               job.json        supervisor, after spawn (atomic)
//!                               stdout.log      the job
//!                               stderr.log      the job
//!                               exit.json       supervisor, at the end (atomic)
//!                               supervisor.log  the supervisor's own output
//!                               checkpoint      supervisor, before spawn: the job
//!                                               touches it ($CARMA_CHECKPOINT_FILE)
//!                               script          supervisor: a job script's copy, run
//!                                               by its interpreter (the submitter's, 0500)
//!                               attach/sock     supervisor of `carma alloc`/`run`: the
//!                                               session's socket, removed at its end
//!                               suspended       tick: the mark of an applied suspension
//!                               bin/srun        supervisor, before spawn: a link to carma,
//!                                               first on the job's PATH (`exec::srun`)
//! ```
//!
//! The task id becomes a path component, so it is validated here: nothing
//! outside `HOME/runs` can be named through it.
//!
//! # Who may read what
//! A root tick (a shared queue) keeps everything root's except the job's
//! own output:
//!
//! ```text
//! runs/  runs/ID/  runs/ID/N/            0711 root   (traversable, not listable)
//! plan.json claim.json job.json exit.json supervisor.log
//!                                        0600 root   (env values, OOM lines)
//! bin/ (holding the link srun)           0755 root   (the job runs it)
//! stdout.log stderr.log checkpoint       0600 the submitter
//! ```
//!
//! so a user reaches their own logs by path and nothing else: not another
//! user's logs, not a plan's environment, not an exit record's OOM line,
//! and not the list of task ids. Because only root can create entries in
//! the run folder, nobody can plant a link there for root to follow; root
//! still creates its files with `O_EXCL`/`O_NOFOLLOW`. A tick that is not
//! root (a personal queue) makes everything its user's, 0700 and 0600.
//! `runs/` and a task's folder are tightened (from carma 0.1's 0755) when
//! an attempt is created in them; older attempt folders keep their modes.

use std::fs::DirBuilder;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use super::ExecError;
use super::atomic::io_error;

/// Written by the tick before launch: [`crate::exec::AttemptPlan`].
pub const PLAN_FILE: &str = "plan.json";
/// Created exclusively by the supervisor: [`crate::exec::ClaimRecord`].
pub const CLAIM_FILE: &str = "claim.json";
/// Written by the supervisor after spawning: [`crate::exec::JobRecord`].
pub const JOB_FILE: &str = "job.json";
/// Written by the supervisor when the job ended: [`crate::exec::ExitRecord`].
pub const EXIT_FILE: &str = "exit.json";
/// The job's standard output.
pub const STDOUT_LOG: &str = "stdout.log";
/// The job's standard error, scanned for OOM signatures.
pub const STDERR_LOG: &str = "stderr.log";
/// The supervisor's own stdout and stderr when launched with setsid.
pub const SUPERVISOR_LOG: &str = "supervisor.log";
/// A job script's copy, written by the supervisor for its interpreter to run.
pub const JOB_SCRIPT: &str = "script";
/// The file a job touches to report a checkpoint (exec/checkpoint.rs).
pub const CHECKPOINT_FILE: &str = "checkpoint";
/// The folder of an interactive session's socket (root's, 0711; exec/interactive.rs).
pub const ATTACH_DIR: &str = "attach";
/// The tick's mark that the attempt's suspension was applied (exec/freeze.rs).
pub const SUSPENDED_MARK: &str = "suspended";
/// The root-owned folder holding `srun`, a link to carma first on the job's PATH (exec/srun).
pub const LAUNCHER_DIR: &str = "bin";

/// Whose an entry of a run folder is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// Root's (a root tick), so no user can change it.
    Root,
    /// The submitter's: the job, running as them, writes it.
    Submitter,
    /// Root's folder holding one entry of the submitter's (the session's socket).
    RootHoldingSubmitters,
    /// Gone: removed at the end.
    Nobody,
}

/// What the end of the attempt (the tick's seal, once the end is committed) does to an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtEnd {
    /// Nothing: it is root's already.
    Kept,
    /// Made root's, readable by the submitter, and cut to at most `log-bytes-max`.
    SealedCutToLogCap,
    /// Made root's, readable by the submitter, and cut to nothing (its time is what it says).
    SealedEmptied,
    /// Made root's, readable by the submitter, kept whole (a script copy).
    Sealed,
    /// Removed, with whatever it holds, never following a link.
    Removed,
}

/// One entry of a run folder: see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunEntry {
    /// Its name in the run folder.
    pub name: &'static str,
    /// What it is.
    pub what: &'static str,
    /// Whose it is while the attempt runs (a root tick).
    pub while_running: Owner,
    /// Whose it is once the attempt has ended.
    pub after: Owner,
    /// What the end does to it.
    pub at_end: AtEnd,
    /// Whether its bytes are the submitter's, counted against `[limits]
    /// state-bytes-per-user-max` while they are there (the job chose what went in).
    pub counted: bool,
}

/// Every entry a run folder can hold (module docs).
pub const RUN_FOLDER: [RunEntry; 12] = [
    root_entry(PLAN_FILE, "the tick's plan of the attempt (argv, environment values, GPUs)"),
    root_entry(CLAIM_FILE, "the supervisor's exclusive claim"),
    root_entry(JOB_FILE, "the job's first process, process group, user and cgroup"),
    root_entry(EXIT_FILE, "how the job ended, with the supervisor's readings"),
    root_entry(SUPERVISOR_LOG, "the supervisor's own output"),
    job_entry(STDOUT_LOG, "the job's standard output", AtEnd::SealedCutToLogCap),
    job_entry(STDERR_LOG, "the job's standard error", AtEnd::SealedCutToLogCap),
    job_entry(CHECKPOINT_FILE, "the job's checkpoint report", AtEnd::SealedEmptied),
    job_entry(JOB_SCRIPT, "a job script's copy", AtEnd::Sealed),
    RunEntry {
        name: ATTACH_DIR,
        what: "an interactive session's socket (attach/sock, the submitter's) in root's folder",
        while_running: Owner::RootHoldingSubmitters,
        after: Owner::Nobody,
        at_end: AtEnd::Removed,
        counted: true,
    },
    RunEntry {
        name: SUSPENDED_MARK,
        what: "the tick's mark that a suspension was applied (removed at the resume)",
        while_running: Owner::Root,
        after: Owner::Root,
        at_end: AtEnd::Kept,
        counted: false,
    },
    root_entry(LAUNCHER_DIR, "the folder of srun, a link to carma first on the job's PATH (0755)"),
];

const fn root_entry(name: &'static str, what: &'static str) -> RunEntry {
    RunEntry {
        name,
        what,
        while_running: Owner::Root,
        after: Owner::Root,
        at_end: AtEnd::Kept,
        counted: false,
    }
}

const fn job_entry(name: &'static str, what: &'static str, at_end: AtEnd) -> RunEntry {
    RunEntry { name, what, while_running: Owner::Submitter, after: Owner::Root, at_end, counted: true }
}

/// The table's entry named `name`, if any. The temp file of an atomic write in progress
/// (`.exit.json.tmp.PID.N`, [`super::atomic::temp_target`]) is its target's entry: the writer
/// is the target's writer, so it has the target's owner.
pub fn run_entry(name: &str) -> Option<&'static RunEntry> {
    let name = super::atomic::temp_target(name).unwrap_or(name);
    RUN_FOLDER.iter().find(|entry| entry.name == name)
}

/// Longest accepted task id.
pub const TASK_ID_LEN_MAX: usize = 64;

/// Check that `task_id` is 1..=64 characters of `[0-9a-z]`.
pub fn validate_task_id(task_id: &str) -> Result<(), ExecError> {
    let valid = !task_id.is_empty()
        && task_id.len() <= TASK_ID_LEN_MAX
        && task_id.bytes().all(|byte| byte.is_ascii_digit() || byte.is_ascii_lowercase());
    if valid { Ok(()) } else { Err(ExecError::InvalidTaskId { task_id: task_id.to_string() }) }
}

/// `HOME/runs/<task_id>/<attempt>`, after validating the task id and that
/// attempts start at 1.
pub fn run_dir(home: &Path, task_id: &str, attempt: u32) -> Result<PathBuf, ExecError> {
    validate_task_id(task_id)?;
    if attempt == 0 {
        return Err(ExecError::InvalidPlan {
            path: home.join("runs").join(task_id),
            reason: "attempt 0 does not exist, attempts start at 1".into(),
        });
    }
    Ok(home.join("runs").join(task_id).join(attempt.to_string()))
}

/// Mode of `runs/`, `runs/ID/` and `runs/ID/N/` for a root tick.
pub const RUN_DIR_MODE_SHARED: u32 = 0o711;
/// The same for a tick that is not root.
pub const RUN_DIR_MODE_PRIVATE: u32 = 0o700;

/// Create the run dir and its parents with the modes in the module docs
/// (tightening them if they exist) and return it.
pub fn create_run_dir(home: &Path, task_id: &str, attempt: u32) -> Result<PathBuf, ExecError> {
    let dir = run_dir(home, task_id, attempt)?;
    let euid = crate::access::uid::effective();
    let mode = if euid == 0 { RUN_DIR_MODE_SHARED } else { RUN_DIR_MODE_PRIVATE };
    let task_dir = dir.parent().expect("a run dir has a parent");
    let runs = task_dir.parent().expect("a task dir has a parent");
    for level in [runs, task_dir, dir.as_path()] {
        ensure_private_dir(level, mode, euid)?;
    }
    Ok(dir)
}

/// Make `path` a directory of ours (not a link) with exactly `mode`.
fn ensure_private_dir(path: &Path, mode: u32, euid: u32) -> Result<(), ExecError> {
    match DirBuilder::new().mode(mode).create(path) {
        Ok(()) => {}
        Err(source) if source.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(source) => return Err(io_error("create directory", path, source)),
    }
    let meta = std::fs::symlink_metadata(path).map_err(|source| io_error("stat", path, source))?;
    // The mode is set through a descriptor opened without following a link, checked again on
    // it: nothing swapped in after the stat is chmodded.
    let dir = crate::scratch::open_dir_nofollow(path).ok();
    let stat = dir.as_ref().and_then(|dir| crate::fsutil::fstat(dir).ok());
    let same = stat.is_some_and(|st| st.st_ino == meta.ino() && st.st_dev == meta.dev());
    if !meta.is_dir() || meta.uid() != euid || !same {
        let reason = format!(
            "expected a directory owned by uid {euid}, found a {} owned by uid {}",
            kind_of(&meta),
            meta.uid()
        );
        let source = std::io::Error::new(std::io::ErrorKind::PermissionDenied, reason);
        return Err(io_error("use", path, source));
    }
    if let Some(dir) = dir.filter(|_| meta.mode() & 0o7777 != mode) {
        crate::scratch::fchmod(&dir, mode).map_err(|source| io_error("chmod", path, source))?;
    }
    Ok(())
}

fn kind_of(meta: &std::fs::Metadata) -> &'static str {
    if meta.is_dir() {
        "directory"
    } else if meta.file_type().is_symlink() {
        "symbolic link"
    } else {
        "file"
    }
}

/// The task id and attempt a run dir belongs to, read from its last two
/// path components; `None` if it does not look like a run dir.
pub fn parse_run_dir(run_dir: &Path) -> Option<(String, u32)> {
    let attempt: u32 = run_dir.file_name()?.to_str()?.parse().ok()?;
    let task_id = run_dir.parent()?.file_name()?.to_str()?;
    if attempt == 0 || validate_task_id(task_id).is_err() {
        return None;
    }
    Some((task_id.to_string(), attempt))
}

#[cfg(test)]
mod tests {
    //! Goal: ids that could escape `HOME/runs` are rejected and run dir paths
    //! round-trip through `parse_run_dir`.
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn task_ids_are_validated() {
        for good in ["01jd3k5m7n4x8z2q", "a", "0"] {
            assert!(validate_task_id(good).is_ok(), "{good}");
        }
        let too_long = "a".repeat(TASK_ID_LEN_MAX + 1);
        for bad in ["", "..", "a/b", "ABC", "a b", "01JD", too_long.as_str()] {
            assert!(validate_task_id(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn run_dir_round_trips() {
        let dir = run_dir(Path::new("/var/lib/carma"), "01jd3k5m7n4x8z2q", 3).expect("valid");
        assert_eq!(dir, Path::new("/var/lib/carma/runs/01jd3k5m7n4x8z2q/3"));
        assert_eq!(parse_run_dir(&dir), Some(("01jd3k5m7n4x8z2q".to_string(), 3)));
        assert!(run_dir(Path::new("/h"), "abc", 0).is_err());
        assert_eq!(parse_run_dir(Path::new("/h/runs/abc/0")), None);
        assert_eq!(parse_run_dir(Path::new("/h/runs/ABC/1")), None);
    }

    /// Goal: the owner table says of every entry that a user writes that it is theirs only
    /// while the attempt runs: nothing of a user's stays writable after it ended.
    #[test]
    fn nothing_of_a_users_stays_theirs_after_the_attempt() {
        for entry in RUN_FOLDER {
            assert_ne!(entry.after, Owner::Submitter, "{entry:?}");
            assert_ne!(entry.after, Owner::RootHoldingSubmitters, "{entry:?}");
            let users = matches!(entry.while_running, Owner::Submitter | Owner::RootHoldingSubmitters);
            assert_eq!(users, entry.counted, "a user's bytes are counted, only theirs: {entry:?}");
            assert_eq!(users, entry.at_end != AtEnd::Kept, "the end acts on each of theirs: {entry:?}");
        }
        let mut names: Vec<&str> = RUN_FOLDER.iter().map(|e| e.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), RUN_FOLDER.len(), "one entry per name");
    }

    #[test]
    fn run_dirs_are_private_and_old_modes_are_tightened() {
        let home = tempfile::tempdir().expect("tempdir");
        // carma 0.1 made runs/ 0755.
        std::fs::create_dir(home.path().join("runs")).expect("runs");
        std::fs::set_permissions(home.path().join("runs"), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        let dir = create_run_dir(home.path(), "abc", 1).expect("create");
        let expected = if crate::access::uid::effective() == 0 { 0o711 } else { 0o700 };
        for path in [home.path().join("runs"), home.path().join("runs/abc"), dir.clone()] {
            let mode = std::fs::metadata(&path).expect("meta").mode() & 0o7777;
            assert_eq!(mode, expected, "{}", path.display());
        }
        assert_eq!(create_run_dir(home.path(), "abc", 1).expect("again"), dir, "idempotent");
        // A link where a run dir should be is refused, not followed.
        std::os::unix::fs::symlink(home.path(), home.path().join("runs/abc/2")).expect("symlink");
        let err = create_run_dir(home.path(), "abc", 2).expect_err("link");
        assert!(err.to_string().contains("symbolic link"), "{err}");
    }
}
