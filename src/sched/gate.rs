//! The gate: holds, begin times, dependencies and caps (per user, per array), judged before a
//! task is tried on any GPU.
//!
//! A task the gate stops waits with a reason (`Held`, `Dependency: ...`, `UserLimit: ...`,
//! `ArrayLimit: ...`) or, when an `afterok`/`afternotok` dependency can never be satisfied and
//! the task did not ask to be kept, is cancelled; either way it never blocks the queue (it is
//! not the head, and gets no backfill reservation), exactly as a task asking for more GPUs
//! than the machine has. The caps count running tasks plus the placements made earlier in the
//! same decision, so one decision never takes a user or an array past its cap.

use std::collections::HashMap;

use super::reason::gib;
use super::{SchedConfig, SchedInput, WaitingTask};

/// How a dependency must end (Slurm's `afterok`, `afterany`, `afternotok`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DependencyKind {
    /// Start once the dependency finished with exit 0.
    #[default]
    AfterOk,
    /// Start once the dependency ended, however.
    AfterAny,
    /// Start once the dependency failed or was cancelled.
    AfterNotOk,
}

/// Where a dependency is in its life, as the caller knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DependencyState {
    /// Not known (yet): the id was never ingested, or is still in the spool.
    #[default]
    Unknown,
    /// Waiting to be placed.
    Pending,
    /// Placed or running.
    Running,
    /// Ended with exit 0.
    Finished,
    /// Ended otherwise, for good.
    Failed,
    /// Cancelled, or rejected at ingest.
    Cancelled,
}

/// One dependency of a waiting task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dependency {
    /// The full id of the task depended on.
    pub task_id: String,
    /// How it must end.
    pub kind: DependencyKind,
    /// Where it is now, as the caller knows it.
    pub state: DependencyState,
}

/// A task's membership of an array with a cap on how many of it run at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArraySlot {
    /// The array's id.
    pub array_id: String,
    /// The `%N` cap: members of the array that may run at once.
    pub running_max: u32,
}

/// The gate's facts about a waiting task. The default is a task of user 0 with no
/// priority, no hold, no dependency and no array: the paper's plain FIFO task.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TaskGate {
    /// The submitter's uid: fair share and per-user caps are per user.
    pub user: u32,
    /// Priority minus nice; higher goes first in the main queue.
    pub priority: i64,
    /// Held (`--hold`, `carma hold`): it does not start until released.
    pub held: bool,
    /// The tasks it waits for; empty: none.
    pub dependencies: Vec<Dependency>,
    /// Wait instead of being cancelled when a dependency can never be satisfied.
    pub keep_on_dependency_failure: bool,
    /// Set only when the array has a `%N` cap.
    pub array: Option<ArraySlot>,
    /// The task's time limit per attempt: with one, it may backfill onto the head's reserved
    /// GPUs when it will end before the head's reserved start.
    pub time_limit_ms: Option<u64>,
    /// Not before this time, ms since the epoch (`--begin`).
    pub begin_ms: Option<u64>,
    /// The administrator's reservation it runs in (`--reservation`), by name.
    pub reservation: Option<String>,
}

/// The gate's facts about a running task.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RunningGate {
    /// The submitter's uid.
    pub user: u32,
    /// The array the task belongs to, if any.
    pub array_id: Option<String>,
    /// Its time limit: it ends by `launched_ms` plus this at the latest.
    pub time_limit_ms: Option<u64>,
}

/// Each user's recent GPU time, decayed with the fair-share half-life (see
/// [`super::order::decayed_gpu_ms`]); users not listed have none.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct UserUsage {
    /// The user's uid.
    pub user: u32,
    /// Their GPU time, decayed with the half-life, GPU·ms.
    pub gpu_ms: f64,
}

/// The GPUs kept for a blocked head by an earlier decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    /// The blocked head's task id.
    pub task_id: String,
    /// GPU UUIDs.
    pub gpus: Vec<String>,
}

/// The gate's part of a decision's input.
#[derive(Debug, Clone, Copy, Default)]
pub struct GateInput<'a> {
    /// Recent GPU time per user, for fair share.
    pub usage: &'a [UserUsage],
    /// The previous decision's reservation, kept while its task is still the blocked head.
    pub reservation: Option<&'a Reservation>,
    /// Administrators' reservations (`carma reserve`), ended ones included.
    pub gpu_reservations: &'a [super::GpuReservation],
}

