//! The per-decision table of GPUs: what is on each one and how much memory is
//! really free.
//!
//! The table starts from the input view and the running tasks (memory in
//! flight, task counts, exclusive holders) and is updated as the decision
//! places tasks, so later placements in the same decision see earlier ones.

use super::{GpuView, RunningTask, SchedInput};

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
}

/// The GPUs of one decision, sorted by index (then UUID), UUIDs unique.
pub(super) struct GpuTable<'a> {
    pub(super) slots: Vec<GpuSlot<'a>>,
}

impl GpuSlot<'_> {
    /// Free memory after in-flight and in-decision reservations.
    pub(super) fn free_effective_mib(&self) -> u64 {
        self.view.memory_free_mib.saturating_sub(self.in_flight_mib).saturating_sub(self.placed_mib)
    }

    /// Memory in use by anything, carma or not, in the newest sample.
    pub(super) fn used_mib(&self) -> u64 {
        self.view.memory_total_mib.saturating_sub(self.view.memory_free_mib)
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
        views.sort_by(|a, b| a.index.cmp(&b.index).then_with(|| a.uuid.cmp(&b.uuid)));
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
        for uuid in &task.gpus {
            let Some(position) = self.position(uuid) else {
                continue;
            };
            let slot = &mut self.slots[position];
            slot.tasks = slot.tasks.saturating_add(1);
            slot.in_flight_mib = slot.in_flight_mib.saturating_add(in_flight);
            if task.exclusive && slot.exclusive_holder.is_none() {
                slot.exclusive_holder = Some(task.id.as_str());
            }
        }
    }

    /// Position of a GPU in the table by UUID.
    pub(super) fn position(&self, uuid: &str) -> Option<usize> {
        self.slots.iter().position(|slot| slot.view.uuid == uuid)
    }

    /// Records a placement so that later decisions in this tick see it.
    pub(super) fn apply(&mut self, positions: &[usize], assumed_mib: u64, exclusive: bool, task_id: &'a str) {
        for &position in positions {
            let slot = &mut self.slots[position];
            assert!(slot.exclusive_holder.is_none(), "placed on an exclusive GPU");
            slot.placed_mib = slot.placed_mib.saturating_add(assumed_mib);
            slot.tasks = slot.tasks.saturating_add(1);
            if exclusive {
                slot.exclusive_holder = Some(task_id);
            }
        }
    }
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
