//! The node agent (edge): the bodies of `carma slurm prolog` and `epilog`; the Epilog's
//! detached follower is [`super::follow`].
//!
//! Who does what, and why:
//! - **Prolog** (root, before the job): journals the start, and starts the job's watcher. slurmd gives it the job id, the
//!   GPUs (`CUDA_VISIBLE_DEVICES`), the restart count and the comment, but not the shard
//!   count, which it reads from `scontrol show job -d`. The TaskProlog runs as the job's
//!   user, and the node's journal is written only by root under `carma.lock`; a user-run hook
//!   that could append to it could also forge any record. So the root Prolog journals, and
//!   the TaskProlog only prints the job's MPS exports ([`super::records::task_exports`]).
//!   slurmd skips the Prolog when it restarts a job it ran within the credential lifetime;
//!   the follower journals those starts.
//! - **Epilog** (root, after the job): scans the run's own output (from where the run
//!   started, [`super::output`]) for a GPU out-of-memory line (`exec::scan_oom_open_file_from`,
//!   the supervisor's detector; the file must be a regular file owned by the job's user,
//!   opened without following a symlink), decides with carma's looser recovery, requeues the
//!   job (`scontrol requeue`) and journals the out-of-memory end. Every other end is left to
//!   the follower, because the Epilog sees the job as COMPLETING and cannot tell a cancel,
//!   a time limit or a requeue from an exit.
//!
//! Every hook is bounded in time (the lock wait, [`HOOK_COMMAND_TIMEOUT`] per Slurm command)
//! and the CLI turns every failure into a logged line and exit 0: a Prolog or Epilog that
//! exits non-zero drains the node, and carma must never take a node down.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::clock::{Clock, SystemClock};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::exec::{BootIdSource, scan_oom_open_file_from, supervisor::OOM_SCAN_TAIL_BYTES};
use crate::gpu::{self, GpuSample, SinceMarks};
use crate::home::Home;
use crate::id::TaskId;
use crate::journal::memory_at_end::{AtEnd, memory_at_end};
use crate::journal::readings::gpu_records;
use crate::session;

use super::command::{self, spawn_detached};
use super::comment::CarmaComment;
use super::output;
use super::records::{self, AfterOom, EndDecision, JobEnd, JobStart};
use super::scontrol::{self, JobView};
use super::shards::ShardRule;
use super::watch;

/// Longest wait for one Slurm command inside a hook.
pub const HOOK_COMMAND_TIMEOUT: Duration = Duration::from_secs(10);
/// The hook log is rotated to `.old` beyond this size.
pub const HOOK_LOG_BYTES_MAX: u64 = 1 << 20;
/// The hook log, in the state directory.
pub const HOOK_LOG: &str = "slurm-hooks.log";

/// The facts slurmd puts in a Prolog's or Epilog's environment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HookEnv {
    /// `SLURM_CLUSTER_NAME`; empty when unset.
    pub cluster: String,
    /// `SLURM_JOB_ID` (required).
    pub job_id: u32,
    /// `SLURMD_NODENAME` (required).
    pub node: String,
    /// `SLURM_JOB_UID`: the job's submitter; `u32::MAX` when unset.
    pub uid: u32,
    /// `SLURM_JOB_RESTART_COUNT`: 0 for the first start.
    pub restart_count: u32,
    /// `SLURM_JOB_COMMENT`, raw; `None` when unset or empty.
    pub comment: Option<String>,
    /// `SLURM_JOB_WORK_DIR`; `/` when unset.
    pub workdir: String,
    /// `CUDA_VISIBLE_DEVICES`: GPU indices on the node; `None` for a job without GPUs.
    pub visible_devices: Option<String>,
    /// `SLURM_JOB_EXIT_CODE2` (`EXIT:SIGNAL`), in the Epilog.
    pub exit_pair: Option<(i32, i32)>,
}

