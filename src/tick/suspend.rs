//! `mode = "suspend"` in the tick: a victim of a preemption is suspended instead of requeued
//! where `cuda-checkpoint` allows it, and resumed on the same GPUs once they have room.
//!
//! 1. **Choose.** For each Preempted record of this decision, the tick finds the job's
//!    processes ([`AttemptRunner::job_processes`]: never its supervisor; simulated runners have
//!    none) and those of them in the GPU sample (on fake GPUs the fake file lists pids), and
//!    asks `cuda-checkpoint --get-state` about them, all at once ([`cuda_checkpoint::refusal`]).
//!    Where all answer `running`, the record becomes `Suspended { task, attempt, by }`;
//!    otherwise the victim is requeued and its reason says exactly why not ("; suspend
//!    unavailable (WHY): requeued instead").
//! 2. **Suspend,** once the records are committed ([`stop_job`]): `cuda-checkpoint --toggle
//!    --pid` on its GPU processes at once (their GPU memory goes to host memory and is
//!    released), then the job is stopped **as a whole** (exec/freeze.rs: SIGSTOP to every
//!    process, and its cgroup frozen where it has one, so nobody's SIGCONT runs it again), then
//!    the tick's mark that the suspension was applied. The attempt stays open. While its
//!    preemptor waits, the scheduler does not count it on its GPUs and decides the preemptor
//!    first (tick/preempt.rs `underway`); once the preemptor no longer waits, it keeps its
//!    requirement there as a launching task does (`sched::held_room`, tick/place.rs
//!    `held_rooms`), so new tasks use only what is left beyond it. If a toggle fails, those
//!    done are toggled back, and the victim is preempted as with `requeue` after all: Resumed,
//!    then its Preempted record ("; suspend failed (WHY): requeued instead") and the warning.
//! 3. **Resume,** before each placement decision: a suspended attempt whose preemptor no longer
//!    waits and whose GPUs have room again (`sched::may_resume`) gets a Resumed record, then
//!    [`continue_job`]: the job continued as a whole, `cuda-checkpoint --toggle` on each process
//!    that says `checkpointed`, and the mark removed.
//!
//! Every `cuda-checkpoint` call of a tick shares one budget (`cuda-checkpoint-budget`), so one
//! job's slow tool never stalls everyone's tick: a victim whose tool did not answer within it
//! is requeued, saying so. What a tick killed after a commit left undone, and a suspension that
//! someone else continued or that lasts too long, are tick/suspended.rs's.
//!
//! The time limit counts running time only, as Slurm's suspend: once the job is stopped, the
//! tick sends its supervisor a notice ([`AttemptRunner::notice_suspension`]), and the
//! supervisor's clock stands still while the whole job stays stopped (exec/pause.rs).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::config::Config;
use crate::exec::cuda_checkpoint::{self, Budget};
use crate::gpu::GpuSample;
use crate::id::TaskId;
use crate::journal::{Event, Record, State};
use crate::sched::PreemptionMode;

use super::runner::AttemptRunner;

/// A victim to suspend once its Suspended record is committed.
pub(super) struct ToSuspend {
    task: TaskId,
    attempt: u32,
    /// Its Preempted record, for the requeue should the suspend fail.
    preempted: Event,
    binary: PathBuf,
    gpu_pids: Vec<u32>,
}

/// With `mode = "suspend"`, turns each Preempted record whose victim can be suspended into a
/// Suspended record (returned, to suspend after the commit; it gets no warning signal) and
/// says in the others' reasons why not. Nothing otherwise.
pub(super) fn choose(
    placed: &mut super::place::Placed,
    present: &[GpuSample],
    runner: &dyn AttemptRunner,
    config: &Config,
    budget: &Budget,
) -> Vec<ToSuspend> {
    let preemption = &config.sched.preemption;
    let mut chosen = Vec::new();
    if preemption.mode != PreemptionMode::Suspend {
        return chosen;
    }
    for record in &mut placed.records {
        let Event::Preempted { task, attempt, by, reason, .. } = &mut record.event else { continue };
        let verdict = match gpu_processes(runner, present, task, *attempt) {
            None => Err("simulated jobs have no processes to suspend".to_string()),
            Some(gpu_pids) => {
                match cuda_checkpoint::refusal(preemption.cuda_checkpoint.as_deref(), &gpu_pids, budget) {
                    Some(why) => Err(why),
                    None => cuda_checkpoint::locate(preemption.cuda_checkpoint.as_deref())
                        .map(|binary| (binary, gpu_pids)),
                }
            }
        };
        match verdict {
            Ok((binary, gpu_pids)) => {
                let (task, attempt, by) = (task.clone(), *attempt, by.clone());
                let suspended = Event::Suspended { task: task.clone(), attempt, by };
                let preempted = std::mem::replace(&mut record.event, suspended);
                chosen.push(ToSuspend { task, attempt, preempted, binary, gpu_pids });
            }
            Err(why) => reason.push_str(&format!("; suspend unavailable ({why}): requeued instead")),
        }
    }
    // A suspended job is not warned: a SIGTERM would end the stopped job at once.
    placed
        .preempt_notices
        .retain(|(task, attempt)| !chosen.iter().any(|c| &c.task == task && c.attempt == *attempt));
    chosen
}

