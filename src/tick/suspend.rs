//! `mode = "suspend"` in the tick: a victim of a preemption is suspended instead of requeued
//! where `cuda-checkpoint` allows it, and resumed on the same GPUs once they have room.
//!
//! 1. **Choose.** For each Preempted record of this decision, the tick finds the job's
//!    processes ([`AttemptRunner::job_processes`]: never its supervisor; simulated runners have
//!    none) and those of them in the GPU sample (on fake GPUs the fake file lists pids), and
//!    asks `cuda-checkpoint --get-state` about each ([`cuda_checkpoint::refusal`]). Where all
//!    answer `running`, the record becomes `Suspended { task, attempt, by }`; otherwise the
//!    victim is requeued and its reason says exactly why not ("; suspend unavailable (WHY):
//!    requeued instead").
//! 2. **Suspend,** once the records are committed: `cuda-checkpoint --toggle --pid` on each GPU
//!    process (its GPU memory goes to host memory and is released), then SIGSTOP to every
//!    process of the job. The attempt stays open. While its preemptor waits, the scheduler does
//!    not count it on its GPUs and decides the preemptor first (tick/preempt.rs `underway`);
//!    once the preemptor no longer waits, it keeps its requirement there as a launching task
//!    does (`sched::held_room`, tick/place.rs `held_rooms`), so new tasks use only what is left
//!    beyond it. If a toggle fails, those done are toggled back, and the
//!    victim is preempted as with `requeue` after all: Resumed, then its Preempted record
//!    ("; suspend failed (WHY): requeued instead") and the warning.
//! 3. **Resume,** before each placement decision: a suspended attempt whose preemptor no longer
//!    waits and whose GPUs have room again (`sched::may_resume`) gets a Resumed record, then
//!    SIGCONT and `cuda-checkpoint --toggle` on each process that says `checkpointed`.
//!
//! The time limit counts running time only, as Slurm's suspend: once the job is stopped, the
//! tick sends its supervisor a notice ([`AttemptRunner::notice_suspension`]), and the
//! supervisor's clock stands still while the job stays stopped (exec/pause.rs).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use crate::config::Config;
use crate::exec::cuda_checkpoint;
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
) -> Vec<ToSuspend> {
    let preemption = &config.sched.preemption;
    let mut chosen = Vec::new();
    if preemption.mode != PreemptionMode::Suspend {
        return chosen;
    }
    let on_gpus = sampled_pids(present);
    for record in &mut placed.records {
        let Event::Preempted { task, attempt, by, reason, .. } = &mut record.event else { continue };
        let verdict = match runner.job_processes(task.as_str(), *attempt) {
            None => Err("simulated jobs have no processes to suspend".to_string()),
            Some(processes) => {
                let gpu_pids: Vec<u32> = processes.into_iter().filter(|p| on_gpus.contains(p)).collect();
                match cuda_checkpoint::refusal(preemption.cuda_checkpoint.as_deref(), &gpu_pids) {
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

/// What became of the suspends that failed: their records and the victims to warn.
#[derive(Default)]
pub(super) struct Undone {
    /// Resumed, then the Preempted record the victim would have had, its reason saying why.
    pub records: Vec<Record>,
    /// The victims, to warn as any preempted attempt once the records are committed.
    pub notices: Vec<(TaskId, u32)>,
}

/// Suspends each chosen victim: `--toggle` on its GPU processes, then SIGSTOP to the job. A
/// victim whose toggle fails is toggled back where it was done, and preempted as with
/// `requeue` after all: Resumed, then its Preempted record ("; suspend failed (WHY): requeued
/// instead").
pub(super) fn suspend(chosen: &[ToSuspend], runner: &dyn AttemptRunner, now_ms: u64) -> Undone {
    let mut undone = Undone::default();
    for victim in chosen {
        let mut toggled = Vec::new();
        let failed =
            victim.gpu_pids.iter().find_map(|&pid| match cuda_checkpoint::toggle(&victim.binary, pid) {
                Ok(()) => {
                    toggled.push(pid);
                    None
                }
                Err(why) => Some(format!("`cuda-checkpoint --toggle --pid {pid}` failed: {why}")),
            });
        if let Some(why) = failed {
            for &pid in &toggled {
                let _ = cuda_checkpoint::toggle(&victim.binary, pid);
            }
            let resumed = Event::Resumed { task: victim.task.clone(), attempt: victim.attempt };
            let mut preempted = victim.preempted.clone();
            if let Event::Preempted { reason, .. } = &mut preempted {
                reason.push_str(&format!("; suspend failed ({why}): requeued instead"));
            }
            undone.records.extend([resumed, preempted].map(|event| Record { time_ms: now_ms, event }));
            undone.notices.push((victim.task.clone(), victim.attempt));
            continue;
        }
        let processes = runner.job_processes(victim.task.as_str(), victim.attempt).unwrap_or_default();
        signal(&processes, libc::SIGSTOP);
        // Its time limit stands still until it runs again (exec/pause.rs).
        if let Err(why) = runner.notice_suspension(victim.task.as_str(), victim.attempt) {
            eprintln!(
                "carma tick: {} attempt {}: its supervisor was not told of the suspension ({why}); \
                 suspended time counts against its time limit",
                victim.task, victim.attempt
            );
        }
    }
    undone
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
            Some((task, attempt, super::place::suspended_view(state, task, attempt)?))
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

/// Resumes the attempts of committed Resumed records: SIGCONT to the job, then `--toggle` on
/// each of its processes that says `checkpointed`.
pub(super) fn resume(records: &[Record], runner: &dyn AttemptRunner, config: &Config) {
    for record in records {
        let Event::Resumed { task, attempt } = &record.event else { continue };
        let processes = runner.job_processes(task.as_str(), *attempt).unwrap_or_default();
        signal(&processes, libc::SIGCONT);
        let binary = match cuda_checkpoint::locate(config.sched.preemption.cuda_checkpoint.as_deref()) {
            Ok(binary) => binary,
            Err(why) => {
                eprintln!("carma tick: {task} attempt {attempt} resumed without its CUDA state: {why}");
                continue;
            }
        };
        for pid in processes {
            if cuda_checkpoint::get_state(&binary, pid).is_ok_and(|state| state == "checkpointed")
                && let Err(why) = cuda_checkpoint::toggle(&binary, pid)
            {
                eprintln!(
                    "carma tick: {task} attempt {attempt}: `cuda-checkpoint --toggle --pid {pid}` failed: {why}"
                );
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

/// Sends `signal` to each of `pids` that is still the process the table names.
fn signal(pids: &[u32], signal: i32) {
    if pids.is_empty() {
        return;
    }
    for entry in crate::exec::proctable::read_table().iter().filter(|e| pids.contains(&e.pid)) {
        let _ = crate::exec::proctable::signal_entry(entry, signal);
    }
}

#[cfg(test)]
#[path = "suspend_tests.rs"]
mod tests;
