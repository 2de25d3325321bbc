//! Plain-words reasons: why a task went where it went, and why it waits.
//!
//! These strings are journaled and shown by `carma queue` and `carma show`,
//! and tests compare them exactly, so the wording lives in one place. Memory
//! is in GiB with one decimal; activities with two decimals.

use std::fmt::Write;

use super::precondition::Refusal;
use super::table::{GpuName, GpuSlot};
use super::{Policy, SmBasis};

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

/// `0.86`, `0.86 (device util)`, or `unknown`: coarse sources are named.
fn sm_activity(value: Option<f32>, basis: SmBasis) -> String {
    let text = activity(value);
    match (value, basis_label(basis)) {
        (Some(_), Some(label)) => format!("{text} ({label})"),
        _ => text,
    }
}

/// What a coarse SM-activity source is called in reasons; `None` for SM activity proper.
fn basis_label(basis: SmBasis) -> Option<&'static str> {
    match basis {
        SmBasis::Measured => None,
        SmBasis::DeviceUtil => Some("device util"),
        SmBasis::ProcessUtil => Some("process util"),
    }
}

/// `GPU0, GPU2/mig1`.
pub(super) fn gpu_names(slots: &[GpuSlot<'_>], positions: &[usize]) -> String {
    let names: Vec<String> = positions.iter().map(|&p| slots[p].name().to_string()).collect();
    names.join(", ")
}

/// One GPU's refusal in words.
pub(super) fn refusal(refusal: &Refusal<'_>) -> String {
    match *refusal {
        Refusal::Unavailable { gpu, why } => format!("{gpu} unavailable: {why}"),
        Refusal::ExclusiveTask { gpu, task_id } => {
            format!("Exclusive: task {task_id} runs alone on {gpu}")
        }
        Refusal::Reserved { gpu, head_id } => {
            format!("Reserved: {gpu} kept for blocked head {head_id} (backfill)")
        }
        Refusal::HeldFor { gpu, reservation, now_ms } => {
            format!("Reservation: {gpu} {}", super::reservation::held_words(reservation, now_ms))
        }
        Refusal::SmActive { gpu, sm_active, cap, basis } => {
            format!("SmActive {} > {cap:.2} on {gpu}", sm_activity(Some(sm_active), basis))
        }
        Refusal::SmProjected { gpu, projected_sm, task_sm, cap } => {
            format!("SmProjected {projected_sm:.2} + {task_sm:.2} > {cap:.2} on {gpu}")
        }
        Refusal::RiskGate { gpu, sm_active, sm_occupancy, dram_active } => format!(
            "RiskGate: SmActive {}, SmOccupancy {}, DramActive {} on {gpu}",
            activity(sm_active),
            activity(sm_occupancy),
            activity(dram_active)
        ),
        Refusal::GpuMemory { gpu, requirement_mib, margin_mib, margin_label, free_mib } => {
            match requirement_mib {
                Some(need) if margin_mib == 0 => {
                    format!("GpuMemory: need {} > {} free on {gpu}", gib(need), gib(free_mib))
                }
                Some(need) => format!(
                    "GpuMemory: need {} + {} {margin_label} > {} free on {gpu}",
                    gib(need),
                    gib(margin_mib),
                    gib(free_mib)
                ),
                None => format!(
                    "GpuMemory: no memory figure, need {} {margin_label} > {} free on {gpu}",
                    gib(margin_mib),
                    gib(free_mib)
                ),
            }
        }
        Refusal::Busy { gpu, tasks, used_mib } => {
            if tasks > 0 {
                format!("Busy: {tasks} carma task(s) on {gpu}")
            } else {
                format!("Busy: {} used by other processes on {gpu}", gib(used_mib))
            }
        }
    }
}

/// Why a task needing `gpus_needed` GPUs found too few. `passing` names the
/// GPUs that passed; `kind` is e.g. `"idle"` for a task that needs idle GPUs.
pub(super) fn shortfall(
    gpus_needed: usize,
    passing: &[GpuName],
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
            let names: Vec<String> = passing.iter().map(GpuName::to_string).collect();
            let _ = write!(text, " ({})", names.join(", "));
        }
        text.push_str("; ");
    }
    text.push_str(&refusal_words(refusals).join("; "));
    text
}

