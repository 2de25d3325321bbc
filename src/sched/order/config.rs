//! `[sched.order]`: how the main queue weighs a task's size, and the bound on overtaking
//! (read by serde, like the rest of `SchedConfig`). The two are separate knobs on purpose:
//! how far a big task moves is a head start per GPU-hour, and how long anybody can be passed
//! is the administrator's promise, stated in time.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::super::preempt::{de_duration, ser_duration};

/// How the main queue orders tasks of equal priority and share.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SizeOrder {
    /// Submission order (the default).
    #[default]
    Fifo,
    /// Submission time less `head-start` per GPU-hour of expected size (`order::size`):
    /// bigger tasks first, each within the `overtake-max` bound.
    Size,
}

/// The `[sched.order]` table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
pub struct OrderConfig {
    /// fifo or size.
    pub size: SizeOrder,
    /// With `size = "size"`: how much earlier a task counts as submitted per GPU-hour of its
    /// expected size (GPUs × expected run time).
    #[serde(rename = "head-start", serialize_with = "ser_duration", deserialize_with = "de_duration")]
    pub head_start_ms: u64,
    /// Once a task has waited this long, no task submitted after it goes ahead of it (among
    /// tasks of equal priority and share): the most its start can be pushed back by the size
    /// order is the time it had waited by then.
    #[serde(rename = "overtake-max", serialize_with = "ser_duration", deserialize_with = "de_duration")]
    pub overtake_max_ms: u64,
}

/// `head-start` unless told otherwise: an hour per GPU-hour.
pub const HEAD_START_MS_DEFAULT: u64 = 3_600_000;
/// `overtake-max` unless told otherwise: 3 hours.
pub const OVERTAKE_MAX_MS_DEFAULT: u64 = 3 * 3_600_000;

impl Default for OrderConfig {
    fn default() -> Self {
        OrderConfig {
            size: SizeOrder::Fifo,
            head_start_ms: HEAD_START_MS_DEFAULT,
            overtake_max_ms: OVERTAKE_MAX_MS_DEFAULT,
        }
    }
}

impl OrderConfig {
    /// Whether the size order is on.
    pub fn by_size(&self) -> bool {
        self.size == SizeOrder::Size
    }
}

impl SizeOrder {
    /// The name used in the config.
    pub fn name(self) -> &'static str {
        match self {
            SizeOrder::Fifo => "fifo",
            SizeOrder::Size => "size",
        }
    }
}

impl fmt::Display for SizeOrder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
