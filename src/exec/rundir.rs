//! Paths of an attempt's run dir, the only place the tick and the supervisor
//! exchange data:
//!
//! ```text
//! HOME/runs/<task_id>/<attempt>/plan.json       tick, before launch (atomic)
//!                               claim.json      supervisor, exclusive (link)
//!                               job.json        supervisor, after spawn (atomic)
//!                               stdout.log      the job
//!                               stderr.log      the job
//!                               exit.json       supervisor, at the end (atomic)
//!                               supervisor.log  the supervisor's own output
//! ```
//!
//! The task id becomes a path component, so it is validated here: nothing
//! outside `HOME/runs` can be named through it.

use std::fs::DirBuilder;
use std::os::unix::fs::DirBuilderExt;
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

/// Create the run dir (and parents) with mode 0755 and return it.
pub fn create_run_dir(home: &Path, task_id: &str, attempt: u32) -> Result<PathBuf, ExecError> {
    let dir = run_dir(home, task_id, attempt)?;
    DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(&dir)
        .map_err(|source| io_error("create directory", &dir, source))?;
    Ok(dir)
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
}