impl HookEnv {
    /// Reads the environment through `get`; the job id and node name are required.
    pub fn read(get: &dyn Fn(&str) -> Option<String>) -> Result<HookEnv> {
        let need = |key: &str| {
            get(key).filter(|v| !v.is_empty()).ok_or_else(|| {
                Error::BadInput(format!(
                    "{key} is not set; run this as a Slurm Prolog/Epilog (see `carma slurm hooks`)"
                ))
            })
        };
        let job_id = need("SLURM_JOB_ID")?
            .parse()
            .map_err(|_| Error::BadInput("SLURM_JOB_ID is not a job number".into()))?;
        let number = |key: &str| get(key).and_then(|v| v.trim().parse().ok());
        Ok(HookEnv {
            cluster: get("SLURM_CLUSTER_NAME").unwrap_or_default(),
            job_id,
            node: need("SLURMD_NODENAME")?,
            uid: number("SLURM_JOB_UID").unwrap_or(u32::MAX),
            restart_count: number("SLURM_JOB_RESTART_COUNT").unwrap_or(0),
            comment: get("SLURM_JOB_COMMENT").filter(|c| !c.is_empty()),
            workdir: get("SLURM_JOB_WORK_DIR").unwrap_or_else(|| "/".into()),
            visible_devices: get("CUDA_VISIBLE_DEVICES").filter(|v| !v.trim().is_empty()),
            exit_pair: get("SLURM_JOB_EXIT_CODE2").and_then(|v| scontrol::parse_exit_pair(&v)),
        })
    }

    /// The job's `carma:` comment; a malformed one counts as none (job_submit.lua refuses
    /// those at submission where it is installed).
    fn carma_comment(&self) -> Option<CarmaComment> {
        self.comment.as_deref().and_then(|c| CarmaComment::parse(c).ok().flatten())
    }
}

/// Settings every hook shares.
#[derive(Clone, Debug)]
pub struct HookOptions {
    /// The node's shard rule (shard size and margin), as `carma slurm hooks` wrote it.
    pub rule: ShardRule,
    /// Longest wait for the journal's write lock.
    pub lock_wait: Duration,
    /// The carma binary `requeue-finish` runs.
    pub exe: PathBuf,
}

/// What a hook did, for its log line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HookOutcome {
    /// Nothing to do (a job without GPUs).
    Skipped(String),
    /// Journaled under this task.
    Journaled {
        /// The task the records went to; `None` when the start was not journaled (a late
        /// restart of a job whose task already ended).
        task: Option<TaskId>,
        /// What was done, for the log line.
        note: String,
    },
}

/// The Prolog: journal that job `env.job_id` starts here.
pub fn prolog(home: &Home, options: &HookOptions, env: &HookEnv) -> Result<HookOutcome> {
    let Some(visible) = env.visible_devices.clone() else { return Ok(no_gpu(env)) };
    let view = show_job(env.job_id)?;
    let config = Config::load(home)?;
    let samples = sample_gpus(&config);
    let now = SystemClock.now_ms();
    let start = job_start(env, &view, &visible, &samples, options.rule, now);
    let task = session::write(home, options.lock_wait, |journal, state| {
        let (mut records, _) = gpu_records(state, &samples, now);
        let (task, started) = records::start_records(state, &start);
        records.extend(started);
        journal.append(&records, state)?;
        Ok(task)
    })?;
    let share = start.shards.map_or("whole GPU(s)".into(), |s| format!("shard:{s}"));
    let watched = start_watch(home, &options.exe, &config, &start);
    Ok(HookOutcome::Journaled { task, note: format!("start on GPU {visible} with {share}; {watched}") })
}

