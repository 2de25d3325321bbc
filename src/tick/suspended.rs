//! What every tick does for the attempts the journal says are suspended, or were: it compares
//! the journal with what it observes, finishes what a tick killed after its commit left
//! undone, keeps a suspension whole, and bounds it. Observe, decide purely ([`decide`]), then
//! apply, as reconcile does.
//!
//! For an open attempt the journal has **suspended** (observed: [`AttemptRunner::job_stop`]):
//! - past `[sched.preemption] suspend-max` since its Suspended record: a SuspensionEnded
//!   record; reconcile stops the attempt at once and its end is Stopped + Requeued
//!   ([`verdict`]), as Slurm's suspend gives way to requeue;
//! - without the tick's mark (exec/freeze.rs): the tick that journaled Suspended died before
//!   it had stopped the job, at the tool or at the signal. The suspension is applied now
//!   (`suspend::stop_job`): the GPU processes that still say `running` toggled, the job
//!   stopped as a whole, the mark made; a toggle that fails ends the suspension, naming why;
//! - marked but not wholly stopped: someone continued its processes (its owner's SIGCONT,
//!   where no frozen cgroup holds them). It is stopped again as a whole, and its supervisor's
//!   clock counted the time it ran (exec/pause.rs), so it never runs past its limit.
//!
//! For an open attempt the journal has **not** suspended that still carries the mark: the tick
//! that journaled Resumed (or SuspensionEnded) died before the job was continued and given its
//! CUDA state back. It is continued now (`suspend::continue_job`; an ended suspension is only
//! continued, to be stopped).
//!
//! Each step is an effect of a record already committed, so applying it twice is harmless:
//! SIGSTOP to a stopped process, a freeze of a frozen cgroup, a toggle asked only of the
//! processes whose state says it is due.

use crate::config::Config;
use crate::exec::cuda_checkpoint::{self, Budget};
use crate::exec::freeze::JobStop;
use crate::gpu::GpuSample;
use crate::id::TaskId;
use crate::journal::{Event, Record, RequeueMode, State, Task};

use super::runner::AttemptRunner;

/// What one attempt looks like to this room.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Seen {
    /// A suspended attempt's job.
    Suspended(JobStop),
    /// An attempt not suspended whose mark is still there.
    Marked,
}

/// What [`decide`] asks the tick to do for one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Step {
    /// Journal SuspensionEnded with this reason, then stop the attempt.
    End(String),
    /// Apply the suspension the journal holds: toggle, stop as a whole, mark.
    Complete,
    /// Stop the job as a whole again: these processes ran.
    Restop(Vec<u32>),
    /// Continue the job and give its CUDA state back (a resume not finished).
    Continue,
    /// Continue the job only, and remove the mark (an ended suspension, being stopped).
    Release,
}

/// Observes every open local attempt the journal has suspended, and those not suspended that
/// were resumed or whose suspension ended, whose mark is still there.
pub(super) fn observe(state: &State, runner: &dyn AttemptRunner) -> Vec<(TaskId, u32, Seen)> {
    let mut seen = Vec::new();
    for task in state.tasks.values() {
        let Some(attempt) = task.active_attempt() else { continue };
        let (id, number) = (task.id.as_str(), attempt.number);
        if attempt.suspended.is_some() {
            if let Some(job) = runner.job_stop(id, number) {
                seen.push((task.id.clone(), number, Seen::Suspended(job)));
            }
        } else if (attempt.resumed_ms.is_some() || attempt.suspension_ended.is_some())
            && runner.suspension_marked(id, number)
        {
            seen.push((task.id.clone(), number, Seen::Marked));
        }
    }
    seen
}

/// The pure decision over what [`observe`] saw (module docs).
pub(super) fn decide(
    state: &State,
    seen: &[(TaskId, u32, Seen)],
    config: &Config,
    now_ms: u64,
) -> Vec<(TaskId, u32, Step)> {
    let bound_ms = config.sched.preemption.suspend_max_ms;
    let mut steps = Vec::new();
    for (id, number, seen) in seen {
        let Some(attempt) =
            state.tasks.get(id).and_then(|t| t.active_attempt()).filter(|a| a.number == *number)
        else {
            continue;
        };
        let step = match (seen, &attempt.suspended) {
            (Seen::Suspended(job), Some(suspension)) => {
                let held_ms = now_ms.saturating_sub(suspension.at_ms);
                if held_ms >= bound_ms {
                    Some(Step::End(format!(
                        "suspended for {}, past [sched.preemption] suspend-max ({})",
                        crate::spec::render_ms(held_ms),
                        crate::spec::render_ms(bound_ms)
                    )))
                } else if job.processes.is_empty() && !job.frozen {
                    // Its job is gone: reconcile records its end.
                    None
                } else if !job.marked {
                    Some(Step::Complete)
                } else if !job.whole() {
                    Some(Step::Restop(job.running()))
                } else {
                    None
                }
            }
            (Seen::Marked, None) if attempt.suspension_ended.is_some() => Some(Step::Release),
            (Seen::Marked, None) => Some(Step::Continue),
            _ => None,
        };
        steps.extend(step.map(|step| (id.clone(), *number, step)));
    }
    steps
}

