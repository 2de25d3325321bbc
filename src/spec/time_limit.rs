//! A task's time limit and where it came from: what the task asked for, or the queue's
//! `[limits] time-limit-default`, or else its `time-limit-max`.
//!
//! Asking for nothing never buys more than asking: a task without a limit (no `--time`,
//! `--time=0`, `#SBATCH --time=0`, `UNLIMITED`) runs with the queue's default, or where the
//! queue has none, with its maximum, as Slurm gives such a job the partition's `MaxTime` when
//! no `DefaultTime` is set. Only a queue that sets neither runs it unlimited. The rule is one
//! pure function, [`effective`]: the tick applies it at ingest (so a spool file written by
//! hand cannot skip it) and `carma submit --dry-run` shows what it will give.

use serde::{Deserialize, Serialize};

use super::{Limits, parse_time_limit_ms, render_ms};

/// Where a task's time limit came from, journaled with the task (carma 0.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TimeLimitSource {
    /// The task asked for it (`--time`, `time_limit`, `#SBATCH --time`, `carma update`).
    Task,
    /// The task asked for none: the queue's `[limits] time-limit-default`.
    QueueDefault,
    /// The task asked for none and the queue has no default (or a longer one than its
    /// maximum): the queue's `[limits] time-limit-max`.
    QueueMax,
    /// The task asked for none and the queue sets neither: no limit.
    QueueUnlimited,
}

impl TimeLimitSource {
    /// Where the limit came from, in words for `show` and `--dry-run`.
    pub fn words(self) -> &'static str {
        match self {
            TimeLimitSource::Task => "the task's own",
            TimeLimitSource::QueueDefault => {
                "the queue's [limits] time-limit-default; the task asked for none"
            }
            TimeLimitSource::QueueMax => {
                "the queue's [limits] time-limit-max; the task asked for none and the queue has no shorter default"
            }
            TimeLimitSource::QueueUnlimited => {
                "no limit: the task asked for none and the queue sets no [limits] time-limit-default or time-limit-max"
            }
        }
    }
}

/// The limit a task runs with and where it came from, given what it asked for and the
/// queue's default and maximum (all in ms). Pure.
pub fn effective(
    asked_ms: Option<u64>,
    default_ms: Option<u64>,
    max_ms: Option<u64>,
) -> (Option<u64>, TimeLimitSource) {
    match (asked_ms, default_ms, max_ms) {
        (Some(ms), ..) => (Some(ms), TimeLimitSource::Task),
        (None, Some(default), Some(max)) if default > max => (Some(max), TimeLimitSource::QueueMax),
        (None, Some(default), _) => (Some(default), TimeLimitSource::QueueDefault),
        (None, None, Some(max)) => (Some(max), TimeLimitSource::QueueMax),
        (None, None, None) => (None, TimeLimitSource::QueueUnlimited),
    }
}

/// Whether `text` asks for no limit in Slurm's words: `0` (any form that adds up to zero,
/// `0:00`), `UNLIMITED` or `INFINITE`.
fn asks_for_none(text: &str) -> bool {
    let trimmed = text.trim();
    ["UNLIMITED", "INFINITE"].contains(&trimmed.to_ascii_uppercase().as_str())
        || (trimmed.bytes().any(|b| b.is_ascii_digit())
            && trimmed.bytes().all(|b| b == b'0' || b":-".contains(&b)))
}

/// A spec's `time_limit`: its ms, `None` for no limit asked (absent, or one of Slurm's words
/// for none), checked against the queue's maximum.
pub(super) fn validate(text: Option<&str>, limits: Limits) -> Result<Option<u64>, String> {
    let Some(text) = text.filter(|text| !asks_for_none(text)) else { return Ok(None) };
    let ms = parse_time_limit_ms(text)?;
    if let Some(max) = limits.time_limit_max_ms.filter(|max| ms > *max) {
        return Err(format!(
            "time_limit {} is longer than this queue allows ({}); ask for at most that",
            render_ms(ms),
            render_ms(max)
        ));
    }
    Ok(Some(ms))
}

#[cfg(test)]
mod tests {
    use super::*;
    use TimeLimitSource::*;

    /// Goal (issue 41): asking for nothing never gives more than the queue's maximum, and
    /// every source is named. Method: each combination of asked, default and maximum.
    #[test]
    fn asking_for_nothing_gives_the_default_or_else_the_maximum() {
        let h = 3_600_000;
        assert_eq!(effective(Some(60_000), Some(h), Some(2 * h)), (Some(60_000), Task));
        assert_eq!(effective(None, Some(h), Some(2 * h)), (Some(h), QueueDefault));
        assert_eq!(effective(None, Some(h), None), (Some(h), QueueDefault));
        assert_eq!(effective(None, None, Some(h)), (Some(h), QueueMax));
        assert_eq!(effective(None, Some(3 * h), Some(h)), (Some(h), QueueMax), "a default over the maximum");
        assert_eq!(effective(None, None, None), (None, QueueUnlimited));
    }

    /// Goal: Slurm's words for no limit are no limit asked, never a parse error nor a limit
    /// of their own; a real limit is still held to the maximum.
    #[test]
    fn zero_and_unlimited_ask_for_no_limit() {
        let limits = Limits { time_limit_max_ms: Some(3_600_000), ..Limits::default() };
        for none in ["0", "00", "0:00", "0-0", " UNLIMITED ", "infinite"] {
            assert_eq!(validate(Some(none), limits), Ok(None), "{none:?}");
        }
        assert_eq!(validate(None, limits), Ok(None));
        assert_eq!(validate(Some("30m"), limits), Ok(Some(1_800_000)));
        assert_eq!(
            validate(Some("2h"), limits).unwrap_err(),
            "time_limit 2h is longer than this queue allows (1h); ask for at most that"
        );
        assert!(validate(Some("10"), limits).unwrap_err().contains("has no unit"), "a bare number");
    }
}
