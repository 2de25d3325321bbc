//! What a node's hooks journal, as pure functions of State and the facts the hooks gathered.
//!
//! A Slurm job becomes a carma task the first time a node's Prolog sees it: Submitted (its
//! `TaskSpec` built from the job's `carma:` comment through `SpecFile::validate`, the one path
//! every spec takes), then for every start SlurmPlaced, Placed and Launched, and at the end
//! Finished, Failed, or OomDetected followed by Requeued or Failed. `carma report`, `show`
//! and `events` read them like any other task's; SlurmPlaced keeps the tick away from it.
//!
//! Identity: the task id is `TaskId::from_parts(first submit ms, job id)`. Slurm resets a
//! job's SubmitTime when it is requeued, so when carma requeues a job it writes the first
//! submit time into the comment (`submit=`), and every node derives the same id for every
//! attempt; a job requeued by someone else is found again by its job id among this node's
//! unfinished tasks ([`State::slurm_task`]).
//!
//! Evidence: a job's out-of-memory line earns a requeue only when carma's own readings of its
//! memory near the end support it (the node watcher's, `super::watch`, and the journal's,
//! weighed by `sched::judge_oom` as a local attempt's are); otherwise the end is an ordinary
//! failure ([`decide_end`]).

use std::path::Path;

use crate::config::MemorySource;
use crate::exec::OomEvidence;
use crate::id::TaskId;
use crate::journal::state::Attempt;
use crate::journal::{Event, ProcessRef, Record, RequeueMode, State, Task};
use crate::sched::{self, MemoryAtEnd, OomJudgement, RecoveryConfig, RecoveryDecision, RecoveryMode};
use crate::spec::{Limits, RETRIES_DEFAULT, SpecFile, TaskSpec};

use super::comment::CarmaComment;
use super::shards::ShardRule;

/// What the Prolog knows about a job that is starting on this node.
#[derive(Clone, Debug, PartialEq)]
pub struct JobStart {
    /// `SLURM_CLUSTER_NAME`: with the job id, what tells this job from another cluster's.
    pub cluster: String,
    /// `SLURM_JOB_ID`: Slurm's job number.
    pub job_id: u32,
    /// `SLURMD_NODENAME`: the node this start runs on.
    pub node: String,
    /// `SLURM_JOB_RESTART_COUNT`: 0 for the first start.
    pub restart_count: u32,
    /// `SLURM_JOB_UID`: the submitter, journaled as the task's submitter.
    pub uid: u32,
    /// The job's name from `scontrol show job`, made into the task's name.
    pub name: String,
    /// `SLURM_JOB_WORK_DIR`: the job's working directory, the spec's workdir.
    pub workdir: String,
    /// The job's `carma:` comment; `None` for a job that did not opt in.
    pub comment: Option<CarmaComment>,
    /// Slurm's SubmitTime for this start, Unix ms (reset by every requeue).
    pub submit_ms: u64,
    /// When this start began, Unix ms (the Prolog's clock, or Slurm's StartTime when the
    /// Epilog journals a start it missed): the time of the start's records.
    pub started_ms: u64,
    /// The GPUs as carma names them (UUIDs when the node's probe knows the index).
    pub gpus: Vec<String>,
    /// Shards granted; `None` for whole GPUs.
    pub shards: Option<u32>,
    /// The node's shard rule: how the shard count converts to MiB.
    pub rule: ShardRule,
    /// `/proc/sys/kernel/random/boot_id`, for the Launched record.
    pub boot_id: String,
    /// An array member's id in Slurm's notation (`13_0`), kept in the spec's command.
    pub array: Option<String>,
}

/// The task id a job's start is journaled under, or `None` when that id belongs to a task
/// that already ended (a job Slurm restarted after carma recorded its end, with a comment that
/// pins the old id): such a start is journaled under a fresh id from this start's submit time.
pub fn task_id_for(state: &State, start: &JobStart) -> Option<TaskId> {
    if let Some(task) = state.slurm_task(&start.cluster, start.job_id) {
        return Some(task.id.clone());
    }
    // A restart whose attempt an ended task of this job already holds: the follower and the
    // Epilog journaled that run (its end too) before this late start; a task under the
    // requeue's new submit time would be a second task for one job, running forever.
    let attempt = start.restart_count.saturating_add(1);
    if start.restart_count > 0
        && state.tasks.values().any(|t| {
            t.status().is_terminal()
                && t.slurm.as_ref().is_some_and(|s| s.job_id == start.job_id && s.cluster == start.cluster)
                && t.attempts.iter().any(|a| a.number >= attempt)
        })
    {
        return None;
    }
    let first_ms = start.comment.as_ref().and_then(|c| c.submit_ms).unwrap_or(start.submit_ms);
    [first_ms, start.submit_ms]
        .into_iter()
        .map(|ms| TaskId::from_parts(ms, start.job_id))
        .find(|id| state.tasks.get(id).is_none_or(|t| !t.status().is_terminal()))
}

