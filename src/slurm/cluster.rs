//! One view of a Slurm cluster's carma jobs (pure): the node journals, which know every job
//! that has started (its attempts, where, with what share, how it ended), merged with
//! `squeue`, which knows the jobs still waiting and any start a node has not journaled yet.
//!
//! Each node's journal holds the attempts of a job that ran there; the node whose journal has
//! the job's latest attempt speaks for it. States
//! are Slurm's codes (`PD`, `R`, `CD`, `F`, `CA`, `TO`, `NF`, ...), as `sacct` would show the
//! same job; ids are Slurm's, in its array notation (`13_0`, `13_[1-4]`).

use std::collections::BTreeMap;

use serde::Serialize;

use super::squeue::{self, QueuedJob};
use crate::journal::{State, Status, Task};

/// One row of the cluster view.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ClusterRow {
    /// The Slurm job id as squeue shows it: `14`, `13_0`, `13_[1-4]`.
    pub job: String,
    /// The Slurm job number (an array member's own number); rows sort by it.
    pub job_id: u32,
    /// The carma task id, once a node has journaled the job.
    pub task: Option<String>,
    /// The job's name (the task's name once journaled).
    pub name: String,
    /// The submitter's uid, when known.
    pub uid: Option<u32>,
    /// Slurm's state code.
    pub state: String,
    /// The node of the latest attempt (or squeue's node list).
    pub node: Option<String>,
    /// Shards granted to the latest attempt (requested, for a job only squeue knows); `None`
    /// for whole GPUs.
    pub shards: Option<u32>,
    /// Attempts journaled (runs, across requeues).
    pub attempts: u32,
    /// When the task was first submitted (a journal's) or Slurm's SubmitTime, Unix ms.
    pub submitted_ms: Option<u64>,
    /// When the latest attempt started, Unix ms.
    pub started_ms: Option<u64>,
    /// When the task ended, Unix ms; `None` while it has not.
    pub ended_ms: Option<u64>,
    /// Why it waits, where it runs, or how it ended, in words.
    pub reason: Option<String>,
    /// Where the row comes from: `journal`, `squeue`, or `both`.
    pub source: &'static str,
}

/// Merges the node journals' Slurm tasks with squeue's jobs (`None` when squeue gave no
/// answer). Sorted by job id, then by the shown id.
pub fn merge(journals: &[State], queued: Option<&[QueuedJob]>) -> Vec<ClusterRow> {
    // By Slurm job, not task id: a node that first sees a requeued job derives the task id
    // from the submit time Slurm gave the requeue, so the copies' ids may differ.
    let mut latest: BTreeMap<(&str, u32), &Task> = BTreeMap::new();
    for state in journals {
        for task in state.tasks.values() {
            let Some(slurm) = &task.slurm else { continue };
            let entry = latest.entry((slurm.cluster.as_str(), slurm.job_id)).or_insert(task);
            if rank(task) > rank(entry) {
                *entry = task;
            }
        }
    }
    let mut rows: Vec<ClusterRow> = latest.values().map(|task| from_journal(task)).collect();
    for job in queued.unwrap_or_default().iter() {
        match rows.iter_mut().filter(|r| r.job_id == job.job_id).max_by_key(|r| r.submitted_ms) {
            Some(row) => overlay(row, job),
            None if job.is_carma() => rows.push(from_squeue(job)),
            None => {}
        }
    }
    rows.sort_by(|a, b| (a.job_id, &a.job).cmp(&(b.job_id, &b.job)));
    rows
}

/// Which copy of a task is newest: the later attempt, then an ended one (its node saw the
/// end), then the later start.
fn rank(task: &Task) -> (u32, bool, u64) {
    let last = task.attempts.last();
    (
        last.map_or(0, |a| a.number),
        task.status().is_terminal(),
        last.and_then(|a| a.launched_ms).unwrap_or(task.submitted_ms),
    )
}

/// The state code `sacct` would show for the task's journaled end or progress.
pub fn state_code(task: &Task) -> &'static str {
    match task.status() {
        Status::Pending => "PD",
        Status::Placed => "CF",
        Status::Running => "R",
        Status::Finished => "CD",
        Status::Cancelled => "CA",
        Status::Failed => match task.attempts.last().and_then(|a| a.outcome.as_deref()) {
            Some("timeout") => "TO",
            Some("node failure") => "NF",
            Some("node boot failure") => "BF",
            Some("host out of memory") => "OOM",
            Some("preempted") => "PR",
            Some("deadline") => "DL",
            _ => "F",
        },
    }
}

