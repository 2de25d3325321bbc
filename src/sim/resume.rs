//! Checkpoints in the simulated machine: which tasks write them, how far an attempt resumes,
//! what a resume costs and what a stop loses.
//!
//! A requeueable task writes a checkpoint each time its progress crosses a multiple of its
//! `checkpoint-every` (exclusive-run time: progress, not wall time, so sharing a GPU delays
//! it). Its next attempt, whatever ended the last one (a preemption, a stop, an out-of-memory
//! death, a reboot), resumes from the last checkpoint, after paying `restart-cost` (loading
//! it); without a checkpoint it starts from zero at no cost. A task that is not requeueable
//! never checkpoints, so every attempt starts from zero, as before checkpoints were modelled.
//!
//! Everything is in exclusive-run ms (work as it would take alone), and per GPU of the task
//! where it is counted as GPU time.

/// How one requeueable task checkpoints.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CheckpointPlan {
    /// Progress between two checkpoints, ms (> 0).
    pub every_ms: f64,
    /// Cost of each resume from a checkpoint, ms (≥ 0).
    pub restart_ms: f64,
}

/// Where an attempt starts: the progress it resumes from, and the restart it pays first.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Resume {
    /// The task's progress at its last checkpoint, ms (0: from the start).
    pub from_ms: f64,
    /// What the attempt must do before progress continues, ms (0 when `from_ms` is 0).
    pub restart_ms: f64,
}

/// One attempt's checkpoints: where it resumed, how it checkpoints, its latest checkpoint.
/// The attempt's own progress (`done_ms`, from 0, the restart included) is the model's.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Checkpointing {
    /// Where it started from: the task's last checkpoint and the restart it pays first.
    pub resume: Resume,
    /// How it checkpoints; `None` for a task that is not requeueable.
    pub plan: Option<CheckpointPlan>,
    /// The task's progress at its latest checkpoint, ms (its resume point until it writes one).
    pub saved_ms: f64,
    /// When it wrote its latest checkpoint, Unix ms: what its run folder would say.
    pub at_ms: Option<u64>,
    /// Checkpoints it wrote.
    pub count: u32,
}

/// What checkpoints did over a whole run, from the model's truth.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CheckpointTotals {
    /// Checkpoints written.
    pub checkpoints: u64,
    /// Attempts that resumed from a checkpoint.
    pub resumes: u64,
    /// GPU time spent restarting (loading checkpoints), ms × GPUs.
    pub restart_gpu_ms: f64,
    /// GPU time of progress thrown away: what attempts that did not finish had done since
    /// their last checkpoint (all of it without one), ms × GPUs.
    pub lost_gpu_ms: f64,
}

impl Checkpointing {
    /// The next attempt of a task, given its previous attempt's checkpoints (if any) and its
    /// plan: it resumes from the last checkpoint, after the restart, when there is one.
    pub fn start(previous: Option<&Checkpointing>, plan: Option<CheckpointPlan>) -> Checkpointing {
        let resume = match (previous, plan) {
            (Some(previous), Some(plan)) if previous.saved_ms > 0.0 => {
                Resume { from_ms: previous.saved_ms, restart_ms: plan.restart_ms }
            }
            _ => Resume::default(),
        };
        Checkpointing { resume, plan, saved_ms: resume.from_ms, at_ms: None, count: 0 }
    }

    /// The task's progress once the attempt has done `done_ms`: where it resumed from plus
    /// what it did after its restart, ms.
    pub fn progress_ms(&self, done_ms: f64) -> f64 {
        self.resume.from_ms + (done_ms - self.resume.restart_ms).max(0.0)
    }

    /// The attempt's own progress at which it writes its next checkpoint; `None` when it
    /// does not checkpoint, or when the next one would fall at or after its end (`work_ms`).
    pub fn next_done_ms(&self, work_ms: f64) -> Option<f64> {
        let plan = self.plan?;
        let next = ((self.saved_ms / plan.every_ms).floor() + 1.0) * plan.every_ms;
        let done = next - self.resume.from_ms + self.resume.restart_ms;
        (done < work_ms - 1.0).then_some(done)
    }

    /// Records the checkpoint the attempt has reached at `now_ms` with `done_ms` done, if
    /// any; true when it wrote one.
    pub fn reach(&mut self, done_ms: f64, work_ms: f64, now_ms: u64) -> bool {
        let Some(done) = self.next_done_ms(work_ms) else { return false };
        if done_ms < done - 1.0 {
            return false;
        }
        // The checkpoint it reached, not its progress rounded down: the event may fall a
        // fraction of a ms short of it (time is whole ms, progress is not).
        self.saved_ms = done - self.resume.restart_ms + self.resume.from_ms;
        self.at_ms = Some(now_ms);
        self.count += 1;
        true
    }
}

