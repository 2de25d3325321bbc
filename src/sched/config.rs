//! Scheduler configuration: the policy, its preconditions and the recovery rules.
//!
//! These are the only `sched` types that derive serde, because they are read
//! from the `[sched]` table of the config TOML. Every field has a default (the
//! paper's value where it has one), names are kebab-case, and unknown keys are
//! refused so that a typo in the config is an error rather than a silent default.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Where a waiting task goes once the preconditions have filtered the GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// One task per GPU: only idle GPUs are used, and the task runs alone.
    Exclusive,
    /// The next GPU in a cycle, ignoring memory and SM activity (the paper's RR).
    RoundRobin,
    /// Most available GPU memory (worst fit).
    #[default]
    Magm,
    /// Least utilised GPU: lowest windowed SM activity.
    Lug,
    /// Most utilised GPU: least free memory that still fits (best fit).
    Mug,
    /// Lowest-index GPU that passes the preconditions.
    FirstFit,
}

/// How a task that ran out of memory is run again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RecoveryMode {
    /// On idle GPU(s) only, alone, as in the paper.
    #[default]
    Exclusive,
    /// On any GPU with room for the raised requirement plus one step, falling
    /// back to an idle GPU.
    Looser,
}

/// The knobs of the decision core. Defaults are the paper's where it has one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
pub struct SchedConfig {
    /// The collocation policy.
    pub policy: Policy,
    /// A shared GPU must have windowed SM activity at most this (0..1).
    pub sm_cap: f32,
    /// Free memory a GPU must keep above a task's memory figure.
    pub margin_with_figure_mib: u64,
    /// Free memory a GPU must have for a task with no memory figure at all.
    /// Also the memory assumed for such a task while it ramps up.
    pub margin_without_figure_mib: u64,
    /// Exclude GPUs with SMACT ≥ 0.8 and (SMOCC ≥ 0.45 or DRAM ≥ 0.40).
    pub risk_gate: bool,
    /// Place on idle GPUs first, when enough are idle; collocate only otherwise.
    pub exclusive_first: bool,
    /// Let later tasks start when the head of the queue cannot (EASY-style).
    pub backfill: bool,
    /// How long after launch a task's not-yet-allocated memory is reserved.
    pub in_flight_grace_ms: u64,
    /// A GPU with no carma task and at most this much memory used is idle.
    pub idle_used_mib_max: u64,
    /// At most this many placements per decision.
    pub placements_per_tick_max: u32,
    /// With backfill, at most this many tasks behind the blocked head are tried.
    pub backfill_depth_max: u32,
    /// Gate a shared GPU on the projected sum of its tasks' standalone SM activity, the new
    /// task's included, instead of the measured `sm_cap`; 0 (the default) keeps `sm_cap`.
    pub sm_projected_cap: f32,
    /// Standalone SM activity assumed for a task nobody has measured yet (projected gate).
    pub sm_unknown: f32,
    /// Deprecated (`[sched.order]` replaces it): the old size-aware key, bigger tasks (GPUs ×
    /// expected run time) ahead of smaller ones submitted less than this before them; 0 (the
    /// default) keeps it off. Kept so that an old configuration decides as it did; refused
    /// together with `[sched.order] size = "size"`.
    pub size_order_delay_ms: u64,
    /// With backfill, a task may also use a GPU kept for the blocked head when it is expected
    /// to end before that GPU is (its run-time estimate against the running tasks').
    pub backfill_by_time: bool,
    /// The main queue's order by size (`[sched.order]`).
    pub order: super::OrderConfig,
    /// Out-of-memory recovery.
    pub recovery: RecoveryConfig,
    /// Fair-share ordering of the main queue.
    pub fair_share: FairShareConfig,
    /// Caps per user; 0 means no cap.
    pub user_limits: UserLimits,
    /// Preemption (`[sched.preemption]`); off by default.
    pub preemption: super::PreemptionConfig,
}

/// Fair share: the main queue prefers users with less recent GPU time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
pub struct FairShareConfig {
    /// Order the main queue by each user's decayed GPU time.
    pub enabled: bool,
    /// GPU time counts half as much this long after it was used (Slurm's
    /// PriorityDecayHalfLife); 0: never decays.
    pub half_life_ms: u64,
}

