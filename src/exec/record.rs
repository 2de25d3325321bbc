//! The records the supervisor leaves in the run dir, and their readers.
//! All are JSON with a `format_version` field (currently 1); fields marked
//! "since 1" exist since format_version 1. The journal never stores these
//! types directly: the tick converts them into its own events.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::ExecError;
use super::atomic::read_json;
use super::hostlimit::HostMemoryEnd;
use super::liveness::ProcessIdentity;
use super::oom::OomEvidence;
use super::readings::GpuReadings;
use super::rundir::{CLAIM_FILE, EXIT_FILE, JOB_FILE};

/// `claim.json`: which supervisor owns the attempt. Created exclusively, so
/// at most one supervisor ever runs an attempt.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ClaimRecord {
    /// The supervisor process (since 1).
    pub supervisor: ProcessIdentity,
    /// The supervisor's session id; equal to its pid when it leads its own
    /// session, as the launcher starts it, and then every process in that
    /// session is the attempt's (since 1; absent in files of carma 0.1).
    #[serde(default)]
    pub session: Option<i32>,
}

/// `job.json`: the job process the supervisor spawned, written right after
/// the spawn, for cancel and Lost clean-up ([`crate::exec::kill_attempt`]).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct JobRecord {
    /// The job's leader process (since 1).
    pub job: ProcessIdentity,
    /// The job's process group id, equal to its pid (since 1).
    pub pgid: i32,
    /// The job's uid: processes carrying the attempt's tag count only when
    /// this user owns them (since 1; absent in files of carma 0.1).
    #[serde(default)]
    pub uid: Option<u32>,
    /// The attempt's own cgroup, when the supervisor made one (since 1;
    /// absent in files of carma 0.1).
    #[serde(default)]
    pub cgroup: Option<std::path::PathBuf>,
}

/// How an attempt ended.
///
/// JSON: `{"kind": "exited", "code": 0}`, `{"kind": "signaled", "signal": 9}`,
/// `{"kind": "time_limit"}`, `{"kind": "spawn_failed", "reason": "…"}`,
/// `{"kind": "cancelled"}`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ExitOutcome {
    /// The job exited by itself with this status code.
    Exited {
        /// The exit status (0 is success).
        code: i32,
    },
    /// The job was killed by a signal carma did not send.
    Signaled {
        /// The signal number.
        signal: i32,
    },
    /// carma stopped the job at its `time_limit_ms`.
    TimeLimit,
    /// The job could not be started; nothing ran.
    SpawnFailed {
        /// What failed, with the program name and the OS error.
        reason: String,
    },
    /// The supervisor was asked to stop (SIGTERM/SIGINT) and stopped the job.
    Cancelled,
}

/// `exit.json`: the end of an attempt, written once, atomically.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ExitRecord {
    /// The task id (since 1).
    pub task_id: String,
    /// The attempt number (since 1).
    pub attempt: u32,
    /// Wall-clock ms since the Unix epoch when the job was spawned (or when
    /// spawning was attempted) (since 1).
    pub started_ms: u64,
    /// Wall-clock ms since the Unix epoch when the job ended (since 1).
    pub ended_ms: u64,
    /// How it ended (since 1).
    pub outcome: ExitOutcome,
    /// GPU OOM evidence from the logs' tails, if any (since 1). Meaningful
    /// only when the outcome is not `Exited { code: 0 }`.
    pub oom: Option<OomEvidence>,
    /// The job's pid; `None` when it never started (since 1).
    pub job_pid: Option<u32>,
    /// What the cap on the run-folder logs dropped, in words (`stdout.log
    /// truncated at 1 GiB (log-bytes-max), 123 bytes dropped`); absent when
    /// nothing was (since 1, optional).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_truncated: Option<String>,
    /// The job's host memory limit and the kernel's kills at it (`memory.events`
    /// `oom_kill`); absent when no limit was in force (since 1, optional).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_memory: Option<HostMemoryEnd>,
    /// What the supervisor itself read of the attempt's GPU memory, to its exit
    /// ([`crate::exec::gpu_watch`]); absent when its plan asked for no readings, and in records
    /// of carma before them (since 1, optional).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_readings: Option<GpuReadings>,
}

/// Read `run_dir/exit.json`: `Ok(None)` while the attempt has not ended, an
/// error naming the path when the file is corrupt.
pub fn read_exit_record(run_dir: &Path) -> Result<Option<ExitRecord>, ExecError> {
    read_json(&run_dir.join(EXIT_FILE))
}

/// Read `run_dir/claim.json`: `Ok(None)` if no supervisor claimed it yet.
pub fn read_claim(run_dir: &Path) -> Result<Option<ClaimRecord>, ExecError> {
    read_json(&run_dir.join(CLAIM_FILE))
}

