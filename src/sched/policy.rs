//! How each policy ranks the GPUs that passed the preconditions, and the
//! round-robin cycle.
//!
//! Ranking is a total order ending in the table position (= GPU index order),
//! so ties always go to the lowest index and the result is deterministic.

use std::cmp::{Ordering, Reverse};

use super::Policy;
use super::table::GpuSlot;

/// Sorts candidate positions best first for `policy`. Exclusive and
/// round-robin never rank shared candidates; they fall back to index order. With the
/// projected gate on (`projected`), LUG ranks by the projected SM activity instead of the
/// measured one: the figure the gate uses, known for every GPU, and current within the
/// decision.
pub(super) fn rank(policy: Policy, slots: &[GpuSlot<'_>], candidates: &mut [usize], projected: bool) {
    match policy {
        Policy::Magm => rank_by_free_desc(slots, candidates),
        Policy::Mug => candidates.sort_by_key(|&p| (slots[p].free_effective_mib(), p)),
        Policy::Lug if projected => candidates
            .sort_by(|&a, &b| slots[a].projected_sm.total_cmp(&slots[b].projected_sm).then(a.cmp(&b))),
        Policy::Lug => candidates
            .sort_by(|&a, &b| compare_sm_active(slots[a].sm_active, slots[b].sm_active).then(a.cmp(&b))),
        Policy::FirstFit | Policy::Exclusive | Policy::RoundRobin => candidates.sort_unstable(),
    }
}

/// Most effective free memory first, then lowest index.
pub(super) fn rank_by_free_desc(slots: &[GpuSlot<'_>], candidates: &mut [usize]) {
    candidates.sort_by_key(|&p| (Reverse(slots[p].free_effective_mib()), p));
}

/// Known values ascending, unknown after every known value.
fn compare_sm_active(a: Option<f32>, b: Option<f32>) -> Ordering {
    match (a, b) {
        (Some(a), Some(b)) => a.total_cmp(&b),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
}

/// Positions in cycle order starting at `cursor` (taken modulo the GPU count).
pub(super) fn cycle(gpu_count: usize, cursor: u32) -> impl Iterator<Item = usize> {
    let start = if gpu_count == 0 { 0 } else { cursor as usize % gpu_count };
    (0..gpu_count).map(move |k| (start + k) % gpu_count)
}

/// The cursor after taking `last` (the next position in the cycle).
pub(super) fn cursor_after(gpu_count: usize, last: usize) -> u32 {
    assert!(last < gpu_count, "cursor position out of range");
    let next = (last + 1) % gpu_count;
    u32::try_from(next).expect("GPU count fits in u32")
}