/// What one user may hold at once; 0 is no cap.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
pub struct UserLimits {
    /// Running (placed or started) tasks.
    pub running_tasks_max: u32,
    /// GPUs held by running tasks.
    pub gpus_max: u32,
    /// GPU memory reserved by running tasks: each task's memory figure (the no-figure margin
    /// when it has none) times its GPUs.
    pub memory_mib_max: u64,
}

impl Default for FairShareConfig {
    fn default() -> Self {
        FairShareConfig { enabled: true, half_life_ms: 24 * 3600 * 1000 }
    }
}

/// How out-of-memory failures are retried.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
pub struct RecoveryConfig {
    /// Exclusive (the paper) or looser.
    pub mode: RecoveryMode,
    /// How much each OOM raises the requirement; also the looser headroom.
    pub step_mib: u64,
    /// In looser mode, retries after this many run exclusively.
    pub looser_steps_max: u32,
    /// Relaunches after OOM allowed when the task spec names no limit.
    pub retries_max_default: u32,
    /// How long before an attempt's exit the tick's GPU readings count as "near the end" for
    /// corroborating its out-of-memory message (`sched::evidence`), ms.
    pub evidence_window_ms: u64,
    /// An attempt whose own processes held at least this percentage of its requirement near
    /// its end ran out of its share: its out-of-memory message is corroborated (1 to 100).
    pub evidence_process_percent: u32,
    /// A GPU with at least this percentage of its memory in use near an attempt's end was
    /// full: the attempt's out-of-memory message is corroborated (1 to 100).
    pub evidence_gpu_percent: u32,
}

/// A policy or recovery mode name that carma does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} \"{name}\"; valid names: {}", valid.join(", "))]
pub struct ParseNameError {
    what: &'static str,
    name: String,
    valid: &'static [&'static str],
}

const POLICY_NAMES: [&str; 6] = ["exclusive", "round-robin", "magm", "lug", "mug", "first-fit"];
const POLICIES: [Policy; 6] =
    [Policy::Exclusive, Policy::RoundRobin, Policy::Magm, Policy::Lug, Policy::Mug, Policy::FirstFit];
const RECOVERY_MODE_NAMES: [&str; 2] = ["exclusive", "looser"];

impl Default for SchedConfig {
    fn default() -> Self {
        SchedConfig {
            policy: Policy::Magm,
            sm_cap: 0.80,
            margin_with_figure_mib: 2048,
            margin_without_figure_mib: 5120,
            risk_gate: false,
            exclusive_first: true,
            backfill: true,
            in_flight_grace_ms: 120_000,
            idle_used_mib_max: 1024,
            placements_per_tick_max: 16,
            backfill_depth_max: 64,
            sm_projected_cap: 0.0,
            sm_unknown: 0.5,
            size_order_delay_ms: 0,
            backfill_by_time: false,
            order: super::OrderConfig::default(),
            recovery: RecoveryConfig::default(),
            fair_share: FairShareConfig::default(),
            user_limits: UserLimits::default(),
            preemption: super::PreemptionConfig::default(),
        }
    }
}

impl SchedConfig {
    /// The first value that parses but cannot work, as one line naming the key, the value and
    /// what to write instead. TOML gives a float `nan`, `inf` or `-1` and a count 0 without
    /// complaint, but the gates compare against finite fractions (a NaN cap refuses or admits
    /// everything silently) and a zero limit would place or backfill nothing, ever. Settings
    /// where 0 has a documented meaning (0 is off, 0 is no cap, 0 is no grace) are not checked.
    pub fn check_values(&self) -> Result<(), String> {
        let sm_cap = self.sm_cap > 0.0 && self.sm_cap <= 1.0;
        check_f32("sched", "sm-cap", self.sm_cap, sm_cap, "a number above 0 and at most 1", "0.80")?;
        let projected = self.sm_projected_cap.is_finite() && self.sm_projected_cap >= 0.0;
        let expected = "a finite number of at least 0 (0 is off)";
        check_f32("sched", "sm-projected-cap", self.sm_projected_cap, projected, expected, "1.8")?;
        let unknown = (0.0..=1.0).contains(&self.sm_unknown);
        check_f32("sched", "sm-unknown", self.sm_unknown, unknown, "a number from 0 to 1", "0.5")?;
        let placements = u64::from(self.placements_per_tick_max);
        check_count("sched", "placements-per-tick-max", placements, "a count of at least 1", "16")?;
        // 0 would keep backfill on and try nobody; `backfill = false` is the way to turn it off.
        let depth = u64::from(self.backfill_depth_max);
        let expected = "a count of at least 1 (to turn backfill off, set backfill to false)";
        check_count("sched", "backfill-depth-max", depth, expected, "64")?;
        // Each out-of-memory retry raises the requirement by a step: 0 would rerun the task
        // with the same figure and the same crash.
        let step = self.recovery.step_mib;
        check_count("sched.recovery", "step-mib", step, "a size of at least 1 MiB", "5120")?;
        // Percentages outside 1..=100 would make every message evidence, or none.
        let percents = [
            ("evidence-process-percent", self.recovery.evidence_process_percent, "90"),
            ("evidence-gpu-percent", self.recovery.evidence_gpu_percent, "95"),
        ];
        for (key, value, example) in percents {
            if !(1..=100).contains(&value) {
                let expected = "a percentage from 1 to 100";
                return Err(bad_value("sched.recovery", key, &value.to_string(), expected, example));
            }
        }
        if self.size_order_delay_ms > 0 && self.order.by_size() {
            return Err(format!(
                "[sched] size-order-delay-ms = {} is deprecated and cannot be combined with [sched.order] size = \"size\"; remove it",
                self.size_order_delay_ms
            ));
        }
        self.preemption.check_values()
    }