/// Starts the job's watcher ([`super::watch`]); its words for the log line.
pub(super) fn start_watch(home: &Home, exe: &Path, config: &Config, start: &JobStart) -> String {
    let job = watch::WatchJob {
        job_id: start.job_id,
        restart_count: start.restart_count,
        uid: start.uid,
        gpus: start.gpus.clone(),
    };
    match watch::start(home, exe, config, &job, &hook_log(home)) {
        Ok(Some(pid)) => format!("its GPU memory watched (pid {pid})"),
        Ok(None) => "no GPU memory readings on this node".into(),
        Err(e) => format!("its GPU memory not watched: {e}"),
    }
}

/// A job slurmd gave no GPU. A carma job (its comment asks for GPU memory) should not be one:
/// Slurm 22.05 starts jobs without their shards when, after a slurmctld restart, the node's
/// re-registration has reset its free shard count and a start would overcommit the GPU
/// (slurmctld logs "gres/shard: job N node X overallocated resources"); the job then runs
/// with no GRES at all, outside carma's accounting. Say so, rather than a bare skip.
fn no_gpu(env: &HookEnv) -> HookOutcome {
    let job = env.job_id;
    if env.carma_comment().is_none() {
        return HookOutcome::Skipped(format!("job {job} has no GPU"));
    }
    HookOutcome::Skipped(format!(
        "job {job} asked for GPU memory (carma comment) but Slurm gave it no GPU (no \
         CUDA_VISIBLE_DEVICES): Slurm dropped its shards, as it does for jobs it starts soon \
         after a slurmctld restart (\"overallocated resources\" in slurmctld's log); not \
         journaled; see \"slurmctld restarts\" in src/slurm/README.md"
    ))
}

