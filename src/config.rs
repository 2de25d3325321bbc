//! `config.toml`: operator settings, with every key optional and documented.
//!
//! `carma init` writes [`DEFAULT_CONFIG_TOML`], which shows each default as a comment, so an
//! operator edits a documented file instead of guessing keys. Unknown keys are refused.

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::home::Home;

/// The file `carma init` writes.
pub const DEFAULT_CONFIG_TOML: &str = r#"# carma configuration. Every key is optional; the values shown are the defaults.
# Change a value by removing the leading '#'.

[tick]
# Where GPU readings come from: "nvml" (the NVIDIA driver), "none", or
# "fake:/path/gpus.json" (a JSON list of GPUs, for tests and demos; see schema/fake-gpus.schema.json).
# gpus = "nvml"
"#;

/// Parsed configuration.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub tick: TickConfig,
}

/// `[tick]` settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TickConfig {
    pub gpus: String,
}

impl Default for TickConfig {
    fn default() -> Self {
        TickConfig { gpus: "nvml".into() }
    }
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
    }
}
