//! The shapes carma 0.3 added (issue 23). Frozen.

use serde::{Deserialize, Serialize};

/// What a submission says about time beyond [`SpecV2`](super::SpecV2): the warning before the
/// time limit (`--signal`, canonical `[B:]SIG@SECONDS`) and the earliest start (`--begin`, ms
/// since the epoch). Carried next to the `SpecV2` by `SubmittedV3`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TimingV3 {
    /// The `--signal` warning in canonical `[B:]SIG@SECONDS` form; frozen.
    pub signal: Option<String>,
    /// The `--begin` earliest start, Unix ms; frozen.
    pub begin_ms: Option<u64>,
}
