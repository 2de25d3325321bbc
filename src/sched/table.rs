//! The per-decision table of GPUs: what is on each one and how much memory is
//! really free.
//!
//! The table starts from the input view and the running tasks (memory in
//! flight, task counts, exclusive holders) and is updated as the decision
//! places tasks, so later placements in the same decision see earlier ones.

use std::fmt;

use super::{GpuView, RunningTask, SchedInput};

/// How reasons name a placement target: `GPU1`, or `GPU1/mig2` for MIG
/// instance 2 of GPU 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct GpuName {
    /// The GPU's index (the parent's, for a MIG instance).
    pub index: u32,
    /// The MIG slot, for a MIG instance.
    pub mig_slot: Option<u32>,
}

impl GpuName {
    /// The name of a view.
    pub fn of(view: &GpuView) -> GpuName {
        GpuName { index: view.index, mig_slot: view.mig.as_ref().map(|m| m.slot) }
    }
}

impl fmt::Display for GpuName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.mig_slot {
            Some(slot) => write!(f, "GPU{}/mig{slot}", self.index),
            None => write!(f, "GPU{}", self.index),
        }
    }
}

/// One GPU during a decision.
pub(super) struct GpuSlot<'a> {
    pub(super) view: &'a GpuView,
    /// Sanitised SM activity: non-finite becomes unknown, clamped to 0..1.
    pub(super) sm_active: Option<f32>,
    pub(super) sm_occupancy: Option<f32>,
    pub(super) dram_active: Option<f32>,
    /// Memory that ramping running tasks will still allocate.
    pub(super) in_flight_mib: u64,
    /// Memory assumed for tasks placed on it in this decision.
    pub(super) placed_mib: u64,
    /// Carma tasks on it: running plus placed in this decision.
    pub(super) tasks: u32,
    /// The task that holds it exclusively, if any.
    pub(super) exclusive_holder: Option<&'a str>,
    /// Summed standalone SM activity of its carma tasks (running, and placed in this
    /// decision): their estimates, `sm_unknown` for a task without one.
    pub(super) projected_sm: f32,
    /// When its tasks are expected to have ended: `None` with no task, `u64::MAX` when one
    /// has no run-time estimate.
    pub(super) busy_until_ms: Option<u64>,
    /// What each of its tasks gives back when it ends, for `shadow`.
    pub(super) loads: Vec<TaskLoad>,
}

/// One task on a GPU, as the backfill shadow sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct TaskLoad {
    /// Expected end; `u64::MAX` when unknown.
    pub(super) end_ms: u64,
    /// Its standalone SM activity (estimate or `sm_unknown`).
    pub(super) sm: f32,
    /// The effective free memory its end gives back: what it holds plus what it reserves.
    pub(super) freed_mib: u64,
}

/// The GPUs of one decision, sorted by name (index, then MIG slot) and UUID,
/// UUIDs unique.
pub(super) struct GpuTable<'a> {
    pub(super) slots: Vec<GpuSlot<'a>>,
}

impl GpuSlot<'_> {
    /// Free memory after in-flight and in-decision reservations.
    pub(super) fn free_effective_mib(&self) -> u64 {
        self.view.memory_free_mib.saturating_sub(self.in_flight_mib).saturating_sub(self.placed_mib)
    }

    /// Memory held by processes, carma's or not, in the newest sample:
    /// `total − free − reserved`, since the driver's reservation is in the gap
    /// between total and free but belongs to no process.
    pub(super) fn used_mib(&self) -> u64 {
        self.view
            .memory_total_mib
            .saturating_sub(self.view.memory_free_mib)
            .saturating_sub(self.view.memory_reserved_mib)
    }

    /// How reasons name this GPU.
    pub(super) fn name(&self) -> GpuName {
        GpuName::of(self.view)
    }

    /// No carma task and (almost) no memory used by anyone else.
    pub(super) fn is_idle(&self, idle_used_mib_max: u64) -> bool {
        self.tasks == 0 && self.used_mib() <= idle_used_mib_max
    }
}