/// The records for a job's start; empty when this start is already journaled (a Prolog run
/// twice). Closes an attempt that Slurm restarted without carma seeing its end (Lost + a
/// plain Requeued), so the new Placed is accepted.
pub fn start_records(state: &State, start: &JobStart) -> (Option<TaskId>, Vec<Record>) {
    let Some(id) = task_id_for(state, start) else { return (None, Vec::new()) };
    let mut events = Vec::new();
    let mut attempt = start.restart_count.saturating_add(1);
    match state.tasks.get(&id) {
        None => {
            events.push(Event::Submitted {
                task: id.clone(),
                submitter_uid: start.uid,
                spec: job_spec(start),
            });
            events.extend(submit_estimate(&id, start.comment.as_ref()));
        }
        Some(task) => {
            if let Some(active) = task.active_attempt() {
                if active.number == attempt {
                    return (Some(id), Vec::new());
                }
                let reason = format!(
                    "Slurm started job {} again (restart {}) before this node saw attempt {} end",
                    start.job_id, start.restart_count, active.number
                );
                events.push(Event::Lost { task: id.clone(), attempt: active.number, reason });
                events.push(Event::Requeued {
                    task: id.clone(),
                    recovery: false,
                    requirement_mib: None,
                    recovery_mode: RequeueMode::Main,
                    reason: format!("Slurm requeued job {}", start.job_id),
                });
            }
            if task.attempts.iter().any(|a| a.number >= attempt) {
                attempt = task.next_attempt_number().max(attempt);
            }
        }
    }
    events.extend(placement(&id, attempt, start));
    let records = events.into_iter().map(|event| Record { time_ms: start.started_ms, event }).collect();
    (Some(id), records)
}

fn placement(id: &TaskId, attempt: u32, start: &JobStart) -> Vec<Event> {
    let requirement_mib = start.shards.map(|s| start.rule.figure_covered_mib(s));
    let share = match start.shards {
        Some(shards) => format!("shard:{shards} ({} MiB)", start.rule.mib_of(shards)),
        None => "whole GPU(s)".to_string(),
    };
    vec![
        Event::SlurmPlaced {
            task: id.clone(),
            attempt,
            cluster: start.cluster.clone(),
            job_id: start.job_id,
            node: start.node.clone(),
            shards: start.shards,
            shard_mib: start.rule.shard_mib,
        },
        Event::Placed {
            task: id.clone(),
            attempt,
            gpus: start.gpus.clone(),
            exclusive: start.shards.is_none(),
            requirement_mib,
            reason: format!("Slurm job {} on node {}: {share}", start.job_id, start.node),
        },
        Event::Launched {
            task: id.clone(),
            attempt,
            // pid 0: a Slurm job; carma neither started nor supervises it.
            supervisor: ProcessRef { pid: 0, start_time_ticks: 0, boot_id: start.boot_id.clone() },
            adopted: false,
        },
    ]
}

/// The job as a task spec, through the same validation as every spec. The command is
/// `slurm:JOBID` (the job's script stays with Slurm); a job without a `carma:` comment gets
/// no out-of-memory requeues.
pub fn job_spec(start: &JobStart) -> TaskSpec {
    let comment = start.comment.clone().unwrap_or_default();
    let retries = match &start.comment {
        Some(c) => c.retries.unwrap_or(RETRIES_DEFAULT),
        None => 0,
    };
    let file = SpecFile {
        name: Some(task_name(&start.name, start.job_id)),
        // `slurm:14`, and `array:13_0` for an array member, so that a cluster view can show
        // Slurm's notation after the job has left squeue.
        command: Some(
            std::iter::once(format!("slurm:{}", start.job_id))
                .chain(start.array.iter().map(|a| format!("array:{a}")))
                .collect(),
        ),
        workdir: Some(start.workdir.clone()),
        gpus: Some(start.gpus.len().max(1) as i64),
        memory: comment.mem_mib.map(|mib| format!("{mib}MiB")),
        model_summary: comment.summary.clone(),
        batch_size: comment.batch_size.map(i64::from),
        max_retries: Some(i64::from(retries)),
        ..SpecFile::default()
    };
    let origin = format!("slurm job {}", start.job_id);
    file.validate(&origin, Path::new("/"), Limits::default()).unwrap_or_else(|_| {
        // Only a strange working directory can fail here; keep the job's memory facts.
        let fallback = SpecFile { workdir: Some("/".into()), ..file };
        fallback.validate(&origin, Path::new("/"), Limits::default()).unwrap_or_else(|e| {
            unreachable!("a spec of a sanitised name, one argument and a root workdir is valid: {e}")
        })
    })
}