impl Checkpointing {
    /// Saves a checkpoint now, at the progress `done_ms` has reached (the job trapped the
    /// preemption's warning); false for an attempt that does not checkpoint.
    pub fn save_now(&mut self, done_ms: f64, now_ms: u64) -> bool {
        if self.plan.is_none() {
            return false;
        }
        self.saved_ms = self.progress_ms(done_ms).max(self.saved_ms);
        self.at_ms = Some(now_ms);
        self.count += 1;
        true
    }
}

impl CheckpointTotals {
    /// Adds one attempt on `gpus` GPUs that did `done_ms` and `finished` (or not).
    pub fn add(&mut self, attempt: &Checkpointing, done_ms: f64, gpus: usize, finished: bool) {
        let gpus = gpus as f64;
        self.checkpoints += u64::from(attempt.count);
        if attempt.resume.restart_ms > 0.0 {
            self.resumes += 1;
            self.restart_gpu_ms += done_ms.min(attempt.resume.restart_ms) * gpus;
        }
        if !finished {
            self.lost_gpu_ms += (attempt.progress_ms(done_ms) - attempt.saved_ms).max(0.0) * gpus;
        }
    }
}

#[cfg(test)]
mod tests {
    //! Goal: checkpoints fall on multiples of the period in task progress, across resumes; a
    //! resume starts at the last one and pays the restart; a stop loses only what followed it.
    use super::*;

    const PLAN: CheckpointPlan = CheckpointPlan { every_ms: 900_000.0, restart_ms: 120_000.0 };

    #[test]
    fn checkpoints_fall_on_multiples_of_progress() {
        let work = 3_000_000.0;
        let mut first = Checkpointing::start(None, Some(PLAN));
        assert_eq!(first.next_done_ms(work), Some(900_000.0));
        assert!(!first.reach(899_000.0, work, 4), "a second early");
        assert!(first.reach(899_999.5, work, 5), "within a ms");
        assert_eq!((first.count, first.at_ms, first.saved_ms), (1, Some(5), 900_000.0));
        assert_eq!(first.next_done_ms(work), Some(1_800_000.0));
        assert!(!first.reach(1_000_000.0, work, 6), "not there yet");
        // Stopped at 1 000 000: it loses 100 000 of progress.
        let mut lost = CheckpointTotals::default();
        lost.add(&first, 1_000_000.0, 1, false);
        assert_eq!((lost.checkpoints, lost.resumes, lost.lost_gpu_ms), (1, 0, 100_000.0));

        let second = Checkpointing::start(Some(&first), Some(PLAN));
        assert_eq!(second.resume, Resume { from_ms: 900_000.0, restart_ms: 120_000.0 });
        let rest = work - 900_000.0 + 120_000.0;
        // Its next checkpoint is at progress 1 800 000: 900 000 after the restart.
        assert_eq!(second.next_done_ms(rest), Some(1_020_000.0));
        let mut paid = CheckpointTotals::default();
        paid.add(&second, 60_000.0, 2, false);
        assert_eq!((paid.resumes, paid.restart_gpu_ms, paid.lost_gpu_ms), (1, 120_000.0, 0.0));
    }

    #[test]
    fn without_a_plan_or_a_checkpoint_an_attempt_starts_from_zero() {
        let mut plain = Checkpointing::start(None, None);
        assert_eq!(plain.next_done_ms(3_000_000.0), None);
        assert!(!plain.reach(2_000_000.0, 3_000_000.0, 1));
        let mut totals = CheckpointTotals::default();
        totals.add(&plain, 2_000_000.0, 1, false);
        assert_eq!(totals.lost_gpu_ms, 2_000_000.0, "everything is lost");
        assert_eq!(Checkpointing::start(Some(&plain), None).resume, Resume::default());
        let early = Checkpointing::start(None, Some(PLAN));
        assert_eq!(Checkpointing::start(Some(&early), Some(PLAN)).resume, Resume::default(), "none yet");
        assert_eq!(early.next_done_ms(800_000.0), None, "it ends before its first checkpoint");
        let mut finished = CheckpointTotals::default();
        finished.add(&early, 800_000.0, 1, true);
        assert_eq!(finished.lost_gpu_ms, 0.0, "a finished attempt lost nothing");
    }
}
