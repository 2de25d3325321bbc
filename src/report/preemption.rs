//! What preemption cost, from a journal's records alone: how many attempts were preempted,
//! the GPU-hours of work they lost (each `Preempted` record's `lost_ms`, the time since the
//! attempt's last `Checkpointed` or its start, times its GPUs), the checkpoints jobs reported,
//! and the attempts that resumed after a preemption.
//!
//! A restart's own cost (loading a checkpoint) is inside the resumed attempt's run time and
//! no record states it; `carma simulate --copies` reports it from the simulated machine.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

/// Preemptions and checkpoints in one journal.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PreemptionReport {
    /// Preempted records: attempts stopped (or suspended) for another task.
    pub preemptions: u64,
    /// GPU-hours of work the preempted attempts lost since their last checkpoint (or start).
    pub lost_gpu_hours: f64,
    /// Checkpointed records: checkpoints the jobs reported.
    pub checkpoints: u64,
    /// Attempts launched after their task was preempted.
    pub resumes: u64,
}

/// The running sums behind a [`PreemptionReport`].
#[derive(Debug, Default)]
pub(super) struct PreemptionAcc {
    report: PreemptionReport,
    lost_gpu_ms: f64,
    /// Tasks preempted and not launched again since.
    to_resume: BTreeSet<String>,
    /// Each task's last preemption's lost GPU-ms, undone should it be withdrawn.
    last_lost: BTreeMap<String, f64>,
}

impl PreemptionAcc {
    /// A job reported a checkpoint.
    pub(super) fn checkpointed(&mut self) {
        self.report.checkpoints += 1;
    }

    /// An attempt of `task` on `gpus` GPUs was preempted, losing `lost_ms` of work.
    pub(super) fn preempted(&mut self, task: &str, lost_ms: u64, gpus: usize) {
        self.report.preemptions += 1;
        let lost = lost_ms as f64 * gpus.max(1) as f64;
        self.lost_gpu_ms += lost;
        self.to_resume.insert(task.to_string());
        self.last_lost.insert(task.to_string(), lost);
    }

    /// `task`'s preemption was withdrawn (its preemptor no longer waited): it was not stopped,
    /// lost nothing, and is not to resume.
    pub(super) fn withdrawn(&mut self, task: &str) {
        if let Some(lost) = self.last_lost.remove(task) {
            self.report.preemptions = self.report.preemptions.saturating_sub(1);
            self.lost_gpu_ms -= lost;
            self.to_resume.remove(task);
        }
    }

    /// An attempt was suspended for another task (`mode = "suspend"`): a preemption that
    /// loses no work.
    pub(super) fn suspended(&mut self) {
        self.report.preemptions += 1;
    }

    /// A suspended attempt was resumed on its GPUs.
    pub(super) fn resumed(&mut self) {
        self.report.resumes += 1;
    }

    /// An attempt of `task` was launched: a resume when the task was preempted before.
    pub(super) fn launched(&mut self, task: &str) {
        if self.to_resume.remove(task) {
            self.report.resumes += 1;
        }
    }

    /// The report.
    pub(super) fn finish(self) -> PreemptionReport {
        PreemptionReport { lost_gpu_hours: self.lost_gpu_ms / 3_600_000.0, ..self.report }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: lost work is weighed by the victim's GPUs, and a resume is counted once, for a
    /// launch that follows a preemption of the same task only.
    #[test]
    fn lost_work_is_per_gpu_and_resumes_follow_preemptions() {
        let mut acc = PreemptionAcc::default();
        acc.launched("a");
        acc.checkpointed();
        acc.preempted("a", 1_800_000, 2);
        acc.preempted("b", 3_600_000, 1);
        acc.launched("a");
        acc.launched("a");
        acc.launched("c");
        let report = acc.finish();
        assert_eq!(
            report,
            PreemptionReport { preemptions: 2, lost_gpu_hours: 2.0, checkpoints: 1, resumes: 1 }
        );
    }

    /// Goal: a withdrawn preemption (the victim ran on) counts neither as a preemption nor
    /// as lost work, and the task's next launch is no resume.
    #[test]
    fn a_withdrawn_preemption_costs_nothing() {
        let mut acc = PreemptionAcc::default();
        acc.preempted("a", 1_800_000, 2);
        acc.preempted("b", 3_600_000, 1);
        acc.withdrawn("a");
        acc.withdrawn("a");
        acc.launched("a");
        let report = acc.finish();
        assert_eq!(
            report,
            PreemptionReport { preemptions: 1, lost_gpu_hours: 1.0, checkpoints: 0, resumes: 0 }
        );
    }
}