/// A task the decision cancels: an `afterok` (or `afternotok`) dependency can never be met.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cancellation {
    /// The task to cancel.
    pub task_id: String,
    /// Why, journaled with its Cancelled record.
    pub reason: String,
}

/// What the gate says about one task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Try it on the GPUs.
    Go,
    /// Leave it waiting, for this reason; it does not block the queue.
    Wait(String),
    /// Cancel it, for this reason.
    Cancel(String),
}

/// What one user holds: running tasks plus placements of this decision.
#[derive(Debug, Clone, Copy, Default)]
struct Held {
    tasks: u32,
    gpus: u32,
    memory_mib: u64,
}

/// The gate's counters during one decision.
pub(super) struct Gate<'a> {
    config: &'a SchedConfig,
    now_ms: u64,
    users: HashMap<u32, Held>,
    arrays: HashMap<&'a str, u32>,
}

impl<'a> Gate<'a> {
    pub(super) fn new(input: &SchedInput<'a>) -> Self {
        let mut gate = Gate {
            config: input.config,
            now_ms: input.now_ms,
            users: HashMap::new(),
            arrays: HashMap::new(),
        };
        for task in input.running {
            let memory_mib = gate.memory_of(task.requirement_mib, task.gpus.len() as u32);
            let held = gate.users.entry(task.gate.user).or_default();
            held.tasks += 1;
            held.gpus += task.gpus.len() as u32;
            held.memory_mib += memory_mib;
            if let Some(array) = &task.gate.array_id {
                *gate.arrays.entry(array.as_str()).or_default() += 1;
            }
        }
        gate
    }

    /// Memory a task holds or would hold: its figure (or the no-figure margin) on each GPU.
    fn memory_of(&self, requirement_mib: Option<u64>, gpus: u32) -> u64 {
        requirement_mib.unwrap_or(self.config.margin_without_figure_mib).saturating_mul(u64::from(gpus))
    }

    /// The requirement a waiting task would be placed with.
    fn requirement_of(task: &WaitingTask) -> Option<u64> {
        task.recovery.as_ref().map(|r| r.requirement_mib).or(task.requirement_mib)
    }

    /// Holds, then dependencies, then the per-array and per-user caps.
    pub(super) fn check(&self, task: &'a WaitingTask) -> Verdict {
        let facts = &task.gate;
        if facts.held {
            return Verdict::Wait("Held: waits until released (carma release)".into());
        }
        if let Some(begin_ms) = facts.begin_ms.filter(|&b| b > self.now_ms) {
            return Verdict::Wait(begin_reason(begin_ms, self.now_ms));
        }
        match judge_dependencies(&facts.dependencies) {
            Judged::Satisfied => {}
            Judged::Waiting(reason) => return Verdict::Wait(reason),
            Judged::Never(reason) if facts.keep_on_dependency_failure => {
                return Verdict::Wait(format!("{reason} (kept: --keep-on-dependency-failure)"));
            }
            Judged::Never(reason) => return Verdict::Cancel(reason),
        }
        if let Some(slot) = &facts.array {
            let running = self.arrays.get(slot.array_id.as_str()).copied().unwrap_or(0);
            if running >= slot.running_max {
                return Verdict::Wait(format!(
                    "ArrayLimit: {running} of {} running (%{})",
                    slot.running_max, slot.running_max
                ));
            }
        }
        match self.user_limit(task) {
            Some(reason) => Verdict::Wait(reason),
            None => Verdict::Go,
        }
    }