/// The Epilog: detect an out-of-memory end in the run's own output, requeue with more
/// shards, and leave every other end to the follower, which journals it as Slurm records it
/// once the job has completed (see [`super::follow`]).
// Long because its three phases read in order: decide under the journal's lock, act on Slurm
// without it, then journal the end under it again; apart, which holds the lock would not show.
pub fn epilog(home: &Home, options: &HookOptions, env: &HookEnv) -> Result<HookOutcome> {
    let Some(visible) = env.visible_devices.clone() else { return Ok(no_gpu(env)) };
    let view = show_job(env.job_id)?;
    let config = Config::load(home)?;
    let samples = sample_gpus(&config);
    // Slurm's ExitCode says 0:15 for a cancelled or timed-out job, where the Epilog's
    // SLURM_JOB_EXIT_CODE2 says 0:0.
    let (exit_code, signal) = view.exit_code.or(env.exit_pair).unwrap_or((1, 0));
    let outputs = open_outputs(&view, env.uid);
    let marks = output::read_marks(home, env.job_id);
    let starts: Vec<u64> =
        outputs.iter().map(|(path, file)| output::start_of_run(&marks, path, file)).collect();
    let oom = if (exit_code, signal) == (0, 0) {
        None
    } else {
        outputs.iter().zip(&starts).find_map(|((_, file), &from)| {
            scan_oom_open_file_from(file, from, OOM_SCAN_TAIL_BYTES).ok().flatten()
        })
    };
    let new_marks: Vec<output::Mark> =
        outputs.iter().filter_map(|(path, file)| output::mark_of(path, file)).collect();
    let _ = output::write_marks(home, env.job_id, &new_marks);
    let watched = watch::collect(home, env.job_id, env.restart_count);
    let readings_now = memory_now(&samples);
    let mut end = JobEnd {
        exit_code,
        signal,
        oom,
        requeueable: view.requeue.unwrap_or(true),
        at_end: Default::default(),
    };
    let per_gpu = per_gpu_shards(&samples, &options.rule);
    let now = SystemClock.now_ms();
    // Phase 1, under the lock: the start (when the Prolog could not journal it) and the decision.
    let (task, attempt, decision) = session::write(home, options.lock_wait, |journal, state| {
        let found = match attempt_of(state, env) {
            Some(found) => found,
            None => {
                let started_ms = view.start_s.map_or(now, |s| s * 1000);
                let start = job_start(env, &view, &visible, &samples, options.rule, started_ms);
                let (_, records) = records::start_records(state, &start);
                journal.append(&records, state)?;
                attempt_of(state, env).ok_or_else(|| {
                    Error::BadInput(format!(
                        "job {}: no unfinished attempt to end in the journal",
                        env.job_id
                    ))
                })?
            }
        };
        let (task_id, number) = found;
        let task = &state.tasks[&task_id];
        let attempt = task.attempts.iter().find(|a| a.number == number).expect("attempt_of found it");
        let seen = AtEnd {
            ended_ms: now,
            peak_mib: attempt.peak_observed_mib,
            readings_now: &readings_now,
            sampler: watched.as_ref(),
            now_ms: now,
        };
        end.at_end = memory_at_end(state, attempt, &seen, &config.sched.recovery);
        let decision =
            records::decide_end(task, attempt, &end, &options.rule, &config.sched.recovery, per_gpu);
        Ok((task_id, number, decision))
    })?;
    // Phase 2, without the lock: act on Slurm.
    let mut requeue_error = None;
    let mut follower = None;
    match &decision {
        EndDecision::OutOfMemory { then: AfterOom::Requeue { shards, .. }, .. } => {
            for ((_, file), &from) in outputs.iter().zip(&starts).take(1) {
                let _ = output::keep_run(home, env.job_id, attempt, file, from, env.uid);
            }
            match requeue(home, options, env, &task, *shards) {
                Ok(()) => {}
                Err(e) => requeue_error = Some(e.to_string()),
            }
        }
        EndDecision::OutOfMemory { .. } => {}
        // An out-of-memory line carma's readings do not support: an ordinary failure, in the
        // judgement's words (the readings), journaled here rather than as Slurm's FAILED.
        EndDecision::Failed { .. } if end.oom.is_some() => {}
        _ => follower = Some(spawn_follower(home, options, env, Some((attempt, now)), None)),
    }
    // Phase 3: journal the end, unless the follower will, or someone else already did.
    let followed = matches!(follower, Some(Ok(_)));
    session::write(home, options.lock_wait, |journal, state| {
        let (mut records, _) = gpu_records(state, &samples, now);
        let still_active =
            state.tasks.get(&task).and_then(|t| t.active_attempt()).is_some_and(|a| a.number == attempt);
        if still_active && !followed {
            records.extend(records::end_records(&task, attempt, &decision, requeue_error.as_deref(), now));
        }
        journal.append(&records, state)
    })?;
    let note = epilog_note(&decision, requeue_error.as_deref(), &follower, (exit_code, signal));
    Ok(HookOutcome::Journaled { task: Some(task), note })
}

/// The Epilog's one line for slurmd's log: what it decided and did.
fn epilog_note(
    decision: &EndDecision,
    requeue_error: Option<&str>,
    follower: &Option<Result<u32>>,
    (exit_code, signal): (i32, i32),
) -> String {
    match (decision, requeue_error) {
        (EndDecision::OutOfMemory { then: AfterOom::Requeue { shards, .. }, .. }, None) => {
            format!("out of memory; requeued with shard:{shards}")
        }
        (_, Some(error)) => format!("out of memory; requeue failed: {error}"),
        (EndDecision::OutOfMemory { then: AfterOom::GiveUp { reason }, .. }, _) => {
            format!("out of memory; not requeued: {reason}")
        }
        (_, None) => match follower {
            Some(Ok(_)) => {
                format!("ended (exit {exit_code}:{signal}); the follower journals Slurm's final state")
            }
            Some(Err(e)) => format!(
                "ended (exit {exit_code}:{signal}); follower not started ({e}), journaled from the exit code"
            ),
            None => "ended".into(),
        },
    }
}

