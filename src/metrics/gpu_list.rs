//! The GPUs as people read them, for `/metrics` and the dashboard's cards: physical GPUs by
//! index (then UUID), each followed by its MIG instances by slot, and for each the carma tasks
//! placed or running on it and the memory carma promised them.
//!
//! A MIG instance is a placement target of its own: an attempt names its `MIG-…` UUID, not
//! the parent's, so a task on an instance is counted on that instance's entry (and only
//! there). Pure: State in, a list out.

use crate::gpu::MigInstance;
use crate::journal::state::GpuState;
use crate::journal::{State, Task};

/// One placement target: a whole GPU, or one MIG instance of it.
pub struct GpuEntry<'a> {
    /// The physical GPU (the parent, for a MIG instance).
    pub gpu: &'a GpuState,
    /// The MIG instance, for an instance's entry.
    pub instance: Option<&'a MigInstance>,
    /// The carma tasks whose active attempt names this entry's UUID, in id order.
    pub tasks: Vec<&'a Task>,
    /// The requirements their attempts were placed with, summed; a shared attempt placed
    /// without a figure adds what placement assumes for it (`[sched]
    /// margin-without-figure-mib`), so the card counts what the next placement counts.
    pub reserved_mib: u64,
    /// What they were promised and do not hold yet (each requirement less the attempt's
    /// observed peak): memory the sample shows free that is not free for a new task.
    pub in_flight_mib: u64,
    /// Whether one of them holds it exclusively.
    pub exclusive: bool,
}

impl GpuEntry<'_> {
    /// The UUID attempts name: the instance's for an instance.
    pub fn uuid(&self) -> &str {
        self.instance.map_or(&self.gpu.uuid, |m| &m.uuid)
    }

    /// How placement reasons name it: `GPU0`, `GPU0/mig1`.
    pub fn label(&self) -> String {
        match self.instance {
            Some(m) => format!("GPU{}/mig{}", self.gpu.index, m.index),
            None => format!("GPU{}", self.gpu.index),
        }
    }

    /// Installed memory, MiB: the instance's own for an instance.
    pub fn total_mib(&self) -> u64 {
        match (self.instance, self.gpu.last.as_ref()) {
            (Some(m), _) => m.memory_total_mib,
            (None, Some(sample)) => sample.memory_total_mib,
            (None, None) => self.gpu.memory_total_mib,
        }
    }

    /// Memory held by processes, MiB, as the last sample read it; `None` before one.
    pub fn used_mib(&self) -> Option<u64> {
        match self.instance {
            Some(m) => Some(m.memory_used_mib),
            None => self.gpu.last.as_ref().map(|s| s.memory_used_mib),
        }
    }

    /// What a new task may still be given, MiB: the sample's free memory less what carma
    /// promised its tasks and they do not hold yet; 0 while a task holds it exclusively or
    /// before any sample.
    pub fn free_for_new_mib(&self) -> u64 {
        if self.exclusive {
            return 0;
        }
        let free = match (self.instance, self.gpu.last.as_ref()) {
            (_, None) => return 0,
            (Some(m), Some(_)) => m.memory_total_mib.saturating_sub(m.memory_used_mib),
            (None, Some(sample)) => sample.memory_free_mib,
        };
        free.saturating_sub(self.in_flight_mib)
    }
}

/// Every GPU State knows and every MIG instance of its last sample, in reading order.
/// `assumed_without_figure_mib` is what placement assumes a shared attempt with no figure
/// holds (`SchedConfig::margin_without_figure_mib`).
pub fn entries(state: &State, assumed_without_figure_mib: u64) -> Vec<GpuEntry<'_>> {
    let mut gpus: Vec<&GpuState> = state.gpus.values().collect();
    gpus.sort_by(|a, b| (a.index, &a.uuid).cmp(&(b.index, &b.uuid)));
    let mut out = Vec::new();
    for gpu in gpus {
        out.push(entry(state, gpu, None, assumed_without_figure_mib));
        let mut instances: Vec<&MigInstance> = gpu.last.iter().flat_map(|s| &s.mig.instances).collect();
        instances.sort_by(|a, b| (a.index, &a.uuid).cmp(&(b.index, &b.uuid)));
        out.extend(instances.into_iter().map(|m| entry(state, gpu, Some(m), assumed_without_figure_mib)));
    }
    out
}

fn entry<'a>(
    state: &'a State,
    gpu: &'a GpuState,
    instance: Option<&'a MigInstance>,
    assumed_without_figure_mib: u64,
) -> GpuEntry<'a> {
    let mut entry =
        GpuEntry { gpu, instance, tasks: Vec::new(), reserved_mib: 0, in_flight_mib: 0, exclusive: false };
    let uuid = entry.uuid().to_owned();
    for task in state.tasks.values() {
        if let Some(attempt) = task.active_attempt().filter(|a| a.gpus.contains(&uuid)) {
            entry.tasks.push(task);
            let promised = promised_mib(attempt, assumed_without_figure_mib);
            entry.reserved_mib = entry.reserved_mib.saturating_add(promised);
            let held = attempt.peak_observed_mib.unwrap_or(0);
            entry.in_flight_mib = entry.in_flight_mib.saturating_add(promised.saturating_sub(held));
            entry.exclusive |= attempt.exclusive;
        }
    }
    entry
}

/// What carma promised `attempt` per GPU: its requirement; for a shared attempt placed
/// without one, what placement assumed (an exclusive one holds the GPU whole anyway).
pub fn promised_mib(attempt: &crate::journal::state::Attempt, assumed_without_figure_mib: u64) -> u64 {
    match attempt.requirement_mib {
        Some(mib) => mib,
        None if attempt.exclusive => 0,
        None => assumed_without_figure_mib,
    }
}

/// How pages name the GPU an attempt names: `GPU0 (GPU-5f1c…)`, `GPU0/mig1 (MIG-…)`, or the
/// UUID alone when State does not know it.
pub fn describe(state: &State, uuid: &str) -> String {
    for gpu in state.gpus.values() {
        if gpu.uuid == uuid {
            return format!("GPU{} ({uuid})", gpu.index);
        }
        if let Some(m) = gpu.last.iter().flat_map(|s| &s.mig.instances).find(|m| m.uuid == uuid) {
            return format!("GPU{}/mig{} ({uuid})", gpu.index, m.index);
        }
    }
    uuid.to_owned()
}
