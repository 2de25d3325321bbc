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

use super::model::SimJob;

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

/// Where the next attempt of a task starts, given its previous attempt (if any).
pub fn resume_after(previous: Option<&SimJob>, plan: Option<CheckpointPlan>) -> Resume {
    let (Some(previous), Some(plan)) = (previous, plan) else { return Resume::default() };
    if previous.saved_ms <= 0.0 {
        return Resume::default();
    }
    Resume { from_ms: previous.saved_ms, restart_ms: plan.restart_ms }
}

/// The task's progress a job has reached: where it resumed from plus what it did after its
/// restart, ms.
pub fn progress_ms(job: &SimJob) -> f64 {
    job.resume.from_ms + (job.done_ms - job.resume.restart_ms).max(0.0)
}

/// The job's own progress (`done_ms`) at which it writes its next checkpoint; `None` when it
/// does not checkpoint, or when the next one would fall at or after its end.
pub fn next_checkpoint_done_ms(job: &SimJob) -> Option<f64> {
    let plan = job.checkpoint?;
    let next = ((job.saved_ms / plan.every_ms).floor() + 1.0) * plan.every_ms;
    let done = next - job.resume.from_ms + job.resume.restart_ms;
    (done < job.work_ms - 1.0).then_some(done)
}

/// Records the checkpoint a running job has reached at `now_ms`, if any; true when it wrote
/// one.
pub fn reach_checkpoint(job: &mut SimJob, now_ms: u64) -> bool {
    let Some(done) = next_checkpoint_done_ms(job) else { return false };
    if job.done_ms < done - 1.0 {
        return false;
    }
    // The checkpoint it reached, not its progress rounded down: the event may fall a
    // fraction of a ms short of it (time is whole ms, progress is not).
    job.saved_ms = done - job.resume.restart_ms + job.resume.from_ms;
    job.checkpoint_at_ms = Some(now_ms);
    job.checkpoints += 1;
    true
}

/// The totals over every job the run launched.
pub fn totals<'a>(jobs: impl Iterator<Item = &'a SimJob>) -> CheckpointTotals {
    let mut totals = CheckpointTotals::default();
    for job in jobs {
        let gpus = job.gpus.len() as f64;
        totals.checkpoints += u64::from(job.checkpoints);
        if job.resume.restart_ms > 0.0 {
            totals.resumes += 1;
            totals.restart_gpu_ms += job.done_ms.min(job.resume.restart_ms) * gpus;
        }
        let finished = job.end.as_ref().is_some_and(|end| end.finished());
        if !finished {
            totals.lost_gpu_ms += (progress_ms(job) - job.saved_ms).max(0.0) * gpus;
        }
    }
    totals
}

#[cfg(test)]
mod tests {
    //! Goal: checkpoints fall on multiples of the period in task progress, across resumes; a
    //! resume starts at the last one and pays the restart; a stop loses only what followed it.
    use super::*;
    use crate::sim::model::JobEnd;

    fn job(work_ms: f64, resume: Resume, plan: Option<CheckpointPlan>) -> SimJob {
        SimJob::for_test(work_ms - resume.from_ms + resume.restart_ms, resume, plan)
    }

    const PLAN: CheckpointPlan = CheckpointPlan { every_ms: 900_000.0, restart_ms: 120_000.0 };

    #[test]
    fn checkpoints_fall_on_multiples_of_progress() {
        let mut first = job(3_000_000.0, Resume::default(), Some(PLAN));
        assert_eq!(next_checkpoint_done_ms(&first), Some(900_000.0));
        first.done_ms = 899_000.0;
        assert!(!reach_checkpoint(&mut first, 4), "a second early");
        first.done_ms = 899_999.5;
        assert!(reach_checkpoint(&mut first, 5), "within a ms");
        assert_eq!((first.checkpoints, first.checkpoint_at_ms), (1, Some(5)));
        first.done_ms = 1_000_000.0;
        assert_eq!(first.saved_ms, 900_000.0);
        assert_eq!(next_checkpoint_done_ms(&first), Some(1_800_000.0));
        assert!(!reach_checkpoint(&mut first, 6), "not there yet");
        // Stopped at 1 000 000: it loses 100 000 of progress.
        first.end = Some(JobEnd::stopped_for_test(7));
        let lost = totals([&first].into_iter());
        assert_eq!((lost.checkpoints, lost.resumes, lost.lost_gpu_ms), (1, 0, 100_000.0));

        let resume = resume_after(Some(&first), Some(PLAN));
        assert_eq!(resume, Resume { from_ms: 900_000.0, restart_ms: 120_000.0 });
        let mut second = job(3_000_000.0, resume, Some(PLAN));
        assert_eq!(second.work_ms, 2_220_000.0, "the rest plus the restart");
        // Its next checkpoint is at progress 1 800 000: 900 000 after the restart.
        assert_eq!(next_checkpoint_done_ms(&second), Some(1_020_000.0));
        second.done_ms = 60_000.0;
        second.end = Some(JobEnd::stopped_for_test(8));
        let paid = totals([&second].into_iter());
        assert_eq!((paid.resumes, paid.restart_gpu_ms, paid.lost_gpu_ms), (1, 60_000.0, 0.0));
    }