    /// Why the task would take its user past a cap, if it would.
    fn user_limit(&self, task: &WaitingTask) -> Option<String> {
        let limits = &self.config.user_limits;
        let held = self.users.get(&task.gate.user).copied().unwrap_or_default();
        let tasks_max = limits.running_tasks_max;
        if tasks_max > 0 && held.tasks + 1 > tasks_max {
            return Some(format!("UserLimit: {} of {tasks_max} running tasks", held.tasks));
        }
        let gpus_max = limits.gpus_max;
        if gpus_max > 0 && held.gpus + task.gpus > gpus_max {
            let needs = if held.gpus < gpus_max || task.gpus > 1 {
                format!(", needs {}", task.gpus)
            } else {
                String::new()
            };
            return Some(format!("UserLimit: {} of {gpus_max} GPUs in use{needs}", held.gpus));
        }
        let memory_max = limits.memory_mib_max;
        let needs_mib = self.memory_of(Self::requirement_of(task), task.gpus);
        if memory_max > 0 && held.memory_mib + needs_mib > memory_max {
            return Some(format!(
                "UserLimit: {} of {} GPU memory reserved, needs {}",
                gib(held.memory_mib),
                gib(memory_max),
                gib(needs_mib)
            ));
        }
        None
    }

    /// Counts a placement made in this decision.
    pub(super) fn placed(&mut self, task: &'a WaitingTask) {
        let memory_mib = self.memory_of(Self::requirement_of(task), task.gpus);
        let held = self.users.entry(task.gate.user).or_default();
        held.tasks += 1;
        held.gpus += task.gpus;
        held.memory_mib += memory_mib;
        if let Some(slot) = &task.gate.array {
            *self.arrays.entry(slot.array_id.as_str()).or_default() += 1;
        }
    }
}

/// `BeginTime: starts at 14:30 (in 12 min)`, local time. The countdown is coarse (whole
/// minutes, whole hours from two hours on, whole days from two days on), so the journaled
/// reason changes at most once a minute.
pub(super) fn begin_reason(begin_ms: u64, now_ms: u64) -> String {
    let left_min = (begin_ms - now_ms).div_ceil(60_000);
    let left = match left_min {
        0..120 => format!("{left_min} min"),
        120..2880 => format!("{} h", left_min / 60),
        _ => format!("{} days", left_min / (24 * 60)),
    };
    format!("BeginTime: starts at {} (in {left})", super::clock::clock_text(begin_ms, now_ms))
}

/// The dependencies' verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Judged {
    Satisfied,
    Waiting(String),
    Never(String),
}

/// Every dependency must be met: `afterok` by Finished, `afterany` by any end, `afternotok` by
/// Failed or Cancelled. One that ended the wrong way can never be met; that wins over the
/// ones still waiting, so the task is cancelled (or marked) at once.
pub(super) fn judge_dependencies(dependencies: &[Dependency]) -> Judged {
    use DependencyKind::*;
    use DependencyState::*;
    let mut first_waiting: Option<&Dependency> = None;
    let mut waiting = 0usize;
    for dependency in dependencies {
        let ended = matches!(dependency.state, Finished | Failed | Cancelled);
        let met = match dependency.kind {
            AfterOk => dependency.state == Finished,
            AfterAny => ended,
            AfterNotOk => matches!(dependency.state, Failed | Cancelled),
        };
        if met {
            continue;
        }
        if ended {
            return Judged::Never(format!(
                "DependencyNeverSatisfied: {} {} {}",
                kind_name(dependency.kind),
                dependency.task_id,
                state_name(dependency.state)
            ));
        }
        waiting += 1;
        first_waiting.get_or_insert(dependency);
    }
    match first_waiting {
        None => Judged::Satisfied,
        Some(dependency) => {
            let more = if waiting > 1 { format!(" (and {} more)", waiting - 1) } else { String::new() };
            Judged::Waiting(format!(
                "Dependency: {} {} {}{more}",
                kind_name(dependency.kind),
                dependency.task_id,
                state_name(dependency.state)
            ))
        }
    }
}

fn kind_name(kind: DependencyKind) -> &'static str {
    match kind {
        DependencyKind::AfterOk => "afterok",
        DependencyKind::AfterAny => "afterany",
        DependencyKind::AfterNotOk => "afternotok",
    }
}

fn state_name(state: DependencyState) -> &'static str {
    match state {
        DependencyState::Unknown => "not known yet",
        DependencyState::Pending => "is pending",
        DependencyState::Running => "is running",
        DependencyState::Finished => "finished",
        DependencyState::Failed => "failed",
        DependencyState::Cancelled => "was cancelled",
    }
}
