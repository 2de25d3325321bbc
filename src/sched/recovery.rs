//! The out-of-memory recovery as the Slurm path asks for it: [`on_oom`], a view of the one
//! relaunch rule (`relaunch`) for a caller that has no share or margin of its own to give.
//!
//! Only a corroborated OOM reaches here (`evidence`: an out-of-memory message the readings do
//! not support, and other non-zero exits, are plain failures). The raised requirement is
//! `max(estimate, peak observed, previous requirement) + step`. `oom_count_so_far` counts OOMs
//! including the one just detected; retry k (= the k-th OOM) is allowed while k ≤
//! `retries_max`, so `retries_max` is the number of relaunches after OOM and 0 never retries.
//! In looser mode, retry k runs looser while k ≤ `looser_steps_max` and exclusively after
//! that. With no memory figure at all the retry runs exclusively: there is nothing to raise.
//! With no share to compare with, the miss is carma's: the task goes to the recovery queue.

use super::relaunch::{MemoryEnd, RelaunchDecision, RelaunchInput, RelaunchQueue, ShareSource, relaunch};
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

/// Decides the recovery after the task's `oom_count_so_far`-th OOM (a count of 0 is read as
/// 1), by [`relaunch`] with no share and no margin.
pub fn on_oom(
    oom_count_so_far: u32,
    estimate_mib: Option<u64>,
    peak_observed_mib: Option<u64>,
    previous_requirement_mib: Option<u64>,
    retries_max: u32,
    cfg: &RecoveryConfig,
) -> RecoveryDecision {
    let input = RelaunchInput {
        end: MemoryEnd::OutOfMemory,
        share_mib: None,
        source: ShareSource::Estimate,
        peak_mib: peak_observed_mib,
        estimate_mib,
        previous_mib: previous_requirement_mib,
        memory_ends: oom_count_so_far,
        retries_max,
    };
    match relaunch(&input, cfg, 0) {
        RelaunchDecision::Relaunch { requirement_mib, queue, reason } => {
            let mode = match queue {
                RelaunchQueue::Recovery(mode) => mode,
                // No share: never the user's miss.
                RelaunchQueue::Main => unreachable!("an OOM without a share is carma's miss"),
            };
            RecoveryDecision::Requeue { requirement_mib, mode, reason }
        }
        RelaunchDecision::GiveUp { reason } => RecoveryDecision::GiveUp { reason },
    }
}
