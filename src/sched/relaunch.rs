//! One rule for a relaunch: what happens to a task whose attempt ended for its GPU memory,
//! whether enforcement stopped it over its share (MemoryExceeded, then Stopped) or it ran out
//! of memory and the readings corroborated it (OomDetected).
//!
//! Either way carma has measured what the job needed, so the end is a relaunch, not a
//! verdict:
//!
//! - **The next requirement** is the higher of the observed peak plus `[enforce] margin-mib`
//!   and the recovery growth figure, `max(estimate, peak observed, share, previous
//!   requirement) + [sched.recovery] step-mib`; it never drops. With no figure at all (an
//!   attempt alone on its GPU that was never seen) it is one step, run exclusive.
//! - **Where it waits** depends on whose miss it was ([`Miss`]). The share was the user's
//!   ([`ShareSource::Declared`]) and the job used more than it, or it reached a GPU it was not
//!   given: the user under-declared (or trespassed), so
//!   the task goes back to its normal place in the main queue with the raised figure, and a
//!   user who under-declares to be placed early gains nothing. Otherwise (the share was
//!   carma's estimate, a learned figure or the queue's default share, or the job stayed within
//!   its declared share and the GPU filled around it) it is carma's miss, and the task goes to
//!   the recovery queue as a corroborated out-of-memory always has, exclusive or looser by
//!   `[sched.recovery]`.
//! - **The bounds beside it:** every relaunch uses one of the task's retries (the `k`-th
//!   memory end is allowed while `k ≤ retries_max`; `--max-retries 0` fails at the first, as
//!   before); the new attempt is charged to fair share like any other (`tick::gate`'s usage
//!   counts every launched attempt); and in the recovery queue it passes at most one waiting
//!   task of a lower-usage user (`order`). In the main queue it keeps its submission's place.
//! - **The reason** says what the job used, what it was given and what the next attempt gets.
//!
//! Pure: the same input gives the same decision. Properties (`sched::tests::relaunch`): the
//! requirement is at least the peak plus the margin and at least the growth figure; the queue
//! is the main queue exactly for a user's under-declaration; a give-up exactly past the retry
//! limit; the reason names the three figures.

use serde::{Deserialize, Serialize};

use super::reason::gib;
use super::{RecoveryConfig, RecoveryMode};

/// Whose figure an attempt's memory share was, at its origin (a figure raised by an earlier
/// relaunch keeps the origin of the one it raised).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ShareSource {
    /// The user's `--gpu-mem` / `memory`.
    Declared,
    /// carma's estimate from the task's model summary.
    Estimate,
    /// Learned by carma: earlier runs of the workload, or a sibling's relaunch.
    Learned,
    /// The queue's default share for a task with no figure (`[sched] default-share-mib`).
    Default,
}

impl ShareSource {
    /// Words for reasons and `carma show`: "declared", "carma's estimate", ...
    pub fn words(self) -> &'static str {
        match self {
            ShareSource::Declared => "declared",
            ShareSource::Estimate => "carma's estimate",
            ShareSource::Learned => "learned by carma",
            ShareSource::Default => "the queue's default share",
        }
    }
}

/// How the attempt's memory ended it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemoryEnd {
    /// Enforcement stopped it: its processes used `used_mib` on `gpu` (a name such as `GPU0`),
    /// over its share plus the margin, while it shared that GPU.
    OverShare {
        /// What its processes used there, MiB.
        used_mib: u64,
        /// The GPU, as reasons name it.
        gpu: String,
        /// Whether the attempt was placed on that GPU; one it was not given it reached by
        /// unsetting `CUDA_VISIBLE_DEVICES`, which is the job's doing whatever its figure.
        given: bool,
    },
    /// It ran out of GPU memory, and the readings corroborated its message.
    OutOfMemory,
}

/// Everything the rule weighs about one memory end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelaunchInput {
    /// How the attempt ended.
    pub end: MemoryEnd,
    /// The attempt's share per GPU (what its placement assumed, or the default share), MiB.
    pub share_mib: Option<u64>,
    /// Whose figure the share was.
    pub source: ShareSource,
    /// The most the attempt was seen holding on one GPU, MiB (for an over-share stop, at
    /// least what it used there).
    pub peak_mib: Option<u64>,
    /// The task's estimate or declared figure, MiB.
    pub estimate_mib: Option<u64>,
    /// The requirement an earlier relaunch raised, MiB.
    pub previous_mib: Option<u64>,
    /// Memory ends of the task so far, this one included (0 is read as 1).
    pub memory_ends: u32,
    /// The retries the task has: its `max_retries`, held to `[limits] retries-max`.
    pub retries_max: u32,
}

/// Whose miss a memory end was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Miss {
    /// The user declared less than the job used.
    User,
    /// carma's figure (estimate, learned, default) was short, or the GPU filled around a job
    /// within its declared share.
    Carma,
}

/// Where a relaunched task waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelaunchQueue {
    /// Its normal place in the main queue (a user's under-declaration).
    Main,
    /// The recovery queue, placed this way (carma's miss).
    Recovery(RecoveryMode),
}

