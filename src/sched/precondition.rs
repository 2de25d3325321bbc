//! The checks a GPU must pass before a task may go there.
//!
//! A failed check is a [`Refusal`] value that carries the numbers; it is
//! turned into words only when a task ends up waiting (see `reason`), so the
//! success path builds no strings.

use super::reservation::GpuReservation;
use super::table::{GpuName, GpuSlot};
use super::{GpuView, SmBasis, WaitingTask};

/// Why a GPU is kept from the task being placed, besides its own state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kept<'a> {
    /// Backfill: kept for the blocked head, this task id.
    Head(&'a str),
    /// Held by an administrator's reservation the task is not in, at this decision's `now`.
    Window(&'a GpuReservation, u64),
}

/// The risk gate's thresholds (the later CARMA paper).
pub(super) const RISK_SM_ACTIVE_MIN: f32 = 0.80;
pub(super) const RISK_SM_OCCUPANCY_MIN: f32 = 0.45;
pub(super) const RISK_DRAM_ACTIVE_MIN: f32 = 0.40;

/// Why one GPU cannot take a task.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Refusal<'a> {
    /// The GPU cannot take work at all (lost, XID error, unreadable, ...).
    Unavailable { gpu: GpuName, why: &'a str },
    /// Another task holds the GPU exclusively.
    ExclusiveTask { gpu: GpuName, task_id: &'a str },
    /// Backfill: the GPU is kept for the blocked head.
    Reserved { gpu: GpuName, head_id: &'a str },
    /// An administrator's reservation holds the GPU (at the decision's `now_ms`).
    HeldFor { gpu: GpuName, reservation: &'a GpuReservation, now_ms: u64 },
    /// Windowed SM activity above the cap; `basis` says what it measures.
    SmActive { gpu: GpuName, sm_active: f32, cap: f32, basis: SmBasis },
    /// The tasks' projected standalone SM activity would exceed the cap.
    SmProjected { gpu: GpuName, projected_sm: f32, task_sm: f32, cap: f32 },
    /// The risk gate fired.
    RiskGate { gpu: GpuName, sm_active: Option<f32>, sm_occupancy: Option<f32>, dram_active: Option<f32> },
    /// Not enough effective free memory.
    GpuMemory {
        gpu: GpuName,
        requirement_mib: Option<u64>,
        margin_mib: u64,
        margin_label: &'static str,
        free_mib: u64,
    },
    /// The task needs an idle GPU and this one is not.
    Busy { gpu: GpuName, tasks: u32, used_mib: u64 },
}

/// What a shared placement must satisfy.
pub(super) struct Gate {
    pub(super) requirement_mib: Option<u64>,
    pub(super) margin_mib: u64,
    /// "margin" or "step", for the reason.
    pub(super) margin_label: &'static str,
    pub(super) sm_cap: f32,
    pub(super) risk_gate: bool,
    /// When positive, the projected gate replaces `sm_cap` (see `projected`).
    pub(super) sm_projected_cap: f32,
    /// The task's standalone SM activity, for the projected gate.
    pub(super) task_sm: f32,
}

/// The GPU can take work, is not held exclusively and not reserved for the head.
pub(super) fn check_available<'a>(slot: &GpuSlot<'a>, kept: Option<Kept<'a>>) -> Result<(), Refusal<'a>> {
    let gpu = slot.name();
    if let Some(why) = slot.view.unavailable.as_deref() {
        return Err(Refusal::Unavailable { gpu, why });
    }
    if let Some(task_id) = slot.exclusive_holder {
        return Err(Refusal::ExclusiveTask { gpu, task_id });
    }
    match kept {
        Some(Kept::Head(head_id)) => return Err(Refusal::Reserved { gpu, head_id }),
        Some(Kept::Window(reservation, now_ms)) => return Err(Refusal::HeldFor { gpu, reservation, now_ms }),
        None => {}
    }
    Ok(())
}

/// The GPU may be shared with this task: available, SM cap, risk gate, memory.
pub(super) fn check_shared<'a>(
    slot: &GpuSlot<'a>,
    gate: &Gate,
    kept: Option<Kept<'a>>,
) -> Result<(), Refusal<'a>> {
    check_available(slot, kept)?;
    let gpu = slot.name();
    if gate.sm_projected_cap > 0.0 {
        check_projected(slot, gate)?;
    } else {
        // Unknown SM activity passes, as if 0 (see the module docs).
        let sm_active = slot.sm_active.unwrap_or(0.0);
        if sm_active > gate.sm_cap {
            return Err(Refusal::SmActive { gpu, sm_active, cap: gate.sm_cap, basis: slot.view.sm_basis });
        }
    }
    if gate.risk_gate && risky(slot) {
        return Err(Refusal::RiskGate {
            gpu,
            sm_active: slot.sm_active,
            sm_occupancy: slot.sm_occupancy,
            dram_active: slot.dram_active,
        });
    }
    let free_mib = slot.free_effective_mib();
    let need_mib = gate.requirement_mib.unwrap_or(0).saturating_add(gate.margin_mib);
    if free_mib < need_mib {
        return Err(Refusal::GpuMemory {
            gpu,
            requirement_mib: gate.requirement_mib,
            margin_mib: gate.margin_mib,
            margin_label: gate.margin_label,
            free_mib,
        });
    }
    Ok(())
}

/// The GPU is idle and not reserved for the head. A MIG instance must also hold `fit_mib`
/// (the task's memory figure, when it has one): instances of one GPU differ in size, and an
/// idle one that is too small would only run the task out of memory. A whole GPU is taken
/// idle without the check, as the paper's exclusive placement does.
pub(super) fn check_idle<'a>(
    slot: &GpuSlot<'a>,
    idle_used_mib_max: u64,
    fit_mib: Option<u64>,
    kept: Option<Kept<'a>>,
) -> Result<(), Refusal<'a>> {
    check_available(slot, kept)?;
    if !slot.is_idle(idle_used_mib_max) {
        return Err(Refusal::Busy { gpu: slot.name(), tasks: slot.tasks, used_mib: slot.used_mib() });
    }
    let free_mib = slot.free_effective_mib();
    if let Some(need) = fit_mib.filter(|&need| slot.view.mig.is_some() && need > free_mib) {
        return Err(Refusal::GpuMemory {
            gpu: slot.name(),
            requirement_mib: Some(need),
            margin_mib: 0,
            margin_label: "margin",
            free_mib,
        });
    }
    Ok(())
}

