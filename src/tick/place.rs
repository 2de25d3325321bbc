//! From State to the decision core and back: build `sched`'s input, turn its decision into
//! Placed and Pending records.
//!
//! This is the only place that knows both State and `sched`'s types; `sched` itself stays
//! ignorant of the journal.

use std::collections::BTreeMap;

use crate::config::{Config, MemorySource};
use crate::gpu::GpuSample;
use crate::id::TaskId;
use crate::journal::state::GpuState;
use crate::journal::{Event, Record, State, Task};
use crate::sched::{
    self, GpuView, Recovery, RecoveryMode, RunningTask, SchedInput, WaitingTask, WindowSample,
};

/// An attempt the decision placed, to be launched after its Placed record is committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedAttempt {
    pub task: TaskId,
    pub attempt: u32,
    pub gpus: Vec<String>,
    pub requirement_mib: Option<u64>,
}

/// What one decision produced.
#[derive(Debug, Default)]
pub struct Placed {
    pub records: Vec<Record>,
    pub attempts: Vec<PlannedAttempt>,
    pub rr_cursor: u32,
}

/// Runs the decision core on `state` and returns the records to commit before launching.
/// `present` are this tick's samples (GPUs that can take work now); `observed_mib` is each
/// running task's memory on its busiest GPU, from the same samples.
pub fn place(
    state: &State,
    present: &[GpuSample],
    observed_mib: &BTreeMap<TaskId, u64>,
    config: &Config,
    now_ms: u64,
    no_gpu_reason: Option<&str>,
) -> Placed {
    // Sorted by id (State's order), so a pending reason can find its task by binary search.
    let waiting_refs: Vec<&Task> = state.waiting().collect();
    let waiting = waiting_tasks(&waiting_refs, config);
    if waiting.is_empty() {
        return Placed { rr_cursor: state.rr_cursor, ..Placed::default() };
    }
    if present.is_empty() {
        let reason = format!("no GPUs available: {}", no_gpu_reason.unwrap_or("the probe found none"));
        let records = waiting_refs.iter().filter_map(|task| pending_record(task, &reason, now_ms)).collect();
        return Placed { records, attempts: Vec::new(), rr_cursor: state.rr_cursor };
    }
    let gpus = gpu_views(state, present, now_ms, config.tick.window);
    let running = running_tasks(state, observed_mib);
    let input = SchedInput {
        now_ms,
        gpus: &gpus,
        waiting: &waiting,
        running: &running,
        rr_cursor: state.rr_cursor,
        config: &config.sched,
    };
    let decision = sched::decide(&input);
    let mut placed = Placed { rr_cursor: decision.rr_cursor, ..Placed::default() };
    for placement in decision.placements {
        let Some(task) = TaskId::parse(&placement.task_id).and_then(|id| state.tasks.get(&id)) else {
            unreachable!("sched placed {} which is not a waiting task", placement.task_id)
        };
        let attempt = task.next_attempt_number();
        placed.records.push(Record {
            time_ms: now_ms,
            event: Event::Placed {
                task: task.id.clone(),
                attempt,
                gpus: placement.gpus.clone(),
                exclusive: placement.exclusive,
                requirement_mib: placement.requirement_mib,
                reason: placement.reason,
            },
        });
        placed.attempts.push(PlannedAttempt {
            task: task.id.clone(),
            attempt,
            gpus: placement.gpus,
            requirement_mib: placement.requirement_mib,
        });
    }
    // sched walks the queue by submit order, which is almost always id order too: try the
    // task after the last one found before searching.
    let mut next = 0;
    for pending in decision.pending {
        let at = match waiting_refs.get(next) {
            Some(task) if task.id.as_str() == pending.task_id => next,
            _ => match waiting_refs.binary_search_by(|t| t.id.as_str().cmp(&pending.task_id)) {
                Ok(found) => found,
                Err(_) => unreachable!("sched left {} pending which is not a waiting task", pending.task_id),
            },
        };
        next = at + 1;
        placed.records.extend(pending_record(waiting_refs[at], &pending.reason, now_ms));
    }
    placed
}

/// A Pending record only when the reason changed, so a queue that waits for hours does not
/// write a record per task per tick.
fn pending_record(task: &Task, reason: &str, now_ms: u64) -> Option<Record> {
    (task.pending_reason.as_deref() != Some(reason)).then(|| Record {
        time_ms: now_ms,
        event: Event::Pending { task: task.id.clone(), reason: reason.to_string() },
    })
}

/// The memory figure placement uses for a task, per GPU.
pub fn requirement_mib(task: &Task, source: MemorySource) -> Option<u64> {
    match source {
        MemorySource::None => None,
        MemorySource::Declared => task.estimate.as_ref().map(|e| e.upper_mib).or(task.spec.memory_mib),
    }
}

fn waiting_tasks(waiting: &[&Task], config: &Config) -> Vec<WaitingTask> {
    waiting
        .iter()
        .map(|task| {
            let requirement = requirement_mib(task, config.tick.memory);
            let recovery = task.in_recovery.then(|| Recovery {
                oom_count: task.oom_count,
                requirement_mib: task
                    .recovery_requirement_mib
                    .or(requirement)
                    .unwrap_or(config.sched.recovery.step_mib),
                mode: task
                    .recovery_mode
                    .as_deref()
                    .and_then(|m| m.parse().ok())
                    .unwrap_or(RecoveryMode::Exclusive),
            });
            WaitingTask {
                // Not to_string(): the formatter showed in the profile of a long queue.
                id: task.id.as_str().to_owned(),
                submit_seq: task.submit_seq,
                gpus: task.spec.gpus,
                requirement_mib: requirement,
                recovery,
            }
        })
        .collect()
}

fn gpu_views(state: &State, present: &[GpuSample], now_ms: u64, window_ms: u64) -> Vec<GpuView> {
    present
        .iter()
        .filter_map(|sample| state.gpus.get(&sample.uuid))
        .filter_map(|gpu| sched::window(&window_samples(gpu), now_ms, window_ms))
        .collect()
}

fn window_samples(gpu: &GpuState) -> Vec<WindowSample> {
    gpu.history
        .iter()
        .map(|p| WindowSample {
            uuid: gpu.uuid.clone(),
            index: gpu.index,
            at_ms: p.time_ms,
            memory_total_mib: p.memory_total_mib,
            memory_free_mib: p.memory_free_mib,
            sm_active: p.sm_active,
            sm_occupancy: p.sm_occupancy,
            dram_active: p.dram_active,
        })
        .collect()
}

fn running_tasks(state: &State, observed_mib: &BTreeMap<TaskId, u64>) -> Vec<RunningTask> {
    state
        .tasks
        .values()
        .filter_map(|task| {
            let attempt = task.active_attempt()?;
            Some(RunningTask {
                id: task.id.as_str().to_owned(),
                gpus: attempt.gpus.clone(),
                requirement_mib: attempt.requirement_mib,
                launched_ms: attempt.launched_ms.unwrap_or(attempt.placed_ms),
                observed_mib: observed_mib.get(&task.id).copied(),
                exclusive: attempt.exclusive,
            })
        })
        .collect()
}
