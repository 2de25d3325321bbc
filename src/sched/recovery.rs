//! What happens after an out-of-memory failure: requeue with a raised
//! requirement, or give up.
//!
//! Only a corroborated OOM reaches here (`evidence`: an out-of-memory message the tick's GPU
//! readings do not support, and other non-zero exits, are plain failures).
//! The raised requirement is `max(estimate, peak observed, previous
//! requirement) + step`. `oom_count_so_far` counts OOMs including the one
//! just detected; retry k (= the k-th OOM) is allowed while k ≤ `retries_max`,
//! so `retries_max` is the number of relaunches after OOM and 0 never
//! retries. In looser mode, retry k runs looser while k ≤
//! `looser_steps_max` and exclusively after that. With no memory figure at
//! all the retry runs exclusively: there is nothing to raise.

use super::reason::gib;
use super::{RecoveryConfig, RecoveryMode};

/// The outcome of an OOM, with the reason the tick journals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecoveryDecision {
    /// Put the task in the recovery queue.
    Requeue {
        /// The raised requirement per GPU, step included.
        requirement_mib: u64,
        /// How the retry is placed.
        mode: RecoveryMode,
        /// Plain words: the figures and the rule applied.
        reason: String,
    },
    /// Stop retrying; the task fails.
    GiveUp {
        /// Plain words: the count and the limit.
        reason: String,
    },
}

/// Decides the recovery after the task's `oom_count_so_far`-th OOM (a count
/// of 0 is read as 1).
pub fn on_oom(
    oom_count_so_far: u32,
    estimate_mib: Option<u64>,
    peak_observed_mib: Option<u64>,
    previous_requirement_mib: Option<u64>,
    retries_max: u32,
    cfg: &RecoveryConfig,
) -> RecoveryDecision {
    let oom_count = oom_count_so_far.max(1);
    if oom_count > retries_max {
        return RecoveryDecision::GiveUp {
            reason: format!(
                "out of memory {oom_count} time(s); retry limit {retries_max} reached, giving up"
            ),
        };
    }
    let figures = [
        ("estimate", estimate_mib),
        ("peak observed", peak_observed_mib),
        ("previous requirement", previous_requirement_mib),
    ];
    let base_mib = figures.iter().filter_map(|(_, v)| *v).max();
    let Some(base_mib) = base_mib else {
        return RecoveryDecision::Requeue {
            requirement_mib: cfg.step_mib,
            mode: RecoveryMode::Exclusive,
            reason: format!(
                "out of memory (OOM {oom_count}, retry {oom_count} of {retries_max}): no memory \
                 figure, retry runs exclusive with requirement {}",
                gib(cfg.step_mib)
            ),
        };
    };
    let requirement_mib = base_mib.saturating_add(cfg.step_mib);
    let looser_left = oom_count <= cfg.looser_steps_max;
    let mode = match cfg.mode {
        RecoveryMode::Looser if looser_left => RecoveryMode::Looser,
        _ => RecoveryMode::Exclusive,
    };
    let parts: Vec<String> =
        figures.iter().filter_map(|(name, v)| v.map(|mib| format!("{name} {}", gib(mib)))).collect();
    let mut reason = format!(
        "out of memory (OOM {oom_count}, retry {oom_count} of {retries_max}): requirement {} = \
         max({}) + {} step; retry runs {mode}",
        gib(requirement_mib),
        parts.join(", "),
        gib(cfg.step_mib)
    );
    if cfg.mode == RecoveryMode::Looser && !looser_left {
        reason.push_str(&format!(" (looser tries used up after {})", cfg.looser_steps_max));
    }
    assert!(requirement_mib >= base_mib, "the requirement never drops");
    RecoveryDecision::Requeue { requirement_mib, mode, reason }
}