/// Each refusal in words, with GPUs unavailable for the same reason named together
/// ("GPU0, GPU1 unavailable: MIG on ..."), so eight GPUs in one state make one clause; so are
/// the GPUs one reservation holds ("Reservation: GPU0,GPU1 held for "paper" from 09:00").
fn refusal_words(refusals: &[Refusal<'_>]) -> Vec<String> {
    let mut words: Vec<String> = Vec::with_capacity(refusals.len());
    let mut grouped: Vec<(String, &str)> = Vec::new();
    let mut held: Vec<(Vec<GpuName>, String)> = Vec::new();
    for item in refusals {
        match *item {
            Refusal::Unavailable { gpu, why } => match grouped.iter_mut().find(|(_, w)| *w == why) {
                Some((names, _)) => {
                    names.push_str(", ");
                    names.push_str(&gpu.to_string());
                }
                None => grouped.push((gpu.to_string(), why)),
            },
            Refusal::HeldFor { gpu, reservation, now_ms } => {
                let words = super::reservation::held_words(reservation, now_ms);
                match held.iter_mut().find(|(_, w)| *w == words) {
                    Some((names, _)) => names.push(gpu),
                    None => held.push((vec![gpu], words)),
                }
            }
            _ => words.push(refusal(item)),
        }
    }
    words.extend(grouped.into_iter().map(|(names, why)| format!("{names} unavailable: {why}")));
    words.extend(
        held.into_iter()
            .map(|(names, why)| format!("Reservation: {} {why}", super::reservation::gpu_list(&names))),
    );
    words
}

/// Why a shared placement went to these GPUs (`free_mib`: effective free
/// memory of each chosen GPU before the placement).
pub(super) fn shared_placement(
    policy: Policy,
    slots: &[GpuSlot<'_>],
    chosen: &[usize],
    free_mib: &[u64],
    projected: bool,
) -> String {
    let names = gpu_names(slots, chosen);
    let plural = chosen.len() > 1;
    let has = if plural { "have" } else { "has" };
    let frees: Vec<String> = free_mib.iter().map(|&m| gib(m)).collect();
    let frees = frees.join(", ");
    let mut text = match policy {
        Policy::Lug if projected => {
            let values: Vec<String> =
                chosen.iter().map(|&p| format!("{:.2}", slots[p].projected_sm)).collect();
            format!("lug: {names} {has} lowest SmProjected ({})", values.join(", "))
        }
        Policy::Lug => {
            let values: Vec<String> =
                chosen.iter().map(|&p| sm_activity(slots[p].sm_active, slots[p].view.sm_basis)).collect();
            format!("lug: {names} {has} lowest SmActive ({})", values.join(", "))
        }
        Policy::Mug => format!("mug: {names} {has} least free memory that fits ({frees})"),
        Policy::FirstFit => {
            let (is, what, fit) = if plural { ("are", "GPUs", "fit") } else { ("is", "GPU", "fits") };
            format!("first-fit: {names} {is} the lowest-index {what} that {fit} ({frees} free)")
        }
        _ => format!("{policy}: {names} {has} most free memory ({frees})"),
    };
    if policy != Policy::Lug && !projected {
        note_unknown_sm(&mut text, slots, chosen);
    }
    text
}

/// The prefix of a task whose figure only fits empty GPUs: it exceeds every GPU's memory, or
/// fits only `fitting` of the GPUs where it needs `gpus`.
pub(super) fn whole_gpu(
    requirement_mib: u64,
    margin_mib: u64,
    largest_mib: u64,
    fitting: usize,
    gpus: u32,
) -> String {
    let (need, margin) = (gib(requirement_mib), gib(margin_mib));
    match fitting {
        0 => format!("whole GPU ({need} + {margin} margin > {} per GPU)", gib(largest_mib)),
        _ => {
            format!("whole GPU ({need} + {margin} margin fits the memory of {fitting} GPU(s), {gpus} needed)")
        }
    }
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