/// SMACT ≥ 0.8 and (SMOCC ≥ 0.45 or DRAM ≥ 0.40); unknown values count as 0.
fn risky(slot: &GpuSlot<'_>) -> bool {
    let sm_active = slot.sm_active.unwrap_or(0.0);
    let sm_occupancy = slot.sm_occupancy.unwrap_or(0.0);
    let dram_active = slot.dram_active.unwrap_or(0.0);
    sm_active >= RISK_SM_ACTIVE_MIN
        && (sm_occupancy >= RISK_SM_OCCUPANCY_MIN || dram_active >= RISK_DRAM_ACTIVE_MIN)
}

/// Whether `task` may go to `view` at all, before any gate: a MIG instance
/// takes only one-GPU tasks (CUDA shows a process one MIG device), and a task
/// that names a MIG profile takes only instances of that profile.
pub(super) fn eligible(view: &GpuView, task: &WaitingTask) -> bool {
    match (&view.mig, task.mig_profile.as_deref()) {
        (Some(mig), Some(profile)) => task.gpus == 1 && mig.profile.as_deref() == Some(profile),
        (Some(_), None) => task.gpus == 1,
        (None, Some(_)) => false,
        (None, None) => true,
    }
}

// ---------------------------------------------------------------------------------------
// The projected-SM gate: share a GPU only while the standalone SM activity of its tasks, the
// new one's included, stays within `sm_projected_cap`.
//
// A GPU's measured SM activity is a windowed average that saturates at 1, lags behind
// placements, and says nothing about what one more job would add: a GPU running one CNN at
// 0.65 reads the same whether the next job is a light one at 0.1 or a transformer at 0.8.
// The projection adds the tasks' own figures instead: each running task's standalone SM
// activity (measured on the attempt, or learned from earlier runs of its workload), each task
// placed earlier in the same decision, and the new task's; `sm_unknown` stands in for a task
// nobody has measured yet. Under MPS, jobs on a GPU whose summed activity S exceeds what the
// GPU can serve all slow down by S/η, so a cap somewhat above 1 keeps every GPU busy (the
// estimates are noisy, and a GPU at the cap stays busy when one of its jobs ends) without
// stretching the last jobs of a run. A GPU with no carma task always passes: a lone task is
// never refused for its own activity, whatever the cap.
// ---------------------------------------------------------------------------------------

/// Slack for float sums, so that e.g. 0.65 + 0.85 passes a cap of 1.5.
const SM_EPSILON: f32 = 1e-4;

/// The projected gate, for a GPU that is available.
fn check_projected<'a>(slot: &GpuSlot<'a>, gate: &Gate) -> Result<(), Refusal<'a>> {
    assert!(gate.sm_projected_cap > 0.0, "the projected gate is on");
    if slot.tasks == 0 {
        return Ok(());
    }
    if slot.projected_sm + gate.task_sm > gate.sm_projected_cap + SM_EPSILON {
        return Err(Refusal::SmProjected {
            gpu: slot.name(),
            projected_sm: slot.projected_sm,
            task_sm: gate.task_sm,
            cap: gate.sm_projected_cap,
        });
    }
    Ok(())
}