/// This reading of every GPU and MIG instance, by UUID: (used MiB, total MiB), used as the tick
/// counts it (total − free).
fn memory_now(
    samples: &std::result::Result<Vec<GpuSample>, String>,
) -> std::collections::BTreeMap<String, (u64, u64)> {
    let known = samples.as_deref().unwrap_or_default();
    gpu::memory_of(known).into_iter().map(|gpu| (gpu.uuid, (gpu.used_mib, gpu.total_mib))).collect()
}

/// The task and unfinished attempt the journal holds for this job, if any.
fn attempt_of(state: &crate::journal::State, env: &HookEnv) -> Option<(TaskId, u32)> {
    let task = state.slurm_task(&env.cluster, env.job_id)?;
    let attempt = task.active_attempt()?;
    Some((task.id.clone(), attempt.number))
}

/// `scontrol requeue`, then the detached follower that sets the shards, the comment (with
/// the first submit time, so every node keeps the same task id) and the start time.
fn requeue(home: &Home, options: &HookOptions, env: &HookEnv, task: &TaskId, shards: u32) -> Result<()> {
    command::run(&argv(&["scontrol", "requeue", &env.job_id.to_string()]), None, HOOK_COMMAND_TIMEOUT)?;
    let mut comment = env.carma_comment().unwrap_or_default();
    comment.submit_ms = Some(task.unix_ms());
    spawn_follower(home, options, env, None, Some((shards, comment.render())))?;
    Ok(())
}

/// Starts `carma slurm follow` for this job, detached from the Epilog.
fn spawn_follower(
    home: &Home,
    options: &HookOptions,
    env: &HookEnv,
    ended: Option<(u32, u64)>,
    requeue: Option<(u32, String)>,
) -> Result<u32> {
    let mut args = vec![
        "--home".to_string(),
        home.root().display().to_string(),
        "--lock-timeout".into(),
        format!("{}ms", options.lock_wait.as_millis()),
        "slurm".into(),
        "follow".into(),
        "--job".into(),
        env.job_id.to_string(),
        "--cluster".into(),
        env.cluster.clone(),
        "--node".into(),
        env.node.clone(),
        "--shard-mib".into(),
        options.rule.shard_mib.to_string(),
        "--margin-mib".into(),
        options.rule.margin_mib.to_string(),
    ];
    if let Some((attempt, ended_ms)) = ended {
        args.extend(["--attempt".into(), attempt.to_string(), "--ended-ms".into(), ended_ms.to_string()]);
    }
    if let Some((shards, comment)) = requeue {
        args.extend(["--shards".into(), shards.to_string(), "--comment".into(), comment]);
    }
    spawn_detached(&options.exe, &args, &hook_log(home))
}

fn job_start(
    env: &HookEnv,
    view: &JobView,
    visible: &str,
    samples: &std::result::Result<Vec<GpuSample>, String>,
    rule: ShardRule,
    started_ms: u64,
) -> JobStart {
    let indices = scontrol::parse_gpu_indices(visible);
    let known = samples.as_deref().unwrap_or_default();
    let gpus = indices
        .iter()
        .map(|&i| known.iter().find(|s| s.index == i).map_or(format!("gpu{i}"), |s| s.uuid.clone()))
        .collect();
    let shards = view.job_gres.as_deref().and_then(|g| scontrol::parse_gres(g).shards);
    JobStart {
        cluster: env.cluster.clone(),
        job_id: env.job_id,
        node: env.node.clone(),
        restart_count: env.restart_count,
        uid: env.uid,
        name: view.name.clone().unwrap_or_default(),
        workdir: env.workdir.clone(),
        comment: env.carma_comment(),
        submit_ms: view.submit_s.map_or(started_ms, |s| s * 1000),
        started_ms,
        gpus,
        shards,
        rule,
        boot_id: BootIdSource::from_env().current().unwrap_or_default(),
        array: view.array.clone(),
    }
}