/// The job name in the characters task names allow, or `slurm-JOBID`.
fn task_name(name: &str, job_id: u32) -> String {
    let cleaned: String = name
        .chars()
        .take(128)
        .map(|c| if c.is_ascii_alphanumeric() || "._-+@".contains(c) { c } else { '_' })
        .collect();
    if cleaned.is_empty() { format!("slurm-{job_id}") } else { cleaned }
}

/// A summary's figure computed at submission, journaled as the task's estimate.
fn submit_estimate(id: &TaskId, comment: Option<&CarmaComment>) -> Option<Event> {
    let comment = comment?;
    comment.summary.as_ref()?;
    let need = comment.need_mib?;
    Some(Event::Estimated {
        task: id.clone(),
        method: "carma".into(),
        mib: need,
        upper_mib: need,
        explanation: "upper bound computed at submission (carma sbatch or job_submit.lua); the shard count comes from it"
            .into(),
    })
}

/// How a job's attempt ended, from the Epilog's environment and the job's output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobEnd {
    /// The batch script's exit code (scontrol's `ExitCode=`, else `SLURM_JOB_EXIT_CODE2`).
    pub exit_code: i32,
    /// The signal that killed it, 0 for none (the same pair's second half).
    pub signal: i32,
    /// A GPU out-of-memory line in the job's output, if any: the job's word.
    pub oom: Option<OomEvidence>,
    /// Whether Slurm may requeue the job (`Requeue=1`).
    pub requeueable: bool,
    /// What carma read of the job's memory near its end (the node watcher's readings and the
    /// journal's, `journal::memory_at_end`), which the out-of-memory line is weighed against.
    pub at_end: MemoryAtEnd,
}

/// What the Epilog does about an ended attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EndDecision {
    /// Exit 0: the task is Finished.
    Finished,
    /// Ended otherwise, without an out-of-memory message: the task is Failed.
    Failed {
        /// Short outcome for the Failed record (`exit 2`, `killed by signal 9`, `timeout`).
        outcome: String,
        /// The sentence `carma show` prints for the failure.
        reason: String,
    },
    /// Ended with a GPU out-of-memory message: OomDetected, then `then`.
    OutOfMemory {
        /// The out-of-memory line from the job's output.
        evidence: String,
        /// The largest memory the node saw the attempt use, MiB, when it saw any.
        peak_mib: Option<u64>,
        /// Whether the job is requeued with more shards or given up.
        then: AfterOom,
    },
    /// `scancel`: the task is Cancelled, its attempt Stopped.
    Cancelled {
        /// The sentence journaled with the cancellation.
        reason: String,
    },
    /// Slurm put the job back in its queue (`scontrol requeue`, a node failure with
    /// `--requeue`): the attempt is Lost, the task waits for its next start.
    SlurmRequeued {
        /// The sentence journaled with the Lost and Requeued records.
        reason: String,
    },
}

/// How an attempt ended, from Slurm's own record of the job once it stopped completing
/// (`JobState`, `ExitCode`, `Reason` of `scontrol show job`). `None` while Slurm still runs
/// or completes the job, or for a state carma does not know.
pub fn end_from_slurm(
    job_id: u32,
    state: &str,
    exit: Option<(i32, i32)>,
    reason: Option<&str>,
) -> Option<EndDecision> {
    let (code, signal) = exit.unwrap_or((0, 0));
    let failed =
        |outcome: &str, reason: String| Some(EndDecision::Failed { outcome: outcome.into(), reason });
    match state {
        "COMPLETED" => Some(EndDecision::Finished),
        "FAILED" if signal != 0 => failed(
            &format!("killed by signal {signal}"),
            format!("Slurm job {job_id} FAILED: killed by signal {signal}; not retried"),
        ),
        "FAILED" => {
            let why =
                reason.filter(|r| *r != "None" && !r.is_empty()).map_or(String::new(), |r| format!(" ({r})"));
            failed(
                &format!("exit {code}"),
                format!("Slurm job {job_id} FAILED with exit {code}{why}; not retried"),
            )
        }
        "CANCELLED" => {
            Some(EndDecision::Cancelled { reason: format!("Slurm job {job_id} CANCELLED (scancel)") })
        }
        "TIMEOUT" => failed("timeout", format!("Slurm job {job_id} reached its time limit (TIMEOUT)")),
        "NODE_FAIL" => {
            failed("node failure", format!("Slurm job {job_id} ended by a node failure (NODE_FAIL)"))
        }
        "BOOT_FAIL" => failed(
            "node boot failure",
            format!("Slurm job {job_id} ended by a node boot failure (BOOT_FAIL)"),
        ),
        "DEADLINE" => failed("deadline", format!("Slurm job {job_id} passed its deadline (DEADLINE)")),
        "OUT_OF_MEMORY" => {
            failed("host out of memory", format!("Slurm job {job_id} ran out of host memory (OUT_OF_MEMORY)"))
        }
        "PREEMPTED" => failed("preempted", format!("Slurm job {job_id} was preempted (PREEMPTED)")),
        "PENDING" | "REQUEUED" | "REQUEUE_FED" | "REQUEUE_HOLD" => Some(EndDecision::SlurmRequeued {
            reason: format!("Slurm requeued job {job_id} (scontrol requeue, or a node failure)"),
        }),
        _ => None,
    }
}