/// The job's processes that the GPU sample lists; `None` for a simulated runner.
pub(super) fn gpu_processes(
    runner: &dyn AttemptRunner,
    present: &[GpuSample],
    task: &TaskId,
    attempt: u32,
) -> Option<Vec<u32>> {
    let on_gpus = sampled_pids(present);
    let processes = runner.job_processes(task.as_str(), attempt)?;
    Some(processes.into_iter().filter(|p| on_gpus.contains(p)).collect())
}

/// What became of the suspends that failed: their records and the victims to warn.
#[derive(Default)]
pub(super) struct Undone {
    /// Resumed, then the Preempted record the victim would have had, its reason saying why.
    pub records: Vec<Record>,
    /// The victims, to warn as any preempted attempt once the records are committed.
    pub notices: Vec<(TaskId, u32)>,
}

/// Suspends each chosen victim ([`stop_job`]). A victim whose toggle fails is toggled back
/// where it was done, and preempted as with `requeue` after all: Resumed, then its Preempted
/// record ("; suspend failed (WHY): requeued instead").
pub(super) fn suspend(
    chosen: &[ToSuspend],
    runner: &dyn AttemptRunner,
    now_ms: u64,
    budget: &Budget,
) -> Undone {
    let mut undone = Undone::default();
    for victim in chosen {
        let Err(why) =
            stop_job(&victim.task, victim.attempt, &victim.gpu_pids, &victim.binary, runner, budget)
        else {
            continue;
        };
        let resumed = Event::Resumed { task: victim.task.clone(), attempt: victim.attempt };
        let mut preempted = victim.preempted.clone();
        if let Event::Preempted { reason, .. } = &mut preempted {
            reason.push_str(&format!("; suspend failed ({why}): requeued instead"));
        }
        undone.records.extend([resumed, preempted].map(|event| Record { time_ms: now_ms, event }));
        undone.notices.push((victim.task.clone(), victim.attempt));
    }
    undone
}

/// Applies a committed suspension: `--toggle` on `gpu_pids` at once, then the job stopped as
/// a whole, then the tick's mark and the supervisor's notice. A failed toggle is undone on
/// those done (the job was not stopped) and is the `Err`.
pub(super) fn stop_job(
    task: &TaskId,
    attempt: u32,
    gpu_pids: &[u32],
    binary: &Path,
    runner: &dyn AttemptRunner,
    budget: &Budget,
) -> Result<(), String> {
    if let Err((toggled, why)) = cuda_checkpoint::toggle_all(binary, gpu_pids, budget) {
        let _ = cuda_checkpoint::toggle_all(binary, &toggled, budget);
        return Err(why);
    }
    if let Err(why) = runner.set_job_stopped(task.as_str(), attempt, true) {
        eprintln!("carma tick: {task} attempt {attempt}: {why}");
    }
    if let Err(why) = runner.mark_suspension(task.as_str(), attempt, true) {
        eprintln!("carma tick: {task} attempt {attempt}: {why}");
    }
    // Its time limit stands still until it runs again (exec/pause.rs).
    if let Err(why) = runner.notice_suspension(task.as_str(), attempt) {
        eprintln!(
            "carma tick: {task} attempt {attempt}: its supervisor was not told of the suspension ({why}); \
             suspended time counts against its time limit"
        );
    }
    Ok(())
}

