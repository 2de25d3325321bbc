//! One Slurm job is one task in a report, however many node journals hold it.
//!
//! A node's Prolog journals a job under `TaskId::from_parts(first submit ms, job id)`. Every
//! node derives the same id when carma itself requeued the job (the comment pins the first
//! submit time), but not when someone else did (`scontrol requeue`, a node failure): Slurm
//! resets the job's SubmitTime, and a node that never saw the job files its next run under a
//! new id. A node may also file a restart that came after an end it journaled under a fresh
//! id (`slurm::records::task_id_for`).
//!
//! The rule: a report's task key for a Slurm job is **(cluster, Slurm job id)**. An array
//! member has its own job id in Slurm (`13_0` is job 14, say), so the array index adds
//! nothing; the cluster name (ClusterName in slurm.conf) keeps two clusters' journals apart.
//! The job is filed under the id of its earliest submission among its copies; every copy's
//! attempts come together by number (Slurm's restart count + 1, the same on every node), in
//! time order, and the task's outcome is its last attempt's. Out-of-memory ends, relaunches
//! and lost attempts of a Slurm job count once per attempt, whichever journals repeat them.
//! Slurm reuses job ids only after its state is wiped (or past `MaxJobId`); journals from
//! before and after such a reset must be reported apart.

use std::collections::{BTreeMap, BTreeSet};

use super::{Acc, TaskAcc};

/// Which ids stand for which Slurm job.
#[derive(Default)]
pub(super) struct SlurmJobs {
    /// (cluster, job id) → the key its task is filed under.
    keys: BTreeMap<(String, u32), String>,
    /// A copy's task id → the key of its job (only for copies merged into another).
    alias: BTreeMap<String, String>,
    /// (key, attempt, what) already counted for Slurm jobs.
    counted: BTreeSet<(String, u32, &'static str)>,
}

impl SlurmJobs {
    /// The key a record about task `id` is filed under.
    pub(super) fn key_of(&self, id: &str) -> String {
        self.alias.get(id).cloned().unwrap_or_else(|| id.to_string())
    }
}

impl Acc {
    /// Files task `key` as Slurm job (`cluster`, `job_id`): when another copy of the job is
    /// known, the two become one task under the earlier submission's id. Returns the key.
    pub(super) fn join_slurm_job(&mut self, key: &str, cluster: &str, job_id: u32) -> String {
        let job = (cluster.to_string(), job_id);
        let Some(known) = self.slurm.keys.get(&job).cloned() else {
            self.slurm.keys.insert(job, key.to_string());
            return key.to_string();
        };
        if known == key {
            return known;
        }
        let submit = |acc: &Acc, k: &str| acc.tasks.get(k).map_or(u64::MAX, |t| t.submit_ms);
        let (keep, gone) = if submit(self, key) < submit(self, &known) {
            (key.to_string(), known)
        } else {
            (known, key.to_string())
        };
        if let Some(copy) = self.tasks.remove(&gone) {
            let task = self.tasks.entry(keep.clone()).or_default();
            absorb(task, copy);
        }
        for target in self.slurm.alias.values_mut().filter(|t| **t == gone) {
            *target = keep.clone();
        }
        self.slurm.alias.insert(gone.clone(), keep.clone());
        let counted: Vec<_> = self.slurm.counted.iter().filter(|c| c.0 == gone).cloned().collect();
        for (_, attempt, what) in counted {
            self.slurm.counted.insert((keep.clone(), attempt, what));
        }
        self.slurm.keys.insert(job, keep.clone());
        keep
    }

    /// Whether this (task, attempt)'s `what` is to be counted: always for a task of one
    /// queue, once for a Slurm job.
    pub(super) fn count_once(&mut self, key: &str, attempt: u32, what: &'static str) -> bool {
        let slurm = self.tasks.get(key).is_some_and(|t| t.attempts.values().any(|a| a.slurm_job.is_some()));
        !slurm || self.slurm.counted.insert((key.to_string(), attempt, what))
    }
}

/// Moves a copy's facts into the task that stands for the job.
fn absorb(task: &mut TaskAcc, copy: TaskAcc) {
    if copy.submit_ms < task.submit_ms || task.name.is_empty() {
        task.submitter_uid = copy.submitter_uid;
        task.name = copy.name.clone();
    }
    task.submit_ms = task.submit_ms.min(copy.submit_ms);
    task.first_start_ms = match (task.first_start_ms, copy.first_start_ms) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    task.execution_ms += copy.execution_ms;
    for (attempt, start) in copy.open {
        task.open.entry(attempt).or_insert(start);
    }
    if let Some(end) = copy.end
        && (task.end.is_none() || copy.end_attempt > task.end_attempt)
    {
        task.end = Some(end);
        task.end_attempt = copy.end_attempt;
        task.finish_ms = copy.finish_ms;
    }
    for (number, attempt) in copy.attempts {
        task.attempts.entry(number).or_insert(attempt);
    }
}
