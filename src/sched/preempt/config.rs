//! `[sched.preemption]`: the administrator's preemption policy (read by serde, like the rest of
//! `SchedConfig`). Off by default: with `mode = "off"` no decision differs from a queue without
//! preemption.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// What preemption does, if anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PreemptionMode {
    /// Never preempt (the default).
    #[default]
    Off,
    /// Signal the victim, wait out the grace, stop it and queue it again as a new attempt.
    Requeue,
    /// Suspend the victim's CUDA state and resume it later on the same GPU where
    /// `cuda-checkpoint` allows it; requeue (with a reason saying why) where it does not.
    Suspend,
}

/// The `[sched.preemption]` table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
pub struct PreemptionConfig {
    /// off, requeue or suspend.
    pub mode: PreemptionMode,
    /// How long a victim has between the signal and the stop; the job's `--signal` lead wins
    /// when longer.
    #[serde(rename = "grace", serialize_with = "ser_duration", deserialize_with = "de_duration")]
    pub grace_ms: u64,
    /// An attempt younger than this is never preempted.
    #[serde(rename = "min-run", serialize_with = "ser_duration", deserialize_with = "de_duration")]
    pub min_run_ms: u64,
    /// A task warned this many times (preempted, suspended, or preempted and then withdrawn)
    /// is exempt from then on.
    pub max_per_task: u32,
    /// A victim whose preemption was withdrawn (its preemptor stopped waiting: cancelled,
    /// held, placed elsewhere) is no victim again for this long. It was warned for nothing
    /// (it may have saved, and slowed down to do so), so it gets the shelter a new attempt
    /// gets from `min-run`; and a preemptor that is held and released in a loop cannot warn
    /// the same job again and again, nor keep "one preemption at a time" for itself.
    #[serde(rename = "withdrawn-rest", serialize_with = "ser_duration", deserialize_with = "de_duration")]
    pub withdrawn_rest_ms: u64,
    /// A waiting task preempts only tasks at least this much lower in priority.
    pub priority_gap: i64,
    /// The main queue's blocked head may preempt (tasks of its priority or lower) once it has
    /// waited this long.
    #[serde(rename = "head-wait", serialize_with = "ser_duration", deserialize_with = "de_duration")]
    pub head_wait_ms: u64,
    /// Whether a task that says neither `--requeue` nor `--no-requeue` may be preempted.
    pub requeue_default: bool,
    /// NVIDIA's `cuda-checkpoint` for `mode = "suspend"`; `None`: the first in the tick's
    /// (root's) `PATH`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cuda_checkpoint: Option<std::path::PathBuf>,
    /// The most time one tick spends running `cuda-checkpoint`, all jobs together; a victim
    /// whose tool does not answer within it is requeued instead, saying so.
    #[serde(
        rename = "cuda-checkpoint-budget",
        serialize_with = "ser_duration",
        deserialize_with = "de_duration"
    )]
    pub cuda_checkpoint_budget_ms: u64,
    /// The longest a job stays suspended: past it the attempt is stopped and its task queued
    /// again, as Slurm's suspend gives way to requeue.
    #[serde(rename = "suspend-max", serialize_with = "ser_duration", deserialize_with = "de_duration")]
    pub suspend_max_ms: u64,
    /// The head's rule waits while the head is expected to fit within another `head-wait`
    /// without preempting (by the running tasks' run-time estimates). Off: it preempts
    /// whenever the other bounds allow.
    pub head_expected_fit: bool,
    /// The head's rule only for a head that needs at least this many GPUs (1: any head).
    pub head_min_gpus: u32,
    /// The head's rule spares a running task expected to run longer than the head itself
    /// (its launch + run-time estimate − now against the head's run-time estimate); a task
    /// or head without an estimate is spared too. Off: any eligible task may give way.
    pub head_spare_longer: bool,
    /// The head's rule preempts only when the head's expected work (GPUs × expected run time)
    /// is at least this many times the victims' cost (each one's GPUs × (work lost + grace));
    /// a head without a run-time estimate then never preempts by it. 0: no such bound.
    pub head_gain: u32,
}

impl Default for PreemptionConfig {
    fn default() -> Self {
        PreemptionConfig {
            mode: PreemptionMode::Off,
            grace_ms: 60_000,
            min_run_ms: 600_000,
            max_per_task: 3,
            withdrawn_rest_ms: 600_000,
            priority_gap: 1,
            head_wait_ms: 1_800_000,
            requeue_default: false,
            cuda_checkpoint: None,
            cuda_checkpoint_budget_ms: 30_000,
            suspend_max_ms: 3_600_000,
            head_expected_fit: true,
            head_min_gpus: 1,
            head_spare_longer: false,
            head_gain: 0,
        }
    }
}

impl PreemptionConfig {
    /// Whether preemption is on at all.
    pub fn enabled(&self) -> bool {
        self.mode != PreemptionMode::Off
    }

    /// The first value that parses but cannot work, as one line naming the key and the fix.
    pub fn check_values(&self) -> Result<(), String> {
        if self.priority_gap < 0 {
            let value = self.priority_gap.to_string();
            let expected = "a priority difference of at least 0";
            return Err(super::super::bad_value("sched.preemption", "priority-gap", &value, expected, "1"));
        }
        if self.suspend_max_ms < 1000 {
            // 0 would end every suspension the tick after it began: never what is meant.
            let value = format!(
                "\"{}\"",
                humantime::format_duration(std::time::Duration::from_millis(self.suspend_max_ms))
            );
            let expected = "a bound of at least 1s";
            return Err(super::super::bad_value(
                "sched.preemption",
                "suspend-max",
                &value,
                expected,
                "\"1h\"",
            ));
        }
        Ok(())
    }
}

impl PreemptionMode {
    /// The name used in the config and in reasons.
    pub fn name(self) -> &'static str {
        match self {
            PreemptionMode::Off => "off",
            PreemptionMode::Requeue => "requeue",
            PreemptionMode::Suspend => "suspend",
        }
    }
}

impl fmt::Display for PreemptionMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A duration written as humantime text (`"60s"`, `"10m"`), as milliseconds.
pub(in crate::sched) fn de_duration<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    let text = String::deserialize(deserializer)?;
    let duration = humantime::parse_duration(text.trim()).map_err(|e| {
        serde::de::Error::custom(format!("duration {text:?}: {e}; write e.g. \"60s\", \"10m\" or \"1h\""))
    })?;
    Ok(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX))
}

pub(in crate::sched) fn ser_duration<S: Serializer>(ms: &u64, serializer: S) -> Result<S::Ok, S::Error> {
    let text = humantime::format_duration(std::time::Duration::from_millis(*ms)).to_string();
    serializer.serialize_str(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: a suspension bound that would end every suspension at once is refused, naming the
    /// key and the fix.
    #[test]
    fn a_zero_suspend_max_is_refused() {
        let config = PreemptionConfig { suspend_max_ms: 0, ..PreemptionConfig::default() };
        assert_eq!(
            config.check_values().unwrap_err(),
            "[sched.preemption] suspend-max = \"0s\" is not a bound of at least 1s; write e.g. suspend-max = \"1h\""
        );
        assert_eq!(PreemptionConfig::default().check_values(), Ok(()));
    }
}
