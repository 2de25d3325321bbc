//! The tick's side of the one relaunch rule (`sched::relaunch`): an attempt that ended for its
//! GPU memory, stopped by enforcement over its share or dead of a corroborated out-of-memory,
//! turned into the rule's input from State and back into records.
//!
//! - **Over its share** (the attempt's MemoryExceeded named whose figure the share was): any
//!   end but an exit 0 before the stop reached the job is Stopped, then Requeued with the
//!   raised figure (main queue or recovery queue, by whose miss it was) or, once the task's
//!   retries are spent, Failed. A job that exited 0 first has finished. An attempt that
//!   vanished after it was found over its share (its exit record lost, a reboot) is Lost,
//!   then relaunched the same way (`lost_over_share`).
//! - **A corroborated out-of-memory**: after its OomDetected, Requeued or Failed the same way.
//!
//! Both count as memory ends: the `k`-th (OOMs plus over-share stops, this one included) is
//! relaunched while `k ≤` the task's retries (its `max_retries`, held to `[limits]
//! retries-max`). Each new attempt is charged to fair share like any (`tick::gate`), and the
//! raised figure reaches the task's siblings and the next runs of its workload through the
//! fold of the Requeued record (`State::array_raised`, `WorkloadHistory::raised`).

use crate::config::Config;
use crate::exec::ExitOutcome;
use crate::journal::state::{Attempt, ExceededMemory};
use crate::journal::{Event, RequeueMode, State, Task};
use crate::sched::{self, MemoryEnd, RelaunchDecision, RelaunchInput, RelaunchQueue};

use super::place::requirement_mib;
use super::requeue::RetryBudget;
use super::runner::AttemptExit;

/// The records of the end of an attempt that enforcement stopped over its share (see the
/// module docs); `None` for any other attempt, and for a job that exited 0 before the stop
/// reached it (it finished).
pub(super) fn over_share_end(
    state: &State,
    task: &Task,
    attempt: &Attempt,
    exit: &AttemptExit,
    outcome: &str,
    peak_mib: Option<u64>,
    config: &Config,
) -> Option<Vec<Event>> {
    if exit.outcome == (ExitOutcome::Exited { code: 0 }) {
        return None;
    }
    let input = over_share_input(state, task, attempt, peak_mib, config)?;
    // It died of out-of-memory before the stop reached it: carma's own reading of it over its
    // share is the evidence, and the end is an out-of-memory (counted as one memory end).
    let oom = exit.oom.as_ref().filter(|_| {
        matches!(exit.outcome, ExitOutcome::Exited { .. } | ExitOutcome::Signaled { .. })
            && !super::host_memory::killed_at_limit(exit)
    });
    let first = match oom {
        Some(evidence) => Event::OomDetected {
            task: task.id.clone(),
            attempt: attempt.number,
            evidence: evidence.clone(),
            peak_mib: input.peak_mib,
        },
        None => Event::Stopped {
            task: task.id.clone(),
            attempt: attempt.number,
            outcome: format!("{outcome}: stopped over its GPU memory share"),
        },
    };
    match decide(task, attempt.number, &input, config, "over its GPU memory share") {
        failed @ Event::Failed { .. } if oom.is_none() => Some(vec![failed]),
        then => Some(vec![first, then]),
    }
}

/// The records of an attempt that carma found over its share and that then vanished before its
/// end was read (its exit record lost, the machine rebooted): Lost, then the relaunch rule as
/// for a stop over its share, since the stop and its reading were carma's own. `None` for any
/// other attempt (an ordinary lost attempt). Without this, a lost exit record sent the task
/// back with the very figure it had crossed, to be stopped again for another retry
/// (`carma bench faults`: 71 of seeds 1-100, 2026-12-02).
pub(super) fn lost_over_share(
    state: &State,
    task: &Task,
    attempt: &Attempt,
    reason: &str,
    config: &Config,
) -> Option<Vec<Event>> {
    let input = over_share_input(state, task, attempt, attempt.peak_observed_mib, config)?;
    let lost = Event::Lost { task: task.id.clone(), attempt: attempt.number, reason: reason.to_string() };
    let outcome = format!("lost ({reason}) after it was found over its GPU memory share");
    Some(vec![lost, decide(task, attempt.number, &input, config, &outcome)])
}

