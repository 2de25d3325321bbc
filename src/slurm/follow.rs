//! The Epilog's detached follower (edge): `carma slurm follow`, root, one per ended attempt.
//!
//! Why a process of its own: while the Epilog runs, Slurm shows the job as COMPLETING, so
//! the Epilog cannot see whether it was cancelled, timed out or requeued, and anything it
//! changes on the job (shards, comment, start time) is reset before the job completes. The
//! follower waits (bounded) until Slurm has recorded the job's end, then:
//! - after an out-of-memory requeue, gives the pending job its new shards and comment and a
//!   start time two seconds ahead ([`REQUEUE_START_DELAY`]): slurmd refuses a launch whose
//!   credential is not newer than the revocation of the job's last run ("Job credential
//!   revoked"), and Slurm's own requeue delay (about two minutes) exists for that reason;
//! - otherwise journals the attempt's end as Slurm recorded it (`records::end_from_slurm`);
//! - while the job is pending again, watches it: a start on this node is journaled (slurmd
//!   does not run the Prolog again for a job it ran within the credential lifetime), an end
//!   before any start (FAILED, CANCELLED, ...) is journaled as that end, so no task stays
//!   pending in the journal after Slurm gave up on it.

use std::time::{Duration, Instant};

use crate::clock::{Clock, SystemClock};
use crate::error::Result;
use crate::exec::BootIdSource;
use crate::home::Home;
use crate::journal::Record;
use crate::session;

use super::comment::CarmaComment;
use super::hooks::{HOOK_COMMAND_TIMEOUT, argv, show_job};
use super::records::{self, EndDecision, JobStart};
use super::scontrol::{self, JobView};
use super::shards::ShardRule;

/// Longest wait for Slurm to finish completing the job.
pub const COMPLETING_WAIT: Duration = Duration::from_secs(120);
/// Longest watch of a requeued job for its next start or end.
pub const PENDING_WATCH: Duration = Duration::from_secs(600);
/// Seconds between the end of a run and the earliest start of the next.
pub const REQUEUE_START_DELAY: u32 = 2;
const POLL: Duration = Duration::from_millis(200);

/// What the Epilog hands its follower.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Follow {
    /// `SLURM_CLUSTER_NAME` of the job.
    pub cluster: String,
    /// The Slurm job to follow.
    pub job_id: u32,
    /// This node: starts elsewhere are the other node's Prolog's business.
    pub node: String,
    /// The attempt the Epilog ended, when it left the end to the follower.
    pub attempt: Option<u32>,
    /// After an out-of-memory requeue: the shards and comment of the next run.
    pub requeue: Option<(u32, String)>,
    /// When the Epilog ran, Unix ms: after the run ended and before Slurm could give its
    /// shards to another job, so the attempt's end time.
    pub ended_ms: Option<u64>,
    /// The node's shard rule.
    pub rule: ShardRule,
    /// Longest wait for the journal's write lock.
    pub lock_wait: Duration,
}

/// The follower's body; returns its log line.
pub fn follow(home: &Home, f: &Follow) -> Result<String> {
    let job = f.job_id;
    let view = wait_while_completing(job)?;
    let state = view.state.clone().unwrap_or_default();
    let pending = state == "PENDING";
    if let Some((shards, comment)) = &f.requeue {
        if !pending {
            let note = journal_end_of_pending(home, f, &view)?;
            return Ok(format!("job {job} is {state} instead of PENDING after the requeue; {note}"));
        }
        let update = |field: String| {
            super::command::run(
                &argv(&["scontrol", "update", &format!("JobId={job}"), &field]),
                None,
                HOOK_COMMAND_TIMEOUT,
            )
        };
        update(format!("Gres=shard:{shards}"))?;
        update(format!("Comment={comment}"))?;
        update(format!("StartTime=now+{REQUEUE_START_DELAY}"))?;
        let next = watch_pending(home, f, view.restarts.unwrap_or(0))?;
        return Ok(format!("job {job} pending again with shard:{shards}; {next}"));
    }
    let Some(attempt) = f.attempt else { return Ok(format!("job {job}: nothing to follow")) };
    let decision = records::end_from_slurm(job, &state, view.exit_code, view.reason.as_deref())
        .unwrap_or_else(|| fallback_end(job, &view));
    let now = f.ended_ms.unwrap_or_else(|| SystemClock.now_ms());
    session::write(home, f.lock_wait, |journal, st| {
        let Some(task) = st.slurm_task(&f.cluster, job) else { return Ok(()) };
        if task.active_attempt().is_none_or(|a| a.number != attempt) {
            return Ok(());
        }
        let records = records::end_records(&task.id.clone(), attempt, &decision, None, now);
        journal.append(&records, st)
    })?;
    let mut note = format!("attempt {attempt} journaled as Slurm's {state}");
    if matches!(decision, EndDecision::SlurmRequeued { .. }) {
        note = format!("{note}; {}", watch_pending(home, f, view.restarts.unwrap_or(0))?);
    }
    Ok(format!("job {job}: {note}"))
}