/// Applies the steps that need no record and returns the SuspensionEnded records, to commit
/// before [`end`] applies them. A suspension that cannot be completed ends too.
pub(super) fn apply(
    steps: &[(TaskId, u32, Step)],
    present: &[GpuSample],
    runner: &dyn AttemptRunner,
    config: &Config,
    budget: &Budget,
    now_ms: u64,
) -> Vec<Record> {
    let mut records = Vec::new();
    let mut ended = |task: &TaskId, attempt: u32, reason: String| {
        let event = Event::SuspensionEnded { task: task.clone(), attempt, reason };
        records.push(Record { time_ms: now_ms, event });
    };
    for (task, attempt, step) in steps {
        let attempt = *attempt;
        match step {
            Step::End(reason) => ended(task, attempt, reason.clone()),
            Step::Complete => {
                if let Err(why) = complete(task, attempt, present, runner, config, budget) {
                    ended(task, attempt, format!("its suspension could not be completed ({why})"));
                }
            }
            Step::Restop(pids) => {
                let shown: Vec<String> = pids.iter().map(u32::to_string).collect();
                eprintln!(
                    "carma tick: {task} attempt {attempt} is suspended, yet process(es) {} ran: stopped again",
                    shown.join(", ")
                );
                if let Err(why) = runner.set_job_stopped(task.as_str(), attempt, true) {
                    ended(
                        task,
                        attempt,
                        format!("it ran while suspended and cannot be stopped again ({why})"),
                    );
                }
            }
            Step::Continue => super::suspend::continue_job(task, attempt, runner, config, budget),
            Step::Release => release(task, attempt, runner),
        }
    }
    records
}

/// The suspension of a tick that died after journaling it: what is left of `suspend::stop_job`.
fn complete(
    task: &TaskId,
    attempt: u32,
    present: &[GpuSample],
    runner: &dyn AttemptRunner,
    config: &Config,
    budget: &Budget,
) -> Result<(), String> {
    let binary = cuda_checkpoint::locate(config.sched.preemption.cuda_checkpoint.as_deref())?;
    let gpu_pids = super::suspend::gpu_processes(runner, present, task, attempt).unwrap_or_default();
    let states = cuda_checkpoint::get_states(&binary, &gpu_pids, budget);
    let mut running = Vec::new();
    for (pid, state) in gpu_pids.iter().zip(states) {
        match state {
            Ok(state) if state == "running" => running.push(*pid),
            Ok(_) => {}
            Err(why) => return Err(format!("`cuda-checkpoint --get-state --pid {pid}` refused: {why}")),
        }
    }
    super::suspend::stop_job(task, attempt, &running, &binary, runner, budget)
}

/// An ended suspension's job: continued so its stop reaches it, and the mark removed.
fn release(task: &TaskId, attempt: u32, runner: &dyn AttemptRunner) {
    if let Err(why) = runner.set_job_stopped(task.as_str(), attempt, false) {
        eprintln!("carma tick: {task} attempt {attempt}: {why}");
        return;
    }
    if let Err(why) = runner.mark_suspension(task.as_str(), attempt, false) {
        eprintln!("carma tick: {task} attempt {attempt}: {why}");
    }
}

/// Applies committed SuspensionEnded records: the attempt asked to stop, then its job released
/// (continued, so the stop reaches it, and its mark removed).
pub(super) fn end(records: &[Record], runner: &mut dyn AttemptRunner) {
    for record in records {
        let Event::SuspensionEnded { task, attempt, .. } = &record.event else { continue };
        // Best effort: reconcile asks again every tick until the attempt has ended.
        let _ = runner.stop(task.as_str(), *attempt);
        release(task, *attempt, runner);
    }
}

/// The records of the end of an attempt whose suspension ended: Stopped and Requeued (a user
/// requeue: no retry used), whatever its exit says; `None` for any other attempt.
pub(super) fn verdict(task: &Task, attempt: u32, outcome: &str) -> Option<Vec<Event>> {
    let why = task.attempts.iter().rev().find(|a| a.number == attempt)?.suspension_ended.as_ref()?;
    Some(vec![
        Event::Stopped {
            task: task.id.clone(),
            attempt,
            outcome: format!("{outcome}: its suspension ended"),
        },
        Event::Requeued {
            task: task.id.clone(),
            recovery: false,
            requirement_mib: None,
            recovery_mode: RequeueMode::User,
            reason: format!("its suspension ended: {why}; not counted as a retry"),
        },
    ])
}

#[cfg(test)]
#[path = "suspended_tests.rs"]
mod tests;