/// The rule's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RelaunchDecision {
    /// Queue the task again with a raised requirement.
    Relaunch {
        /// The next attempt's requirement per GPU, MiB.
        requirement_mib: u64,
        /// Where it waits.
        queue: RelaunchQueue,
        /// What it used, what it was given, what the next attempt gets, and where it waits.
        reason: String,
    },
    /// Retries spent: the task fails.
    GiveUp {
        /// What it used and was given, the count and the limit.
        reason: String,
    },
}

/// Whose miss the end in `input` was (see the module docs).
pub fn miss(input: &RelaunchInput) -> Miss {
    let over_declared = match input.end {
        MemoryEnd::OverShare { given: false, .. } => return Miss::User,
        MemoryEnd::OverShare { given: true, .. } => true,
        MemoryEnd::OutOfMemory => match (input.peak_mib, input.share_mib) {
            (Some(peak), Some(share)) => peak > share,
            _ => false,
        },
    };
    if input.source == ShareSource::Declared && over_declared { Miss::User } else { Miss::Carma }
}

/// Decides what follows a memory end (see the module docs).
pub fn relaunch(input: &RelaunchInput, cfg: &RecoveryConfig, margin_mib: u64) -> RelaunchDecision {
    let k = input.memory_ends.max(1);
    let cause = cause(input);
    if k > input.retries_max {
        let limit = input.retries_max;
        return RelaunchDecision::GiveUp {
            reason: format!("{cause}; {k} memory end(s), retry limit {limit} reached, giving up"),
        };
    }
    let figures = [
        ("estimate", input.estimate_mib),
        ("peak observed", input.peak_mib),
        ("share", input.share_mib),
        ("previous requirement", input.previous_mib),
    ];
    let Some(base_mib) = figures.iter().filter_map(|(_, v)| *v).max() else {
        let requirement_mib = cfg.step_mib;
        return RelaunchDecision::Relaunch {
            requirement_mib,
            queue: RelaunchQueue::Recovery(RecoveryMode::Exclusive),
            reason: format!(
                "{cause}; no memory figure, the next attempt gets {} and runs exclusive in the recovery \
                 queue (retry {k} of {})",
                gib(requirement_mib),
                input.retries_max
            ),
        };
    };
    let growth_mib = base_mib.saturating_add(cfg.step_mib);
    let floor_mib = input.peak_mib.map(|p| p.saturating_add(margin_mib));
    let requirement_mib = growth_mib.max(floor_mib.unwrap_or(0));
    let how = match (input.peak_mib, floor_mib) {
        (Some(peak), Some(floor)) if floor > growth_mib => {
            format!("peak observed {} + {} margin", gib(peak), gib(margin_mib))
        }
        _ => {
            let parts: Vec<String> =
                figures.iter().filter_map(|(name, v)| v.map(|mib| format!("{name} {}", gib(mib)))).collect();
            format!("max({}) + {} step", parts.join(", "), gib(cfg.step_mib))
        }
    };
    let queue = match miss(input) {
        Miss::User => RelaunchQueue::Main,
        Miss::Carma => RelaunchQueue::Recovery(recovery_mode(k, cfg)),
    };
    let place = match queue {
        RelaunchQueue::Main => {
            "back to its place in the main queue (the user's figure was short)".to_string()
        }
        RelaunchQueue::Recovery(mode) => {
            let mut words = format!("recovery queue, runs {mode}");
            if cfg.mode == RecoveryMode::Looser && mode == RecoveryMode::Exclusive {
                words.push_str(&format!(" (looser tries used up after {})", cfg.looser_steps_max));
            }
            words
        }
    };
    let reason = format!(
        "{cause}; the next attempt gets {} = {how}; {place} (retry {k} of {})",
        gib(requirement_mib),
        input.retries_max
    );
    assert!(requirement_mib >= base_mib, "the requirement never drops");
    assert!(floor_mib.is_none_or(|floor| requirement_mib >= floor), "at least the peak plus the margin");
    RelaunchDecision::Relaunch { requirement_mib, queue, reason }
}

/// Retry `k` runs looser while `k ≤ looser_steps_max` in looser mode, exclusive otherwise.
fn recovery_mode(k: u32, cfg: &RecoveryConfig) -> RecoveryMode {
    match cfg.mode {
        RecoveryMode::Looser if k <= cfg.looser_steps_max => RecoveryMode::Looser,
        _ => RecoveryMode::Exclusive,
    }
}

/// What the job used and what it was given: "used 12.0 GiB on GPU0 over its 4.0 GiB share
/// (declared)", "out of memory holding 7.5 GiB of its 8.0 GiB share (declared)".
fn cause(input: &RelaunchInput) -> String {
    let share = match input.share_mib {
        Some(share) => format!("its {} share ({})", gib(share), input.source.words()),
        None => "no share".to_string(),
    };
    match &input.end {
        MemoryEnd::OverShare { used_mib, gpu, given: true } => {
            format!("used {} on {gpu} over {share}", gib(*used_mib))
        }
        MemoryEnd::OverShare { used_mib, gpu, given: false } => {
            format!("used {} on {gpu}, which it was not given", gib(*used_mib))
        }
        MemoryEnd::OutOfMemory => match input.peak_mib {
            Some(peak) => format!("out of memory holding {} against {share}", gib(peak)),
            None => format!("out of memory, never seen holding memory, against {share}"),
        },
    }
}