/// The end from the exit code alone, for a state Slurm did not settle in time.
fn fallback_end(job: u32, view: &JobView) -> EndDecision {
    match view.exit_code.unwrap_or((1, 0)) {
        (0, 0) => EndDecision::Finished,
        (code, 0) => EndDecision::Failed {
            outcome: format!("exit {code}"),
            reason: format!("Slurm job {job} exited {code}; not retried"),
        },
        (_, signal) => EndDecision::Failed {
            outcome: format!("killed by signal {signal}"),
            reason: format!("Slurm job {job} ended by signal {signal}; not retried"),
        },
    }
}

fn wait_while_completing(job: u32) -> Result<JobView> {
    let deadline = Instant::now() + COMPLETING_WAIT;
    loop {
        let view = show_job(job)?;
        // REQUEUED: Slurm is putting the job back in its queue; PENDING follows.
        let busy = matches!(view.state.as_deref(), Some("COMPLETING") | Some("REQUEUED") | None);
        if !busy || Instant::now() >= deadline {
            return Ok(view);
        }
        std::thread::sleep(POLL);
    }
}

/// Watches a pending job until it starts or ends (bounded by [`PENDING_WATCH`]).
fn watch_pending(home: &Home, f: &Follow, restarts: u32) -> Result<String> {
    let deadline = Instant::now() + PENDING_WATCH;
    loop {
        let view = show_job(f.job_id)?;
        match view.state.as_deref() {
            Some("PENDING") | Some("REQUEUED") | None if Instant::now() < deadline => {
                std::thread::sleep(POLL)
            }
            Some("PENDING") | Some("REQUEUED") | None => return Ok("still pending; stopped watching".into()),
            Some("RUNNING") | Some("CONFIGURING") | Some("COMPLETING") | Some("SUSPENDED") => {
                if view.batch_host.as_deref() != Some(f.node.as_str()) {
                    return Ok(format!(
                        "started on {}",
                        view.batch_host.as_deref().unwrap_or("another node")
                    ));
                }
                return journal_start(home, f, &view, restarts);
            }
            Some(_) => return journal_end_of_pending(home, f, &view),
        }
    }
}

/// Journals a start on this node that no Prolog journaled.
fn journal_start(home: &Home, f: &Follow, view: &JobView, restarts: u32) -> Result<String> {
    // Seen now, at most one poll after the start: never earlier than the shards were free
    // (Slurm's StartTime is cut to the second).
    let started_ms = SystemClock.now_ms();
    let indices = view.gres_indices.clone();
    let samples = super::hooks::sample_gpus_of(home);
    let known = samples.as_deref().unwrap_or_default();
    let gpus = indices
        .iter()
        .map(|&i| known.iter().find(|s| s.index == i).map_or(format!("gpu{i}"), |s| s.uuid.clone()))
        .collect();
    let shards = view.job_gres.as_deref().and_then(|g| scontrol::parse_gres(g).shards);
    let comment = view.comment.as_deref().and_then(|c| CarmaComment::parse(c).ok().flatten());
    let restart_count = view.restarts.unwrap_or(restarts + 1);
    let start = JobStart {
        cluster: f.cluster.clone(),
        job_id: f.job_id,
        node: f.node.clone(),
        restart_count,
        uid: view.uid.unwrap_or(u32::MAX),
        name: view.name.clone().unwrap_or_default(),
        workdir: "/".into(),
        comment,
        submit_ms: view.submit_s.map_or(started_ms, |s| s * 1000),
        started_ms,
        gpus,
        shards,
        rule: f.rule,
        boot_id: BootIdSource::from_env().current().unwrap_or_default(),
        array: view.array.clone(),
    };
    let wrote = session::write(home, f.lock_wait, |journal, st| {
        let (_, records) = records::start_records(st, &start);
        let wrote = !records.is_empty();
        journal.append(&records, st)?;
        Ok(wrote)
    })?;
    if !wrote {
        return Ok("restart already journaled".into());
    }
    // No Prolog ran for this start, so nothing watches it yet.
    let watched = match (std::env::current_exe(), crate::config::Config::load(home)) {
        (Ok(exe), Ok(config)) => super::hooks::start_watch(home, &exe, &config, &start),
        _ => "its GPU memory not watched: no carma binary or configuration".into(),
    };
    Ok(format!("restart {restart_count} journaled on {}; {watched}", f.node))
}

/// Journals the end of a job Slurm ended while carma expected it to run again.
fn journal_end_of_pending(home: &Home, f: &Follow, view: &JobView) -> Result<String> {
    let state = view.state.clone().unwrap_or_default();
    let decision = records::end_from_slurm(f.job_id, &state, view.exit_code, view.reason.as_deref())
        .unwrap_or_else(|| fallback_end(f.job_id, view));
    let now = SystemClock.now_ms();
    let wrote = session::write(home, f.lock_wait, |journal, st| {
        let Some(task) = st.slurm_task(&f.cluster, f.job_id) else { return Ok(false) };
        if task.active_attempt().is_some() {
            return Ok(false);
        }
        let Some(last) = task.attempts.last().map(|a| a.number) else { return Ok(false) };
        let records: Vec<Record> = records::end_records(&task.id.clone(), last, &decision, None, now);
        journal.append(&records, st)?;
        Ok(true)
    })?;
    Ok(if wrote {
        format!("ended {state} before running again; journaled")
    } else {
        format!("ended {state}")
    })
}
