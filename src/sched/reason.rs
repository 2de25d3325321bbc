//! Plain-words reasons: why a task went where it went, and why it waits.
//!
//! These strings are journaled and shown by `carma queue` and `carma show`,
//! and tests compare them exactly, so the wording lives in one place. Memory
//! is in GiB with one decimal; activities with two decimals.

use std::fmt::Write;

use super::Policy;
use super::precondition::Refusal;
use super::table::GpuSlot;

/// `12.0 GiB`.
pub(super) fn gib(mib: u64) -> String {
    format!("{:.1} GiB", mib as f64 / 1024.0)
}

/// `0.86`, or `unknown`.
fn activity(value: Option<f32>) -> String {
    match value {
        Some(v) => format!("{v:.2}"),
        None => "unknown".to_string(),
    }
}

/// `GPU0, GPU2`.
pub(super) fn gpu_names(slots: &[GpuSlot<'_>], positions: &[usize]) -> String {
    let names: Vec<String> = positions.iter().map(|&p| format!("GPU{}", slots[p].view.index)).collect();
    names.join(", ")
}

/// One GPU's refusal in words.
pub(super) fn refusal(refusal: &Refusal<'_>) -> String {
    match *refusal {
        Refusal::ExclusiveTask { gpu, task_id } => {
            format!("Exclusive: task {task_id} runs alone on GPU{gpu}")
        }
        Refusal::Reserved { gpu, head_id } => {
            format!("Reserved: GPU{gpu} kept for blocked head {head_id} (backfill)")
        }
        Refusal::SmActive { gpu, sm_active, cap } => {
            format!("SmActive {sm_active:.2} > {cap:.2} on GPU{gpu}")
        }
        Refusal::RiskGate { gpu, sm_active, sm_occupancy, dram_active } => format!(
            "RiskGate: SmActive {}, SmOccupancy {}, DramActive {} on GPU{gpu}",
            activity(sm_active),
            activity(sm_occupancy),
            activity(dram_active)
        ),
        Refusal::GpuMemory { gpu, requirement_mib, margin_mib, margin_label, free_mib } => {
            match requirement_mib {
                Some(need) => format!(
                    "GpuMemory: need {} + {} {margin_label} > {} free on GPU{gpu}",
                    gib(need),
                    gib(margin_mib),
                    gib(free_mib)
                ),
                None => format!(
                    "GpuMemory: no memory figure, need {} {margin_label} > {} free on GPU{gpu}",
                    gib(margin_mib),
                    gib(free_mib)
                ),
            }
        }
        Refusal::Busy { gpu, tasks, used_mib } => {
            if tasks > 0 {
                format!("Busy: {tasks} carma task(s) on GPU{gpu}")
            } else {
                format!("Busy: {} used by other processes on GPU{gpu}", gib(used_mib))
            }
        }
    }
}

/// Why a task needing `gpus_needed` GPUs found too few. `passing` names the
/// GPUs that passed; `kind` is e.g. `"idle"` for a task that needs idle GPUs.
pub(super) fn shortfall(
    gpus_needed: usize,
    passing: &[u32],
    refusals: &[Refusal<'_>],
    kind: Option<&str>,
) -> String {
    debug_assert!(passing.len() < gpus_needed, "a shortfall needs too few passing GPUs");
    let mut text = String::new();
    let adjective = kind.map(|k| format!("{k} ")).unwrap_or_default();
    if gpus_needed == 1 {
        if kind.is_some() {
            let _ = write!(text, "no {adjective}GPU; ");
        }
    } else {
        let verb = kind.unwrap_or("pass");
        let _ = write!(text, "needs {gpus_needed} {adjective}GPUs, {} {verb}", passing.len());
        if !passing.is_empty() {
            let names: Vec<String> = passing.iter().map(|i| format!("GPU{i}")).collect();
            let _ = write!(text, " ({})", names.join(", "));
        }
        text.push_str("; ");
    }
    let words: Vec<String> = refusals.iter().map(refusal).collect();
    text.push_str(&words.join("; "));
    text
}

/// Why a shared placement went to these GPUs (`free_mib`: effective free
/// memory of each chosen GPU before the placement).
pub(super) fn shared_placement(
    policy: Policy,
    slots: &[GpuSlot<'_>],
    chosen: &[usize],
    free_mib: &[u64],
) -> String {
    let names = gpu_names(slots, chosen);
    let plural = chosen.len() > 1;
    let has = if plural { "have" } else { "has" };
    let frees: Vec<String> = free_mib.iter().map(|&m| gib(m)).collect();
    let frees = frees.join(", ");
    let mut text = match policy {
        Policy::Lug => {
            let values: Vec<String> = chosen.iter().map(|&p| activity(slots[p].sm_active)).collect();
            format!("lug: {names} {has} lowest SmActive ({})", values.join(", "))
        }
        Policy::Mug => format!("mug: {names} {has} least free memory that fits ({frees})"),
        Policy::FirstFit => {
            let (is, what, fit) = if plural { ("are", "GPUs", "fit") } else { ("is", "GPU", "fits") };
            format!("first-fit: {names} {is} the lowest-index {what} that {fit} ({frees} free)")
        }
        _ => format!("{policy}: {names} {has} most free memory ({frees})"),
    };
    if policy != Policy::Lug {
        note_unknown_sm(&mut text, slots, chosen);
    }
    text
}

/// Why a task went to idle GPUs.
pub(super) fn idle_placement(
    prefix: &str,
    slots: &[GpuSlot<'_>],
    chosen: &[usize],
    exclusive: bool,
) -> String {
    let names = gpu_names(slots, chosen);
    if exclusive {
        format!("{prefix}: {names} idle, runs alone")
    } else {
        format!("{prefix}: {names} idle (exclusive first)")
    }
}

/// Why a round-robin placement went to these GPUs.
pub(super) fn round_robin_placement(slots: &[GpuSlot<'_>], chosen: &[usize]) -> String {
    let names = gpu_names(slots, chosen);
    let is = if chosen.len() > 1 { "are" } else { "is" };
    format!("round-robin: {names} {is} next in the cycle (memory and SmActive not checked)")
}

/// Why a looser recovery went to these GPUs.
pub(super) fn looser_placement(
    prefix: &str,
    slots: &[GpuSlot<'_>],
    chosen: &[usize],
    free_mib: &[u64],
    requirement_mib: u64,
    step_mib: u64,
) -> String {
    let names = gpu_names(slots, chosen);
    let has = if chosen.len() > 1 { "have" } else { "has" };
    let frees: Vec<String> = free_mib.iter().map(|&m| gib(m)).collect();
    let mut text = format!(
        "{prefix}: {names} {has} most free memory ({}) for {} + {} step",
        frees.join(", "),
        gib(requirement_mib),
        gib(step_mib)
    );
    note_unknown_sm(&mut text, slots, chosen);
    text
}

/// Appends "; SmActive unknown on GPU1" when a chosen GPU's activity is unknown.
fn note_unknown_sm(text: &mut String, slots: &[GpuSlot<'_>], chosen: &[usize]) {
    let unknown: Vec<usize> = chosen.iter().copied().filter(|&p| slots[p].sm_active.is_none()).collect();
    if !unknown.is_empty() {
        let _ = write!(text, "; SmActive unknown on {}", gpu_names(slots, &unknown));
    }
}
