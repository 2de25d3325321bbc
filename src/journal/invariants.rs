//! What must hold of a [`State`]:
//! - [`State::check`]: of every State the fold produces, whatever the records (property-tested
//!   in `journal::tests::fold_is_total_and_keeps_invariants`);
//! - [`State::check_decisions`]: of every State a correct tick leaves, which the fold alone
//!   cannot promise (it takes a Placed on any GPU).
//!
//! The simulator checks both after every tick (`sim::driver`), so a broken invariant names the
//! seed and the tick where it first broke instead of surfacing at the end of a run.

use std::collections::BTreeMap;

use super::phase::Phase;
use super::state::{State, Task};

impl State {
    /// The invariants of a fold, each broken one as a sentence naming the task. Cheap: one
    /// pass over the tasks.
    pub fn check(&self) -> Result<(), Vec<String>> {
        let mut broken = Vec::new();
        for task in self.tasks.values() {
            let id = &task.id;
            let open: Vec<_> = task.attempts.iter().filter(|a| a.ended_ms.is_none()).collect();
            if open.len() > 1 {
                broken.push(format!("task {id}: {} attempts open at once", open.len()));
            }
            if let Some(a) = open.first()
                && task.attempts.last().map(|l| l.number) != Some(a.number)
            {
                broken.push(format!("task {id}: attempt {} is open but not the latest", a.number));
            }
            if let Some(why) = phase_contradiction(task) {
                broken.push(format!("task {id}: {why}"));
            }
        }
        if broken.is_empty() { Ok(()) } else { Err(broken) }
    }

    /// The invariants of the tick's decisions: attempts numbered in order, never more OOMs
    /// than attempts, and an exclusive attempt holds its GPUs alone.
    pub fn check_decisions(&self) -> Result<(), Vec<String>> {
        let mut broken = Vec::new();
        // GPU -> (open attempts, open exclusive attempts).
        let mut on_gpu: BTreeMap<&str, (u32, u32)> = BTreeMap::new();
        for task in self.tasks.values() {
            if task.attempts.windows(2).any(|w| w[0].number >= w[1].number) {
                broken.push(format!("task {}: attempt numbers do not increase", task.id));
            }
            if task.oom_count as usize > task.attempts.len() {
                broken.push(format!(
                    "task {}: {} OOMs in {} attempts",
                    task.id,
                    task.oom_count,
                    task.attempts.len()
                ));
            }
            let open = task.attempts.iter().filter(|a| a.ended_ms.is_none());
            for attempt in open.filter(|_| !task.status().is_terminal()) {
                for gpu in &attempt.gpus {
                    let slot = on_gpu.entry(gpu.as_str()).or_default();
                    slot.0 += 1;
                    slot.1 += u32::from(attempt.exclusive);
                }
            }
        }
        for (gpu, (open, exclusive)) in on_gpu {
            if exclusive > 0 && open > 1 {
                broken.push(format!("GPU {gpu}: an exclusive attempt shares it with {} other(s)", open - 1));
            }
        }
        if broken.is_empty() { Ok(()) } else { Err(broken) }
    }
}

/// How the task's phase contradicts its attempts, if it does (the promises of
/// [`Phase`](super::phase)). The fold keeps them by construction; this says so of any State.
pub(super) fn phase_contradiction(task: &Task) -> Option<String> {
    let open = task.active_attempt();
    match &task.phase {
        Phase::Waiting { .. } if task.attempts.iter().any(|a| a.ended_ms.is_none()) => {
            Some("pending with an open attempt".into())
        }
        // Status says Placed here: Running needs the open attempt's launch.
        Phase::Active { .. } if open.is_none() => {
            Some(format!("{} without an open attempt", task.status().as_str()))
        }
        Phase::Ended { survivors: Some(_), .. } if open.is_none() => {
            Some("ended with survivors of an attempt that is not open".into())
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::TaskId;
    use crate::journal::{Event, Record};
    use crate::spec::TaskSpec;

    fn placed_state(exclusive: [bool; 2]) -> State {
        let mut state = State::default();
        let mut seq = 0;
        for (n, exclusive) in exclusive.into_iter().enumerate() {
            let task = TaskId::from_parts(1_700_000_000_000, n as u32);
            let spec = TaskSpec { name: "t".into(), command: vec!["true".into()], ..TaskSpec::default() };
            for event in [
                Event::Submitted { task: task.clone(), submitter_uid: 1000, spec },
                Event::Placed {
                    task,
                    attempt: 1,
                    gpus: vec!["GPU-0".into()],
                    exclusive,
                    requirement_mib: None,
                    reason: "r".into(),
                },
            ] {
                seq += 1;
                state.apply(seq, &Record { time_ms: seq, event });
            }
        }
        state
    }

    #[test]
    fn a_sound_fold_passes_and_a_broken_one_is_named() {
        let mut state = placed_state([false, false]);
        assert_eq!(state.check(), Ok(()));
        assert_eq!(state.check_decisions(), Ok(()));
        let task = state.tasks.values_mut().next().unwrap();
        task.attempts.clear();
        let id = task.id.clone();
        assert_eq!(state.check(), Err(vec![format!("task {id}: Placed without an open attempt")]));
    }

    #[test]
    fn an_exclusive_attempt_sharing_its_gpu_is_named() {
        let state = placed_state([true, false]);
        assert_eq!(state.check(), Ok(()), "the fold itself is sound");
        assert_eq!(
            state.check_decisions(),
            Err(vec!["GPU GPU-0: an exclusive attempt shares it with 1 other(s)".to_string()])
        );
    }
}
