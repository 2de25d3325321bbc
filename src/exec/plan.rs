//! The attempt plan: everything the supervisor needs to start one attempt,
//! written by the tick into the run dir before launch. The supervisor never
//! opens the journal, so this file is its only input.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::ExecError;
use super::atomic::{read_json, write_json_atomic};
use super::hostlimit::HostLimits;
use super::readings::{INTERVAL_MS_MIN, WatchPlan};
use super::rundir::{PLAN_FILE, validate_task_id};

/// Most argv entries a plan may carry.
pub const ARGV_LEN_MAX: usize = 4096;
/// Most GPUs one attempt may be given.
pub const GPU_COUNT_MAX: usize = 64;

/// What to run for one attempt, and where and as whom.
///
/// On disk: `plan.json`, format_version 1, mode 0600 (the env may hold
/// secrets). All fields below exist since format_version 1.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct AttemptPlan {
    /// The task id, lowercase base32 (`01jd3k5m7n4x8z2q`).
    pub task_id: String,
    /// The attempt number, starting at 1.
    pub attempt: u32,
    /// The program and its arguments, executed without a shell; `argv[0]`
    /// without a `/` is looked up in the job's `PATH`.
    pub argv: Vec<String>,
    /// Extra environment for the job; carma's own variables win over it.
    pub env: BTreeMap<String, String>,
    /// Absolute working directory of the job.
    pub workdir: PathBuf,
    /// The submitter's uid; the job runs as this user.
    pub uid: u32,
    /// The job's primary gid; `None` means the user's primary group.
    pub gid: Option<u32>,
    /// GPU UUIDs (`GPU-…` or `MIG-…`) exported as `CUDA_VISIBLE_DEVICES`.
    pub gpu_uuids: Vec<String>,
    /// Per-GPU MPS pinned device memory limit in MiB, if collocated via MPS.
    pub mps_mem_limit_mib: Option<u64>,
    /// Wall-clock limit for the job in ms; `None` means unlimited.
    pub time_limit_ms: Option<u64>,
    /// Absolute file for the job's stdout, already expanded from the spec's
    /// template ([`crate::exec::expand_output_template`]) and opened as the
    /// submitter; `None` is `stdout.log` in the run dir (since 1, optional).
    #[serde(default)]
    pub stdout_path: Option<PathBuf>,
    /// The same for stderr; it may equal `stdout_path` (since 1, optional).
    #[serde(default)]
    pub stderr_path: Option<PathBuf>,
    /// A job script copied at submit: the supervisor writes `text` to `script` in the run
    /// dir (owned by the submitter, mode 0500) and runs `interpreter` with that copy in
    /// front of `argv[1..]`; `argv[0]` then only names the original (since 1, optional).
    #[serde(default)]
    pub script: Option<PlanScript>,
    /// Cap of each run-folder log in bytes (`[limits] log-bytes-max`, see
    /// [`crate::exec::logcap`]); `None`, as in plans of carma before it, is
    /// uncapped. User-chosen output paths are never capped (since 1, optional).
    #[serde(default)]
    pub log_bytes_max: Option<u64>,
    /// The warning before the time limit, `[B:]SIG@SECONDS` as the spec keeps it
    /// ([`crate::spec::timing::WarnSignal`]); `None`: none (since 1, optional).
    #[serde(default)]
    pub signal: Option<String>,
    /// An interactive task's kind, `alloc` or `run` ([`crate::exec::interactive`]): the job
    /// runs on a pseudo-terminal the supervisor relays to `carma alloc`/`carma run`; `None`
    /// for a batch task (since 1, optional).
    #[serde(default)]
    pub interactive: Option<String>,
    /// Host memory and CPUs for the whole job, set on its cgroup
    /// ([`crate::exec::hostlimit`]); empty, as in plans of carma before it: none (since 1,
    /// optional).
    #[serde(default, skip_serializing_if = "HostLimits::is_empty")]
    pub host_limits: HostLimits,
    /// The supervisor's own readings of the attempt's GPU memory ([`crate::exec::gpu_watch`]):
    /// the GPU source and the cadence; `None`, as in plans of carma before it: none (since 1,
    /// optional).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_watch: Option<WatchPlan>,
}