/// After an out-of-memory end: requeue with more shards, or stop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AfterOom {
    /// Requeue the job with more shards (`scontrol update` + `scontrol requeue`).
    Requeue {
        /// Shards for the next attempt.
        shards: u32,
        /// The raised figure they cover (margin excluded), MiB.
        requirement_mib: u64,
        /// The sentence journaled with the Requeued record.
        reason: String,
    },
    /// Stop: retries spent, no GPU holds the shards, or the job may not be requeued.
    GiveUp {
        /// Why, journaled with the Failed record.
        reason: String,
    },
}

/// Decides the end of `attempt` of `task`. An out-of-memory line is the job's word: it is
/// weighed against carma's own readings near the end ([`JobEnd::at_end`]) by the rule every
/// attempt's end is judged by (`sched::judge_oom`). Without their support the end is an
/// ordinary failure whose reason gives the readings, and the job is not requeued. With it,
/// carma's looser recovery (`sched::on_oom`) raises the figure to the largest of the
/// estimate, the observed peak (by either reader) and the previous figure, plus one step, and
/// the job is requeued with the shards that cover it plus the margin, while the task's
/// retries last and one GPU can hold them. Every start counts against the retries (the attempt
/// number), since the node cannot tell why Slurm restarted a job elsewhere.
pub fn decide_end(
    task: &Task,
    attempt: &Attempt,
    end: &JobEnd,
    rule: &ShardRule,
    recovery: &RecoveryConfig,
    shards_per_gpu: Option<u32>,
) -> EndDecision {
    if end.exit_code == 0 && end.signal == 0 {
        return EndDecision::Finished;
    }
    let outcome = match end.signal {
        0 => format!("exit {}", end.exit_code),
        signal => format!("killed by signal {signal}"),
    };
    let Some(evidence) = &end.oom else {
        return match end.signal {
            0 => EndDecision::Failed {
                reason: format!("exit {} without an out-of-memory message; not retried", end.exit_code),
                outcome,
            },
            _ => EndDecision::Failed {
                outcome,
                reason: "ended by a signal (scancel, time limit or node failure); not retried".into(),
            },
        };
    };
    let seen = match sched::judge_oom(&end.at_end, recovery) {
        OomJudgement::Unsupported(reason) => return EndDecision::Failed { outcome, reason },
        OomJudgement::Corroborated(words) => words,
    };
    let peak_mib = attempt.peak_observed_mib.max(end.at_end.peak_mib());
    let looser = RecoveryConfig { mode: RecoveryMode::Looser, ..recovery.clone() };
    let decision = sched::on_oom(
        attempt.number,
        crate::journal::state::requirement_mib(task, MemorySource::Declared),
        peak_mib,
        attempt.requirement_mib,
        task.spec.max_retries,
        &looser,
    );
    let then = match decision {
        RecoveryDecision::GiveUp { reason } => AfterOom::GiveUp { reason },
        RecoveryDecision::Requeue { requirement_mib, reason, .. } => {
            let reason = format!("carma's readings: {seen}; {reason}");
            requeue_or_not(requirement_mib, reason, rule, end.requeueable, shards_per_gpu)
        }
    };
    // PyTorch's line starts with its signature already ("torch.OutOfMemoryError: ...").
    let line = if evidence.line.contains(&evidence.signature) {
        evidence.line.clone()
    } else {
        format!("{}: {}", evidence.signature, evidence.line)
    };
    EndDecision::OutOfMemory { evidence: line, peak_mib, then }
}