/// Read `run_dir/job.json`: `Ok(None)` if the job was not spawned (yet).
pub fn read_job_record(run_dir: &Path) -> Result<Option<JobRecord>, ExecError> {
    read_json(&run_dir.join(JOB_FILE))
}

#[cfg(test)]
mod tests {
    //! Goal: pin the exit record's JSON shape (format drift must fail a
    //! test) and check a corrupt file is an error naming its path.
    use super::*;
    use crate::exec::atomic::write_json_atomic;

    #[test]
    fn exit_record_shape_is_pinned() {
        let dir = tempfile::tempdir().expect("tempdir");
        let record = ExitRecord {
            task_id: "01jd3k5m7n4x8z2q".into(),
            attempt: 2,
            started_ms: 1_700_000_000_000,
            ended_ms: 1_700_000_360_000,
            outcome: ExitOutcome::Exited { code: 1 },
            oom: Some(OomEvidence { signature: "CUDA out of memory".into(), line: "x".into() }),
            job_pid: Some(4242),
            output_truncated: None,
            host_memory: None,
            gpu_readings: None,
        };
        write_json_atomic(&dir.path().join(EXIT_FILE), &record, 0o600).expect("write");
        let text = std::fs::read_to_string(dir.path().join(EXIT_FILE)).expect("read");
        let value: serde_json::Value = serde_json::from_str(&text).expect("json");
        let expected = serde_json::json!({
            "format_version": 1, "task_id": "01jd3k5m7n4x8z2q", "attempt": 2,
            "started_ms": 1_700_000_000_000u64, "ended_ms": 1_700_000_360_000u64,
            "outcome": {"kind": "exited", "code": 1},
            "oom": {"signature": "CUDA out of memory", "line": "x"}, "job_pid": 4242
        });
        assert_eq!(value, expected);
        assert_eq!(read_exit_record(dir.path()).expect("read"), Some(record));
        let outcomes = [
            (ExitOutcome::TimeLimit, serde_json::json!({"kind": "time_limit"})),
            (ExitOutcome::Cancelled, serde_json::json!({"kind": "cancelled"})),
            (ExitOutcome::Signaled { signal: 9 }, serde_json::json!({"kind": "signaled", "signal": 9})),
            (
                ExitOutcome::SpawnFailed { reason: "r".into() },
                serde_json::json!({"kind": "spawn_failed", "reason": "r"}),
            ),
        ];
        for (outcome, json) in outcomes {
            assert_eq!(serde_json::to_value(&outcome).expect("to json"), json);
        }
    }

    /// Goal: the supervisor's readings have a pinned shape, and a record without them (carma
    /// before them, or no readings asked for) still reads, as `None`.
    #[test]
    fn the_supervisors_readings_have_a_pinned_shape_and_are_optional() {
        use crate::exec::readings::{GpuReading, Reading};
        let readings = GpuReadings {
            interval_ms: 500,
            count: 4,
            peak_mib: Some(7680),
            last: vec![Reading {
                time_ms: 1_700_000_001_500,
                gpus: vec![GpuReading {
                    uuid: "GPU-a".into(),
                    used_mib: 40000,
                    total_mib: 40960,
                    attempt_mib: 7680,
                }],
            }],
            error: None,
        };
        let json = serde_json::to_value(&readings).expect("to json");
        assert_eq!(
            json,
            serde_json::json!({"interval_ms": 500, "count": 4, "peak_mib": 7680, "last": [{"time_ms": 1_700_000_001_500u64,
                "gpus": [{"uuid": "GPU-a", "used_mib": 40000, "total_mib": 40960, "attempt_mib": 7680}]}]})
        );
        let old = serde_json::json!({
            "task_id": "01jd3k5m7n4x8z2q", "attempt": 1, "started_ms": 1, "ended_ms": 2,
            "outcome": {"kind": "exited", "code": 1}, "oom": null, "job_pid": 7
        });
        let record: ExitRecord = serde_json::from_value(old).expect("an old record reads");
        assert_eq!(record.gpu_readings, None);
    }

    #[test]
    fn corrupt_exit_record_names_the_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(read_exit_record(dir.path()).expect("missing is fine"), None);
        std::fs::write(dir.path().join(EXIT_FILE), b"{\"format_version\":1,\"task_").expect("write");
        let err = read_exit_record(dir.path()).expect_err("corrupt");
        assert!(matches!(err, ExecError::Corrupt { .. }), "{err}");
        assert!(err.to_string().contains("exit.json"), "{err}");
    }
}