/// Resumed records for the suspended attempts that may resume now (`sched::may_resume`).
pub(super) fn resume_due(
    state: &State,
    present: &[GpuSample],
    observed_mib: &BTreeMap<TaskId, u64>,
    config: &Config,
    now_ms: u64,
) -> Vec<Record> {
    let mut due = Vec::new();
    let suspended: Vec<_> = state
        .tasks
        .values()
        .filter_map(|task| {
            let attempt = task.active_attempt()?;
            Some((task, attempt, super::place::suspended_view(state, task, attempt, observed_mib)?))
        })
        .collect();
    if suspended.is_empty() {
        return due;
    }
    let gpus = super::place::gpu_views(state, present, now_ms, config.tick.window);
    let mut running = super::place::running_tasks(state, observed_mib);
    for (task, attempt, candidate) in suspended {
        if crate::sched::may_resume(&candidate, &gpus, &running, &config.sched, now_ms) {
            // Its room is taken from here on, for the next suspended attempt on the same GPUs.
            running.push(crate::sched::RunningTask {
                id: candidate.id,
                gpus: candidate.gpus,
                requirement_mib: candidate.requirement_mib,
                launched_ms: now_ms,
                observed_mib: None,
                exclusive: attempt.exclusive,
                gate: crate::sched::RunningGate {
                    user: task.submitter_uid,
                    array_id: None,
                    time_limit_ms: None,
                },
                sm_estimate: None,
                runtime_estimate_ms: None,
            });
            let event = Event::Resumed { task: task.id.clone(), attempt: attempt.number };
            due.push(Record { time_ms: now_ms, event });
        }
    }
    due
}

/// Resumes the attempts of committed Resumed records ([`continue_job`]).
pub(super) fn resume(records: &[Record], runner: &dyn AttemptRunner, config: &Config, budget: &Budget) {
    for record in records {
        if let Event::Resumed { task, attempt } = &record.event {
            continue_job(task, *attempt, runner, config, budget);
        }
    }
}

/// Applies a committed resume (or the end of a suspension): the job continued as a whole,
/// then `--toggle` on each of its processes that says `checkpointed`, then the tick's mark
/// removed, only once all of that was done (so a later tick finishes what is left).
pub(super) fn continue_job(
    task: &TaskId,
    attempt: u32,
    runner: &dyn AttemptRunner,
    config: &Config,
    budget: &Budget,
) {
    let said = |why: &str| eprintln!("carma tick: {task} attempt {attempt}: {why}");
    if let Err(why) = runner.set_job_stopped(task.as_str(), attempt, false) {
        return said(&why);
    }
    let processes = runner.job_processes(task.as_str(), attempt).unwrap_or_default();
    let binary = match cuda_checkpoint::locate(config.sched.preemption.cuda_checkpoint.as_deref()) {
        Ok(binary) => binary,
        Err(why) => {
            said(&format!("resumed without its CUDA state: {why}"));
            let _ = runner.mark_suspension(task.as_str(), attempt, false);
            return;
        }
    };
    let states = cuda_checkpoint::get_states(&binary, &processes, budget);
    let checkpointed: Vec<u32> = processes
        .iter()
        .zip(&states)
        .filter(|(_, state)| state.as_deref().is_ok_and(|s| s == "checkpointed"))
        .map(|(pid, _)| *pid)
        .collect();
    let unanswered =
        states.iter().any(|state| state.as_ref().is_err_and(|why| cuda_checkpoint::unanswered(why)));
    match cuda_checkpoint::toggle_all(&binary, &checkpointed, budget) {
        Err((_, why)) => said(&format!("{why}; tried again next tick")),
        Ok(()) if unanswered => {
            said("cuda-checkpoint did not say every process's state; asked again next tick")
        }
        Ok(()) => {
            if let Err(why) = runner.mark_suspension(task.as_str(), attempt, false) {
                said(&why);
            }
        }
    }
}

/// The pids in the GPU sample (whole GPUs and MIG instances).
fn sampled_pids(present: &[GpuSample]) -> BTreeSet<u32> {
    present
        .iter()
        .flat_map(|s| s.processes.iter().chain(s.mig.instances.iter().flat_map(|m| m.processes.iter())))
        .map(|p| p.pid)
        .collect()
}

#[cfg(test)]
#[path = "suspend_tests.rs"]
mod tests;
