//! When a GPU is expected to have room for the blocked head: the shadow time of EASY
//! backfill, from the running tasks' expected ends.
//!
//! The GPU's tasks are taken away in the order they are expected to end, each giving back its
//! memory and its standalone SM activity, until the head would pass: all of them gone for a
//! head that needs an idle GPU; otherwise its memory figure plus margin free, and its SM
//! activity within `sm_projected_cap` (or, with the measured gate, the GPU's activity scaled
//! down by the share of projected activity that has left). The time of the last end taken is the
//! GPU's fit time; a task with no run-time estimate makes every later time unknown.
//!
//! The same walk answers whether a task may start now beside the head's future need
//! ([`Beside`]): it joins the GPU and never leaves, and the GPU's fit time must stay within the
//! head's shadow time. A light task on a GPU kept for a heavy head then runs while the GPU
//! drains instead of leaving it half used, and still leaves the head its room when it is due.

use super::table::GpuSlot;

/// What the blocked head needs from a GPU.
pub(super) struct HeadNeed {
    /// Only an idle GPU will do.
    pub(super) idle: bool,
    /// Effective free memory it needs (figure + margin).
    pub(super) need_mib: u64,
    /// Its standalone SM activity.
    pub(super) sm: f32,
    /// The projected cap, or 0 for the measured gate.
    pub(super) sm_projected_cap: f32,
    /// The measured cap.
    pub(super) sm_cap: f32,
}

/// A task that would start on the GPU now, taken to stay until after the head has started.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Beside {
    /// The memory it is assumed to take (its figure).
    pub(super) mib: u64,
    /// Its standalone SM activity.
    pub(super) sm: f32,
}

/// When `slot` is expected to pass `need`, with `beside` (if any) started on it now and never
/// ending: `now_ms` when it does already, `None` when an end on the way is unknown or it never
/// does.
pub(super) fn fit_time_ms(
    slot: &GpuSlot<'_>,
    need: &HeadNeed,
    now_ms: u64,
    beside: Option<Beside>,
) -> Option<u64> {
    let mut loads = slot.loads.clone();
    loads.sort_by_key(|l| l.end_ms);
    let mut free_mib = slot.free_effective_mib();
    let mut projected = slot.projected_sm;
    let mut tasks = loads.len();
    // The task beside never leaves: its memory and activity stay in every step below. The
    // measured activity does not include it yet, so it is added on top of the scaled share.
    let beside_sm = beside.map_or(0.0, |b| b.sm);
    if let Some(beside) = beside {
        free_mib = free_mib.saturating_sub(beside.mib);
        tasks += 1;
    }
    let total_projected = projected.max(f32::EPSILON);
    let measured = slot.sm_active.unwrap_or(0.0);
    let passes = |free_mib: u64, projected: f32, tasks: usize| {
        if need.idle || tasks == 0 {
            return tasks == 0;
        }
        let sm_ok = if need.sm_projected_cap > 0.0 {
            projected + beside_sm + need.sm <= need.sm_projected_cap + 1e-4
        } else {
            measured * (projected / total_projected) + beside_sm <= need.sm_cap
        };
        free_mib >= need.need_mib && sm_ok
    };
    if passes(free_mib, projected, tasks) {
        return Some(now_ms);
    }
    for load in loads {
        if load.end_ms == u64::MAX {
            return None;
        }
        free_mib = free_mib.saturating_add(load.freed_mib);
        projected = (projected - load.sm).max(0.0);
        tasks -= 1;
        if passes(free_mib, projected, tasks) {
            return Some(load.end_ms.max(now_ms));
        }
    }
    None
}
