//! `config.toml`: operator settings, with every key optional and documented.
//!
//! `carma init` writes [`DEFAULT_CONFIG_TOML`], which shows each default as a comment, so an
//! operator edits a documented file instead of guessing keys. Unknown keys are refused.

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::home::Home;
use crate::sched::SchedConfig;

/// The file `carma init` writes.
pub const DEFAULT_CONFIG_TOML: &str = r#"# carma configuration. Every key is optional; the values shown are the defaults.
# Change a value by removing the leading '#'.

[tick]
# Where GPU readings come from: "nvml" (the NVIDIA driver), "none", or
# "fake:/path/gpus.json" (a JSON list of GPUs, for tests and demos; see schema/fake-gpus.schema.json).
# gpus = "nvml"
# Window over which SM activity is averaged for the SM-activity cap.
# window = "90s"
# Memory figure placement uses: "declared" (the task's `memory`, the paper's oracle) or "none"
# (no memory knowledge: only the no-figure margin guards a shared GPU).
# memory = "declared"
# How jobs share a GPU: "streams" (plain CUDA contexts) or "mps" (jobs get
# CUDA_MPS_PINNED_DEVICE_MEM_LIMIT set to requirement + margin; run the carma-mps unit).
# sharing = "streams"

[sched]
# Collocation policy: exclusive, round-robin, magm, lug, mug or first-fit.
# policy = "magm"
# A shared GPU must have a windowed SM activity of at most this.
# sm-cap = 0.80
# Free memory a GPU must keep above a task's memory figure, and the free memory a GPU
# needs for a task without any figure.
# margin-with-figure-mib = 2048
# margin-without-figure-mib = 5120
# The paper's risk gate: skip GPUs with SMACT >= 0.8 and (SMOCC >= 0.45 or DRAM >= 0.40).
# risk-gate = false
# Use idle GPUs first when enough are idle; collocate only otherwise.
# exclusive-first = true
# Let later tasks start when the head of the queue cannot, never on the GPUs held for the head.
# backfill = false
# How long a launched task's not-yet-allocated memory stays reserved (memory in flight).
# in-flight-grace-ms = 120000
# A GPU without carma tasks and with at most this much memory in use is idle.
# idle-used-mib-max = 1024
# placements-per-tick-max = 16
# backfill-depth-max = 64

[sched.recovery]
# How a task that ran out of GPU memory runs again: "exclusive" (alone on an idle GPU, as in
# the paper) or "looser" (any GPU with room for the raised requirement plus one step).
# mode = "exclusive"
# step-mib = 5120
# looser-steps-max = 2
"#;

/// Parsed configuration.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub tick: TickConfig,
    pub sched: SchedConfig,
}

/// `[tick]` settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TickConfig {
    pub gpus: String,
    #[serde(deserialize_with = "humantime_ms")]
    pub window: u64,
    pub memory: MemorySource,
    pub sharing: Sharing,
}

impl Default for TickConfig {
    fn default() -> Self {
        TickConfig {
            gpus: "nvml".into(),
            window: crate::sched::WINDOW_MS_DEFAULT,
            memory: MemorySource::Declared,
            sharing: Sharing::Streams,
        }
    }
}

/// Which memory figure placement uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MemorySource {
    /// The task's declared memory (the paper's oracle); tasks without one get the larger margin.
    Declared,
    /// No memory knowledge: every task is placed with the no-figure margin.
    None,
}

/// How collocated jobs share a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Sharing {
    Streams,
    Mps,
}

fn humantime_ms<'de, D: serde::Deserializer<'de>>(deserializer: D) -> std::result::Result<u64, D::Error> {
    let text = String::deserialize(deserializer)?;
    let duration = humantime::parse_duration(&text).map_err(serde::de::Error::custom)?;
    Ok(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX))
}

impl Config {
    /// Reads `config.toml`; a missing file means all defaults.
    pub fn load(home: &Home) -> Result<Config> {
        let path = home.config_path();
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Config::default()),
            Err(e) => return Err(Error::io(format!("cannot read {}", path.display()), e)),
        };
        toml::from_str(&text).map_err(|e| {
            Error::BadInput(format!(
                "{}: {}; fix the file (defaults are documented in it after `carma init`)",
                path.display(),
                e.message().trim()
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_text_parses_to_defaults() {
        let parsed: Config = toml::from_str(DEFAULT_CONFIG_TOML).expect("default config parses");
        assert_eq!(parsed.tick.gpus, "nvml");
        assert_eq!(parsed.sched, SchedConfig::default());
    }

    #[test]
    fn every_documented_key_parses_when_uncommented() {
        // Uncommenting each `# key = value` line must give a valid config equal to the
        // defaults: the documentation cannot drift from the code.
        let uncommented: String = DEFAULT_CONFIG_TOML
            .lines()
            .map(|l| match l.strip_prefix("# ") {
                Some(rest) if rest.contains(" = ") => rest,
                _ => l,
            })
            .collect::<Vec<_>>()
            .join("\n");
        let parsed: Config = toml::from_str(&uncommented).expect("uncommented config parses");
        assert_eq!(parsed.sched, SchedConfig::default());
        assert_eq!(parsed.tick.window, crate::sched::WINDOW_MS_DEFAULT);
        assert_eq!(parsed.tick.memory, MemorySource::Declared);
    }
}