    /// Whether the projected-SM gate is on.
    pub fn projected_gate(&self) -> bool {
        self.sm_projected_cap > 0.0
    }
}

/// `[section] key = value is not …; write e.g. key = …`: how every refused config value reads.
pub fn bad_value(section: &str, key: &str, value: &str, expected: &str, example: &str) -> String {
    format!("[{section}] {key} = {value} is not {expected}; write e.g. {key} = {example}")
}

fn check_f32(
    section: &str,
    key: &str,
    value: f32,
    ok: bool,
    expected: &str,
    example: &str,
) -> Result<(), String> {
    // NaN fails every comparison, so `ok` is false for it whatever range the caller checked.
    if ok { Ok(()) } else { Err(bad_value(section, key, &toml_float(value), expected, example)) }
}

fn check_count(section: &str, key: &str, value: u64, expected: &str, example: &str) -> Result<(), String> {
    if value > 0 { Ok(()) } else { Err(bad_value(section, key, &value.to_string(), expected, example)) }
}

/// A float as TOML spells it (`nan`, `inf`, `-inf`), so the message quotes what the file says.
fn toml_float(value: f32) -> String {
    if value.is_nan() {
        "nan".into()
    } else if value.is_infinite() {
        if value > 0.0 { "inf".into() } else { "-inf".into() }
    } else {
        value.to_string()
    }
}

impl Default for RecoveryConfig {
    fn default() -> Self {
        RecoveryConfig {
            mode: RecoveryMode::Exclusive,
            step_mib: 5120,
            looser_steps_max: 2,
            retries_max_default: 3,
            evidence_window_ms: 30_000,
            evidence_process_percent: 90,
            evidence_gpu_percent: 95,
        }
    }
}

impl Policy {
    /// The name used in the config, on the command line and in reasons.
    pub fn name(self) -> &'static str {
        let position = POLICIES.iter().position(|p| *p == self);
        // Every variant is listed in POLICIES.
        POLICY_NAMES[position.expect("POLICIES lists every variant")]
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Policy {
    type Err = ParseNameError;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        match POLICY_NAMES.iter().position(|n| *n == name) {
            Some(position) => Ok(POLICIES[position]),
            None => Err(ParseNameError { what: "policy", name: name.to_string(), valid: &POLICY_NAMES }),
        }
    }
}

impl RecoveryMode {
    /// The name used in the config and in reasons.
    pub fn name(self) -> &'static str {
        match self {
            RecoveryMode::Exclusive => RECOVERY_MODE_NAMES[0],
            RecoveryMode::Looser => RECOVERY_MODE_NAMES[1],
        }
    }
}

impl fmt::Display for RecoveryMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for RecoveryMode {
    type Err = ParseNameError;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        match name {
            "exclusive" => Ok(RecoveryMode::Exclusive),
            "looser" => Ok(RecoveryMode::Looser),
            _ => Err(ParseNameError {
                what: "recovery mode",
                name: name.to_string(),
                valid: &RECOVERY_MODE_NAMES,
            }),
        }
    }
}