fn from_journal(task: &Task) -> ClusterRow {
    let slurm = task.slurm.as_ref().expect("only Slurm tasks are merged");
    let last = task.attempts.last();
    let array = task.spec.command.iter().find_map(|w| w.strip_prefix("array:"));
    let reason = match task.status() {
        Status::Pending => last.map(|a| {
            format!("requeued after attempt {}: {}", a.number, a.outcome.as_deref().unwrap_or("ended"))
        }),
        Status::Placed | Status::Running => last.map(|a| a.placement_reason.clone()),
        _ => task.end_reason().map(str::to_owned),
    };
    ClusterRow {
        job: array.map_or_else(|| slurm.job_id.to_string(), str::to_string),
        job_id: slurm.job_id,
        task: Some(task.id.as_str().to_string()),
        name: task.spec.name.clone(),
        uid: Some(task.submitter_uid),
        state: state_code(task).to_string(),
        node: Some(slurm.node.clone()),
        shards: slurm.shards,
        attempts: last.map_or(0, |a| a.number),
        submitted_ms: Some(task.submitted_ms),
        started_ms: last.and_then(|a| a.launched_ms),
        ended_ms: task.ended_ms(),
        reason,
        source: "journal",
    }
}

fn from_squeue(job: &QueuedJob) -> ClusterRow {
    ClusterRow {
        job: job.shown.clone(),
        job_id: job.job_id,
        task: None,
        name: job.name.clone(),
        uid: job.uid,
        state: squeue::state_code(&job.state),
        node: Some(job.nodes.clone()).filter(|n| !n.is_empty()),
        shards: job.shards,
        attempts: 0,
        submitted_ms: job.submit_s.map(|s| s * 1000),
        started_ms: job.start_s.filter(|_| job.state != "PENDING").map(|s| s * 1000),
        ended_ms: None,
        reason: Some(job.reason.clone()).filter(|r| !r.is_empty() && r != "None"),
        source: "squeue",
    }
}

/// squeue's word on a journaled job: Slurm's live state wins while it waits or runs and the
/// journal has not caught up (a requeued job, a start the node has not journaled yet); a job
/// squeue still lists while it completes keeps its journaled end.
fn overlay(row: &mut ClusterRow, job: &QueuedJob) {
    row.source = "both";
    row.job = job.shown.clone();
    let code = squeue::state_code(&job.state);
    let live = ["PD", "R", "CF", "S", "RQ", "RH"].contains(&code.as_str());
    if !live || (code == row.state && code != "PD") {
        return;
    }
    let slurm_reason = Some(job.reason.as_str()).filter(|r| !r.is_empty() && *r != "None");
    row.reason = match (code.as_str(), row.reason.take(), slurm_reason) {
        ("PD", Some(ours), Some(theirs)) if row.state == "PD" => Some(format!("{ours} (Slurm: {theirs})")),
        ("PD", Some(ours), Some(theirs)) => Some(format!("{theirs}; before: {ours}")),
        ("R", _, _) => Some(format!("running on {} (its node has not journaled the start yet)", job.nodes)),
        (_, ours, theirs) => theirs.map(str::to_string).or(ours),
    };
    if code == "R" {
        row.node = Some(job.nodes.clone()).filter(|n| !n.is_empty());
        row.started_ms = job.start_s.map(|s| s * 1000);
        row.ended_ms = None;
    }
    row.state = code;
}

#[cfg(test)]
mod tests {
    //! Goal: the newest copy of a task speaks for it, Slurm's live state wins only while the
    //! journal lags, ends read as sacct's states, and pending jobs come from squeue alone.
    use super::*;
    use crate::journal::{Event, Record};
    use crate::slurm::records::{self, JobStart};
    use crate::slurm::{CarmaComment, ShardRule};

    fn start(job_id: u32, node: &str, restart_count: u32, array: Option<&str>) -> JobStart {
        JobStart {
            cluster: "lab".into(),
            job_id,
            node: node.into(),
            restart_count,
            uid: 1000,
            name: "train".into(),
            workdir: "/".into(),
            comment: Some(CarmaComment {
                mem_mib: Some(2048),
                submit_ms: Some(1_000),
                ..CarmaComment::default()
            }),
            submit_ms: 1_000,
            started_ms: 2_000 + u64::from(restart_count) * 1000,
            gpus: vec!["GPU-a".into()],
            shards: Some(4),
            rule: ShardRule::default(),
            boot_id: "boot".into(),
            array: array.map(String::from),
        }
    }