/// The job script part of a plan.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct PlanScript {
    /// The `#!` line: an absolute interpreter and at most one argument.
    pub interpreter: Vec<String>,
    /// The script's text as copied at submit.
    pub text: String,
}

impl AttemptPlan {
    /// Check the plan is runnable; `Err` holds the reason.
    pub fn validate(&self) -> Result<(), String> {
        validate_task_id(&self.task_id).map_err(|err| err.to_string())?;
        if self.attempt == 0 {
            return Err("attempt is 0, attempts start at 1".into());
        }
        match self.argv.first() {
            None => return Err("argv is empty".into()),
            Some(program) if program.is_empty() => return Err("argv[0] is empty".into()),
            Some(_) => {}
        }
        if self.argv.len() > ARGV_LEN_MAX {
            return Err(format!("argv has {} entries, more than {ARGV_LEN_MAX}", self.argv.len()));
        }
        if self.argv.iter().chain(self.env.keys()).chain(self.env.values()).any(|s| s.contains('\0')) {
            return Err("argv or env contains a NUL byte".into());
        }
        if self.env.keys().any(|key| key.is_empty() || key.contains('=')) {
            return Err("an env name is empty or contains '='".into());
        }
        if !self.workdir.is_absolute() {
            return Err(format!("workdir {} is not absolute", self.workdir.display()));
        }
        if self.gpu_uuids.len() > GPU_COUNT_MAX
            || self.gpu_uuids.iter().any(|u| u.is_empty() || u.contains(','))
        {
            return Err("gpu_uuids has an empty or comma-holding entry, or too many".into());
        }
        if let Some(script) = &self.script {
            let sound = script.interpreter.first().is_some_and(|p| p.starts_with('/'))
                && script.interpreter.len() <= 2
                && !script.interpreter.iter().any(|a| a.contains('\0'))
                && !script.text.contains('\0');
            if !sound {
                return Err("script has no absolute interpreter, or a NUL byte".into());
            }
        }
        if let Some(watch) = &self.gpu_watch
            && (watch.interval_ms < INTERVAL_MS_MIN
                || !(watch.source == "nvml" || watch.source.starts_with("fake:/")))
        {
            return Err(format!(
                "gpu_watch must name nvml or fake:/ABSOLUTE/PATH and at least {INTERVAL_MS_MIN} ms, not {} every {} ms",
                watch.source, watch.interval_ms
            ));
        }
        if self.time_limit_ms == Some(0) {
            return Err("time_limit_ms is 0".into());
        }
        for (stream, path) in [("stdout_path", &self.stdout_path), ("stderr_path", &self.stderr_path)] {
            if let Some(path) = path {
                use std::os::unix::ffi::OsStrExt;
                if !path.is_absolute() || path.as_os_str().as_bytes().contains(&0) {
                    return Err(format!("{stream} {} is not an absolute path", path.display()));
                }
            }
        }
        Ok(())
    }

    /// Validate and write `run_dir/plan.json` atomically (mode 0600).
    pub fn write_atomic(&self, run_dir: &Path) -> Result<(), ExecError> {
        let path = run_dir.join(PLAN_FILE);
        self.validate().map_err(|reason| ExecError::InvalidPlan { path: path.clone(), reason })?;
        write_json_atomic(&path, self, 0o600)
    }

