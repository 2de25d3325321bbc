//! The shapes carma 0.6 added (where a task's time limit came from). Frozen.

use serde::{Deserialize, Serialize};

/// Where a submission's time limit came from
/// ([`TimeLimitSource`](crate::spec::time_limit::TimeLimitSource)); frozen, variants appended
/// only.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TimeLimitSourceV6 {
    /// The task asked for it; frozen.
    Task,
    /// The queue's `[limits] time-limit-default`; frozen.
    QueueDefault,
    /// The queue's `[limits] time-limit-max`; frozen.
    QueueMax,
    /// Neither: no limit; frozen.
    QueueUnlimited,
}

/// What a submission says beyond the 0.5 parts: where its time limit came from. Carried by
/// `SubmittedV6`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LimitsV6 {
    /// Where `SpecV2::time_limit_ms` came from; `None` where the tick did not say; frozen.
    pub time_limit_source: Option<TimeLimitSourceV6>,
}