/// A corroborated out-of-memory's requeue with the shards that cover `requirement_mib`, unless
/// no GPU of the node holds them or the job may not be requeued.
fn requeue_or_not(
    requirement_mib: u64,
    reason: String,
    rule: &ShardRule,
    requeueable: bool,
    shards_per_gpu: Option<u32>,
) -> AfterOom {
    let shards = rule.shards_for(requirement_mib);
    match shards_per_gpu.filter(|&per_gpu| shards > per_gpu) {
        Some(per_gpu) => AfterOom::GiveUp {
            reason: format!("{reason}; but that needs shard:{shards} and a GPU of this node holds {per_gpu}"),
        },
        None if !requeueable => {
            AfterOom::GiveUp { reason: format!("{reason}; but the job was submitted with --no-requeue") }
        }
        None => AfterOom::Requeue {
            shards,
            requirement_mib,
            reason: format!("{reason}; Slurm job requeued with shard:{shards} ({} MiB)", rule.mib_of(shards)),
        },
    }
}

/// The records of an end; `requeue_error` is why `scontrol requeue` failed, if it did.
pub fn end_records(
    task: &TaskId,
    attempt: u32,
    decision: &EndDecision,
    requeue_error: Option<&str>,
    now_ms: u64,
) -> Vec<Record> {
    let task = task.clone();
    let events = match decision {
        EndDecision::Finished => vec![Event::Finished { task, attempt, exit_ms: now_ms }],
        EndDecision::Failed { outcome, reason } => {
            vec![Event::Failed { task, attempt, outcome: outcome.clone(), reason: reason.clone() }]
        }
        EndDecision::OutOfMemory { evidence, peak_mib, then } => {
            let oom = Event::OomDetected {
                task: task.clone(),
                attempt,
                evidence: evidence.clone(),
                peak_mib: *peak_mib,
            };
            let after = match (then, requeue_error) {
                (AfterOom::Requeue { requirement_mib, reason, .. }, None) => Event::Requeued {
                    task,
                    recovery: true,
                    requirement_mib: Some(*requirement_mib),
                    recovery_mode: RequeueMode::Recovery(RecoveryMode::Looser),
                    reason: reason.clone(),
                },
                (AfterOom::Requeue { .. }, Some(error)) => Event::Failed {
                    task,
                    attempt,
                    outcome: "out of memory".into(),
                    reason: format!("requeue failed: {error}"),
                },
                (AfterOom::GiveUp { reason }, _) => {
                    Event::Failed { task, attempt, outcome: "out of memory".into(), reason: reason.clone() }
                }
            };
            vec![oom, after]
        }
        EndDecision::Cancelled { reason } => vec![
            Event::Cancelled { task: task.clone(), by_uid: 0, reason: reason.clone() },
            Event::Stopped { task, attempt, outcome: "cancelled".into() },
        ],
        EndDecision::SlurmRequeued { reason } => vec![
            Event::Lost { task: task.clone(), attempt, reason: reason.clone() },
            Event::Requeued {
                task,
                recovery: false,
                requirement_mib: None,
                recovery_mode: RequeueMode::Main,
                reason: reason.clone(),
            },
        ],
    };
    events.into_iter().map(|event| Record { time_ms: now_ms, event }).collect()
}

/// The MPS exports of a job step (TaskProlog): `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT` capping
/// each visible GPU at the job's share, and where carma's MPS daemon listens. Nothing for a
/// job without shards (a whole GPU is not capped). A job spread over several GPUs gets an
/// equal part of its shards on each.
pub fn task_exports(
    shards_on_node: Option<&str>,
    visible_devices: Option<&str>,
    rule: &ShardRule,
) -> Vec<(String, String)> {
    let Some(shards) = shards_on_node.and_then(|s| s.trim().parse::<u32>().ok()).filter(|&s| s > 0) else {
        return Vec::new();
    };
    let gpus = visible_devices.map_or(1, |v| v.split(',').filter(|d| !d.trim().is_empty()).count()).max(1);
    let per_gpu_mib = rule.mib_of(shards) / gpus as u64;
    vec![
        ("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT".into(), crate::exec::pinned_mem_limit(gpus, per_gpu_mib)),
        ("CUDA_MPS_PIPE_DIRECTORY".into(), crate::systemd::MPS_PIPE_DIR.into()),
        ("CUDA_MPS_LOG_DIRECTORY".into(), crate::systemd::MPS_LOG_DIR.into()),
        ("CARMA_SLURM_SHARD_MIB".into(), rule.shard_mib.to_string()),
    ]
}