/// The rule's input for an attempt enforcement found over its share (`None` for any other, and
/// for records from before relaunches, which name no share source).
fn over_share_input(
    state: &State,
    task: &Task,
    attempt: &Attempt,
    peak_mib: Option<u64>,
    config: &Config,
) -> Option<RelaunchInput> {
    let exceeded = attempt.memory_exceeded.as_ref()?;
    let source = exceeded.share_source?;
    Some(RelaunchInput {
        end: MemoryEnd::OverShare {
            used_mib: exceeded.used_mib,
            gpu: gpu_name(state, exceeded),
            given: attempt.gpus.contains(&exceeded.gpu),
        },
        share_mib: Some(exceeded.share_mib).filter(|_| attempt.gpus.contains(&exceeded.gpu)),
        source,
        peak_mib: Some(peak_mib.unwrap_or(0).max(exceeded.used_mib)),
        estimate_mib: requirement_mib(task, config.tick.memory),
        previous_mib: task.recovery_requirement_mib,
        memory_ends: memory_ends(task),
        retries_max: RetryBudget::of(task, &config.limits).retries_max,
    })
}

/// The record after a corroborated out-of-memory of `attempt` (its OomDetected comes first):
/// Requeued with the raised figure, or Failed once the task's retries are spent.
pub(super) fn after_oom(task: &Task, attempt: &Attempt, peak_mib: Option<u64>, config: &Config) -> Event {
    // An exclusive attempt placed without a figure had no share: nobody was beside it.
    let share = (attempt.requirement_mib.is_some() || !attempt.exclusive)
        .then(|| super::share::attempt_share(task, attempt, config));
    let input = RelaunchInput {
        end: MemoryEnd::OutOfMemory,
        share_mib: share.map(|(mib, _)| mib),
        source: share.map_or(sched::ShareSource::Learned, |(_, source)| source),
        peak_mib,
        estimate_mib: requirement_mib(task, config.tick.memory),
        previous_mib: task.recovery_requirement_mib,
        // The OomDetected before this record is not folded yet.
        memory_ends: memory_ends(task) + 1,
        retries_max: RetryBudget::of(task, &config.limits).retries_max,
    };
    decide(task, attempt.number, &input, config, "out of memory")
}

/// The rule's decision as a record: Requeued (main or recovery) or Failed with `outcome`.
fn decide(task: &Task, attempt: u32, input: &RelaunchInput, config: &Config, outcome: &str) -> Event {
    let margin_mib = config.enforce.margin_mib;
    match sched::relaunch(input, &config.sched.recovery, margin_mib) {
        RelaunchDecision::Relaunch { requirement_mib, queue, reason } => {
            let (recovery, recovery_mode) = match queue {
                RelaunchQueue::Main => (false, RequeueMode::Main),
                RelaunchQueue::Recovery(mode) => (true, RequeueMode::Recovery(mode)),
            };
            Event::Requeued {
                task: task.id.clone(),
                recovery,
                requirement_mib: Some(requirement_mib),
                recovery_mode,
                reason,
            }
        }
        RelaunchDecision::GiveUp { reason } => Event::Failed {
            task: task.id.clone(),
            attempt,
            outcome: outcome.into(),
            reason: RetryBudget::of(task, &config.limits).name_bound(reason),
        },
    }
}

/// The task's memory ends so far: its out-of-memory ends and its attempts stopped over their
/// share (those whose end relaunches the task; one that also died of out-of-memory counts once,
/// as an out-of-memory).
pub(super) fn memory_ends(task: &Task) -> u32 {
    let stopped = task
        .attempts
        .iter()
        .filter(|a| a.memory_exceeded.as_ref().is_some_and(|m| m.share_source.is_some()))
        .filter(|a| a.outcome.as_deref() != Some("out of memory"))
        .count();
    task.oom_count.saturating_add(u32::try_from(stopped).unwrap_or(u32::MAX))
}

/// The GPU as reasons name it (`GPU0`), or its UUID when the State does not know it.
fn gpu_name(state: &State, exceeded: &ExceededMemory) -> String {
    state.gpus.get(&exceeded.gpu).map_or_else(|| exceeded.gpu.clone(), |gpu| format!("GPU{}", gpu.index))
}