pub(super) fn show_job(job_id: u32) -> Result<JobView> {
    let text = command::run(
        &argv(&["scontrol", "show", "job", "-d", &job_id.to_string()]),
        None,
        HOOK_COMMAND_TIMEOUT,
    )?;
    Ok(scontrol::parse_job(scontrol::record_of(&text, job_id)))
}

/// One reading of the node's GPUs through its configuration (for the follower).
pub(super) fn sample_gpus_of(home: &Home) -> std::result::Result<Vec<GpuSample>, String> {
    let config = Config::load(home).map_err(|e| e.to_string())?;
    sample_gpus(&config)
}

/// One reading of the node's GPUs through the configured probe, for the journal (energy
/// counters, memory) and the index → UUID map.
fn sample_gpus(config: &Config) -> std::result::Result<Vec<GpuSample>, String> {
    let mut probe = gpu::probe_from_spec(&config.tick.gpus).map_err(|e| e.to_string())?;
    probe.sample(&SinceMarks::new()).map_err(|e| e.to_string())
}

fn per_gpu_shards(samples: &std::result::Result<Vec<GpuSample>, String>, rule: &ShardRule) -> Option<u32> {
    let smallest = samples.as_ref().ok()?.iter().map(|s| s.memory_total_mib).min()?;
    Some(rule.per_gpu(smallest))
}

/// The job's stdout and stderr files (one when they are the same). Only regular files owned
/// by the job's user are opened, and nothing on the path is opened for real before that is
/// known (`fsutil::open_user_file`: no user's link followed, no FIFO or device opened), so a
/// job cannot make this root hook read someone else's file or open a device.
fn open_outputs(view: &JobView, uid: u32) -> Vec<(String, File)> {
    let mut paths: Vec<&String> = [&view.std_err, &view.std_out].into_iter().flatten().collect();
    paths.dedup();
    paths.into_iter().filter_map(|path| Some((path.clone(), open_owned(Path::new(path), uid)?))).collect()
}

fn open_owned(path: &Path, uid: u32) -> Option<File> {
    crate::fsutil::open_user_file(path, Some(uid)).ok()
}

/// The hook log (`HOME/slurm-hooks.log`), rotated once it passes [`HOOK_LOG_BYTES_MAX`].
pub fn hook_log(home: &Home) -> PathBuf {
    let path = home.root().join(HOOK_LOG);
    if std::fs::metadata(&path).is_ok_and(|m| m.len() > HOOK_LOG_BYTES_MAX) {
        let _ = std::fs::rename(&path, path.with_extension("log.old"));
    }
    path
}

pub(super) fn argv(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| w.to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal (issue 32, item 0): the Epilog never opens what sits on a job's `--output` path
    /// before it knows it is the user's regular file. A FIFO there, or behind a link in the
    /// middle of the path, is refused without being opened (inotify's IN_OPEN: an earlier
    /// Epilog opened it O_NONBLOCK and only then checked it).
    #[test]
    fn the_epilog_refuses_a_fifo_on_the_output_path_without_opening_it() {
        let dir = tempfile::tempdir().unwrap();
        let me = crate::access::uid::effective();
        let fifo = dir.path().join("out.fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        let (file, opened) = crate::fsutil::opened_during(&fifo, || open_owned(&fifo, me));
        assert!(file.is_none(), "a FIFO is no output file");
        assert!(!opened, "the FIFO was never opened");
        let link = dir.path().join("via");
        std::os::unix::fs::symlink(&fifo, &link).unwrap();
        let (file, opened) = crate::fsutil::opened_during(&fifo, || open_owned(&link.join("slurm.out"), me));
        assert!(file.is_none() && !opened, "a FIFO in the middle of the path is never opened");
        let out = dir.path().join("slurm.out");
        std::fs::write(&out, b"done").unwrap();
        assert!(open_owned(&out, me).is_some(), "the user's own output is read");
        assert!(open_owned(&out, me + 1).is_none(), "another user's is not");
    }
}