    fn apply(state: &mut State, records: Vec<Record>) {
        for record in records {
            let seq = state.last_seq + 1;
            state.apply(seq, &record);
        }
    }

    fn started(state: &mut State, start: &JobStart) -> crate::id::TaskId {
        let (id, records) = records::start_records(state, start);
        apply(state, records);
        id.unwrap()
    }

    fn queued(job_id: u32, shown: &str, state: &str, reason: &str) -> QueuedJob {
        QueuedJob {
            job_id,
            shown: shown.into(),
            state: state.into(),
            reason: reason.into(),
            nodes: if state == "RUNNING" { "n2".into() } else { String::new() },
            shards: Some(4),
            submit_s: Some(1),
            start_s: Some(3),
            ..QueuedJob::default()
        }
    }

    #[test]
    fn journals_and_squeue_merge_into_one_view() {
        let (mut n1, mut n2) = (State::default(), State::default());
        // 10: out of memory on n1, runs again on n2 and finishes there.
        let ten = started(&mut n1, &start(10, "n1", 0, None));
        let lost = records::end_records(
            &ten,
            1,
            &records::EndDecision::SlurmRequeued { reason: "requeued".into() },
            None,
            3_000,
        );
        apply(&mut n1, lost);
        let again = started(&mut n2, &start(10, "n2", 1, None));
        assert_eq!(again, ten, "a requeued job keeps its task id across nodes");
        let finished = Event::Finished { task: ten.clone(), attempt: 2, exit_ms: 9_000 };
        apply(&mut n2, vec![Record { time_ms: 9_000, event: finished }]);
        // 11 (array member 5_1): timed out. 12: cancelled. 13: requeued on n1, pending in Slurm.
        let eleven = started(&mut n1, &start(11, "n1", 0, Some("5_1")));
        let timeout = records::end_from_slurm(11, "TIMEOUT", Some((0, 15)), None).unwrap();
        apply(&mut n1, records::end_records(&eleven, 1, &timeout, None, 9_000));
        let twelve = started(&mut n2, &start(12, "n2", 0, None));
        let cancel = records::end_from_slurm(12, "CANCELLED", Some((0, 15)), None).unwrap();
        apply(&mut n2, records::end_records(&twelve, 1, &cancel, None, 9_000));
        let thirteen = started(&mut n1, &start(13, "n1", 0, None));
        let requeue = records::end_from_slurm(13, "REQUEUED", None, None).unwrap();
        apply(&mut n1, records::end_records(&thirteen, 1, &requeue, None, 9_000));
        // 14: started on n2 but not journaled yet. 15: pending, never started.
        let queue = [
            queued(13, "13", "PENDING", "BeginTime"),
            queued(14, "14", "RUNNING", "None"),
            queued(15, "15_[1-3]", "PENDING", "Priority"),
            QueuedJob { job_id: 16, shown: "16".into(), state: "PENDING".into(), ..QueuedJob::default() },
        ];
        let rows = merge(&[n1.clone(), n2.clone()], Some(&queue));
        let brief: Vec<(&str, &str, Option<&str>, u32, &str)> = rows
            .iter()
            .map(|r| (r.job.as_str(), r.state.as_str(), r.node.as_deref(), r.attempts, r.source))
            .collect();
        assert_eq!(
            brief,
            [
                ("10", "CD", Some("n2"), 2, "journal"),
                ("5_1", "TO", Some("n1"), 1, "journal"),
                ("12", "CA", Some("n2"), 1, "journal"),
                ("13", "PD", Some("n1"), 1, "both"),
                ("14", "R", Some("n2"), 0, "squeue"),
                ("15_[1-3]", "PD", None, 0, "squeue"),
            ]
        );
        assert_eq!(
            rows[3].reason.as_deref(),
            Some(
                "requeued after attempt 1: lost: Slurm requeued job 13 (scontrol requeue, or a node failure) (Slurm: BeginTime)"
            )
        );
        assert_eq!(rows[4].reason, None);
        assert_eq!(rows[5].reason.as_deref(), Some("Priority"));
        // Without squeue the journals still speak; 13 is pending there too.
        let alone = merge(&[n2, n1], None);
        assert_eq!(alone.iter().map(|r| r.state.as_str()).collect::<Vec<_>>(), ["CD", "TO", "CA", "PD"]);
    }
}