    /// Goal: on the machine, a requeueable task stopped after 40 minutes of progress with a
    /// 15-minute period resumes at 30 minutes, pays its 2-minute restart, and ends 2 + 30
    /// minutes after its second start-up; a task without a plan starts again from zero.
    #[test]
    fn a_stopped_attempt_resumes_from_its_last_checkpoint_on_the_machine() {
        use crate::sim::{GpuSet, ModelParams, Profile};
        let gpus = GpuSet::parse("2xA100-40GB").expect("gpus");
        let mut params = ModelParams::default();
        (params.job.startup_s, params.job.ramp_s) = (0.0, 0.0);
        let mut model = crate::sim::model::SimModel::new(params, &gpus, false, false, 0);
        let profile = Profile {
            workload: "w".into(),
            model: "w".into(),
            batch_size: 1,
            gpus: 1,
            exclusive_ms: 3_600_000,
            class: "heavy".into(),
            mem_actual_mib: 1000,
            est_horus_mib: 1000,
            est_faketensor_mib: 1000,
            est_gpumemnet_mib: 1000,
            smact: 0.5,
            checkpoint_every_ms: None,
            restart_cost_ms: None,
        };
        for task in ["a", "b"] {
            model.truth.insert(task.into(), profile.clone());
        }
        model.checkpoint_plans.insert("a".into(), PLAN);
        let uuid = |g: usize| vec![model.gpus[g].uuid.clone()];
        let (gpu0, gpu1) = (uuid(0), uuid(1));
        model.launch("a", 1, &gpu0, None, None).expect("a");
        model.launch("b", 1, &gpu1, None, None).expect("b");
        model.advance(2_400_000);
        let first = &model.jobs[&("a".to_string(), 1)];
        assert_eq!((first.checkpoints, first.checkpoint_at_ms), (2, Some(1_800_000)));
        assert_eq!(model.jobs[&("b".to_string(), 1)].checkpoints, 0, "no plan, no checkpoint");
        for task in ["a", "b"] {
            let job = model.jobs.get_mut(&(task.to_string(), 1)).expect("job");
            job.end = Some(JobEnd::stopped_for_test(2_400_000));
        }
        model.launch("a", 2, &gpu0, None, None).expect("a again");
        model.launch("b", 2, &gpu1, None, None).expect("b again");
        let (a, b) = (&model.jobs[&("a".to_string(), 2)], &model.jobs[&("b".to_string(), 2)]);
        assert_eq!(a.resume, Resume { from_ms: 1_800_000.0, restart_ms: 120_000.0 });
        assert_eq!((a.work_ms, b.work_ms), (1_920_000.0, 3_600_000.0));
        model.advance(2_400_000 + 1_920_000);
        let a = &model.jobs[&("a".to_string(), 2)];
        assert!(a.end.as_ref().is_some_and(JobEnd::finished), "{:?}", a.end);
        let totals = totals(model.jobs.values());
        assert_eq!((totals.checkpoints, totals.resumes, totals.restart_gpu_ms), (3, 1, 120_000.0));
        // a lost 10 minutes, b its 40 and its second attempt's 32 so far (still running).
        assert_eq!(totals.lost_gpu_ms, 600_000.0 + 2_400_000.0 + 1_920_000.0);
    }

    #[test]
    fn without_a_plan_or_a_checkpoint_an_attempt_starts_from_zero() {
        let mut plain = job(3_000_000.0, Resume::default(), None);
        assert_eq!(next_checkpoint_done_ms(&plain), None);
        plain.done_ms = 2_000_000.0;
        assert!(!reach_checkpoint(&mut plain, 1));
        plain.end = Some(JobEnd::stopped_for_test(2));
        assert_eq!(totals([&plain].into_iter()).lost_gpu_ms, 2_000_000.0, "everything is lost");
        assert_eq!(resume_after(Some(&plain), None), Resume::default());
        let early = job(3_000_000.0, Resume::default(), Some(PLAN));
        assert_eq!(resume_after(Some(&early), Some(PLAN)), Resume::default(), "no checkpoint yet");
        let short = job(800_000.0, Resume::default(), Some(PLAN));
        assert_eq!(next_checkpoint_done_ms(&short), None, "it ends before its first checkpoint");
    }
}