    /// Read and validate `run_dir/plan.json`. A missing file is an
    /// [`ExecError::Io`] error (the tick writes it before launching).
    pub fn read(run_dir: &Path) -> Result<AttemptPlan, ExecError> {
        let path = run_dir.join(PLAN_FILE);
        let Some(plan) = read_json::<AttemptPlan>(&path)? else {
            let source = std::io::Error::from(std::io::ErrorKind::NotFound);
            return Err(super::atomic::io_error("read", &path, source));
        };
        plan.validate().map_err(|reason| ExecError::InvalidPlan { path, reason })?;
        Ok(plan)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    //! Goal: a plan survives a write/read round trip, its on-disk shape is
    //! pinned, and unrunnable plans are refused before they reach disk.
    use super::*;

    pub(crate) fn sample_plan() -> AttemptPlan {
        AttemptPlan {
            task_id: "01jd3k5m7n4x8z2q".into(),
            attempt: 1,
            argv: vec!["python".into(), "train.py".into()],
            env: BTreeMap::from([("BATCH".into(), "64".into())]),
            workdir: PathBuf::from("/home/alice/exp"),
            uid: 1000,
            gid: None,
            gpu_uuids: vec!["GPU-8932f937-d72c-4106-c12f-20bd9faed9f6".into()],
            mps_mem_limit_mib: Some(12000),
            time_limit_ms: None,
            stdout_path: None,
            stderr_path: None,
            script: None,
            log_bytes_max: Some(1 << 30),
            signal: None,
            interactive: None,
            host_limits: Default::default(),
            gpu_watch: None,
        }
    }

    #[test]
    fn round_trip_and_shape() {
        let dir = tempfile::tempdir().expect("tempdir");
        let plan = sample_plan();
        plan.write_atomic(dir.path()).expect("write");
        assert_eq!(AttemptPlan::read(dir.path()).expect("read"), plan);
        let text = std::fs::read_to_string(dir.path().join(PLAN_FILE)).expect("read text");
        let value: serde_json::Value = serde_json::from_str(&text).expect("json");
        let expected = serde_json::json!({
            "format_version": 1, "task_id": "01jd3k5m7n4x8z2q", "attempt": 1,
            "argv": ["python", "train.py"], "env": {"BATCH": "64"},
            "workdir": "/home/alice/exp", "uid": 1000, "gid": null,
            "gpu_uuids": ["GPU-8932f937-d72c-4106-c12f-20bd9faed9f6"],
            "mps_mem_limit_mib": 12000, "time_limit_ms": null,
            "stdout_path": null, "stderr_path": null, "script": null,
            "log_bytes_max": 1_073_741_824u64, "signal": null, "interactive": null
        });
        assert_eq!(value, expected);
        // Plans written before the output paths existed still read.
        let mut old = value.clone();
        let fields = old.as_object_mut().expect("object");
        fields.remove("stdout_path");
        fields.remove("stderr_path");
        fields.remove("log_bytes_max");
        fields.remove("signal");
        fields.remove("interactive");
        std::fs::write(dir.path().join(PLAN_FILE), old.to_string()).expect("write old plan");
        let uncapped = AttemptPlan { log_bytes_max: None, ..plan };
        assert_eq!(AttemptPlan::read(dir.path()).expect("read old"), uncapped, "an old plan is uncapped");
    }

    #[test]
    fn unrunnable_plans_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cases: Vec<fn(&mut AttemptPlan)> = vec![
            |p| p.argv.clear(),
            |p| p.argv[0].clear(),
            |p| p.workdir = PathBuf::from("relative"),
            |p| p.task_id = "../x".into(),
            |p| p.attempt = 0,
            |p| p.time_limit_ms = Some(0),
            |p| p.gpu_uuids.push("a,b".into()),
            |p| p.stdout_path = Some(PathBuf::from("relative.out")),
            |p| p.stderr_path = Some(PathBuf::from("/a\0b")),
            |p| p.gpu_watch = Some(WatchPlan { source: "fake:relative.json".into(), interval_ms: 500 }),
            |p| p.gpu_watch = Some(WatchPlan { source: "nvml".into(), interval_ms: 1 }),
            |p| {
                p.env.insert("A=B".into(), "x".into());
            },
        ];
        for (index, break_plan) in cases.into_iter().enumerate() {
            let mut plan = sample_plan();
            break_plan(&mut plan);
            let err = plan.write_atomic(dir.path()).expect_err("must refuse");
            assert!(matches!(err, ExecError::InvalidPlan { .. }), "case {index}: {err}");
        }
        assert!(!dir.path().join(PLAN_FILE).exists());
    }
}