impl<'a> GpuTable<'a> {
    /// Builds the table. A duplicated UUID keeps its first (lowest-index)
    /// entry; running tasks on GPUs missing from the view are ignored.
    pub(super) fn new(input: &SchedInput<'a>) -> Self {
        let mut views: Vec<&'a GpuView> = input.gpus.iter().collect();
        // A MIG instance sorts after its parent's index, by slot.
        views.sort_by(|a, b| GpuName::of(a).cmp(&GpuName::of(b)).then_with(|| a.uuid.cmp(&b.uuid)));
        let mut slots: Vec<GpuSlot<'a>> = Vec::with_capacity(views.len());
        for view in views {
            if slots.iter().any(|slot| slot.view.uuid == view.uuid) {
                continue;
            }
            slots.push(GpuSlot {
                view,
                sm_active: metric(view.sm_active),
                sm_occupancy: metric(view.sm_occupancy),
                dram_active: metric(view.dram_active),
                in_flight_mib: 0,
                placed_mib: 0,
                tasks: 0,
                exclusive_holder: None,
                projected_sm: 0.0,
                busy_until_ms: None,
                loads: Vec::new(),
            });
        }
        let mut table = GpuTable { slots };
        for task in input.running {
            table.add_running(task, input);
        }
        table
    }

    fn add_running(&mut self, task: &'a RunningTask, input: &SchedInput<'a>) {
        let config = input.config;
        let in_flight =
            in_flight_mib(task, input.now_ms, config.in_flight_grace_ms, config.margin_without_figure_mib);
        let sm = sm_or_unknown(task.sm_estimate, config.sm_unknown);
        let end_ms = task.runtime_estimate_ms.map_or(u64::MAX, |ms| task.launched_ms.saturating_add(ms));
        for uuid in &task.gpus {
            let Some(position) = self.position(uuid) else {
                continue;
            };
            let slot = &mut self.slots[position];
            slot.tasks = slot.tasks.saturating_add(1);
            slot.in_flight_mib = slot.in_flight_mib.saturating_add(in_flight);
            slot.projected_sm += sm;
            slot.busy_until_ms = Some(slot.busy_until_ms.unwrap_or(0).max(end_ms));
            let freed_mib = task.observed_mib.unwrap_or(0).saturating_add(in_flight);
            slot.loads.push(TaskLoad { end_ms, sm, freed_mib });
            if task.exclusive && slot.exclusive_holder.is_none() {
                slot.exclusive_holder = Some(task.id.as_str());
            }
        }
    }

    /// Position of a GPU in the table by UUID.
    pub(super) fn position(&self, uuid: &str) -> Option<usize> {
        self.slots.iter().position(|slot| slot.view.uuid == uuid)
    }

    /// Records a placement so that later decisions in this tick see it: its memory, its
    /// standalone SM activity `sm` and its expected end `end_ms`.
    pub(super) fn apply(&mut self, positions: &[usize], placed: Placing<'a>) {
        let Placing { assumed_mib, exclusive, task_id, sm, end_ms } = placed;
        for &position in positions {
            let slot = &mut self.slots[position];
            assert!(slot.exclusive_holder.is_none(), "placed on an exclusive GPU");
            slot.placed_mib = slot.placed_mib.saturating_add(assumed_mib);
            slot.tasks = slot.tasks.saturating_add(1);
            slot.projected_sm += sm;
            slot.busy_until_ms = Some(slot.busy_until_ms.unwrap_or(0).max(end_ms));
            slot.loads.push(TaskLoad { end_ms, sm, freed_mib: assumed_mib });
            if exclusive {
                slot.exclusive_holder = Some(task_id);
            }
        }
    }
}

/// What a placement adds to its GPUs.
pub(super) struct Placing<'a> {
    pub(super) assumed_mib: u64,
    pub(super) exclusive: bool,
    pub(super) task_id: &'a str,
    pub(super) sm: f32,
    pub(super) end_ms: u64,
}

/// A standalone SM estimate as the core uses it: sanitised like a metric, `unknown` when
/// missing or not finite.
pub(super) fn sm_or_unknown(estimate: Option<f32>, unknown: f32) -> f32 {
    metric(estimate).unwrap_or_else(|| metric(Some(unknown)).unwrap_or(0.0))
}

/// Memory a running task will still allocate on each of its GPUs: while it is
/// younger than the grace period, `max(0, requirement − observed)`; a task
/// with no figure is assumed to need `assumed_without_figure_mib`.
pub(super) fn in_flight_mib(
    task: &RunningTask,
    now_ms: u64,
    grace_ms: u64,
    assumed_without_figure_mib: u64,
) -> u64 {
    let age_ms = now_ms.saturating_sub(task.launched_ms);
    if age_ms >= grace_ms {
        return 0;
    }
    let expected_mib = task.requirement_mib.unwrap_or(assumed_without_figure_mib);
    expected_mib.saturating_sub(task.observed_mib.unwrap_or(0))
}

/// A metric as the core uses it: non-finite is unknown, the rest in 0..1.
pub(super) fn metric(value: Option<f32>) -> Option<f32> {
    value.filter(|v| v.is_finite()).map(|v| v.clamp(0.0, 1.0))
}
